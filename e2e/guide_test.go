package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGuideSessions drives the session lifecycle, switching, snapshots and
// isolation through REST (spec A-13..A-20; acceptance behaviours 12-15; isolation, 16, is covered by the service tests).
func TestGuideSessions(t *testing.T) {
	c := startMesh(t)

	// 12: created -> active -> suspended -> active -> completed, with times.
	s := c.ok("POST", "/v1/sessions?startInactive=true", map[string]any{"displayName": "lifecycle",
		"config": map[string]any{"maxConcurrentTasks": 2, "autoSuspendAfter": "600s"}})["session"].(map[string]any)
	name := s["name"].(string)
	require.Equal(t, "SESSION_STATE_CREATED", s["state"])
	require.EqualValues(t, 2, s["config"].(map[string]any)["maxConcurrentTasks"])
	require.Equal(t, "600s", s["config"].(map[string]any)["autoSuspendAfter"])
	r := c.do("POST", "/v1/"+name+":suspend", map[string]any{})
	require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	require.Equal(t, "FAILED_PRECONDITION", r.Body["status"])
	require.Contains(t, r.Body["message"], "session is created; cannot suspend (allowed only from active)")
	act := c.ok("POST", "/v1/"+name+":activate", map[string]any{})["session"].(map[string]any)
	require.NotEmpty(t, act["activateTime"])

	// The context, then a suspend/resume round trip (15).
	ctxBody := map[string]any{"currentTask": "add caching", "nextSteps": []string{"measure", "write"}, "modifiedFiles": []string{"cache.go"}}
	up := c.ok("PATCH", "/v1/"+name+"/context", map[string]any{"context": ctxBody, "version": 0})
	require.EqualValues(t, "1", fmt.Sprint(up["version"]))
	stale := c.do("PATCH", "/v1/"+name+"/context", map[string]any{"context": ctxBody, "version": 0})
	require.Equal(t, http.StatusConflict, stale.Status, stale.Raw)
	// Free-form context nests only so deep: deeper would not decode inside
	// the snapshot later.
	for depth, want := range map[int]string{40: "context.extra: nested", 5000: "exceeded max recursion depth"} {
		deep := `{"version": 1, "context": {"extra": {"a": ` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}}`
		r := c.do("PATCH", "/v1/"+name+"/context", deep)
		require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
		require.Contains(t, r.Raw, want)
	}
	susp := c.ok("POST", "/v1/"+name+":suspend", map[string]any{})["session"].(map[string]any)
	require.NotEmpty(t, susp["suspendTime"])
	snap := c.ok("GET", "/v1/"+name+"/snapshot", nil)["snapshot"].(map[string]any)
	require.Equal(t, "add caching", snap["context"].(map[string]any)["currentTask"])
	require.Empty(t, snap["dagError"], "the orchestrator answered")
	c.ok("POST", "/v1/"+name+":resume", map[string]any{})
	got := c.ok("GET", "/v1/"+name+"/context", nil)
	require.Equal(t, ctxBody["currentTask"], got["context"].(map[string]any)["currentTask"])
	require.Equal(t, []any{"measure", "write"}, got["context"].(map[string]any)["nextSteps"])
	done := c.ok("POST", "/v1/"+name+":complete", map[string]any{"summary": "done"})["session"].(map[string]any)
	require.NotEmpty(t, done["completeTime"])
	require.Len(t, done["transitions"], 5)

	// 13: illegal transitions name the states.
	for _, tt := range []struct{ verb, want string }{
		{"resume", "session is completed; cannot resume (allowed only from suspended)"},
		{"suspend", "session is completed; cannot suspend"},
	} {
		r := c.do("POST", "/v1/"+name+":"+tt.verb, map[string]any{})
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Contains(t, r.Body["message"], tt.want)
	}

	// Text with NUL is refused at the edge, for every service and field.
	for _, tc := range []struct {
		path, field string
		body        map[string]any
	}{
		{"/v1/sessions", "session.displayName", map[string]any{"displayName": "a\x00b"}},
		{"/v1/" + name + "/messages", "text", map[string]any{"text": "hi\x00there"}},
		{"/v1/code:search", "query", map[string]any{"query": "x\x00"}},
	} {
		r := c.do("POST", tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.path, r.Raw)
		require.Equal(t, tc.field+": must not contain NUL", r.Body["message"], tc.path)
	}

	// 14: switching suspends the active session and activates the target.
	a := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "A"})["session"].(map[string]any)
	b := c.ok("POST", "/v1/sessions?startInactive=true", map[string]any{"displayName": "B"})["session"].(map[string]any)
	sw := c.ok("POST", "/v1/"+b["name"].(string)+":switch", map[string]any{})
	require.Equal(t, "SESSION_STATE_ACTIVE", sw["session"].(map[string]any)["state"])
	require.Equal(t, a["id"], sw["suspended"].([]any)[0].(map[string]any)["id"])
	active := c.ok("GET", "/v1/sessions:active", nil)["session"].(map[string]any)
	require.Equal(t, b["id"], active["id"])
	require.Equal(t, "SESSION_STATE_SUSPENDED", c.ok("GET", "/v1/"+a["name"].(string), nil)["session"].(map[string]any)["state"])
}

// TestGuideRouting drives the routing tiers through REST (spec A-25..A-39;
// acceptance behaviours 1, 19-23).
func TestGuideRouting(t *testing.T) {
	c := startMesh(t)
	repo := authRepo(t)
	c.registerIndexed(map[string]any{"path": repo, "displayName": "auth"})
	s := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "routing"})["session"].(map[string]any)
	name := s["name"].(string)
	send := func(text string, extra ...string) map[string]any {
		body := map[string]any{"text": text}
		if len(extra) > 0 {
			body["inReplyTo"] = extra[0]
		}
		return c.ok("POST", "/v1/"+name+"/messages", body)
	}

	// 19: slash commands are answered by the Guide itself.
	for _, cmd := range []string{"/session list", "/status", "/help", "/tasks"} {
		r := send(cmd)
		route := r["route"].(map[string]any)
		require.Equal(t, "guide", route["target"], cmd)
		require.Equal(t, "slash_command", route["tier"], cmd)
		require.NotEmpty(t, r["reply"], cmd)
	}

	// 20: the routing table, with the knowledge metadata.
	for _, tt := range []struct{ text, target, intent, knowledge, subject, scope string }{
		{"fix typo in README", "architect", "TRIVIAL", "", "", ""},
		{"How would I design a rate limiter?", "academic", "EXPLORATORY", "", "", ""},
		{"how did we handle the auth migration last month", "archivalist", "EXPLORATORY", "HISTORICAL", "auth_migration", "last_month"},
		{"Add caching to the search endpoint, careful about memory", "architect", "EXPLICIT", "", "", ""},
		// Ordinary phrasing (issue 24), routed without a question.
		{"explain how CopyFrom works", "librarian", "EXPLORATORY", "EXPLAIN", "", ""},
		{"find the function that parses durations", "librarian", "EXPLORATORY", "LOCATE", "", ""},
		{"what failed recently?", "archivalist", "EXPLORATORY", "GENERAL", "", "recent"},
		{"what do our docs say about error handling?", "academic", "EXPLORATORY", "", "", ""},
		{"what is Main", "librarian", "EXPLORATORY", "", "", ""},
	} {
		route := send(tt.text)["route"].(map[string]any)
		require.Equal(t, tt.target, route["target"], tt.text)
		require.Equal(t, tt.intent, route["intentType"], tt.text)
		if tt.knowledge != "" {
			require.Equal(t, tt.knowledge, route["knowledgeIntent"], tt.text)
			scope, _ := route["timeScope"].(string) // absent when empty
			require.Equal(t, tt.scope, scope, tt.text)
		}
	}

	// 22: the librarian's answer to a confident query is cached by intent
	// and subject.
	first := send("where is the auth middleware")
	route := first["route"].(map[string]any)
	require.Equal(t, "librarian", route["target"])
	require.Equal(t, "LOCATE", route["knowledgeIntent"])
	corr := first["correlationId"].(string)
	c.waitEvent(name, func(e map[string]any) bool {
		return e["type"] == "EVENT_TYPE_MESSAGE_ANSWERED" && e["source"] == "librarian" && e["correlationId"] == corr
	})
	var second map[string]any
	require.Eventually(t, func() bool {
		second = send("Where is the auth middleware?")
		return second["route"].(map[string]any)["cached"] == true
	}, 20*time.Second, 100*time.Millisecond, "the answer is cached once the correlator has seen it")
	require.Equal(t, "cache", second["route"].(map[string]any)["tier"])
	require.Contains(t, second["reply"], "auth/middleware.go")

	// 21: low confidence asks the user; the answer routes the request.
	ask := send("hello there")
	require.Empty(t, ask["route"].(map[string]any)["target"])
	require.Equal(t, "AMBIGUOUS", ask["route"].(map[string]any)["intentType"])
	clar := c.ok("GET", "/v1/"+name+"/clarifications", nil)["clarifications"].([]any)
	require.Len(t, clar, 1)
	ans := send("the librarian", clar[0].(map[string]any)["name"].(string))
	require.Equal(t, "librarian", ans["route"].(map[string]any)["target"])
	require.Empty(t, c.ok("GET", "/v1/"+name+"/clarifications", nil)["clarifications"])

	// The question numbers its choices; a plain reply answers it, no id.
	ask = send("hello there")
	require.Contains(t, ask["reply"], "1. search this codebase (librarian)")
	ans = send("the code one")
	require.Equal(t, "librarian", ans["route"].(map[string]any)["target"])
	require.Equal(t, "clarification", ans["route"].(map[string]any)["tier"])
	require.Empty(t, c.ok("GET", "/v1/"+name+"/clarifications", nil)["clarifications"])

	// 23: a routing failure is stored, found, fed to the Archivalist and
	// lowers the accuracy.
	f := c.ok("POST", "/v1/routingFailures", map[string]any{"originalRequest": "How would I design a rate limiter?",
		"routedTo": "academic", "shouldHaveBeen": "architect", "failureSignal": "ROUTING_FAILURE_SIGNAL_EXPLICIT_REDIRECT",
		"classifiedAs": "EXPLORATORY", "sessionId": s["id"]})["failure"].(map[string]any)
	require.True(t, strings.HasPrefix(f["id"].(string), "route_fail_"))
	found := c.ok("GET", "/v1/routingFailures?requestPattern="+url.QueryEscape("rate limiter design"), nil)["failures"].([]any)
	redirects := 0
	for _, x := range found {
		if x.(map[string]any)["failureSignal"] == "ROUTING_FAILURE_SIGNAL_EXPLICIT_REDIRECT" {
			redirects++
		}
	}
	require.Equal(t, 1, redirects, "failures: %v", found)
	// A failure holds its user's message: another member sees only their
	// own, the tenant's admin all of them.
	other := c.asUser("default", "failure-neighbour")
	theirs := other.ok("POST", "/v1/routingFailures", map[string]any{"originalRequest": "Where is the payroll export?",
		"routedTo": "academic", "shouldHaveBeen": "librarian", "failureSignal": "ROUTING_FAILURE_SIGNAL_USER_CORRECTION"})["failure"].(map[string]any)
	seen := other.ok("GET", "/v1/routingFailures?limit=100", nil)["failures"].([]any)
	require.Len(t, seen, 1, "another member's failures: %v", seen)
	require.Equal(t, theirs["id"], seen[0].(map[string]any)["id"])
	all := c.ok("GET", "/v1/routingFailures?limit=100", nil)["failures"].([]any)
	require.Len(t, all, 2)
	after := c.ok("GET", "/v1/routing:accuracy", nil)
	require.Less(t, after["accuracy"].(float64), 1.0)
	require.EqualValues(t, "1", fmt.Sprint(after["bySignal"].(map[string]any)["EXPLICIT_REDIRECT"]))
	pair := false
	for _, p := range after["misroutes"].([]any) {
		m := p.(map[string]any)
		pair = pair || m["routedTo"] == "academic" && m["shouldHaveBeen"] == "architect"
	}
	require.True(t, pair, "misroute pairs: %v", after["misroutes"])
	c.archived("routing failure academic", "routing_failure", 1, nil)
	bad := c.do("POST", "/v1/routingFailures", map[string]any{"originalRequest": "x", "routedTo": "nobody", "shouldHaveBeen": "academic",
		"failureSignal": "ROUTING_FAILURE_SIGNAL_EXPLICIT_REDIRECT"})
	require.Equal(t, http.StatusBadRequest, bad.Status)

	// Dead letters list through REST (empty: everything was delivered).
	dl := c.ok("GET", "/v1/deadLetters", nil)
	require.Empty(t, dl["deadLetters"])
}

// TestGuideRecording records a session's queries and replays them (spec E-07).
func TestGuideRecording(t *testing.T) {
	c := startMesh(t)
	s := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "rec"})["session"].(map[string]any)
	name := s["name"].(string)
	rec := c.ok("POST", "/v1/"+name+"/recordings", map[string]any{"displayName": "demo"})["recording"].(map[string]any)
	c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "/status"})
	c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "How would I design a rate limiter?"})
	stopped := c.ok("POST", "/v1/"+rec["name"].(string)+":stop", map[string]any{})["recording"].(map[string]any)
	require.EqualValues(t, 2, stopped["queryCount"])
	list := c.ok("GET", "/v1/"+name+"/recordings", nil)["recordings"].([]any)
	require.Len(t, list, 1)
	dry := c.ok("POST", "/v1/"+rec["name"].(string)+":replay", map[string]any{"mode": "REPLAY_MODE_DRY_RUN"})
	results := dry["results"].([]any)
	require.Len(t, results, 2)
	require.Equal(t, "academic", results[1].(map[string]any)["route"].(map[string]any)["target"])
	inter := c.ok("POST", "/v1/"+rec["name"].(string)+":replay", map[string]any{})["state"].(map[string]any)
	step := c.ok("POST", "/v1/"+inter["name"].(string)+":step", map[string]any{"action": "skip"})
	require.Equal(t, "skipped", step["result"].(map[string]any)["action"])
	step = c.ok("POST", "/v1/"+inter["name"].(string)+":step", map[string]any{"action": "continue"})
	require.Equal(t, "sent", step["result"].(map[string]any)["action"])
	require.Equal(t, true, step["state"].(map[string]any)["done"])
	bad := c.do("POST", "/v1/"+inter["name"].(string)+":step", map[string]any{"action": "dance"})
	require.Equal(t, http.StatusBadRequest, bad.Status)
}

// authRepo is a repository with an auth middleware to find.
func authRepo(t *testing.T) string {
	dir := t.TempDir()
	files := map[string]string{
		"auth/middleware.go": "package auth\n\n// Middleware is the auth middleware: it checks the API key of every request.\nfunc Middleware() {}\n",
		"README.md":          "# Auth\n",
	}
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return dir
}

// TestGuideIsolation drives session isolation through REST with three API
// keys (spec; acceptance behaviour 16): another user of the
// tenant, and a user of another tenant, can neither see, switch to, post to
// nor read the events of a user's session; each answer is NOT_FOUND, the
// same as for a session that does not exist, so nothing reveals that it
// does. History crosses sessions only through the Archivalist's explicit
// cross-session queries, and never crosses tenants.
func TestGuideIsolation(t *testing.T) {
	admin := startMesh(t)
	alice := admin.asUser("default", "alice")
	bob := admin.asUser("default", "bob")
	carol := admin.asUser("other", "carol")

	s1 := alice.ok("POST", "/v1/sessions", map[string]any{"displayName": "alice's"})["session"].(map[string]any)
	name := s1["name"].(string)
	alice.ok("PATCH", "/v1/"+name+"/context", map[string]any{"context": map[string]any{"currentTask": "rotate the signing keys"}, "version": 0})
	alice.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "/help"})
	before := alice.ok("GET", "/v1/"+name+"/messages", nil)["messages"].([]any)
	missing := "sessions/00000000-0000-4000-8000-000000000000"

	for _, other := range []struct {
		who string
		c   *client
	}{{"another user of the tenant", bob}, {"a user of another tenant", carol}} {
		// The other user's own session works, so the refusals below are
		// about alice's session, not about the key.
		own := other.c.ok("POST", "/v1/sessions", map[string]any{"displayName": "own"})["session"].(map[string]any)
		other.c.ok("POST", "/v1/"+own["name"].(string)+"/messages", map[string]any{"text": "/help"})
		for _, req := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/v1/" + name, nil},
			{"POST", "/v1/" + name + ":switch", map[string]any{}},
			{"POST", "/v1/" + name + ":suspend", map[string]any{}},
			{"POST", "/v1/" + name + ":complete", map[string]any{}},
			{"POST", "/v1/" + name + "/messages", map[string]any{"text": "show me the signing keys"}},
			{"GET", "/v1/" + name + "/messages", nil},
			{"GET", "/v1/" + name + "/events", nil},
			{"GET", "/v1/" + name + "/context", nil},
			{"PATCH", "/v1/" + name + "/context", map[string]any{"context": map[string]any{"currentTask": "x"}, "version": 1}},
			{"GET", "/v1/" + name + "/snapshot", nil},
			{"GET", "/v1/" + name + "/clarifications", nil},
			{"GET", "/v1/" + name + "/recordings", nil},
		} {
			r := other.c.do(req.method, req.path, req.body)
			require.Equal(t, http.StatusNotFound, r.Status, "%s: %s %s: %s", other.who, req.method, req.path, r.Raw)
			require.Equal(t, "NOT_FOUND", r.Body["status"])
			// The same answer as a session that does not exist.
			path := strings.Replace(req.path, name, missing, 1)
			m := other.c.do(req.method, path, req.body)
			require.Equal(t, r.Status, m.Status, "%s %s", req.method, path)
			require.Equal(t, strings.Replace(r.Body["message"].(string), name, missing, 1), m.Body["message"], "%s %s", req.method, path)
		}
		// Nor can they put a run or a history entry in it.
		for _, req := range []struct {
			path string
			body map[string]any
		}{
			{"/v1/runs", map[string]any{"sessionId": s1["id"], "dag": map[string]any{"nodes": []any{map[string]any{"id": "a", "command": "true"}}}}},
			{"/v1/entries", map[string]any{"category": "decision", "title": "Planted", "content": "not alice's", "sessionId": s1["id"]}},
		} {
			r := other.c.do("POST", req.path, req.body)
			require.Equal(t, http.StatusNotFound, r.Status, "%s: POST %s: %s", other.who, req.path, r.Raw)
			require.Equal(t, "session "+name+" not found", r.Body["message"], other.who)
		}
		// The event stream (SSE) is refused too.
		req, err := http.NewRequest("GET", other.c.base+"/v1/"+name+"/events:stream?format=sse", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+other.c.key)
		resp, err := other.c.http.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s: event stream", other.who)
		// Alice's session is not listed, and is not their active session.
		for _, s := range other.c.ok("GET", "/v1/sessions", nil)["sessions"].([]any) {
			require.NotEqual(t, s1["id"], s.(map[string]any)["id"], other.who)
		}
		active := other.c.ok("GET", "/v1/sessions:active", nil)["session"].(map[string]any)
		require.Equal(t, own["id"], active["id"], other.who)
	}

	// Nothing the others tried reached alice's session.
	got := alice.ok("GET", "/v1/"+name, nil)["session"].(map[string]any)
	require.Equal(t, "SESSION_STATE_ACTIVE", got["state"])
	require.Len(t, alice.ok("GET", "/v1/"+name+"/messages", nil)["messages"].([]any), len(before))
	require.Equal(t, "rotate the signing keys", alice.ok("GET", "/v1/"+name+"/context", nil)["context"].(map[string]any)["currentTask"])

	// A second session of alice's starts with its own, empty context: the
	// first one's is not visible from it.
	s2 := alice.ok("POST", "/v1/sessions", map[string]any{"displayName": "alice's second"})["session"].(map[string]any)
	ctx2 := alice.ok("GET", "/v1/"+s2["name"].(string)+"/context", nil)["context"].(map[string]any)
	require.Empty(t, ctx2["currentTask"])
	// History recorded in the first session is found from the second only by
	// an explicit cross-session query of the Archivalist.
	alice.ok("POST", "/v1/entries", map[string]any{"category": "decision", "title": "Rotate signing keys monthly",
		"content": "We decided to rotate the signing keys every month.", "sessionId": s1["id"]})
	scoped := alice.ok("POST", "/v1/entries:search", map[string]any{"query": "rotate signing keys", "sessionId": s2["id"]})
	require.Empty(t, scoped["hits"], "a session-scoped search stays in its session")
	cross := alice.ok("POST", "/v1/entries:search", map[string]any{"query": "rotate signing keys", "crossSession": true})
	require.NotEmpty(t, cross["hits"], "the explicit cross-session query finds it")
	// Another tenant's cross-session query does not.
	foreign := carol.ok("POST", "/v1/entries:search", map[string]any{"query": "rotate signing keys", "crossSession": true})
	require.Empty(t, foreign["hits"])
}
