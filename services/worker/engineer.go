package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/gate"
)

// Model is what the Engineer calls to write code: the LLM gate
// (pkg/llm/gate), so that priority classes, budgets and rate limits apply.
type Model interface {
	Complete(ctx context.Context, req *llm.Request) (*llm.Response, error)
}

// SetModel gives the Engineer a language model. Without one (or with the
// offline local provider only) engineer nodes apply their explicit edits and
// commands and say that nothing was generated.
func (s *Service) SetModel(m Model) { s.model = m }

// SetLLMGate is how the mesh gives the worker its gate (configured
// providers, or the offline local one, which writes no code).
func (s *Service) SetLLMGate(g *gate.Gate) {
	s.SetModel(g)
	s.modelLocal = g != nil && g.Providers().Default().Name() == llm.Local
}

// engineerReads says whether a language model acts on a task's prompt (and
// on the user's guidance for it).
func (s *Service) engineerReads(spec *orchestratorv1.Node) bool {
	return s.model != nil && !s.modelLocal && spec.GetPrompt() != ""
}

// Limits of what the Engineer shows the model.
const (
	maxPromptFiles     = 200
	maxPromptFileBytes = 16 << 10
	maxPromptBytes     = 96 << 10
	maxModelEdits      = 50
)

// engineerSystem tells the model the answer format.
const engineerSystem = `You are the Engineer of a software team. You change the code of a repository to carry out one task.
Answer with one JSON object and nothing else:
{"edits": [{"path": "relative/path", "content": "the complete new content of the file"}], "summary": "what you changed and why", "decisions": "choices you made", "deviations": "where you departed from the task, or none", "concerns": "risks, or none"}
Each edit replaces a whole file (new files are created). Paths are relative to the repository root. Keep changes to what the task needs.`

// modelEdit is one file the model writes.
type modelEdit struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// modelAnswer is the Engineer's answer format.
type modelAnswer struct {
	Edits      []modelEdit `json:"edits"`
	Summary    string      `json:"summary"`
	Decisions  string      `json:"decisions"`
	Deviations string      `json:"deviations"`
	Concerns   string      `json:"concerns"`
}

// parseModelAnswer finds the JSON object in a model's answer (bare or in a
// fenced block).
func parseModelAnswer(text string) (*modelAnswer, error) {
	t := strings.TrimSpace(text)
	if i := strings.Index(t, "```"); i >= 0 {
		rest := t[i+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		}
		if j := strings.Index(rest, "```"); j >= 0 {
			t = strings.TrimSpace(rest[:j])
		}
	}
	start, end := strings.IndexByte(t, '{'), strings.LastIndexByte(t, '}')
	if start < 0 || end <= start {
		return nil, errNoEdits
	}
	var a modelAnswer
	if err := json.Unmarshal([]byte(t[start:end+1]), &a); err != nil {
		return nil, fmt.Errorf("the model's answer is not the expected JSON: %w", err)
	}
	if len(a.Edits) == 0 {
		return nil, errNoEdits
	}
	if len(a.Edits) > maxModelEdits {
		return nil, fmt.Errorf("the model's answer holds %d edits, more than %d", len(a.Edits), maxModelEdits)
	}
	// A model that writes its report as headed text around the JSON (spec
	// H-06): fields the JSON left empty are taken from the text.
	outside := text
	if i := strings.Index(text, t[start:end+1]); i >= 0 {
		outside = text[:i] + "\n" + text[i+end+1-start:]
	}
	for _, f := range []struct {
		field   *string
		headers []string
	}{
		{&a.Summary, []string{"summary", "implemented"}},
		{&a.Decisions, []string{"decisions"}},
		{&a.Deviations, []string{"deviations"}},
		{&a.Concerns, []string{"concerns"}},
	} {
		if strings.TrimSpace(*f.field) == "" {
			*f.field = reportField(outside, f.headers...)
		}
	}
	return &a, nil
}

// anyHeader starts a new headed part of a report.
var anyHeader = regexp.MustCompile(`^(#{1,6}\s|\*\*[^*]+\*\*\s*:|[A-Za-z][A-Za-z ]{0,30}:(\s|$))`)

