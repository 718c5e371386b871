package review

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseGitDiff(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/small.diff")
	require.NoError(t, err)
	files := Parse("commit message before the diff\n\n" + string(b))
	require.Len(t, files, 3)
	calc := files[0]
	require.Equal(t, "calc/calc.go", calc.Path)
	require.Equal(t, "modified", calc.Status)
	require.Equal(t, 5, calc.Added)
	require.Equal(t, 2, calc.Deleted)
	require.Len(t, calc.Hunks, 1)
	require.Equal(t, " ", calc.Hunks[0].Lines[1], "a context line whose space was stripped")
	token := files[2]
	require.Equal(t, "internal/auth/token.go", token.Path)
	require.Equal(t, "added", token.Status)
	require.Equal(t, "+8 -0", token.Stats())
}

func TestParseShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, diff string
		want       File
		hunks      int
	}{
		{name: "deleted", diff: "diff --git a/old.go b/old.go\ndeleted file mode 100644\n--- a/old.go\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-package a\n-var x = 1\n",
			want: File{Path: "old.go", Status: "deleted", Deleted: 2}, hunks: 1},
		{name: "renamed", diff: "diff --git a/a.go b/b.go\nsimilarity index 90%\nrename from a.go\nrename to b.go\n--- a/a.go\n+++ b/b.go\n@@ -1 +1 @@\n-x\n+y\n",
			want: File{Path: "b.go", OldPath: "a.go", Status: "renamed", Added: 1, Deleted: 1}, hunks: 1},
		{name: "binary", diff: "diff --git a/img.png b/img.png\nindex 1..2 100644\nBinary files a/img.png and b/img.png differ\n",
			want: File{Path: "img.png", Status: "modified", Binary: true}},
		{name: "quoted path", diff: "diff --git \"a/my file.go\" \"b/my file.go\"\n--- \"a/my file.go\"\n+++ \"b/my file.go\"\n@@ -1 +1 @@\n-a\n+b\n",
			want: File{Path: "my file.go", Status: "modified", Added: 1, Deleted: 1}, hunks: 1},
		{name: "no newline at end", diff: "--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n",
			want: File{Path: "x.txt", Status: "modified", Added: 1, Deleted: 1}, hunks: 1},
		{name: "plain diff with a deleted line starting with dashes", diff: "--- a/x.sql\n+++ b/x.sql\n@@ -1,2 +1,1 @@\n--- a comment\n+++ b\n-select 1;\n",
			want: File{Path: "x.sql", Status: "modified", Added: 1, Deleted: 2}, hunks: 1},
		{name: "a hunk cut short is kept whole", diff: "diff --git a/y.go b/y.go\n--- a/y.go\n+++ b/y.go\n@@ -1,5 +1,5 @@\n-a\n+b\n",
			want: File{Path: "y.go", Status: "modified", Added: 1, Deleted: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			files := Parse(tt.diff)
			require.Len(t, files, 1)
			f := files[0]
			require.Equal(t, tt.want.Path, f.Path)
			require.Equal(t, tt.want.OldPath, f.OldPath)
			require.Equal(t, tt.want.Status, f.Status)
			require.Equal(t, tt.want.Binary, f.Binary)
			require.Equal(t, tt.want.Added, f.Added, "added")
			require.Equal(t, tt.want.Deleted, f.Deleted, "deleted")
			require.Len(t, f.Hunks, tt.hunks)
		})
	}
	require.Empty(t, Parse(""))
	require.Empty(t, Parse("no diff here\n"))
}

// Cutting a hunk's context recomputes the headers of the pieces left.
func TestWithContext(t *testing.T) {
	t.Parallel()
	h := Parse(modified("a.go", 1, 2, 3))[0].Hunks[0]
	require.Equal(t, "@@ -1,8 +1,8 @@ func f0()\n", firstLine(hunkText(h)))
	one := withContext(h, 1)
	require.Len(t, one, 1)
	require.Equal(t, "@@ -3,4 +3,4 @@ func f0()\n", firstLine(hunkText(one[0])))
	zero := withContext(h, 0)
	require.Equal(t, "@@ -4,2 +4,2 @@ func f0()\n", firstLine(hunkText(zero[0])))

	// Two changes far apart become two hunks.
	split := Parse("--- a/b.go\n+++ b/b.go\n@@ -10,6 +10,6 @@\n-a\n+A\n x\n y\n z\n w\n-b\n+B\n")[0].Hunks[0]
	parts := withContext(split, 1)
	require.Len(t, parts, 2)
	require.Equal(t, "@@ -10,2 +10,2 @@\n-a\n+A\n x\n", hunkText(parts[0]))
	require.Equal(t, "@@ -14,2 +14,2 @@\n w\n-b\n+B\n", hunkText(parts[1]))

	// A pure addition keeps git's "line before" start on the empty side.
	add := Parse("--- a/c.go\n+++ b/c.go\n@@ -4,2 +4,3 @@\n p\n+new\n q\n")[0].Hunks[0]
	require.Equal(t, "@@ -4,0 +5 @@\n+new\n", hunkText(withContext(add, 0)[0]))
}

func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i+1]
		}
	}
	return s
}
