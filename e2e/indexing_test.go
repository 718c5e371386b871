package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// largeRepoFiles is how many Go files the generated repositories hold.
const largeRepoFiles = 10000

// largeRepo writes files small Go files, 50 to a package, under a fresh
// directory (not a git work tree: registering a path needs none); one file
// defines marker.
func largeRepo(t *testing.T, files int, marker string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/large\n"), 0o644))
	for i := range files {
		pkg := fmt.Sprintf("pkg%04d", i/50)
		if i%50 == 0 {
			require.NoError(t, os.Mkdir(filepath.Join(dir, pkg), 0o755))
		}
		name := fmt.Sprintf("Compute%05d", i)
		if i == files/2 {
			name = marker
		}
		src := fmt.Sprintf("package %s\n\n// %s adds %d to x.\nfunc %s(x int) int {\n\treturn x + %d\n}\n", pkg, name, i, name, i)
		require.NoError(t, os.WriteFile(filepath.Join(dir, pkg, fmt.Sprintf("f%05d.go", i)), []byte(src), 0o644))
	}
	resolved, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	return resolved
}

// opSnapshot is what the test reads of an operation.
type opSnapshot struct {
	done               bool
	phase              string
	filesDone, chunks  int64
	lexical, semantic  bool
	errCode            float64
	errMessage         string
	repository         map[string]any
	metadataRepository string
	filesTotal         int64
}

func (c *client) operation(name string) opSnapshot {
	c.t.Helper()
	return snapshotOf(c.ok("GET", "/v1/"+name, nil)["operation"].(map[string]any))
}

