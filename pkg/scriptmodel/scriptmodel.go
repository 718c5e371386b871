// Package scriptmodel is a language-model server that plays scripts: an
// HTTP server speaking the providers' real wire formats (OpenAI chat
// completions and Anthropic messages, streamed or not, with tool calls), so
// that the real provider clients drive an agent loop through it unchanged.
// Tests and the agent harness use it where no model is reachable.
//
// A script is a list of turns for one conversation: each turn is the
// assistant's text and tool calls, and may first check what the tool results
// of the previous turn contained. The server is stateless per request: the
// conversation is recognised by its first user message (a script's Match),
// and the turn to play is the number of assistant messages the request
// already holds. A retried request gets the same turn again.
package scriptmodel

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
)

// Script is the assistant's side of one conversation.
type Script struct {
	// Match selects the conversation: the first script whose Match is
	// contained in the request's first user message (or system prompt)
	// plays it. "" matches every conversation.
	Match string
	Turns []Turn
	// MaxPromptTokens, when positive, rejects a request whose prompt is
	// estimated above it as too long (HTTP 400, context_length_exceeded),
	// as a provider rejects a prompt over its model's context window; the
	// request takes no turn.
	MaxPromptTokens int
}

// Turn is one assistant answer.
type Turn struct {
	// Expect lists texts the messages since the last assistant turn (the
	// tool results it asked for, or the user's feedback) must contain; a
	// missing one is a failure of the script (see Server.Failures).
	Expect []string
	// Reject lists texts those messages must not contain.
	Reject []string
	Text   string
	Calls  []Call
}

// Call is a tool call of a turn.
type Call struct {
	Name string
	// Args are the call's arguments, marshalled to JSON as they are.
	Args map[string]any
}

// Say is a turn of text only.
func Say(text string) Turn { return Turn{Text: text} }

// Tool is a turn with one tool call.
func Tool(name string, args map[string]any) Turn {
	return Turn{Calls: []Call{{Name: name, Args: args}}}
}

// Then adds expectations on what the turn before it got back.
func (t Turn) Then(expect ...string) Turn {
	t.Expect = append(t.Expect, expect...)
	return t
}

// Request is what the server saw of one request, in the provider-neutral
// form the scripts are matched with.
type Request struct {
	// API is "openai" or "anthropic".
	API    string
	Model  string
	Stream bool
	System string
	// Messages are the conversation so far.
	Messages []Message
	// Tools are the names of the tools offered.
	Tools []string
}

// Message is one message of a request.
type Message struct {
	// Role is "user", "assistant" or "tool".
	Role    string
	Content string
	// Calls are an assistant message's tool calls.
	Calls []Call
	// IsError marks a tool result that reports a failure.
	IsError bool
}

// Server plays scripts over HTTP.
type Server struct {
	mu       sync.Mutex
	scripts  []Script
	requests []Request
	failures []string
	srv      *http.Server
	ln       net.Listener
	// URL is the server's base URL (no path): OpenAI clients take URL+"/v1",
	// Anthropic clients URL.
	URL string
}

// New starts a server on a loopback port with scripts.
func New(scripts ...Script) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{scripts: scripts, ln: ln, URL: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.openAI)
	mux.HandleFunc("POST /chat/completions", s.openAI)
	mux.HandleFunc("POST /v1/messages", s.anthropic)
	mux.HandleFunc("GET /v1/models", s.models)
	s.srv = &http.Server{Handler: mux}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Add adds scripts; they are matched after the ones already there.
func (s *Server) Add(scripts ...Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts = append(s.scripts, scripts...)
}

// Requests returns every request seen, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Failures returns what went against the scripts: a conversation no script
// matched, a turn past a script's end, an expectation not met.
func (s *Server) Failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// answer is what the server replies to one request.
type answer struct {
	text  string
	calls []Call
	usage usage
	// tooLong, when set, is the rejection of a prompt over the script's
	// MaxPromptTokens.
	tooLong string
}

type usage struct{ in, out int }

