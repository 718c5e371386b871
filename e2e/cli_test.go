package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sylkCLI runs the real sylk binary as a user would, with a home and a
// configuration directory of its own.
type sylkCLI struct {
	t   *testing.T
	bin string
	env []string
	cfg string
}

// newSylkCLI builds cmd/sylk into a temporary directory.
func newSylkCLI(t *testing.T) *sylkCLI {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "sylk.dev/sylk/cmd/sylk")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SYLK_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	return &sylkCLI{t: t, bin: filepath.Join(dir, "sylk"), env: env, cfg: filepath.Join(home, ".config", "sylk", "config.json")}
}

// in is s for a subtest.
func (s *sylkCLI) in(t *testing.T) *sylkCLI {
	c := *s
	c.t = t
	return &c
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// run runs sylk with args, stdin as its input and extra environment
// variables, and returns what it printed and its exit code.
func (s *sylkCLI) run(stdin string, extraEnv []string, args ...string) cliResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append(append([]string{}, s.env...), extraEnv...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(s.t, err, "sylk %v", args)
	}
	return cliResult{stdout: out.String(), stderr: errb.String(), code: code}
}

// ok runs sylk and requires exit 0.
func (s *sylkCLI) ok(args ...string) string {
	s.t.Helper()
	r := s.run("", nil, args...)
	require.Equal(s.t, 0, r.code, "sylk %v\nstdout: %s\nstderr: %s", args, r.stdout, r.stderr)
	return r.stdout
}

// json runs sylk with --json and decodes its output.
func (s *sylkCLI) json(args ...string) map[string]any {
	s.t.Helper()
	out := s.ok(append(args, "--json")...)
	var v map[string]any
	require.NoError(s.t, json.Unmarshal([]byte(out), &v), "sylk %v --json printed %q", args, out)
	return v
}

// config is the stored configuration.
func (s *sylkCLI) config() map[string]any {
	s.t.Helper()
	raw, err := os.ReadFile(s.cfg)
	require.NoError(s.t, err)
	var v map[string]any
	require.NoError(s.t, json.Unmarshal(raw, &v))
	return v
}

func TestCLI(t *testing.T) {
	s := newSylkCLI(t)
	t.Run("help", func(t *testing.T) { testCLIHelp(t, s.in(t)) })
	// A key for the tenant's provider credentials, which sylk providers
	// set stores encrypted.
	credKey := make([]byte, 32)
	_, _ = rand.Read(credKey)
	c := startMesh(t, "-llm.credentials.key", base64.StdEncoding.EncodeToString(credKey))

	// Nothing works before login, with the exit code for it.
	r := s.run("", nil, "repos", "list")
	require.Equal(t, 3, r.code, r.stderr)
	require.Contains(t, r.stderr, "sylk login")

	// A wrong key is refused and nothing is stored.
	r = s.run("sylk_wrongwrongwrongwrongwrongwrongwrongwrong\n", nil, "login", "--server", c.base, "--key-stdin")
	require.Equal(t, 3, r.code, r.stderr)
	require.NoFileExists(t, s.cfg)

	r = s.run(c.key+"\n", nil, "login", "--server", c.base, "--key-stdin")
	require.Equal(t, 0, r.code, r.stderr)
	st, err := os.Stat(s.cfg)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the key is readable by its owner only")
	dst, err := os.Stat(filepath.Dir(s.cfg))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), dst.Mode().Perm())
	require.Equal(t, c.key, s.config()["key"])

	// The repositories outlive the subtest that registers them: runs read
	// them later.
	// The first is a git repository: a plan's run works on a commit.
	first, second := fixtureRepo(t), fixtureRepo(t)
	gitCmd(t, first, "init", "--quiet")
	gitCmd(t, first, "add", "-A")
	gitCmd(t, first, "commit", "--quiet", "-m", "init")
	var repo string
	t.Run("repos and search", func(t *testing.T) { repo = testCLIRepos(t, s.in(t), first, second) })
	t.Run("ask", func(t *testing.T) { testCLIAsk(t, s.in(t), repo) })
	t.Run("plans and runs", func(t *testing.T) { testCLIPlans(t, s.in(t), c) })
	t.Run("keys", func(t *testing.T) { testCLIKeys(t, s.in(t)) })
	t.Run("chat", func(t *testing.T) { testCLIChat(t, s.in(t)) })
	t.Run("docs and history", func(t *testing.T) { testCLIDocsHistory(t, s.in(t)) })
	t.Run("reviews", func(t *testing.T) { testCLIReviews(t, s.in(t)) })
	t.Run("settle", func(t *testing.T) { testCLISettle(t, s.in(t), c, "repositories/"+repo) })
	t.Run("usage and audit", func(t *testing.T) { testCLIUsageAudit(t, s.in(t)) })
	t.Run("providers", func(t *testing.T) { testCLIProviders(t, s.in(t)) })
	t.Run("sessions", func(t *testing.T) { testCLISessions(t, s.in(t), "repositories/"+repo) })
	t.Run("expectations", func(t *testing.T) { testCLIExpectations(t, s.in(t)) })
	t.Run("session context and runs", func(t *testing.T) { testCLISessionContextRuns(t, s.in(t), c) })
}

