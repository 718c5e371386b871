// Package librarian benchmarks the Librarian on the Go standard library
// source: full and delta index time, peak memory, index size, search
// latency, and retrieval quality beside a ripgrep ranked baseline.
package librarian

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/services/librarian"
)

// query is one benchmark question with the definition that answers it.
type query struct {
	kind      string // "doc" or "ident"
	text      string
	path      string
	lineStart int
	lineEnd   int
}

func BenchmarkLibrarianGoSource(b *testing.B) {
	if _, err := exec.LookPath("rg"); err != nil {
		b.Fatal("ripgrep (rg) is required for the baseline: apt-get install -y ripgrep")
	}
	if _, err := exec.LookPath("git"); err != nil {
		b.Fatal("git is required: apt-get install -y git")
	}
	goroot := strings.TrimSpace(run(b, "", "go", "env", "GOROOT"))
	corpus := filepath.Join(b.TempDir(), "src")
	run(b, "", "cp", "-r", filepath.Join(goroot, "src"), corpus)
	run(b, corpus, "git", "init", "-q")
	run(b, corpus, "git", "add", "-A")
	run(b, corpus, "git", "-c", "user.email=bench@sylk.dev", "-c", "user.name=bench", "commit", "-q", "-m", "corpus")
	lines := countLines(b, corpus)
	b.Logf("corpus: %s (%d lines)", corpus, lines)

	queries := buildQueries(b, corpus, 150, 150)
	b.Logf("queries: %d", len(queries))

	pool, schema := testenv.Postgres(b, "librarian", migrations.FS("librarian"))
	svc, err := librarian.New(testenv.FromFlags[librarian.Config](b, "-librarian.allowed-roots", filepath.Dir(corpus)), app.Deps{Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})), DB: pool, Schema: schema})
	require.NoError(b, err)
	ctx := identity.NewContext(context.Background(), identity.Identity{TenantID: "bench", UserID: "u1", Role: identity.RoleAdmin})

	for b.Loop() {
		start, cpuStart := time.Now(), cpuTime()
		created, err := svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
			Repository: &librarianv1.Repository{Path: corpus}, Wait: true})
		require.NoError(b, err)
		full := time.Since(start)
		repo := created.GetRepository()
		b.Logf("full index: %v (%d files, %d chunks; lexical search ready)", full, repo.GetFileCount(), repo.GetChunkCount())
		b.ReportMetric(full.Seconds(), "full_index_s")
		fullCPU := cpuTime() - cpuStart
		svc.WaitVectors()
		ready := time.Since(start)
		readyCPU := cpuTime() - cpuStart
		b.Logf("semantic search ready (HNSW built): %v after the index started", ready)
		b.ReportMetric(ready.Seconds(), "semantic_ready_s")
		// CPU time of this process (PostgreSQL's own is not counted): on a
		// machine shared with other work it shows the cost when wall time
		// mostly shows the load.
		b.Logf("CPU time of the service process: %v to lexical ready, %v to semantic ready", fullCPU.Round(time.Millisecond), readyCPU.Round(time.Millisecond))
		b.ReportMetric(fullCPU.Seconds(), "full_index_cpu_s")
		b.ReportMetric(readyCPU.Seconds(), "semantic_ready_cpu_s")

		var size int64
		require.NoError(b, pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, schema).Scan(&size))
		b.Logf("index size: %.1f MiB in PostgreSQL", float64(size)/(1<<20))
		b.ReportMetric(float64(size)/(1<<20), "index_MiB")

		// Change 10 files and commit them, then index the delta.
		changed := changeFiles(b, corpus, 10)
		run(b, corpus, "git", "-c", "user.email=bench@sylk.dev", "-c", "user.name=bench", "commit", "-q", "-am", "change")
		start = time.Now()
		idx, err := svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
		require.NoError(b, err)
		delta := time.Since(start)
		require.True(b, idx.GetDelta(), "expected a delta index")
		b.Logf("delta index after changing %d files: %v (files re-read %d, chunks embedded %d)", len(changed), delta, idx.GetFilesChanged(), idx.GetChunksEmbedded())
		b.ReportMetric(delta.Seconds(), "delta_index_s")

		for _, mode := range []librarianv1.SearchMode{librarianv1.SearchMode_SEARCH_MODE_HYBRID, librarianv1.SearchMode_SEARCH_MODE_LEXICAL, librarianv1.SearchMode_SEARCH_MODE_SEMANTIC} {
			evaluate(b, ctx, svc, queries, mode)
		}
		baseline(b, corpus, queries)
	}
	b.Logf("peak memory (VmHWM): %s", peakRSS())
}

