package apierr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestStatusCarriesInfo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"domain", NotFound("session", "sessions/x"), codes.NotFound, "SESSION_NOT_FOUND"},
		{"wrapped domain", fmt.Errorf("load: %w", FailedPrecondition("SESSION_COMPLETED", "session is completed")), codes.FailedPrecondition, "SESSION_COMPLETED"},
		{"peer status", status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied, "PERMISSION_DENIED"},
		{"canceled", context.Canceled, codes.Canceled, ReasonCanceled},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded, ReasonDeadlineExceeded},
		{"internal", errors.New("disk on fire"), codes.Internal, ReasonInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Status(ctx, discard, "op", tt.err)
			st, ok := status.FromError(err)
			require.True(t, ok)
			require.Equal(t, tt.code, st.Code())
			info := Info(st)
			require.NotNil(t, info)
			require.Equal(t, tt.reason, info.GetReason())
			require.Equal(t, Domain, info.GetDomain())
			require.Equal(t, tt.reason, Reason(err))
			require.NotContains(t, st.Message(), "disk on fire")
		})
	}
	require.NoError(t, Status(ctx, discard, "op", nil))
}

func TestInvalidNamesTheField(t *testing.T) {
	t.Parallel()
	err := Invalid("session.display_name", "longer than %d characters", 200)
	require.Equal(t, "session.display_name: longer than 200 characters", err.Error())
	st := err.GRPCStatus()
	var br *errdetails.BadRequest
	for _, d := range st.Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			br = b
		}
	}
	require.NotNil(t, br)
	require.Equal(t, "session.display_name", br.GetFieldViolations()[0].GetField())
	require.Equal(t, "session.display_name", Info(st).GetMetadata()["field"])
}

func TestErrorsIsMatchesReason(t *testing.T) {
	t.Parallel()
	errPlanDecided := FailedPrecondition("PLAN_DECIDED", "the plan was decided already")
	err := fmt.Errorf("approve: %w", errPlanDecided.Withf("plan %s was approved already", "p1").With("plan", "p1"))
	require.ErrorIs(t, err, errPlanDecided)
	require.NotErrorIs(t, err, FailedPrecondition("OTHER", "x"))
}

func TestWithInfoKeepsAnExistingOne(t *testing.T) {
	t.Parallel()
	st := New(codes.Aborted, "VERSION_MISMATCH", "changed meanwhile").GRPCStatus()
	require.Equal(t, "VERSION_MISMATCH", Info(WithInfo(st)).GetReason())
	require.Equal(t, codes.OK, WithInfo(status.New(codes.OK, "")).Code())
}

func TestInvalidFieldsNamesEveryField(t *testing.T) {
	t.Parallel()
	require.NoError(t, InvalidFields())
	var err *Error
	require.ErrorAs(t, InvalidFields(FieldViolation{"query", "required"}, FieldViolation{"page_size", "must not be negative"}), &err)
	require.Equal(t, "query: required; page_size: must not be negative", err.Error())
	require.Equal(t, codes.InvalidArgument, err.Code)
	require.Equal(t, ReasonInvalidField, Reason(err))
	require.Equal(t, "query", err.Metadata["field"])
	var br *errdetails.BadRequest
	for _, d := range err.GRPCStatus().Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			br = b
		}
	}
	require.Len(t, br.GetFieldViolations(), 2)
}