// snapshotOf reads an operation as REST renders it.
func snapshotOf(op map[string]any) opSnapshot {
	md, _ := op["metadata"].(map[string]any)
	num := func(k string) int64 {
		s, _ := md[k].(string) // int64 travels as a JSON string
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	s := opSnapshot{
		phase: fmt.Sprint(md["phase"]), filesDone: num("filesDone"), filesTotal: num("filesTotal"), chunks: num("chunksDone"),
		metadataRepository: fmt.Sprint(md["repository"]),
	}
	s.done, _ = op["done"].(bool)
	s.lexical, _ = md["lexicalReady"].(bool)
	s.semantic, _ = md["semanticReady"].(bool)
	if e, ok := op["error"].(map[string]any); ok {
		s.errCode, _ = e["code"].(float64)
		s.errMessage, _ = e["message"].(string)
	}
	s.repository, _ = op["repository"].(map[string]any)
	return s
}

// phaseOrder ranks the phases an index goes through.
var phaseOrder = map[string]int{"INDEX_PHASE_CLONING": 1, "INDEX_PHASE_SCANNING": 2, "INDEX_PHASE_LEXICAL": 3,
	"INDEX_PHASE_SYMBOLS": 4, "INDEX_PHASE_SEMANTIC": 5, "INDEX_PHASE_DONE": 6}

// TestIndexingAtScale registers a repository of ten thousand files through
// REST with no flags (the call answers at once: the index is an
// operation), follows its operation to the end (progress only moves
// forward; full-text search works before the embeddings are done), finds a
// symbol in it, then cancels a second registration midway; with wait, a
// registration and an index answer once the index is done; the watch
// stream of an operation sends its progress as lines until it is done.
func TestIndexingAtScale(t *testing.T) {
	c := startMesh(t, "-librarian.watch=false")
	c.http.Timeout = 2 * time.Minute

	t.Run("register, follow, search", func(t *testing.T) {
		dir := largeRepo(t, largeRepoFiles, "ZephyrLedgerBalance")
		start := time.Now()
		resp := c.ok("POST", "/v1/repositories", map[string]any{"path": dir, "displayName": "large"})
		require.Less(t, time.Since(start), 10*time.Second, "registering answers at once")
		opName := resp["operation"].(string)
		require.Regexp(t, `^operations/[0-9a-f-]{36}$`, opName)
		repo := resp["repository"].(map[string]any)
		require.Equal(t, "INDEX_STATE_INDEXING", repo["indexState"])
		require.Equal(t, opName, repo["operation"])
		repoName := repo["name"].(string)
		got := c.ok("GET", "/v1/"+repoName, nil)["repository"].(map[string]any)
		require.Equal(t, opName, got["operation"], "the repository names its operation")

		var last opSnapshot
		lexicalBeforeDone, searchedEarly, polls := false, false, 0
		deadline := time.Now().Add(10 * time.Minute)
		// A client following progress polls at its own pace.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ; ; polls++ {
			require.True(t, time.Now().Before(deadline), "the index did not finish: %+v", last)
			s := c.operation(opName)
			require.Equal(t, repoName, s.metadataRepository)
			require.GreaterOrEqual(t, phaseOrder[s.phase], phaseOrder[last.phase], "phase went back: %s after %s", s.phase, last.phase)
			require.GreaterOrEqual(t, s.filesDone, last.filesDone, "files done went back")
			if s.phase == last.phase {
				require.GreaterOrEqual(t, s.chunks, last.chunks, "chunks done went back within %s", s.phase)
			}
			require.False(t, last.lexical && !s.lexical, "lexical_ready went back")
			if s.lexical && !s.done {
				lexicalBeforeDone = true
				if !searchedEarly {
					// Full-text search works before the embeddings are done.
					searchedEarly = true
					hit := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "ZephyrLedgerBalance",
						"mode": "SEARCH_MODE_LEXICAL", "repositories": []string{repoName}}))
					require.Equal(t, "ZephyrLedgerBalance", hit["symbol"])
				}
			}
			if !s.lexical && !s.done {
				st := c.ok("GET", "/v1/"+repoName, nil)["repository"].(map[string]any)["indexState"]
				require.Equal(t, "INDEX_STATE_INDEXING", st, "a half-indexed repository is not READY")
			}
			last = s
			if s.done {
				break
			}
			<-tick.C
		}
		elapsed := time.Since(start)
		t.Logf("indexed %d files in %s (%d polls)", last.filesDone, elapsed, polls)
		require.Zero(t, last.errCode, last.errMessage)
		require.Equal(t, "INDEX_PHASE_DONE", last.phase)
		require.True(t, last.lexical && last.semantic)
		require.Positive(t, last.chunks, "chunks embedded")
		require.True(t, lexicalBeforeDone, "lexical_ready was seen before done")
		require.GreaterOrEqual(t, last.filesDone, int64(largeRepoFiles))
		require.Equal(t, "INDEX_STATE_READY", last.repository["indexState"])
		files, err := strconv.Atoi(fmt.Sprint(last.repository["fileCount"]))
		require.NoError(t, err)
		require.GreaterOrEqual(t, files, largeRepoFiles, "every Go file is indexed")

		hit := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "ZephyrLedgerBalance", "repositories": []string{repoName}}))
		require.Equal(t, "ZephyrLedgerBalance", hit["symbol"])
		require.Equal(t, fmt.Sprintf("pkg%04d/f%05d.go", largeRepoFiles/2/50, largeRepoFiles/2), hit["path"])
		ops := c.ok("GET", "/v1/operations?repository="+repoName, nil)["operations"].([]any)
		require.Len(t, ops, 1)
		require.Equal(t, opName, ops[0].(map[string]any)["name"])
	})

	t.Run("cancel a registration midway", func(t *testing.T) {
		dir := largeRepo(t, largeRepoFiles, "QuillonCancelMarker")
		resp := c.ok("POST", "/v1/repositories", map[string]any{"path": dir, "displayName": "cancelled"})
		opName := resp["operation"].(string)
		require.Eventually(t, func() bool { return c.operation(opName).filesDone > 0 }, time.Minute, 20*time.Millisecond,
			"the index makes progress")
		c.ok("POST", "/v1/"+opName+":cancel", map[string]any{})
		require.Eventually(t, func() bool { return c.operation(opName).done }, 30*time.Second, 50*time.Millisecond,
			"cancel stops the index promptly")
		s := c.operation(opName)
		require.EqualValues(t, 1, s.errCode, "CANCELLED: %s", s.errMessage)
		require.Contains(t, s.errMessage, "cancelled")
		require.Nil(t, s.repository)
		// A first index cancelled leaves the repository registered and
		// FAILED, saying so; what was not committed is not searchable.
		repoName := resp["repository"].(map[string]any)["name"].(string)
		r := c.ok("GET", "/v1/"+repoName, nil)["repository"].(map[string]any)
		require.Equal(t, "INDEX_STATE_FAILED", r["indexState"])
		require.Contains(t, r["indexError"], "cancelled on request ("+opName+")")
		if !s.lexical {
			search := c.ok("POST", "/v1/code:search", map[string]any{"query": "QuillonCancelMarker", "mode": "SEARCH_MODE_LEXICAL"})
			require.Equal(t, "no_matches", search["status"])
		}
		// Cancelling again is harmless: the operation stays as it ended.
		again := c.ok("POST", "/v1/"+opName+":cancel", map[string]any{})["operation"].(map[string]any)
		require.Equal(t, true, again["done"])
	})

	t.Run("wait blocks until indexed", func(t *testing.T) {
		dir := largeRepo(t, 200, "MerrowWaitMarker")
		resp := c.ok("POST", "/v1/repositories?wait=true", map[string]any{"path": dir, "displayName": "waited"})
		repo := resp["repository"].(map[string]any)
		require.Equal(t, "INDEX_STATE_READY", repo["indexState"], "the response holds the indexed repository")
		files, err := strconv.Atoi(fmt.Sprint(repo["fileCount"]))
		require.NoError(t, err)
		require.GreaterOrEqual(t, files, 200)
		s := c.operation(resp["operation"].(string))
		require.True(t, s.done)
		require.GreaterOrEqual(t, s.filesDone, int64(files))
		name := repo["name"].(string)
		hit := firstHit(t, c.ok("POST", "/v1/code:search", map[string]any{"query": "MerrowWaitMarker", "repositories": []string{name}}))
		require.Equal(t, "MerrowWaitMarker", hit["symbol"])
		idx := c.ok("POST", "/v1/"+name+":index", map[string]any{"full": true, "wait": true})
		require.Equal(t, "INDEX_STATE_READY", idx["repository"].(map[string]any)["indexState"])
		require.Equal(t, strconv.Itoa(files), idx["filesIndexed"], "a waited index has its counts: %v", idx)
		// Without wait, an index answers at once with its operation.
		at := c.ok("POST", "/v1/"+name+":index", map[string]any{"full": true})
		require.Equal(t, "INDEX_STATE_INDEXING", at["repository"].(map[string]any)["indexState"])
		require.Nil(t, at["filesIndexed"], "the counts are the operation's")
		done := c.waitOperation(at["operation"].(string))
		require.Zero(t, done.errCode, done.errMessage)
		require.GreaterOrEqual(t, done.filesDone, int64(files))
	})

	t.Run("watch an operation as a stream", func(t *testing.T) {
		dir := largeRepo(t, 2000, "VantorWatchMarker")
		resp := c.ok("POST", "/v1/repositories", map[string]any{"path": dir, "displayName": "watched"})
		opName := resp["operation"].(string)
		// Another tenant's operation is not found, before any line.
		other := c.asUser("watch-other-tenant", "u1").do("GET", "/v1/"+opName+":watch", nil)
		require.Equal(t, http.StatusNotFound, other.Status, other.Raw)
		require.Contains(t, other.Body["message"], opName)

		lines := c.watchLines(opName)
		require.GreaterOrEqual(t, len(lines), 2, "the state at once, then its changes")
		require.False(t, lines[0].done, "the first line is the running operation")
		for i, l := range lines[:len(lines)-1] {
			require.False(t, l.done, "only the last line is done")
			require.GreaterOrEqual(t, lines[i+1].filesDone, l.filesDone, "files done went back")
		}
		last := lines[len(lines)-1]
		require.True(t, last.done, "the stream ends once the operation is done")
		require.Zero(t, last.errCode, last.errMessage)
		require.Equal(t, "INDEX_PHASE_DONE", last.phase)
		require.GreaterOrEqual(t, last.filesDone, int64(2000))
		require.Equal(t, last.filesTotal, last.filesDone)
		require.Positive(t, last.chunks)
		require.Equal(t, "INDEX_STATE_READY", last.repository["indexState"])
		t.Logf("watched %s: %d lines", opName, len(lines))
	})
}

