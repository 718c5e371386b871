package guide

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Defaults of Config; a zero field takes its default in New.
const (
	DefaultMaxMessageBytes     = 32 << 10
	DefaultMaxDisplayNameChars = 200
	DefaultMaxMetadataEntries  = 32
	DefaultMaxSummaryBytes     = 16 << 10
	DefaultRouteThreshold      = 0.7
	DefaultProvisionTimeout    = 10 * time.Second

	// Session limits (spec A-14) given to a session that sets none.
	DefaultSessionMaxConcurrentTasks = 4
	DefaultSessionMaxEngineers       = 2
	DefaultSessionTaskTimeout        = 30 * time.Minute
	DefaultSessionTimeout            = 7 * 24 * time.Hour
	DefaultSessionAutoSuspendAfter   = 2 * time.Hour

	DefaultReaperInterval      = 15 * time.Second
	DefaultReaperBatch         = 100
	DefaultRequestTimeout      = 2 * time.Minute
	DefaultPeerTimeout         = 5 * time.Second
	DefaultSkillThreshold      = 0.9
	DefaultCacheThreshold      = 0.8
	DefaultRerouteLimit        = 3
	DefaultClarificationLoop   = 2
	DefaultFailurePenalty      = 0.1
	DefaultLibrarianCacheTTL   = 15 * time.Minute
	DefaultRouteCacheTTL       = 10 * time.Minute
	DefaultClarificationTTL    = 30 * time.Minute
	DefaultMaxRecordingQueries = 1000
	DefaultLocalCacheTTL       = 2 * time.Second
	DefaultPreRouteTimeout     = 2 * time.Second
	DefaultOutboxInterval      = 5 * time.Second
	DefaultOutboxGrace         = 20 * time.Second
	DefaultPublishTimeout      = 10 * time.Second
	// DefaultInboxTimeout keeps an inbox message's handling within its
	// consumer's ack wait (30s), so that it is not delivered again while
	// still being handled.
	DefaultInboxTimeout = 20 * time.Second
)

// Limits that are part of the API rather than deployment choices.
const (
	maxMetadataKeyChars   = 128
	maxMetadataValueBytes = 1024
	maxRequestIDChars     = 128

	defaultSessionPageSize = 50
	maxSessionPageSize     = 200
	defaultMessagePageSize = 50
	maxMessagePageSize     = 500
	defaultEventPageSize   = 100
	maxEventPageSize       = 1000
)

// Config holds the Guide's own settings.
type Config struct {
	// MaxMessageBytes bounds a user message (after trimming).
	MaxMessageBytes int
	// MaxDisplayNameChars bounds a session's display name, in characters.
	MaxDisplayNameChars int
	// MaxMetadataEntries bounds a session's metadata map.
	MaxMetadataEntries int
	// MaxSummaryBytes bounds the summary given when a session completes.
	MaxSummaryBytes int
	// RouteThreshold is the classifier confidence below which the Guide asks
	// the user instead of routing.
	RouteThreshold float64
	// ProvisionTimeout bounds provisioning the NATS streams in New and Run.
	ProvisionTimeout time.Duration

	// Session defaults and ceilings.
	SessionMaxConcurrentTasks int
	SessionMaxEngineers       int
	SessionTaskTimeout        time.Duration
	SessionTimeout            time.Duration
	SessionAutoSuspendAfter   time.Duration

	// ReaperInterval is how often the reaper suspends idle sessions, fails
	// timed-out ones and expires unanswered requests; ReaperBatch bounds
	// the rows one pass takes.
	ReaperInterval time.Duration
	ReaperBatch    int
	// RequestTimeout is how long a routed request may wait for its answer.
	RequestTimeout time.Duration
	// PeerTimeout bounds calls to other services.
	PeerTimeout time.Duration
	// SkillThreshold is the match above which a slash command or direct
	// skill runs without classification (spec A-28).
	SkillThreshold float64
	// CacheThreshold is the confidence above which routes and knowledge
	// answers are cached and looked up (spec ).
	CacheThreshold float64
	// RerouteLimit is the reroute history length at which the user is asked.
	RerouteLimit int
	// ClarificationLoop is the number of clarifying questions from one
	// routed agent above which a routing failure is recorded.
	ClarificationLoop int
	// FailurePenalty lowers routing confidence for each similar past routing failure.
	FailurePenalty float64
	// LibrarianCacheTTL is how long a librarian answer stays cached (5-30 min).
	LibrarianCacheTTL time.Duration
	// RouteCacheTTL is how long a routing decision stays cached.
	RouteCacheTTL time.Duration
	// ClarificationTTL is how long a question to the user stays pending;
	// unanswered, it expires.
	ClarificationTTL time.Duration
	// MaxRecordingQueries bounds one recording.
	MaxRecordingQueries int
	// AsyncCommit stores messages without waiting for the disk: a database
	// crash may lose the last moments of messages (their events are on the
	// bus already), in exchange for routing latency.
	AsyncCommit bool
	// LocalCacheTTL is how long the Guide trusts its in-process copies of
	// what other replicas may change: a session being active (re-checked in
	// every message's transaction anyway) and a tenant's routing failures.
	// Its own writes invalidate them at once.
	LocalCacheTTL time.Duration
	// PreRouteTimeout bounds the consultation of the librarian and the
	// archivalist before a change is routed to the architect (spec A-30).
	PreRouteTimeout time.Duration
	// OutboxInterval is how often messages stored but not yet on the bus
	// (the Guide stopped between its commit and its publish, or the bus was
	// down) are published again; OutboxGrace is how old such a message must
	// be, so that a request still publishing it is left alone.
	OutboxInterval time.Duration
	OutboxGrace    time.Duration
	// PublishTimeout bounds the wait for the bus to acknowledge a message's
	// publications: a bus that is down fails the request with Unavailable
	// (the message stays stored, for a retry or the outbox) rather than
	// holding it until the caller gives up.
	PublishTimeout time.Duration
	// InboxTimeout bounds the handling of one envelope from an agent.
	InboxTimeout time.Duration
	// LLMClassifier classifies messages with the configured model provider
	// when there is one (not the offline local provider), through the LLM
	// gate; the offline rules answer when it fails or is too slow.
	LLMClassifier bool
	// LLMClassifierModel is the model or alias it uses (default "fast").
	LLMClassifierModel string
	// LLMClassifierTimeout bounds one model classification.
	LLMClassifierTimeout time.Duration
}

