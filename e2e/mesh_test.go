// Package e2e boots the whole Sylk mesh against the real PostgreSQL, Redis
// and NATS and drives it only through the REST gateway.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"sylk.dev/sylk/gateway"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	"sylk.dev/sylk/internal/mesh"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/redisx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/topology"
)

// client talks to the gateway.
type client struct {
	t    *testing.T
	base string
	key  string
	http *http.Client
	// schemaPrefix is the mesh's, for helpers that need the database.
	schemaPrefix string
	// metricsURL serves every service's metrics.
	metricsURL string
	// services is each service's gRPC address.
	services map[string]string
}

type response struct {
	Status int
	Body   map[string]any
	Raw    string
}

func (c *client) do(method, path string, body any) response {
	c.t.Helper()
	return c.doKey(c.key, method, path, body)
}

func (c *client) doKey(key, method, path string, body any) response {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		require.NoError(c.t, err)
		r = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	require.NoError(c.t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	out := response{Status: resp.StatusCode, Raw: string(raw)}
	if len(raw) > 0 && raw[0] == '{' {
		require.NoError(c.t, json.Unmarshal(raw, &out.Body), "body: %s", raw)
	}
	return out
}

// archived waits until a cross-session search of the Archivalist for query
// in category finds n entries that keep accepts (nil accepts all), and
// returns them.
func (c *client) archived(query, category string, n int, keep func(entry map[string]any) bool) []map[string]any {
	c.t.Helper()
	var found []map[string]any
	require.Eventually(c.t, func() bool {
		r := c.ok("POST", "/v1/entries:search", map[string]any{"query": query, "crossSession": true, "category": category})
		hits, _ := r["hits"].([]any)
		found = found[:0]
		for _, h := range hits {
			if e := h.(map[string]any)["entry"].(map[string]any); keep == nil || keep(e) {
				found = append(found, e)
			}
		}
		return len(found) >= n
	}, 20*time.Second, 100*time.Millisecond, "%s %q reaches the archivalist", category, query)
	return found
}

func (c *client) ok(method, path string, body any) map[string]any {
	c.t.Helper()
	r := c.do(method, path, body)
	require.Equal(c.t, http.StatusOK, r.Status, "%s %s: %s", method, path, r.Raw)
	return r.Body
}

// startMesh boots every service and the gateway with an isolated schema
// prefix, Redis prefix and NATS prefix, and tears them down after the test.
// flags are added to the mesh's own.
func startMesh(t *testing.T, flags ...string) *client {
	t.Helper()
	id := testenv.ID()
	prefix := "e2e" + id + "_"
	natsPrefix := "e" + id
	redisPrefix := "sylktest:" + id
	cfg := testenv.FromFlags[mesh.DevConfig](t, append([]string{
		"-postgres.dsn", testenv.PostgresDSN(),
		"-postgres.schema-prefix", prefix,
		"-redis.url", testenv.RedisURL(),
		"-redis.prefix", redisPrefix,
		"-nats.url", testenv.NATSURL(),
		"-nats.prefix", natsPrefix,
		"-gateway.listen-address", "127.0.0.1:0",
		"-log.level", "warn",
		// Tests register their temporary directories.
		"-librarian.allowed-roots", os.TempDir(),
		// Task commands run as in production: in namespaces of their own,
		// without the host's network, as the task user when root.
		"-toolexec.task-init", testenv.TaskInit(t),
	}, flags...)...)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	d, err := mesh.StartDev(ctx, cfg, logs)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, d.Wait())
		if t.Failed() {
			t.Logf("mesh logs:\n%s", logs.String())
		}
		dropSchemas(t, prefix)
		bus, err := natsx.Connect(context.Background(), natsx.Config{URL: testenv.NATSURL(), Prefix: natsPrefix}, logx.Discard(), "e2e-cleanup")
		if err == nil {
			testenv.CleanupStreams(t, bus)
			bus.Conn.Close()
		}
		if rc, err := redisx.Open(context.Background(), redisx.Config{URL: testenv.RedisURL(), Prefix: redisPrefix}); err == nil {
			keys, _ := rc.Keys(context.Background(), redisPrefix+":*").Result()
			if len(keys) > 0 {
				rc.Del(context.Background(), keys...)
			}
			_ = rc.Close()
		}
	})
	return &client{t: t, base: d.GatewayURL, key: d.AdminKey, http: &http.Client{Timeout: 30 * time.Second}, schemaPrefix: prefix,
		metricsURL: d.MetricsURL, services: d.ServiceAddrs}
}

// metric sums the samples of a metric across the services' metrics.
func (c *client) metric(name string) float64 {
	c.t.Helper()
	resp, err := c.http.Get(c.metricsURL)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			require.NoError(c.t, err, line)
			sum += v
		}
	}
	return sum
}

