package librarian

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/pgstore"
)

// Domain errors, mapped to gRPC codes by toStatus.
var (
	errNotFound      = errors.New("not found")
	errDuplicatePath = errors.New("duplicate repository path")
)

// precondition is an error the caller can act on: the repository is not in
// a state that allows the operation (its directory vanished, it has too many
// files). Its message is safe to return and to record as index_error.
type precondition struct{ msg string }

func (p precondition) Error() string { return p.msg }

func preconditionf(format string, args ...any) error {
	return precondition{msg: fmt.Sprintf(format, args...)}
}

// toStatus maps an error from the domain code to a gRPC status. Causes that
// callers must not see are logged and replaced by a generic message.
func toStatus(ctx context.Context, log *slog.Logger, op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var pre precondition
	switch {
	case errors.As(err, &pre):
		return status.Error(codes.FailedPrecondition, pre.msg)
	case errors.Is(err, errNotFound):
		return status.Error(codes.NotFound, "repository not found")
	case pgstore.Unavailable(err):
		log.WarnContext(ctx, op+" failed: database unreachable", logx.Err(err))
		return status.Error(codes.Unavailable, "database unavailable, retry later")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	log.ErrorContext(ctx, op+" failed", logx.Err(err))
	return status.Error(codes.Internal, op+" failed: internal error")
}

// invalid is an InvalidArgument status naming the field.
func invalid(field, format string, args ...any) error {
	return status.Error(codes.InvalidArgument, field+": "+fmt.Sprintf(format, args...))
}
