package toolexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Invocation is one tool call (spec C-23).
type Invocation struct {
	// Tool names the tool for its timeout and parser; empty means derived
	// from Command and Args ("go test", "git").
	Tool    string
	Command string
	Args    []string
	// WorkingDir must be absolute and inside the executor's boundary.
	WorkingDir string
	// Env is added to the stripped parent environment.
	Env   map[string]string
	Stdin io.Reader
	// StreamTo receives every output line as it comes ("stdout", "stderr")
	// and the kill sequence's messages ("status"). It must not block long.
	StreamTo func(stream, line string)
	// Timeout overrides the tool's base timeout when positive.
	Timeout  time.Duration
	Class    Class
	Priority int
	// NoCache runs the tool even when its output is cached (spec C-33).
	NoCache bool
	// Workspace is the directory holding WorkingDir that the call's paths
	// belong to (a task's workspace, whose HOME and TMPDIR are inside it):
	// a cached output is shared between workspaces with the same files,
	// its paths moved from one to the other. Empty means WorkingDir.
	Workspace string
	// Writable are directories a confined call may also write, besides
	// its workspace and Config.ConfineWritable (a user's own tool caches,
	// say). Each must exist.
	Writable []string
	// CacheScope says who may be served this call's cached output: only
	// calls with the same scope (a tenant's user, say) share outputs, so
	// that one who could sway a tool's output (through its caches, say)
	// cannot hand it to another.
	CacheScope string
}

// KillResult says how a stopped process ended (spec C-27).
type KillResult struct {
	SentSIGINT, SentSIGTERM, SentSIGKILL bool
	// ExitedAfter is the last signal sent before the process exited:
	// "SIGINT", "SIGTERM" or "SIGKILL".
	ExitedAfter string
}

// Result is what a tool call produced.
type Result struct {
	// ExitCode is the status; 128+N when signal N ended the process.
	ExitCode        int
	Stdout, Stderr  string
	StdoutTruncated bool
	StderrTruncated bool
	Duration        time.Duration
	// Killed is set when the executor stopped the process (timeout or
	// cancellation); KillSignal is the last signal it sent.
	Killed     bool
	KillSignal string
	Kill       KillResult
	TimedOut   bool
	Cancelled  bool
	// Partial is set when the process was stopped: the output is what it
	// printed until then.
	Partial bool
	// Parsed is the registered parser's result, when one understood the
	// output; Truncated otherwise.
	Parsed    any
	Truncated *Truncated
	// PID is the process (and process group) id.
	PID int
	// Timeout is the base timeout that applied.
	Timeout time.Duration
	// Cached is set when the output is a previous run's (spec C-33), which
	// has now been reused CacheHits times; no process ran.
	Cached    bool
	CacheHits int

	stdout, stderr *capture
}

// RenderStdout returns stdout capped at limit bytes (head and tail kept,
// with a marker for the dropped middle) and whether anything was dropped.
func (r Result) RenderStdout(limit int) (string, bool) { return renderOf(r.stdout, r.Stdout, limit) }

// RenderStderr is RenderStdout for stderr.
func (r Result) RenderStderr(limit int) (string, bool) { return renderOf(r.stderr, r.Stderr, limit) }

func renderOf(c *capture, s string, limit int) (string, bool) {
	if c == nil {
		if len(s) <= limit {
			return s, false
		}
		c = newCapture(len(s))
		_, _ = c.Write([]byte(s))
	}
	return c.render(limit)
}

// Parser turns a tool's output into structured data; ok is false when it
// does not understand the output.
type Parser func(stdout, stderr string, exitCode int) (parsed any, ok bool)

// Messages of the kill sequence sent to StreamTo.
const (
	MsgStopping      = "Stopping..."
	MsgForceStopping = "Force stopping..."
	MsgKilled        = "Killed"
	MsgCleanup       = "Cleanup incomplete, some temp files may remain"
	MsgCached        = "Unchanged files: reusing the previous output"
)