// asUser returns a client of the same mesh acting as another user (a member
// of tenant), with an API key created the way `sylk create-api-key` does.
func (c *client) asUser(tenant, user string) *client {
	c.t.Helper()
	ctx := context.Background()
	pool, err := mesh.OpenSchema(ctx, pgstore.Config{DSN: testenv.PostgresDSN(), MaxConns: 1}, c.schemaPrefix, "auth")
	require.NoError(c.t, err)
	defer pool.Close()
	key, err := gateway.CreateAPIKey(ctx, pool, tenant, user, identity.RoleMember, "e2e "+user)
	require.NoError(c.t, err)
	other := *c
	other.key = key
	return &other
}

func dropSchemas(t *testing.T, prefix string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresDSN())
	if err != nil {
		t.Errorf("drop schemas: %v", err)
		return
	}
	defer conn.Close(ctx)
	for _, s := range mesh.Schemas {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{mesh.Schema(prefix, s)}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	}
}

// events returns the session's events after seq. Each must decode into
// the typed event, strictly (no field the message does not have), and carry
// the payload its type names.
func (c *client) events(session string, after uint64) []map[string]any {
	c.t.Helper()
	body := c.ok("GET", fmt.Sprintf("/v1/%s/events?afterSequence=%d&pageSize=1000", session, after), nil)
	raw, _ := body["events"].([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, e := range raw {
		typedEvent(c.t, e)
		out = append(out, e.(map[string]any))
	}
	return out
}

// typedEvent decodes an event as REST renders it into the typed message.
func typedEvent(t testing.TB, e any) *eventv1.Event {
	t.Helper()
	b, err := json.Marshal(e)
	require.NoError(t, err)
	ev := &eventv1.Event{}
	require.NoError(t, protojson.Unmarshal(b, ev), "event %s", b)
	require.NoError(t, topology.CheckEvent(ev), "event %s", b)
	return ev
}

// payload is the payload field of an event as REST renders it.
func payload(e map[string]any, field string) map[string]any {
	p, _ := e[field].(map[string]any)
	return p
}

func seqOf(e map[string]any) uint64 {
	var n uint64
	_, _ = fmt.Sscan(fmt.Sprint(e["sequence"]), &n)
	return n
}

// waitEvent waits until an event matching match appears and returns it.
func (c *client) waitEvent(session string, match func(map[string]any) bool) map[string]any {
	c.t.Helper()
	var found map[string]any
	require.Eventually(c.t, func() bool {
		for _, e := range c.events(session, 0) {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no matching event on %s", session)
	return found
}

func (c *client) waitRun(run string) map[string]any {
	c.t.Helper()
	var last map[string]any
	require.Eventually(c.t, func() bool {
		last = c.ok("GET", "/v1/"+run, nil)["run"].(map[string]any)
		s := last["state"]
		return s == "RUN_STATE_SUCCEEDED" || s == "RUN_STATE_FAILED" || s == "RUN_STATE_CANCELLED" || s == "RUN_STATE_NO_CHANGES"
	}, 60*time.Second, 50*time.Millisecond, "run %s did not finish", run)
	return last
}

func TestMeshEndToEnd(t *testing.T) {
	c := startMesh(t)

	// A session, and /help answered by the Guide itself.
	sess := c.ok("POST", "/v1/sessions", map[string]any{"displayName": "e2e"})["session"].(map[string]any)
	name := sess["name"].(string)
	require.Equal(t, "SESSION_STATE_ACTIVE", sess["state"])
	help := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "/help"})
	require.Contains(t, help["reply"], "/status")
	require.Equal(t, "guide", help["route"].(map[string]any)["target"])

	// A code question answered by the Librarian from a fixture repository.
	repoDir := fixtureRepo(t)
	repo := c.registerIndexed(map[string]any{"path": repoDir, "displayName": "fixture"})
	require.Equal(t, "INDEX_STATE_READY", repo["indexState"])
	q := c.ok("POST", "/v1/"+name+"/messages", map[string]any{"text": "where is the function ComputeInvoiceTotal defined in the code?"})
	require.Equal(t, "librarian", q["route"].(map[string]any)["target"])
	corr := q["correlationId"].(string)
	answer := c.waitEvent(name, func(e map[string]any) bool {
		return e["type"] == "EVENT_TYPE_MESSAGE_ANSWERED" && e["source"] == "librarian" && e["correlationId"] == corr
	})
	require.Contains(t, answer["text"], "billing/invoice.go")
	hits := payload(answer, "messageAnswered")["hits"].([]any)
	require.NotEmpty(t, hits)
	require.Equal(t, "billing/invoice.go", hits[0].(map[string]any)["path"])

	// A history entry stored and found again.
	sessID := sess["id"].(string)
	c.ok("POST", "/v1/entries", map[string]any{"category": "decision", "title": "Keep history in PostgreSQL", "content": "We chose PostgreSQL full-text search for the history store.", "sessionId": sessID})
	found := c.ok("POST", "/v1/entries:search", map[string]any{"query": "history store", "sessionId": sessID})
	require.NotEmpty(t, found["hits"])
	require.Equal(t, "Keep history in PostgreSQL", found["hits"].([]any)[0].(map[string]any)["entry"].(map[string]any)["title"])

	// A plan drafted, approved, and run by the orchestrator.
	plan := c.ok("POST", "/v1/"+name+"/plans", map[string]any{"request": "add a /version endpoint to the gateway"})["plan"].(map[string]any)
	require.Equal(t, "PLAN_STATE_AWAITING_APPROVAL", plan["state"])
	require.NotEmpty(t, plan["dag"].(map[string]any)["nodes"])
	approved := c.ok("POST", "/v1/"+plan["name"].(string)+":approve", map[string]any{})
	require.Equal(t, "PLAN_STATE_APPROVED", approved["plan"].(map[string]any)["state"])
	// Offline, nothing writes the code: the run says so, and is not
	// SUCCEEDED.
	planRun := c.waitRun(approved["run"].(map[string]any)["name"].(string))
	require.Equal(t, "RUN_STATE_NO_CHANGES", planRun["state"], "run: %v", planRun)
	for _, n := range planRun["nodes"].([]any) {
		require.Equal(t, "NODE_STATE_NO_CHANGES", n.(map[string]any)["state"])
		require.Contains(t, n.(map[string]any)["error"], "no language model is configured")
	}

	// A 3-node DAG of shell commands: c after a and b.
	run := c.ok("POST", "/v1/runs", map[string]any{
		"sessionId":      sessID,
		"maxConcurrency": 2,
		"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "a", "command": "echo alpha"},
			map[string]any{"id": "b", "command": "echo beta"},
			map[string]any{"id": "c", "dependsOn": []string{"a", "b"}, "command": "echo gamma; exit 0"},
		}},
	})["run"].(map[string]any)
	done := c.waitRun(run["name"].(string))
	require.Equal(t, "RUN_STATE_SUCCEEDED", done["state"], "run: %v", done)
	nodes := map[string]map[string]any{}
	for _, n := range done["nodes"].([]any) {
		nodes[n.(map[string]any)["nodeId"].(string)] = n.(map[string]any)
	}
	require.Equal(t, "alpha\n", nodes["a"]["stdout"])
	require.Equal(t, "gamma\n", nodes["c"]["stdout"])
	cStart := parseTime(t, nodes["c"]["startTime"])
	require.False(t, cStart.Before(parseTime(t, nodes["a"]["endTime"])), "c started before a ended")
	require.False(t, cStart.Before(parseTime(t, nodes["b"]["endTime"])), "c started before b ended")

	// The session's events arrive in order.
	c.waitEvent(name, func(e map[string]any) bool {
		return e["type"] == "EVENT_TYPE_RUN_COMPLETED"
	})
	evs := c.events(name, 0)
	var last uint64
	pos := map[string]int{}
	for i, e := range evs {
		s := seqOf(e)
		require.Greater(t, s, last, "sequence must increase")
		last = s
		key := fmt.Sprint(e["type"], "/", e["correlationId"])
		if _, ok := pos[key]; !ok {
			pos[key] = i
		}
	}
	require.Less(t, pos["EVENT_TYPE_MESSAGE_RECEIVED/"+corr], pos["EVENT_TYPE_MESSAGE_ROUTED/"+corr])
	require.Less(t, pos["EVENT_TYPE_MESSAGE_ROUTED/"+corr], pos["EVENT_TYPE_MESSAGE_ANSWERED/"+corr])
	var completed []string
	for _, e := range evs {
		if e["type"] == "EVENT_TYPE_NODE_COMPLETED" {
			if d := payload(e, "node"); d != nil && d["run"] == run["name"] {
				completed = append(completed, fmt.Sprint(d["node"]))
			}
		}
	}
	require.Len(t, completed, 3)
	require.Equal(t, "c", completed[2], "c completes after a and b")

	// Resuming after a sequence returns only later events.
	mid := seqOf(evs[len(evs)/2])
	for _, e := range c.events(name, mid) {
		require.Greater(t, seqOf(e), mid)
	}

	// The same events as server-sent events.
	sse := readSSE(t, c, name, 3)
	require.Len(t, sse, 3)
	require.Equal(t, fmt.Sprint(seqOf(evs[0])), sse[0].id)
	require.Equal(t, evs[0]["type"], sse[0].event)
}

func TestMeshRejectsBadInput(t *testing.T) {
	c := startMesh(t)
	sess := c.ok("POST", "/v1/sessions", map[string]any{})["session"].(map[string]any)
	name := sess["name"].(string)

	type badInput struct {
		name   string
		key    string
		method string
		path   string
		body   any
		status int
	}
	tests := []badInput{
		{"missing API key", "-", "GET", "/v1/sessions", nil, http.StatusUnauthorized},
		{"wrong API key", "sylk_wrongwrongwrongwrongwrongwrongwrongwrong", "GET", "/v1/sessions", nil, http.StatusUnauthorized},
		{"malformed JSON", "", "POST", "/v1/sessions", `{"displayName": `, http.StatusBadRequest},
		{"unknown field", "", "POST", "/v1/sessions", `{"displayName":"x","colour":"red"}`, http.StatusBadRequest},
		{"unknown session", "", "GET", "/v1/sessions/0193a1b2-0000-7000-8000-000000000000", nil, http.StatusNotFound},
		{"message to unknown session", "", "POST", "/v1/sessions/0193a1b2-0000-7000-8000-000000000000/messages", map[string]any{"text": "hi"}, http.StatusNotFound},
		{"oversized message", "", "POST", "/v1/" + name + "/messages", map[string]any{"text": strings.Repeat("x", 40000)}, http.StatusBadRequest},
		{"empty message", "", "POST", "/v1/" + name + "/messages", map[string]any{"text": "  "}, http.StatusBadRequest},
		{"DAG with a cycle", "", "POST", "/v1/runs", map[string]any{"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "a", "dependsOn": []string{"b"}, "command": "true"},
			map[string]any{"id": "b", "dependsOn": []string{"a"}, "command": "true"},
		}}}, http.StatusBadRequest},
		{"DAG with an unknown dependency", "", "POST", "/v1/runs", map[string]any{"dag": map[string]any{"nodes": []any{
			map[string]any{"id": "a", "dependsOn": []string{"ghost"}, "command": "true"},
		}}}, http.StatusBadRequest},
		{"relative repository path", "", "POST", "/v1/repositories", map[string]any{"path": "relative/dir"}, http.StatusBadRequest},
	}
	// Page tokens carrying a time no row can have, in each service's form.
	const farPast = "-210866803200000001"
	id := "00000000-0000-4000-8000-000000000001"
	for _, tok := range []struct{ name, path, raw string }{
		{"sessions", "/v1/sessions", farPast + "." + id},
		{"messages", "/v1/" + name + "/messages", farPast + "." + id},
		{"plans", "/v1/" + name + "/plans", farPast + "." + id},
		{"runs", "/v1/runs", farPast + "|" + id},
		{"entries", "/v1/entries", farPast + "/" + id},
		{"documents", "/v1/documents", farPast + "/" + id},
	} {
		tests = append(tests, badInput{"forged page token of " + tok.name, "", "GET", tok.path + "?pageToken=" + base64.RawURLEncoding.EncodeToString([]byte(tok.raw)), nil, http.StatusBadRequest})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := c.key
			switch tt.key {
			case "-":
				key = ""
			case "":
			default:
				key = tt.key
			}
			r := c.doKey(key, tt.method, tt.path, tt.body)
			require.Equal(t, tt.status, r.Status, r.Raw)
			require.NotEmpty(t, r.Body["message"], "errors carry a message: %s", r.Raw)
		})
	}

	// Nothing was written by the rejected calls.
	runs := c.ok("GET", "/v1/runs", nil)
	require.Empty(t, runs["runs"])
	msgs := c.ok("GET", "/v1/"+name+"/messages", nil)
	require.Empty(t, msgs["messages"])

	// The OpenAPI document is public.
	r := c.doKey("", "GET", "/openapi.json", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Raw, "/v1/sessions")
}

func fixtureRepo(t *testing.T) string {
	dir := t.TempDir()
	files := map[string]string{
		"billing/invoice.go": `package billing

// ComputeInvoiceTotal adds up the line items of an invoice and applies tax.
func ComputeInvoiceTotal(items []float64, taxRate float64) float64 {
	var sum float64
	for _, it := range items {
		sum += it
	}
	return sum * (1 + taxRate)
}
`,
		"billing/customer.go": "package billing\n\n// Customer is someone who pays invoices.\ntype Customer struct{ Name string }\n",
		"README.md":           "# Fixture\n\nA tiny repository for the end-to-end test.\n",
	}
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return dir
}

func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(v))
	require.NoError(t, err)
	return ts
}

type sseEvent struct{ id, event, data string }

// readSSE reads n events from the session's server-sent event stream.
func readSSE(t *testing.T, c *client, session string, n int) []sseEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/"+session+"/events:stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() && len(out) < n {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}
