package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
)

// eventServer is a gateway's message and event stream routes for one
// session: a sent message gets correlation "c1"; the stream sends events
// (after Last-Event-ID), then stays open when hold is set, or ends (a
// dropped connection) otherwise.
type eventServer struct {
	mu      sync.Mutex
	events  []string // "seq type corr"
	hold    bool
	resumes []string // Last-Event-ID of each stream request
	sent    []string // bodies of sent messages
}

func (s *eventServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages"):
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		s.mu.Lock()
		s.sent = append(s.sent, b.String())
		s.mu.Unlock()
		fmt.Fprint(w, `{"correlationId":"c1"}`)
	case strings.HasSuffix(r.URL.Path, "/events:stream"):
		s.mu.Lock()
		s.resumes = append(s.resumes, r.Header.Get("Last-Event-ID"))
		var after int
		_, _ = fmt.Sscan(r.Header.Get("Last-Event-ID"), &after)
		evs, hold := s.events, s.hold
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range evs {
			var seq int
			var typ, corr string
			_, _ = fmt.Sscan(e, &seq, &typ, &corr)
			if seq <= after {
				continue
			}
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: {\"sequence\":\"%d\",\"type\":%q,\"correlationId\":%q,\"text\":\"%s %s\"}\n\n",
				seq, typ, seq, typ, corr, typ, corr)
		}
		w.(http.Flusher).Flush()
		if hold {
			<-r.Context().Done()
		}
	default:
		http.NotFound(w, r)
	}
}

func TestExchangeFollowsItsCorrelationAndResumes(t *testing.T) {
	t.Parallel()
	srv := &eventServer{events: []string{
		"5 EVENT_TYPE_MESSAGE_ROUTED other",
		"6 EVENT_TYPE_MESSAGE_ROUTED c1",
	}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c := newClient(ts.URL, "k")
	var shown []string
	// The first connection ends after event 6; the answer is only there
	// on the next one, which must resume after 6.
	turn, err := exchange(context.Background(), c, "sessions/s", "hi", "", 4, func(ev *eventv1.Event) {
		shown = append(shown, ev.GetText())
		srv.mu.Lock()
		srv.events = append(srv.events, "7 EVENT_TYPE_MESSAGE_ANSWERED other", "8 EVENT_TYPE_MESSAGE_ANSWERED c1")
		srv.mu.Unlock()
	})
	require.NoError(t, err)
	require.Equal(t, endAnswered, turn.end)
	require.Equal(t, uint64(8), turn.sequence)
	require.Equal(t, []string{"EVENT_TYPE_MESSAGE_ROUTED c1", "EVENT_TYPE_MESSAGE_ANSWERED c1"}, shown)
	require.Equal(t, "4", srv.resumes[0])
	require.Equal(t, "6", srv.resumes[1], "a dropped stream resumes after the last event")
	require.Len(t, srv.sent, 1, "the message is sent once")
}

func TestChatCtrlCStopsWaitingOnly(t *testing.T) {
	t.Parallel()
	srv := &eventServer{hold: true, events: []string{"3 EVENT_TYPE_MESSAGE_ROUTED c1"}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	interrupts := make(chan os.Signal, 1)
	out := &signalOn{want: "→ ", sig: interrupts}
	e := &env{out: out, errw: out, interrupts: interrupts}
	ch := &chat{e: e, c: newClient(ts.URL, "k"), session: "sessions/s"}
	// The stream stays open without an answer: Ctrl-C ends the wait, and
	// the chat goes on.
	quit, err := ch.handle(context.Background(), "where is it?")
	require.NoError(t, err)
	require.False(t, quit)
	require.Contains(t, out.String(), "(stopped waiting)")
	require.Equal(t, uint64(3), ch.after)
}

// signalOn is a writer that sends an interrupt once it has seen want.
type signalOn struct {
	bytes.Buffer
	want string
	sig  chan os.Signal
	sent bool
}

func (s *signalOn) Write(p []byte) (int, error) {
	n, err := s.Buffer.Write(p)
	if !s.sent && strings.Contains(s.String(), s.want) {
		s.sent = true
		s.sig <- os.Interrupt
	}
	return n, err
}
