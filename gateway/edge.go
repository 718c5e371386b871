package gateway

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
)

// secureHeaders are set on every response: no content sniffing, no caching
// of answers that hold a tenant's data.
func secureHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}

// bodyDeadline bounds the reading of a request that declares a body to
// the body timeout from its start: a client that never sends it is cut,
// whether or not it has a key (net/http reads what a refused request left
// unread before it answers, under the same deadline).
func (g *Gateway) bodyDeadline(w http.ResponseWriter, r *http.Request, start time.Time) {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(start.Add(g.cfg.BodyTimeout))
}

// clearReadDeadline lifts the body deadline once the body is read: a read
// deadline that passed during the handler would end the request (net/http
// watches the connection to notice a client that went away).
func clearReadDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// throttled writes a 429 and returns true when r's address or key prefix
// failed authentication too often within the window. A Redis that does
// not answer throttles nothing (logged).
func (g *Gateway) throttled(w http.ResponseWriter, r *http.Request, key string) bool {
	wait, err := g.limits.wait(r.Context(), r, key)
	if err != nil {
		g.log.WarnContext(r.Context(), "failed-authentication limits unavailable", logx.Err(err))
		return false
	}
	if wait <= 0 {
		return false
	}
	g.metrics.authFailures.WithLabelValues("throttled").Inc()
	secs := int64(math.Ceil(wait.Seconds()))
	at := time.Now().Add(time.Duration(secs) * time.Second).UTC().Format(time.RFC3339)
	e := errAuthThrottled.Withf("too many failed authentications from this address or with this key; retry after %ds (at %s)", secs, at).
		With("retry_after_seconds", strconv.FormatInt(secs, 10))
	e.RetryAfter = time.Duration(secs) * time.Second
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	writeError(w, e)
	return true
}

// denialTimeout bounds recording a permission denial.
const denialTimeout = 2 * time.Second

// recordDenial records in the audit log that r's caller was refused by a
// role or permission check (the gateway's or a service's).
func (g *Gateway) recordDenial(r *http.Request, st *status.Status) {
	id, ok := identity.FromContext(r.Context())
	if !ok {
		return
	}
	g.auditDenial(r.Context(), id, r.Header.Get(headerRequestID), r.Method+" "+r.URL.Path, st)
}

// auditDenial records that id was refused target (a route, or an MCP
// tool) with st.
func (g *Gateway) auditDenial(ctx context.Context, id identity.Identity, requestID, target string, st *status.Status) {
	if g.audit == nil || !id.Valid() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), denialTimeout)
	defer cancel()
	details := map[string]string{"role": id.Role, "reason": apierr.Info(apierr.WithInfo(st)).GetReason(),
		"request_id": requestID}
	target = strings.ToValidUTF8(target, "?")
	if len(target) > 512 {
		target = target[:512]
	}
	if _, err := g.audit.Append(ctx, audit.Record{TenantID: id.TenantID, Actor: id.UserID, Action: audit.ActionPermissionDenied,
		Target: target, Details: details}); err != nil {
		g.log.WarnContext(ctx, "audit permission denial", logx.Err(err))
	}
}