// reportField extracts a headed field from a model's report text (spec
// H-06: header names matched without regard to case): "Decisions: ...",
// "## Decisions" or "**Decisions**: ...", with the lines after it up to the
// next header or blank line; "" when absent.
func reportField(text string, names ...string) string {
	header := regexp.MustCompile(`(?i)^\s*(#{1,6}\s*)?(?:\*\*)?(?:` + strings.Join(names, "|") + `)(?:\*\*)?\s*(:)?(?:\*\*)?\s*(.*)$`)
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		m := header.FindStringSubmatch(line)
		if m == nil || (m[1] == "" && m[2] == "") {
			continue // the word in a sentence, not a header
		}
		var parts []string
		if rest := strings.TrimSpace(m[3]); rest != "" {
			parts = append(parts, rest)
		}
		for _, next := range lines[i+1:] {
			n := strings.TrimSpace(next)
			if n == "" {
				if len(parts) > 0 {
					break
				}
				continue
			}
			if anyHeader.MatchString(n) {
				break
			}
			parts = append(parts, strings.TrimLeft(n, "-* "))
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// engineerPrompt assembles what the model sees: the task, its done
// criteria, its selective context, the upstream outputs, the repository's
// files (small ones in full) and the feedback of earlier loops.
func engineerPrompt(d *taskv1.TaskDispatch, spec *orchestratorv1.Node, dir string, feedback []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Task %s", d.GetNodeId())
	if spec.GetName() != "" {
		b.WriteString(": " + spec.GetName())
	}
	b.WriteString("\n\n" + spec.GetPrompt() + "\n")
	if spec.GetDoneWhen() != "" {
		b.WriteString("\n## Done when\n\n" + spec.GetDoneWhen() + "\n")
	}
	if spec.GetTaskContext() != "" {
		b.WriteString("\n## Context\n\n" + spec.GetTaskContext() + "\n")
	}
	if up := d.GetUpstreamOutputs(); len(up) > 0 {
		keys := make([]string, 0, len(up))
		for k := range up {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("\n## Output of the tasks this one depends on\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "\n### %s\n\n%s\n", k, up[k])
		}
	}
	b.WriteString(briefingSection(spec.GetRetryBriefing()))
	b.WriteString(handoffSection(spec.GetHandoff()))
	if g := spec.GetGuidance(); len(g) > 0 {
		b.WriteString("\n## The user's guidance (follow it)\n\n")
		for _, x := range g {
			b.WriteString("- " + x + "\n")
		}
	}
	if len(feedback) > 0 {
		b.WriteString("\n## Feedback on your previous attempt (fix all of it)\n\n")
		for _, f := range feedback {
			b.WriteString("- " + f + "\n")
		}
	}
	b.WriteString("\n## Repository files\n")
	// Listed and read through a root: neither the checkout swapped for a
	// symlink nor a file swapped for one meanwhile can lead out of the
	// workspace.
	root, err := openDirRoot(dir)
	if err != nil {
		return b.String()
	}
	var files []string
	_ = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // a symlink may lead out of the workspace
		}
		if len(files) >= maxPromptFiles {
			return fs.SkipAll
		}
		files = append(files, filepath.FromSlash(p))
		return nil
	})
	defer root.Close()
	for _, f := range files {
		data, err := root.ReadFile(f)
		if err != nil || len(data) > maxPromptFileBytes || b.Len()+len(data) > maxPromptBytes || !isText(data) {
			fmt.Fprintf(&b, "\n- %s\n", f)
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n\n```\n%s\n```\n", f, strings.TrimRight(string(data), "\n"))
	}
	return b.String()
}

func isText(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return false
		}
	}
	return true
}

// generate asks the model for edits and writes them. It returns the files
// written and the model's notes. It returns (nil, nil, nil) when no model is
// configured.
func (s *Service) generate(ctx context.Context, d *taskv1.TaskDispatch, spec *orchestratorv1.Node, dir string, feedback []string) ([]string, *modelAnswer, error) {
	if s.model == nil || spec.GetPrompt() == "" {
		return nil, nil, nil
	}
	written, a, _, err := s.ask(ctx, d, dir, []llm.Message{{Role: llm.RoleUser, Content: engineerPrompt(d, spec, dir, feedback)}})
	return written, a, err
}

// ask sends the Engineer's conversation to the model and writes the edits
// of its answer. content is the model's answer ("" when none came, or when
// the offline provider answered, which writes no code).
func (s *Service) ask(ctx context.Context, d *taskv1.TaskDispatch, dir string, msgs []llm.Message) (written []string, a *modelAnswer, content string, err error) {
	resp, err := s.model.Complete(ctx, &llm.Request{
		Model:    s.cfg.EngineerModel,
		System:   engineerSystem,
		Messages: msgs,
		Attribution: llm.Attribution{TenantID: d.GetTenantId(), UserID: d.GetUserId(), SessionID: d.GetSessionId(),
			PipelineID: d.GetRunId() + "/" + d.GetNodeId(), TaskID: d.GetNodeId(), AgentID: s.cfg.ID, AgentType: dagRoleEngineer},
	})
	if err != nil {
		return nil, nil, "", fmt.Errorf("the model call failed: %w", err)
	}
	if resp.Provider == llm.Local {
		// The offline rule engine writes no code; say so instead.
		return nil, nil, "", nil
	}
	a, err = parseModelAnswer(resp.Content)
	if err != nil {
		return nil, nil, resp.Content, err
	}
	edits := make(map[string]string, len(a.Edits))
	for _, e := range a.Edits {
		edits[e.Path] = e.Content
	}
	written, err = applyEdits(dir, edits)
	if err != nil {
		return nil, nil, resp.Content, err
	}
	return written, a, resp.Content, nil
}
