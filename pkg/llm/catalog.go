package llm

import (
	"strings"
)

// Provider names.
const (
	Anthropic = "anthropic"
	OpenAI    = "openai"
	Gemini    = "gemini"
	Local     = "local"
)

// Model aliases every provider maps to a model id.
const (
	AliasDefault  = "default"
	AliasFast     = "fast"
	AliasPowerful = "powerful"
)

// Aliases maps alias to model id.
type Aliases map[string]string

// Resolve maps model (an alias, an id or empty) to a model id.
func (a Aliases) Resolve(model string) string {
	if model == "" {
		model = AliasDefault
	}
	if id, ok := a[model]; ok && id != "" {
		return id
	}
	return model
}

// Catalogue lists the models Sylk knows per provider with context sizes and
// list prices (USD per million tokens). A model missing from the catalogue
// still works; it is costed at zero and assumed to have DefaultMaxContext.
var catalogue = map[string][]ModelInfo{
	Anthropic: {
		{ID: "claude-opus-4-1", Name: "Claude Opus 4.1", MaxContext: 200_000, InputPricePerM: 15, OutputPricePerM: 75},
		{ID: "claude-sonnet-4-5", Name: "Claude Sonnet 4.5", MaxContext: 200_000, InputPricePerM: 3, OutputPricePerM: 15},
		{ID: "claude-haiku-4-5", Name: "Claude Haiku 4.5", MaxContext: 200_000, InputPricePerM: 1, OutputPricePerM: 5},
	},
	OpenAI: {
		{ID: "gpt-4.1", Name: "GPT-4.1", MaxContext: 1_047_576, InputPricePerM: 2, OutputPricePerM: 8},
		{ID: "gpt-4.1-mini", Name: "GPT-4.1 mini", MaxContext: 1_047_576, InputPricePerM: 0.4, OutputPricePerM: 1.6},
		{ID: "o3", Name: "o3", MaxContext: 200_000, InputPricePerM: 2, OutputPricePerM: 8},
	},
	Gemini: {
		{ID: "gemini-2.5-pro", Name: "Gemini 2.5 Pro", MaxContext: 1_048_576, InputPricePerM: 1.25, OutputPricePerM: 10},
		{ID: "gemini-2.5-flash", Name: "Gemini 2.5 Flash", MaxContext: 1_048_576, InputPricePerM: 0.3, OutputPricePerM: 2.5},
	},
	Local: {
		{ID: "local-rules", Name: "Offline rules (no language model)", MaxContext: 128_000},
	},
}

// DefaultAliases are each provider's alias defaults; config may override them.
var defaultAliases = map[string]Aliases{
	Anthropic: {AliasDefault: "claude-sonnet-4-5", AliasFast: "claude-haiku-4-5", AliasPowerful: "claude-opus-4-1"},
	OpenAI:    {AliasDefault: "gpt-4.1", AliasFast: "gpt-4.1-mini", AliasPowerful: "o3"},
	Gemini:    {AliasDefault: "gemini-2.5-flash", AliasFast: "gemini-2.5-flash", AliasPowerful: "gemini-2.5-pro"},
	Local:     {AliasDefault: "local-rules", AliasFast: "local-rules", AliasPowerful: "local-rules"},
}

// DefaultMaxContext is assumed for models missing from the catalogue.
const DefaultMaxContext = 8192

// Catalogue returns a copy of provider's known models.
func Catalogue(provider string) []ModelInfo {
	return append([]ModelInfo(nil), catalogue[provider]...)
}

// DefaultAliases returns a copy of provider's default aliases.
func DefaultAliases(provider string) Aliases {
	out := Aliases{}
	for k, v := range defaultAliases[provider] {
		out[k] = v
	}
	return out
}

// LookupModel finds a model in provider's catalogue. Dated snapshots
// ("claude-sonnet-4-5-20250929") match their base id. Unknown models get
// DefaultMaxContext and zero prices, and ok is false.
func LookupModel(provider, id string) (ModelInfo, bool) {
	var best ModelInfo
	for _, m := range catalogue[provider] {
		if m.ID == id {
			return m, true
		}
		if strings.HasPrefix(id, m.ID+"-") && len(m.ID) > len(best.ID) {
			best = m
		}
	}
	if best.ID != "" {
		best.ID = id
		return best, true
	}
	return ModelInfo{ID: id, Name: id, MaxContext: DefaultMaxContext}, false
}

// embeddingModels are the embedding models' prices (input only); they are
// not chat models, so not in the catalogue the model listings show.
var embeddingModels = map[string][]ModelInfo{
	OpenAI: {
		{ID: "text-embedding-3-small", Name: "text-embedding-3-small", MaxContext: 8192, InputPricePerM: 0.02},
		{ID: "text-embedding-3-large", Name: "text-embedding-3-large", MaxContext: 8192, InputPricePerM: 0.13},
		{ID: "text-embedding-ada-002", Name: "text-embedding-ada-002", MaxContext: 8192, InputPricePerM: 0.10},
	},
}

// Cost prices usage on provider's model from the catalogue (or the
// embedding models' prices).
func Cost(provider, model string, u Usage) float64 {
	if m, ok := LookupModel(provider, model); ok {
		return m.Cost(u)
	}
	for _, m := range embeddingModels[provider] {
		if m.ID == model {
			return m.Cost(u)
		}
	}
	return 0
}