func testCLIHelp(t *testing.T, s *sylkCLI) {
	for _, args := range [][]string{
		{"-h"}, {"help"}, {"dev", "-h"}, {"serve", "-h"}, {"serve", "guide", "-h"}, {"serve", "gateway", "-h"},
		{"migrate", "-h"}, {"create-api-key", "-h"}, {"list-api-keys", "-h"}, {"revoke-api-key", "-h"},
		{"healthcheck", "-h"}, {"healthcheck", "guide", "-h"},
		{"login", "-h"}, {"logout", "-h"}, {"chat", "-h"}, {"ask", "-h"}, {"search", "-h"},
		{"repos", "-h"}, {"repos", "add", "-h"}, {"repos", "list", "-h"}, {"repos", "show", "-h"}, {"repos", "index", "-h"}, {"repos", "operations", "-h"}, {"repos", "cancel", "-h"},
		{"plans", "-h"}, {"plans", "list", "-h"}, {"plans", "show", "-h"}, {"plans", "approve", "-h"},
		{"plans", "revise", "-h"}, {"plans", "reject", "-h"},
		{"runs", "-h"}, {"runs", "list", "-h"}, {"runs", "show", "-h"}, {"runs", "watch", "-h"},
		{"runs", "logs", "-h"}, {"runs", "cancel", "-h"},
		{"keys", "-h"}, {"keys", "list", "-h"}, {"keys", "create", "-h"}, {"keys", "revoke", "-h"}, {"keys", "rotate", "-h"},
		{"plans", "create", "-h"}, {"runs", "create", "-h"}, {"runs", "pause", "-h"}, {"runs", "resume", "-h"}, {"runs", "settle", "-h"}, {"runs", "decisions", "-h"}, {"runs", "task", "-h"}, {"runs", "bundle", "-h"},
		{"docs", "-h"}, {"docs", "add", "-h"}, {"docs", "list", "-h"}, {"docs", "search", "-h"},
		{"history", "-h"}, {"history", "record", "-h"}, {"history", "search", "-h"}, {"history", "list", "-h"},
		{"reviews", "-h"}, {"reviews", "create", "-h"}, {"reviews", "list", "-h"}, {"reviews", "show", "-h"},
		{"providers", "-h"}, {"providers", "list", "-h"}, {"providers", "set", "-h"}, {"providers", "verify", "-h"},
		{"providers", "delete", "-h"}, {"sessions", "-h"}, {"code", "-h"}, {"code", "symbol", "-h"}, {"code", "similar", "-h"}, {"code", "history", "-h"}, {"code", "tools", "-h"}, {"sessions", "list", "-h"}, {"sessions", "create", "-h"},
		{"sessions", "show", "-h"}, {"sessions", "active", "-h"}, {"sessions", "switch", "-h"}, {"sessions", "suspend", "-h"},
		{"sessions", "resume", "-h"}, {"sessions", "complete", "-h"}, {"sessions", "activate", "-h"}, {"usage", "-h"}, {"audit", "-h"}, {"audit", "list", "-h"}, {"audit", "verify", "-h"},
		{"expectations", "-h"}, {"sessions", "context", "-h"}, {"sessions", "snapshot", "-h"},
	} {
		r := s.run("", nil, args...)
		require.Equal(t, 0, r.code, "sylk %v: %s%s", args, r.stdout, r.stderr)
		require.Contains(t, r.stdout+r.stderr, "sylk", "sylk %v prints help", args)
	}
	// The usage lists both halves of the binary.
	usage := s.ok("-h")
	require.Contains(t, usage, "sylk serve SERVICE")
	require.Contains(t, usage, "sylk ask")
	require.Contains(t, usage, "Exit codes")
	// Usage mistakes exit 2.
	for _, args := range [][]string{{"ask"}, {"runs"}, {"runs", "nope"}, {"serve"}, {"login", "--bogus"}, {"nope"}} {
		require.Equal(t, 2, s.run("", nil, args...).code, "sylk %v", args)
	}
}

