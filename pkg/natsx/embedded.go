package natsx

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// RunEmbedded starts an in-process NATS server with JetStream storing in dir,
// on a free loopback port. The caller shuts it down.
func RunEmbedded(dir string) (*server.Server, string, error) {
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  dir,
		NoSigs:    true,
		NoLog:     true,
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
	return s, s.ClientURL(), nil
}
