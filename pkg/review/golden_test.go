package review

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// update rewrites the golden files: go test ./pkg/review -run Golden -args -update
var update = flag.Bool("update", false, "rewrite the golden prompt snapshots in testdata/golden")

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

// The golden fixtures (spec P-14): the whole pipeline, exclusion to the
// model's answer, with the scripted model; what the model was sent and
// what came of it are compared with testdata/golden/<name>.txt.
func TestGolden(t *testing.T) {
	t.Parallel()
	finding := map[string]any{"severity": "high", "file": "server/handler.go", "line": 12,
		"message": "the query is built from the request's id: SQL injection", "suggestion": "keep the $1 placeholder", "category": "security"}
	tests := []struct {
		name, diff, persona, title string
		// budget, when set, is the token budget, from the layouts.
		budget func(f *fitter) int
		script scriptmodel.Script
	}{
		{name: "small", diff: fixture(t, "small.diff"), title: "fix (loop 1)", script: reports()},
		{name: "mixed-security-persona", diff: fixture(t, "mixed.diff"), persona: "security", title: "reviews/r1: main...feature",
			script: reports(finding)},
		{name: "all-excluded", diff: fixture(t, "excluded.diff"), script: reports()},
		{name: "level1", diff: levelDiff(), script: reports(),
			budget: func(f *fitter) int { return f.tokens(f.droppedLayout(2).size()) }},
		{name: "level2", diff: modified("internal/auth/session.go", 3, 2, 3), script: reports(),
			budget: func(f *fitter) int { return f.tokens(f.level2Layout(0, 2).size()) }},
		{name: "level3", diff: modified("internal/auth/session.go", 3, 2, 3) + modified("app.go", 1, 1, 1), script: reports(),
			budget: func(f *fitter) int { return f.tokens((&layout{p: f.p, level: 3, statsOnly: true}).size()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, srv := scripted(t, tt.script)
			req := Request{Diff: tt.diff, Persona: tt.persona, Title: tt.title, Model: "scripted", MaxInputTokens: 100_000}
			if tt.budget != nil {
				req.MaxInputTokens = inputFor(tt.budget(weigh(t, tt.diff)))
			}
			r, err := Review(t.Context(), req, m)
			require.NoError(t, err)
			require.Empty(t, srv.Failures())
			var got strings.Builder
			for _, sent := range srv.Requests() {
				fmt.Fprintf(&got, "==== system ====\n%s\n==== user ====\n%s\n", sent.System, sent.Messages[0].Content)
			}
			got.WriteString("==== review ====\n" + reviewText(r))
			path := filepath.Join("testdata", "golden", tt.name+".txt")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got.String()), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./pkg/review -run Golden -args -update to write it")
			require.Equal(t, string(want), got.String())
		})
	}
}

// reviewText renders a review stably (protojson's spacing is not).
func reviewText(r *orchestratorv1.Review) string {
	var b strings.Builder
	fmt.Fprintf(&b, "outcome: %s\npersona: %s\nlevel: %d\nretried: %t\nblocking: %t\nsummary: %s\n", r.GetOutcome(), r.GetPersona(),
		r.GetTruncationLevel(), r.GetRetriedShorter(), r.GetBlocking(), r.GetSummary())
	for _, f := range r.GetReviewedFiles() {
		b.WriteString("reviewed: " + f + "\n")
	}
	for _, f := range r.GetExcludedFiles() {
		b.WriteString("excluded: " + f + "\n")
	}
	for _, f := range r.GetFindings() {
		fmt.Fprintf(&b, "finding: %s [%s, blocking %t]\n", FeedbackLine(f), f.GetCategory(), f.GetBlocking())
	}
	return b.String()
}
