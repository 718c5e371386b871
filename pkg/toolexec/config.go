package toolexec

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Config holds the executor's settings (spec C-23..C-32). Durations default
// to the spec's values; tests shorten them.
type Config struct {
	// DefaultTimeout is the base timeout of a tool without its own (C-26).
	DefaultTimeout time.Duration
	// MaxTimeout kills a process whatever it prints.
	MaxTimeout time.Duration
	// ExtendOnOutput keeps a process past its base timeout while it printed
	// a meaningful (non-noise) line this recently.
	ExtendOnOutput time.Duration
	// ToolTimeouts are base timeouts by tool, keyed by the command and its
	// first argument ("go test") or the command alone ("git").
	ToolTimeouts map[string]time.Duration
	// InterruptGrace is the wait after SIGINT, TerminateGrace after SIGTERM
	// (C-27).
	InterruptGrace time.Duration
	TerminateGrace time.Duration
	// CleanupTimeout bounds the best-effort cleanup after a process ended.
	CleanupTimeout time.Duration
	// MaxOutputBytes caps each of stdout and stderr (head and tail are kept).
	MaxOutputBytes int
	// FirstLines and LastLines are what smart truncation keeps (C-29).
	FirstLines int
	LastLines  int
	// Slots is the size of the subprocess pool; 0 means 2 x NumCPU.
	Slots int
	// UserReservePercent of the slots only user-interactive calls may take.
	UserReservePercent int
	// AcquireTimeout bounds how long a pipeline call waits for a slot.
	AcquireTimeout time.Duration
	// ExtraSecretPatterns are stripped from child environments besides the
	// spec's list (C-24).
	ExtraSecretPatterns []string
	// CacheEntries and CacheBytes bound the tool output cache (C-33); 0
	// turns it off. CacheTTL is how long an output is reused unless its
	// tool's policy says otherwise; CachePolicies name the cached tools.
	CacheEntries  int
	CacheBytes    int64
	CacheTTL      time.Duration
	CachePolicies map[string]CachePolicy
	// Confine runs each command confined where the kernel has Landlock
	// (confine.go): no reading inside the boundary roots but its own
	// workspace, no writing outside it and ConfineWritable, no signals to
	// processes it did not start.
	Confine bool
	// ConfineWritable are directories confined commands may also write
	// (shared tool caches).
	ConfineWritable []string
	// ConfineHidden are directories confined commands may not read, besides
	// the boundary roots (where repositories are kept, say).
	ConfineHidden []string
	// Cgroup is where each command gets a cgroup of its own (cgroup.go):
	// CgroupAuto (below this process's own cgroup, when it may make one
	// there), an absolute directory in a cgroup2 hierarchy, or "" for none.
	Cgroup string
	// Namespaces starts each confined command in user, mount, PID and IPC
	// namespaces of its own (namespace.go): NamespacesAuto where this
	// process may make them and the task init program is found,
	// NamespacesOn (or fail to start), NamespacesOff.
	Namespaces string
	// TaskInit is the sylk-task-init program; "" looks for it beside this
	// process's program, then on PATH.
	TaskInit string
	// Network is NetworkNone (the default: commands reach nothing of the
	// host, nor anything beyond but NetworkAllow; network.go) or
	// NetworkHost (they share the service's network: every port of the
	// host, its stores' included).
	Network string
	// NetworkAllow are the host:port destinations commands may reach with
	// NetworkNone, through the executor's egress proxy.
	NetworkAllow []string
	// TaskUID and TaskGID are the IDs commands run as, in namespaces, when
	// the service runs as root (owner.go).
	TaskUID int
	TaskGID int
	// UnsafeRunTasksAsRoot lets a service that runs as root without
	// namespaces run its commands as root.
	UnsafeRunTasksAsRoot bool
}

// DefaultTaskID is the default of Config.TaskUID and TaskGID: nobody and
// nogroup.
const DefaultTaskID = 65534

