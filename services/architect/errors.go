package architect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/logx"
)

// notFoundError says a plan does not exist for the caller; another tenant's
// or user's plan is reported the same way.
type notFoundError struct{ name string }

func (e *notFoundError) Error() string { return fmt.Sprintf("plan %s not found", e.name) }

// stateError says a plan is in the wrong state for what was asked.
type stateError struct{ current, action string }

func (e *stateError) Error() string {
	return fmt.Sprintf("plan is %s; cannot %s", e.current, e.action)
}

// errDuplicateSource says a plan was already drafted from the same inbox
// message.
var errDuplicateSource = errors.New("plan already drafted from this message")

func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// toStatus maps a domain error to the gRPC status callers see; statuses pass
// through unchanged and unexpected errors are logged once and masked.
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
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	s.log.ErrorContext(ctx, "internal error", slog.String("op", op), logx.Err(err))
	return status.Error(codes.Internal, "internal error")
}
