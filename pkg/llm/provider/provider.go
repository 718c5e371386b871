// Package provider builds the configured model providers from llm.Config:
// each provider with a key (or, for openai, a base URL) is registered, and
// the offline local provider always is, so a process with nothing
// configured still works, honestly, without a language model.
package provider

import (
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/provider/anthropic"
	"sylk.dev/sylk/pkg/llm/provider/gemini"
	"sylk.dev/sylk/pkg/llm/provider/local"
	"sylk.dev/sylk/pkg/llm/provider/openai"
)

// New returns a registry of the configured providers plus local; its default
// is cfg.DefaultProvider() (local when nothing is configured).
func New(cfg llm.Config) (*llm.Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ps := []llm.Provider{local.New()}
	for _, name := range []string{llm.Anthropic, llm.OpenAI, llm.Gemini} {
		if !cfg.For(name).Configured() {
			continue
		}
		o, err := cfg.OptionsFor(name)
		if err != nil {
			return nil, err
		}
		p, err := Build(name, o)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return llm.NewRegistry(cfg.DefaultProvider(), ps...)
}

// Build constructs one provider by name from explicit options (used for
// per-tenant credentials and verification).
func Build(name string, o llm.ProviderOptions) (llm.Provider, error) {
	switch name {
	case llm.Anthropic:
		return anthropic.New(o), nil
	case llm.OpenAI:
		return openai.New(o), nil
	case llm.Gemini:
		return gemini.New(o), nil
	case llm.Local:
		return local.New(), nil
	}
	return nil, llm.ErrUnknownProvider
}