// testCLIRepos registers two repositories and returns the first's ID.
func testCLIRepos(t *testing.T, s *sylkCLI, first, second string) string {
	out := s.ok("repos", "add", first, "--name", "fixture", "--wait")
	require.Contains(t, out, "Indexed repositories/")
	list := s.json("repos", "list")
	repos := list["repositories"].([]any)
	require.Len(t, repos, 1)
	require.Equal(t, "INDEX_STATE_READY", repos[0].(map[string]any)["indexState"])
	require.Contains(t, s.ok("repos", "show", repos[0].(map[string]any)["id"].(string)), "ready")

	out = s.ok("search", "ComputeInvoiceTotal")
	require.Contains(t, out, "billing/invoice.go:")
	require.Contains(t, out, "function ComputeInvoiceTotal")
	hits := s.json("search", "ComputeInvoiceTotal", "-n", "3")["hits"].([]any)
	require.Equal(t, "billing/invoice.go", hits[0].(map[string]any)["path"])

	// Without --wait the operation is named, and can be looked at.
	out = s.ok("repos", "add", second, "--name", "second")
	require.Contains(t, out, "sylk repos show operations/")
	op := strings.Fields(out[strings.Index(out, "operations/"):])[0]
	require.Eventually(t, func() bool {
		return strings.Contains(s.ok("repos", "show", op), " done: ")
	}, 60*time.Second, 200*time.Millisecond)
	require.Equal(t, 4, s.run("", nil, "repos", "show", "01a222c5-0000-7000-8000-000000000000").code)

	// Indexed again (a delta from the last commit), its operations listed;
	// an unknown operation cannot be cancelled.
	id := repos[0].(map[string]any)["id"].(string)
	require.Contains(t, s.ok("repos", "index", id, "--wait"), "Indexed repositories/"+id)
	ops := s.ok("repos", "operations", id)
	require.GreaterOrEqual(t, strings.Count(ops, "operations/"), 2, ops)
	require.Equal(t, 4, s.run("", nil, "repos", "cancel", "01a222c5-0000-7000-8000-000000000000").code)
	require.Contains(t, s.ok("search", "ComputeInvoiceTotal", "--mode", "lexical"), "billing/invoice.go:")
	require.Equal(t, 2, s.run("", nil, "search", "x", "--mode", "fuzzy").code)

	// A symbol, the commits that changed it, similar ones, the tools.
	require.Contains(t, s.ok("code", "symbol", id, "ComputeInvoiceTotal"), "billing/invoice.go:3-10")
	sym := s.json("code", "symbol", id, "ComputeInvoiceTotal")["symbol"].(map[string]any)["id"].(string)
	require.Contains(t, s.ok("code", "history", id, "--symbol", sym), " init")
	s.ok("code", "similar", id, sym)
	require.Contains(t, s.ok("code", "tools", id), "formatters:")
	require.Equal(t, 2, s.run("", nil, "code", "history", id).code, "history needs --symbol or --path")
	require.Equal(t, 4, s.run("", nil, "code", "symbol", id, "NoSuchThing").code)
	return id
}

