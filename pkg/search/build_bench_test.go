package search

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/embed"
)

var (
	codeVectors  = flag.Int("search.code-vectors", 20000, "declarations of the Go source embedded for the build benchmark")
	buildWorkers = flag.Int("search.workers", 0, "goroutines building the graph in the build benchmark (0: GOMAXPROCS)")
	buildEfC     = flag.Int("search.ef-construction", 0, "efConstruction of the build benchmark (0: the default)")
)

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// goCodeVectors embeds up to n top-level declarations of the Go source that
// ships with the toolchain with the offline embedder: vectors shaped like
// the ones the Librarian indexes.
func goCodeVectors(tb testing.TB, n int) [][]float32 {
	tb.Helper()
	root := filepath.Join(runtime.GOROOT(), "src")
	if _, err := os.Stat(root); err != nil {
		tb.Skipf("Go source not found at %s", root)
	}
	emb, err := embed.NewHashing(256)
	require.NoError(tb, err)
	var out [][]float32
	fset := token.NewFileSet()
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || len(out) >= n {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return nil
		}
		for _, decl := range f.Decls {
			start, end := decl.Pos(), decl.End()
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Doc != nil {
				start = fd.Doc.Pos()
			}
			text := string(src[fset.Position(start).Offset:fset.Position(end).Offset])
			v := emb.Vector(text)
			var s float32
			for _, x := range v {
				s += x * x
			}
			if s == 0 {
				continue
			}
			out = append(out, v)
			if len(out) >= n {
				break
			}
		}
		return nil
	})
	return out
}

// bruteForce is the exact top k of q by cosine.
func bruteForce(vecs [][]float32, q []float32, k int) []int32 {
	type scored struct {
		id int32
		d  float32
	}
	all := make([]scored, len(vecs))
	for i, v := range vecs {
		all[i] = scored{int32(i), dist(q, v)}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].d < all[j].d })
	out := make([]int32, 0, k)
	for _, s := range all[:min(k, len(all))] {
		out = append(out, s.id)
	}
	return out
}

// recallAt10 is the mean share of the exact ten nearest that the index
// returns among its ten, over queries taken from the data.
func recallAt10(tb testing.TB, x *Index, keys []string, vecs [][]float32, queries int) float64 {
	tb.Helper()
	step := max(1, len(vecs)/queries)
	var hit, total int
	for qi := 0; qi < len(vecs); qi += step {
		want := bruteForce(vecs, vecs[qi], 10)
		got := map[string]bool{}
		for _, r := range x.Search(vecs[qi], 10) {
			got[r.Key] = true
		}
		for _, id := range want {
			total++
			if got[keys[id]] {
				hit++
			}
		}
	}
	return float64(hit) / float64(total)
}

// BenchmarkBuildCode builds a graph over embedded Go declarations and
// reports the build time and recall@10 against brute force.
func BenchmarkBuildCode(b *testing.B) {
	vecs := goCodeVectors(b, *codeVectors)
	keys := make([]string, len(vecs))
	for i := range keys {
		keys[i] = "k" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + itoa(i)
	}
	b.Logf("vectors: %d", len(vecs))
	for b.Loop() {
		x, err := NewIndex(IndexConfig{Dims: 256, Workers: *buildWorkers, EfConstruction: *buildEfC})
		require.NoError(b, err)
		start, cpu := time.Now(), cpuTime()
		require.NoError(b, x.Add(keys, vecs))
		el, cpuUsed := time.Since(start), cpuTime()-cpu
		r := recallAt10(b, x, keys, vecs, 300)
		b.Logf("build %v wall, %v CPU (%.0f vectors/s), recall@10 %.4f", el, cpuUsed, float64(len(vecs))/el.Seconds(), r)
		b.ReportMetric(el.Seconds(), "build_s")
		b.ReportMetric(cpuUsed.Seconds(), "build_cpu_s")
		b.ReportMetric(r, "recall10")
		x.cfg.EfSearch = 50
		b.Logf("recall@10 with efSearch 50: %.4f", recallAt10(b, x, keys, vecs, 300))
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
