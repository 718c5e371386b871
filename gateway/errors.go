package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/logx"
)

// Reasons of the errors the gateway answers itself (ErrorInfo reason, domain
// apierr.Domain). The services' errors carry their own.
const (
	// ReasonAPIKeyMissing: no API key was sent.
	ReasonAPIKeyMissing = "API_KEY_MISSING"
	// ReasonAuthSchemeUnsupported: Authorization names a scheme other than
	// Bearer.
	ReasonAuthSchemeUnsupported = "AUTH_SCHEME_UNSUPPORTED"
	// ReasonAPIKeyInvalid: the key is unknown or revoked (an open stream
	// whose key is revoked ends with it too).
	ReasonAPIKeyInvalid = "API_KEY_INVALID"
	// ReasonAuthUnavailable: the key store does not answer; retry.
	ReasonAuthUnavailable = "AUTH_UNAVAILABLE"
	// ReasonRoleReadOnly: the caller's role may only read.
	ReasonRoleReadOnly = "ROLE_READ_ONLY"
	// ReasonRouteNotFound: no API route has this path.
	ReasonRouteNotFound = "ROUTE_NOT_FOUND"
	// ReasonMethodNotAllowed: the route does not take this HTTP method.
	ReasonMethodNotAllowed = "METHOD_NOT_ALLOWED"
	// ReasonMalformedPath: the path does not parse.
	ReasonMalformedPath = "MALFORMED_PATH"
	// ReasonInvalidUTF8: the path or a query parameter is not UTF-8.
	ReasonInvalidUTF8 = "INVALID_UTF8"
	// ReasonBodyTooLarge: the body exceeds the limit (metadata
	// "limit_bytes").
	ReasonBodyTooLarge = "BODY_TOO_LARGE"
	// ReasonMalformedBody: the body is not JSON, or could not be read.
	ReasonMalformedBody = "MALFORMED_BODY"
	// ReasonServiceNotConfigured: the service behind the route is not
	// configured in this deployment.
	ReasonServiceNotConfigured = "SERVICE_NOT_CONFIGURED"
	// ReasonShuttingDown: the gateway is shutting down (/readyz).
	ReasonShuttingDown = "SHUTTING_DOWN"
	// ReasonAuthThrottled: too many failed authentications from the
	// client's address or with keys of this prefix; the message and
	// Retry-After say when to retry.
	ReasonAuthThrottled = "AUTH_THROTTLED"
)

// Errors of the gateway's own; a call site tells its own message with
// Withf where it knows more.
var (
	// Authentication and authorisation.
	errKeyMissing        = apierr.New(codes.Unauthenticated, ReasonAPIKeyMissing, "missing API key")
	errSchemeUnsupported = apierr.New(codes.Unauthenticated, ReasonAuthSchemeUnsupported,
		`unsupported authorization scheme: use "Authorization: Bearer <key>" or "X-API-Key: <key>"`)
	errKeyInvalid = apierr.New(codes.Unauthenticated, ReasonAPIKeyInvalid, "invalid API key")
	// errKeyRevoked ends an open stream whose API key was revoked after
	// the stream started.
	errKeyRevoked      = errKeyInvalid.Withf("API key is no longer valid")
	errAuthUnavailable = retryable(apierr.Unavailable(ReasonAuthUnavailable, "authentication is unavailable, try again later"))
	errReadOnly        = apierr.New(codes.PermissionDenied, ReasonRoleReadOnly, "this role may only read")
	errKeyExpired      = errKeyInvalid.Withf("API key has expired")
	errAuthThrottled   = apierr.New(codes.ResourceExhausted, ReasonAuthThrottled, "too many failed authentications")

	// Requests the gateway refuses before any service sees them.
	errRouteNotFound    = apierr.New(codes.NotFound, ReasonRouteNotFound, "no route")
	errMethodNotAllowed = apierr.New(codes.Unimplemented, ReasonMethodNotAllowed, "method not allowed")
	errMalformedPath    = apierr.New(codes.InvalidArgument, ReasonMalformedPath, "malformed request path")
	errInvalidUTF8      = apierr.New(codes.InvalidArgument, ReasonInvalidUTF8, "request must be valid UTF-8")
	errBodyTooLarge     = apierr.New(codes.InvalidArgument, ReasonBodyTooLarge, "request body too large")
	errMalformedBody    = apierr.New(codes.InvalidArgument, ReasonMalformedBody, "malformed JSON body")

	// The gateway or what is behind it cannot answer.
	errGuideNotConfigured = apierr.Unavailable(ReasonServiceNotConfigured, "the guide service is not configured").With("service", "guide")
	errBackendUnavailable = retryable(apierr.Unavailable(apierr.ReasonPeerUnavailable, "service unavailable, try again later"))
	errShuttingDown       = retryable(apierr.Unavailable(ReasonShuttingDown, "shutting down"))
	errInternal           = apierr.New(codes.Internal, apierr.ReasonInternal, "internal error")
)

