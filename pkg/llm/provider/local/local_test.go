package local_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/provider/local"
)

func TestLocalAnswers(t *testing.T) {
	t.Parallel()
	p := local.New()
	tests := []struct {
		name, system, user string
		check              func(t *testing.T, text string)
	}{
		{"classification", "Classify the request", "where is ComputeInvoiceTotal defined?", func(t *testing.T, text string) {
			var c local.Classification
			require.NoError(t, json.Unmarshal([]byte(text), &c))
			require.Equal(t, "librarian", c.Agent)
			require.Equal(t, "local", c.Provider)
		}},
		{"planning", "You draft plans", "add a /version endpoint", func(t *testing.T, text string) {
			require.Contains(t, text, "Template plan")
			require.Contains(t, text, "generates no code")
		}},
		{"code", "", "write a function that adds two numbers", func(t *testing.T, text string) {
			require.Equal(t, local.NoCodeNotice, text)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := &llm.Request{System: tt.system, Messages: []llm.Message{{Role: llm.RoleUser, Content: tt.user}}}
			r1, err := p.Complete(t.Context(), req)
			require.NoError(t, err)
			r2, err := p.Complete(t.Context(), req)
			require.NoError(t, err)
			require.Equal(t, r1.Content, r2.Content, "deterministic")
			tt.check(t, r1.Content)

			acc := llm.NewAccumulator(llm.Local, local.Model)
			require.NoError(t, p.Stream(t.Context(), req, acc.Handler(nil)))
			sr := acc.Response()
			require.Equal(t, r1.Content, sr.Content)
			require.False(t, sr.Partial)
			require.Equal(t, llm.EstimateRequest(req), sr.Usage.InputTokens)
		})
	}
}

func TestLocalCountTokens(t *testing.T) {
	t.Parallel()
	n, err := local.New().CountTokens(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "12345678"}}})
	require.NoError(t, err)
	require.Equal(t, 2+4, n)
	require.Equal(t, 3, llm.EstimateTokens("123456789"))
}

func TestClassifyConfidence(t *testing.T) {
	t.Parallel()
	require.Equal(t, "guide", local.Classify("hello there").Agent)
	c := local.Classify("implement and build a new endpoint")
	require.Equal(t, "architect", c.Agent)
	require.GreaterOrEqual(t, c.Confidence, 0.7)
}
