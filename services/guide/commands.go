package guide

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Slash commands (routing tier 0): the Guide answers them itself, with no
// classification.

// isSlashCommand reports whether text is a slash command.
func isSlashCommand(text string) bool { return strings.HasPrefix(text, "/") }

// commandName is the command a slash-command text invokes, for the route's
// reason: "/help", "/session list".
func commandName(text string) string {
	f := strings.Fields(text)
	if len(f) >= 2 && f[0] == "/session" {
		return f[0] + " " + f[1]
	}
	return f[0]
}

// commandEnv is what a command may read.
type commandEnv struct {
	q       querier
	owner   owner
	session session
}

const sessionListLimit = 20

const helpText = `Commands:
  /help          list these commands
  /status        show this session's state and message counts
  /session list  list your sessions, newest first
Anything else is routed to the agent that owns it: the librarian (this codebase), the archivalist (project history), the academic (external knowledge) or the architect (changes to make).`

// runCommand answers a slash command. Unknown commands get a pointer to /help.
func runCommand(ctx context.Context, env commandEnv, text string) (string, error) {
	f := strings.Fields(text)
	switch f[0] {
	case "/help":
		return helpText, nil
	case "/status":
		return statusReply(ctx, env)
	case "/session":
		switch {
		case len(f) == 1:
			return "usage: /session list", nil
		case f[1] == "list" && len(f) == 2:
			return sessionListReply(ctx, env)
		default:
			return fmt.Sprintf("unknown command %s; try /help", truncate(strings.Join(f[:2], " "), 64)), nil
		}
	}
	return fmt.Sprintf("unknown command %s; try /help", truncate(f[0], 64)), nil
}

func statusReply(ctx context.Context, env commandEnv) (string, error) {
	counts, err := countMessages(ctx, env.q, env.owner, env.session.ID)
	if err != nil {
		return "", err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Session %s", sessionName(env.session.ID))
	if env.session.DisplayName != "" {
		fmt.Fprintf(&b, " (%q)", env.session.DisplayName)
	}
	fmt.Fprintf(&b, " is %s.\n", env.session.State)
	fmt.Fprintf(&b, "Created %s.\n", env.session.CreateTime.Format(time.RFC3339))
	fmt.Fprintf(&b, "Messages: %d (%d from you, %d from the guide, %d from agents).",
		total, counts[authorUser], counts[authorGuide], total-counts[authorUser]-counts[authorGuide])
	return b.String(), nil
}

func sessionListReply(ctx context.Context, env commandEnv) (string, error) {
	list, err := listSessions(ctx, env.q, env.owner, "", nil, sessionListLimit+1)
	if err != nil {
		return "", err
	}
	more := len(list) > sessionListLimit
	if more {
		list = list[:sessionListLimit]
	}
	var b strings.Builder
	b.WriteString("Your sessions, newest first:")
	for _, s := range list {
		mark := " "
		if s.ID == env.session.ID {
			mark = "*"
		}
		fmt.Fprintf(&b, "\n%s %s  %-9s  %s", mark, sessionName(s.ID), s.State, s.CreateTime.Format(time.RFC3339))
		if s.DisplayName != "" {
			fmt.Fprintf(&b, "  %q", s.DisplayName)
		}
	}
	if more {
		fmt.Fprintf(&b, "\n(only the %d newest are shown; ListSessions pages through all)", sessionListLimit)
	}
	b.WriteString("\n* this session")
	return b.String(), nil
}