// Spec defaults.
const (
	defaultTimeout        = 60 * time.Second
	defaultMaxTimeout     = 30 * time.Minute
	defaultExtendOnOutput = 30 * time.Second
	defaultInterruptGrace = 5 * time.Second
	defaultTerminateGrace = 3 * time.Second
	defaultCleanupTimeout = 5 * time.Second
	defaultMaxOutputBytes = 1 << 20
	defaultFirstLines     = 50
	defaultLastLines      = 100
	defaultUserReserve    = 20
	defaultAcquireTimeout = 30 * time.Second
)

// DefaultToolTimeouts are the per-tool base timeouts of C-26.
func DefaultToolTimeouts() map[string]time.Duration {
	return map[string]time.Duration{
		"go build":      10 * time.Minute,
		"go test":       5 * time.Minute,
		"npm install":   5 * time.Minute,
		"npm run build": 10 * time.Minute,
		"pytest":        5 * time.Minute,
		"jest":          5 * time.Minute,
		"eslint":        60 * time.Second,
		"prettier":      30 * time.Second,
		"git":           30 * time.Second,
	}
}

// RegisterFlags registers the -toolexec.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.ToolTimeouts = DefaultToolTimeouts()
	c.CachePolicies = DefaultCachePolicies()
	fs.DurationVar(&c.DefaultTimeout, "toolexec.default-timeout", defaultTimeout, "base timeout of a tool without its own")
	fs.DurationVar(&c.MaxTimeout, "toolexec.max-timeout", defaultMaxTimeout, "a tool is killed after this whatever it prints")
	fs.DurationVar(&c.ExtendOnOutput, "toolexec.extend-on-output", defaultExtendOnOutput, "a tool past its base timeout keeps running while it printed a meaningful line this recently")
	fs.DurationVar(&c.InterruptGrace, "toolexec.interrupt-grace", defaultInterruptGrace, "wait after SIGINT before SIGTERM")
	fs.DurationVar(&c.TerminateGrace, "toolexec.terminate-grace", defaultTerminateGrace, "wait after SIGTERM before SIGKILL")
	fs.DurationVar(&c.CleanupTimeout, "toolexec.cleanup-timeout", defaultCleanupTimeout, "bound of the best-effort cleanup after a tool ended")
	fs.IntVar(&c.MaxOutputBytes, "toolexec.max-output-bytes", defaultMaxOutputBytes, "cap on each of a tool's stdout and stderr")
	fs.IntVar(&c.FirstLines, "toolexec.first-lines", defaultFirstLines, "lines kept from the start of a truncated output")
	fs.IntVar(&c.LastLines, "toolexec.last-lines", defaultLastLines, "lines kept from the end of a truncated output")
	fs.IntVar(&c.Slots, "toolexec.slots", 0, "subprocesses running at once (0 = 2 x CPUs)")
	fs.IntVar(&c.UserReservePercent, "toolexec.user-reserve-percent", defaultUserReserve, "percent of the subprocess slots reserved for user-interactive calls")
	fs.DurationVar(&c.AcquireTimeout, "toolexec.acquire-timeout", defaultAcquireTimeout, "how long a pipeline call waits for a subprocess slot")
	fs.IntVar(&c.CacheEntries, "toolexec.cache-entries", defaultCacheEntries, "outputs of read-only checks (go vet, gofmt, eslint, prettier) kept for reuse while their files are unchanged; 0 turns the cache off")
	fs.Int64Var(&c.CacheBytes, "toolexec.cache-bytes", defaultCacheBytes, "bytes of cached tool output kept; 0 turns the cache off")
	fs.DurationVar(&c.CacheTTL, "toolexec.cache-ttl", defaultCacheTTL, "how long a cached tool output is reused")
	fs.Var((*durationMap)(&c.ToolTimeouts), "toolexec.tool-timeouts", "per-tool base timeouts as tool=duration pairs, comma-separated (added to the defaults)")
	fs.BoolVar(&c.Confine, "toolexec.confine", true, "confine each command with Landlock where the kernel has it (Linux 5.13+): it reads nothing inside the workspace root but its own workspace, writes only its workspace and -toolexec.confine-writable, and cannot signal the service or other tasks")
	fs.Var((*stringList)(&c.ConfineWritable), "toolexec.confine-writable", "comma-separated absolute directories confined commands may also write (shared tool caches)")
	fs.Var((*stringList)(&c.ConfineHidden), "toolexec.confine-hidden", "comma-separated absolute directories confined commands may not read besides the workspace root (where repositories are kept, say)")
	fs.StringVar(&c.Cgroup, "toolexec.cgroup", CgroupAuto, "where each command gets a cgroup (v2) of its own, so that what it leaves in it is killed when it ends: \"auto\" (below the service's own cgroup, when the service may make cgroups there), an absolute directory in a cgroup2 hierarchy that the service may write, or \"\" for none")
	fs.StringVar(&c.Namespaces, "toolexec.namespaces", NamespacesAuto, "start each confined command in user, mount, PID and IPC namespaces of its own, through the sylk-task-init program: it sees no other task's directory, processes or shared memory, and whatever it leaves running is killed when it ends: \"auto\" (where the service may make them and the program is found), \"on\" (or fail to start) or \"off\"")
	fs.StringVar(&c.TaskInit, "toolexec.task-init", "", "the sylk-task-init program (default: beside the service's own program, else on PATH)")
	fs.StringVar(&c.Network, "toolexec.network", NetworkNone, "the network of commands: \"none\" (they reach nothing of the host, neither its TCP ports nor its unix sockets, nor anything beyond but -toolexec.network-allow: a loopback interface of their own in namespaces, Landlock network rules (Linux 6.7+) without; the worker refuses to start when it has neither) or \"host\" (UNSAFE: the worker's network, every port of the host and its stores included)")
	fs.Var((*stringList)(&c.NetworkAllow), "toolexec.network-allow", "comma-separated host:port destinations commands may reach through the worker's egress proxy (HTTP_PROXY, HTTPS_PROXY and ALL_PROXY are set for them), with -toolexec.network none: e.g. proxy.golang.org:443,github.com:443; *.example.com:443 matches names below example.com; a name resolving to a loopback, private or link-local address is refused, an address listed as such is reached")
	fs.IntVar(&c.TaskUID, "toolexec.task-uid", DefaultTaskID, "user ID commands run as when the worker runs as root (in namespaces): their workspace is theirs while they run")
	fs.IntVar(&c.TaskGID, "toolexec.task-gid", DefaultTaskID, "group ID commands run as when the worker runs as root")
	fs.BoolVar(&c.UnsafeRunTasksAsRoot, "toolexec.unsafe-run-tasks-as-root", false, "UNSAFE: let a worker that runs as root without namespaces run commands as root (they read /etc/shadow and every root-only file not hidden from them); without it such a worker refuses to start")
	fs.Var((*stringList)(&c.ExtraSecretPatterns), "toolexec.extra-secret-patterns", "comma-separated environment name globs stripped from tools besides the built-in list")
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("toolexec", flag.ContinueOnError))
	return c
}

