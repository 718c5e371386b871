package review

import (
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/scriptmodel"
)

// levelDiff has a security-sensitive file, code of two sizes and a test of
// the larger: level 1 has files to drop.
func levelDiff() string {
	return modified("internal/auth/session.go", 2, 6, 3) + modified("app.go", 2, 8, 3) + modified("util.go", 1, 2, 3) +
		modified("app_test.go", 1, 4, 3)
}

// Each level can be the one that fits (seed 002 section 4, behaviour 5),
// and its disclaimer is in the prompt (behaviour 6).
func TestTruncationLevels(t *testing.T) {
	t.Parallel()
	one := modified("internal/auth/session.go", 3, 6, 3)
	tests := []struct {
		name, diff string
		// budget is the token budget, from the layouts of the diff.
		budget     func(f *fitter) int
		level      int32
		contains   []string
		excludes   []string
		excludedAs []string
	}{
		{name: "level 1 drops the smallest file", diff: levelDiff(), level: 1,
			budget:     func(f *fitter) int { return f.tokens(f.droppedLayout(1).size()) },
			contains:   []string{"[Partial Review: 1 low-priority files excluded]", "### internal/auth/session.go", "### app.go", "### app_test.go", "- util.go (+2 -2): left out at truncation level 1"},
			excludes:   []string{"### util.go"},
			excludedAs: []string{"util.go: left out at truncation level 1"}},
		{name: "level 1 keeps the test of the change before larger code", diff: levelDiff(), level: 1,
			budget:   func(f *fitter) int { return f.tokens(f.droppedLayout(2).size()) },
			contains: []string{"[Partial Review: 2 low-priority files excluded]", "### internal/auth/session.go", "### app_test.go"},
			excludes: []string{"### app.go", "### util.go"}},
		{name: "level 2 cuts the context", diff: one, level: 2,
			budget:   func(f *fitter) int { return f.tokens(f.level2Layout(1, -1).size()) },
			contains: []string{"[Partial Review: patches truncated to changed hunks]", "[3 of 3 hunks included]", "@@ -3,8 +3,8 @@"}},
		{name: "level 2 drops the last hunks", diff: one, level: 2,
			budget:   func(f *fitter) int { return f.tokens(f.level2Layout(0, 2).size()) },
			contains: []string{"[2 of 3 hunks included]", "@@ -104,6 +104,6 @@"},
			excludes: []string{"@@ -204,6 +204,6 @@"}},
		{name: "level 3 lists the files", diff: one, level: 3,
			budget:   func(f *fitter) int { return f.tokens((&layout{p: f.p, level: 3, statsOnly: true}).size()) },
			contains: []string{"[Summary Review: diff content unavailable, reviewing file structure only]", "## Changed files (stats only)", "- internal/auth/session.go: +18 -18 [security-sensitive: authentication"},
			excludes: []string{"@@"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := weigh(t, tt.diff)
			budget := tt.budget(f)
			require.Greater(t, f.tokens(f.full(-1).size()), budget, "the whole change must not fit")
			m, srv := scripted(t, reports())
			r, err := Review(t.Context(), Request{Diff: tt.diff, MaxInputTokens: inputFor(budget)}, m)
			require.NoError(t, err)
			require.Equal(t, outcomeReviewed, r.GetOutcome(), r.GetSummary())
			require.Equal(t, tt.level, r.GetTruncationLevel())
			prompt := userPrompt(t, srv, 0)
			for _, want := range tt.contains {
				require.Contains(t, prompt, want)
			}
			for _, not := range tt.excludes {
				require.NotContains(t, prompt, not)
			}
			for _, ex := range tt.excludedAs {
				require.Contains(t, r.GetExcludedFiles(), ex)
			}
			require.Contains(t, r.GetSummary(), map[int32]string{1: "Partial Review: ", 2: "Partial Review: patches truncated", 3: "Summary Review"}[tt.level])
		})
	}
}

// When even the file list does not fit, no model is asked.
func TestPromptTooLargeAfterTruncation(t *testing.T) {
	t.Parallel()
	diff := modified("internal/auth/session.go", 3, 6, 3)
	f := weigh(t, diff)
	budget := f.tokens((&layout{p: f.p, level: 3, statsOnly: true}).size()) - 1
	m, srv := scripted(t, reports())
	r, err := Review(t.Context(), Request{Diff: diff, MaxInputTokens: inputFor(budget) - 2}, m)
	require.NoError(t, err)
	require.Equal(t, outcomeTooLarge, r.GetOutcome())
	require.Equal(t, int32(3), r.GetTruncationLevel())
	require.Empty(t, srv.Requests())
	require.Contains(t, r.GetSummary(), "not reviewed: even the file list")
}

// A prompt the provider rejects as too long is tried once more, a level
// further and within 85% of the budget (spec P-07).
func TestRetryShorterOnce(t *testing.T) {
	t.Parallel()
	diff := levelDiff()
	f := weigh(t, diff)
	whole := f.full(-1)
	input := inputFor(f.tokens(whole.size()))
	// The script's model takes less than the whole prompt: it rejects it.
	limit := (whole.size()+len(userOverhead(t)))/4 - 10
	m, srv := scripted(t, scriptmodel.Script{Match: Marker, MaxPromptTokens: limit, Turns: reports().Turns})
	r, err := Review(t.Context(), Request{Diff: diff, MaxInputTokens: input}, m)
	require.NoError(t, err)
	require.Equal(t, outcomeReviewed, r.GetOutcome(), r.GetSummary())
	require.True(t, r.GetRetriedShorter())
	require.Equal(t, int32(1), r.GetTruncationLevel())
	require.Len(t, srv.Requests(), 2)
	require.NotContains(t, userPrompt(t, srv, 0), "[Partial Review")
	second := userPrompt(t, srv, 1)
	require.Contains(t, second, "low-priority files excluded]")
	f.budget = int(float64(input) * retryShare)
	require.LessOrEqual(t, f.tokens(len(second)), f.budget, "the retry fits 85% of the budget")
	require.Contains(t, r.GetSummary(), "retried shorter")

	// At most once: a model that takes nothing ends the review.
	m, srv = scripted(t, scriptmodel.Script{Match: Marker, MaxPromptTokens: 1, Turns: reports().Turns})
	r, err = Review(t.Context(), Request{Diff: diff, MaxInputTokens: input}, m)
	require.NoError(t, err)
	require.Equal(t, outcomeTooLarge, r.GetOutcome())
	require.True(t, r.GetRetriedShorter())
	require.Len(t, srv.Requests(), 2)
}

// userOverhead is what the script server counts besides the user message:
// the system prompt.
func userOverhead(t *testing.T) string {
	t.Helper()
	s, err := systemPrompt(DefaultPersona)
	require.NoError(t, err)
	return s
}

// A layout's weighed size is its rendered size, at every level.
func TestLayoutSizeIsItsLength(t *testing.T) {
	t.Parallel()
	f := weigh(t, levelDiff()+fixture(t, "mixed.diff"))
	layouts := []*layout{f.full(-1), f.droppedLayout(3), f.full(3), f.full(0), {p: f.p, level: 3, statsOnly: true}}
	l := f.full(0)
	l.blocks[1].setKeep(0)
	layouts = append(layouts, l)
	for i, l := range layouts {
		require.Equal(t, len(l.render()), l.size(), "layout %d", i)
	}
}
