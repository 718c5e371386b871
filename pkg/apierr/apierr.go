// Package apierr is the error vocabulary every service shares: a domain
// error carries the gRPC code a client sees, a stable reason clients can
// branch on (google.rpc.ErrorInfo), and where useful the fields at fault
// (google.rpc.BadRequest) or when to retry (google.rpc.RetryInfo).
//
// Domain code returns *Error values (or wraps them); a service's handlers
// pass every error through Status once, which logs what a client must not
// see and returns what it may. The server's outermost interceptor calls
// WithInfo on whatever leaves, so that every error a client gets has an
// ErrorInfo, and the gateway renders that into its JSON error body.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/pgstore"
)

// Domain is the ErrorInfo domain of every Sylk error.
const Domain = "sylk.dev"

// Reasons shared by every service. A service names its own in its
// errors.go; a reason is UPPER_SNAKE and never changes once clients see it.
const (
	// ReasonInvalidField: a request field is missing or malformed (the
	// metadata's "field" names it).
	ReasonInvalidField = "INVALID_FIELD"
	// ReasonNotFound is the generic form of <KIND>_NOT_FOUND.
	ReasonNotFound = "NOT_FOUND"
	// ReasonStoreUnavailable: the database does not answer; retry.
	ReasonStoreUnavailable = "STORE_UNAVAILABLE"
	// ReasonBusUnavailable: the message bus does not answer; retry.
	ReasonBusUnavailable = "BUS_UNAVAILABLE"
	// ReasonPeerUnavailable: another service does not answer; retry.
	ReasonPeerUnavailable = "PEER_UNAVAILABLE"
	// ReasonInternal: a fault of the service; its cause is logged, never
	// sent.
	ReasonInternal = "INTERNAL"
	// ReasonCanceled and ReasonDeadlineExceeded: the call ended first.
	ReasonCanceled         = "CANCELLED"
	ReasonDeadlineExceeded = "DEADLINE_EXCEEDED"
)

// Error is a domain error a client may see.
type Error struct {
	Code codes.Code
	// Reason is stable and UPPER_SNAKE ("SESSION_NOT_FOUND").
	Reason string
	// Message is for a person: what went wrong and what to do.
	Message string
	// Metadata adds facts clients may branch on ("resource", "field").
	Metadata map[string]string
	// Fields lists the request fields at fault.
	Fields []FieldViolation
	// RetryAfter, when set, tells the client when to try again.
	RetryAfter time.Duration
	cause      error
}

// FieldViolation is one request field at fault.
type FieldViolation struct {
	Field, Description string
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is matches another *Error of the same code and reason, so that reason
// sentinels work with errors.Is.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Reason == e.Reason
}

// GRPCStatus is the status the error is sent as, with its details.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(e.Code, e.Message)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: e.reason(), Domain: Domain, Metadata: e.Metadata}}
	if len(e.Fields) > 0 {
		br := &errdetails.BadRequest{}
		for _, f := range e.Fields {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
				Field: f.Field, Description: f.Description})
		}
		details = append(details, br)
	}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		return withDetails
	}
	return st
}

func (e *Error) reason() string {
	if e.Reason != "" {
		return e.Reason
	}
	return CodeName(e.Code)
}

// With returns a copy of e with metadata key set to value.
func (e *Error) With(key, value string) *Error {
	c := *e
	c.Metadata = maps.Clone(e.Metadata)
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	c.Metadata[key] = value
	return &c
}

// Wrap returns a copy of e with cause as what it wraps (logged, never
// sent).
func (e *Error) Wrap(cause error) *Error {
	c := *e
	c.cause = cause
	return &c
}

// Withf returns a copy of e with a message of its own: the same code and
// reason (errors.Is still matches), told for this case.
func (e *Error) Withf(format string, args ...any) *Error {
	c := *e
	c.Message = fmt.Sprintf(format, args...)
	return &c
}

