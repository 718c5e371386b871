package guidesession_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/grpcclient"
	"sylk.dev/sylk/pkg/guidesession"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

// guide answers GetSession: "sessions/done" is completed, "sessions/open"
// active, "sessions/bad" refused, anything else not found.
type guide struct {
	guidev1.UnimplementedSessionServiceServer
}

func (guide) GetSession(_ context.Context, req *guidev1.GetSessionRequest) (*guidev1.GetSessionResponse, error) {
	switch req.GetName() {
	case "sessions/done":
		return &guidev1.GetSessionResponse{Session: &guidev1.Session{Name: req.GetName(), State: guidev1.SessionState_SESSION_STATE_COMPLETED}}, nil
	case "sessions/open":
		return &guidev1.GetSessionResponse{Session: &guidev1.Session{Name: req.GetName(), State: guidev1.SessionState_SESSION_STATE_ACTIVE}}, nil
	case "sessions/bad":
		return nil, apierr.Invalid("name", "malformed")
	}
	return nil, status.Error(codes.NotFound, "no")
}

// dial returns a connection to the fake Guide, served with the mesh's
// interceptors, or unless serve to a port nothing listens on.
func dial(t *testing.T, serve bool) *grpc.ClientConn {
	t.Helper()
	if serve {
		return testenv.ServeGRPC(t, func(s *grpc.Server) { guidev1.RegisterSessionServiceServer(s, guide{}) })
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	conn, err := grpcclient.Dial(ln.Addr().String(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// The Reader's refusals carry the reasons a client branches on.
func TestReasons(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	who := identity.Identity{TenantID: "acme", UserID: "ann", Role: identity.RoleMember}
	r := guidesession.New(dial(t, true), 5*time.Second, logx.Discard())

	require.NoError(t, r.Open(ctx, who, "open", "plan in it"))
	err := r.Open(ctx, who, "done", "plan in it")
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Equal(t, guidesession.ReasonSessionEnded, apierr.Reason(err))
	require.Equal(t, "completed", apierr.Info(status.Convert(err)).GetMetadata()["state"])
	require.Equal(t, "session sessions/done is completed; cannot plan in it", status.Convert(err).Message())

	_, err = r.Get(ctx, who, "nope", "the session")
	require.Equal(t, "SESSION_NOT_FOUND", apierr.Reason(err))
	_, err = r.Get(ctx, who, "bad", "the session")
	require.Equal(t, apierr.ReasonInvalidField, apierr.Reason(err), "the Guide's own reason is kept")
	require.Equal(t, "guide: name: malformed", status.Convert(err).Message())

	down := guidesession.New(dial(t, false), time.Second, logx.Discard())
	_, err = down.Get(ctx, who, "open", "the session")
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, apierr.ReasonPeerUnavailable, apierr.Reason(err))
}