// watchLines reads GET /v1/{operation}:watch (newline-delimited JSON) to
// its end and returns each line's operation.
func (c *client) watchLines(name string) []opSnapshot {
	c.t.Helper()
	req, err := http.NewRequest("GET", c.base+"/v1/"+name+":watch", nil)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	require.Equal(c.t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	var out []opSnapshot
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 8<<20)
	for sc.Scan() {
		var line struct {
			Result map[string]any `json:"result"`
			Error  map[string]any `json:"error"`
		}
		require.NoError(c.t, json.Unmarshal(sc.Bytes(), &line), "line %s", sc.Bytes())
		require.Nil(c.t, line.Error, "line %s", sc.Bytes())
		out = append(out, snapshotOf(line.Result["operation"].(map[string]any)))
	}
	require.NoError(c.t, sc.Err())
	return out
}

// TestDocumentUploadLimit: a document up to the Academic's limit
// (-academic.max-document-bytes, 2 MiB) passes the gateway, escaped
// newlines and all; a larger one is refused by the Academic, which names
// its limit, not cut by the gateway's general body limit.
func TestDocumentUploadLimit(t *testing.T) {
	c := startMesh(t)
	content := func(n int) string {
		var b strings.Builder
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, "Line %d of a long runbook about ledgers and invoices.\n", i)
		}
		return b.String()[:n]
	}
	doc := c.ok("POST", "/v1/documents", map[string]any{"title": "runbook", "content": content(2<<20 - 1024)})["document"].(map[string]any)
	require.NotEmpty(t, doc["name"])

	r := c.do("POST", "/v1/documents", map[string]any{"title": "too long", "content": content(2<<20 + 1024)})
	require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	require.Contains(t, r.Raw, "at most 2097152 bytes")
}
