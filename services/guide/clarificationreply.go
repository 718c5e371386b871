package guide

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"sylk.dev/sylk/pkg/topology"
)

// A plain chat message answers the session's latest pending question when
// it is the next message the user sends after it: the user need not name
// the question. Questions unanswered for the clarification TTL expire.

// latestClarification returns the name of the session's newest pending
// question that no user message but a slash command has followed and that
// has not expired, "" when there is none.
func (s *Service) latestClarification(ctx context.Context, r sendRequest) (string, error) {
	var id string
	err := s.db.QueryRow(ctx, `SELECT c.id FROM clarifications c
		WHERE c.tenant_id = $1 AND c.user_id = $2 AND c.session_id = $3 AND c.answer_time IS NULL AND c.create_time > $4
		AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = c.session_id AND m.author = $5
			AND m.create_time > c.create_time AND m.route_tier <> $6)
		ORDER BY c.create_time DESC, c.id DESC LIMIT 1`,
		r.owner.tenant, r.owner.user, r.sessionID, s.clarificationCutoff(), authorUser, tierSlashCommand).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find pending clarification: %w", err)
	}
	return clarificationName(r.sessionID, id), nil
}

// clarificationCutoff is the create time before which a pending question
// has expired.
func (s *Service) clarificationCutoff() any { return s.now().Add(-s.cfg.ClarificationTTL) }

// ordinals are the words a reply may choose an option by.
var ordinals = map[string]int{"1": 1, "2": 2, "3": 3, "4": 4, "first": 1, "second": 2, "third": 3, "fourth": 4, "one": 1,
	"two": 2, "three": 3, "four": 4}

// choiceWords describe each agent as a user might when choosing it: "the
// code one", "history", "docs".
var choiceWords = map[string][]string{
	topology.AgentLibrarian:   {"code", "codebase", "search", "source", "repo", "repository"},
	topology.AgentArchivalist: {"history", "past", "before", "decided", "decision", "recall", "previous", "memory"},
	topology.AgentAcademic:    {"docs", "documentation", "external", "research", "knowledge", "web", "practice", "practices"},
	topology.AgentArchitect:   {"change", "plan", "edit", "implement", "fix", "architect"},
}

// maxChoiceWords bounds a reply read as a choice; a longer one is a
// rephrase.
const maxChoiceWords = 5

// choiceOf reads the agent a reply chooses among options: an agent's name,
// an option's number or ordinal ("1", "the second"), or in a short reply
// the words that describe one agent only ("the code one"). It returns ""
// when the reply chooses none, and is then a rephrase.
func choiceOf(reply string, options []string) string {
	lower := strings.ToLower(reply)
	for _, opt := range slices.Concat(options, routableAgents) {
		if containsPhrase(lower, opt) {
			return opt
		}
	}
	words := wordPattern.FindAllString(lower, -1)
	if len(words) == 0 || len(words) > maxChoiceWords {
		return ""
	}
	for _, w := range words {
		if n, ok := ordinals[strings.TrimSuffix(w, ".")]; ok && n <= len(options) {
			return options[n-1]
		}
		if n, err := strconv.Atoi(w); err == nil && n >= 1 && n <= len(options) {
			return options[n-1]
		}
	}
	chosen := ""
	for _, agent := range routableAgents {
		for _, w := range words {
			if slices.Contains(choiceWords[agent], w) {
				if chosen != "" && chosen != agent {
					return ""
				}
				chosen = agent
			}
		}
	}
	return chosen
}