// Executor runs tools (spec C-23..C-32).
type Executor struct {
	cfg      Config
	boundary *Boundary
	pool     SlotPool
	mu       sync.RWMutex
	parsers  map[string]Parser
	cache    *outputCache // nil when off
	// hidden are the directories confined commands may not read: the
	// boundary roots and Config.ConfineHidden, resolved.
	hidden []string
	// cgroups are the commands' cgroups, nil without (Config.Cgroup);
	// noCgroup says why CgroupAuto found none.
	cgroups  *cgroups
	noCgroup error
	// ns starts commands in namespaces of their own, nil without
	// (Config.Namespaces); noNamespaces says why NamespacesAuto found none.
	ns           *namespaces
	noNamespaces error
	// owners hands workspaces to the task user, nil when commands run as
	// the service's user (owner.go).
	owners *owners
	// landlockNet: commands run without namespaces under Landlock's
	// network rules; egress is the proxy of Config.NetworkAllow, nil
	// without (network.go).
	landlockNet bool
	egress      *egressProxy
	// reaper is the task init program commands start through when they
	// run without namespaces, "" without (noReaper says why): see
	// parentdeath.go.
	reaper   string
	noReaper error
}

// New builds an executor. pool may be shared between executors: a *Pool
// within one process, a *ClusterPool across the cluster. nil makes an
// in-process Pool from cfg.
func New(cfg Config, boundary *Boundary, pool SlotPool) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if boundary == nil {
		return nil, errors.New("toolexec: a boundary is required")
	}
	if err := protectProcess(); err != nil {
		return nil, err
	}
	if err := adoptOrphans(); err != nil {
		return nil, err
	}
	sweepDeadOwners()
	closeInheritedOnExec()
	if pool == nil || isNilPool(pool) {
		pool = NewPool(cfg.slots(), cfg.UserReservePercent)
	}
	e := &Executor{cfg: cfg, boundary: boundary, pool: pool, parsers: map[string]Parser{},
		cache: newOutputCache(cfg.CacheEntries, cfg.CacheBytes, cfg.CacheTTL), hidden: boundary.Roots()}
	for _, h := range cfg.ConfineHidden {
		e.hidden = append(e.hidden, resolved(h))
	}
	// Writable directories are named as they resolve, and none may hold a
	// hidden one: writing there would open every workspace.
	e.cfg.ConfineWritable = nil
	for _, w := range cfg.ConfineWritable {
		w = resolved(w)
		for _, h := range e.hidden {
			if within(w, h) {
				return nil, fmt.Errorf("toolexec.confine-writable: %s holds %s, which commands may not read", w, h)
			}
		}
		e.cfg.ConfineWritable = append(e.cfg.ConfineWritable, w)
	}
	// One within another is granted with it already.
	all := slices.Compact(slices.Sorted(slices.Values(e.cfg.ConfineWritable)))
	e.cfg.ConfineWritable = nil
	for _, w := range all {
		if !slices.ContainsFunc(all, func(o string) bool { return o != w && within(o, w) }) {
			e.cfg.ConfineWritable = append(e.cfg.ConfineWritable, w)
		}
	}
	var err error
	if e.cgroups, err = newCgroups(cfg.Cgroup); err != nil {
		if !errors.As(err, new(errCgroupUnavailable)) {
			return nil, err
		}
		e.noCgroup = err
	}
	uid, gid := 0, 0
	if os.Geteuid() == 0 {
		uid, gid = cfg.TaskUID, cfg.TaskGID
	}
	if e.ns, err = newNamespaces(cfg, uid, gid); err != nil {
		if !errors.As(err, new(errNamespacesUnavailable)) {
			e.Close()
			return nil, err
		}
		e.noNamespaces = err
	}
	e.findReaper()
	if err := e.isolate(uid, gid); err != nil {
		e.Close()
		return nil, err
	}
	e.RegisterParser("go build", ParseGoDiagnostics)
	e.RegisterParser("go vet", ParseGoDiagnostics)
	return e, nil
}

// InCgroups reports whether each command runs in a cgroup of its own,
// whose processes are killed when it ends, and, when not, why.
func (e *Executor) InCgroups() (bool, error) {
	if e.cgroups != nil {
		return true, nil
	}
	if e.noCgroup != nil {
		return false, e.noCgroup
	}
	return false, errors.New("toolexec.cgroup is off")
}

// Close removes the executor's cgroups. Commands still running keep theirs
// until they end.
func (e *Executor) Close() {
	if e.cgroups != nil {
		e.cgroups.close()
	}
	if e.egress != nil {
		e.egress.close()
	}
	if e.ns != nil && e.ns.proxy != nil {
		_ = e.ns.proxy.Close()
	}
}

