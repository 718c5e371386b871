package academic

import (
	"testing"

	"github.com/stretchr/testify/require"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	"sylk.dev/sylk/pkg/identity"
)

// TestDocumentSecretsAreRedacted: keys planted in a document are neither
// stored nor indexed nor found by search; its line numbers stay true.
func TestDocumentSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", identity.RoleMember)
	awsID := "AKIA" + "Q7ZP2LK3XW4RT6VN"
	pat := "github_pat_" + "11AQ7ZP2L0k9Xw4Rt8Vn3B_" + "m6Hs1Jd5Fg0CaYe8UqLw2Np4Tx7Rk9Zv3Bm6Hs1Jd5Fg0CaYe8UqLw2Np4T"
	content := "# Deployment runbook\n\nDeploy with the key " + awsID + ".\n\n## Pushing\n\nPush with " + pat + " from the runner.\n"
	doc := f.create(t, ctx, &academicv1.Document{Title: "Runbook", Format: "markdown", Content: content})

	var stored string
	require.NoError(t, f.svc.store.db.QueryRow(ctx, `SELECT content || (SELECT string_agg(heading || body, '') FROM sections WHERE document_id = $1::uuid)
		FROM documents WHERE id = $1::uuid`, doc.GetId()).Scan(&stored))
	require.NotContains(t, stored, awsID)
	require.NotContains(t, stored, pat)
	require.Contains(t, stored, "[REDACTED:github-fine-grained-pat]")

	resp, err := f.svc.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: "runner push"})
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetHits())
	for _, h := range resp.GetHits() {
		require.NotContains(t, h.GetSnippet(), pat)
	}
	resp, err = f.svc.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: pat})
	require.NoError(t, err)
	for _, h := range resp.GetHits() {
		require.NotContains(t, h.GetSnippet(), pat, "searching for the key finds only its marker")
		require.NotContains(t, h.GetSnippet(), "11AQ7ZP2L0k9Xw4Rt8Vn3B")
	}
}
