package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/gen/openapi"
	"sylk.dev/sylk/pkg/apierr"
)

// Names in the OpenAPI document.
const (
	// errorDefinition is the gateway's JSON error form (errorBody).
	errorDefinition = "Error"
	// statusDefinition is the generator's google.rpc.Status, which the
	// gateway never sends: every reference to it becomes one to Error.
	statusDefinition = "rpcStatus"
	// sseOperation is the one operation that also streams server-sent
	// events.
	sseOperation = "GuideService_StreamEvents"
)

const apiDescription = "Sessions, messages, plans, runs and knowledge of the Sylk mesh. " +
	"Authenticate with \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\". " +
	"Too many failed authentications from one address or with keys of one prefix get 429 (AUTH_THROTTLED) with " +
	"Retry-After. " +
	"Every error is an Error object: {code, status, message, reason, domain, metadata, details}, where reason is the " +
	"stable google.rpc.ErrorInfo reason a client branches on and details are the status details as google.rpc.Status " +
	"renders them in JSON. Streams are newline-delimited JSON: a line {\"result\": ...} per message and, when a stream " +
	"fails after its first message, a last line {\"error\": Error}; a stream that fails before answers like any call. " +
	"GET /v1/sessions/{id}/events:stream also streams server-sent events with \"Accept: text/event-stream\" or " +
	"?format=sse (resume with Last-Event-ID)."

const sseDescription = "\n\nWith \"Accept: text/event-stream\" or ?format=sse the events come as server-sent events: " +
	"\"id\" is the event's sequence (send it back as Last-Event-ID to resume), \"event\" its type " +
	"(EVENT_TYPE_MESSAGE_ANSWERED, ...) and \"data\" the v1Event as JSON on one line. A failure after the stream " +
	"started ends it with an \"error\" event whose data is an Error."

// openAPIDocument returns the generated OpenAPI document with the API's
// title, its API-key security schemes and its error form filled in (the
// generator leaves the title of the first proto file, no security, and
// google.rpc.Status as every error, which is not what the gateway sends).
func openAPIDocument() ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(openapi.JSON(), &doc); err != nil {
		return nil, fmt.Errorf("parse embedded OpenAPI document: %w", err)
	}
	doc["info"] = map[string]any{"title": "Sylk API", "version": "v1", "description": apiDescription}
	doc["securityDefinitions"] = map[string]any{
		"ApiKey": map[string]any{"type": "apiKey", "in": "header", "name": "X-API-Key"},
		"Bearer": map[string]any{"type": "apiKey", "in": "header", "name": "Authorization", "description": "\"Bearer <key>\""},
	}
	doc["security"] = []any{
		map[string]any{"ApiKey": []any{}},
		map[string]any{"Bearer": []any{}},
	}
	defs, ok := doc["definitions"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("embedded OpenAPI document has no definitions")
	}
	defs[errorDefinition] = errorSchema()
	delete(defs, statusDefinition)
	replaceRef(doc, "#/definitions/"+statusDefinition, "#/definitions/"+errorDefinition)
	if err := describeOperations(doc); err != nil {
		return nil, err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode OpenAPI document: %w", err)
	}
	return b, nil
}

// errorSchema describes errorBody.
func errorSchema() map[string]any {
	var names []any
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		names = append(names, apierr.CodeName(c))
	}
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	return map[string]any{
		"type":        "object",
		"description": "The JSON form of every error: a google.rpc.Status with its google.rpc.ErrorInfo spelled out.",
		"required":    []any{"code", "status", "message", "reason", "domain", "metadata", "details"},
		"properties": map[string]any{
			"code":    map[string]any{"type": "integer", "format": "int32", "description": "The gRPC status code (google.rpc.Code)."},
			"status":  map[string]any{"type": "string", "enum": names, "description": "The code's name."},
			"message": str("What went wrong, for a person."),
			"reason": str("The google.rpc.ErrorInfo reason: UPPER_SNAKE and stable, what a client branches on " +
				"(SESSION_NOT_FOUND, API_KEY_INVALID, INVALID_FIELD, TOKEN_BUDGET_EXCEEDED, ...)."),
			"domain": str("The ErrorInfo domain: " + apierr.Domain + "."),
			"metadata": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"},
				"description": "The ErrorInfo metadata: facts a client may use (\"field\", \"resource\", \"scope\", ...)."},
			"details": map[string]any{"type": "array", "items": map[string]any{"$ref": "#/definitions/protobufAny"},
				"description": "The status details as google.rpc.Status renders them in JSON, each with its \"@type\": " +
					"google.rpc.ErrorInfo always, google.rpc.BadRequest (fieldViolations) when request fields are at " +
					"fault, google.rpc.RetryInfo (retryDelay) when a later retry may succeed."},
		},
		"additionalProperties": false,
	}
}

// replaceRef replaces every {"$ref": from} in v by {"$ref": to}.
func replaceRef(v any, from, to string) {
	switch v := v.(type) {
	case map[string]any:
		if v["$ref"] == from {
			v["$ref"] = to
		}
		for _, e := range v {
			replaceRef(e, from, to)
		}
	case []any:
		for _, e := range v {
			replaceRef(e, from, to)
		}
	}
}

// describeOperations says, on every operation, that its default response
// is an Error, and on the streaming ones how they frame their messages.
func describeOperations(doc map[string]any) error {
	paths, _ := doc["paths"].(map[string]any)
	for path, p := range paths {
		ops, _ := p.(map[string]any)
		for method, o := range ops {
			op, _ := o.(map[string]any)
			responses, _ := op["responses"].(map[string]any)
			if responses == nil {
				return fmt.Errorf("OpenAPI operation %s %s has no responses", method, path)
			}
			responses["default"] = map[string]any{
				"description": "An error, in the JSON error form.",
				"schema":      map[string]any{"$ref": "#/definitions/" + errorDefinition},
			}
			describeStream(op, responses)
		}
	}
	return nil
}

// describeStream describes a streaming operation's framing; it leaves
// other operations as they are.
func describeStream(op, responses map[string]any) {
	ok, _ := responses["200"].(map[string]any)
	schema, _ := ok["schema"].(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	if _, streams := props["result"]; !streams {
		return
	}
	ok["description"] = "Newline-delimited JSON: a line {\"result\": ...} per message; a failure after the first " +
		"message ends the stream with a line {\"error\": Error}."
	op["produces"] = []any{"application/x-ndjson"}
	if op["operationId"] == sseOperation {
		op["produces"] = []any{"application/x-ndjson", "text/event-stream"}
		desc, _ := op["description"].(string)
		op["description"] = strings.TrimSpace(desc + sseDescription)
	}
}

// OpenAPIDocument returns the OpenAPI document the gateway serves at
// /openapi.json (the console's types are generated from it).
func OpenAPIDocument() ([]byte, error) { return openAPIDocument() }
