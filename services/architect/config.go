package architect

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Defaults of Config; a zero field takes its default in New.
const (
	DefaultMaxRequestBytes     = 16 << 10
	DefaultMaxReasonBytes      = 4 << 10
	DefaultOrchestratorTimeout = 10 * time.Second
	DefaultGuideTimeout        = 5 * time.Second
	DefaultAcademicTimeout     = 3 * time.Second
	DefaultConsultTimeout      = 3 * time.Second
	DefaultMaxPlanVersions     = 20
	DefaultProvisionTimeout    = 10 * time.Second
	// DefaultInboxTimeout keeps a routed request's handling within the
	// inbox's 30s ack wait, so that it is not delivered again meanwhile.
	DefaultInboxTimeout = 20 * time.Second
)

const (
	defaultPlanPageSize = 50
	maxPlanPageSize     = 200
)

// Config holds the Architect's own settings.
type Config struct {
	// MaxRequestBytes bounds the request a plan is made from.
	MaxRequestBytes int
	// MaxReasonBytes bounds a rejection reason.
	MaxReasonBytes int
	// OrchestratorTimeout bounds the call that submits an approved plan.
	OrchestratorTimeout time.Duration
	// GuideTimeout bounds reading the session's limits from the Guide when a
	// plan is approved.
	GuideTimeout time.Duration
	// AcademicTimeout bounds asking the academic for the feature domain's
	// expectations while a plan is drafted; past it the plan keeps only the
	// user's own criteria, and says so.
	AcademicTimeout time.Duration
	// ConsultTimeout bounds asking the Librarian and the Archivalist what
	// they know of a request before it is planned (they are asked at once;
	// one that has not answered by then is recorded as unavailable), and
	// resolving a plan's repository to its path when it is approved.
	ConsultTimeout time.Duration
	// MaxPlanVersions bounds a plan's versions: revisions past it are
	// refused.
	MaxPlanVersions int
	// ProvisionTimeout bounds provisioning the NATS streams.
	ProvisionTimeout time.Duration
	// InboxTimeout bounds drafting and announcing a plan from one routed
	// request; one that runs out is delivered again.
	InboxTimeout time.Duration
}

// RegisterFlags registers the -architect.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxRequestBytes, "architect.max-request-bytes", DefaultMaxRequestBytes, "largest plan request accepted, in bytes")
	fs.IntVar(&c.MaxReasonBytes, "architect.max-reason-bytes", DefaultMaxReasonBytes, "largest plan rejection reason accepted, in bytes")
	fs.DurationVar(&c.OrchestratorTimeout, "architect.orchestrator-timeout", DefaultOrchestratorTimeout, "time allowed for submitting an approved plan to the orchestrator")
	fs.DurationVar(&c.GuideTimeout, "architect.guide-timeout", DefaultGuideTimeout, "time allowed for reading a session's limits from the guide when a plan is approved")
	fs.DurationVar(&c.AcademicTimeout, "architect.academic-timeout", DefaultAcademicTimeout, "time allowed for asking the academic what a plan's feature domain implies")
	fs.DurationVar(&c.ConsultTimeout, "architect.consult-timeout", DefaultConsultTimeout, "time allowed for the librarian and the archivalist to say what they know of a request before it is planned")
	fs.IntVar(&c.MaxPlanVersions, "architect.max-plan-versions", DefaultMaxPlanVersions, "most versions a plan may have; revisions past it are refused")
	fs.DurationVar(&c.ProvisionTimeout, "architect.provision-timeout", DefaultProvisionTimeout, "time allowed to provision the NATS streams")
	fs.DurationVar(&c.InboxTimeout, "architect.inbox-timeout", DefaultInboxTimeout, "time allowed to draft a plan from one routed request")
}

// Validate reports every invalid setting. Zero values are valid: they take
// their defaults.
func (c Config) Validate() error {
	var errs []error
	if c.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("architect.max-request-bytes: must not be negative, got %d", c.MaxRequestBytes))
	}
	if c.MaxReasonBytes < 0 {
		errs = append(errs, fmt.Errorf("architect.max-reason-bytes: must not be negative, got %d", c.MaxReasonBytes))
	}
	if c.OrchestratorTimeout < 0 {
		errs = append(errs, errors.New("architect.orchestrator-timeout: must not be negative"))
	}
	if c.GuideTimeout < 0 {
		errs = append(errs, errors.New("architect.guide-timeout: must not be negative"))
	}
	if c.AcademicTimeout < 0 {
		errs = append(errs, errors.New("architect.academic-timeout: must not be negative"))
	}
	if c.ConsultTimeout < 0 {
		errs = append(errs, errors.New("architect.consult-timeout: must not be negative"))
	}
	if c.MaxPlanVersions < 0 {
		errs = append(errs, fmt.Errorf("architect.max-plan-versions: must not be negative, got %d", c.MaxPlanVersions))
	}
	if c.ProvisionTimeout < 0 {
		errs = append(errs, errors.New("architect.provision-timeout: must not be negative"))
	}
	if c.InboxTimeout < 0 {
		errs = append(errs, errors.New("architect.inbox-timeout: must not be negative"))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxReasonBytes == 0 {
		c.MaxReasonBytes = DefaultMaxReasonBytes
	}
	if c.OrchestratorTimeout == 0 {
		c.OrchestratorTimeout = DefaultOrchestratorTimeout
	}
	if c.GuideTimeout == 0 {
		c.GuideTimeout = DefaultGuideTimeout
	}
	if c.AcademicTimeout == 0 {
		c.AcademicTimeout = DefaultAcademicTimeout
	}
	if c.ConsultTimeout == 0 {
		c.ConsultTimeout = DefaultConsultTimeout
	}
	if c.MaxPlanVersions == 0 {
		c.MaxPlanVersions = DefaultMaxPlanVersions
	}
	if c.ProvisionTimeout == 0 {
		c.ProvisionTimeout = DefaultProvisionTimeout
	}
	if c.InboxTimeout == 0 {
		c.InboxTimeout = DefaultInboxTimeout
	}
	return c
}
