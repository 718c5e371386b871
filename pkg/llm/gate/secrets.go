package gate

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/secrets"
)

// The secrets policies: what the gate does with a prompt that holds a
// secret (D-13). Either way the secret never reaches the provider and
// never reaches a log; sylk_llm_secrets_total counts each by rule.
const (
	// SecretsRedact replaces each secret by [REDACTED:<rule>] and sends the
	// rest of the prompt.
	SecretsRedact = "redact"
	// SecretsReject refuses the call: FAILED_PRECONDITION, reason
	// PROMPT_CONTAINS_SECRET, the rules (never the values) in metadata.
	SecretsReject = "reject"
)

// ReasonPromptSecret is the ErrorInfo reason of a prompt refused for a secret.
const ReasonPromptSecret = "PROMPT_CONTAINS_SECRET"

// screen applies the secrets policy to what req sends: its system prompt,
// every message and every tool call's arguments. It redacts into copies
// (the caller owns the messages) or refuses.
func (g *Gate) screen(ctx context.Context, req *llm.Request) error {
	found := map[string]int{}
	scan := func(s string) string {
		fs := secrets.Find(s)
		if len(fs) == 0 {
			return s
		}
		for _, f := range fs {
			found[f.Rule]++
		}
		out, _ := secrets.Redact(s)
		return out
	}
	system := scan(req.System)
	msgs := make([]llm.Message, len(req.Messages))
	for i, m := range req.Messages {
		m.Content = scan(m.Content)
		if len(m.ToolCalls) > 0 {
			m.ToolCalls = slices.Clone(m.ToolCalls)
			for j := range m.ToolCalls {
				m.ToolCalls[j].Arguments = scan(m.ToolCalls[j].Arguments)
			}
		}
		msgs[i] = m
	}
	if len(found) == 0 {
		return nil
	}
	if err := g.applyPolicy(ctx, found, req.Attribution); err != nil {
		return err
	}
	req.System, req.Messages = system, msgs
	return nil
}

// applyPolicy counts the secrets found in a model input and says whether
// the policy refuses it.
func (g *Gate) applyPolicy(ctx context.Context, found map[string]int, a llm.Attribution) error {
	action := "redacted"
	if g.cfg.Secrets == SecretsReject {
		action = "rejected"
	}
	rules := slices.Sorted(maps.Keys(found))
	total := 0
	for _, r := range rules {
		g.m.secrets.WithLabelValues(action, r).Add(float64(found[r]))
		total += found[r]
	}
	// Rule names and counts only: never the text.
	g.log.WarnContext(ctx, "secrets in a model input", slog.String("action", action), slog.String("rules", strings.Join(rules, ",")),
		slog.Int("count", total), slog.String(logx.KeyAgent, a.AgentID), slog.String(logx.KeyTenantID, a.TenantID))
	if action == "rejected" {
		return apierr.FailedPrecondition(ReasonPromptSecret,
			"llm gate: the prompt holds %d secret(s) (%s) and the policy rejects such prompts; remove them, or an admin may set -llm.secrets=redact",
			total, strings.Join(rules, ", ")).With("rules", strings.Join(rules, ",")).With("count", strconv.Itoa(total))
	}
	return nil
}
