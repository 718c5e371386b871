package orchestrator

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Config holds the Orchestrator's settings.
type Config struct {
	// DefaultMaxConcurrency applies to runs created with max_concurrency 0.
	DefaultMaxConcurrency int
	// MaxConcurrencyLimit is the largest max_concurrency a run may ask for.
	MaxConcurrencyLimit int
	// MaxDagBytes bounds the encoded size of a submitted DAG.
	MaxDagBytes int
	// OutputLimitBytes is the per-stream output cap sent to workers with
	// every task.
	OutputLimitBytes int
	// UpstreamOutputBytes caps the stdout of one dependency passed to a task.
	UpstreamOutputBytes int
	// MaxUpstreamBytes caps all dependencies' stdout passed to one task.
	MaxUpstreamBytes int
	// MaxDependencyPatchBytes bounds the dependencies' patches one
	// dispatch carries (spec T-10): a node whose dependencies changed more
	// fails instead of being dispatched.
	MaxDependencyPatchBytes int
	// MaxHandoffs bounds a node's chain of pipeline handoffs (spec F-23);
	// 0 leaves it unbounded, as the spec has it.
	MaxHandoffs int
	// DefaultPageSize and MaxPageSize bound ListRuns pages.
	DefaultPageSize int
	MaxPageSize     int
	// ResyncInterval is how often unfinished runs are re-examined, so that a
	// run whose scheduling was interrupted (a crash, a failed publish) moves on.
	ResyncInterval time.Duration
	// ReplicaID names this replica in run leases; a restart under the same
	// id takes its runs back at once.
	ReplicaID string
	// LeaseTTL is how long a replica's claim on a run lasts without renewal:
	// another replica resumes the runs of a replica that died within it.
	LeaseTTL time.Duration
	// ClaimTimeout is how long a worker's claim of a task lives without a
	// heartbeat: after it the task's worker is taken for dead and another
	// worker may run the attempt (claims.go).
	ClaimTimeout time.Duration
	// StopTimeout bounds how long a stop waits for the effects of the
	// decisions it committed (dispatches, events) to be carried out before
	// it releases the replica's run leases.
	StopTimeout time.Duration
	// ResultAckWait is how long a worker result taken by a replica may stay
	// unacknowledged before it is handed to another (or to the restarted
	// replica): a replica applying a batch keeps its results with in-progress
	// acknowledgements, so this bounds only how long the results a dead
	// replica held wait. Every replica should use the same value (it is
	// set on the shared durable consumer).
	ResultAckWait time.Duration
	// GlobalMaxConcurrency caps the nodes running at once across every run
	// and replica (held in Redis); 0 leaves only each run's max_concurrency.
	GlobalMaxConcurrency int
	// UserReservePercent of the global slots only interactive runs may use;
	// the rest are shared fairly between sessions.
	UserReservePercent int
	// SessionCheckTimeout is how long a session check may stay pending after
	// its run ended before it is given up as an error (sessioncheck.go).
	SessionCheckTimeout time.Duration
	// GuideTimeout bounds reading from the Guide that a run's session is
	// the caller's (when a Guide peer is configured); 0 means 5s.
	GuideTimeout time.Duration
	// CloneDir is the Librarian's directory of clones of repositories
	// registered by git URL (its -librarian.data-dir, as this service sees
	// it): a run whose repository is in it is delivered to the clone's
	// remote, or kept for download, never as a ref in the clone
	// (delivery.go). Empty: every repository is a path.
	CloneDir string
	// MaxBundleBytes bounds the git bundle of a delivered branch kept for
	// download; a larger one is not kept (the patch still is).
	MaxBundleBytes int
	// ReviewTimeout is how long a review asked through the review API may
	// wait for an inspector worker's report before it is given up.
	ReviewTimeout time.Duration
}

