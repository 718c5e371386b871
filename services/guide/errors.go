package guide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/pgstore"
)

// notFoundError says a resource does not exist for the caller. Another
// tenant's or user's resource is reported the same way, so that callers
// cannot probe for it.
type notFoundError struct {
	kind, name string
}

func (e *notFoundError) Error() string { return fmt.Sprintf("%s %s not found", e.kind, e.name) }

// stateError says a session is in the wrong state for what was asked.
type stateError struct {
	current string   // state name, lower case
	action  string   // "suspend", "resume", "complete", "send messages to", ...
	hint    string   // optional advice
	allowed []string // states the action is allowed from
}

func (e *stateError) Error() string {
	if e.hint != "" {
		return fmt.Sprintf("session is %s; %s", e.current, e.hint)
	}
	msg := fmt.Sprintf("session is %s; cannot %s", e.current, e.action)
	if len(e.allowed) > 0 {
		msg += fmt.Sprintf(" (allowed only from %s)", strings.Join(e.allowed, " or "))
	}
	return msg
}

// conflictError says an optimistic version did not match.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

// errDuplicateRequest says a message with the same request id was stored
// concurrently; the caller replays the stored one.
var errDuplicateRequest = errors.New("duplicate request id")

// invalid returns an InvalidArgument status naming the field.
func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// toStatus maps a domain error to the gRPC status callers see. Errors that
// are statuses already pass through unchanged; unexpected errors are logged
// here, once, and reach the caller as a generic Internal.
func (s *Service) toStatus(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var nf *notFoundError
	var se *stateError
	switch {
	case errors.As(err, &nf):
		return status.Error(codes.NotFound, nf.Error())
	case errors.As(err, &se):
		return status.Error(codes.FailedPrecondition, se.Error())
	case errors.As(err, new(*conflictError)):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case pgstore.Unavailable(err):
		s.log.ErrorContext(ctx, "session store unavailable", slog.String("op", op), logx.Err(err))
		return status.Error(codes.Unavailable, "the session store is unavailable; retry later")
	}
	s.log.ErrorContext(ctx, "internal error", slog.String("op", op), logx.Err(err))
	return status.Error(codes.Internal, "internal error")
}