func evaluate(b *testing.B, ctx context.Context, svc *librarian.Service, queries []query, mode librarianv1.SearchMode) {
	name := strings.ToLower(strings.TrimPrefix(mode.String(), "SEARCH_MODE_"))
	var lat []time.Duration
	var defRanks, fileRanks []int
	byKind := map[string][]int{}
	for _, q := range queries {
		start := time.Now()
		resp, err := svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: q.text, PageSize: 10, Mode: mode, TokenBudget: 100000})
		lat = append(lat, time.Since(start))
		require.NoError(b, err)
		def, file := 0, 0
		for i, h := range resp.GetHits() {
			if file == 0 && h.GetPath() == q.path {
				file = i + 1
			}
			if def == 0 && h.GetPath() == q.path && int(h.GetLineStart()) <= q.lineEnd && int(h.GetLineEnd()) >= q.lineStart {
				def = i + 1
			}
		}
		defRanks, fileRanks = append(defRanks, def), append(fileRanks, file)
		byKind[q.kind] = append(byKind[q.kind], def)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p95 := lat[len(lat)/2], lat[len(lat)*95/100]
	r1, r10, mrr := metrics(defRanks)
	f1, f10, fmrr := metrics(fileRanks)
	b.Logf("%-8s p50 %v p95 %v | definition: recall@1 %.3f recall@10 %.3f MRR@10 %.3f | file: recall@1 %.3f recall@10 %.3f MRR@10 %.3f",
		name, p50.Round(time.Microsecond), p95.Round(time.Microsecond), r1, r10, mrr, f1, f10, fmrr)
	for _, k := range []string{"doc", "ident"} {
		a, c, m := metrics(byKind[k])
		b.Logf("%-8s   %s queries (%d): recall@1 %.3f recall@10 %.3f MRR@10 %.3f", name, k, len(byKind[k]), a, c, m)
	}
	b.ReportMetric(float64(p50.Microseconds())/1000, name+"_p50_ms")
	b.ReportMetric(float64(p95.Microseconds())/1000, name+"_p95_ms")
	b.ReportMetric(mrr, name+"_mrr10")
	b.ReportMetric(r1, name+"_recall1")
	b.ReportMetric(r10, name+"_recall10")
}

// metrics turns 1-based ranks (0 = not in the top 10) into recall@1,
// recall@10 and MRR@10.
func metrics(ranks []int) (float64, float64, float64) {
	if len(ranks) == 0 {
		return 0, 0, 0
	}
	var r1, r10, mrr float64
	for _, r := range ranks {
		if r == 1 {
			r1++
		}
		if r >= 1 && r <= 10 {
			r10++
			mrr += 1 / float64(r)
		}
	}
	n := float64(len(ranks))
	return r1 / n, r10 / n, mrr / n
}

var stop = map[string]bool{"the": true, "and": true, "for": true, "that": true, "with": true, "from": true, "this": true,
	"are": true, "its": true, "not": true, "into": true, "was": true, "which": true, "when": true, "will": true, "has": true, "have": true}