func testCLIAsk(t *testing.T, s *sylkCLI, repo string) {
	const question = "where is the function ComputeInvoiceTotal defined in the code?"
	// Two repositories and a session on neither: the Guide asks which one.
	// The choices are printed and the exit code says so.
	r := s.run("", nil, "ask", question)
	require.Equal(t, 6, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "1) fixture")
	require.NotEmpty(t, s.config()["session"], "the session is kept for the next command")
	hint := r.stderr[strings.Index(r.stderr, "--reply-to "):]
	clarification := strings.Fields(hint)[1]

	// Answering the clarification gets the answer, with its sources.
	out := s.ok("ask", "--reply-to", clarification, "1")
	require.Contains(t, out, "billing/invoice.go:3-10", "the answer names its sources with lines")
	require.Contains(t, out, "answered by the librarian")

	ev := s.json("ask", question, "--repo", repo)
	require.Equal(t, "EVENT_TYPE_MESSAGE_ANSWERED", ev["type"])
	require.Equal(t, "librarian", ev["source"])
	out = s.ok("ask", question)
	require.Contains(t, out, "billing/invoice.go:3-10", "the session keeps its repository")

	// A message no agent is sure of asks who should answer.
	r = s.run("", nil, "ask", "hello there")
	require.Equal(t, 6, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "1) ")
}

func testCLIPlans(t *testing.T, s *sylkCLI, c *client) {
	session := s.config()["session"].(string)
	out := s.ok("plans", "create", "add a /version endpoint to the gateway", "--criterion", "GET /version answers")
	require.Contains(t, out, "awaiting_approval")
	require.Contains(t, out, "sylk plans approve "+session+"/plans/")
	require.Equal(t, 2, s.run("", nil, "plans", "create").code, "a plan needs a request")
	plans := s.json("plans", "list")["plans"].([]any)
	require.Len(t, plans, 1)
	plan := plans[0].(map[string]any)["name"].(string)
	require.Contains(t, s.ok("plans", "list"), plan)
	out = s.ok("plans", "show", plan)
	require.Contains(t, out, "awaiting_approval")
	require.Contains(t, out, "sylk plans approve "+plan)
	// The plan's ID alone is enough within the current session.
	require.Contains(t, s.ok("plans", "show", plan[strings.LastIndex(plan, "/")+1:]), "version 1")

	require.Equal(t, 2, s.run("", nil, "plans", "revise", plan).code, "revise needs --feedback")
	require.Contains(t, s.ok("plans", "revise", plan, "--feedback", "also add a test"), "version 2")

	// Approved and watched: offline, nothing writes code, which is no failure.
	out = s.ok("plans", "approve", plan, "--watch")
	require.Contains(t, out, "run runs/")
	require.Contains(t, out, "no_changes")

	// A run that fails: watch exits 7, logs show each step's output.
	run := c.ok("POST", "/v1/runs", map[string]any{"dag": map[string]any{"nodes": []any{
		map[string]any{"id": "a", "command": "echo alpha"},
		map[string]any{"id": "b", "dependsOn": []string{"a"}, "command": "echo oops >&2; exit 3"},
	}}})["run"].(map[string]any)["name"].(string)
	r := s.run("", nil, "runs", "watch", run)
	require.Equal(t, 7, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "exit 3")
	logs := s.ok("runs", "logs", run)
	require.Contains(t, logs, "alpha")
	require.Contains(t, logs, "oops")
	require.Contains(t, s.ok("runs", "list"), run)
	shown := s.json("runs", "show", run)["run"].(map[string]any)
	require.Equal(t, "RUN_STATE_FAILED", shown["state"])
	require.Equal(t, 4, s.run("", nil, "runs", "show", "01a222c5-0000-7000-8000-000000000000").code)

	// A long run cancelled: watching it then exits 7 too.
	long := c.ok("POST", "/v1/runs", map[string]any{"dag": map[string]any{"nodes": []any{
		map[string]any{"id": "slow", "command": "sleep 60"},
	}}})["run"].(map[string]any)["name"].(string)
	require.Contains(t, s.ok("runs", "cancel", long), long)
	r = s.run("", nil, "runs", "watch", long, "--timeout", "60s")
	require.Equal(t, 7, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "cancelled")
}

