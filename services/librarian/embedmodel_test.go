package librarian

import (
	"testing"

	"github.com/stretchr/testify/require"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// A change of embedding model re-embeds unchanged files too: search reads
// the current model's vectors only, so chunks left with the old model
// would drop out of semantic search.
func TestEmbeddingModelChangeReembeds(t *testing.T) {
	t.Parallel()
	replica, pool := replicas(t, nil)
	service := func(dims string) *Service { return replica("-librarian.embed.dims", dims) }
	root := gitRepo(t, map[string]string{
		"go.mod":       "module shop\n",
		"shop/shop.go": shopGo,
		"README.md":    "# Shop\n\nThe shop sells things.\n",
	})
	ctx := as(t, "t1")
	models := func() []string {
		rows, err := pool.Query(ctx, `SELECT DISTINCT model FROM chunks ORDER BY 1`)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var m string
			require.NoError(t, rows.Scan(&m))
			out = append(out, m)
		}
		require.NoError(t, rows.Err())
		return out
	}
	semantic := func(svc *Service) []*librarianv1.CodeHit {
		resp, err := svc.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: "what does the shop sell", Mode: librarianv1.SearchMode_SEARCH_MODE_SEMANTIC})
		require.NoError(t, err)
		return resp.GetHits()
	}

	before := service("256")
	repo := create(t, ctx, before, root, true)
	require.Equal(t, []string{"hashing-v1-256"}, models())
	chunks := repo.GetChunkCount()
	require.NotEmpty(t, semantic(before))

	after := service("128")
	idx, err := after.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	require.False(t, idx.GetDelta(), "a new model reads the whole tree")
	require.Equal(t, int64(3), idx.GetFilesChanged())
	require.Equal(t, chunks, idx.GetChunksEmbedded(), "every chunk is embedded by the new model")
	require.Equal(t, []string{"hashing-v1-128"}, models())
	require.NotEmpty(t, semantic(after))

	// Once every chunk has the new model, an index is a delta again.
	idx, err = after.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	require.True(t, idx.GetDelta())
	require.Zero(t, idx.GetChunksEmbedded())
}
