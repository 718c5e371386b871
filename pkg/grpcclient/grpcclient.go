// Package grpcclient dials other services with tracing and identity
// forwarding, so a call made while handling a request carries its caller.
package grpcclient

import (
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"sylk.dev/sylk/pkg/identity"
)

// serviceConfig balances calls round-robin over every address the name
// resolves to (every ready pod behind a headless Kubernetes Service).
const serviceConfig = `{"loadBalancingConfig": [{"round_robin": {}}]}`

// Dial returns a lazily connecting client for target (host:port).
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithChainUnaryInterceptor(identity.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(identity.StreamClientInterceptor()),
	}, opts...)
	cc, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return cc, nil
}