func testCLIKeys(t *testing.T, s *sylkCLI) {
	created := s.json("keys", "create", "--user", "cli-user", "--description", "from the cli test")
	key := created["key"].(string)
	id := created["apiKey"].(map[string]any)["id"].(string)
	require.Contains(t, s.ok("keys", "list"), id)

	asNew := []string{"SYLK_API_KEY=" + key}
	r := s.run("", asNew, "repos", "list", "--json")
	require.Equal(t, 0, r.code, r.stderr)

	// Rotating gives a new key for the same user; with a grace period the
	// old one works until it ends, and is listed as rotating meanwhile.
	rotated := s.json("keys", "rotate", id, "--grace", "1h")
	newKey := rotated["key"].(string)
	newID := rotated["apiKey"].(map[string]any)["id"].(string)
	require.NotEqual(t, key, newKey)
	require.Equal(t, "cli-user", rotated["apiKey"].(map[string]any)["userId"])
	require.Contains(t, s.ok("keys", "list"), "rotating")
	asRotated := []string{"SYLK_API_KEY=" + newKey}
	require.Equal(t, 0, s.run("", asRotated, "repos", "list").code)
	require.Equal(t, 0, s.run("", asNew, "repos", "list").code, "the old key works during its grace period")

	require.Contains(t, s.ok("keys", "revoke", id), "Revoked")
	require.Contains(t, s.ok("keys", "revoke", newID), "Revoked")
	for _, as := range [][]string{asNew, asRotated} {
		require.Eventually(t, func() bool {
			return s.run("", as, "repos", "list").code == 3
		}, 10*time.Second, 100*time.Millisecond, "a revoked key is refused with exit code 3")
	}
}

func testCLIDocsHistory(t *testing.T, s *sylkCLI) {
	doc := filepath.Join(t.TempDir(), "style.md")
	require.NoError(t, os.WriteFile(doc, []byte("# Errors\nWrap them with context.\n\n# Logging\nUse slog.\n"), 0o644))
	out := s.ok("docs", "add", doc)
	require.Contains(t, out, "Added documents/")
	require.Contains(t, out, `"style"`, "the title defaults to the file's name")
	r := s.run("# Review\nTwo approvals.\n", nil, "docs", "add", "-", "--title", "Process")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 2, s.run("", nil, "docs", "add", "-").code, "standard input needs --title")
	list := s.ok("docs", "list")
	require.Contains(t, list, "style")
	require.Contains(t, list, "Process")
	out = s.ok("docs", "search", "wrap errors")
	require.Contains(t, out, "style > Errors")
	hits := s.json("docs", "search", "approvals")["hits"].([]any)
	require.Equal(t, "Process", hits[0].(map[string]any)["documentTitle"])
	require.Equal(t, 2, s.run("", nil, "docs", "search").code)

	out = s.ok("history", "record", "--category", "decision", "--title", "Use PostgreSQL for the store", "it has the JSON we need")
	require.Contains(t, out, "Recorded entries/")
	r = s.run("the parser was rewritten\n", nil, "history", "record", "--category", "note", "--title", "Parser rewrite", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 2, s.run("", nil, "history", "record", "--title", "no category").code)
	require.Eventually(t, func() bool {
		return strings.Contains(s.ok("history", "search", "postgresql"), "Use PostgreSQL for the store")
	}, 20*time.Second, 100*time.Millisecond, "the entry is found")
	hit := s.json("history", "search", "parser", "--category", "note")["hits"].([]any)[0].(map[string]any)
	require.Equal(t, "Parser rewrite", hit["entry"].(map[string]any)["title"])
	require.Contains(t, hit["entry"].(map[string]any)["content"], "the parser was rewritten")
	out = s.ok("history", "list", "--category", "decision", "--window", "today")
	require.Contains(t, out, "Use PostgreSQL for the store")
	require.NotContains(t, out, "Parser rewrite")
}

func testCLIReviews(t *testing.T, s *sylkCLI) {
	// A patch of generated files alone is reviewed without a model: every
	// file is excluded.
	patch := filepath.Join(t.TempDir(), "gen.patch")
	require.NoError(t, os.WriteFile(patch, []byte("diff --git a/gen/api.pb.go b/gen/api.pb.go\n--- a/gen/api.pb.go\n"+
		"+++ b/gen/api.pb.go\n@@ -1 +1 @@\n-package api\n+package api // v2\n"), 0o644))
	out := s.ok("reviews", "create", "--patch", patch, "--persona", "quick")
	require.Contains(t, out, "reviews/")
	require.Contains(t, out, "done")
	require.Contains(t, out, "outcome: all_files_excluded")
	name := strings.Fields(out)[0]
	require.Contains(t, s.ok("reviews", "list"), name)
	shown := s.json("reviews", "show", strings.TrimPrefix(name, "reviews/"))["review"].(map[string]any)
	require.Equal(t, "REVIEW_STATE_DONE", shown["state"])
	require.Equal(t, 2, s.run("", nil, "reviews", "create").code, "a review needs --repo or --patch")
	require.Equal(t, 4, s.run("", nil, "reviews", "show", "01a222c5-0000-7000-8000-000000000000").code)
}

