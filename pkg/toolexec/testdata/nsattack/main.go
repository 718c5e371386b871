// Command nsattack is what the namespace tests run as a task's command to
// try what an attacker would: pass a descriptor to a task that outlives
// it, reach another task's pseudo-terminal, connect to the host's stores.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: nsattack mode args..."))
	}
	var err error
	switch args := os.Args[2:]; os.Args[1] {
	case "sendfd":
		err = sendFD(args[0], args[1:])
	case "recvfd":
		err = recvFD(args[0], args[1], args[2])
	case "ptyvictim":
		err = ptyVictim()
	case "ptyattack":
		err = ptyAttack()
	case "keysession":
		err = keySession(args)
	case "keyadd":
		err = keyAdd(args[0], args[1])
	case "keyread":
		err = keyRead(args[0])
	case "dial":
		err = dial(args[0], args[1])
	default:
		err = fmt.Errorf("unknown mode %s", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "nsattack:", err)
	os.Exit(1)
}

// sendFD connects to the socket sock and sends it a descriptor of each
// directory named.
func sendFD(sock string, dirs []string) error {
	var fds []int
	sock, err := shortSocket(sock)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		fds = append(fds, fd)
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	if err := unix.Connect(s, &unix.SockaddrUnix{Name: sock}); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := unix.Sendmsg(s, []byte("x"), unix.UnixRights(fds...), nil, 0); err != nil {
		return fmt.Errorf("sendmsg: %w", err)
	}
	fmt.Println("sent")
	return nil
}

// recvFD listens on sock, says so by writing to the FIFO ready, takes the
// descriptors a client sends, waits for a line on the FIFO proceed, then
// lists each directory received and tries to change its entries' modes.
func recvFD(sock, ready, proceed string) error {
	sock, err := shortSocket(sock)
	if err != nil {
		return err
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	if err := unix.Bind(s, &unix.SockaddrUnix{Name: sock}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(s, 1); err != nil {
		return err
	}
	if err := os.WriteFile(ready, []byte("listening\n"), 0); err != nil {
		return err
	}
	c, _, err := unix.Accept(s)
	if err != nil {
		return err
	}
	buf, oob := make([]byte, 1), make([]byte, 256)
	_, oobn, _, _, err := unix.Recvmsg(c, buf, oob, 0)
	if err != nil {
		return err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		return fmt.Errorf("no descriptors: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return err
	}
	fmt.Println("received", len(fds))
	if _, err := os.ReadFile(proceed); err != nil {
		return err
	}
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "received")
		names, err := f.Readdirnames(-1)
		fmt.Printf("listed: %s (%v)\n", strings.Join(names, " "), err)
		for _, n := range names {
			err := unix.Fchmodat(fd, n, 0o777, 0)
			fmt.Printf("chmod %s: %v\n", n, err)
			if b, err := unix.Openat(fd, n, unix.O_RDONLY, 0); err == nil {
				fmt.Printf("opened %s\n", n)
				unix.Close(b)
			}
		}
	}
	return nil
}

// shortSocket is a name for the socket sock that fits a socket address,
// which holds 108 bytes at most: its base name, through a descriptor of its
// directory (the working directory stays where it is).
func shortSocket(sock string) (string, error) {
	if len(sock) < 100 {
		return sock, nil
	}
	fd, err := unix.Open(filepath.Dir(sock), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return "", err
	}
	if fd < 0 {
		return "", errors.New("no descriptor")
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(sock)), nil
}

// ptyVictim opens a pseudo-terminal pair, says which, waits for a line on
// standard input, writes END to the terminal and prints what its master
// read until then: what a program on the terminal wrote.
func ptyVictim() error {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return err
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	sl, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	fmt.Println("pty", name)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	if _, err := unix.Write(sl, []byte("END\n")); err != nil {
		return err
	}
	var got []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(got), "END") {
		k, err := unix.Read(m, buf)
		if err != nil {
			return err
		}
		got = append(got, buf[:k]...)
	}
	fmt.Printf("master read: %q\n", got)
	return nil
}

// ptyAttack writes to every pseudo-terminal it can open.
func ptyAttack() error {
	names, _ := filepath.Glob("/dev/pts/[0-9]*")
	fmt.Println("terminals:", names)
	for _, n := range names {
		fd, err := unix.Open(n, unix.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			fmt.Printf("open %s: %v\n", n, err)
			continue
		}
		_, err = unix.Write(fd, []byte("forged-by-another-task\n"))
		fmt.Printf("write %s: %v\n", n, err)
		unix.Close(fd)
	}
	return nil
}

// keySession runs a program in a session keyring of its own, as a service
// has one from its container runtime or systemd.
func keySession(argv []string) error {
	if _, err := unix.KeyctlJoinSessionKeyring("sylk-test-service"); err != nil {
		return err
	}
	return syscall.Exec(argv[0], argv, os.Environ())
}

// keyAdd adds a user key to the session keyring.
func keyAdd(desc, data string) error {
	id, err := unix.AddKey("user", desc, []byte(data), unix.KEY_SPEC_SESSION_KEYRING)
	if err != nil {
		return err
	}
	fmt.Println("added", id)
	return nil
}

// keyRead prints the data of the user key desc found from the session
// keyring.
func keyRead(desc string) error {
	id, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "user", desc, 0)
	if err != nil {
		return fmt.Errorf("search %s: %w", desc, err)
	}
	buf := make([]byte, 256)
	n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
	if err != nil {
		return fmt.Errorf("read %s: %w", desc, err)
	}
	fmt.Printf("key %s: %s\n", desc, buf[:n])
	return nil
}

// dial connects to address on network (tcp, unix) and says whether it
// could.
func dial(network, address string) error {
	c, err := net.DialTimeout(network, address, 3*time.Second)
	if err != nil {
		return err
	}
	_ = c.Close()
	fmt.Println("connected")
	return nil
}
