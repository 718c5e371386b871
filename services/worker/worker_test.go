package worker

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

// testCacheRoot is the Go caches shared by this process's tests, so that
// the standard library is compiled once per run, not once per test.
var testCacheRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sylk-worker-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testCacheRoot = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.WorkspaceRoot = t.TempDir()
	// The task user (the tests run as root) passes through the test's
	// directory to its workspaces; without namespaces the commands run as
	// whoever runs the tests.
	require.NoError(t, os.Chmod(filepath.Dir(cfg.WorkspaceRoot), 0o711))
	cfg.Tools.UnsafeRunTasksAsRoot = true
	// Caches of this test process: a worker's default cache root holds
	// the task user's caches, which commands running as a capability-less
	// root cannot write, and a cache left by another run (or by namespaced
	// tasks, whose files another user owns) may not be readable.
	cfg.CacheRoot = testCacheRoot
	cfg.Tools.InterruptGrace = 300 * time.Millisecond
	cfg.Tools.TerminateGrace = 300 * time.Millisecond
	cfg.Tools.DefaultTimeout = 30 * time.Second
	cfg.Tools.ExtendOnOutput = 200 * time.Millisecond
	cfg.MaxOutputBytes = 4096
	cfg.ID = "w-test"
	// A test that stops its worker with a task running does not wait the
	// default drain timeout.
	cfg.DrainTimeout = 2 * time.Second
	return cfg
}

// offlineService is a worker without a bus, for running tasks directly.
func offlineService(t testing.TB, cfg Config) *Service {
	require.NoError(t, cfg.Validate())
	ex, err := newExecutor(cfg)
	require.NoError(t, err)
	t.Cleanup(ex.Close)
	return &Service{cfg: cfg, log: logx.Discard(), exec: ex, scratch: newScratchPool(cfg.WorkspaceRoot, 0),
		metrics: newMetrics(promauto.With(prometheus.NewRegistry()))}
}

func dispatch(cmd string) *taskv1.TaskDispatch {
	return &taskv1.TaskDispatch{RunId: "r1", NodeId: "n1", Attempt: 1, Role: "engineer", Node: &orchestratorv1.Node{Id: "n1", Command: cmd},
		Priority: messagev1.Priority_PRIORITY_PIPELINE}
}

func TestRunTaskOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cmd        string
		exit       int32
		stdout     string
		stderr     string
		wantErr    string
		stdoutCont string
	}{
		{name: "success", cmd: "echo hello", stdout: "hello\n"},
		{name: "exit code", cmd: "echo out; echo err >&2; exit 3", exit: 3, stdout: "out\n", stderr: "err\n"},
		{name: "command not found", cmd: "no-such-command-sylk", exit: 127, stdoutCont: ""},
		{name: "runs in the workspace", cmd: "pwd; test \"$PWD\" = \"$HOME\" && echo same", stdoutCont: "same\n"},
		{name: "tmpdir inside the workspace", cmd: "test -d \"$TMPDIR\" && case \"$TMPDIR\" in \"$HOME\"/*) echo inside;; esac", stdoutCont: "inside\n"},
		{name: "no stdin", cmd: "cat; echo done", stdout: "done\n"},
		{name: "killed by a signal", cmd: "kill -9 $$", exit: 137},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := offlineService(t, testConfig(t))
			out, cancelled := s.runTask(context.Background(), "engineer", dispatch(tt.cmd))
			require.False(t, cancelled)
			r := out.msg
			require.Equal(t, tt.exit, r.GetExitCode(), "stderr: %s", r.GetStderr())
			if tt.stdout != "" {
				require.Equal(t, tt.stdout, r.GetStdout())
			}
			if tt.stderr != "" {
				require.Equal(t, tt.stderr, r.GetStderr())
			}
			require.Contains(t, r.GetStdout(), tt.stdoutCont)
			require.Equal(t, "w-test", r.GetWorkerId())
			require.False(t, r.GetTimedOut())
			require.Positive(t, r.GetDuration().AsDuration())
		})
	}
}

func TestWorkspaceIsFreshAndRemoved(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := offlineService(t, cfg)
	for range 2 {
		out, _ := s.runTask(context.Background(), "engineer", dispatch("ls -A; test -e marker && echo reused; touch marker"))
		require.Equal(t, int32(0), out.msg.GetExitCode())
		require.Equal(t, ".tmp\n", out.msg.GetStdout())
	}
	entries, err := os.ReadDir(cfg.WorkspaceRoot)
	require.NoError(t, err)
	require.Empty(t, entries, "workspaces must be removed")
}

