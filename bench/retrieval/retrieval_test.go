// Package retrieval measures the Librarian's ranking on hand-judged
// questions over a corpus available offline: the pgx driver from the
// module cache and a few standard library packages. It reports MRR@10,
// recall@1 and recall@10 per query kind and search mode.
package retrieval

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/services/librarian"
)

// pgxModule is the pgx version read from the module cache (the project's
// own dependency, so `go mod download` brings it).
const pgxModule = "github.com/jackc/pgx/v5"

// stdPackages are the standard library directories copied into the corpus.
var stdPackages = []string{"database/sql", "encoding/json", "net/url", "flag", "bufio"}

func BenchmarkRetrieval(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Fatal("git is required: apt-get install -y git")
	}
	corpus := buildCorpus(b)
	spans := resolve(b, corpus)

	pool, schema := testenv.Postgres(b, "librarian", migrations.FS("librarian"))
	svc, err := librarian.New(testenv.FromFlags[librarian.Config](b, "-librarian.allowed-roots", filepath.Dir(corpus)),
		app.Deps{Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), DB: pool, Schema: schema})
	require.NoError(b, err)
	ctx := identity.NewContext(context.Background(), identity.Identity{TenantID: "bench", UserID: "u1", Role: identity.RoleAdmin})

	for b.Loop() {
		created, err := svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
			Repository: &librarianv1.Repository{Path: corpus}, Wait: true})
		require.NoError(b, err)
		b.Logf("corpus: %d files, %d chunks; embedder: the service's default (offline hashing)",
			created.GetRepository().GetFileCount(), created.GetRepository().GetChunkCount())
		svc.WaitVectors()
		b.Logf("%-8s %-8s %4s %7s %6s %6s", "mode", "kind", "n", "MRR@10", "R@1", "R@10")
		for _, mode := range []librarianv1.SearchMode{librarianv1.SearchMode_SEARCH_MODE_LEXICAL, librarianv1.SearchMode_SEARCH_MODE_HYBRID, librarianv1.SearchMode_SEARCH_MODE_SEMANTIC} {
			evaluate(b, ctx, svc, spans, mode)
		}
	}
}

// span is a judged relevant region: a file, or lines of one.
type span struct {
	path     string
	from, to int // 0, 0: the whole file
}

// evaluate runs every query in one mode and logs the metrics per kind.
func evaluate(b *testing.B, ctx context.Context, svc *librarian.Service, spans map[string]span, mode librarianv1.SearchMode) {
	name := strings.ToLower(strings.TrimPrefix(mode.String(), "SEARCH_MODE_"))
	byKind := map[string][]int{}
	verbose := os.Getenv("RETRIEVAL_VERBOSE") != ""
	for _, q := range queries {
		resp, err := svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: q.text, PageSize: 10, Mode: mode, TokenBudget: 100000})
		require.NoError(b, err, q.text)
		rank := 0
		for i, h := range resp.GetHits() {
			if relevantHit(spans, q, h.GetPath(), int(h.GetLineStart()), int(h.GetLineEnd())) {
				rank = i + 1
				break
			}
		}
		byKind[q.kind] = append(byKind[q.kind], rank)
		byKind["all"] = append(byKind["all"], rank)
		if verbose {
			first := ""
			if hs := resp.GetHits(); len(hs) > 0 {
				first = fmt.Sprintf("%s:%d %s", hs[0].GetPath(), hs[0].GetLineStart(), hs[0].GetSymbol())
			}
			b.Logf("%-8s rank %2d  %-70q top: %s", name, rank, q.text, first)
		}
	}
	for _, k := range []string{kindIdent, kindWhere, kindConcept, kindTests, "all"} {
		r1, r10, mrr := metrics(byKind[k])
		b.Logf("%-8s %-8s %4d %7.3f %6.3f %6.3f", name, k, len(byKind[k]), mrr, r1, r10)
		b.ReportMetric(mrr, name+"_"+k+"_mrr10")
	}
}

func relevantHit(spans map[string]span, q judged, path string, from, to int) bool {
	for _, r := range q.relevant {
		s := spans[r]
		if s.path != path {
			continue
		}
		if s.from == 0 || from <= s.to && to >= s.from {
			return true
		}
	}
	return false
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

// buildCorpus copies pgx and the standard library packages into a fresh
// git repository and returns its root.
func buildCorpus(b *testing.B) string {
	dir := strings.TrimSpace(run(b, "", "go", "list", "-m", "-f", "{{.Dir}}", pgxModule))
	if dir == "" {
		b.Fatalf("%s is not in the module cache: run go mod download", pgxModule)
	}
	goroot := strings.TrimSpace(run(b, "", "go", "env", "GOROOT"))
	corpus := filepath.Join(b.TempDir(), "corpus")
	require.NoError(b, os.MkdirAll(filepath.Join(corpus, "std"), 0o755))
	run(b, "", "cp", "-r", dir, filepath.Join(corpus, "pgx"))
	for _, p := range stdPackages {
		dst := filepath.Join(corpus, "std", p)
		require.NoError(b, os.MkdirAll(filepath.Dir(dst), 0o755))
		run(b, "", "cp", "-r", filepath.Join(goroot, "src", p), dst)
	}
	run(b, "", "chmod", "-R", "u+w", corpus)
	run(b, corpus, "git", "init", "-q")
	run(b, corpus, "git", "add", "-A")
	run(b, corpus, "git", "-c", "user.email=bench@sylk.dev", "-c", "user.name=bench", "commit", "-q", "-m", "corpus")
	return corpus
}

// resolve finds the lines of every judged symbol; a judgement naming a
// symbol that does not exist fails the benchmark.
func resolve(b *testing.B, corpus string) map[string]span {
	out := map[string]span{}
	for _, q := range queries {
		for _, r := range q.relevant {
			path, sym, ok := strings.Cut(r, ":")
			if _, err := os.Stat(filepath.Join(corpus, path)); err != nil {
				b.Fatalf("query %q: %v", q.text, err)
			}
			if !ok {
				out[r] = span{path: path}
				continue
			}
			from, to := declLines(b, filepath.Join(corpus, path), sym)
			if from == 0 {
				b.Fatalf("query %q: %s not declared in %s", q.text, sym, path)
			}
			out[r] = span{path: path, from: from, to: to}
		}
	}
	return out
}

// declLines returns the lines of the declaration of sym (Name or
// Recv.Method) in a Go file, doc comment included.
func declLines(b *testing.B, file, sym string) (int, int) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
	require.NoError(b, err)
	recv, name, isMethod := strings.Cut(sym, ".")
	if !isMethod {
		name = recv
	}
	lines := func(n ast.Node, doc *ast.CommentGroup) (int, int) {
		start := n.Pos()
		if doc != nil {
			start = doc.Pos()
		}
		return fset.Position(start).Line, fset.Position(n.End()).Line
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name != name || (d.Recv != nil) != isMethod {
				continue
			}
			if isMethod && receiverName(d.Recv.List[0].Type) != recv {
				continue
			}
			return lines(d, d.Doc)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok && !isMethod && ts.Name.Name == name {
					doc := ts.Doc
					if doc == nil && len(d.Specs) == 1 {
						doc = d.Doc
					}
					return lines(ts, doc)
				}
			}
		}
	}
	return 0, 0
}

func receiverName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverName(t.X)
	case *ast.IndexExpr:
		return receiverName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

func run(b *testing.B, dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(b, err, "%s %v: %s", name, args, out)
	return string(out)
}
