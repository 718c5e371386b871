package agenteval

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tinyTask is a task made on the spot: write "hello" into out.txt.
func tinyTask(t *testing.T) Task {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "repo"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "repo", "README"), []byte("a repository\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "hidden"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hidden", "check.sh"), []byte("grep -qx hello out.txt\n"), 0o644))
	return Task{ID: "tiny", Language: LanguageGo, Kind: KindFeature, Prompt: "Write hello into out.txt.",
		TestCommand: "sh check.sh", Hidden: []string{"check.sh"}, Dir: dir}
}

// A patch that does not apply is an error, not a failed test.
func TestJudgeRejectsABadPatch(t *testing.T) {
	t.Parallel()
	task := tinyTask(t)
	_, err := Judge(context.Background(), task, "--- a/nope\n+++ b/nope\n@@ -1 +1 @@\n-x\n+y\n", t.TempDir(), time.Minute)
	require.ErrorContains(t, err, "does not apply")

	dir := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, Checkout(t.Context(), task, dir))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "out.txt"), []byte("hello\n"), 0o644))
	patch, err := Diff(t.Context(), dir)
	require.NoError(t, err)
	v, err := Judge(context.Background(), task, patch, t.TempDir(), time.Minute)
	require.NoError(t, err)
	require.True(t, v.Solved, "a new file is part of the change")
}
