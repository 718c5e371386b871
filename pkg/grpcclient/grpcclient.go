// Package grpcclient dials other services with tracing and identity
// forwarding, so a call made while handling a request carries its caller,
// signed with the deployment's internal key.
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

// MaxRecvBytes is the largest answer a client takes.
const MaxRecvBytes = 64 << 20

// Dial returns a lazily connecting client for target (host:port). Calls
// carry the caller's identity signed by signer (nil sends it unsigned, for a
// deployment whose services take unsigned identities).
func Dial(target string, signer *identity.Signer, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig),
		// Answers may be larger than gRPC's default 4 MiB (a run with its
		// nodes' output); the services bound what they send themselves.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvBytes)),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithChainUnaryInterceptor(identity.UnaryClientInterceptor(signer)),
		grpc.WithChainStreamInterceptor(identity.StreamClientInterceptor(signer)),
	}, opts...)
	cc, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return cc, nil
}