// RegisterFlags registers the -orchestrator.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.DefaultMaxConcurrency, "orchestrator.default-max-concurrency", 4, "nodes of one run running at once when the run does not say")
	fs.IntVar(&c.MaxConcurrencyLimit, "orchestrator.max-concurrency-limit", 64, "largest max_concurrency a run may ask for")
	fs.IntVar(&c.MaxDagBytes, "orchestrator.max-dag-bytes", 4<<20, "largest encoded DAG accepted")
	fs.IntVar(&c.OutputLimitBytes, "orchestrator.output-limit-bytes", 1<<20, "cap on each of a task's stdout and stderr, sent to workers")
	fs.IntVar(&c.UpstreamOutputBytes, "orchestrator.upstream-output-bytes", 16<<10, "cap on one dependency's stdout passed to a task")
	fs.IntVar(&c.MaxUpstreamBytes, "orchestrator.max-upstream-bytes", 256<<10, "cap on all dependencies' stdout passed to a task")
	fs.IntVar(&c.MaxDependencyPatchBytes, "orchestrator.max-dependency-patch-bytes", 4<<20,
		"cap on the patches of a node's dependencies sent with its task; a node over it fails (a task must also fit in one bus message)")
	fs.IntVar(&c.MaxHandoffs, "orchestrator.max-handoffs", 0, "pipeline handoffs a node may make before the next one fails it; 0: no bound")
	fs.IntVar(&c.DefaultPageSize, "orchestrator.default-page-size", 50, "ListRuns page size when the request does not say")
	fs.IntVar(&c.MaxPageSize, "orchestrator.max-page-size", 500, "largest ListRuns page size")
	fs.DurationVar(&c.ResyncInterval, "orchestrator.resync-interval", 15*time.Second, "how often unfinished runs are re-examined")
	fs.StringVar(&c.ReplicaID, "orchestrator.replica-id", defaultReplicaID(), "this replica's name in run leases (stable across restarts)")
	fs.IntVar(&c.GlobalMaxConcurrency, "orchestrator.global-max-concurrency", 0, "nodes running at once across all runs and replicas, shared fairly between sessions (0 = no global cap; needs Redis)")
	fs.IntVar(&c.UserReservePercent, "orchestrator.user-reserve-percent", 20, "percent of the global slots reserved for interactive runs")
	fs.DurationVar(&c.SessionCheckTimeout, "orchestrator.session-check-timeout", 30*time.Minute, "a session check no tester reported on this long after its run ended is given up as an error")
	fs.DurationVar(&c.GuideTimeout, "orchestrator.guide-timeout", 5*time.Second, "time allowed for reading from the guide that a new run's session is the caller's")
	fs.StringVar(&c.CloneDir, "orchestrator.clone-dir", "",
		"the librarian's directory of clones of repositories registered by git URL (its -librarian.data-dir, mounted at the same path): their runs' branches are pushed to the remote or offered for download")
	fs.IntVar(&c.MaxBundleBytes, "orchestrator.max-bundle-bytes", 16<<20, "largest git bundle of a delivered branch kept for download")
	fs.DurationVar(&c.ReviewTimeout, "orchestrator.review-timeout", 15*time.Minute, "a review no inspector worker reported on this long after it was asked is given up as failed")
	fs.DurationVar(&c.LeaseTTL, "orchestrator.lease-ttl", 15*time.Second, "a run whose owner did not renew its lease for this long is resumed by another replica")
	fs.DurationVar(&c.ClaimTimeout, "orchestrator.claim-timeout", 10*time.Second,
		"a task whose worker sent no heartbeat for this long is taken for dead: another worker may run it (keep it at most the workers' -worker.ack-wait)")
	fs.DurationVar(&c.StopTimeout, "orchestrator.stop-timeout", 20*time.Second,
		"on a stop, how long to wait for committed dispatches and events to be published before the run leases are released to the other replicas")
	fs.DurationVar(&c.ResultAckWait, "orchestrator.result-ack-wait", 5*time.Second,
		"a worker result a replica took but did not acknowledge for this long (it died) goes to another replica; the same on every replica")
}