// baseline ranks files by how many distinct query words they contain,
// using ripgrep, and reports file-level quality.
func baseline(b *testing.B, corpus string, queries []query) {
	var ranks []int
	var lat []time.Duration
	for _, q := range queries {
		var words []string
		seen := map[string]bool{}
		for _, w := range strings.FieldsFunc(q.text, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
		}) {
			lw := strings.ToLower(w)
			if len(lw) >= 3 && !stop[lw] && !seen[lw] {
				seen[lw] = true
				words = append(words, lw)
			}
		}
		if len(words) == 0 {
			ranks = append(ranks, 0)
			continue
		}
		args := []string{"-o", "-i", "-w", "-F", "--no-line-number", "--with-filename", "-g", "*.go", "--no-ignore", "--hidden"}
		for _, w := range words {
			args = append(args, "-e", w)
		}
		args = append(args, ".")
		start := time.Now()
		cmd := exec.Command("rg", args...)
		cmd.Dir = corpus
		out, _ := cmd.Output()
		lat = append(lat, time.Since(start))
		distinct := map[string]map[string]bool{}
		for _, l := range bytes.Split(out, []byte("\n")) {
			i := bytes.LastIndexByte(l, ':')
			if i <= 0 {
				continue
			}
			p := strings.TrimPrefix(string(l[:i]), "./")
			if distinct[p] == nil {
				distinct[p] = map[string]bool{}
			}
			distinct[p][strings.ToLower(string(l[i+1:]))] = true
		}
		files := make([]string, 0, len(distinct))
		for p := range distinct {
			files = append(files, p)
		}
		sort.Slice(files, func(i, j int) bool {
			if len(distinct[files[i]]) != len(distinct[files[j]]) {
				return len(distinct[files[i]]) > len(distinct[files[j]])
			}
			return files[i] < files[j]
		})
		r := 0
		for i, p := range files {
			if i == 10 {
				break
			}
			if p == q.path {
				r = i + 1
				break
			}
		}
		ranks = append(ranks, r)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r1, r10, mrr := metrics(ranks)
	b.Logf("ripgrep  p50 %v p95 %v | file: recall@1 %.3f recall@10 %.3f MRR@10 %.3f",
		lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*95/100].Round(time.Microsecond), r1, r10, mrr)
	b.ReportMetric(mrr, "ripgrep_file_mrr10")
}

// buildQueries derives questions from the corpus: the doc comment of an
// exported function with its name removed, and exported identifiers
// defined exactly once.
func buildQueries(b *testing.B, corpus string, nDoc, nIdent int) []query {
	type def struct {
		name, doc, path string
		start, end      int
	}
	var defs []def
	count := map[string]int{}
	err := filepath.WalkDir(corpus, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil || bytes.Contains(src[:min(len(src), 2048)], []byte("DO NOT EDIT")) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, src, parser.ParseComments)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(corpus, p)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				count[d.Name.Name]++
				if d.Recv != nil || !d.Name.IsExported() {
					continue
				}
				defs = append(defs, def{name: d.Name.Name, doc: d.Doc.Text(), path: filepath.ToSlash(rel),
					start: fset.Position(d.Pos()).Line, end: fset.Position(d.End()).Line})
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						count[ts.Name.Name]++
						if ts.Name.IsExported() {
							defs = append(defs, def{name: ts.Name.Name, path: filepath.ToSlash(rel),
								start: fset.Position(ts.Pos()).Line, end: fset.Position(ts.End()).Line})
						}
					}
				}
			}
		}
		return nil
	})
	require.NoError(b, err)
	rng := rand.New(rand.NewSource(1))
	rng.Shuffle(len(defs), func(i, j int) { defs[i], defs[j] = defs[j], defs[i] })
	var out []query
	docs, idents := 0, 0
	for _, d := range defs {
		if docs < nDoc && d.doc != "" {
			text := strings.Join(strings.Fields(strings.ReplaceAll(d.doc, d.name, "")), " ")
			if words := strings.Fields(text); len(words) >= 8 {
				if len(words) > 40 {
					words = words[:40]
				}
				out = append(out, query{kind: "doc", text: strings.Join(words, " "), path: d.path, lineStart: d.start, lineEnd: d.end})
				docs++
				continue
			}
		}
		if idents < nIdent && count[d.name] == 1 && len(d.name) >= 6 {
			out = append(out, query{kind: "ident", text: d.name, path: d.path, lineStart: d.start, lineEnd: d.end})
			idents++
		}
		if docs >= nDoc && idents >= nIdent {
			break
		}
	}
	return out
}

// changeFiles appends a new function to n Go files and returns their paths.
func changeFiles(b *testing.B, corpus string, n int) []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(corpus, "net", "http"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || len(out) == n || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(b, err)
		_, err = fmt.Fprintf(f, "\n// benchChanged%d marks a file changed by the benchmark.\nfunc benchChanged%d() int { return %d }\n", len(out), len(out), len(out))
		require.NoError(b, err)
		require.NoError(b, f.Close())
		out = append(out, p)
		return nil
	})
	require.Len(b, out, n)
	return out
}

func countLines(b *testing.B, root string) int {
	n := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.IsDir() && d.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err == nil {
			n += bytes.Count(data, []byte("\n"))
		}
		return nil
	})
	return n
}

func peakRSS() string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown (" + runtime.GOOS + ")"
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:"))
		}
	}
	return "unknown"
}

func run(b *testing.B, dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(b, err, "%s %v: %s", name, args, out)
	return string(out)
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
