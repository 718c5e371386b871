package worker

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/toolexec"
)

// gitRepo makes a repository with a small Go module and returns its path
// and HEAD.
func gitRepo(t testing.TB) (string, string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.com/calc\n\ngo 1.22\n",
		"calc.go":      "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a + b }\n",
		"calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"Add(1, 2) != 3\")\n\t}\n}\n",
	}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.TrimSpace(string(out))
	}
	git("init", "--quiet")
	git("add", "-A")
	git("commit", "--quiet", "-m", "init")
	return dir, git("rev-parse", "HEAD")
}

func repoTask(t testing.TB, repo, base string, node *orchestratorv1.Node) *taskv1.TaskDispatch {
	t.Helper()
	return &taskv1.TaskDispatch{RunId: "r1", NodeId: node.GetId(), Attempt: 1, Role: "engineer", Node: node,
		Repository: repo, BaseCommit: base, Priority: messagev1.Priority_PRIORITY_PIPELINE}
}

func pipelineOf(t *testing.T, out taskOutcome) (*orchestratorv1.PipelineStatus, *orchestratorv1.TaskReport) {
	t.Helper()
	p := out.msg.GetPipeline()
	if p == nil {
		p = &orchestratorv1.PipelineStatus{}
	}
	require.NotNil(t, out.msg.GetReport(), "the result carries no report")
	return p, out.msg.GetReport()
}

func pipelineService(t testing.TB, writable ...string) *Service {
	cfg := testConfig(t)
	cfg.Tools.ConfineWritable = writable
	cfg.Tools.DefaultTimeout = 2 * time.Minute
	cfg.MaxOutputBytes = 1 << 20
	s := offlineService(t, cfg)
	s.toolEnv = goEnv()
	return s
}

func TestPipelineCompletesAndYieldsAPatch(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	s := pipelineService(t)
	node := &orchestratorv1.Node{Id: "mul", Name: "add Mul", Pipeline: true, Edits: []*orchestratorv1.FileEdit{{
		Path: "mul.go", Content: "package calc\n\n// Mul multiplies.\nfunc Mul(a, b int) int { return a * b }\n"}}}
	out, cancelled := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
	require.False(t, cancelled)
	require.Equal(t, int32(0), out.msg.GetExitCode(), "error %s; stdout %s", out.msg.GetError(), out.msg.GetStdout())
	p, r := pipelineOf(t, out)
	require.Equal(t, "completed", p.GetState())
	require.Equal(t, int32(1), p.GetLoops())
	require.True(t, p.GetInspectorPassed())
	require.True(t, p.GetTesterPassed())
	require.Equal(t, "go-test", p.GetLastTestResult().GetFrameworkId())
	require.Equal(t, int32(1), p.GetLastTestResult().GetPassed())
	require.Equal(t, []string{"mul.go"}, r.GetFilesChanged())
	require.Equal(t, "go-test: 1 passed, 0 failed, 0 skipped", r.GetTested())
	require.Equal(t, "wrote mul.go", r.GetImplemented(), "no model, no prompt: the node's own edits")
	require.Contains(t, out.msg.GetPatch(), "+func Mul(a, b int) int { return a * b }")
	require.Contains(t, strings.Join(out.msg.GetGitAudit(), "\n"), "worker: git commit")
	// The repository itself is untouched.
	_, err := os.Stat(filepath.Join(repo, "mul.go"))
	require.True(t, os.IsNotExist(err))
}

