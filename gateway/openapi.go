package gateway

import (
	"encoding/json"
	"fmt"

	"sylk.dev/sylk/gen/openapi"
)

// openAPIDocument returns the generated OpenAPI document with the API's
// title and its API-key security schemes filled in (the generator leaves
// the title of the first proto file and no security).
func openAPIDocument() ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(openapi.JSON(), &doc); err != nil {
		return nil, fmt.Errorf("parse embedded OpenAPI document: %w", err)
	}
	doc["info"] = map[string]any{
		"title":       "Sylk API",
		"version":     "v1",
		"description": "Sessions, messages, plans, runs and knowledge of the Sylk mesh. Authenticate with \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\". Errors are JSON objects {code, status, message}. GET /v1/sessions/{id}/events:stream streams newline-delimited JSON, or server-sent events with \"Accept: text/event-stream\" or ?format=sse (resume with Last-Event-ID).",
	}
	doc["securityDefinitions"] = map[string]any{
		"ApiKey": map[string]any{"type": "apiKey", "in": "header", "name": "X-API-Key"},
		"Bearer": map[string]any{"type": "apiKey", "in": "header", "name": "Authorization", "description": "\"Bearer <key>\""},
	}
	doc["security"] = []any{
		map[string]any{"ApiKey": []any{}},
		map[string]any{"Bearer": []any{}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode OpenAPI document: %w", err)
	}
	return b, nil
}