// retryable sets e to be retried after a second.
func retryable(e *apierr.Error) *apierr.Error {
	e.RetryAfter = time.Second
	return e
}

// errorBody is the JSON form of every error the gateway returns: the
// status's code, the code's name and the message, the ErrorInfo's reason,
// domain and metadata, and every detail as google.rpc.Status renders it in
// JSON (an object with "@type"). /openapi.json documents it as Error.
type errorBody struct {
	Code     int               `json:"code"`
	Status   string            `json:"status"`
	Message  string            `json:"message"`
	Reason   string            `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata"`
	Details  []json.RawMessage `json:"details"`
}

func newErrorBody(st *status.Status) errorBody {
	st = apierr.WithInfo(st)
	b := errorBody{Code: int(st.Code()), Status: apierr.CodeName(st.Code()), Message: st.Message(),
		Reason: apierr.CodeName(st.Code()), Metadata: map[string]string{}, Details: []json.RawMessage{}}
	if info := apierr.Info(st); info != nil {
		b.Reason, b.Domain = info.GetReason(), info.GetDomain()
		for k, v := range info.GetMetadata() {
			b.Metadata[k] = v
		}
	}
	for _, d := range st.Proto().GetDetails() {
		// A detail of a type this binary does not know cannot be rendered.
		if j, err := protojson.Marshal(d); err == nil {
			b.Details = append(b.Details, j)
		}
	}
	return b
}

// marshalError is st in the JSON error form, on one line.
func marshalError(st *status.Status) []byte {
	b, _ := json.Marshal(newErrorBody(st)) // cannot fail: strings, ints and JSON the encoder checked
	return b
}

// writeStatus writes st in the JSON error form with httpStatus.
func writeStatus(w http.ResponseWriter, httpStatus int, st *status.Status) {
	h := w.Header()
	h.Del("Trailer")
	h.Del("Transfer-Encoding")
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if st.Code() == codes.Unauthenticated {
		h.Set("WWW-Authenticate", `Bearer realm="sylk"`)
	}
	w.WriteHeader(httpStatus)
	_, _ = w.Write(append(marshalError(st), '\n'))
}

// writeError writes e in the JSON error form with the HTTP status mapped
// from its code.
func writeError(w http.ResponseWriter, e *apierr.Error) {
	writeStatus(w, runtime.HTTPStatusFromCode(e.Code), e.GRPCStatus())
}

// publicStatus turns err into the status a client may see: Unauthenticated
// for a stream ended because its key was revoked; statuses from the
// services pass through (with an ErrorInfo), except that transport
// failures of the gateway's own connections lose their details; anything
// else goes through apierr.Status (a generic Internal, its cause logged).
func (g *Gateway) publicStatus(ctx context.Context, err error) *status.Status {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errKeyRevoked) {
		return errKeyRevoked.GRPCStatus()
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && isTransportMessage(st.Message()) {
		g.log.WarnContext(ctx, "backend unavailable", slog.String(logx.KeyMethod, rpcMethod(ctx)), slog.String("cause", st.Message()))
		return errBackendUnavailable.GRPCStatus()
	}
	return status.Convert(apierr.Status(ctx, g.log, "request", err))
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
func (g *Gateway) handleError(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	httpStatus := 0
	var hs *runtime.HTTPStatusError
	if errors.As(err, &hs) {
		httpStatus = hs.HTTPStatus
		err = hs.Err
		if _, ok := status.FromError(err); !ok {
			err = apierr.New(codes.InvalidArgument, apierr.CodeName(codes.InvalidArgument), "%s", err.Error())
		}
	}
	st := g.publicStatus(ctx, err)
	if httpStatus == 0 {
		httpStatus = runtime.HTTPStatusFromCode(st.Code())
	}
	if st.Code() == codes.PermissionDenied {
		g.recordDenial(r, st)
	}
	writeStatus(w, httpStatus, st)
}

// handleRoutingError answers requests that match no route.
func (g *Gateway) handleRoutingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		writeStatus(w, http.StatusMethodNotAllowed, methodNotAllowed(r).GRPCStatus())
	case http.StatusBadRequest:
		writeError(w, errMalformedPath)
	default:
		writeError(w, errRouteNotFound.Withf("no route for %s %s", r.Method, r.URL.Path))
	}
}

func methodNotAllowed(r *http.Request) *apierr.Error {
	return errMethodNotAllowed.Withf("method %s is not allowed on %s", r.Method, r.URL.Path)
}

// streamError is the status written into a stream that fails after its
// first message.
func (g *Gateway) streamError(ctx context.Context, err error) *status.Status {
	return g.publicStatus(ctx, err)
}