// A task's command cannot reach another task's workspace under the
// workspace root, nor write beside it, where the kernel confines commands
// (toolexec's confinement).
func TestTaskCannotReachOtherWorkspaces(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := offlineService(t, cfg)
	other := filepath.Join(cfg.WorkspaceRoot, "sylk-task-other")
	require.NoError(t, os.Mkdir(other, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(other, "main.go"), []byte("another tenant's code"), 0o600))
	run := func(cmd string) *taskv1.TaskResult {
		out, cancelled := s.runTask(context.Background(), "engineer", dispatch(cmd))
		require.False(t, cancelled)
		return out.msg
	}
	if !s.exec.Confined() {
		require.Zero(t, run("cat ../sylk-task-other/main.go").GetExitCode(), "without confinement this kernel lets it through")
		return
	}
	for _, cmd := range []string{"cat ../sylk-task-other/main.go", "ls ..", "echo planted > ../sylk-task-other/main.go", "echo x > ../planted"} {
		r := run(cmd)
		require.NotZero(t, r.GetExitCode(), "%s: %s", cmd, r.GetStdout())
		require.NotContains(t, r.GetStdout(), "another tenant's code")
	}
	got, err := os.ReadFile(filepath.Join(other, "main.go"))
	require.NoError(t, err)
	require.Equal(t, "another tenant's code", string(got))
	require.NoFileExists(t, filepath.Join(cfg.WorkspaceRoot, "planted"))
	require.Zero(t, run("echo mine > own && cat own").GetExitCode())
}

// Each user's tasks get Go caches of their own, which the tasks of another
// user, of the same tenant or another, can neither read nor write; a
// user's later tasks find what the earlier ones cached.
func TestUsersHaveCachesOfTheirOwn(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.CacheRoot = t.TempDir()
	s := offlineService(t, cfg)
	run := func(tenant, user, cmd string) *taskv1.TaskResult {
		d := dispatch(cmd)
		d.TenantId, d.UserId = tenant, user
		out, cancelled := s.runTask(context.Background(), "engineer", d)
		require.False(t, cancelled)
		return out.msg
	}
	a := run("tenant-a", "alice", `echo compiled > "$GOCACHE/entry" && echo "$GOCACHE"`)
	require.Zero(t, a.GetExitCode(), a.GetStderr())
	aCache := strings.TrimSpace(a.GetStdout())
	again := run("tenant-a", "alice", `cat "$GOCACHE/entry"`)
	require.Equal(t, "compiled\n", again.GetStdout(), again.GetStderr())
	others := []struct{ tenant, user string }{{"tenant-a", "bob"}, {"tenant-b", "alice"}}
	for _, o := range others {
		b := run(o.tenant, o.user, `echo "$GOCACHE"; echo "$GOMODCACHE" > "$GOCACHE/own"`)
		require.Zero(t, b.GetExitCode(), b.GetStderr())
		require.NotEqual(t, aCache, strings.TrimSpace(strings.Split(b.GetStdout(), "\n")[0]), "%s of %s", o.user, o.tenant)
	}
	if !s.exec.Confined() {
		return
	}
	for _, o := range others {
		for _, cmd := range []string{"cat " + aCache + "/entry", "echo planted > " + aCache + "/entry", "ls " + aCache} {
			r := run(o.tenant, o.user, cmd)
			require.NotZero(t, r.GetExitCode(), "%s of %s: %s: %s", o.user, o.tenant, cmd, r.GetStdout())
		}
	}
	got, err := os.ReadFile(filepath.Join(aCache, "entry"))
	require.NoError(t, err)
	require.Equal(t, "compiled\n", string(got))
}

