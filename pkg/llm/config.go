package llm

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// ProviderConfig configures one provider. The key never appears in logs,
// flag help or errors.
type ProviderConfig struct {
	// APIKey comes from SYLK_LLM_<PROVIDER>_API_KEY (pkg/config fills flags
	// from the environment).
	APIKey string
	// APIKeyFile is a file holding the key, for a mounted Kubernetes Secret;
	// it is read at start when APIKey is empty.
	APIKeyFile string
	// BaseURL overrides the endpoint (any OpenAI-compatible server for openai).
	BaseURL string
	// Aliases override the default, fast and powerful model ids.
	Default, Fast, Powerful string
}

func (p *ProviderConfig) registerFlags(fs *flag.FlagSet, name, what string) {
	pre := "llm." + name + "."
	fs.StringVar(&p.APIKey, pre+"api-key", "", what+" API key (prefer the SYLK_LLM_"+strings.ToUpper(name)+"_API_KEY variable or "+pre+"api-key-file)")
	fs.StringVar(&p.APIKeyFile, pre+"api-key-file", "", "file holding the "+what+" API key (a mounted Kubernetes Secret)")
	fs.StringVar(&p.BaseURL, pre+"base-url", "", what+" API base URL (empty: the provider's public endpoint)")
	fs.StringVar(&p.Default, pre+"model-default", "", "model id for the \"default\" alias (empty: built-in)")
	fs.StringVar(&p.Fast, pre+"model-fast", "", "model id for the \"fast\" alias (empty: built-in)")
	fs.StringVar(&p.Powerful, pre+"model-powerful", "", "model id for the \"powerful\" alias (empty: built-in)")
}

// Key returns the API key: the configured value, else the key file's content.
func (p ProviderConfig) Key() (string, error) {
	if p.APIKey != "" {
		return p.APIKey, nil
	}
	if p.APIKeyFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(p.APIKeyFile)
	if err != nil {
		return "", fmt.Errorf("read API key file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Configured reports whether a key or key file is set. An OpenAI-compatible
// server by base URL needs no key.
func (p ProviderConfig) Configured() bool {
	return p.APIKey != "" || p.APIKeyFile != "" || p.BaseURL != ""
}

// Aliases returns the provider's aliases with overrides applied.
func (p ProviderConfig) Aliases(provider string) Aliases {
	a := DefaultAliases(provider)
	for k, v := range map[string]string{AliasDefault: p.Default, AliasFast: p.Fast, AliasPowerful: p.Powerful} {
		if v != "" {
			a[k] = v
		}
	}
	return a
}

// Config selects and configures providers.
type Config struct {
	// Provider is the default provider; empty picks the first configured of
	// anthropic, openai, gemini, and local when none is.
	Provider  string
	Anthropic ProviderConfig
	OpenAI    ProviderConfig
	Gemini    ProviderConfig
	// MaxTokens is the answer limit when a request sets none.
	MaxTokens int
	// ContextReserve is kept free for the answer when fitting context (B-18).
	ContextReserve int
}

// RegisterFlags registers the -llm.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Provider, "llm.provider", "", "default provider: anthropic, openai, gemini or local (empty: the first configured, else local)")
	c.Anthropic.registerFlags(fs, Anthropic, "Anthropic")
	c.OpenAI.registerFlags(fs, OpenAI, "OpenAI (or OpenAI-compatible server)")
	c.Gemini.registerFlags(fs, Gemini, "Google Gemini")
	fs.IntVar(&c.MaxTokens, "llm.max-tokens", 4096, "answer token limit when a request sets none")
	fs.IntVar(&c.ContextReserve, "llm.context-reserve", DefaultContextReserve, "tokens kept free for the answer when fitting the context window")
}

// Validate joins every problem.
func (c Config) Validate() error {
	var errs []error
	switch c.Provider {
	case "", Anthropic, OpenAI, Gemini, Local:
	default:
		errs = append(errs, fmt.Errorf("llm.provider %q: want anthropic, openai, gemini or local", c.Provider))
	}
	for name, p := range map[string]ProviderConfig{Anthropic: c.Anthropic, OpenAI: c.OpenAI, Gemini: c.Gemini} {
		if p.BaseURL != "" {
			if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("llm.%s.base-url: want an http(s) URL", name))
			}
		}
	}
	if c.Provider != "" && c.Provider != Local && !c.For(c.Provider).Configured() {
		errs = append(errs, fmt.Errorf("llm.provider %s: no API key, key file or base URL configured for it", c.Provider))
	}
	if c.MaxTokens <= 0 {
		errs = append(errs, errors.New("llm.max-tokens: must be positive"))
	}
	if c.ContextReserve < 0 {
		errs = append(errs, errors.New("llm.context-reserve: must not be negative"))
	}
	return errors.Join(errs...)
}

// For returns the named provider's configuration.
func (c Config) For(provider string) ProviderConfig {
	switch provider {
	case Anthropic:
		return c.Anthropic
	case OpenAI:
		return c.OpenAI
	case Gemini:
		return c.Gemini
	}
	return ProviderConfig{}
}

// DefaultProvider is the provider used when a request names none.
func (c Config) DefaultProvider() string {
	if c.Provider != "" {
		return c.Provider
	}
	for _, p := range []string{Anthropic, OpenAI, Gemini} {
		if c.For(p).Configured() {
			return p
		}
	}
	return Local
}

// Registry holds the configured providers.
type Registry struct {
	providers map[string]Provider
	def       string
}

// NewRegistry returns a registry whose default is def (which must be among ps).
func NewRegistry(def string, ps ...Provider) (*Registry, error) {
	r := &Registry{providers: map[string]Provider{}, def: def}
	for _, p := range ps {
		r.providers[p.Name()] = p
	}
	if _, ok := r.providers[def]; !ok {
		return nil, fmt.Errorf("%w: default %q is not configured", ErrUnknownProvider, def)
	}
	return r, nil
}

// Get returns the named provider; empty is the default.
func (r *Registry) Get(name string) (Provider, error) {
	if name == "" {
		name = r.def
	}
	p, ok := r.providers[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProvider, name)
	}
	return p, nil
}

// Default returns the default provider.
func (r *Registry) Default() Provider { return r.providers[r.def] }

// Names lists the configured providers.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.providers))
	for _, n := range []string{Anthropic, OpenAI, Gemini, Local} {
		if _, ok := r.providers[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// ProviderOptions build one provider client.
type ProviderOptions struct {
	APIKey  string
	BaseURL string
	Aliases Aliases
	// HTTPClient, when set, carries every call (tests point it at a fake);
	// Client says which carries them otherwise.
	HTTPClient *http.Client
	// PublicOnly limits the calls to public addresses: the base URL is a
	// tenant's, who may not reach the service's own networks.
	PublicOnly bool
	// MaxTokens is the answer limit when a request sets none.
	MaxTokens int
	// Name overrides the provider name (an OpenAI-compatible server may be
	// registered under its own name).
	Name string
}

// OptionsFor builds provider's options from the configuration.
func (c Config) OptionsFor(provider string) (ProviderOptions, error) {
	p := c.For(provider)
	key, err := p.Key()
	if err != nil {
		return ProviderOptions{}, fmt.Errorf("llm.%s: %w", provider, err)
	}
	return ProviderOptions{APIKey: key, BaseURL: p.BaseURL, Aliases: p.Aliases(provider), MaxTokens: c.MaxTokens}, nil
}
