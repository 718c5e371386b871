package review

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/scriptmodel"
)

const (
	outcomeReviewed = orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED
	outcomeTooLarge = orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_PROMPT_TOO_LARGE_AFTER_TRUNCATION
)

// A review reads the model's report: findings with their severity, the
// blocking ones marked, and the model and tokens.
func TestReviewReportsFindings(t *testing.T) {
	t.Parallel()
	m, srv := scripted(t, reports(
		map[string]any{"severity": "high", "file": "b/calc/calc.go", "line": 8, "message": "Div panics when b is 0",
			"suggestion": "return an error for b == 0", "category": "correctness"},
		map[string]any{"severity": "nit", "file": "calc/calc_test.go", "line": "13", "message": "name the case"},
		map[string]any{"severity": "high", "file": "b/calc/calc.go", "line": 8, "message": "Div panics when b is 0",
			"suggestion": "return an error for b == 0", "category": "correctness"},
	))
	r, err := Review(t.Context(), Request{Diff: smallDiff(t), Title: "fix (loop 1)", Model: "scripted", MaxInputTokens: 100_000}, m)
	require.NoError(t, err)
	require.Empty(t, srv.Failures())
	require.Equal(t, outcomeReviewed, r.GetOutcome())
	require.Equal(t, "default", r.GetPersona())
	require.Equal(t, "openai/scripted", r.GetModel())
	require.Positive(t, r.GetInputTokens())
	require.Len(t, r.GetFindings(), 2, "the repeated finding is dropped")
	f := r.GetFindings()[0]
	require.Equal(t, orchestratorv1.Severity_SEVERITY_HIGH, f.GetSeverity())
	require.Equal(t, "calc/calc.go", f.GetFile())
	require.True(t, f.GetBlocking())
	require.True(t, r.GetBlocking())
	require.Equal(t, "calc/calc.go:8 high: Div panics when b is 0 (return an error for b == 0)", FeedbackLine(f))
	require.Equal(t, orchestratorv1.Severity_SEVERITY_INFO, r.GetFindings()[1].GetSeverity())
	require.Equal(t, int32(13), r.GetFindings()[1].GetLine())
	require.False(t, r.GetFindings()[1].GetBlocking())
	require.Contains(t, r.GetSummary(), "2 findings, 1 blocking")
	require.Equal(t, []string{"internal/auth/token.go", "calc/calc.go", "calc/calc_test.go"}, r.GetReviewedFiles())

	req := srv.Requests()[0]
	require.True(t, strings.HasPrefix(req.Messages[0].Content, "Review this change: fix (loop 1)\n"))
	require.Equal(t, []string{ToolName}, req.Tools)
	require.Contains(t, req.System, "# Reviewer: default")
}

// Blocking severities are configurable.
func TestBlockingSeverities(t *testing.T) {
	t.Parallel()
	m, _ := scripted(t, reports(map[string]any{"severity": "medium", "file": "calc/calc.go", "message": "m"},
		map[string]any{"severity": "critical", "file": "calc/calc.go", "message": "c"}))
	sevs, err := ParseSeverities("medium")
	require.NoError(t, err)
	r, err := Review(t.Context(), Request{Diff: smallDiff(t), Blocking: sevs}, m)
	require.NoError(t, err)
	require.True(t, r.GetFindings()[0].GetBlocking())
	require.False(t, r.GetFindings()[1].GetBlocking())
	_, err = ParseSeverities("high, urgent")
	require.ErrorContains(t, err, `unknown severity "urgent"`)
}

// The model may answer with the JSON as text instead of the tool call.
func TestAnswersAsText(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"fenced": "Here is my review.\n```json\n{\"summary\": \"ok\", \"findings\": [{\"severity\": \"low\", \"file\": \"calc/calc.go\", \"message\": \"x\"}]}\n```\n",
		"bare":   `[{"severity": "LOW", "file": "calc/calc.go", "line": 3, "message": "x"}]`,
		"inline": `My findings: {"findings": [{"severity": "SEVERITY_LOW", "file": "calc/calc.go", "message": "x"}]} That is all.`,
	} {
		m, _ := scripted(t, scriptmodel.Script{Match: Marker, Turns: []scriptmodel.Turn{scriptmodel.Say(text)}})
		r, err := Review(t.Context(), Request{Diff: smallDiff(t)}, m)
		require.NoError(t, err, name)
		require.Len(t, r.GetFindings(), 1, name)
		require.Equal(t, orchestratorv1.Severity_SEVERITY_LOW, r.GetFindings()[0].GetSeverity(), name)
	}
	m, _ := scripted(t, scriptmodel.Script{Match: Marker, Turns: []scriptmodel.Turn{scriptmodel.Say("Looks fine to me.")}})
	r, err := Review(t.Context(), Request{Diff: smallDiff(t)}, m)
	require.ErrorIs(t, err, errNoFindings)
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED, r.GetOutcome())
	require.Contains(t, r.GetSummary(), "the review failed")
}