// While commands are confined, every task gets a directory of its own,
// never one an earlier task had: what that task left running has no
// rights to it. A cgroup per command does not change this (see
// scratchReuse).
func TestConfinedTasksGetFreshDirectories(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := offlineService(t, cfg)
	if !s.exec.Confined() {
		require.Equal(t, cfg.Concurrency, scratchReuse(cfg, s.exec))
		return
	}
	require.Zero(t, scratchReuse(cfg, s.exec))
	s.scratch = newScratchPool(cfg.WorkspaceRoot, scratchReuse(cfg, s.exec))
	seen := map[string]bool{}
	for range 3 {
		out, _ := s.runTask(context.Background(), "engineer", dispatch("pwd"))
		require.Zero(t, out.msg.GetExitCode())
		require.False(t, seen[out.msg.GetStdout()], "a directory used twice")
		seen[out.msg.GetStdout()] = true
	}
}

// Not parallel: it sets environment variables of the test process.
func TestEnvironmentIsStripped(t *testing.T) {
	t.Setenv("SYLK_TEST_API_KEY", "do-not-leak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak-either")
	t.Setenv("SYLK_POSTGRES_DSN", "postgres://u:do-not-leak@h/db")
	t.Setenv("GITHUB_TOKEN", "do-not-leak-3")
	t.Setenv("SYLK_HARMLESS_FOR_TEST", "x")
	t.Setenv("BUILD_FLAVOUR", "kept")
	s := offlineService(t, testConfig(t))
	out, _ := s.runTask(context.Background(), "engineer", dispatch("env"))
	require.Equal(t, int32(0), out.msg.GetExitCode())
	env := out.msg.GetStdout()
	require.NotContains(t, env, "do-not-leak")
	require.NotContains(t, env, "SYLK_", "the worker's own settings stay out")
	require.Contains(t, env, "BUILD_FLAVOUR=kept\n")
	require.Contains(t, env, "PATH=")
	require.Contains(t, env, "HOME="+s.cfg.WorkspaceRoot)

	// Patterns of one's own add to the built-in ones, which no
	// configuration can drop.
	t.Setenv("SYLK_INTERNAL_KEY", "do-not-leak-4")
	t.Setenv("BUILD_CERT", "own-pattern")
	cfg := testConfig(t)
	cfg.Tools.ExtraSecretPatterns = []string{"*_CERT"}
	s = offlineService(t, cfg)
	out, _ = s.runTask(context.Background(), "engineer", dispatch("env"))
	require.Equal(t, int32(0), out.msg.GetExitCode())
	env = out.msg.GetStdout()
	require.NotContains(t, env, "do-not-leak")
	require.NotContains(t, env, "SYLK_")
	require.NotContains(t, env, "own-pattern")
	require.Contains(t, env, "BUILD_FLAVOUR=kept\n")
}

