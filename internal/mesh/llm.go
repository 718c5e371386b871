package mesh

import (
	"context"
	"log/slog"

	"sylk.dev/sylk/pkg/app"
	llmapi "sylk.dev/sylk/pkg/llm/api"
	"sylk.dev/sylk/services/archivalist"
)

// LLMSchema holds usage records and stored provider credentials (pkg/llm).
const LLMSchema = "llm"

// attachLLM gives the archivalist, which owns usage and audit records, the
// LLM usage and provider APIs on a pool of the llm schema. Other services
// need nothing here. The returned function closes the pool.
func attachLLM(ctx context.Context, name string, svc app.Service, common Common, log *slog.Logger) (func(), error) {
	a, ok := svc.(*archivalist.Service)
	if name != Archivalist || !ok {
		return func() {}, nil
	}
	pool, err := OpenSchema(ctx, common.Postgres, common.SchemaPrefix, LLMSchema)
	if err != nil {
		return nil, err
	}
	api, err := llmapi.New(common.LLM, common.LLMCredentials, pool, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	a.SetLLM(api)
	return pool.Close, nil
}
