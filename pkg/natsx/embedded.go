package natsx

import (
	"crypto/rand"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// RunEmbedded starts an in-process NATS server with JetStream storing in dir,
// on a free loopback port, and returns its URL. Clients need the token the
// URL holds, made for this run: the task commands on the same machine, which
// do not get it, cannot publish to the bus. The caller shuts it down.
func RunEmbedded(dir string) (*server.Server, string, error) {
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
