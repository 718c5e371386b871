package codetools_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/agent/codetools"
)

func workspace(t *testing.T, files map[string]string, opts ...func(*codetools.Config)) (map[string]agent.Tool, string) {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644))
	}
	cfg := codetools.Config{Dir: dir, MaxReadLines: 5, MaxMatches: 3}
	for _, o := range opts {
		o(&cfg)
	}
	w, err := codetools.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	out := map[string]agent.Tool{}
	for _, tool := range w.Tools() {
		out[tool.Def.Name] = tool
	}
	return out, dir
}

func call(t *testing.T, tools map[string]agent.Tool, name string, args map[string]any) (string, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	return tools[name].Run(context.Background(), raw)
}

const mainGo = "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n"

func TestReadFile(t *testing.T) {
	t.Parallel()
	tools, _ := workspace(t, map[string]string{"main.go": mainGo, "bin": "a\x00b"})
	out, err := call(t, tools, "read_file", map[string]any{"path": "main.go"})
	require.NoError(t, err)
	require.Equal(t, "1\tpackage main\n2\t\n3\timport \"fmt\"\n4\t\n5\tfunc main() {\n[lines 1-5 of 7 shown; read on with start_line=6]\n", out)

	out, err = call(t, tools, "read_file", map[string]any{"path": "./main.go", "start_line": 6, "end_line": 7})
	require.NoError(t, err)
	require.Equal(t, "6\t\tfmt.Println(\"hi\")\n7\t}\n[lines 6-7 of 7]\n", out)

	_, err = call(t, tools, "read_file", map[string]any{"path": "missing.go"})
	require.ErrorContains(t, err, "missing.go does not exist")
	_, err = call(t, tools, "read_file", map[string]any{"path": "bin"})
	require.ErrorContains(t, err, "binary")
	_, err = call(t, tools, "read_file", map[string]any{"path": "."})
	require.ErrorContains(t, err, "is a directory")
}

