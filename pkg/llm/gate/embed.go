package gate

import (
	"context"
	"errors"

	"sylk.dev/sylk/pkg/llm"
)

// EmbedCall is one embeddings request: who it is for, the provider whose
// limits and budgets it shares (the account its key belongs to), the
// model, and the texts.
type EmbedCall struct {
	llm.Attribution
	Provider string
	Model    string
	Inputs   []string
}

// EmbedFunc makes the embeddings call on inputs (as the secrets policy left
// them) and returns the input tokens the endpoint reports it used.
type EmbedFunc func(ctx context.Context, inputs []string) (inputTokens int, err error)

// Embed runs an embeddings call through the gate as a completion runs: its
// inputs through the secrets policy, the provider's shared rate limit,
// breaker and budgets, retries by error tier, and a usage record (tokens
// and cost) for the call. An embedding call is background work unless the
// attribution says a user waits on it.
func (g *Gate) Embed(ctx context.Context, c EmbedCall, do EmbedFunc) error {
	if c.Provider == "" || c.Model == "" {
		return errors.New("llm gate: an embeddings call names its provider and model")
	}
	req := &llm.Request{Provider: c.Provider, Model: c.Model, Attribution: c.Attribution, MaxTokens: 1, Priority: llm.PriorityBackground}
	if c.UserInvoked {
		req.Priority = llm.PriorityUserInteractive
	}
	req.Messages = make([]llm.Message, len(c.Inputs))
	for i, in := range c.Inputs {
		req.Messages[i] = llm.Message{Role: llm.RoleUser, Content: in}
	}
	_, err := g.run(ctx, embedder(c.Provider), c.Provider, req, func(ctx context.Context, _ llm.Provider, r *llm.Request) (*llm.Response, bool, error) {
		inputs := make([]string, len(r.Messages))
		for i, m := range r.Messages {
			inputs[i] = m.Content
		}
		n, err := do(ctx, inputs)
		return &llm.Response{Usage: llm.Usage{InputTokens: n}, Provider: c.Provider, Model: c.Model}, false, err
	}, false)
	return err
}

// errNotChat is what an embeddings provider answers a chat call with; the
// gate never makes one.
var errNotChat = errors.New("llm gate: an embeddings endpoint takes no chat calls")

// embedder stands for an embeddings endpoint among the gate's providers:
// the gate needs its name (the shared state it reads and writes) and its
// model; the call itself is the EmbedFunc.
type embedder string

func (e embedder) Name() string                { return string(e) }
func (e embedder) Models() []llm.ModelInfo     { return nil }
func (e embedder) Resolve(model string) string { return model }
func (e embedder) Complete(context.Context, *llm.Request) (*llm.Response, error) {
	return nil, errNotChat
}
func (e embedder) Stream(context.Context, *llm.Request, llm.Handler) error { return errNotChat }
func (e embedder) CountTokens(context.Context, *llm.Request) (int, error) {
	return 0, errNotChat
}
