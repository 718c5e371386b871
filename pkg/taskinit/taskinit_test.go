package taskinit

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOutermost(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"/a", "/ab", "/c"}, outermost([]string{"/c/d", "/a/b/", "/ab", "/a", "/c", "/a/b/c"}))
	require.Empty(t, outermost(nil))
	require.True(t, within("/a/b", "/a"))
	require.False(t, within("/ab", "/a"))
}

// Args carries the specification and the command unchanged.
func TestArgs(t *testing.T) {
	t.Parallel()
	spec := Spec{Dir: "/w/t", Cover: []string{"/w"}, Keep: []string{"/w/t"}, Ruleset: true,
		Rules: []Rule{{Path: "/proc", Access: 7}}}
	args, err := Args("/bin/sylk-task-init", spec, "/bin/sh", []string{"sh", "-c", "echo 'a b'"})
	require.NoError(t, err)
	require.Equal(t, []string{"/bin/sylk-task-init", args[1], "/bin/sh", "sh", "-c", "echo 'a b'"}, args)
	var got Spec
	require.NoError(t, json.Unmarshal([]byte(args[1]), &got))
	require.Equal(t, spec, got)
}

// Started by hand, the program says what it is for.
func TestRunRefusesWithoutSpecification(t *testing.T) {
	t.Parallel()
	_, err := run(nil, nil)
	require.ErrorContains(t, err, "started by the Sylk worker")
	_, err = run([]string{`{"dir":"/"}`}, nil)
	require.ErrorContains(t, err, "no command")
	_, err = run([]string{`{"dir":"/"}`, "/bin/true", "true"}, nil)
	require.ErrorContains(t, err, "not the first process")
}
