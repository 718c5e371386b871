package natsx

import (
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// RunEmbedded starts an in-process NATS server with JetStream storing in dir,
// on a free loopback port, and returns its URL. Clients need the token the
// URL holds, made for this run: the task commands on the same machine, which
// do not get it, cannot publish to the bus. The caller shuts it down.
//
// dir holds the stored messages: it is made private (0700), and refused
// when it is not a directory of this user's, as one another user made
// first in a shared /tmp would be.
func RunEmbedded(dir string) (*server.Server, string, error) {
	if err := privateDir(dir); err != nil {
		return nil, "", fmt.Errorf("embedded nats: %w", err)
	}
	token := rand.Text()
	opts := &server.Options{
		Host:          "127.0.0.1",
		Port:          -1,
		JetStream:     true,
		StoreDir:      dir,
		NoSigs:        true,
		NoLog:         true,
		Authorization: token,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, "", fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, "", fmt.Errorf("embedded nats: not ready after 10s")
	}
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		s.Shutdown()
		return nil, "", fmt.Errorf("embedded nats: %w", err)
	}
	u.User = url.User(token)
	return s, u.String(), nil
}

// privateDir makes dir with mode 0700 when missing, checks that it is a
// directory (not a link to one) of this process's user, and closes it to
// others.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	switch {
	case !info.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case !ok || int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to another user: name a directory of your own (-nats.data-dir)", dir)
	case info.Mode().Perm()&0o077 != 0:
		// This user's own: closed to others before anything is stored.
		return os.Chmod(dir, 0o700)
	}
	return nil
}