func TestPipelineLoopsThenFailsWithTheUserOptions(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	tests := []struct {
		name, path, content string
		ignoreTester        bool
		wantState           string
		wantFeedback        string
	}{
		{name: "inspector: not formatted", path: "calc.go", content: "package calc\nfunc Add(a, b int) int {return a+b}\n",
			wantState: "failed", wantFeedback: "calc.go: format: not gofmt-formatted"},
		{name: "tester: a test fails", path: "calc.go", content: "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n",
			wantState: "failed", wantFeedback: "test TestAdd failed (calc_test.go:7): Add(1, 2) != 3"},
		{name: "tester ignored", path: "calc.go", content: "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n",
			ignoreTester: true, wantState: "completed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := pipelineService(t)
			node := &orchestratorv1.Node{Id: "n", Pipeline: true, MaxLoops: 2, IgnoreTester: tt.ignoreTester,
				Edits: []*orchestratorv1.FileEdit{{Path: tt.path, Content: tt.content}}}
			out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
			p, r := pipelineOf(t, out)
			require.Equal(t, tt.wantState, p.GetState(), "stdout %s", out.msg.GetStdout())
			if tt.wantState == "completed" {
				require.Equal(t, int32(0), out.msg.GetExitCode())
				require.Equal(t, "not tested: ignore_tester", r.GetTested())
				require.Equal(t, []string{"ignore_tester"}, p.GetOverrides())
				require.Equal(t, "user overrides: ignore_tester", r.GetDeviations())
				return
			}
			require.Equal(t, int32(2), p.GetLoops())
			require.Len(t, p.GetFeedback(), 2)
			require.Contains(t, p.GetFeedback()[0], tt.wantFeedback)
			require.Equal(t, FailureOptions("n"), p.GetOptions())
			require.Equal(t, int32(1), out.msg.GetExitCode())
			require.Contains(t, out.msg.GetError(), "pipeline failed after 2 loops")
			require.Empty(t, out.msg.GetPatch(), "a failed task commits nothing")
		})
	}
}

func TestGitGuardRefusesPushMergeAndHardReset(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	s := pipelineService(t)
	for _, c := range []struct{ cmd, want string }{
		{"git push origin HEAD", "git push is not allowed"},
		{"git merge HEAD", "git merge is not allowed"},
		{"git pull", "git pull is not allowed"},
		{"git reset --hard HEAD", "git reset --hard is not allowed"},
		// What git itself accepts for the same: options before the
		// subcommand, aliases, abbreviations.
		{"git -C . --no-pager push origin HEAD", "git push is not allowed"},
		{"git send-pack /tmp/x HEAD", "git send-pack is not allowed"},
		{"git -c alias.p=push p origin HEAD", "with an alias on the command line"},
		{"git -cAlias.m=merge m HEAD", "with an alias on the command line"},
		{"git config alias.m merge && git m HEAD", "git m (only git's own commands; aliases are not allowed)"},
		{"git config alias.up '!git push' && git up", "git up (only git's own commands"},
		{"git config alias.wipe 'reset --hard' && git wipe", "git wipe (only git's own commands"},
		{"git reset --har HEAD", "git reset --hard is not allowed"},
		{`git config alias.w 'reset "--hard"' && git w`, "git w (only git's own commands"},
		{"git --shallow-file x push /tmp/x HEAD", "git push is not allowed"},
		{"git config help.autocorrect -1 && git psuh /tmp/x HEAD", "git psuh (only git's own commands"},
		{"printf '[alias]\\n\\tm = merge\\n' > ../a.cfg && git -c include.path=../a.cfg m HEAD", "with an include on the command line"},
		{"printf '[alias]\\n\\tm = merge\\n' > ../a.cfg && A=../a.cfg git --config-env=include.path=A m HEAD", "with an include on the command line"},
		{"git config alias.up '!sh -c \"git mer\"\"ge HEAD\"' && git up", "git up (only git's own commands"},
		{"git subtree merge --prefix=sub HEAD", "git subtree is not allowed"},
		// Git's other names for the same, and the programs git starts.
		{"git merge-recursive HEAD -- HEAD HEAD", "git merge-recursive is not allowed"},
		{"git read-tree -u --reset HEAD", "git read-tree --reset is not allowed"},
		{"git http-push http://127.0.0.1:1/x HEAD", "git http-push is not allowed"},
		{"git init -q --bare ../t && git -c user.name=a -c user.email=a@a.invalid rebase -q --exec 'git push -q ../t HEAD:refs/heads/x' --root", "git push is not allowed"},
		{"git init -q --bare ../t && git -c user.name=a -c user.email=a@a.invalid rebase -q --exec 'git-push -q ../t HEAD:refs/heads/x' --root", "git-push: not found"},
		// A shell git starts may exec into the guard, with git as its
		// parent: that is not git's own step.
		{"git init -q --bare ../t && git -c user.name=a -c user.email=a@a.invalid rebase -q --exec 'exec git push -q ../t HEAD:refs/heads/x' --root", "git push is not allowed"},
		{"git -c user.name=a -c user.email=a@a.invalid rebase -q --exec 'exec git reset -q --hard HEAD' --root", "git reset --hard is not allowed"},
	} {
		node := &orchestratorv1.Node{Id: "g", Command: c.cmd}
		out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
		require.Equal(t, int32(1), out.msg.GetExitCode(), c.cmd)
		require.Contains(t, out.msg.GetStderr(), c.want, c.cmd)
		require.Contains(t, strings.Join(out.msg.GetGitAudit(), "\n"), "agent: git ", c.cmd)
	}
	// The checkout has no remote to push to, even with a git that is not
	// the guard.
	node := &orchestratorv1.Node{Id: "r", Command: "test -z \"$(git remote)\" && echo no-remote"}
	out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
	require.Equal(t, "no-remote\n", out.msg.GetStdout(), out.msg.GetStderr())
	// Git's own steps still run: stash resets the working tree with the
	// git its program directory holds.
	node = &orchestratorv1.Node{Id: "stash", Command: "echo s >> calc.go && git -c user.name=a -c user.email=a@a.invalid stash -q && git stash pop -q && git worktree add -q ../wt"}
	out, _ = s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetStderr())
	node = &orchestratorv1.Node{Id: "ok", Name: "fix typo", Command: "git status --short && echo changed >> calc.go"}
	out, _ = s.runTask(context.Background(), "engineer", repoTask(t, repo, base, node))
	require.Equal(t, int32(0), out.msg.GetExitCode(), out.msg.GetStderr())
	require.Contains(t, strings.Join(out.msg.GetGitAudit(), "\n"), "agent: git status --short")
	require.Contains(t, strings.Join(out.msg.GetGitAudit(), "\n"), "worker: git commit --quiet --no-verify -m fix(ok): fix typo")
}