// protectProcess makes this process non-dumpable, once. The commands an
// executor runs share its user; without this they could read its startup
// environment (the secrets StripEnv keeps from them: database addresses,
// provider keys) and its memory through /proc/<pid>/environ and
// /proc/<pid>/mem. A command is dumpable again once it has been exec'd, so
// this changes nothing for the commands themselves.
var protectProcess = sync.OnceValue(func() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("toolexec: make this process non-dumpable: %w", errno)
	}
	return nil
})

// checkWritable resolves a call's writable directory, which must be an
// existing directory holding no hidden one.
func (e *Executor) checkWritable(w string) (string, error) {
	if !filepath.IsAbs(w) {
		return "", fmt.Errorf("invalid invocation: writable directory %q: must be absolute", w)
	}
	res, err := filepath.EvalSymlinks(w)
	if err != nil {
		return "", fmt.Errorf("invalid invocation: writable directory: %w", err)
	}
	for _, h := range e.hidden {
		if within(res, h) {
			return "", fmt.Errorf("invalid invocation: writable directory %s holds %s", res, h)
		}
	}
	return res, nil
}

// resolved is p with its symlinks resolved. For a path that does not exist
// (yet), its nearest existing ancestor is resolved and the rest joined on:
// a directory made there later must be named as it will resolve.
func resolved(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for {
		if res, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(res, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// closeInheritedOnExec marks every descriptor above stderr close-on-exec.
// This process's own are already; one it inherited from whatever started it
// (an open file, a socket) would otherwise pass to every command it runs,
// past confinement, which checks paths when they are opened.
func closeInheritedOnExec() {
	_ = unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
}

// ProtectProcess makes this process non-dumpable (see protectProcess):
// every service calls it at start, since each runs some programs (git)
// on content its users control.
func ProtectProcess() error { return protectProcess() }

// SafeGitArgs are the options of a git call on a repository whose files
// the service did not write itself: no hooks, no file-system monitor and
// no global attributes file, whatever its configuration says.
var SafeGitArgs = []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null"}

// GitEnv is the environment of such a call: this process's, stripped of
// secrets like a tool's (extra as in Config.ExtraSecretPatterns), without
// prompts, without the system's and the user's configuration (a program the
// service runs as the same user could write the latter), and ignoring
// replace refs.
func GitEnv(extra []string) []string {
	return append(StripEnv(os.Environ(), extra, nil), "GIT_TERMINAL_PROMPT=0", "GIT_NO_REPLACE_OBJECTS=1",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
}

// Pool is the executor's in-process slot pool, nil when it uses another
// SlotPool (see Slots).
func (e *Executor) Pool() *Pool {
	p, _ := e.pool.(*Pool)
	return p
}

// Slots is the executor's slot pool, whatever its kind.
func (e *Executor) Slots() SlotPool { return e.pool }

// isNilPool reports a typed nil pool (a nil *Pool or *ClusterPool passed as
// a SlotPool).
func isNilPool(p SlotPool) bool {
	switch v := p.(type) {
	case *Pool:
		return v == nil
	case *ClusterPool:
		return v == nil
	}
	return false
}

// Boundary is the executor's boundary.
func (e *Executor) Boundary() *Boundary { return e.boundary }

// RegisterParser sets the parser of a tool ("go vet", "eslint").
func (e *Executor) RegisterParser(tool string, p Parser) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.parsers[strings.Join(strings.Fields(tool), " ")] = p
}

func (e *Executor) keys(inv Invocation) []string {
	if inv.Tool != "" {
		return []string{strings.Join(strings.Fields(inv.Tool), " ")}
	}
	return toolKeys(inv.Command, inv.Args)
}

// BaseTimeout is the timeout an invocation gets before adaptive extension.
func (e *Executor) BaseTimeout(inv Invocation) time.Duration {
	if inv.Timeout > 0 {
		return inv.Timeout
	}
	for _, k := range e.keys(inv) {
		if d, ok := e.cfg.ToolTimeouts[k]; ok {
			return d
		}
	}
	return e.cfg.DefaultTimeout
}

// ErrStart wraps a failure to start the process.
var ErrStart = errors.New("could not start the command")

// Execute runs inv. It returns an error (and no process ran) when the
// working directory is invalid, no slot was free in time, or the process
// could not start; a command that is not found exits 127 as under a shell.
// A stopped process (timeout, ctx done, preemption) is not an error: the
// result says Killed, with its partial output. A tool with a cache policy
// whose files are unchanged since a run within the TTL is not run: that
// run's result is returned, marked Cached, without taking a slot.
func (e *Executor) Execute(ctx context.Context, inv Invocation) (Result, error) {
	dir, err := e.boundary.CheckDir(inv.WorkingDir)
	if err != nil {
		return Result{ExitCode: -1}, err
	}
	if strings.TrimSpace(inv.Command) == "" {
		return Result{ExitCode: -1}, errors.New("invalid invocation: empty command")
	}
	ws, err := e.workspaceOf(inv, dir)
	if err != nil {
		return Result{ExitCode: -1}, err
	}
	writable := make([]string, len(inv.Writable))
	for i, w := range inv.Writable {
		if writable[i], err = e.checkWritable(w); err != nil {
			return Result{ExitCode: -1}, err
		}
	}
	inv.Writable = writable
	start := time.Now()
	pol, cacheable := e.cachePolicy(inv)
	var key string
	if cacheable {
		if key, cacheable = cacheKey(inv, dir, ws, pol); cacheable {
			if ent, hit := e.cache.get(key, start); hit {
				res := e.fromCache(inv, ws, ent)
				res.Duration = time.Since(start)
				return res, nil
			}
		}
	}
	runCtx, preempt := context.WithCancelCause(ctx)
	defer preempt(nil)
	release, err := e.pool.Acquire(ctx, inv.Class, inv.Priority, e.cfg.AcquireTimeout, preempt)
	if err != nil {
		return Result{ExitCode: -1}, err
	}
	defer release()
	res, err := e.run(runCtx, inv, dir, ws)
	if err == nil && cacheable && reusable(res) {
		e.cache.put(key, ws, res, pol.TTL, time.Now())
	}
	return res, err
}

// outputSink feeds one stream into its capture, the line watcher and the
// live stream.
type outputSink struct {
	name    string
	capture *capture
	w       *watcher
	partial []byte
}

func (s *outputSink) Write(p []byte) (int, error) {
	s.w.lastRead.Store(time.Now().UnixNano())
	_, _ = s.capture.Write(p)
	data := append(s.partial, p...)
	for {
		i := indexLineEnd(data)
		if i < 0 {
			break
		}
		s.w.line(s.name, string(data[:i]))
		data = data[i+1:]
	}
	// A line longer than the cap is reported in pieces.
	if len(data) > maxLineBytes {
		s.w.line(s.name, string(data))
		data = nil
	}
	s.partial = append(s.partial[:0], data...)
	return len(p), nil
}

func (s *outputSink) flush() {
	if len(s.partial) > 0 {
		s.w.line(s.name, string(s.partial))
		s.partial = nil
	}
}

const maxLineBytes = 64 << 10

// copyBuffers are the buffers output is read through. A copy through
// io.Copy would allocate (and zero) 32 KB per stream per task, which the
// garbage collector then has to reclaim at every task's pace.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyOutput reads r into s until r ends. The reader is wrapped so that
// the copy goes through the pooled buffer: an *os.File's own WriteTo would
// allocate a fresh one.
func copyOutput(s *outputSink, r *os.File) {
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	_, _ = io.CopyBuffer(s, struct{ io.Reader }{r}, *buf)
}

// indexLineEnd finds the first \n or \r (progress bars redraw with \r).
func indexLineEnd(b []byte) int {
	for i, c := range b {
		if c == '\n' || c == '\r' {
			return i
		}
	}
	return -1
}

// watcher tracks meaningful output (for the adaptive timeout), line stats
// (for truncation) and forwards lines to the live stream.
type watcher struct {
	start          time.Time
	lastMeaningful atomic.Int64 // ns since start; -1 before any
	lastRead       atomic.Int64 // unix ns of the last bytes read
	mu             sync.Mutex
	stats          lineStats
	stream         func(stream, line string)
}

func (w *watcher) line(stream, l string) {
	if !IsNoise(l) {
		w.lastMeaningful.Store(int64(time.Since(w.start)))
	}
	w.mu.Lock()
	w.stats.add(l)
	w.mu.Unlock()
	if w.stream != nil {
		w.stream(stream, l)
	}
}

func (w *watcher) status(msg string) {
	if w.stream != nil {
		w.stream("status", msg)
	}
}

// outputDrain bounds how long output is still read after the process ended,
// in case a process that left the group keeps a pipe open.
const outputDrain = 2 * time.Second

func (e *Executor) run(ctx context.Context, inv Invocation, dir, ws string) (Result, error) {
	base := e.BaseTimeout(inv)
	res := Result{Timeout: base}
	av := argv(inv.Command, inv.Args)
	if len(av) == 0 {
		return Result{ExitCode: -1}, errors.New("invalid invocation: empty command")
	}
	path := av[0]
	if !strings.Contains(path, "/") {
		lp, err := lookPath(path, inv.Env["PATH"])
		if err != nil {
			// Not a program: a shell builtin ("exit 3", "cd x") or a
			// missing command, which the shell reports with status 127.
			av = append([]string{"/bin/sh", "-c", `"$@"`, "sh"}, av...)
			lp = av[0]
		}
		path = lp
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{ExitCode: -1}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return Result{ExitCode: -1}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	marker := sweeper.begin() // orphans.go
	defer sweeper.end(marker)
	env := slices.DeleteFunc(StripEnv(os.Environ(), e.cfg.ExtraSecretPatterns, inv.Env), isMarker)
	if e.egress != nil {
		env = append(env, proxyEnv(e.proxyAddr())...)
	}
	if e.owners == nil {
		// Writable directories a task user had (the namespaces were on
		// before): a root command, without capabilities, could not write
		// them.
		reclaim(inv.Writable)
	} else {
		release, err := e.owners.hold(ws, inv.Writable)
		if err != nil {
			closeAll(outR, outW, errR, errW)
			return Result{ExitCode: -1}, fmt.Errorf("%w: %w", ErrStart, err)
		}
		defer release()
	}
	cmd := &exec.Cmd{Path: path, Args: av, Dir: dir,
		Env:    append(env, RunMarkerEnv+"="+marker),
		Stdin:  inv.Stdin,
		Stdout: outW,
		Stderr: errW,
		// A session of its own (and so a process group): a process of
		// another command cannot join this command's group, which is
		// killed as a whole when it ends, since setpgid stays within a
		// session.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	var cg *cgroup
	if e.cgroups != nil {
		if cg, err = e.cgroups.get(); err != nil {
			closeAll(outR, outW, errR, errW)
			return Result{ExitCode: -1}, fmt.Errorf("%w: %w", ErrStart, err)
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.dir
	}
	w := &watcher{start: time.Now(), stream: inv.StreamTo}
	w.lastMeaningful.Store(-1)
	w.lastRead.Store(time.Now().UnixNano())
	policy := confinedPolicy{hidden: e.hidden, shared: e.cfg.ConfineWritable, workspace: ws, extra: inv.Writable}
	if e.landlockNet {
		policy.net, policy.noUnixSockets = true, true
		if e.egress != nil {
			policy.connectPorts = []uint16{e.egress.tcp}
		}
	}
	waitCh, err := e.launch(cmd, policy) // parentdeath.go
	closeAll(outW, errW)
	if err != nil {
		closeAll(outR, errR)
		if cg != nil {
			e.cgroups.end(cg, e.cfg.CleanupTimeout)
		}
		return Result{ExitCode: -1}, fmt.Errorf("%w: %w", ErrStart, err)
	}
	res.PID = cmd.Process.Pid
	stdout := &outputSink{name: "stdout", capture: newCapture(e.cfg.MaxOutputBytes), w: w}
	stderr := &outputSink{name: "stderr", capture: newCapture(e.cfg.MaxOutputBytes), w: w}
	var readers sync.WaitGroup
	readers.Go(func() { copyOutput(stdout, outR); stdout.flush() })
	readers.Go(func() { copyOutput(stderr, errR); stderr.flush() })

	pgid := cmd.Process.Pid
	tick := time.NewTicker(tickFor(base, e.cfg.ExtendOnOutput))
	defer tick.Stop()
	var werr error
wait:
	for {
		select {
		case werr = <-waitCh:
			break wait
		case <-ctx.Done():
			res.Cancelled = true
			res.Kill, werr = e.stop(pgid, waitCh, w)
			break wait
		case <-tick.C:
			el := time.Since(w.start)
			if el > e.cfg.MaxTimeout {
				res.TimedOut = true
			} else if lm := w.lastMeaningful.Load(); lm >= 0 && el-time.Duration(lm) < e.cfg.ExtendOnOutput {
				continue
			} else if el > base {
				res.TimedOut = true
			}
			if res.TimedOut {
				res.Kill, werr = e.stop(pgid, waitCh, w)
				break wait
			}
		}
	}
	res.Duration = time.Since(w.start)
	// Orphans: whatever the process left running in its group, and, in a
	// cgroup, everything else it started, which then no longer holds the
	// output pipes open either.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if cg != nil {
		e.cgroups.end(cg, e.cfg.CleanupTimeout)
	}
	drainOutput(&readers, w, min(outputDrain, e.cfg.CleanupTimeout), outR, errR)
	closeAll(outR, errR)

	res.ExitCode = exitCode(werr)
	if res.Kill.ExitedAfter != "" {
		res.Killed = true
		res.Partial = true
		res.KillSignal = res.Kill.ExitedAfter
	}
	res.stdout, res.stderr = stdout.capture, stderr.capture
	res.Stdout, res.StdoutTruncated = stdout.capture.render(e.cfg.MaxOutputBytes)
	res.Stderr, res.StderrTruncated = stderr.capture.render(e.cfg.MaxOutputBytes)
	if p := e.parser(inv); p != nil {
		if parsed, ok := p(res.Stdout, res.Stderr, res.ExitCode); ok {
			res.Parsed = parsed
		}
	}
	if res.Parsed == nil {
		kept := splitLines(res.Stdout)
		kept = append(kept, splitLines(res.Stderr)...)
		w.mu.Lock()
		t := w.stats.truncated(kept, stdout.capture.size()+stderr.capture.size(), e.cfg.MaxOutputBytes, e.cfg.FirstLines, e.cfg.LastLines)
		w.mu.Unlock()
		res.Truncated = &t
	}
	return res, nil
}

func isMarker(kv string) bool { return strings.HasPrefix(kv, RunMarkerEnv+"=") }

// lookPath finds a program on the invocation's PATH when it sets one (the
// child would search that), else on the executor's.
func lookPath(file, pathEnv string) (string, error) {
	if pathEnv == "" {
		return exec.LookPath(file)
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// drainOutput waits for the readers to reach the end of the pipes. A
// process that left the group may hold a pipe open: reading stops once no
// byte arrived for idle.
func drainOutput(readers *sync.WaitGroup, w *watcher, idle time.Duration, pipes ...*os.File) {
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	t := time.NewTicker(min(idle/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if time.Since(time.Unix(0, w.lastRead.Load())) > idle {
				for _, p := range pipes {
					_ = p.SetReadDeadline(time.Now())
				}
				<-done
				return
			}
		}
	}
}

func (e *Executor) parser(inv Invocation) Parser {
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, k := range e.keys(inv) {
		if p, ok := e.parsers[k]; ok {
			return p
		}
	}
	return nil
}

// tickFor is how often the adaptive timeout is checked.
func tickFor(base, extend time.Duration) time.Duration {
	return min(max(min(base, extend)/20, 5*time.Millisecond), time.Second)
}

// stop runs the kill sequence on the process group: SIGINT, then SIGTERM
// after InterruptGrace, then SIGKILL after TerminateGrace (spec C-27).
func (e *Executor) stop(pgid int, waitCh <-chan error, w *watcher) (KillResult, error) {
	var kr KillResult
	steps := []struct {
		sig   syscall.Signal
		name  string
		msg   string
		grace time.Duration
		sent  *bool
	}{
		{syscall.SIGINT, "SIGINT", MsgStopping, e.cfg.InterruptGrace, &kr.SentSIGINT},
		{syscall.SIGTERM, "SIGTERM", MsgForceStopping, e.cfg.TerminateGrace, &kr.SentSIGTERM},
	}
	for _, st := range steps {
		w.status(st.msg)
		_ = syscall.Kill(-pgid, st.sig)
		*st.sent = true
		kr.ExitedAfter = st.name
		t := time.NewTimer(st.grace)
		select {
		case err := <-waitCh:
			t.Stop()
			return kr, err
		case <-t.C:
		}
	}
	w.status(MsgKilled)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	kr.SentSIGKILL = true
	kr.ExitedAfter = "SIGKILL"
	return kr, <-waitCh
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return -1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
