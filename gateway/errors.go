package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/logx"
)

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

func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "UNKNOWN"
}

// errorBody is the JSON form of every error the gateway returns.
type errorBody struct {
	Code    int    `json:"code"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func newErrorBody(c codes.Code, msg string) errorBody {
	return errorBody{Code: int(c), Status: codeName(c), Message: msg}
}

// writeError writes the JSON error form with httpStatus.
func writeError(w http.ResponseWriter, httpStatus int, c codes.Code, msg string) {
	h := w.Header()
	h.Del("Trailer")
	h.Del("Transfer-Encoding")
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if c == codes.Unauthenticated {
		h.Set("WWW-Authenticate", `Bearer realm="sylk"`)
	}
	w.WriteHeader(httpStatus)
	b, _ := json.Marshal(newErrorBody(c, msg)) // cannot fail: plain struct of strings and ints
	_, _ = w.Write(append(b, '\n'))
}

// writeCode writes the JSON error form with the HTTP status mapped from c.
func writeCode(w http.ResponseWriter, c codes.Code, msg string) {
	writeError(w, runtime.HTTPStatusFromCode(c), c, msg)
}

// publicStatus turns err into the status a client may see (Unauthenticated
// for a stream ended because its key was revoked): statuses from
// the services pass through (they are masked there already), except that
// transport failures of the gateway's own connections lose their details;
// anything else becomes a generic Internal, its cause logged.
func (g *Gateway) publicStatus(ctx context.Context, err error) *status.Status {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errKeyInvalid) {
		// The stream was ended because its key was revoked.
		return status.New(codes.Unauthenticated, errKeyInvalid.Error())
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, "deadline exceeded")
	}
	st, ok := status.FromError(err)
	if !ok {
		g.log.ErrorContext(ctx, "internal error", logx.Err(err))
		return status.New(codes.Internal, "internal error")
	}
	if st.Code() == codes.Unavailable && isTransportMessage(st.Message()) {
		g.log.WarnContext(ctx, "backend unavailable", slog.String(logx.KeyMethod, rpcMethod(ctx)), slog.String("cause", st.Message()))
		return status.New(codes.Unavailable, "service unavailable, try again later")
	}
	return st
}

// isTransportMessage reports whether msg comes from the gRPC client's
// transport (dial failures, closed connections) rather than from a service.
func isTransportMessage(msg string) bool {
	for _, s := range []string{"connection error", "transport:", "error reading from server", "name resolver", "connection closed", "last connection error"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func rpcMethod(ctx context.Context) string {
	m, _ := runtime.RPCMethod(ctx)
	return m
}

// handleError is the mux's error handler: it writes the JSON error form with
// the standard HTTP mapping of the gRPC code.
func (g *Gateway) handleError(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	httpStatus := 0
	var hs *runtime.HTTPStatusError
	if errors.As(err, &hs) {
		httpStatus = hs.HTTPStatus
		err = hs.Err
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.InvalidArgument, err.Error())
		}
	}
	st := g.publicStatus(ctx, err)
	if httpStatus == 0 {
		httpStatus = runtime.HTTPStatusFromCode(st.Code())
	}
	if md, ok := runtime.ServerMetadataFromContext(ctx); ok {
		forwardHeaderMetadata(w, md)
	}
	writeError(w, httpStatus, st.Code(), st.Message())
}

// handleRoutingError answers requests that match no route.
func (g *Gateway) handleRoutingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		writeError(w, http.StatusMethodNotAllowed, codes.Unimplemented, "method "+r.Method+" is not allowed on "+r.URL.Path)
	case http.StatusBadRequest:
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "malformed request path")
	default:
		writeError(w, http.StatusNotFound, codes.NotFound, "no route for "+r.Method+" "+r.URL.Path)
	}
}

// streamError is the status written into a stream that fails after its
// first message.
func (g *Gateway) streamError(ctx context.Context, err error) *status.Status {
	return g.publicStatus(ctx, err)
}

// forwardHeaderMetadata copies the services' response header metadata the
// way the mux does for successful calls.
func forwardHeaderMetadata(w http.ResponseWriter, md runtime.ServerMetadata) {
	for k, vs := range md.HeaderMD {
		if strings.HasPrefix(k, ":") || k == "content-type" {
			continue
		}
		for _, v := range vs {
			w.Header().Add(runtime.MetadataHeaderPrefix+k, v)
		}
	}
}