func TestParseGoTestJSON(t *testing.T) {
	t.Parallel()
	out := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:12: want 3, got 4\n"}
{"Action":"fail","Package":"p","Test":"TestA","Elapsed":0.01}
{"Action":"pass","Package":"p","Test":"TestB"}
{"Action":"skip","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Output":"FAIL\n"}
`
	r := ParseGoTestJSON(out, time.Second)
	require.Equal(t, int32(1), r.GetPassed())
	require.Equal(t, int32(1), r.GetFailed())
	require.Equal(t, int32(1), r.GetSkipped())
	require.Len(t, r.GetFailures(), 1)
	f := r.GetFailures()[0]
	require.Equal(t, "TestA", f.GetTestName())
	require.Equal(t, "a_test.go", f.GetFilePath())
	require.Equal(t, int32(12), f.GetLine())
	require.Equal(t, "want 3, got 4", f.GetMessage())
	require.Equal(t, "FAIL\n", r.GetOutput())
}

func TestSecurityFindings(t *testing.T) {
	t.Parallel()
	got := SecurityFindings([]string{"internal/auth/login.go", "README.md", "deploy/Dockerfile", "go.sum", ".github/workflows/ci.yml", "calc.go"})
	require.Len(t, got, 4)
	require.Contains(t, got[0], "internal/auth/login.go: security-sensitive path (authentication)")
	require.Contains(t, got[1], "(container)")
	require.Contains(t, got[2], "(dependencies)")
	require.Contains(t, got[3], "(ci)")
}

func TestConventionalMessage(t *testing.T) {
	t.Parallel()
	require.Equal(t, "feat(api): add handler", conventionalMessage("api", "add handler"))
	require.Equal(t, "fix(n1): fix the bug", conventionalMessage("n1", "fix the bug"))
	require.Equal(t, "feat(a-b): task A.B", conventionalMessage("A.B", ""))
}

// A task's command may write what git would run (hooks, a file-system
// monitor, an external diff program, a global configuration in $HOME); none
// of it runs in the worker's own git calls, which also never see the
// worker's secrets. Not parallel: it sets an environment variable.
// The clone shares no file with the repository: a task that rewrites its
// clone's object files leaves the repository's as they were.
func TestCloneSharesNoFileWithTheRepository(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	objects := map[string]string{}
	require.NoError(t, filepath.WalkDir(filepath.Join(repo, ".git", "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, rerr := os.ReadFile(p)
			objects[p] = string(b)
			return rerr
		}
		return err
	}))
	require.NotEmpty(t, objects)
	s := pipelineService(t)
	s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "rewrite",
		Command: `for f in $(find .git/objects -type f); do chmod u+w "$f"; echo overwritten > "$f"; done`}))
	for p, want := range objects {
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, want, string(got), p)
	}
}

// A pipeline whose command swaps its checkout for a link to another task's
// directory gets nothing of that directory: the next stage's commands are
// refused, the worker's own git and edits do not follow the link.
func TestCheckoutSwappedForALink(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	s := pipelineService(t)
	victim := filepath.Join(s.cfg.WorkspaceRoot, "sylk-task-victim")
	require.NoError(t, os.MkdirAll(filepath.Join(victim, ".git"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(victim, "calc.go"), []byte("victim"), 0o600))
	res, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "swap", Pipeline: true,
		Command: "cd .. && mv src src.real && ln -s " + victim + " src",
		Edits:   []*orchestratorv1.FileEdit{{Path: "calc.go", Content: "package calc\n"}}}))
	require.Contains(t, res.msg.GetError(), "replaced")
	require.NotZero(t, res.msg.GetExitCode())
	require.Empty(t, res.msg.GetPatch())
	got, err := os.ReadFile(filepath.Join(victim, "calc.go"))
	require.NoError(t, err)
	require.Equal(t, "victim", string(got))
	entries, err := os.ReadDir(victim)
	require.NoError(t, err)
	require.Len(t, entries, 2, "nothing added to the other task's directory")
}

// The worker's own git on a checkout runs confined like the task's
// commands: a program the checkout's files led it to run (here an alias, as
// a filter a racing leftover process planted would be) cannot write outside
// the task's directory.
func TestWorkerGitIsConfinedToTheTaskDirectory(t *testing.T) {
	t.Parallel()
	repo, base := gitRepo(t)
	s := pipelineService(t)
	ws := filepath.Join(s.cfg.WorkspaceRoot, "sylk-task-git")
	require.NoError(t, os.Mkdir(ws, 0o700))
	w, err := openWorkspace(context.Background(), logx.Discard(), ws, repo, base, toolexec.GitEnv(nil),
		func(cmd *exec.Cmd) error { return s.exec.StartIn(cmd, ws) })
	require.NoError(t, err)
	defer w.close()
	outside := filepath.Join(t.TempDir(), "escaped")
	inside := filepath.Join(ws, "stayed")
	_, err = w.run(context.Background(), "-c", "alias.x=!touch "+inside+" "+outside, "x")
	if !s.exec.Confined() {
		require.FileExists(t, outside)
		return
	}
	require.Error(t, err)
	require.NoFileExists(t, outside)
	_, err = w.run(context.Background(), "-c", "alias.y=!touch "+inside, "y")
	require.NoError(t, err)
	require.FileExists(t, inside)
}

func TestWorkerGitRunsNothingTheTaskLeft(t *testing.T) {
	t.Setenv("SYLK_PROBE_DSN", "postgres://sylk:leak@db/sylk")
	repo, base := gitRepo(t)
	s := pipelineService(t)
	out := t.TempDir()
	require.NoError(t, os.Chmod(out, 0o777))
	plant := strings.Join([]string{
		`printf '#!/bin/sh\nenv > ` + out + `/fsmonitor.env\nexit 1\n' > .git/fsm && chmod +x .git/fsm && git config core.fsmonitor "$PWD/.git/fsm"`,
		`printf '#!/bin/sh\nenv > ` + out + `/hook.env\n' > .git/hooks/post-commit && chmod +x .git/hooks/post-commit`,
		`printf '#!/bin/sh\necho FORGED-PATCH\n' > .git/extdiff && chmod +x .git/extdiff && git config diff.external "$PWD/.git/extdiff"`,
		`printf '[core]\n\thooksPath = %s/.git/hooks\n' "$PWD" > "$HOME/.gitconfig"`,
		`echo changed >> calc.go`,
	}, " && ")
	res, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "plant", Name: "fix typo", Command: plant}))
	require.Equal(t, int32(0), res.msg.GetExitCode(), "error %s; stderr %s", res.msg.GetError(), res.msg.GetStderr())
	require.Contains(t, res.msg.GetPatch(), "+changed")
	require.NotContains(t, res.msg.GetPatch(), "FORGED-PATCH")
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Empty(t, entries, "no hook or monitor the task wrote ran")

	// Nor through .git/commondir, which would send git to another git
	// directory with another configuration; nor through replace refs,
	// which would make the patch say what is not on disk.
	for _, plant := range []string{
		`cp -r .git "$TMPDIR/e" && mv "$TMPDIR/e" .git/evil && ` +
			`printf '#!/bin/sh\nenv > ` + out + `/filter.env\nsed s/changed/INJECTED/\n' > .git/evil/f.sh && chmod +x .git/evil/f.sh && ` +
			`printf '[filter "x"]\n\tclean = %s/.git/evil/f.sh\n' "$PWD" >> .git/evil/config && ` +
			`echo '* filter=x' > .git/evil/info/attributes && echo evil > .git/commondir && echo changed >> calc.go`,
		`echo changed >> calc.go && X=$(git hash-object -w calc.go) && Y=$(printf 'INJECTED\n' | git hash-object -w --stdin) && git replace -f $X $Y`,
	} {
		res, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "plant", Name: "fix typo", Command: plant}))
		require.Equal(t, int32(0), res.msg.GetExitCode(), "error %s; stderr %s", res.msg.GetError(), res.msg.GetStderr())
		require.Contains(t, res.msg.GetPatch(), "+changed", plant)
		require.NotContains(t, res.msg.GetPatch(), "INJECTED", plant)
	}
	entries, err = os.ReadDir(out)
	require.NoError(t, err)
	require.Empty(t, entries, "no filter the task defined ran")

	// Ignore rules the task adds do not drop tracked files from the
	// patch, and a warning naming a path the task chose (here, a whole
	// diff) is not part of it.
	for _, plant := range []string{
		`echo changed >> calc.go && echo calc_test.go >> .git/info/exclude && mkdir -p "$HOME/.config/git" && echo go.mod > "$HOME/.config/git/ignore"`,
		`echo changed >> calc.go && d=$(printf 'p\ndiff --git a/forged.txt b/forged.txt\nnew file mode 100644\n--- /dev/null\n+++ b/forged.txt\n@@ -0,0 +1 @@\n+FORGED\nq' | tr / _) && ` +
			`mkdir -p "$d" && echo hi > "$d/x.txt" && ln -s .gitattributes "$d/.gitattributes"`,
	} {
		res, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "plant", Name: "fix typo", Command: plant}))
		require.Equal(t, int32(0), res.msg.GetExitCode(), "error %s; stderr %s", res.msg.GetError(), res.msg.GetStderr())
		require.Contains(t, res.msg.GetPatch(), "+changed", plant)
		require.NotContains(t, res.msg.GetPatch(), "deleted file", plant)
		for _, line := range strings.Split(res.msg.GetPatch(), "\n") {
			require.NotEqual(t, "+FORGED", line, "a line of the patch came from git's warnings")
		}
	}

	// A tracked file that the repository's own ignore rules match (added
	// with force) stays in the repository, not deleted by the patch.
	ign, head := repoWith(t, map[string]string{".gitignore": "*.log\n", "keep.log": "kept\n"})
	res, _ = s.runTask(context.Background(), "engineer", repoTask(t, ign, head, &orchestratorv1.Node{Id: "ign", Name: "fix typo", Command: "echo changed >> calc.go"}))
	require.Equal(t, int32(0), res.msg.GetExitCode(), "error %s; stderr %s", res.msg.GetError(), res.msg.GetStderr())
	require.Contains(t, res.msg.GetPatch(), "+changed")
	require.NotContains(t, res.msg.GetPatch(), "keep.log")

	// Ignore rules the task wrote itself travel with the patch; what they
	// hide is not in it, and the task's report says so.
	res, _ = s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "hide", Name: "fix typo",
		Command: `echo '*' > .gitignore && printf 'package calc\n\nfunc Helper() int { return 1 }\n' > helper.go && mkdir -p pkg && printf '*\n' > pkg/.gitignore && echo 'package pkg' > pkg/p.go`}))
	require.Equal(t, int32(0), res.msg.GetExitCode(), "error %s; stderr %s", res.msg.GetError(), res.msg.GetStderr())
	for _, f := range []string{"b/.gitignore", "b/pkg/.gitignore"} {
		require.Contains(t, res.msg.GetPatch(), "+++ "+f)
	}
	require.NotContains(t, res.msg.GetPatch(), "helper.go")
	_, report := pipelineOf(t, res)
	require.Contains(t, report.GetConcerns(), "not in the patch, hidden by ignore rules the task wrote: ")
	require.Contains(t, report.GetConcerns(), "helper.go")
	require.Contains(t, report.GetConcerns(), "pkg/p.go")

	// What git would commit other than the disk says fails the task:
	// attributes the task wrote that convert content, a repository of its
	// own (its files would not be in the patch), and grafts hiding a
	// planted object from the check.
	for _, c := range []struct{ plant, want string }{
		{`printf '$Id: HIDDEN $\n' > i.txt && echo 'i.txt ident' > .gitattributes`, `attributes the task wrote make "i.txt" differ`},
		{`mkdir sub && cd sub && git init -q && echo x > f.txt && git add f.txt && git -c user.name=a -c user.email=a@a.invalid commit -qm x`, "a git repository of its own at sub"},
		{`echo changed >> calc.go && H=$(git hash-object calc.go) && Y=$(printf 'INJECTED\n' | git hash-object -w --stdin) && ` +
			`mkdir -p .git/objects/$(echo $H | cut -c1-2) && cp .git/objects/$(echo $Y | cut -c1-2)/$(echo $Y | cut -c3-) .git/objects/$(echo $H | cut -c1-2)/$(echo $H | cut -c3-) && ` +
			`git -c user.name=a -c user.email=a@a.invalid commit -qam self && C=$(git -c user.name=a -c user.email=a@a.invalid commit-tree HEAD^{tree} -m c) && ` +
			`printf '%s %s\n%s %s\n' $(git rev-parse HEAD) $C ` + base + ` $C > .git/info/grafts`, "the task altered the checkout's object files"},
	} {
		res, _ = s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "convert", Name: "fix typo", Command: c.plant}))
		require.NotEqual(t, int32(0), res.msg.GetExitCode(), c.plant)
		require.Contains(t, res.msg.GetError(), c.want, c.plant)
		require.Empty(t, res.msg.GetPatch(), c.plant)
	}

	// An object file the task wrote under the name of its new contents
	// would make the patch say what is not on disk: the task fails instead.
	res, _ = s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "objects", Name: "fix typo",
		Command: `echo changed >> calc.go && H=$(git hash-object calc.go) && Y=$(printf 'INJECTED\n' | git hash-object -w --stdin) && ` +
			`mkdir -p .git/objects/$(echo $H | cut -c1-2) && cp .git/objects/$(echo $Y | cut -c1-2)/$(echo $Y | cut -c3-) .git/objects/$(echo $H | cut -c1-2)/$(echo $H | cut -c3-)`}))
	require.NotEqual(t, int32(0), res.msg.GetExitCode())
	require.Contains(t, res.msg.GetError(), "the task altered the checkout's object files")
	require.Empty(t, res.msg.GetPatch())

	// A task that committed its changes itself has them in its patch.
	res, _ = s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "self",
		Command: "echo changed >> calc.go && git -c user.name=a -c user.email=a@a.invalid commit --quiet -am 'fix: typo'"}))
	require.Equal(t, int32(0), res.msg.GetExitCode(), "error %s; stderr %s", res.msg.GetError(), res.msg.GetStderr())
	require.Contains(t, res.msg.GetPatch(), "+changed")

	// A task that replaces the checkout's .git gets its changes refused,
	// not committed into whatever repository the new .git names.
	res, _ = s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "swap",
		Command: "rm -rf .git && git init --quiet . && echo changed >> calc.go"}))
	require.NotEqual(t, int32(0), res.msg.GetExitCode())
	require.Contains(t, res.msg.GetError(), "the task replaced the checkout's .git")
	require.Empty(t, res.msg.GetPatch())
}

// repoWith is gitRepo with files added in a second commit, and its HEAD.
func repoWith(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	dir, _ := gitRepo(t)
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	var head string
	for _, args := range [][]string{{"add", "-f", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "more"}, {"rev-parse", "HEAD"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		b, err := cmd.Output()
		require.NoError(t, err, string(b))
		head = strings.TrimSpace(string(b))
	}
	return dir, head
}

// The starting commit's own attributes and ignore rules are the
// repository's intent: they may convert and hide what the task writes
// without the task failing or being reported; attributes the task hid
// from the patch are still checked; and a task may commit without saying
// who it is.
func TestRepositoryRulesAreTheRepositorys(t *testing.T) {
	t.Parallel()
	s := pipelineService(t)
	run := func(repo, base, cmd string) taskOutcome {
		out, _ := s.runTask(context.Background(), "engineer", repoTask(t, repo, base, &orchestratorv1.Node{Id: "n", Name: "fix typo", Command: cmd}))
		return out
	}

	repo, base := repoWith(t, map[string]string{".gitattributes": "*.bat text eol=crlf\n", "run.bat": "@echo off\n"})
	out := run(repo, base, `echo '*.png binary' >> .gitattributes && printf 'echo hi\r\n' >> run.bat`)
	require.Equal(t, int32(0), out.msg.GetExitCode(), "error %s", out.msg.GetError())

	repo, base = repoWith(t, map[string]string{".gitattributes": "* text=auto eol=crlf\n", ".gitignore": "node_modules/\n*.log\n"})
	out = run(repo, base, `mkdir -p node_modules && echo n > node_modules/y && echo a > a.log && printf 'x\r\n' >> calc.go`)
	require.Equal(t, int32(0), out.msg.GetExitCode(), "error %s", out.msg.GetError())
	_, report := pipelineOf(t, out)
	require.NotContains(t, report.GetConcerns(), "hidden by ignore rules")

	// The starting commit's attributes stay where they were: a directory
	// turned into a symlink does not carry them elsewhere.
	repo, base = repoWith(t, map[string]string{"sub/.gitattributes": "*.txt ident\n", "sub/a.txt": "a\n"})
	out = run(repo, base, `rm -rf sub && mkdir other && ln -s other sub && printf '*.txt ident\n' > other/.gitattributes && printf '$Id: ON-DISK $\n' > other/i.txt`)
	require.NotEqual(t, int32(0), out.msg.GetExitCode())
	require.Contains(t, out.msg.GetError(), "the task made sub, which holds attributes, something other than a directory")
	out = run(repo, base, `rm -rf sub && echo changed >> calc.go`)
	require.Equal(t, int32(0), out.msg.GetExitCode(), "error %s", out.msg.GetError())
	require.Contains(t, out.msg.GetPatch(), "deleted file mode 100644")

	repo, base = gitRepo(t)
	out = run(repo, base, `printf '.gitattributes\n' > .gitignore && echo 'calc.go ident' > .gitattributes && printf '$Id: KEEP $\n' >> calc.go`)
	require.NotEqual(t, int32(0), out.msg.GetExitCode())
	require.Contains(t, out.msg.GetError(), `attributes the task wrote make "calc.go" differ`)

	out = run(repo, base, `echo x >> calc.go && git commit -qam 'fix: typo' && echo y >> calc.go`)
	require.Equal(t, int32(0), out.msg.GetExitCode(), "error %s; stderr %s", out.msg.GetError(), out.msg.GetStderr())
	require.Contains(t, out.msg.GetPatch(), "+y")
}