func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "orchestrator"
	}
	return host
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("orchestrator", flag.ContinueOnError))
	return c
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.MaxConcurrencyLimit < 1 || c.MaxConcurrencyLimit > 10000 {
		errs = append(errs, errors.New("orchestrator.max-concurrency-limit: must be between 1 and 10000"))
	}
	if c.DefaultMaxConcurrency < 1 || c.DefaultMaxConcurrency > c.MaxConcurrencyLimit {
		errs = append(errs, fmt.Errorf("orchestrator.default-max-concurrency: must be between 1 and orchestrator.max-concurrency-limit (%d)", c.MaxConcurrencyLimit))
	}
	if c.MaxDagBytes < 1<<10 {
		errs = append(errs, errors.New("orchestrator.max-dag-bytes: must be at least 1024"))
	}
	if c.OutputLimitBytes < 1<<10 || c.OutputLimitBytes > 64<<20 {
		errs = append(errs, errors.New("orchestrator.output-limit-bytes: must be between 1024 and 64 MiB"))
	}
	if c.UpstreamOutputBytes < 0 || c.MaxUpstreamBytes < 0 {
		errs = append(errs, errors.New("orchestrator.upstream-output-bytes and orchestrator.max-upstream-bytes: must not be negative"))
	}
	if c.MaxDependencyPatchBytes < 1<<10 || c.MaxDependencyPatchBytes > 64<<20 {
		errs = append(errs, errors.New("orchestrator.max-dependency-patch-bytes: must be between 1024 and 64 MiB"))
	}
	if c.MaxHandoffs < 0 || c.MaxHandoffs > 10_000 {
		errs = append(errs, errors.New("orchestrator.max-handoffs: must be between 0 and 10000"))
	}
	if c.MaxUpstreamBytes > 512<<10 {
		errs = append(errs, errors.New("orchestrator.max-upstream-bytes: must be at most 512 KiB (a task must fit in one message)"))
	}
	if c.MaxPageSize < 1 {
		errs = append(errs, errors.New("orchestrator.max-page-size: must be at least 1"))
	}
	if c.DefaultPageSize < 1 || c.DefaultPageSize > c.MaxPageSize {
		errs = append(errs, errors.New("orchestrator.default-page-size: must be between 1 and orchestrator.max-page-size"))
	}
	if c.ResyncInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("orchestrator.resync-interval: must be at least 100ms"))
	}
	if c.ReplicaID == "" || len(c.ReplicaID) > 128 {
		errs = append(errs, errors.New("orchestrator.replica-id: must be 1-128 characters"))
	}
	if c.GlobalMaxConcurrency < 0 || c.GlobalMaxConcurrency > 100000 {
		errs = append(errs, errors.New("orchestrator.global-max-concurrency: must be between 0 and 100000"))
	}
	if c.UserReservePercent < 0 || c.UserReservePercent > 50 {
		errs = append(errs, errors.New("orchestrator.user-reserve-percent: must be between 0 and 50"))
	}
	if c.ClaimTimeout < 500*time.Millisecond {
		errs = append(errs, errors.New("orchestrator.claim-timeout: must be at least 500ms"))
	}
	if c.LeaseTTL < 300*time.Millisecond {
		errs = append(errs, errors.New("orchestrator.lease-ttl: must be at least 300ms"))
	}
	if c.StopTimeout < 0 || c.StopTimeout > 10*time.Minute {
		errs = append(errs, errors.New("orchestrator.stop-timeout: must be between 0 and 10m"))
	}
	if c.ResultAckWait < time.Second || c.ResultAckWait > 10*time.Minute {
		errs = append(errs, errors.New("orchestrator.result-ack-wait: must be between 1s and 10m"))
	}
	if c.GuideTimeout < 0 {
		errs = append(errs, errors.New("orchestrator.guide-timeout: must not be negative"))
	}
	if c.SessionCheckTimeout < time.Second {
		errs = append(errs, errors.New("orchestrator.session-check-timeout: must be at least 1s"))
	}
	if c.CloneDir != "" && !filepath.IsAbs(c.CloneDir) {
		errs = append(errs, errors.New("orchestrator.clone-dir: must be an absolute path"))
	}
	if c.MaxBundleBytes < 0 || c.MaxBundleBytes > 48<<20 {
		errs = append(errs, errors.New("orchestrator.max-bundle-bytes: must be between 0 and 48 MiB (a bundle is answered in one message)"))
	}
	if c.ReviewTimeout < time.Second {
		errs = append(errs, errors.New("orchestrator.review-timeout: must be at least 1s"))
	}
	return errors.Join(errs...)
}
