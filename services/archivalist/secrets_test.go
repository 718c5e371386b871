package archivalist

import (
	"testing"

	"github.com/stretchr/testify/require"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	"sylk.dev/sylk/pkg/identity"
)

// TestEntrySecretsAreRedacted: a key planted in an entry is stored, returned
// and found redacted; the rest of the entry is kept.
func TestEntrySecretsAreRedacted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", "alice", identity.RoleMember)
	awsID := "AKIA" + "Q7ZP2LK3XW4RT6VN"
	pat := "github_pat_" + "11AQ7ZP2L0k9Xw4Rt8Vn3B_" + "m6Hs1Jd5Fg0CaYe8UqLw2Np4Tx7Rk9Zv3Bm6Hs1Jd5Fg0CaYe8UqLw2Np4T"
	got := f.create(t, ctx, &archivalistv1.Entry{
		Category: "decision",
		Title:    "Deploy key " + awsID,
		Content:  "We deploy with " + awsID + " and push with " + pat + ".",
	})
	read, err := f.svc.GetEntry(ctx, &archivalistv1.GetEntryRequest{Name: got.GetName()})
	require.NoError(t, err)
	var stored string
	require.NoError(t, f.svc.store.db.QueryRow(ctx, `SELECT title || content FROM entries WHERE id = $1::uuid`, got.GetId()).Scan(&stored))
	for _, text := range []string{got.GetTitle() + got.GetContent(), read.GetEntry().GetContent(), stored} {
		require.NotContains(t, text, awsID)
		require.NotContains(t, text, pat)
		require.Contains(t, text, "[REDACTED:aws-access-token]")
	}
	require.Contains(t, stored, "We deploy with")
}
