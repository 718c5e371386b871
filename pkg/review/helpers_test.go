package review

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/provider/openai"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// scripted is a model that plays scripts through the OpenAI client.
func scripted(t *testing.T, scripts ...scriptmodel.Script) (Model, *scriptmodel.Server) {
	t.Helper()
	srv, err := scriptmodel.New(scripts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return openai.New(llm.ProviderOptions{APIKey: "sk-test", BaseURL: srv.URL + "/v1", Name: "openai"}), srv
}

// reports is a review script whose model reports findings.
func reports(findings ...map[string]any) scriptmodel.Script { return Script(Marker, findings...) }

// modified is the git diff of a changed file: hunks hunks, each replacing
// changed lines between ctx lines of context on either side.
func modified(path string, hunks, changed, ctx int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\nindex 1111111..2222222 100644\n--- a/%s\n+++ b/%s\n", path, path, path, path)
	for h := range hunks {
		start, n := h*100+1, 2*ctx+changed
		fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@ func f%d()\n", start, n, start, n, h)
		for i := range ctx {
			fmt.Fprintf(&b, " \tkeep(%q, %d)\n", path, h*1000+i)
		}
		for i := range changed {
			fmt.Fprintf(&b, "-\told(%d, %d)\n", h, i)
		}
		for i := range changed {
			fmt.Fprintf(&b, "+\tnext(%d, %d)\n", h, i)
		}
		for i := range ctx {
			fmt.Fprintf(&b, " \tkeep(%q, %d)\n", path, h*1000+500+i)
		}
	}
	return b.String()
}

// weigh is the fitter Review would weigh diff with (the default persona,
// no budget yet).
func weigh(t *testing.T, diff string) *fitter {
	t.Helper()
	system, err := systemPrompt(DefaultPersona)
	require.NoError(t, err)
	return &fitter{p: classify(Parse(diff), nil), overhead: llm.EstimateRequest(newCall(Request{}, system, defaultOutputTokens))}
}

// inputFor is the MaxInputTokens whose 95% is at least budget tokens.
func inputFor(budget int) int { return int(math.Ceil(float64(budget+1) / budgetShare)) }

// droppedLayout is level 1 with the first n files of the drop order gone.
func (f *fitter) droppedLayout(n int) *layout {
	l := f.full(-1)
	l.level = 1
	for _, e := range f.p.dropOrder()[:n] {
		for i, b := range l.blocks {
			if b.e == e {
				l.blocks = append(l.blocks[:i], l.blocks[i+1:]...)
				break
			}
		}
		l.dropped = append(l.dropped, e)
	}
	return l
}

// userPrompt is the user message of the request'th request.
func userPrompt(t *testing.T, srv *scriptmodel.Server, request int) string {
	t.Helper()
	reqs := srv.Requests()
	require.Greater(t, len(reqs), request)
	return reqs[request].Messages[0].Content
}

// level2Layout is level 2 with n lines of context and the first keep hunks
// of the first file shown (keep < 0: all).
func (f *fitter) level2Layout(n, keep int) *layout {
	l := f.full(n)
	l.level = 2
	if keep >= 0 {
		l.blocks[0].setKeep(keep)
	}
	return l
}
