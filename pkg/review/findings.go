package review

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/secrets"
)

// ToolName is the tool the model reports its findings with. Its argument
// is {"summary": "...", "findings": [{"severity", "file", "line",
// "message", "suggestion", "category"}]}; a model that answers with that
// JSON as text instead is read too.
const ToolName = "report_findings"

// maxFindings bounds the findings a review keeps.
const maxFindings = 100

var findingsTool = llm.Tool{
	Name:        ToolName,
	Description: "Report the review's findings, once, with every finding (an empty list when there are none).",
	Schema: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"summary": map[string]any{"type": "string", "description": "The review in one or two sentences."},
			"findings": map[string]any{"type": "array", "items": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"severity":   map[string]any{"type": "string", "enum": []string{"critical", "high", "medium", "low", "info"}},
					"file":       map[string]any{"type": "string", "description": "The path as the diff names it."},
					"line":       map[string]any{"type": "integer", "description": "The line in the new file; 0 when not about one line."},
					"message":    map[string]any{"type": "string", "description": "What is wrong, and why it matters."},
					"suggestion": map[string]any{"type": "string", "description": "How to fix it."},
					"category":   map[string]any{"type": "string", "description": "security, correctness, performance, maintainability, style, testing or documentation."},
				},
				"required": []string{"severity", "file", "message"},
			}},
		},
		"required": []string{"findings"},
	},
}

// answer is the model's report.
type answer struct {
	Summary  string       `json:"summary"`
	Findings []rawFinding `json:"findings"`
}

type rawFinding struct {
	Severity   string `json:"severity"`
	File       string `json:"file"`
	Line       any    `json:"line"`
	Message    string `json:"message"`
	Suggestion string `json:"suggestion"`
	Category   string `json:"category"`
}

// errNoFindings: the model's answer holds no findings list.
var errNoFindings = errors.New("the model's answer holds no findings list")

// readAnswer reads the model's report: the report_findings call, or its
// JSON in the text (bare, in a code fence, or among words).
func readAnswer(resp *llm.Response) (answer, error) {
	for _, c := range resp.ToolCalls {
		if c.Name != ToolName {
			continue
		}
		var a answer
		if err := json.Unmarshal([]byte(c.Arguments), &a); err != nil {
			return answer{}, fmt.Errorf("read the %s call: %w", ToolName, err)
		}
		return a, nil
	}
	text := strings.TrimSpace(resp.Content)
	for _, candidate := range jsonCandidates(text) {
		var a answer
		if json.Unmarshal([]byte(candidate), &a) == nil && a.Findings != nil {
			return a, nil
		}
		var list []rawFinding
		if json.Unmarshal([]byte(candidate), &list) == nil && list != nil {
			return answer{Findings: list}, nil
		}
	}
	return answer{}, errNoFindings
}

// jsonCandidates are the places of text that may hold the answer's JSON:
// the whole text, each fenced block, and the outermost object and array.
func jsonCandidates(text string) []string {
	out := []string{text}
	rest := text
	for {
		i := strings.Index(rest, "```")
		if i < 0 {
			break
		}
		rest = rest[i+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		}
		j := strings.Index(rest, "```")
		if j < 0 {
			break
		}
		out = append(out, strings.TrimSpace(rest[:j]))
		rest = rest[j+3:]
	}
	for _, pair := range [][2]string{{"{", "}"}, {"[", "]"}} {
		if i, j := strings.Index(text, pair[0]), strings.LastIndex(text, pair[1]); i >= 0 && j > i {
			out = append(out, text[i:j+1])
		}
	}
	return out
}

// findings turns the model's findings into the review's: their severity
// read leniently, paths without a/ or b/, secrets redacted, duplicates
// dropped, those at a blocking severity marked.
func findings(raw []rawFinding, blocking map[orchestratorv1.Severity]bool) []*orchestratorv1.Finding {
	var out []*orchestratorv1.Finding
	seen := map[string]bool{}
	for _, r := range raw {
		msg := strings.TrimSpace(r.Message)
		if msg == "" {
			continue
		}
		sev, _ := ParseSeverity(r.Severity)
		f := &orchestratorv1.Finding{Severity: sev, File: diffPath(r.File), Line: lineOf(r.Line), Message: secrets.Scrub(msg),
			Suggestion: secrets.Scrub(strings.TrimSpace(r.Suggestion)), Category: strings.ToLower(strings.TrimSpace(r.Category))}
		if f.Category == "" {
			f.Category = "general"
		}
		key := fmt.Sprintf("%d|%s|%d|%s", f.Severity, f.File, f.Line, f.Message)
		if seen[key] {
			continue
		}
		seen[key] = true
		f.Blocking = blocking[f.Severity]
		out = append(out, f)
		if len(out) == maxFindings {
			break
		}
	}
	return out
}

func lineOf(v any) int32 {
	switch x := v.(type) {
	case float64:
		if x > 0 && x < 1<<31 {
			return int32(x)
		}
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(x, "-", 2)[0]))
		if err == nil && n > 0 {
			return int32(n)
		}
	}
	return 0
}

// severityWords maps what models write to severities.
var severityWords = map[string]orchestratorv1.Severity{
	"critical": orchestratorv1.Severity_SEVERITY_CRITICAL, "blocker": orchestratorv1.Severity_SEVERITY_CRITICAL,
	"high": orchestratorv1.Severity_SEVERITY_HIGH, "major": orchestratorv1.Severity_SEVERITY_HIGH, "error": orchestratorv1.Severity_SEVERITY_HIGH,
	"medium": orchestratorv1.Severity_SEVERITY_MEDIUM, "moderate": orchestratorv1.Severity_SEVERITY_MEDIUM, "warning": orchestratorv1.Severity_SEVERITY_MEDIUM,
	"low": orchestratorv1.Severity_SEVERITY_LOW, "minor": orchestratorv1.Severity_SEVERITY_LOW,
	"info": orchestratorv1.Severity_SEVERITY_INFO, "nit": orchestratorv1.Severity_SEVERITY_INFO, "note": orchestratorv1.Severity_SEVERITY_INFO,
}

// ParseSeverity reads a severity ("high", "SEVERITY_HIGH", "major", ...);
// an unknown word reads as medium, and ok is false.
func ParseSeverity(s string) (sev orchestratorv1.Severity, ok bool) {
	w := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "severity_")
	if sev, ok := severityWords[w]; ok {
		return sev, true
	}
	return orchestratorv1.Severity_SEVERITY_MEDIUM, false
}

// ParseSeverities reads a comma-separated list of severities ("high,
// critical"); an unknown one is an error.
func ParseSeverities(list string) ([]orchestratorv1.Severity, error) {
	var out []orchestratorv1.Severity
	for _, w := range strings.Split(list, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		sev, ok := ParseSeverity(w)
		if !ok {
			return nil, fmt.Errorf("unknown severity %q (want critical, high, medium, low or info)", w)
		}
		out = append(out, sev)
	}
	return out, nil
}

// SeverityName is a severity's word ("high").
func SeverityName(s orchestratorv1.Severity) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "SEVERITY_"))
}

// FeedbackLine is a finding as the Engineer is told it: "file:line
// severity: message (suggestion)".
func FeedbackLine(f *orchestratorv1.Finding) string {
	loc := f.GetFile()
	if f.GetLine() > 0 {
		loc = fmt.Sprintf("%s:%d", loc, f.GetLine())
	}
	line := fmt.Sprintf("%s %s: %s", loc, SeverityName(f.GetSeverity()), f.GetMessage())
	if s := f.GetSuggestion(); s != "" {
		line += " (" + s + ")"
	}
	return line
}
