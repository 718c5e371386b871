package gate

import (
	"errors"
	"flag"
	"time"

	"sylk.dev/sylk/pkg/llm/budget"
	"sylk.dev/sylk/pkg/llm/ratelimit"
)

// Config tunes the gate. Flags use the "llm." prefix.
type Config struct {
	// PipelineSlots is how many non-user calls run at once in this replica.
	PipelineSlots int
	// UserPreemption lets a user request cancel the lowest-priority running
	// pipeline call when every pipeline slot is busy (B-26, C-14).
	UserPreemption bool
	// Budgets are token limits (0: unlimited).
	GlobalTokens, TenantTokens, SessionTokens, TaskTokens, ProviderTokens int64
	BudgetPeriod                                                          time.Duration
	// Soft limits per provider (0: unlimited) and the warning fraction.
	SoftRequests, SoftTokens int64
	SoftPeriod               time.Duration
	WarnAt                   float64
	// BackoffBase and BackoffCap shape the 429 backoff (B-14).
	BackoffBase, BackoffCap time.Duration
	// RequestTimeout bounds one provider call; StreamIdleTimeout cancels a
	// stream with no chunk for that long.
	RequestTimeout    time.Duration
	StreamIdleTimeout time.Duration
	// EstimateMargin scales the prompt estimate reserved against budgets.
	EstimateMargin float64
	// UsageBuffer is how many usage records may wait for the writer.
	UsageBuffer int
	// StateRefresh is how often the gate reads the shared rate-limit and
	// breaker state from Redis and writes its batched counters (soft-limit
	// usage, successes, settled budget usage, returned leases). A view older
	// than three refreshes is not trusted: every call then checks Redis.
	StateRefresh time.Duration
	// LeaseTokens is the largest budget lease taken from Redis per scope
	// (0: every call reserves its exact estimate in Redis); LeaseIdle is how
	// long an unused lease is kept before it goes back.
	LeaseTokens int64
	LeaseIdle   time.Duration
	// SignalAckTimeout is how long PauseAll and ResumeAll wait for every
	// live replica's ack before sending once more (B-20).
	SignalAckTimeout time.Duration
	// Secrets is what a prompt or embedding input holding a secret gets:
	// SecretsRedact (the default, also when empty) or SecretsReject.
	Secrets string
}

// RegisterFlags registers the -llm.gate.*, -llm.budget.* and -llm.soft-limit.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.PipelineSlots, "llm.gate.pipeline-slots", 4, "concurrent non-user model calls per replica")
	fs.BoolVar(&c.UserPreemption, "llm.gate.user-preemption", true, "a user request preempts the lowest-priority pipeline call when all pipeline slots are busy")
	fs.Int64Var(&c.GlobalTokens, "llm.budget.global-tokens", 0, "tokens per budget period across the cluster (0: unlimited)")
	fs.Int64Var(&c.TenantTokens, "llm.budget.tenant-tokens", 0, "tokens per budget period per tenant (0: unlimited)")
	fs.Int64Var(&c.SessionTokens, "llm.budget.session-tokens", 0, "tokens per session (0: unlimited)")
	fs.Int64Var(&c.TaskTokens, "llm.budget.task-tokens", 0, "tokens per task unless the request sets its own (0: unlimited)")
	fs.Int64Var(&c.ProviderTokens, "llm.budget.provider-tokens", 0, "tokens per budget period per provider (0: unlimited)")
	fs.DurationVar(&c.BudgetPeriod, "llm.budget.period", 24*time.Hour, "period of the global, tenant and provider budgets")
	fs.Int64Var(&c.SoftRequests, "llm.soft-limit.requests", 0, "requests per soft-limit period per provider before a quota warning (0: none)")
	fs.Int64Var(&c.SoftTokens, "llm.soft-limit.tokens", 0, "tokens per soft-limit period per provider before a quota warning (0: none)")
	fs.DurationVar(&c.SoftPeriod, "llm.soft-limit.period", 7*24*time.Hour, "soft-limit period")
	fs.Float64Var(&c.WarnAt, "llm.soft-limit.warn-at", 0.8, "fraction of a soft limit at which to warn")
	fs.DurationVar(&c.BackoffBase, "llm.rate-limit.backoff-base", time.Second, "wait after the first 429 (doubling per 429)")
	fs.DurationVar(&c.BackoffCap, "llm.rate-limit.backoff-cap", 5*time.Minute, "longest 429 backoff (a Retry-After may exceed it)")
	fs.DurationVar(&c.RequestTimeout, "llm.gate.request-timeout", 120*time.Second, "timeout of one provider call")
	fs.DurationVar(&c.StreamIdleTimeout, "llm.gate.stream-idle-timeout", 60*time.Second, "cancel a stream with no chunk for this long")
	fs.Float64Var(&c.EstimateMargin, "llm.budget.estimate-margin", 1.2, "factor applied to the prompt estimate reserved against budgets")
	fs.IntVar(&c.UsageBuffer, "llm.gate.usage-buffer", 8192, "usage records buffered for the writer")
	fs.DurationVar(&c.StateRefresh, "llm.gate.state-refresh", 100*time.Millisecond, "how often the shared rate-limit and breaker state is read and batched counters are written")
	fs.Int64Var(&c.LeaseTokens, "llm.budget.lease-tokens", 100_000, "largest budget lease per scope taken from Redis (0: reserve each call in Redis)")
	fs.DurationVar(&c.LeaseIdle, "llm.budget.lease-idle", 2*time.Second, "return an unused budget lease after this long")
	fs.StringVar(&c.Secrets, "llm.secrets", SecretsRedact, "a prompt or embedding input holding a secret (a key, token, password, private key): redact (send it with each secret replaced by [REDACTED:<rule>]) or reject (refuse the call, FAILED_PRECONDITION)")
	fs.DurationVar(&c.SignalAckTimeout, "llm.gate.signal-ack-timeout", 2*time.Second, "how long PauseAll and ResumeAll wait for every replica's ack before sending once more")
}

