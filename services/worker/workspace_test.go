package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
)

// pooledService is an offline worker whose task directories are kept for
// reuse, as the worker built by New does.
func pooledService(t *testing.T) (*Service, string) {
	cfg := testConfig(t)
	s := offlineService(t, cfg)
	s.scratch = newScratchPool(cfg.WorkspaceRoot, 4)
	t.Cleanup(s.scratch.close)
	return s, cfg.WorkspaceRoot
}

func runOK(t *testing.T, s *Service, d *taskv1.TaskDispatch) string {
	t.Helper()
	out, cancelled := s.runTask(context.Background(), "engineer", d)
	require.False(t, cancelled)
	require.Equal(t, int32(0), out.msg.GetExitCode(), "stderr: %s, error: %s", out.msg.GetStderr(), out.msg.GetError())
	return out.msg.GetStdout()
}

func TestScratchDirectoryIsEmptiedForTheNextTask(t *testing.T) {
	t.Parallel()
	s, _ := pooledService(t)
	first := dispatch(`pwd; mkdir -p d/e; echo x > d/e/f; echo y > "$TMPDIR/t"; ln -s /etc link; ls -A "$` + UpstreamDirEnv + `"`)
	first.UpstreamOutputs = map[string]string{"a": "out-a", "b": "out-b"}
	out := runOK(t, s, first)
	dir, rest, _ := strings.Cut(out, "\n")
	require.Equal(t, "a\nb\n", rest)

	second := dispatch(`pwd; ls -A; ls -A "$TMPDIR"; ls -A "$` + UpstreamDirEnv + `"; cat "$` + UpstreamDirEnv + `/c"`)
	second.UpstreamOutputs = map[string]string{"c": "out-c"}
	require.Equal(t, dir+"\n.tmp\n.upstream\nc\nout-c", runOK(t, s, second), "the directory is reused, with nothing of the first task left")

	third := dispatch("pwd; ls -A; echo ${" + UpstreamDirEnv + ":-none}")
	require.Equal(t, dir+"\n.tmp\nnone\n", runOK(t, s, third), "no dependencies: no .upstream")
	fourth := dispatch(`pwd; ls -A; ls -A "$TMPDIR"`)
	require.Equal(t, dir+"\n.tmp\n", runOK(t, s, fourth), "a directory the task left untouched is reused as it is")
	_, err := os.Lstat("/etc")
	require.NoError(t, err, "a symlink is removed, not followed")
}

func TestScratchDirectoryTheTaskAlteredIsRemoved(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	require.NoError(t, os.WriteFile(keep, []byte("k"), 0o600))
	tests := []struct {
		name, cmd string
		mayKeep   bool // when emptying it works (as root, permissions do not stop it)
	}{
		{"workspace opened to others", `chmod 755 "$HOME"`, false},
		{"tmp opened to others", `chmod 777 "$TMPDIR"`, false},
		{"tmp replaced by a symlink", `rmdir "$TMPDIR" && ln -s ` + outside + ` "$HOME/.tmp"`, false},
		{"tmp removed", `rmdir "$TMPDIR"`, false},
		{"read-only subdirectory", `mkdir -p ro/sub && touch ro/sub/f && chmod 500 ro/sub ro`, os.Geteuid() == 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, root := pooledService(t)
			dir := strings.TrimSpace(runOK(t, s, dispatch("pwd; "+tt.cmd)))
			if !tt.mayKeep {
				_, err := os.Lstat(dir)
				require.ErrorIs(t, err, os.ErrNotExist, "an altered directory is removed, not kept")
			}
			next := runOK(t, s, dispatch("pwd; ls -A; stat -c %a . .tmp"))
			if !tt.mayKeep {
				require.NotEqual(t, dir+"\n", next[:len(dir)+1])
			}
			require.True(t, strings.HasSuffix(next, "\n.tmp\n700\n700\n"), next)
			require.FileExists(t, keep, "nothing outside the workspace is touched")
			s.scratch.close()
			entries, err := os.ReadDir(root)
			require.NoError(t, err)
			require.Empty(t, entries, "close removes the kept directories")
		})
	}
}