// testCLISettle settles a failed run's partial work from the command line.
func testCLISettle(t *testing.T, s *sylkCLI, c *client, repo string) {
	// The run is started from its JSON, as POST /v1/runs takes it.
	spec := `{"repository": "` + repo + `", "dag": {"nodes": [
		{"id": "doc", "edits": [{"path": "NOTES.md", "content": "partial\n"}]}, {"id": "bad", "command": "exit 4"}]}}`
	r := s.run(spec, nil, "runs", "create", "-", "--watch")
	require.Equal(t, 7, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	run := strings.Fields(r.stdout)[0]
	require.True(t, strings.HasPrefix(run, "runs/"), r.stdout)
	require.Equal(t, 2, s.run(`{"dag": {"nodes": [{"id": "a", "comand": "x"}]}}`, nil, "runs", "create", "-").code, "a misspelt field is refused")
	out := s.ok("runs", "settle", run)
	require.Contains(t, out, "failed steps bad (permanent)")
	require.Contains(t, out, "sylk runs settle "+run+" rollback")

	out = s.ok("runs", "settle", run, "keep")
	require.Contains(t, out, "Settled "+run+": keep.")
	require.Contains(t, out, "kept:      doc")
	require.Contains(t, out, "files changed: 1")
	kept := s.json("runs", "show", run)["run"].(map[string]any)
	require.Contains(t, kept["resultPatch"], "+partial")

	// default takes the run's suggestion: rolling back.
	out = s.ok("runs", "settle", run, "default")
	require.Contains(t, out, "Settled "+run+": rollback.")
	require.Contains(t, out, "discarded: doc")
	require.Equal(t, 2, s.run("", nil, "runs", "settle", run, "later").code)

	require.Contains(t, s.ok("runs", "decisions", run), "## Task bad (attempt 1): failed")

	// A delivered run's branch: its patch, and a bundle to fetch.
	spec = `{"repository": "` + repo + `", "deliver": true, "dag": {"nodes": [
		{"id": "doc", "edits": [{"path": "DELIVERED.md", "content": "delivered\n"}]}]}}`
	r = s.run(spec, nil, "runs", "create", "-", "--watch")
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	delivered := strings.Fields(r.stdout)[0]
	// Delivery follows the run's success: until it is done, bundle says to
	// ask again (exit 1).
	var patch cliResult
	require.Eventually(t, func() bool {
		patch = s.run("", nil, "runs", "bundle", delivered, "--patch")
		return patch.code == 0
	}, 60*time.Second, 200*time.Millisecond, "the run is delivered: %s", patch.stderr)
	require.Contains(t, patch.stdout, "+delivered")
	bundle := filepath.Join(t.TempDir(), "run.bundle")
	require.Contains(t, s.ok("runs", "bundle", delivered, "-o", bundle), "sylk/")
	st, err := os.Stat(bundle)
	require.NoError(t, err)
	require.Positive(t, st.Size())
	require.Equal(t, 2, s.run("", nil, "runs", "bundle", delivered).code, "bundle needs -o or --patch")

	// Pause and resume take a run too; a run that ended cannot be settled.
	// The long run is in the current session: cancelling the session's runs
	// stops it.
	session := strings.TrimPrefix(s.config()["session"].(string), "sessions/")
	long := c.createRun(map[string]any{"sessionId": session, "dag": map[string]any{"nodes": []any{map[string]any{"id": "slow", "command": "sleep 60"}}}})
	require.Contains(t, s.ok("runs", "pause", long), long)
	require.Contains(t, s.ok("runs", "resume", long), long)
	require.Contains(t, s.ok("runs", "task", long, "slow", "query"), long+" slow: ")
	require.Equal(t, 2, s.run("", nil, "runs", "task", long, "slow", "dance").code)
	require.Contains(t, s.ok("runs", "cancel", "--session", session), "Cancelled "+long)
	r = s.run("", nil, "runs", "watch", long, "--timeout", "60s", "--json")
	require.Equal(t, 7, r.code, r.stderr)
	require.Contains(t, r.stdout, "RUN_STATE_CANCELLED")
	ok := c.createRun(map[string]any{"dag": map[string]any{"nodes": []any{map[string]any{"id": "a", "command": "true"}}}})
	require.Equal(t, 0, s.run("", nil, "runs", "watch", ok).code)
	r = s.run("", nil, "runs", "settle", ok, "keep")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "only a FAILED or CANCELLED run")
}

