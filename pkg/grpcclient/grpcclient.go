// Package grpcclient dials other services with tracing and identity
// forwarding, so a call made while handling a request carries its caller,
// signed with the deployment's internal key.
package grpcclient

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"sylk.dev/sylk/pkg/identity"
)

// serviceConfig balances calls round-robin over every address the name
// resolves to (every ready pod behind a headless Kubernetes Service).
const serviceConfig = `{"loadBalancingConfig": [{"round_robin": {}}]}`

// MaxRecvBytes is the largest answer a client takes.
const MaxRecvBytes = 64 << 20

// ReadyWait is how long a call waits for a connection to its service when
// none is ready (the service is restarting, or all its replicas are): it
// then goes ahead, failing UNAVAILABLE if still none is. Without it a call
// made while the client backs off after failed reconnection attempts
// fails at once, for up to the backoff delay after the service is back.
const ReadyWait = 3 * time.Second

// reconnectBackoff retries a lost connection quickly at first (100ms, then
// 1.6 times longer each attempt, up to 5s), so that a service restarting
// in under a second is reconnected within about its restart time rather
// than gRPC's default first delay of one second.
var reconnectBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second}

// Dial returns a lazily connecting client for target. Calls carry the
// caller's identity signed by signer (nil sends it unsigned, for a
// deployment whose services take unsigned identities).
//
// target is host:port, whose name resolves to every replica (the A records
// of a headless Kubernetes Service), or a comma-separated list of
// host:port, one per replica (replicas on one host, on several ports). In
// both cases calls are balanced round-robin over the replicas that are up.
func Dial(target string, signer *identity.Signer, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	target, listed, err := replicaList(target)
	if err != nil {
		return nil, err
	}
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig),
		// Answers may be larger than gRPC's default 4 MiB (a run with its
		// nodes' output); the services bound what they send themselves.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvBytes)),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: 5 * time.Second}),
		grpc.WithChainUnaryInterceptor(awaitReadyUnary, identity.UnaryClientInterceptor(signer)),
		grpc.WithChainStreamInterceptor(awaitReadyStream, identity.StreamClientInterceptor(signer)),
	}, append(listed, opts...)...)
	cc, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return cc, nil
}

// listScheme is the resolver scheme of a target that lists its replicas.
const listScheme = "sylk-replicas"

// replicaList turns a comma-separated list of replica addresses into a
// target of its own resolver, which names each address; a single address
// is returned as it is.
func replicaList(target string) (string, []grpc.DialOption, error) {
	if !strings.Contains(target, ",") {
		return target, nil, nil
	}
	var eps []resolver.Endpoint
	for _, a := range strings.Split(target, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return "", nil, fmt.Errorf("dial %s: replica address %q: %w", target, a, err)
		}
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a, ServerName: host}}})
	}
	r := manual.NewBuilderWithScheme(listScheme)
	r.InitialState(resolver.State{Endpoints: eps})
	return listScheme + ":///replicas", []grpc.DialOption{grpc.WithResolvers(r)}, nil
}

// awaitReady waits for cc to have a ready connection when it has none,
// connecting it when it is idle: up to ReadyWait, and at most half of what
// is left of ctx's deadline, so that a service still down fails the call
// UNAVAILABLE, as before, rather than DEADLINE_EXCEEDED. A call made while
// every connection is failing would otherwise fail at once (gRPC fails a
// call fast in TRANSIENT_FAILURE); one made while connecting waits anyway.
func awaitReady(ctx context.Context, cc *grpc.ClientConn) {
	state := cc.GetState()
	if state == connectivity.Ready {
		return
	}
	wait := ReadyWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)/2)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for state != connectivity.Ready && state != connectivity.Shutdown {
		if state == connectivity.Idle {
			cc.Connect()
		}
		if !cc.WaitForStateChange(ctx, state) {
			return
		}
		state = cc.GetState()
	}
}

// awaitReadyUnary is awaitReady before each unary call.
func awaitReadyUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	awaitReady(ctx, cc)
	return invoker(ctx, method, req, reply, cc, opts...)
}

// awaitReadyStream is awaitReady before each stream opens.
func awaitReadyStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	awaitReady(ctx, cc)
	return streamer(ctx, desc, cc, method, opts...)
}