func TestScratchPoolKeepsAtMostItsSize(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p := newScratchPool(root, 2)
	var dirs []string
	for range 3 {
		ws, err := p.get("")
		require.NoError(t, err)
		require.NoError(t, p.mkdir("", filepath.Join(ws, scratchUpstream)))
		require.ErrorIs(t, p.mkdir("", filepath.Join(ws, scratchUpstream)), os.ErrExist)
		dirs = append(dirs, ws)
	}
	for _, ws := range dirs {
		p.put("", ws)
	}
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, entries, 4, "two task directories and two spare ones")
	p.close()
	entries, err = os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, entries)
	ws, err := p.get("")
	require.NoError(t, err)
	p.put("", ws)
	_, err = os.Lstat(ws)
	require.ErrorIs(t, err, os.ErrNotExist, "a closed pool keeps nothing")
}

// requireOnlyEmptiedScratch checks that root holds only the directories a
// running worker keeps for reuse, emptied: task directories with an empty
// .tmp, and empty spare directories.
func requireOnlyEmptiedScratch(t *testing.T, root string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		left, err := os.ReadDir(dir)
		require.NoError(t, err)
		switch {
		case strings.HasPrefix(e.Name(), "sylk-spare-"):
			require.Empty(t, left, dir)
		default:
			require.Len(t, left, 1, dir)
			require.Equal(t, scratchTmp, left[0].Name(), dir)
			tmp, err := os.ReadDir(filepath.Join(dir, scratchTmp))
			require.NoError(t, err)
			require.Empty(t, tmp, dir)
		}
	}
}

// BenchmarkNoopTask runs a no-op node with two dependencies, as the
// orchestrator benchmark does, with task directories kept for reuse or
// created and removed for every task; cpu-us/op is the worker process's
// own CPU time (user and system) per task, without the child's.
func BenchmarkNoopTask(b *testing.B) {
	for _, bc := range []struct {
		name string
		keep int
	}{{"pooled", 4}, {"fresh", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.WorkspaceRoot = b.TempDir()
			cfg.ID = "w-bench"
			ex, err := newExecutor(cfg)
			require.NoError(b, err)
			s := &Service{cfg: cfg, log: logx.Discard(), exec: ex, scratch: newScratchPool(cfg.WorkspaceRoot, bc.keep)}
			b.Cleanup(s.scratch.close)
			d := dispatch("true")
			d.UpstreamOutputs = map[string]string{"n0-0": "", "n0-1": ""}
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			for b.Loop() {
				out, _ := s.runTask(context.Background(), "engineer", d)
				if out.msg.GetExitCode() != 0 {
					b.Fatal(out.msg.GetError())
				}
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// Edits stay in the workspace whatever symlinks it holds: one naming a file
// outside (as a repository may commit), one naming a directory outside,
// and one inside, which may be written through. A refused edit creates
// nothing outside either.
func TestEditsDoNotFollowSymlinksOut(t *testing.T) {
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dir, "link")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "dl")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "pkg"), 0o755))
	require.NoError(t, os.Symlink("pkg", filepath.Join(dir, "alias")))

	for _, p := range []string{"link", "dl/x", "dl/sub/x", "../x", "/etc/x", "a/../../x", ".git/config"} {
		_, err := applyEdits(dir, map[string]string{p: "PWNED\n"})
		require.Error(t, err, p)
	}
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing was written or created outside")

	written, err := applyEdits(dir, map[string]string{"alias/a.go": "package pkg\n", "new/dir/b.go": "package dir\n"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"alias/a.go", "new/dir/b.go"}, written)
	got, err := os.ReadFile(filepath.Join(dir, "pkg", "a.go"))
	require.NoError(t, err)
	require.Equal(t, "package pkg\n", string(got))
}