// A change of excluded files only is not sent to a model (seed 002
// section 4, behaviour 4).
func TestAllFilesExcludedAsksNoModel(t *testing.T) {
	t.Parallel()
	m, srv := scripted(t, reports())
	r, err := Review(t.Context(), Request{Diff: fixture(t, "excluded.diff")}, m)
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_ALL_FILES_EXCLUDED, r.GetOutcome())
	require.Empty(t, srv.Requests(), "no model call")
	require.Equal(t, []string{"gen/go/api.pb.go: generated", "node_modules/left-pad/index.js: vendored", "assets/font.woff2: binary"}, r.GetExcludedFiles())
	require.Equal(t, "all 3 changed files are excluded (1 generated, 1 vendored, 1 binary): no model was asked", r.GetSummary())
}

func TestNoModelAndNoChanges(t *testing.T) {
	t.Parallel()
	r, err := Review(t.Context(), Request{Diff: smallDiff(t)}, nil)
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_NO_MODEL, r.GetOutcome())
	require.True(t, strings.HasPrefix(r.GetSummary(), "no model reviewed it"), r.GetSummary())
	require.Contains(t, r.GetSummary(), "security-sensitive: internal/auth/token.go (authentication)")
	require.Len(t, r.GetReviewedFiles(), 3)

	r, err = Review(t.Context(), Request{Diff: ""}, nil)
	require.NoError(t, err)
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_NO_CHANGES, r.GetOutcome())
}

// Persona packs (spec P-12): the node's choice wins over the run's, the
// run's over the session's, and any over the default; an unknown one names
// the packs.
func TestPersonas(t *testing.T) {
	t.Parallel()
	require.Equal(t, "quick", ResolvePersona("quick", "security", "dx"))
	require.Equal(t, "security", ResolvePersona("", "security", "dx"))
	require.Equal(t, "dx", ResolvePersona("", "", "dx"))
	require.Equal(t, "default", ResolvePersona("", "", ""))
	require.Equal(t, "default", ResolvePersona())
	for _, name := range Personas {
		text, err := PersonaText(name)
		require.NoError(t, err)
		require.Contains(t, text, "# Reviewer: ")
	}
	def, _ := PersonaText("default")
	require.Less(t, len(def), 4000)
	quick, _ := PersonaText("quick")
	require.Less(t, len(quick), 1500)
	require.Contains(t, quick, "at most three findings")
	sec, _ := PersonaText("security")
	require.Contains(t, sec, "**critical**: exploitable")

	m, srv := scripted(t, reports())
	r, err := Review(t.Context(), Request{Diff: smallDiff(t), Persona: ResolvePersona("", "security", "dx")}, m)
	require.NoError(t, err)
	require.Equal(t, "security", r.GetPersona())
	require.Contains(t, srv.Requests()[0].System, "# Reviewer: security")

	r, err = Review(t.Context(), Request{Diff: smallDiff(t), Persona: "pedantic"}, m)
	require.ErrorIs(t, err, ErrUnknownPersona)
	require.ErrorContains(t, err, "available default, security, dx, architecture, quick")
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED, r.GetOutcome())
	require.Len(t, srv.Requests(), 1)
}

// A failed model call fails the review with its error.
func TestModelFailure(t *testing.T) {
	t.Parallel()
	m := modelFunc(func(context.Context, *llm.Request) (*llm.Response, error) {
		return nil, &llm.Error{Provider: "openai", StatusCode: 503, Message: "overloaded"}
	})
	r, err := Review(t.Context(), Request{Diff: smallDiff(t)}, m)
	require.Error(t, err)
	var pe *llm.Error
	require.True(t, errors.As(err, &pe))
	require.Equal(t, orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED, r.GetOutcome())
	require.False(t, r.GetRetriedShorter())
}

type modelFunc func(context.Context, *llm.Request) (*llm.Response, error)

func (f modelFunc) Complete(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	return f(ctx, req)
}

func smallDiff(t *testing.T) string { return fixture(t, "small.diff") }
