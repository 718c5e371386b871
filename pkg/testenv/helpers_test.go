package testenv_test

import (
	"context"
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/testenv"
)

// recorder is a testing.TB that records failures instead of ending the test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	panic(r)
}

func (r *recorder) Errorf(format string, args ...any) { r.failed = true }

// fails reports whether f fails the test it is given.
func fails(t *testing.T, f func(testing.TB)) bool {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		f(r)
	}()
	return r.failed
}

func TestRequireCode(t *testing.T) {
	t.Parallel()
	err := status.Error(codes.NotFound, "session s1 not found")
	for _, tt := range []struct {
		name string
		err  error
		code codes.Code
		says []string
		fail bool
	}{
		{name: "code", err: err, code: codes.NotFound},
		{name: "code and words", err: err, code: codes.NotFound, says: []string{"session", "s1"}},
		{name: "wrapped status", err: errWrap{err}, code: codes.NotFound},
		{name: "other code", err: err, code: codes.InvalidArgument, fail: true},
		{name: "missing words", err: err, code: codes.NotFound, says: []string{"plan"}, fail: true},
		{name: "no error", code: codes.NotFound, fail: true},
		{name: "not a status", err: errors.New("boom"), code: codes.Unknown, fail: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.fail, fails(t, func(tb testing.TB) { testenv.RequireCode(tb, tt.err, tt.code, tt.says...) }))
		})
	}
}

func TestRequireReason(t *testing.T) {
	t.Parallel()
	err := apierr.NotFound("session", "s1").GRPCStatus().Err()
	for _, tt := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
		says   []string
		fail   bool
	}{
		{name: "code and reason", err: err, code: codes.NotFound, reason: "SESSION_NOT_FOUND"},
		{name: "and words", err: err, code: codes.NotFound, reason: "SESSION_NOT_FOUND", says: []string{"s1"}},
		{name: "wrapped status", err: errWrap{err}, code: codes.NotFound, reason: "SESSION_NOT_FOUND"},
		{name: "other reason", err: err, code: codes.NotFound, reason: "PLAN_NOT_FOUND", fail: true},
		{name: "other code", err: err, code: codes.InvalidArgument, reason: "SESSION_NOT_FOUND", fail: true},
		{name: "missing words", err: err, code: codes.NotFound, reason: "SESSION_NOT_FOUND", says: []string{"plan"}, fail: true},
		{name: "other domain", err: otherDomain(t), code: codes.NotFound, reason: "SESSION_NOT_FOUND", fail: true},
		{name: "no ErrorInfo", err: status.Error(codes.NotFound, "session s1 not found"), code: codes.NotFound, reason: "SESSION_NOT_FOUND", fail: true},
		{name: "no error", code: codes.NotFound, reason: "SESSION_NOT_FOUND", fail: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.fail, fails(t, func(tb testing.TB) { testenv.RequireReason(tb, tt.err, tt.code, tt.reason, tt.says...) }))
		})
	}
}

// otherDomain is a NotFound status whose ErrorInfo is not of Sylk's domain.
func otherDomain(t *testing.T) error {
	st, err := status.New(codes.NotFound, "session s1 not found").
		WithDetails(&errdetails.ErrorInfo{Reason: "SESSION_NOT_FOUND", Domain: "example.com"})
	require.NoError(t, err)
	return st.Err()
}

// errWrap wraps a status as callers' errors do.
type errWrap struct{ err error }

func (e errWrap) Error() string { return "call: " + e.err.Error() }
func (e errWrap) Unwrap() error { return e.err }

// caller answers EmptyCall, and reports the caller identity it was sent.
type caller struct {
	testgrpc.UnimplementedTestServiceServer
	callers chan identity.Identity
}

func (c caller) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	who, _ := identity.FromContext(ctx)
	c.callers <- who
	return &testgrpc.Empty{}, nil
}

// The server has the mesh's chain: a method that is not public needs a
// caller identity, which the connection passes on from the context.
func TestServeGRPC(t *testing.T) {
	t.Parallel()
	c := caller{callers: make(chan identity.Identity, 1)}
	conn := testenv.ServeGRPC(t, func(s *grpc.Server) { testgrpc.RegisterTestServiceServer(s, c) })
	client := testgrpc.NewTestServiceClient(conn)
	_, err := client.EmptyCall(t.Context(), &testgrpc.Empty{})
	testenv.RequireCode(t, err, codes.Unauthenticated)
	who := identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleMember}
	_, err = client.EmptyCall(identity.AppendOutgoing(t.Context(), who), &testgrpc.Empty{})
	require.NoError(t, err)
	require.Equal(t, who, <-c.callers)
}

func TestStart(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	var ended bool
	stop := testenv.Start(t, func(ctx context.Context) error {
		close(entered)
		<-ctx.Done()
		ended = true
		return nil
	})
	<-entered
	stop()
	require.True(t, ended, "stop waits for run to return")
	stop()

	// A run that returns an error fails the test when it is stopped.
	r := &recorder{TB: t}
	testenv.Start(r, func(ctx context.Context) error { <-ctx.Done(); return errors.New("boom") })()
	require.True(t, r.failed)

	// So does one that does not return in time after its context ends.
	r = &recorder{TB: t}
	release := make(chan struct{})
	testenv.StartWaiting(r, func(context.Context) error { <-release; return nil }, 10*time.Millisecond)()
	require.True(t, r.failed)
	close(release)
}

type config struct {
	Addr    string
	Timeout time.Duration
}

func (c *config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", ":9090", "address")
	fs.DurationVar(&c.Timeout, "timeout", time.Second, "timeout")
}

func TestFromFlags(t *testing.T) {
	t.Parallel()
	require.Equal(t, config{Addr: ":9090", Timeout: time.Second}, testenv.FromFlags[config](t))
	require.Equal(t, config{Addr: ":1", Timeout: time.Second}, testenv.FromFlags[config](t, "-addr", ":1"))
	require.True(t, fails(t, func(tb testing.TB) { testenv.FromFlags[config](tb, "-nope") }))
}