// RegisterFlags registers the -guide.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxMessageBytes, "guide.max-message-bytes", DefaultMaxMessageBytes, "largest user message accepted, in bytes")
	fs.IntVar(&c.MaxDisplayNameChars, "guide.max-display-name-chars", DefaultMaxDisplayNameChars, "longest session display name, in characters")
	fs.IntVar(&c.MaxMetadataEntries, "guide.max-metadata-entries", DefaultMaxMetadataEntries, "most metadata entries on a session")
	fs.IntVar(&c.MaxSummaryBytes, "guide.max-summary-bytes", DefaultMaxSummaryBytes, "largest session summary accepted, in bytes")
	fs.Float64Var(&c.RouteThreshold, "guide.route-threshold", DefaultRouteThreshold, "classifier confidence below which the user is asked to clarify")
	fs.DurationVar(&c.ProvisionTimeout, "guide.provision-timeout", DefaultProvisionTimeout, "time allowed to provision the NATS streams")
	fs.IntVar(&c.SessionMaxConcurrentTasks, "guide.session-max-concurrent-tasks", DefaultSessionMaxConcurrentTasks, "default tasks of one session running at once")
	fs.IntVar(&c.SessionMaxEngineers, "guide.session-max-engineers", DefaultSessionMaxEngineers, "default engineers working for one session")
	fs.DurationVar(&c.SessionTaskTimeout, "guide.session-task-timeout", DefaultSessionTaskTimeout, "default time one task of a session may run")
	fs.DurationVar(&c.SessionTimeout, "guide.session-timeout", DefaultSessionTimeout, "default age after which an unfinished session fails")
	fs.DurationVar(&c.SessionAutoSuspendAfter, "guide.session-auto-suspend-after", DefaultSessionAutoSuspendAfter, "default idle time after which an active session is suspended")
	fs.DurationVar(&c.ReaperInterval, "guide.reaper-interval", DefaultReaperInterval, "how often idle sessions, session timeouts and request timeouts are enforced")
	fs.IntVar(&c.ReaperBatch, "guide.reaper-batch", DefaultReaperBatch, "rows one reaper pass takes")
	fs.DurationVar(&c.RequestTimeout, "guide.request-timeout", DefaultRequestTimeout, "time a routed request may wait for its answer before an error event")
	fs.DurationVar(&c.PeerTimeout, "guide.peer-timeout", DefaultPeerTimeout, "timeout of calls to other services")
	fs.Float64Var(&c.SkillThreshold, "guide.skill-threshold", DefaultSkillThreshold, "match above which a slash command or direct skill runs without classification")
	fs.Float64Var(&c.CacheThreshold, "guide.cache-threshold", DefaultCacheThreshold, "confidence above which routes and knowledge answers are cached")
	fs.IntVar(&c.RerouteLimit, "guide.reroute-limit", DefaultRerouteLimit, "reroute hops at which the user is asked")
	fs.IntVar(&c.ClarificationLoop, "guide.clarification-loop", DefaultClarificationLoop, "clarifying questions from one agent above which a routing failure is recorded")
	fs.Float64Var(&c.FailurePenalty, "guide.failure-penalty", DefaultFailurePenalty, "confidence removed per similar past routing failure")
	fs.DurationVar(&c.LibrarianCacheTTL, "guide.librarian-cache-ttl", DefaultLibrarianCacheTTL, "lifetime of a cached librarian answer (5m-30m)")
	fs.DurationVar(&c.RouteCacheTTL, "guide.route-cache-ttl", DefaultRouteCacheTTL, "lifetime of a cached routing decision")
	fs.DurationVar(&c.ClarificationTTL, "guide.clarification-ttl", DefaultClarificationTTL, "time a question to the user stays pending; a plain reply answers the latest one, and unanswered ones expire")
	fs.IntVar(&c.MaxRecordingQueries, "guide.max-recording-queries", DefaultMaxRecordingQueries, "most queries one recording keeps")
	fs.DurationVar(&c.LocalCacheTTL, "guide.local-cache-ttl", DefaultLocalCacheTTL, "how long in-process copies of session state and routing failures written by other replicas are trusted")
	fs.DurationVar(&c.PreRouteTimeout, "guide.preroute-timeout", DefaultPreRouteTimeout, "time the librarian and archivalist get to answer before a change is routed to the architect without their answer")
	fs.BoolVar(&c.LLMClassifier, "guide.llm-classifier", true, "classify messages with the configured model provider when there is one (the offline rules answer when it fails)")
	fs.StringVar(&c.LLMClassifierModel, "guide.llm-classifier-model", "fast", "model id or alias (default, fast, powerful) of the model classifier")
	fs.DurationVar(&c.LLMClassifierTimeout, "guide.llm-classifier-timeout", DefaultLLMClassifierTimeout, "time the model classifier gets before the offline rules answer")
	fs.DurationVar(&c.OutboxInterval, "guide.outbox-interval", DefaultOutboxInterval, "how often stored messages that did not reach the bus are published again")
	fs.DurationVar(&c.InboxTimeout, "guide.inbox-timeout", DefaultInboxTimeout, "time allowed to handle one envelope from an agent (below the inbox's 30s ack wait); one that runs out is delivered again")
	fs.DurationVar(&c.PublishTimeout, "guide.publish-timeout", DefaultPublishTimeout, "time the bus gets to acknowledge a message's events and envelope before the request fails with UNAVAILABLE (the message stays stored and is published later)")
	fs.DurationVar(&c.OutboxGrace, "guide.outbox-grace", DefaultOutboxGrace, "age a stored message must reach before it is published again (below the streams' 2-minute duplicate window)")
	fs.BoolVar(&c.AsyncCommit, "guide.async-commit", false, "store messages without waiting for the disk (a database crash may lose the last moments of messages)")
}