// slots is the pool size after defaults.
func (c Config) slots() int {
	if c.Slots > 0 {
		return c.Slots
	}
	return 2 * runtime.NumCPU()
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("toolexec.%s: must be positive", name))
		}
	}
	pos("default-timeout", c.DefaultTimeout)
	pos("max-timeout", c.MaxTimeout)
	pos("extend-on-output", c.ExtendOnOutput)
	pos("interrupt-grace", c.InterruptGrace)
	pos("terminate-grace", c.TerminateGrace)
	pos("cleanup-timeout", c.CleanupTimeout)
	pos("acquire-timeout", c.AcquireTimeout)
	if c.MaxTimeout < c.DefaultTimeout {
		errs = append(errs, errors.New("toolexec.max-timeout: must not be below toolexec.default-timeout"))
	}
	if c.MaxOutputBytes < 1<<10 || c.MaxOutputBytes > 64<<20 {
		errs = append(errs, errors.New("toolexec.max-output-bytes: must be between 1024 and 64 MiB"))
	}
	if c.FirstLines < 1 || c.LastLines < 1 {
		errs = append(errs, errors.New("toolexec.first-lines and toolexec.last-lines: must be at least 1"))
	}
	if c.Slots < 0 || c.Slots > 4096 {
		errs = append(errs, errors.New("toolexec.slots: must be between 0 and 4096"))
	}
	if c.UserReservePercent < 0 || c.UserReservePercent > 50 {
		errs = append(errs, errors.New("toolexec.user-reserve-percent: must be between 0 and 50"))
	}
	if c.CacheEntries < 0 || c.CacheBytes < 0 {
		errs = append(errs, errors.New("toolexec.cache-entries and toolexec.cache-bytes: must not be negative"))
	}
	if (c.CacheEntries > 0 && c.CacheBytes > 0) && c.CacheTTL <= 0 {
		errs = append(errs, errors.New("toolexec.cache-ttl: must be positive while the cache is on"))
	}
	for k, d := range c.ToolTimeouts {
		if d <= 0 || strings.TrimSpace(k) == "" {
			errs = append(errs, fmt.Errorf("toolexec.tool-timeouts: %q must name a tool and have a positive timeout", k))
		}
	}
	for _, p := range c.ConfineWritable {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("toolexec.confine-writable: %q must be an absolute path", p))
		}
	}
	for _, p := range c.ConfineHidden {
		if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			errs = append(errs, fmt.Errorf("toolexec.confine-hidden: %q must be an absolute path other than /", p))
		}
	}
	if c.Cgroup != "" && c.Cgroup != CgroupAuto && !filepath.IsAbs(c.Cgroup) {
		errs = append(errs, fmt.Errorf("toolexec.cgroup: %q must be \"auto\", an absolute path or empty", c.Cgroup))
	}
	switch c.Namespaces {
	case NamespacesAuto, NamespacesOn, NamespacesOff:
	default:
		errs = append(errs, fmt.Errorf("toolexec.namespaces: %q must be \"auto\", \"on\" or \"off\"", c.Namespaces))
	}
	switch c.Network {
	case NetworkHost:
		if len(c.NetworkAllow) > 0 {
			errs = append(errs, errors.New("toolexec.network-allow: only with toolexec.network none (host reaches everything)"))
		}
	case NetworkNone:
		if !c.Confine {
			errs = append(errs, errors.New("toolexec.network: \"none\" needs toolexec.confine (or \"host\", which is unsafe)"))
		}
	default:
		errs = append(errs, fmt.Errorf("toolexec.network: %q must be \"none\" or \"host\"", c.Network))
	}
	for _, a := range c.NetworkAllow {
		if _, err := parseAllowRule(a); err != nil {
			errs = append(errs, fmt.Errorf("toolexec.network-allow: %w", err))
		}
	}
	if c.TaskUID < 1 || c.TaskGID < 1 || c.TaskUID > 1<<31-2 || c.TaskGID > 1<<31-2 {
		errs = append(errs, errors.New("toolexec.task-uid and toolexec.task-gid: must be positive IDs (not root's)"))
	}
	for _, p := range c.ExtraSecretPatterns {
		if _, err := filepath.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("toolexec.extra-secret-patterns: bad glob %q", p))
		}
	}
	return errors.Join(errs...)
}

// durationMap is a tool=duration,... flag value added to the defaults.
type durationMap map[string]time.Duration

func (m *durationMap) String() string {
	if m == nil || *m == nil {
		return ""
	}
	parts := make([]string, 0, len(*m))
	for k, v := range *m {
		parts = append(parts, k+"="+v.String())
	}
	return strings.Join(parts, ",")
}

func (m *durationMap) Set(s string) error {
	if *m == nil {
		*m = map[string]time.Duration{}
	}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("want tool=duration, got %q", p)
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("tool %q: %w", k, err)
		}
		(*m)[strings.Join(strings.Fields(k), " ")] = d
	}
	return nil
}

// stringList is a comma-separated flag value.
type stringList []string

func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *stringList) Set(s string) error {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	*l = out
	return nil
}