// play finds the request's script and turn and returns the turn's answer;
// anything against the script is recorded and answered with a text that
// ends the conversation.
func (s *Server) play(r Request) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
	u := usage{in: promptTokens(r)}
	fail := func(format string, a ...any) answer {
		msg := fmt.Sprintf(format, a...)
		s.failures = append(s.failures, msg)
		text := "scriptmodel: " + msg
		return answer{text: text, usage: usage{in: u.in, out: tokens(text)}}
	}
	first := firstUser(r)
	script := -1
	for i, sc := range s.scripts {
		if strings.Contains(first, sc.Match) || (r.System != "" && sc.Match != "" && strings.Contains(r.System, sc.Match)) {
			script = i
			break
		}
	}
	if script < 0 {
		return fail("no script matches the conversation starting %q", clip(first, 120))
	}
	if limit := s.scripts[script].MaxPromptTokens; limit > 0 && u.in > limit {
		return answer{tooLong: fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.", limit, u.in)}
	}
	turn := assistantTurns(r)
	turns := s.scripts[script].Turns
	if turn >= len(turns) {
		return fail("script %q has %d turns; the conversation asks for turn %d", s.scripts[script].Match, len(turns), turn+1)
	}
	t := turns[turn]
	since := sinceAssistant(r)
	for _, e := range t.Expect {
		if !strings.Contains(since, e) {
			return fail("script %q turn %d expected %q in what came back, got %q", s.scripts[script].Match, turn+1, e, clip(since, 400))
		}
	}
	for _, e := range t.Reject {
		if strings.Contains(since, e) {
			return fail("script %q turn %d did not expect %q in what came back, got %q", s.scripts[script].Match, turn+1, e, clip(since, 400))
		}
	}
	out := tokens(t.Text)
	for _, c := range t.Calls {
		out += tokens(c.Name) + tokens(argsJSON(c))
	}
	return answer{text: t.Text, calls: t.Calls, usage: usage{in: u.in, out: max(out, 1)}}
}

func firstUser(r Request) string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return m.Content
		}
	}
	return ""
}

func assistantTurns(r Request) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// sinceAssistant joins the messages after the last assistant message.
func sinceAssistant(r Request) string {
	start := 0
	for i, m := range r.Messages {
		if m.Role == "assistant" {
			start = i + 1
		}
	}
	var b strings.Builder
	for _, m := range r.Messages[start:] {
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// tokens estimates a text's tokens as the offline provider counts them.
func tokens(s string) int { return (len(s) + 3) / 4 }

func promptTokens(r Request) int {
	n := tokens(r.System)
	for _, m := range r.Messages {
		n += tokens(m.Content) + 4
		for _, c := range m.Calls {
			n += tokens(c.Name) + tokens(argsJSON(c))
		}
	}
	return max(n, 1)
}

func argsJSON(c Call) string {
	if c.Args == nil {
		return "{}"
	}
	b, err := json.Marshal(c.Args)
	if err != nil {
		return "{}"
	}
	return string(b)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// models answers a model listing (the clients' verify call).
func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"scripted","object":"model","created":1,"owned_by":"scriptmodel"}]}`))
}

// badRequest answers a request the server cannot read, in the shape both
// APIs use for errors.
func badRequest(w http.ResponseWriter, err error) { invalidRequest(w, err.Error(), "") }

// invalidRequest answers HTTP 400 with message (and code, when set) in the
// shape both APIs use for errors.
func invalidRequest(w http.ResponseWriter, message, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	e := map[string]any{"type": "invalid_request_error", "message": message}
	if code != "" {
		e["code"] = code
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": e})
	_, _ = w.Write(b)
}

// rejected answers a's rejection, when it is one.
func rejected(w http.ResponseWriter, a answer) bool {
	if a.tooLong == "" {
		return false
	}
	invalidRequest(w, a.tooLong, "context_length_exceeded")
	return true
}

// sse writes server-sent events.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) event(name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		return
	}
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	if s.f != nil {
		s.f.Flush()
	}
}

func (s *sse) raw(data string) {
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	if s.f != nil {
		s.f.Flush()
	}
}