// New is an error of code with reason and a message.
func New(code codes.Code, reason, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Invalid is an InvalidArgument naming the field at fault; its message is
// "<field>: <description>".
func Invalid(field, format string, args ...any) *Error {
	desc := fmt.Sprintf(format, args...)
	return &Error{Code: codes.InvalidArgument, Reason: ReasonInvalidField, Message: field + ": " + desc,
		Metadata: map[string]string{"field": field}, Fields: []FieldViolation{{Field: field, Description: desc}}}
}

// InvalidFields is an InvalidArgument naming every field at fault, for a
// request with several problems; its message is each "<field>:
// <description>", joined by "; ". Without fields it is nil, so that a
// handler can collect its problems and return InvalidFields(problems...).
func InvalidFields(fields ...FieldViolation) error {
	if len(fields) == 0 {
		return nil
	}
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f.Field + ": " + f.Description
	}
	return &Error{Code: codes.InvalidArgument, Reason: ReasonInvalidField, Message: strings.Join(parts, "; "),
		Metadata: map[string]string{"field": fields[0].Field}, Fields: fields}
}

// NotFound says a resource of kind ("session", "plan") does not exist for
// the caller; another tenant's or user's is reported the same way. Its
// reason is "<KIND>_NOT_FOUND" and its metadata names the resource.
func NotFound(kind, name string) *Error {
	return &Error{Code: codes.NotFound, Reason: strings.ToUpper(strings.ReplaceAll(kind, " ", "_")) + "_NOT_FOUND",
		Message: fmt.Sprintf("%s %s not found", kind, name), Metadata: map[string]string{"resource": name}}
}

// FailedPrecondition says the resource is not in a state that allows the
// call; the message says what would.
func FailedPrecondition(reason, format string, args ...any) *Error {
	return New(codes.FailedPrecondition, reason, format, args...)
}

// Unavailable says a dependency does not answer; the client may retry.
func Unavailable(reason, format string, args ...any) *Error {
	return New(codes.Unavailable, reason, format, args...)
}

// Status turns err into the error a client may see: an *Error (or one
// wrapped) as itself; a gRPC status (a peer's answer) passed on with an
// ErrorInfo added when it has none; an unreachable database as
// Unavailable; a context's end as Canceled or DeadlineExceeded; anything
// else as a generic Internal, its cause logged here with op. nil stays nil.
func Status(ctx context.Context, log *slog.Logger, op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e.cause != nil && e.Code == codes.Internal {
			log.ErrorContext(ctx, op+" failed", logx.Err(e.cause))
		}
		return e.GRPCStatus().Err()
	}
	if st, ok := status.FromError(err); ok {
		return WithInfo(st).Err()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return New(codes.Canceled, ReasonCanceled, "request canceled").GRPCStatus().Err()
	case errors.Is(err, context.DeadlineExceeded):
		return New(codes.DeadlineExceeded, ReasonDeadlineExceeded, "deadline exceeded").GRPCStatus().Err()
	case pgstore.Unavailable(err):
		log.WarnContext(ctx, op+" failed: database unreachable", logx.Err(err))
		e := Unavailable(ReasonStoreUnavailable, "database unavailable, retry later")
		e.RetryAfter = time.Second
		return e.GRPCStatus().Err()
	}
	log.ErrorContext(ctx, op+" failed", logx.Err(err))
	return New(codes.Internal, ReasonInternal, "%s failed: internal error", op).GRPCStatus().Err()
}

// WithInfo returns st with an ErrorInfo; one that has one is returned as
// it is. The reason of one added is the code's name.
func WithInfo(st *status.Status) *status.Status {
	if st.Code() == codes.OK || Info(st) != nil {
		return st
	}
	withDetails, err := st.WithDetails(&errdetails.ErrorInfo{Reason: CodeName(st.Code()), Domain: Domain})
	if err != nil {
		return st
	}
	return withDetails
}

// Info is the ErrorInfo of st, or nil.
func Info(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// Reason is the ErrorInfo reason of err ("" for an error without one).
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.reason()
	}
	if st, ok := status.FromError(err); ok {
		if info := Info(st); info != nil {
			return info.GetReason()
		}
	}
	return ""
}

// codeNames are the canonical upper-case names of the gRPC codes, as in
// google.rpc.Code.
var codeNames = [...]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// CodeName is the canonical name of c ("INVALID_ARGUMENT").
func CodeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "UNKNOWN"
}
