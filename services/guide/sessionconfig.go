package guide

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
)

// Limits on a session's own configuration.
const (
	maxSessionTasks     = 256
	maxSessionEngineers = 64
	minSessionDuration  = time.Second
	maxSessionDuration  = 366 * 24 * time.Hour
)

// reviewPersonas are the review personas a session may choose (spec P-12);
// "" leaves the choice to the run, then to the Inspector's default.
var reviewPersonas = []string{"default", "security", "dx", "architecture", "quick"}

// sessionConfigFromProto validates a requested SessionConfig; unset fields
// take the service defaults.
func (s *Service) sessionConfigFromProto(p *guidev1.SessionConfig) (sessionConfig, error) {
	c := sessionConfig{
		MaxConcurrentTasks: int32(s.cfg.SessionMaxConcurrentTasks),
		MaxEngineers:       int32(s.cfg.SessionMaxEngineers),
		TaskTimeout:        s.cfg.SessionTaskTimeout,
		SessionTimeout:     s.cfg.SessionTimeout,
		AutoSuspendAfter:   s.cfg.SessionAutoSuspendAfter,
	}
	if p == nil {
		return c, nil
	}
	switch n := p.GetMaxConcurrentTasks(); {
	case n < 0 || n > maxSessionTasks:
		return c, apierr.Invalid("session.config.max_concurrent_tasks", "must be within [0, %d], got %d", maxSessionTasks, n)
	case n > 0:
		c.MaxConcurrentTasks = n
	}
	switch n := p.GetMaxEngineers(); {
	case n < 0 || n > maxSessionEngineers:
		return c, apierr.Invalid("session.config.max_engineers", "must be within [0, %d], got %d", maxSessionEngineers, n)
	case n > 0:
		c.MaxEngineers = n
	}
	for _, d := range []struct {
		field string
		in    *durationpb.Duration
		out   *time.Duration
	}{
		{"task_timeout", p.GetTaskTimeout(), &c.TaskTimeout},
		{"session_timeout", p.GetSessionTimeout(), &c.SessionTimeout},
		{"auto_suspend_after", p.GetAutoSuspendAfter(), &c.AutoSuspendAfter},
	} {
		if d.in == nil {
			continue
		}
		if err := d.in.CheckValid(); err != nil {
			return c, apierr.Invalid("session.config."+d.field, "%v", err)
		}
		v := d.in.AsDuration()
		if v == 0 {
			continue
		}
		if v < minSessionDuration || v > maxSessionDuration {
			return c, apierr.Invalid("session.config."+d.field, "must be between %s and %s (a year), got %s", minSessionDuration, maxSessionDuration, v)
		}
		*d.out = v
	}
	persona := strings.ToLower(strings.TrimSpace(p.GetReviewPersona()))
	if persona != "" && !slices.Contains(reviewPersonas, persona) {
		return c, apierr.Invalid("session.config.review_persona", "want one of %s, got %q", strings.Join(reviewPersonas, ", "), truncate(persona, 40))
	}
	c.GitIsolation = p.GetEnableGitIsolation()
	c.AutoApproveTrivial = p.GetAutoApproveTrivial()
	c.AllowPush = p.GetAllowPush()
	c.ReviewPersona = persona
	return c, nil
}

func (c sessionConfig) proto() *guidev1.SessionConfig {
	return &guidev1.SessionConfig{
		MaxConcurrentTasks: c.MaxConcurrentTasks,
		MaxEngineers:       c.MaxEngineers,
		TaskTimeout:        durationpb.New(c.TaskTimeout),
		SessionTimeout:     durationpb.New(c.SessionTimeout),
		AutoSuspendAfter:   durationpb.New(c.AutoSuspendAfter),
		EnableGitIsolation: c.GitIsolation,
		AutoApproveTrivial: c.AutoApproveTrivial,
		AllowPush:          c.AllowPush,
		ReviewPersona:      c.ReviewPersona,
	}
}