// No path leads out of the workspace: not "..", not an absolute path, not
// a link.
func TestPathsStayInside(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o644))
	tools, dir := workspace(t, map[string]string{"a.txt": "a\n"})
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link")))

	for _, p := range []string{"../x", "/etc/passwd", "link/secret", "a.txt/../../x"} {
		_, err := call(t, tools, "read_file", map[string]any{"path": p})
		require.Error(t, err, p)
		_, err = call(t, tools, "write_file", map[string]any{"path": p, "content": "x"})
		require.Error(t, err, p)
	}
	_, err := os.Stat(filepath.Join(outside, "x"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = call(t, tools, "write_file", map[string]any{"path": ".git/config", "content": "x"})
	require.ErrorContains(t, err, ".git directory is not for editing")
}

func TestListAndGrep(t *testing.T) {
	t.Parallel()
	tools, _ := workspace(t, map[string]string{"main.go": mainGo, "pkg/a/a.go": "package a\n// hi there\n",
		"pkg/a/a_test.go": "package a\n", "README.md": "hi\nHI\n", ".git/HEAD": "ref: x\n"})
	out, err := call(t, tools, "list_files", map[string]any{})
	require.NoError(t, err)
	require.Equal(t, "README.md\nmain.go\npkg/a/a.go\npkg/a/a_test.go\n", out, "VCS metadata is left out")
	out, err = call(t, tools, "list_files", map[string]any{"glob": "*.go"})
	require.NoError(t, err)
	require.Equal(t, "main.go\npkg/a/a.go\npkg/a/a_test.go\n", out, "a glob without a slash matches names")
	out, err = call(t, tools, "list_files", map[string]any{"path": "pkg", "glob": "**/*_test.go"})
	require.NoError(t, err)
	require.Equal(t, "pkg/a/a_test.go\n", out)

	out, err = call(t, tools, "grep", map[string]any{"pattern": `hi\b`})
	require.NoError(t, err)
	require.Equal(t, "README.md:1: hi\nmain.go:6: \tfmt.Println(\"hi\")\npkg/a/a.go:2: // hi there\n", out)
	out, err = call(t, tools, "grep", map[string]any{"pattern": "hi", "ignore_case": true})
	require.NoError(t, err)
	require.Contains(t, out, "[3 of 4 matches (in 3 files) shown")
	out, err = call(t, tools, "grep", map[string]any{"pattern": "nothing here"})
	require.NoError(t, err)
	require.Equal(t, "no matches", out)
	_, err = call(t, tools, "grep", map[string]any{"pattern": "(("})
	require.ErrorContains(t, err, "not a valid RE2")
}

func TestEdits(t *testing.T) {
	t.Parallel()
	tools, dir := workspace(t, map[string]string{"main.go": mainGo, "dup.txt": "x\nx\n"})
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		require.NoError(t, err)
		return string(b)
	}
	out, err := call(t, tools, "edit_file", map[string]any{"path": "main.go", "old_string": `"hi"`, "new_string": `"hello"`})
	require.NoError(t, err)
	require.Contains(t, out, "edited main.go (1 edit)")
	require.Contains(t, out, "6\t\tfmt.Println(\"hello\")")
	require.Contains(t, read("main.go"), `"hello"`)

	_, err = call(t, tools, "edit_file", map[string]any{"path": "main.go", "old_string": "func  main()", "new_string": "x"})
	require.ErrorContains(t, err, "other white space or indentation")
	_, err = call(t, tools, "edit_file", map[string]any{"path": "dup.txt", "old_string": "x", "new_string": "y"})
	require.ErrorContains(t, err, "occurs 2 times")
	_, err = call(t, tools, "edit_file", map[string]any{"path": "dup.txt", "old_string": "x", "new_string": "y", "replace_all": true})
	require.NoError(t, err)
	require.Equal(t, "y\ny\n", read("dup.txt"))

	// multi_edit applies all or none.
	before := read("main.go")
	_, err = call(t, tools, "multi_edit", map[string]any{"path": "main.go", "edits": []map[string]any{
		{"old_string": "package main", "new_string": "package app"},
		{"old_string": "absent", "new_string": "x"}}})
	require.ErrorContains(t, err, "edit 2 of 2")
	require.ErrorContains(t, err, "no edit was applied")
	require.Equal(t, before, read("main.go"))
	_, err = call(t, tools, "multi_edit", map[string]any{"path": "main.go", "edits": []map[string]any{
		{"old_string": "package main", "new_string": "package app"},
		{"old_string": "package app\n", "new_string": "package app // edited twice\n"}}})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(read("main.go"), "package app // edited twice\n"))

	out, err = call(t, tools, "write_file", map[string]any{"path": "new/dir/b.go", "content": "package b\n"})
	require.NoError(t, err)
	require.Equal(t, "created new/dir/b.go (1 lines)", out)
	require.Equal(t, "package b\n", read("new/dir/b.go"))
}

type fakeRunner struct{ got string }

func (f *fakeRunner) Run(_ context.Context, command string, timeout time.Duration) (codetools.CommandResult, error) {
	f.got = command
	if command == "sleep 100" {
		return codetools.CommandResult{TimedOut: true, Duration: timeout}, nil
	}
	return codetools.CommandResult{ExitCode: 1, Stdout: "FAIL x\n", Stderr: "oops", Duration: time.Second}, nil
}

// A command that fails is an answer; one that timed out is a failed call.
func TestRunCommand(t *testing.T) {
	t.Parallel()
	r := &fakeRunner{}
	tools, _ := workspace(t, nil, func(c *codetools.Config) { c.Runner = r })
	out, err := call(t, tools, "run_command", map[string]any{"command": "go test ./..."})
	require.NoError(t, err)
	require.Equal(t, "exit code 1 (1s)\n--- stdout\nFAIL x\n--- stderr\noops\n", out)
	_, err = call(t, tools, "run_command", map[string]any{"command": "sleep 100", "timeout": 1})
	require.ErrorContains(t, err, "timed out after 1s")
	_, ok := tools["run_tests"]
	require.False(t, ok, "no test runner, no run_tests")
}