// Validate reports every invalid setting. Zero values are valid: they take
// their defaults.
func (c Config) Validate() error {
	var errs []error
	if c.MaxMessageBytes < 0 {
		errs = append(errs, fmt.Errorf("guide.max-message-bytes: must not be negative, got %d", c.MaxMessageBytes))
	}
	if c.MaxDisplayNameChars < 0 {
		errs = append(errs, fmt.Errorf("guide.max-display-name-chars: must not be negative, got %d", c.MaxDisplayNameChars))
	}
	if c.MaxMetadataEntries < 0 {
		errs = append(errs, fmt.Errorf("guide.max-metadata-entries: must not be negative, got %d", c.MaxMetadataEntries))
	}
	if c.MaxSummaryBytes < 0 {
		errs = append(errs, fmt.Errorf("guide.max-summary-bytes: must not be negative, got %d", c.MaxSummaryBytes))
	}
	if c.RouteThreshold < 0 || c.RouteThreshold > 1 {
		errs = append(errs, fmt.Errorf("guide.route-threshold: must be within [0, 1], got %g", c.RouteThreshold))
	}
	if c.ProvisionTimeout < 0 {
		errs = append(errs, errors.New("guide.provision-timeout: must not be negative"))
	}
	for name, v := range map[string]int{"session-max-concurrent-tasks": c.SessionMaxConcurrentTasks,
		"session-max-engineers": c.SessionMaxEngineers, "reaper-batch": c.ReaperBatch, "reroute-limit": c.RerouteLimit,
		"clarification-loop": c.ClarificationLoop, "max-recording-queries": c.MaxRecordingQueries} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("guide.%s: must not be negative, got %d", name, v))
		}
	}
	for name, v := range map[string]time.Duration{"session-task-timeout": c.SessionTaskTimeout,
		"session-timeout": c.SessionTimeout, "session-auto-suspend-after": c.SessionAutoSuspendAfter,
		"reaper-interval": c.ReaperInterval, "request-timeout": c.RequestTimeout, "peer-timeout": c.PeerTimeout,
		"route-cache-ttl": c.RouteCacheTTL, "clarification-ttl": c.ClarificationTTL, "local-cache-ttl": c.LocalCacheTTL, "preroute-timeout": c.PreRouteTimeout, "llm-classifier-timeout": c.LLMClassifierTimeout,
		"outbox-interval": c.OutboxInterval, "outbox-grace": c.OutboxGrace, "publish-timeout": c.PublishTimeout, "inbox-timeout": c.InboxTimeout} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("guide.%s: must not be negative", name))
		}
	}
	if c.OutboxGrace >= outboxWindow {
		errs = append(errs, fmt.Errorf("guide.outbox-grace: must be below %s (the streams' duplicate window less a margin), got %s", outboxWindow, c.OutboxGrace))
	}
	if c.LibrarianCacheTTL != 0 && (c.LibrarianCacheTTL < 5*time.Minute || c.LibrarianCacheTTL > 30*time.Minute) {
		errs = append(errs, fmt.Errorf("guide.librarian-cache-ttl: must be within [5m, 30m], got %s", c.LibrarianCacheTTL))
	}
	for name, v := range map[string]float64{"skill-threshold": c.SkillThreshold, "cache-threshold": c.CacheThreshold, "failure-penalty": c.FailurePenalty} {
		if v < 0 || v > 1 {
			errs = append(errs, fmt.Errorf("guide.%s: must be within [0, 1], got %g", name, v))
		}
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxDisplayNameChars == 0 {
		c.MaxDisplayNameChars = DefaultMaxDisplayNameChars
	}
	if c.MaxMetadataEntries == 0 {
		c.MaxMetadataEntries = DefaultMaxMetadataEntries
	}
	if c.MaxSummaryBytes == 0 {
		c.MaxSummaryBytes = DefaultMaxSummaryBytes
	}
	if c.RouteThreshold == 0 {
		c.RouteThreshold = DefaultRouteThreshold
	}
	if c.ProvisionTimeout == 0 {
		c.ProvisionTimeout = DefaultProvisionTimeout
	}
	setInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setDur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setFloat := func(p *float64, d float64) {
		if *p == 0 {
			*p = d
		}
	}
	setInt(&c.SessionMaxConcurrentTasks, DefaultSessionMaxConcurrentTasks)
	setInt(&c.SessionMaxEngineers, DefaultSessionMaxEngineers)
	setDur(&c.SessionTaskTimeout, DefaultSessionTaskTimeout)
	setDur(&c.SessionTimeout, DefaultSessionTimeout)
	setDur(&c.SessionAutoSuspendAfter, DefaultSessionAutoSuspendAfter)
	setDur(&c.ReaperInterval, DefaultReaperInterval)
	setInt(&c.ReaperBatch, DefaultReaperBatch)
	setDur(&c.RequestTimeout, DefaultRequestTimeout)
	setDur(&c.PeerTimeout, DefaultPeerTimeout)
	setFloat(&c.SkillThreshold, DefaultSkillThreshold)
	setFloat(&c.CacheThreshold, DefaultCacheThreshold)
	setInt(&c.RerouteLimit, DefaultRerouteLimit)
	setInt(&c.ClarificationLoop, DefaultClarificationLoop)
	setFloat(&c.FailurePenalty, DefaultFailurePenalty)
	setDur(&c.LibrarianCacheTTL, DefaultLibrarianCacheTTL)
	setDur(&c.RouteCacheTTL, DefaultRouteCacheTTL)
	setDur(&c.ClarificationTTL, DefaultClarificationTTL)
	setInt(&c.MaxRecordingQueries, DefaultMaxRecordingQueries)
	setDur(&c.LocalCacheTTL, DefaultLocalCacheTTL)
	setDur(&c.PreRouteTimeout, DefaultPreRouteTimeout)
	setDur(&c.OutboxInterval, DefaultOutboxInterval)
	setDur(&c.OutboxGrace, DefaultOutboxGrace)
	setDur(&c.PublishTimeout, DefaultPublishTimeout)
	setDur(&c.InboxTimeout, DefaultInboxTimeout)
	return c
}
