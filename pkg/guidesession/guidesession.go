// Package guidesession reads a caller's session from the Guide, for the
// services that take a session id in a request and must not act in a
// session the caller does not own. Sessions belong to users: the Guide
// answers NotFound for another user's or another tenant's session.
package guidesession

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
)

// Reader reads sessions from the Guide as the caller. A nil Reader (no
// Guide peer configured) reads nothing and refuses nothing.
type Reader struct {
	client  guidev1.SessionServiceClient
	timeout time.Duration
	log     *slog.Logger
}

// New returns a Reader over conn, or nil when conn is nil. timeout bounds
// each read.
func New(conn grpc.ClientConnInterface, timeout time.Duration, log *slog.Logger) *Reader {
	if conn == nil {
		return nil
	}
	return &Reader{client: guidev1.NewSessionServiceClient(conn), timeout: timeout, log: log}
}

// ReasonSessionEnded is the FailedPrecondition reason of Open for a
// session that is completed or failed; the metadata's "state" says which.
const ReasonSessionEnded = "SESSION_ENDED"

// Get reads session id as who, so that another user's or tenant's session
// is not found. It returns apierr errors: NotFound (SESSION_NOT_FOUND), the
// Guide's own InvalidArgument, PermissionDenied or Unauthenticated
// (prefixed "guide: ", their details kept), and Unavailable
// (PEER_UNAVAILABLE) naming what when the Guide does not answer in time.
// A nil Reader returns nil and no error.
func (r *Reader) Get(ctx context.Context, who identity.Identity, id, what string) (*guidev1.Session, error) {
	if r == nil {
		return nil, nil
	}
	cctx, cancel := context.WithTimeout(identity.AppendOutgoing(ctx, who), r.timeout)
	defer cancel()
	resp, err := r.client.GetSession(cctx, &guidev1.GetSessionRequest{Name: "sessions/" + id})
	if err != nil {
		if st, ok := status.FromError(err); ok {
			switch st.Code() {
			case codes.NotFound:
				return nil, apierr.NotFound("session", "sessions/"+id)
			case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
				pb := st.Proto()
				pb.Message = "guide: " + pb.GetMessage()
				return nil, apierr.WithInfo(status.FromProto(pb)).Err()
			}
		}
		r.log.WarnContext(ctx, "read session", slog.String("session", id), logx.Err(err))
		e := apierr.Unavailable(apierr.ReasonPeerUnavailable, "could not read %s; retry", what)
		e.RetryAfter = time.Second
		return nil, e
	}
	return resp.GetSession(), nil
}

// Open reads session id as who and refuses, with FailedPrecondition
// (SESSION_ENDED), a session that is over (completed or failed); to do
// names the refused action ("plan in it"). A nil Reader checks nothing.
func (r *Reader) Open(ctx context.Context, who identity.Identity, id, toDo string) error {
	sess, err := r.Get(ctx, who, id, "the session")
	if err != nil || sess == nil {
		return err
	}
	switch st := sess.GetState(); st {
	case guidev1.SessionState_SESSION_STATE_COMPLETED, guidev1.SessionState_SESSION_STATE_FAILED:
		state := strings.ToLower(strings.TrimPrefix(st.String(), "SESSION_STATE_"))
		return apierr.FailedPrecondition(ReasonSessionEnded, "session sessions/%s is %s; cannot %s", id, state, toDo).
			With("session", "sessions/"+id).With("state", state)
	}
	return nil
}
