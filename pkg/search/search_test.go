package search

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

func unit(r *rand.Rand, dims int) []float32 {
	v := make([]float32, dims)
	var s float32
	for i := range v {
		v[i] = float32(r.NormFloat64())
		s += v[i] * v[i]
	}
	for i := range v {
		v[i] /= float32(sqrt(float64(s)))
	}
	return v
}

func sqrt(x float64) float64 {
	z := x
	for i := 0; i < 50; i++ {
		z = (z + x/z) / 2
	}
	return z
}

func TestIndex(t *testing.T) {
	t.Parallel()
	_, err := NewIndex(IndexConfig{})
	require.Error(t, err)
	x, err := NewIndex(IndexConfig{Dims: 16})
	require.NoError(t, err)
	require.Empty(t, x.Search(make([]float32, 16), 3), "empty index")

	r := rand.New(rand.NewSource(7))
	var keys []string
	var vecs [][]float32
	for i := 0; i < 500; i++ {
		keys = append(keys, fmt.Sprint("k", i))
		vecs = append(vecs, unit(r, 16))
	}
	require.NoError(t, x.Add(keys, vecs))
	require.Equal(t, 500, x.Len())
	for i := 0; i < 20; i++ {
		got := x.Search(vecs[i], 5)
		require.NotEmpty(t, got)
		require.Equal(t, keys[i], got[0].Key)
		require.InDelta(t, 1.0, float64(got[0].Score), 1e-5)
	}
	// Replacing a key moves it.
	moved := unit(r, 16)
	require.NoError(t, x.Add([]string{"k0"}, [][]float32{moved}))
	require.Equal(t, 500, x.Len())
	require.Equal(t, "k0", x.Search(moved, 1)[0].Key)
	x.Delete("k0", "missing")
	require.Equal(t, 499, x.Len())
	for _, res := range x.Search(moved, 10) {
		require.NotEqual(t, "k0", res.Key)
	}
	require.Error(t, x.Add([]string{"a"}, [][]float32{{1, 2}}), "wrong dimensions")
	require.Error(t, x.Add([]string{"a", "b"}, [][]float32{moved}), "count mismatch")
	require.Nil(t, x.Search([]float32{1}, 3))
}

// TestIndexDeleteAll: deleting every vector (a repository re-indexed with
// none left to embed) rebuilds an empty graph, which takes vectors again.
func TestIndexDeleteAll(t *testing.T) {
	t.Parallel()
	x, err := NewIndex(IndexConfig{Dims: 16})
	require.NoError(t, err)
	r := rand.New(rand.NewSource(3))
	v := unit(r, 16)
	require.NoError(t, x.Add([]string{"a", "b"}, [][]float32{v, unit(r, 16)}))
	x.Delete("a", "b")
	require.Zero(t, x.Len())
	require.Empty(t, x.Search(v, 3))
	require.NoError(t, x.Add([]string{"c"}, [][]float32{v}))
	require.Equal(t, "c", x.Search(v, 1)[0].Key)
}

func TestIndexConcurrent(t *testing.T) {
	t.Parallel()
	x, err := NewIndex(IndexConfig{Dims: 8, EfConstruction: 32})
	require.NoError(t, err)
	r := rand.New(rand.NewSource(1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		rr := rand.New(rand.NewSource(2))
		for i := 0; i < 200; i++ {
			x.Search(unit(rr, 8), 3)
		}
	}()
	for i := 0; i < 200; i++ {
		require.NoError(t, x.Add([]string{fmt.Sprint(i)}, [][]float32{unit(r, 8)}))
	}
	<-done
	require.Equal(t, 200, x.Len())
}

func TestFuse(t *testing.T) {
	t.Parallel()
	got := Fuse([]List{
		{Keys: []string{"a", "b", "c"}, Weight: 1},
		{Keys: []string{"c", "a", "d", "a"}},
	}, map[string]float64{"d": 1, "zz": 5})
	var keys []string
	for _, r := range got {
		keys = append(keys, r.Key)
	}
	require.Equal(t, []string{"d", "a", "c", "b"}, keys)
	require.InDelta(t, 1.0/61+1.0/62, got[1].Score, 1e-12)
	require.Empty(t, Fuse(nil, nil))
}

func TestIndexChurn(t *testing.T) {
	t.Parallel()
	x, err := NewIndex(IndexConfig{Dims: 8, EfConstruction: 32})
	require.NoError(t, err)
	r := rand.New(rand.NewSource(3))
	want := map[string][]float32{}
	for round := 0; round < 20; round++ {
		for i := 0; i < 30; i++ {
			k := fmt.Sprint(r.Intn(60))
			if r.Intn(3) == 0 {
				x.Delete(k)
				delete(want, k)
				continue
			}
			v := unit(r, 8)
			require.NoError(t, x.Add([]string{k}, [][]float32{v}))
			want[k] = v
		}
		require.Equal(t, len(want), x.Len())
	}
	for k, v := range want {
		got := x.Search(v, 1)
		require.Len(t, got, 1)
		require.Equal(t, k, got[0].Key)
	}
}

func TestSparseDistanceMatchesDense(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(11))
	for i := 0; i < 200; i++ {
		a, b := unit(r, 64), unit(r, 64)
		// Zero most of a, as the offline embedder's vectors are.
		for j := range a {
			if r.Intn(5) != 0 {
				a[j] = 0
			}
		}
		q := newQuery(a)
		require.NotNil(t, q.s.idx, "a sparse vector is kept sparse")
		require.InDelta(t, float64(dist(a, b)), float64(q.to(b)), 1e-5)
		dense := newQuery(b)
		require.Nil(t, dense.s.idx, "a dense vector stays dense")
		require.InDelta(t, float64(dist(b, a)), float64(dense.to(a)), 1e-5)
	}
}

// TestIndexParallelBuild inserts batches large enough to be built by
// several goroutines (run it with -race) and checks recall against brute
// force, for dense random vectors and for the offline embedder's vectors
// of Go declarations.
func TestIndexParallelBuild(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(5))
	dense := make([][]float32, 1200)
	for i := range dense {
		dense[i] = unit(r, 24)
	}
	code := goCodeVectors(t, 1200)
	for name, vecs := range map[string][][]float32{"dense": dense, "code": code} {
		for _, workers := range []int{1, 4} {
			x, err := NewIndex(IndexConfig{Dims: len(vecs[0]), Workers: workers})
			require.NoError(t, err)
			keys := make([]string, len(vecs))
			for i := range keys {
				keys[i] = fmt.Sprint("k", i)
			}
			// A parallel batch into an empty graph, then a small one into
			// the populated graph.
			half := len(vecs) - 100
			require.NoError(t, x.Add(keys[:half], vecs[:half]))
			require.NoError(t, x.Add(keys[half:], vecs[half:]))
			require.Equal(t, len(vecs), x.Len())
			rec := recallAt10(t, x, keys, vecs, 100)
			t.Logf("%s, %d workers: recall@10 %.3f", name, workers, rec)
			require.GreaterOrEqual(t, rec, 0.9, "%s, %d workers", name, workers)
		}
	}
}
