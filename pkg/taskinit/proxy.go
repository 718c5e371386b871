package taskinit

import (
	"fmt"
	"io"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// forwardProxy serves 127.0.0.1:port in the command's network namespace:
// each connection is forwarded to the unix socket that fd names (an O_PATH
// descriptor, reached through /proc, as the socket's own directory is
// neither this namespace's concern nor, perhaps, visible in it). The
// service's proxy behind it decides what the connection may reach. The
// forwarding runs on this process's other threads, which are not
// restricted as the command is: the command cannot make a unix socket, but
// this process can.
func forwardProxy(fd, port int) error {
	unix.CloseOnExec(fd)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	target := fmt.Sprintf("/proc/self/fd/%d", fd)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forward(c, target)
		}
	}()
	return nil
}

// forward copies c to a new connection to the socket at target and back,
// until both directions end.
func forward(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("unix", target)
	if err != nil {
		// What a proxy that is not there would answer.
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