// DefaultConfig is the flag defaults.
func DefaultConfig() Config {
	var c Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.RegisterFlags(fs)
	return c
}

// Validate joins every problem.
func (c Config) Validate() error {
	var errs []error
	if c.PipelineSlots < 1 {
		errs = append(errs, errors.New("llm.gate.pipeline-slots: must be at least 1"))
	}
	if c.BudgetPeriod <= 0 || c.SoftPeriod <= 0 {
		errs = append(errs, errors.New("llm.budget.period and llm.soft-limit.period: must be positive"))
	}
	if c.WarnAt <= 0 || c.WarnAt > 1 {
		errs = append(errs, errors.New("llm.soft-limit.warn-at: must be in (0, 1]"))
	}
	if c.BackoffBase <= 0 || c.BackoffCap < c.BackoffBase {
		errs = append(errs, errors.New("llm.rate-limit.backoff-base/cap: base must be positive and at most the cap"))
	}
	if c.RequestTimeout <= 0 || c.StreamIdleTimeout < 0 {
		errs = append(errs, errors.New("llm.gate.request-timeout must be positive, llm.gate.stream-idle-timeout not negative"))
	}
	if c.EstimateMargin < 1 {
		errs = append(errs, errors.New("llm.budget.estimate-margin: must be at least 1"))
	}
	if c.StateRefresh <= 0 || c.LeaseIdle <= 0 || c.LeaseTokens < 0 || c.SignalAckTimeout <= 0 {
		errs = append(errs, errors.New("llm.gate.state-refresh, llm.gate.signal-ack-timeout and llm.budget.lease-idle must be positive, llm.budget.lease-tokens not negative"))
	}
	if c.Secrets != "" && c.Secrets != SecretsRedact && c.Secrets != SecretsReject {
		errs = append(errs, errors.New("llm.secrets: want redact or reject"))
	}
	if c.UsageBuffer < 0 {
		errs = append(errs, errors.New("llm.gate.usage-buffer: must not be negative"))
	}
	return errors.Join(errs...)
}

func (c Config) limits() budget.Limits {
	return budget.Limits{Global: c.GlobalTokens, Tenant: c.TenantTokens, Session: c.SessionTokens, Task: c.TaskTokens, Provider: c.ProviderTokens, Period: c.BudgetPeriod}
}

func (c Config) rateSettings() ratelimit.Settings {
	soft := ratelimit.SoftLimit{Requests: c.SoftRequests, Tokens: c.SoftTokens, Period: c.SoftPeriod, WarnAt: c.WarnAt}
	return ratelimit.Settings{Base: c.BackoffBase, Cap: c.BackoffCap, Soft: func(string) ratelimit.SoftLimit { return soft }}
}
