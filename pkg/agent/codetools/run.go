package codetools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/llm"
)

// maxStreamBytes caps each stream of a command in what the model sees.
const maxStreamBytes = 12 << 10

func (w *Workspace) runCommandTool() agent.Tool {
	return agent.Tool{Writes: true, Def: llm.Tool{Name: "run_command",
		Description: fmt.Sprintf("Run a shell command in the repository root, in a sandbox without network (build, run a script, a formatter, git status/diff ...). Returns the exit code and output. Timeout in seconds, default %d, at most %d.",
			int(w.cfg.DefaultTimeout.Seconds()), int(w.cfg.MaxTimeout.Seconds())),
		Schema: schema([]string{"command"}, map[string]any{
			"command": str("The command, run by sh -c."),
			"timeout": integer("Seconds before it is stopped."),
		})},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Command string `json:"command"`
				Timeout int    `json:"timeout"`
			}
			if err := decode(raw, &a); err != nil {
				return "", err
			}
			if strings.TrimSpace(a.Command) == "" {
				return "", errors.New("command is empty")
			}
			timeout := w.cfg.DefaultTimeout
			if a.Timeout > 0 {
				timeout = min(time.Duration(a.Timeout)*time.Second, w.cfg.MaxTimeout)
			}
			res, err := w.cfg.Runner.Run(ctx, a.Command, timeout)
			if err != nil {
				return "", err
			}
			// A command that ran and failed is an answer, not a failed
			// call: a failing build or test is what the model came to see.
			// One stopped at its timeout is a failed call.
			if res.TimedOut {
				return "", errors.New(FormatCommand(res))
			}
			return FormatCommand(res), nil
		}}
}

// FormatCommand renders a command's result for the model.
func FormatCommand(r CommandResult) string {
	var b strings.Builder
	switch {
	case r.TimedOut:
		fmt.Fprintf(&b, "timed out after %s (stopped)\n", r.Duration.Round(time.Millisecond))
	default:
		fmt.Fprintf(&b, "exit code %d (%s)\n", r.ExitCode, r.Duration.Round(time.Millisecond))
	}
	for _, s := range []struct{ name, text string }{{"stdout", r.Stdout}, {"stderr", r.Stderr}} {
		if strings.TrimSpace(s.text) == "" {
			continue
		}
		fmt.Fprintf(&b, "--- %s\n%s", s.name, tail(s.text, maxStreamBytes))
		if !strings.HasSuffix(s.text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// tail keeps the end of s (where errors and summaries are), marking the
// cut.
func tail(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	start := len(s) - limit
	for start < len(s) && s[start]&0xC0 == 0x80 {
		start++
	}
	if nl := strings.IndexByte(s[start:], '\n'); nl >= 0 && nl < 200 {
		start += nl + 1
	}
	return fmt.Sprintf("[... first %d bytes cut ...]\n%s", start, s[start:])
}

func (w *Workspace) runTestsTool() agent.Tool {
	return agent.Tool{Def: llm.Tool{Name: "run_tests",
		Description: "Run the repository's tests with its detected test framework and get the counts and failures. filter narrows them (a test name or package, as the framework takes it).",
		Schema:      schema(nil, map[string]any{"filter": str("Which tests to run (default: all).")})},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Filter string `json:"filter"`
			}
			if err := decode(raw, &a); err != nil {
				return "", err
			}
			return w.cfg.Tests.RunTests(ctx, a.Filter)
		}}
}