// gone reports whether pid no longer runs (absent, or a zombie nobody reaped yet).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func pids(t *testing.T, out string) (int, int) {
	t.Helper()
	m := regexp.MustCompile(`child=(\d+)\s+shell=(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "output: %q", out)
	child, _ := strconv.Atoi(m[1])
	shell, _ := strconv.Atoi(m[2])
	return child, shell
}

func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cmd  string
		exit int32
	}{
		{"interrupted", "sleep 300 & echo child=$! shell=$$; wait", 128 + int32(syscall.SIGINT)},
		{"terminated after ignoring SIGINT", "trap '' INT; sleep 300 & echo child=$! shell=$$; while :; do wait; done", 128 + int32(syscall.SIGTERM)},
		{"killed after ignoring SIGINT and SIGTERM", "trap '' INT TERM; sleep 300 & echo child=$! shell=$$; while :; do wait; done", 128 + int32(syscall.SIGKILL)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := offlineService(t, testConfig(t))
			d := dispatch(tt.cmd)
			d.Timeout = durationpb.New(300 * time.Millisecond)
			start := time.Now()
			out, _ := s.runTask(context.Background(), "engineer", d)
			r := out.msg
			require.True(t, r.GetTimedOut())
			require.Equal(t, tt.exit, r.GetExitCode())
			require.Contains(t, r.GetError(), "timed out after 300ms")
			require.Less(t, time.Since(start), 10*time.Second)
			child, shell := pids(t, r.GetStdout())
			require.Eventually(t, func() bool { return gone(child) && gone(shell) }, 5*time.Second, 20*time.Millisecond)
		})
	}
}

func TestLeftoverBackgroundProcessIsKilled(t *testing.T) {
	t.Parallel()
	s := offlineService(t, testConfig(t))
	out, _ := s.runTask(context.Background(), "engineer", dispatch("sleep 300 >/dev/null 2>&1 & echo child=$! shell=$$"))
	require.Equal(t, int32(0), out.msg.GetExitCode())
	require.False(t, out.msg.GetTimedOut())
	child, _ := pids(t, out.msg.GetStdout())
	require.Eventually(t, func() bool { return gone(child) }, 5*time.Second, 20*time.Millisecond)
}

func TestOutputTruncation(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.MaxOutputBytes = 1024
	s := offlineService(t, cfg)
	// 100000 bytes on stdout: "0123456789" repeated, head and tail known.
	d := dispatch(`i=0; while [ $i -lt 10000 ]; do printf 0123456789; i=$((i+1)); done; printf END; echo small >&2`)
	out, _ := s.runTask(context.Background(), "engineer", d)
	r := out.msg
	require.Equal(t, int32(0), r.GetExitCode())
	require.True(t, r.GetStdoutTruncated())
	require.False(t, r.GetStderrTruncated())
	require.Equal(t, "small\n", r.GetStderr())
	head, tail, ok := strings.Cut(r.GetStdout(), "\n... [98979 bytes truncated] ...\n")
	require.True(t, ok, "stdout: %q", r.GetStdout())
	require.Len(t, head, 512)
	require.True(t, strings.HasPrefix(head, "0123456789"))
	require.Len(t, tail, 512)
	require.True(t, strings.HasSuffix(tail, "789END"))

	// The dispatch's own limit applies when it is lower.
	d.OutputLimitBytes = 100
	out, _ = s.runTask(context.Background(), "engineer", d)
	require.Contains(t, out.msg.GetStdout(), "[99903 bytes truncated]")
}

func TestCancelStopsTheCommand(t *testing.T) {
	t.Parallel()
	s := offlineService(t, testConfig(t))
	ctx, cancel := context.WithCancel(context.Background())
	r := make(chan toolexec.Result, 1)
	go func() {
		res, err := s.exec.Execute(ctx, toolexec.Invocation{Command: "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 300", WorkingDir: s.cfg.WorkspaceRoot})
		require.NoError(t, err)
		r <- res
	}()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(s.cfg.WorkspaceRoot + "/pid")
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	res := <-r
	require.True(t, res.Cancelled)
	require.True(t, res.Partial)
	require.False(t, res.TimedOut)
	require.Equal(t, 128+int(syscall.SIGINT), res.ExitCode)
	require.Equal(t, "SIGINT", res.KillSignal)
	require.Eventually(t, func() bool { return gone(pid) }, 5*time.Second, 20*time.Millisecond)

	// A cancelled task is reported as cancelled, not as a result.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, cancelled := s.runTask(ctx2, "engineer", dispatch("sleep 5"))
	require.True(t, cancelled)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := DefaultConfig()
	require.NoError(t, good.Validate())
	bad := good
	bad.Roles = []string{"engineer", "engineer", "librarian"}
	bad.Concurrency = 0
	bad.WorkspaceRoot = "relative"
	bad.ID = ""
	err := bad.Validate()
	require.Error(t, err)
	for _, want := range []string{"listed twice", `unknown role "librarian"`, "worker.concurrency", "worker.workspace-root", "worker.id"} {
		require.Contains(t, err.Error(), want)
	}
	c := testenv.FromFlags[Config](t, "-worker.roles", " tester, inspector ")
	require.Equal(t, []string{"tester", "inspector"}, c.Roles)
}

// TestThroughTheBus runs dispatches end to end: published on the task
// subject, results read from the result subject.
func TestThroughTheBus(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	cfg := testConfig(t)
	cfg.Roles = []string{"tester"}
	cfg.MaxOutputBytes = 8 << 20 // more than a NATS message holds
	reg := prometheus.NewRegistry()
	svc, err := New(cfg, app.Deps{Log: logx.Discard(), Bus: bus, Registerer: reg})
	require.NoError(t, err)
	grantClaims(t, bus)
	testenv.Start(t, svc.Run)
	ctx := context.Background()
	require.NoError(t, topology.EnsureTasks(ctx, bus))

	send := func(node, cmd string) {
		d := &taskv1.TaskDispatch{TenantId: "t1", SessionId: "s1", RunId: "r1", NodeId: node, Attempt: 1, Role: "tester",
			Node:  &orchestratorv1.Node{Id: node, Command: cmd},
			Fence: &taskv1.TaskFence{AttemptId: "r1:" + node + ":1", ReplicaId: "o1"}}
		_, err := bus.Publish(ctx, topology.TaskSubject(bus, "tester"), "r1:"+node+":1", d)
		require.NoError(t, err)
	}
	send("ok", "echo fine")
	send("bad", "exit 4")
	send("prompt", "")
	send("huge", "head -c 3000000 /dev/zero | tr '\\0' a; head -c 3000000 /dev/zero | tr '\\0' b >&2")

	cons, err := bus.EnsureConsumer(ctx, topology.ResultConsumer(bus, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	got := map[string]*taskv1.TaskResult{}
	require.Eventually(t, func() bool {
		batch, err := cons.Fetch(4, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false
		}
		for msg := range batch.Messages() {
			var r taskv1.TaskResult
			require.NoError(t, proto.Unmarshal(msg.Data(), &r))
			require.Equal(t, "r1:"+r.GetNodeId()+":1:result", msg.Headers().Get(jetstream.MsgIDHeader))
			got[r.GetNodeId()] = &r
			require.NoError(t, msg.Ack())
		}
		return len(got) == 4
	}, 20*time.Second, 10*time.Millisecond)

	require.Equal(t, "fine\n", got["ok"].GetStdout())
	require.Zero(t, got["ok"].GetExitCode())
	require.Empty(t, got["ok"].GetError())
	require.Equal(t, "t1", got["ok"].GetTenantId())
	require.Equal(t, "r1", got["ok"].GetRunId())
	require.Equal(t, int32(1), got["ok"].GetAttempt())
	require.Equal(t, "r1:ok:1", got["ok"].GetFence().GetAttemptId(), "the dispatch's fence comes back")
	require.Equal(t, "o1", got["ok"].GetFence().GetReplicaId())
	require.NotNil(t, got["ok"].GetReceivedTime())
	require.NotNil(t, got["ok"].GetReportedTime())
	require.Equal(t, int32(4), got["bad"].GetExitCode())
	require.Zero(t, got["prompt"].GetExitCode())
	require.Equal(t, NoModelOutput, got["prompt"].GetStdout())
	huge := got["huge"]
	require.True(t, huge.GetStdoutTruncated())
	require.True(t, huge.GetStderrTruncated())
	require.True(t, strings.HasPrefix(huge.GetStdout(), "aaaa"))
	require.True(t, strings.HasPrefix(huge.GetStderr(), "bbbb"))
	require.Less(t, proto.Size(got["huge"]), int(bus.Conn.MaxPayload()))
	require.Greater(t, len(huge.GetStdout()), 100<<10, "the room left is still used")
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(svc.metrics.tasks.WithLabelValues("tester", "failed")) == 1 &&
			testutil.ToFloat64(svc.metrics.tasks.WithLabelValues("tester", "succeeded")) == 3
	}, 5*time.Second, 10*time.Millisecond)
	requireOnlyEmptiedScratch(t, cfg.WorkspaceRoot)
}

// TestResultFitsTheBusWhateverTheOutput: outputs that grow when rendered
// (bytes that are not UTF-8) and a pipeline's outputs (no command result to
// render again) are cut until the result fits in one NATS message; a result
// that does not fit is never published and its task runs again and again.
func TestResultFitsTheBusWhateverTheOutput(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	svc := &Service{bus: bus}
	payload := int(bus.Conn.MaxPayload())

	// Each invalid byte becomes a three-byte U+FFFD.
	binary := strings.Repeat("\xffa", payload)
	tool := &toolexec.Result{Stdout: binary, Stderr: binary}
	res := &taskv1.TaskResult{NodeId: "bin"}
	res.Stdout, res.StdoutTruncated = tool.RenderStdout(4 * payload)
	res.Stderr, res.StderrTruncated = tool.RenderStderr(4 * payload)
	svc.fitPayload(taskOutcome{msg: res, tool: tool})
	require.LessOrEqual(t, proto.Size(res), payload-payloadSlack)
	require.True(t, res.GetStdoutTruncated() && res.GetStderrTruncated())
	require.True(t, strings.HasPrefix(res.GetStdout(), "\uFFFDa"))
	require.Greater(t, len(res.GetStdout()), payload/8, "the room left is still used")

	// A pipeline's log and an interrupted stage's output.
	res = &taskv1.TaskResult{NodeId: "pipe", Stdout: "loop 1: engineer\n" + strings.Repeat("o", payload), Stderr: strings.Repeat("e", payload) + "end"}
	svc.fitPayload(taskOutcome{msg: res})
	require.LessOrEqual(t, proto.Size(res), payload-payloadSlack)
	require.True(t, res.GetStdoutTruncated() && res.GetStderrTruncated())
	require.True(t, strings.HasPrefix(res.GetStdout(), "loop 1: engineer\n"))
	require.True(t, strings.HasSuffix(res.GetStderr(), "end"))
	require.Contains(t, res.GetStdout(), "bytes truncated")
}

// TestSilentWorkersTaskIsReassigned: a worker that took a task and went
// silent (no heartbeat, no ack: it died) loses it after AckWait, and a live
// worker runs it.
func TestSilentWorkersTaskIsReassigned(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	cfg := testConfig(t)
	cfg.Roles = []string{"inspector"}
	cfg.AckWait, cfg.Heartbeat = time.Second, 300*time.Millisecond
	ctx := context.Background()
	require.NoError(t, topology.EnsureTasks(ctx, bus))
	spec := topology.TaskConsumer(bus, "inspector", natsx.ConsumerSpec{AckWait: cfg.AckWait})
	silent, err := bus.EnsureConsumer(ctx, spec)
	require.NoError(t, err)
	d := &taskv1.TaskDispatch{TenantId: "t1", RunId: "r1", NodeId: "n1", Attempt: 1, Role: "inspector", Node: &orchestratorv1.Node{Id: "n1", Command: "echo done"}}
	_, err = bus.Publish(ctx, topology.TaskSubject(bus, "inspector"), "r1:n1:1", d)
	require.NoError(t, err)
	batch, err := silent.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var taken int
	for range batch.Messages() {
		taken++ // and never acknowledged
	}
	require.Equal(t, 1, taken)

	svc, err := New(cfg, app.Deps{Log: logx.Discard(), Bus: bus, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	grantClaims(t, bus)
	testenv.Start(t, svc.Run)

	results, err := bus.EnsureConsumer(ctx, topology.ResultConsumer(bus, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	var got *taskv1.TaskResult
	require.Eventually(t, func() bool {
		b, err := results.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false
		}
		for msg := range b.Messages() {
			got = &taskv1.TaskResult{}
			require.NoError(t, proto.Unmarshal(msg.Data(), got))
			require.NoError(t, msg.Ack())
		}
		return got != nil
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, "done\n", got.GetStdout())
	require.Equal(t, "w-test", got.GetWorkerId())
}

// A task that comes back to the queue every time (here: no subprocess slot
// is ever free) is reported failed at its Config.MaxDeliveries-th delivery,
// saying why, instead of being dropped by the server with its node left
// dispatched, or handed back for ever.
func TestTaskHandedBackTooOftenIsReportedFailed(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	cfg := testConfig(t)
	cfg.Roles = []string{"tester"}
	cfg.MaxDeliveries = 3
	cfg.Tools.Slots = 1
	cfg.Tools.UserReservePercent = 0
	cfg.Tools.AcquireTimeout = 10 * time.Millisecond
	ctx := context.Background()
	svc, err := New(cfg, app.Deps{Log: logx.Discard(), Bus: bus, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	held, err := svc.exec.Slots().Acquire(ctx, toolexec.ClassPipeline, 0, 0, nil)
	require.NoError(t, err)
	defer held()
	grantClaims(t, bus)
	testenv.Start(t, svc.Run)
	require.NoError(t, topology.EnsureTasks(ctx, bus))
	d := &taskv1.TaskDispatch{TenantId: "t1", RunId: "r1", NodeId: "n1", Attempt: 1, Role: "tester", Node: &orchestratorv1.Node{Id: "n1", Command: "echo ran"}}
	_, err = bus.Publish(ctx, topology.TaskSubject(bus, "tester"), "r1:n1:1", d)
	require.NoError(t, err)

	results, err := bus.EnsureConsumer(ctx, topology.ResultConsumer(bus, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	var r *taskv1.TaskResult
	require.Eventually(t, func() bool {
		b, err := results.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false
		}
		for msg := range b.Messages() {
			r = &taskv1.TaskResult{}
			require.NoError(t, proto.Unmarshal(msg.Data(), r))
			require.NoError(t, msg.Ack())
		}
		return r != nil
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, "t1", r.GetTenantId())
	require.Equal(t, "n1", r.GetNodeId())
	require.Equal(t, int32(-1), r.GetExitCode())
	require.Contains(t, r.GetError(), "came back to the queue 2 times without a result")
	require.Empty(t, r.GetStdout(), "it was not run")

	cons, err := bus.JS.Consumer(ctx, bus.Stream(topology.StreamTasks), topology.DurableWorker("tester"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, 10*time.Second, 10*time.Millisecond, "the dispatch is done with")
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.Delivered.Consumer)
}

// A result is offered to a bus that is down until it comes back, for longer
// than a few tries: the task is not handed back to the queue, and so not
// run again, because of an outage the result outlives.
func TestResultWaitsForTheBus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(port int) *server.Server {
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		require.NoError(t, err)
		go ns.Start()
		require.True(t, ns.ReadyForConnections(10*time.Second))
		return ns
	}
	ns := start(-1)
	port := ns.Addr().(*net.TCPAddr).Port
	bus, err := natsx.Connect(context.Background(), natsx.Config{URL: ns.ClientURL(), Prefix: "busout"}, logx.Discard(), t.Name())
	require.NoError(t, err)
	t.Cleanup(bus.Conn.Close)
	require.NoError(t, topology.EnsureTasks(context.Background(), bus))

	svc := &Service{bus: bus, log: logx.Discard()}
	svc.reportBounds.within, svc.reportBounds.each, svc.reportBounds.backoff = time.Minute, 100*time.Millisecond, 10*time.Millisecond
	restarted := make(chan *server.Server, 1)
	svc.reportBounds.retried = func(attempt int) {
		// Past the five tries a result used to get, the bus comes back.
		if attempt == 8 {
			restarted <- start(port)
		}
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	r := &taskv1.TaskResult{TenantId: "t1", RunId: "run1", NodeId: "n1", Attempt: 1, Stdout: "done\n"}
	require.NoError(t, svc.publishResult(context.Background(), r))
	back := <-restarted
	t.Cleanup(back.Shutdown)

	results, err := bus.EnsureConsumer(context.Background(), topology.ResultConsumer(bus, natsx.ConsumerSpec{}))
	require.NoError(t, err)
	info, err := results.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.NumPending, "one copy of the result, whatever the tries left in the client's buffer")
}

// In namespaces of their own, tasks cannot name each other's directories,
// so cannot change their permissions, and what a task leaves running ends
// with it; so task directories are reused even while commands are confined.
func TestNamespacedTasks(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.CacheRoot = t.TempDir() // namespaced tasks' files are not the other tests' to read
	cfg.Tools.Namespaces = toolexec.NamespacesOn
	cfg.Tools.TaskInit = testenv.TaskInit(t)
	cfg.Tools.Cgroup = ""
	s := offlineService(t, cfg)
	require.Equal(t, cfg.Concurrency, scratchReuse(cfg, s.exec))
	s.scratch = newScratchPool(cfg.WorkspaceRoot, scratchReuse(cfg, s.exec))
	other := filepath.Join(cfg.WorkspaceRoot, "sylk-task-other")
	require.NoError(t, os.Mkdir(other, 0o700))
	run := func(cmd string) *taskv1.TaskResult {
		t.Helper()
		out, cancelled := s.runTask(context.Background(), "engineer", dispatch(cmd))
		require.False(t, cancelled)
		return out.msg
	}
	r := run("chmod 777 ../sylk-task-other")
	require.NotZero(t, r.GetExitCode())
	require.Contains(t, r.GetStderr(), "No such file")
	fi, err := os.Stat(other)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	marker := "sylk-left-" + testenv.ID()
	first := run("pwd; setsid env -i sh -c 'exec -a " + marker + " sleep 300' </dev/null >/dev/null 2>&1 &")
	require.Zero(t, first.GetExitCode(), first.GetStderr())
	second := run("pwd; ls -A")
	require.Zero(t, second.GetExitCode(), second.GetStderr())
	require.Equal(t, first.GetStdout()+".tmp\n", second.GetStdout(), "the directory is reused, emptied")
	require.Empty(t, testenv.ProcessesWith(t, marker), "a process outlived its task")
}
