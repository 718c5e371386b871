package worker

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

// Config holds the worker's settings.
type Config struct {
	// Roles are the task queues this worker consumes.
	Roles []string
	// Concurrency is how many tasks of each role run at once.
	Concurrency int
	// MaxOutputBytes caps each of stdout and stderr.
	MaxOutputBytes int
	// WorkspaceRoot is where per-task workspaces are created.
	WorkspaceRoot string
	// CacheRoot holds each user's Go build and module caches, which their
	// tasks share and no other user's tasks can read or write.
	CacheRoot string
	// ID names this worker in task results.
	ID string
	// Tools configures how task commands run (timeouts, kill sequence,
	// subprocess pool, secret stripping); its flags are -toolexec.*.
	// Tools.MaxOutputBytes is replaced by MaxOutputBytes.
	Tools toolexec.Config
	// AckWait is how long a task may go without a progress heartbeat before
	// JetStream hands it to another worker: a worker that died or went
	// silent loses its tasks within AckWait of its last heartbeat.
	AckWait time.Duration
	// Heartbeat is how often a running task's heartbeat (an in-progress
	// acknowledgement) goes out; at most AckWait/2, so that one lost
	// heartbeat does not hand a live task to another worker.
	Heartbeat time.Duration
	// DrainTimeout is how long the running tasks get to finish once the
	// worker is asked to stop (SIGTERM): it takes no new task meanwhile,
	// keeps heartbeating the running ones and reports their results. Those
	// still running then are stopped and handed back to the queue at once.
	DrainTimeout time.Duration
	// MaxDeliveries is the delivery of a task at which the worker reports it
	// failed instead of running it: it came back to the queue every time
	// before (no slot free in time, a worker stopping or dying).
	MaxDeliveries int
	// SlotsShared makes every worker of the cluster share one subprocess
	// slot budget (-toolexec.slots, with its user reserve) through Redis
	// when the worker has Redis; without Redis, or when false, each worker
	// has its own in-process pool of -toolexec.slots.
	SlotsShared bool
	// SlotLease is how long a shared slot of a worker that died stays taken;
	// live holders renew their slots every SlotLease/3.
	SlotLease time.Duration
	// EngineerModel is the model (id or alias) the Engineer asks for edits
	// when a model is set (Service.SetModel).
	EngineerModel string
	// HandoffAt is the share of its context window at which a pipeline's
	// Engineer hands its state to a fresh pipeline instead of taking
	// another turn (spec F-21, F-23).
	HandoffAt float64
	// EngineerContextTokens is the Engineer model's context window; 0 takes
	// it from the model catalogue.
	EngineerContextTokens int
	// AgentToolCalls bounds a task agent's tool calls over the whole task.
	AgentToolCalls int
	// AgentTokens bounds a task agent's model tokens (in and out) over the
	// whole task; 0 leaves it to the gate's task budget.
	AgentTokens int64
	// AgentKeepResults is how many of the newest tool results the model
	// sees whole; older ones are masked to a one-line stub.
	AgentKeepResults int
	// AgentCommandTimeout is run_command's default timeout (a task's own
	// timeout raises its maximum).
	AgentCommandTimeout time.Duration
	// HelpTimeout is how long an agent waits for the user's answer to its
	// request for help.
	HelpTimeout time.Duration
	// Review has the Inspector review each pipeline's change with a model
	// after the linters pass (spec P-01..P-14); ReviewBlocking are the
	// severities of findings that go back to the Engineer (comma-separated),
	// ReviewModel the model asked ("" takes EngineerModel), and
	// ReviewContextTokens its context window (0 takes it from the model
	// catalogue).
	Review              bool
	ReviewBlocking      string
	ReviewModel         string
	ReviewContextTokens int
}