func testCLIUsageAudit(t *testing.T, s *sylkCLI) {
	require.Contains(t, s.ok("usage", "--by", "provider"), "total")
	require.Contains(t, s.json("usage"), "currency")

	// The keys subtest created and revoked keys: the audit log has them.
	out := s.ok("audit", "list", "--action", "api_key.created", "--since", "1h")
	require.Contains(t, out, "api_key.created")
	require.NotContains(t, out, "api_key.revoked")
	require.Contains(t, s.ok("audit", "list"), "api_key.revoked")
	require.Contains(t, s.ok("audit", "verify"), "Intact")
	require.Equal(t, true, s.json("audit", "verify")["intact"])
}

func testCLIProviders(t *testing.T, s *sylkCLI) {
	out := s.ok("providers", "list")
	require.Contains(t, out, "local")
	require.Contains(t, out, "(default)")
	require.Equal(t, 2, s.run("sk-x\n", nil, "providers", "set", "anthropic").code, "the key comes from standard input only")

	r := s.run("sk-cli-test-key\n", nil, "providers", "set", "anthropic", "--key-stdin", "--skip-verify")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "Stored the tenant's key for anthropic")
	list := s.json("providers", "list")
	require.NotContains(t, fmt.Sprint(list), "sk-cli-test-key", "keys are never shown")
	require.Contains(t, s.ok("providers", "list"), "key: tenant")
	require.Contains(t, s.ok("providers", "delete", "anthropic"), "Removed")
	require.Equal(t, 4, s.run("", nil, "providers", "delete", "anthropic").code)
}

func testCLISessions(t *testing.T, s *sylkCLI, repo string) {
	old := s.config()["session"].(string)
	require.Contains(t, s.ok("sessions", "list"), "* "+old, "the current session is marked")

	out := s.ok("sessions", "create", "--name", "cli sessions", "--repo", repo)
	require.Contains(t, out, "cli sessions")
	require.Contains(t, out, "repository: "+repo)
	created := s.config()["session"].(string)
	require.NotEqual(t, old, created, "a new session becomes the current one")
	require.Contains(t, s.ok("sessions", "show"), created)

	require.Contains(t, s.ok("sessions", "suspend"), "suspended")
	require.Equal(t, "SESSION_STATE_SUSPENDED", s.json("sessions", "show", created)["session"].(map[string]any)["state"])
	require.NotContains(t, s.ok("sessions", "resume"), "suspended")

	// Switching makes another session the active one, here and on the server.
	s.ok("sessions", "switch", old)
	require.Equal(t, old, s.config()["session"])
	require.Contains(t, s.ok("sessions", "active"), old)
	require.Contains(t, s.ok("sessions", "complete", created), "completed")
	require.Contains(t, s.ok("sessions", "list", "--state", "completed"), created)
	require.Equal(t, 2, s.run("", nil, "sessions", "list", "--state", "sleeping").code)
	require.Equal(t, 4, s.run("", nil, "sessions", "show", "01a222c5-0000-7000-8000-000000000000").code)
}

