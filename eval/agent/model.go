package agenteval

import (
	"errors"
	"fmt"

	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// ModelConfig is the model both paths work with: the mesh is configured
// with it, and the baseline calls it through the same provider client.
type ModelConfig struct {
	// Provider is "openai" (OpenAI, or any server that speaks its chat
	// completions API) or "anthropic".
	Provider string
	// BaseURL is the API's base URL; "" is the provider's public endpoint.
	// An OpenAI-compatible server's usually ends in /v1.
	BaseURL string
	// APIKey may be empty for a local server.
	APIKey string
	// Model is the model's name as the provider knows it.
	Model string
	// MaxTokens bounds each answer (4096).
	MaxTokens int
}

// Validate joins every problem.
func (c ModelConfig) Validate() error {
	var errs []error
	switch c.Provider {
	case llm.OpenAI:
		if c.BaseURL == "" && c.APIKey == "" {
			errs = append(errs, errors.New("provider openai needs a base URL (a compatible server) or an API key"))
		}
	case llm.Anthropic:
		if c.APIKey == "" {
			errs = append(errs, errors.New("provider anthropic needs an API key"))
		}
	default:
		errs = append(errs, fmt.Errorf("provider %q: want openai or anthropic", c.Provider))
	}
	if c.Model == "" {
		errs = append(errs, errors.New("no model named"))
	}
	return errors.Join(errs...)
}

func (c ModelConfig) maxTokens() int {
	if c.MaxTokens > 0 {
		return c.MaxTokens
	}
	return 4096
}

// llmConfig configures pkg/llm with the one provider, every alias naming
// the model.
func (c ModelConfig) llmConfig() llm.Config {
	pc := llm.ProviderConfig{APIKey: c.APIKey, BaseURL: c.BaseURL, Default: c.Model, Fast: c.Model, Powerful: c.Model}
	cfg := llm.Config{Provider: c.Provider, MaxTokens: c.maxTokens(), ContextReserve: llm.DefaultContextReserve}
	switch c.Provider {
	case llm.OpenAI:
		cfg.OpenAI = pc
	case llm.Anthropic:
		cfg.Anthropic = pc
	}
	return cfg
}

// client is the provider client the baseline calls: the one the mesh's
// gate builds from the same configuration.
func (c ModelConfig) client() (llm.Provider, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	reg, err := provider.New(c.llmConfig())
	if err != nil {
		return nil, err
	}
	return reg.Get(c.Provider)
}

// MeshFlags are the mesh's flags that make every agent in it use the
// model: the provider is the default one and each alias names the model.
func (c ModelConfig) MeshFlags() []string {
	pre := "-llm." + c.Provider + "."
	flags := []string{"-llm.provider", c.Provider, "-llm.max-tokens", fmt.Sprint(c.maxTokens()),
		pre + "model-default", c.Model, pre + "model-fast", c.Model, pre + "model-powerful", c.Model}
	if c.BaseURL != "" {
		flags = append(flags, pre+"base-url", c.BaseURL)
	}
	if c.APIKey != "" {
		flags = append(flags, pre+"api-key", c.APIKey)
	}
	return flags
}

// cost prices usage from the model catalogue, as the mesh's usage records
// do (0 for a model the catalogue does not list: a local one).
func (c ModelConfig) cost(u llm.Usage) float64 {
	return llm.Cost(c.Provider, c.Model, u)
}

// ScriptedModel is the model configuration that points provider's client
// at the script model.
func ScriptedModel(srv *scriptmodel.Server, provider string) ModelConfig {
	c := ModelConfig{Provider: provider, BaseURL: srv.URL, APIKey: "scripted", Model: "scripted"}
	if provider == llm.OpenAI {
		c.BaseURL += "/v1"
	}
	return c
}