// Limits of the settings.
const (
	maxConcurrency = 256
	minOutputBytes = 1 << 10
	maxOutputBytes = 64 << 20
	// maxContextTokens bounds -worker.engineer-context-tokens.
	maxContextTokens = 10_000_000
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$`)

// RegisterFlags registers the -worker.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Roles = slices.Clone(topology.Roles)
	fs.Var((*roleList)(&c.Roles), "worker.roles", "comma-separated task roles to consume: engineer, inspector, tester")
	fs.IntVar(&c.Concurrency, "worker.concurrency", 2, "tasks of each role run at once")
	fs.IntVar(&c.MaxOutputBytes, "worker.max-output-bytes", 1<<20, "cap on each of a task's stdout and stderr (head and tail are kept)")
	fs.StringVar(&c.WorkspaceRoot, "worker.workspace-root", os.TempDir(), "directory under which per-task workspaces are created")
	fs.StringVar(&c.CacheRoot, "worker.cache-root", defaultCacheRoot(), "directory holding each user's Go build and module caches (out of other users' reach)")
	fs.StringVar(&c.ID, "worker.id", defaultID(), "worker id reported in task results")
	fs.DurationVar(&c.AckWait, "worker.ack-wait", 10*time.Second, "time a task may go without a heartbeat before it is redelivered to another worker (a silent or dead worker's tasks move on within this)")
	fs.DurationVar(&c.Heartbeat, "worker.heartbeat", 3*time.Second, "interval of a running task's heartbeat; at most half of -worker.ack-wait")
	fs.DurationVar(&c.DrainTimeout, "worker.drain-timeout", 10*time.Minute, "on SIGTERM, time the running tasks get to finish (no new task is taken) before they are stopped and handed back to the queue; give the pod's terminationGracePeriodSeconds a little more")
	fs.IntVar(&c.MaxDeliveries, "worker.max-deliveries", 10, "delivery of a task at which it is reported failed instead of run: it came back to the queue each time before (no subprocess slot free within -toolexec.acquire-timeout, a worker stopping or dying)")
	fs.BoolVar(&c.SlotsShared, "worker.slots-shared", true, "share one cluster-wide subprocess budget (-toolexec.slots, same on every worker) through Redis; false or no Redis: a pool per worker")
	fs.DurationVar(&c.SlotLease, "worker.slot-lease", 15*time.Second, "with -worker.slots-shared, how long the slots of a worker that died stay taken")
	fs.StringVar(&c.EngineerModel, "worker.engineer-model", "default", "model id or alias (default, fast, powerful) the Engineer writes code with")
	fs.Float64Var(&c.HandoffAt, "worker.handoff-at", 0.95, "share of the Engineer's context window at which a pipeline hands its state to a fresh pipeline")
	fs.IntVar(&c.EngineerContextTokens, "worker.engineer-context-tokens", 0, "the Engineer model's context window in tokens; 0 takes it from the model catalogue")
	fs.IntVar(&c.AgentToolCalls, "worker.agent-tool-calls", 60, "most tool calls a task's agent makes over the whole task")
	fs.Int64Var(&c.AgentTokens, "worker.agent-tokens", 0, "most model tokens (in and out) a task's agent uses over the whole task; 0 leaves it to the LLM gate's task budget")
	fs.IntVar(&c.AgentKeepResults, "worker.agent-keep-results", 8, "newest tool results a task's agent sees whole; older ones are masked to a one-line stub")
	fs.DurationVar(&c.AgentCommandTimeout, "worker.agent-command-timeout", 2*time.Minute, "default timeout of an agent's run_command (a task's own timeout raises its maximum)")
	fs.DurationVar(&c.HelpTimeout, "worker.help-timeout", 30*time.Minute, "how long a task's agent waits for the user's answer to its request for help")
	fs.BoolVar(&c.Review, "worker.review", true, "the Inspector reviews each pipeline's change with the model once the linters pass (no model: the linters only)")
	fs.StringVar(&c.ReviewBlocking, "worker.review-blocking", "high,critical", "severities of review findings that go back to the Engineer (the rest are concerns in the report)")
	fs.StringVar(&c.ReviewModel, "worker.review-model", "", "model id or alias the Inspector reviews with; empty takes -worker.engineer-model")
	fs.IntVar(&c.ReviewContextTokens, "worker.review-context-tokens", 0, "the review model's context window in tokens; 0 takes it from the model catalogue")
	c.Tools.RegisterFlags(fs)
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("worker", flag.ContinueOnError))
	return c
}

func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if len(c.Roles) == 0 {
		errs = append(errs, errors.New("worker.roles: at least one role is required"))
	}
	seen := map[string]bool{}
	for _, r := range c.Roles {
		if !slices.Contains(topology.Roles, r) {
			errs = append(errs, fmt.Errorf("worker.roles: unknown role %q (want %s)", r, strings.Join(topology.Roles, ", ")))
		}
		if seen[r] {
			errs = append(errs, fmt.Errorf("worker.roles: %q is listed twice", r))
		}
		seen[r] = true
	}
	if c.Concurrency < 1 || c.Concurrency > maxConcurrency {
		errs = append(errs, fmt.Errorf("worker.concurrency: must be between 1 and %d", maxConcurrency))
	}
	if c.MaxOutputBytes < minOutputBytes || c.MaxOutputBytes > maxOutputBytes {
		errs = append(errs, fmt.Errorf("worker.max-output-bytes: must be between %d and %d", minOutputBytes, maxOutputBytes))
	}
	if !filepath.IsAbs(c.WorkspaceRoot) {
		errs = append(errs, errors.New("worker.workspace-root: must be an absolute path"))
	}
	if !filepath.IsAbs(c.CacheRoot) || filepath.Clean(c.CacheRoot) == "/" {
		errs = append(errs, errors.New("worker.cache-root: must be an absolute path other than /"))
	}
	if !idPattern.MatchString(c.ID) {
		errs = append(errs, errors.New("worker.id: want 1-128 characters of [A-Za-z0-9_.:@-] starting with a letter or digit"))
	}
	if c.HandoffAt <= 0.1 || c.HandoffAt > 1 {
		errs = append(errs, errors.New("worker.handoff-at: must be above 0.1 and at most 1"))
	}
	if c.EngineerContextTokens < 0 || c.EngineerContextTokens > maxContextTokens {
		errs = append(errs, fmt.Errorf("worker.engineer-context-tokens: must be between 0 and %d", maxContextTokens))
	}
	if c.AgentToolCalls < 1 || c.AgentToolCalls > 10_000 {
		errs = append(errs, errors.New("worker.agent-tool-calls: must be between 1 and 10000"))
	}
	if c.AgentTokens < 0 {
		errs = append(errs, errors.New("worker.agent-tokens: must not be negative"))
	}
	if c.AgentKeepResults < 1 || c.AgentKeepResults > 1000 {
		errs = append(errs, errors.New("worker.agent-keep-results: must be between 1 and 1000"))
	}
	if c.AgentCommandTimeout < time.Second || c.HelpTimeout < time.Second {
		errs = append(errs, errors.New("worker.agent-command-timeout and worker.help-timeout: must be at least 1s"))
	}
	if _, err := review.ParseSeverities(c.ReviewBlocking); err != nil {
		errs = append(errs, fmt.Errorf("worker.review-blocking: %w", err))
	}
	if c.ReviewContextTokens < 0 || c.ReviewContextTokens > maxContextTokens {
		errs = append(errs, fmt.Errorf("worker.review-context-tokens: must be between 0 and %d", maxContextTokens))
	}
	if c.AckWait < time.Second {
		errs = append(errs, errors.New("worker.ack-wait: must be at least 1s"))
	}
	if c.Heartbeat < 100*time.Millisecond || c.Heartbeat > c.AckWait/2 {
		errs = append(errs, errors.New("worker.heartbeat: must be at least 100ms and at most half of worker.ack-wait"))
	}
	if c.DrainTimeout < 0 || c.DrainTimeout > 24*time.Hour {
		errs = append(errs, errors.New("worker.drain-timeout: must be between 0 and 24h"))
	}
	if c.MaxDeliveries < 2 || c.MaxDeliveries > 1000 {
		errs = append(errs, errors.New("worker.max-deliveries: must be between 2 and 1000"))
	}
	if c.SlotLease < time.Second || c.SlotLease > 10*time.Minute {
		errs = append(errs, errors.New("worker.slot-lease: must be between 1s and 10m"))
	}
	tools := c.Tools
	tools.MaxOutputBytes = max(c.MaxOutputBytes, minOutputBytes)
	if err := tools.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// roleList is a comma-separated flag value.
type roleList []string

func (l *roleList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *roleList) Set(s string) error {
	var out []string
	for _, r := range strings.Split(s, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	*l = out
	return nil
}

// defaultCacheRoot is sylk-worker in the user's cache directory, or in the
// temporary directory when there is none. Root's is /var/cache: its
// commands run as another user (-toolexec.task-uid), who must pass through
// the directories above (root's home is closed to it).
func defaultCacheRoot() string {
	if os.Geteuid() == 0 {
		return "/var/cache/sylk-worker"
	}
	if dir, err := os.UserCacheDir(); err == nil && filepath.IsAbs(dir) {
		return filepath.Join(dir, "sylk-worker")
	}
	return filepath.Join(os.TempDir(), "sylk-worker-cache")
}