func testCLIExpectations(t *testing.T, s *sylkCLI) {
	out := s.ok("expectations", "add a logout button")
	require.Contains(t, out, "authentication/logout")
	require.Contains(t, out, "source local")
	require.Contains(t, out, "required    session termination")
	require.Contains(t, out, "confirmation if unsaved")

	// A constraint rules an expectation out.
	out = s.ok("expectations", "add a logout button", "--constraint", "skip confirmation")
	require.Contains(t, out, "session termination")
	require.NotContains(t, out, "confirmation if unsaved")
	got := s.json("expectations", "add", "a", "logout", "button", "--constraint", "skip confirmation")
	require.Equal(t, "authentication/logout", got["domain"])
	require.Equal(t, "local", got["source"])
	require.NotEmpty(t, got["expectations"])

	require.Contains(t, s.ok("expectations", "fix the typo in the README"), "No feature domain recognised")
	require.Contains(t, s.ok("expectations", "--domain", "authentication/logout"), "confidence 0.90")
	require.Equal(t, 2, s.run("", nil, "expectations").code, "a request is needed")
	require.Equal(t, 2, s.run("", nil, "expectations", "--constraint", "x").code)
}

// testCLISessionContextRuns reads a session's context and snapshot, and
// pauses, resumes and cancels every run of the session.
func testCLISessionContextRuns(t *testing.T, s *sylkCLI, c *client) {
	s.ok("sessions", "create", "--name", "cli context")
	name := s.config()["session"].(string)
	out := s.ok("sessions", "context")
	require.Contains(t, out, name+"  context version 0")
	require.Contains(t, out, "(empty)")
	c.ok("PATCH", "/v1/"+name+"/context", map[string]any{"version": 0, "context": map[string]any{
		"currentTask": "rotate the signing keys", "nextSteps": []string{"publish the new key", "retire the old one"}}})
	out = s.ok("sessions", "context", name)
	require.Contains(t, out, "context version 1")
	require.Contains(t, out, "task:              rotate the signing keys")
	require.Contains(t, out, "next steps:        publish the new key, retire the old one")
	got := s.json("sessions", "context")
	require.Equal(t, "rotate the signing keys", got["context"].(map[string]any)["currentTask"])
	require.Equal(t, 2, s.run("", nil, "sessions", "context", name, name).code)
	require.Equal(t, 4, s.run("", nil, "sessions", "context", "01a222c5-0000-7000-8000-000000000000").code)

	// Every run of the session is paused, then resumed.
	session := strings.TrimPrefix(name, "sessions/")
	long := c.createRun(map[string]any{"sessionId": session, "dag": map[string]any{"nodes": []any{map[string]any{"id": "slow", "command": "sleep 60"}}}})
	require.Contains(t, s.ok("runs", "pause", "--session", session), "Paused "+long+".")
	require.Equal(t, "RUN_STATE_PAUSED", s.json("runs", "show", long)["run"].(map[string]any)["state"])
	require.Contains(t, s.ok("runs", "resume", "--session", name), "Resumed "+long+".")
	require.NotEqual(t, "RUN_STATE_PAUSED", s.json("runs", "show", long)["run"].(map[string]any)["state"])
	require.Contains(t, s.json("runs", "pause", "--session", session)["runs"], long)
	require.Contains(t, s.ok("runs", "pause", "--session", session), "No runs of "+name+" to pause.", "the run is paused already")
	require.Equal(t, 2, s.run("", nil, "runs", "pause").code, "a run or --session is needed")
	require.Equal(t, 2, s.run("", nil, "runs", "resume", "--session", session, "--node", "slow").code)

	// No snapshot until the session is suspended; then it holds the context
	// and the run.
	require.Equal(t, 4, s.run("", nil, "sessions", "snapshot").code)
	s.ok("sessions", "suspend")
	out = s.ok("sessions", "snapshot")
	require.Contains(t, out, name)
	require.Contains(t, out, "taken:")
	require.Contains(t, out, "task:              rotate the signing keys")
	require.Contains(t, out, "Run "+long)
	snap := s.json("sessions", "snapshot", name)["snapshot"].(map[string]any)
	require.Equal(t, "rotate the signing keys", snap["context"].(map[string]any)["currentTask"])
	s.ok("sessions", "resume")
	require.Contains(t, s.ok("sessions", "snapshot"), "restored:")

	require.Contains(t, s.ok("runs", "cancel", "--session", session), "Cancelled "+long)
	r := s.run("", nil, "runs", "watch", long, "--timeout", "60s")
	require.Equal(t, 7, r.code, r.stderr)
}
