package agent

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"sylk.dev/sylk/pkg/llm"
)

// masked is the conversation as the model sees it: tool results older than
// the newest KeepResults become a one-line stub that names the call (the
// model can make it again). Masking old observations keeps the context
// bounded at no model cost, and does as well as summarising them.
func (l *Loop) masked() []llm.Message {
	keep := l.cfg.KeepResults
	results := 0
	for _, m := range l.msgs {
		if m.Role == llm.RoleTool {
			results++
		}
	}
	if results <= keep {
		return l.msgs
	}
	calls := map[string]llm.ToolCall{}
	for _, m := range l.msgs {
		for _, c := range m.ToolCalls {
			calls[c.ID] = c
		}
	}
	out := make([]llm.Message, len(l.msgs))
	copy(out, l.msgs)
	mask := results - keep
	for i := range out {
		if mask == 0 {
			break
		}
		if out[i].Role != llm.RoleTool {
			continue
		}
		mask--
		c := calls[out[i].ToolCallID]
		lines := strings.Count(out[i].Content, "\n") + 1
		status := "output"
		if out[i].IsError {
			status = "error"
		}
		out[i].Content = fmt.Sprintf("[%s of %s(%s) elided: %d lines; call it again if you need it]",
			status, c.Name, shortArgs(c.Arguments), lines)
	}
	return out
}

// shortArgs is a call's arguments in at most 120 characters, on one line.
func shortArgs(args string) string {
	s := strings.Join(strings.Fields(args), " ")
	if utf8.RuneCountInString(s) <= 120 {
		return s
	}
	r := []rune(s)
	return string(r[:117]) + "..."
}

// firstLine is s's first non-empty line, at most 200 characters.
func firstLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if utf8.RuneCountInString(line) > 200 {
				line = string([]rune(line)[:197]) + "..."
			}
			return line
		}
	}
	return ""
}

// capText keeps s within limit bytes: its head and tail, with a line that
// says how much of the middle was cut.
func capText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	head := limit * 2 / 3
	tail := limit - head
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	start := len(s) - tail
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return fmt.Sprintf("%s\n[... %d bytes cut: narrow the call (a line range, a path, a pattern) to see them ...]\n%s",
		s[:head], start-head, s[start:])
}
