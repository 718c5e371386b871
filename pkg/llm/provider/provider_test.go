package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/testenv"
)

func TestNewDefaultsToLocal(t *testing.T) {
	t.Parallel()
	r, err := provider.New(testenv.FromFlags[llm.Config](t))
	require.NoError(t, err)
	require.Equal(t, llm.Local, r.Default().Name())
	require.Equal(t, []string{llm.Local}, r.Names())
}

func TestNewConfigured(t *testing.T) {
	t.Parallel()
	r, err := provider.New(testenv.FromFlags[llm.Config](t, "-llm.openai.base-url", "http://127.0.0.1:11434/v1", "-llm.openai.model-default", "qwen2.5-coder",
		"-llm.anthropic.api-key", "k"))
	require.NoError(t, err)
	require.Equal(t, []string{llm.Anthropic, llm.OpenAI, llm.Local}, r.Names())
	require.Equal(t, llm.Anthropic, r.Default().Name())
	p, err := r.Get(llm.OpenAI)
	require.NoError(t, err)
	require.Equal(t, "qwen2.5-coder", p.Resolve(""))
	_, err = r.Get(llm.Gemini)
	require.ErrorIs(t, err, llm.ErrUnknownProvider)
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := provider.New(testenv.FromFlags[llm.Config](t, "-llm.provider", "gemini"))
	require.ErrorContains(t, err, "no API key")
}
