package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/logx"
)

// routeStream is the route pattern of the session event stream.
const routeStream = "/v1/{parent=sessions/*}/events:stream"

// sseRequest reports whether r asks for the session event stream as
// server-sent events, and returns the session's resource name.
func sseRequest(r *http.Request) (string, bool) {
	if r.Method != http.MethodGet {
		return "", false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/events:stream")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	if r.URL.Query().Get("format") != "sse" && !acceptsEventStream(r) {
		return "", false
	}
	return "sessions/" + id, true
}

func acceptsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// afterSequence reads the resume point: the Last-Event-ID header (sent by
// reconnecting clients) wins over the after_sequence query parameter.
func afterSequence(r *http.Request) (uint64, *apierr.Error) {
	if v := strings.TrimSpace(r.Header.Get("Last-Event-ID")); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, apierr.Invalid("Last-Event-ID", "must be an event sequence number")
		}
		return n, nil
	}
	q := r.URL.Query()
	v := q.Get("after_sequence")
	if v == "" {
		v = q.Get("afterSequence")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, apierr.Invalid("after_sequence", "must be an unsigned integer")
	}
	return n, nil
}

type streamItem struct {
	event *eventv1.Event
	err   error
}

// serveSSE streams the session's events as server-sent events: one
// "id/event/data" block per event, flushed at once, a keepalive comment
// every SSEKeepalive, until the client goes away or the stream ends. Errors
// before the response starts get the JSON error form; later ones an "error"
// event.
func (g *Gateway) serveSSE(w http.ResponseWriter, r *http.Request, parent string) {
	if info := reqInfoFrom(r.Context()); info != nil {
		info.route = routeStream
	}
	if g.guide == nil {
		writeError(w, errGuideNotConfigured)
		return
	}
	after, aerr := afterSequence(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	stream, err := g.guide.StreamEvents(g.outgoingContext(ctx, r), &guidev1.StreamEventsRequest{Parent: parent, AfterSequence: after})
	if err != nil {
		st := g.publicStatus(ctx, err)
		writeStatus(w, runtime.HTTPStatusFromCode(st.Code()), st)
		return
	}
	// One goroutine owns the stream: it waits for the response headers
	// (the service accepted the call), then receives until the stream ends.
	opened := make(chan struct{})
	items := make(chan streamItem)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(items)
		if md, _ := stream.Header(); md != nil {
			close(opened)
		}
		for {
			resp, err := stream.Recv()
			item := streamItem{err: err}
			if err == nil {
				item.event = resp.GetEvent()
			}
			select {
			case items <- item:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	g.metrics.streams.Inc()
	defer g.metrics.streams.Dec()
	rc := http.NewResponseController(w)
	started := false
	start := func() bool {
		if started {
			return true
		}
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		return rc.Flush() == nil
	}
	// fail ends the stream with st: the JSON error form before the
	// response started, an "error" event after.
	fail := func(st *status.Status) {
		if !started {
			writeStatus(w, runtime.HTTPStatusFromCode(st.Code()), st)
			return
		}
		_, _ = io.WriteString(w, "event: error\ndata: "+string(marshalError(st))+"\n\n")
		_ = rc.Flush()
	}
	// last is the id of the last event sent (or the one the client resumed
	// after): a stream a shutdown ends tells the client to resume from it.
	last := after
	// ended ends a stream whose context is done, with an error event when
	// its key was revoked or the gateway is shutting down.
	ended := func() {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errKeyRevoked):
			fail(g.publicStatus(ctx, ctx.Err()))
		case errors.Is(cause, errShuttingDown) && started:
			writeReconnect(w, last)
			_ = rc.Flush()
		case errors.Is(cause, errShuttingDown):
			fail(errShuttingDown.GRPCStatus())
		}
	}
	keepalive := time.NewTicker(g.cfg.SSEKeepalive)
	defer keepalive.Stop()
	var buf bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			ended()
			return
		case <-opened:
			opened = nil
			if !start() {
				return
			}
		case <-keepalive.C:
			if !start() {
				return
			}
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case it, ok := <-items:
			if !ok {
				return
			}
			if errors.Is(it.err, io.EOF) {
				start()
				return
			}
			if it.err != nil {
				st := g.publicStatus(ctx, it.err)
				if st.Code() == codes.Canceled && ctx.Err() != nil {
					ended()
					return
				}
				fail(st)
				return
			}
			if it.event == nil {
				continue
			}
			if !start() {
				return
			}
			buf.Reset()
			if err := g.writeEvent(&buf, it.event); err != nil {
				g.log.ErrorContext(ctx, "encode event", logx.Err(err))
				continue
			}
			if _, err := w.Write(buf.Bytes()); err != nil || rc.Flush() != nil {
				return
			}
			last = it.event.GetSequence()
		}
	}
}

// writeReconnect ends an event stream the gateway's shutdown cut: an
// "error" event (UNAVAILABLE, reason SHUTTING_DOWN) whose message and
// metadata "last_event_id" name the last event sent, which the client
// resumes after with "Last-Event-ID" on another gateway replica, and a
// "retry" field that sets an EventSource's reconnection delay.
func writeReconnect(w io.Writer, last uint64) {
	id := strconv.FormatUint(last, 10)
	e := errShuttingDown.Withf("the gateway is shutting down: reconnect with \"Last-Event-ID: %s\" to resume after the last event received", id).
		With("last_event_id", id)
	_, _ = io.WriteString(w, "retry: "+strconv.FormatInt(e.RetryAfter.Milliseconds(), 10)+"\n"+
		"event: error\ndata: "+string(marshalError(e.GRPCStatus()))+"\n\n")
}

// writeEvent formats one event as a server-sent event block: its sequence
// as the id, its type's name ("EVENT_TYPE_MESSAGE_ANSWERED") as the event,
// and the event as protojson, the form REST sends, as the data.
func (g *Gateway) writeEvent(buf *bytes.Buffer, ev *eventv1.Event) error {
	data, err := g.marshal.Marshal(ev)
	if err != nil {
		return err
	}
	buf.WriteString("id: ")
	buf.WriteString(strconv.FormatUint(ev.GetSequence(), 10))
	buf.WriteString("\n")
	if t := ev.GetType(); t != eventv1.EventType_EVENT_TYPE_UNSPECIFIED {
		buf.WriteString("event: ")
		buf.WriteString(t.String())
		buf.WriteString("\n")
	}
	buf.WriteString("data: ")
	// protojson writes one line; a compact re-encoding guarantees it.
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return err
	}
	buf.Write(compact.Bytes())
	buf.WriteString("\n\n")
	return nil
}
