package gateway

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
)

// swagger is the part of /openapi.json these tests read.
type swagger struct {
	Paths       map[string]map[string]map[string]any `json:"paths"`
	Definitions map[string]map[string]any            `json:"definitions"`
}

func (h *harness) openAPI(t *testing.T) swagger {
	t.Helper()
	r := h.do(t, http.MethodGet, "/openapi.json", "")
	require.Equal(t, http.StatusOK, r.code)
	require.NotContains(t, r.body, "rpcStatus", "google.rpc.Status is never sent")
	var doc swagger
	require.NoError(t, json.Unmarshal([]byte(r.body), &doc))
	return doc
}

// conform checks v (decoded JSON) against schema, a Swagger 2.0 schema
// object of doc; at names where v is. A property an object schema does not
// list is refused unless additionalProperties allows it.
func conform(t *testing.T, doc swagger, schema map[string]any, v any, at string) {
	t.Helper()
	schema = unwrapAllOf(schema)
	if ref, ok := schema["$ref"].(string); ok {
		def, ok := doc.Definitions[strings.TrimPrefix(ref, "#/definitions/")]
		require.True(t, ok, "%s: %s is not defined", at, ref)
		schema = def
	}
	switch schema["type"] {
	case "object":
		obj, ok := v.(map[string]any)
		require.True(t, ok, "%s: want an object, got %v", at, v)
		props, _ := schema["properties"].(map[string]any)
		required, _ := schema["required"].([]any)
		for _, r := range required {
			require.Contains(t, obj, r, "%s: required", at)
		}
		for k, fv := range obj {
			if ps, ok := props[k].(map[string]any); ok {
				conform(t, doc, ps, fv, at+"."+k)
				continue
			}
			switch ap := schema["additionalProperties"].(type) {
			case map[string]any:
				conform(t, doc, ap, fv, at+"."+k)
			default:
				require.Equal(t, true, ap, "%s: %q is not documented", at, k)
			}
		}
	case "array":
		items, ok := v.([]any)
		require.True(t, ok, "%s: want an array, got %v", at, v)
		for _, it := range items {
			conform(t, doc, schema["items"].(map[string]any), it, at+"[]")
		}
	case "string":
		s, ok := v.(string)
		require.True(t, ok, "%s: want a string, got %v", at, v)
		if enum, ok := schema["enum"].([]any); ok {
			require.Contains(t, enum, s, "%s", at)
		}
	case "integer":
		n, ok := v.(float64)
		require.True(t, ok && n == float64(int64(n)), "%s: want an integer, got %v", at, v)
	case "boolean":
		_, ok := v.(bool)
		require.True(t, ok, "%s: want a boolean, got %v", at, v)
	default:
		t.Fatalf("%s: schema type %v is not checked here", at, schema["type"])
	}
}

// unwrapAllOf is the one schema of {"allOf": [schema], "description": ...},
// the generator's form of a documented field of a message type.
func unwrapAllOf(schema map[string]any) map[string]any {
	if all, ok := schema["allOf"].([]any); ok && len(all) == 1 {
		return all[0].(map[string]any)
	}
	return schema
}

// TestOpenAPIDocumentsTheErrorsSent: every operation's default response is
// the Error schema, and real error bodies of every kind (the gateway's own,
// the services', with field violations and retry delays, of calls and of
// both stream forms) have exactly the properties it documents; so does the
// README's example, which is what the gateway sends for it.
func TestOpenAPIDocumentsTheErrorsSent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxBodyBytes = 1024 })
	doc := h.openAPI(t)
	errRef := map[string]any{"$ref": "#/definitions/" + errorDefinition}
	ops := 0
	for path, methods := range doc.Paths {
		for method, op := range methods {
			ops++
			responses := op["responses"].(map[string]any)
			def := responses["default"].(map[string]any)
			require.Equal(t, errRef, def["schema"], "%s %s", method, path)
		}
	}
	require.Greater(t, ops, 50)

	var bodies []string
	add := func(r response) { bodies = append(bodies, r.body) }
	add(h.do(t, http.MethodGet, "/v1/sessions", ""))
	add(h.do(t, http.MethodGet, "/v1/sessions", "", bearer("sylk_"+strings.Repeat("x", 40))))
	add(h.do(t, http.MethodGet, "/v1/sessions", "", "Authorization: Basic eDp5"))
	add(h.do(t, http.MethodPost, "/v1/sessions", `{}`, bearer(h.viewer)))
	add(h.do(t, http.MethodGet, "/v1/nothing-here", "", bearer(h.member)))
	add(h.do(t, http.MethodDelete, "/v1/sessions", "", bearer(h.member)))
	add(h.do(t, http.MethodPost, "/healthz", ""))
	add(h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":"`+strings.Repeat("x", 2000)+`"}`, bearer(h.member)))
	add(h.do(t, http.MethodPost, "/v1/sessions", `{"displayName":`, bearer(h.member)))
	add(h.do(t, http.MethodPost, "/v1/sessions", `{"colour":"red"}`, bearer(h.member)))
	add(h.do(t, http.MethodGet, "/v1/sessions/%ff", "", bearer(h.member)))
	add(h.do(t, http.MethodGet, "/v1/sessions/nope", "", bearer(h.member)))
	add(h.do(t, http.MethodPost, "/v1/sessions/s1/messages", `{"text":"more than sixteen bytes"}`, bearer(h.member)))
	add(h.do(t, http.MethodGet, "/v1/sessions/nope/events:stream", "", bearer(h.member)))
	add(h.do(t, http.MethodGet, "/v1/sessions/s1/events:stream?format=sse", "", bearer(h.member), "Last-Event-ID: x"))
	ndjson := h.do(t, http.MethodGet, "/v1/sessions/broken/events:stream", "", bearer(h.member))
	var last struct {
		Error json.RawMessage `json:"error"`
	}
	lines := strings.Split(strings.TrimSpace(ndjson.body), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last))
	bodies = append(bodies, string(last.Error))
	sse := h.do(t, http.MethodGet, "/v1/sessions/broken/events:stream?format=sse", "", bearer(h.member))
	_, data, ok := strings.Cut(sse.body, "event: error\ndata: ")
	require.True(t, ok, sse.body)
	bodies = append(bodies, strings.TrimSpace(data))
	conn, err := grpcDialClosedPort(t)
	require.NoError(t, err)
	down, err := New(h.gw.cfg, nil, h.db, Conns{Guide: conn}, nil)
	require.NoError(t, err)
	add((&harness{url: newTestServer(t, down)}).do(t, http.MethodGet, "/v1/sessions", "", bearer(h.member)))

	details := map[string]bool{}
	for _, body := range bodies {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &v), body)
		require.NotNil(t, v["code"], "an error body: %s", body)
		conform(t, doc, doc.Definitions[errorDefinition], v, "Error")
		for _, d := range v["details"].([]any) {
			typ, _ := d.(map[string]any)["@type"].(string)
			require.NotEmpty(t, typ, body)
			details[typ] = true
		}
	}
	for _, typ := range []string{"ErrorInfo", "BadRequest", "RetryInfo"} {
		require.True(t, details["type.googleapis.com/google.rpc."+typ], "some body had a %s", typ)
	}

	// The README's example is an Error, and the one sent for it.
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```json\n(\\{[^`]*\"reason\"[^`]*\\})\n```").FindSubmatch(readme)
	require.NotNil(t, m, "README has an error example")
	var example map[string]any
	require.NoError(t, json.Unmarshal(m[1], &example))
	conform(t, doc, doc.Definitions[errorDefinition], example, "README")
	require.JSONEq(t, string(m[1]), h.do(t, http.MethodGet, "/v1/sessions/x", "", bearer(h.member)).body)
}

// TestOpenAPIDescribesTypedEvents: the event page and stream refer to the
// typed Event, whose type is the EventType enum and which has every
// payload of the proto.
func TestOpenAPIDescribesTypedEvents(t *testing.T) {
	t.Parallel()
	doc := newHarness(t, nil).openAPI(t)
	ref := func(schema any) string {
		t.Helper()
		s, _ := unwrapAllOf(schema.(map[string]any))["$ref"].(string)
		require.NotEmpty(t, s, "%v refers to a definition", schema)
		return strings.TrimPrefix(s, "#/definitions/")
	}
	prop := func(def, name string) any {
		t.Helper()
		p, ok := doc.Definitions[def]["properties"].(map[string]any)[name]
		require.True(t, ok, "%s has %s", def, name)
		return p
	}

	page := doc.Paths["/v1/sessions/{session}/events"]["get"]["responses"].(map[string]any)["200"].(map[string]any)
	items := prop(ref(page["schema"]), "events").(map[string]any)["items"]
	require.Equal(t, "v1Event", ref(items))

	stream := doc.Paths["/v1/sessions/{session}/events:stream"]["get"]
	require.Equal(t, []any{"application/x-ndjson", "text/event-stream"}, stream["produces"])
	require.Contains(t, stream["description"], "EVENT_TYPE_MESSAGE_ANSWERED")
	line := stream["responses"].(map[string]any)["200"].(map[string]any)["schema"].(map[string]any)
	result := line["properties"].(map[string]any)
	require.Equal(t, "v1Event", ref(prop(ref(result["result"]), "event")))
	require.Equal(t, errorDefinition, ref(result["error"]))

	require.Equal(t, "v1EventType", ref(prop("v1Event", "type")))
	var names []any
	values := eventv1.EventType(0).Descriptor().Values()
	for i := range values.Len() {
		names = append(names, string(values.Get(i).Name()))
	}
	require.Equal(t, names, doc.Definitions["v1EventType"]["enum"])
	payloads := (&eventv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("payload").Fields()
	for i := range payloads.Len() {
		ref(prop("v1Event", payloads.Get(i).JSONName()))
	}
}

// TestOpenAPIOperations: every path names its resources (/v1/sessions/
// {session}, never /v1/{name}); every operation has a one-line summary
// and declares the error statuses the gateway answers with, each an
// Error; the streams say how they are framed.
func TestOpenAPIOperations(t *testing.T) {
	t.Parallel()
	doc := newHarness(t, nil).openAPI(t)
	errRef := map[string]any{"$ref": "#/definitions/" + errorDefinition}
	shapes := map[string]string{}
	for path, methods := range doc.Paths {
		require.Regexp(t, `^/v1/[a-zA-Z]+(/|:|$)`, path, "the path starts with a collection")
		for _, param := range pathParam.FindAllStringSubmatch(path, -1) {
			require.NotContains(t, []string{"name", "parent"}, param[1], path)
			require.NotRegexp(t, `_\d+$|ie$|\.`, param[1], path)
		}
		shape := pathParam.ReplaceAllString(path, "{}")
		require.NotContains(t, shapes, shape, "%s and %s differ only by parameter names", path, shapes[shape])
		shapes[shape] = path
		for method, op := range methods {
			summary, _ := op["summary"].(string)
			require.NotEmpty(t, summary, "%s %s", method, path)
			require.NotContains(t, summary, "\n", "%s %s", method, path)
			responses := op["responses"].(map[string]any)
			if line, _ := responses["200"].(map[string]any)["schema"].(map[string]any); line["properties"] != nil {
				if _, streams := line["properties"].(map[string]any)["result"]; streams {
					require.Contains(t, op["produces"], "application/x-ndjson", "%s %s", method, path)
				}
			}
			for _, code := range []string{"400", "401", "403", "404", "429", "503", "default"} {
				r, ok := responses[code].(map[string]any)
				require.True(t, ok, "%s %s declares %s", method, path, code)
				require.Equal(t, errRef, r["schema"], "%s %s %s", method, path, code)
			}
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				if p := p.(map[string]any); p["in"] == "path" {
					require.NotEmpty(t, p["description"], "%s %s: %s", method, path, p["name"])
				}
			}
		}
	}

	stream := doc.Paths["/v1/sessions/{session}/events:stream"]["get"]
	require.Contains(t, stream["summary"], "Streams the session's events")
	var headers []string
	for _, p := range stream["parameters"].([]any) {
		if p := p.(map[string]any); p["in"] == "header" {
			headers = append(headers, p["name"].(string))
		}
	}
	require.Equal(t, []string{"Last-Event-ID"}, headers)
	ok := stream["responses"].(map[string]any)["200"].(map[string]any)
	require.Contains(t, ok["description"], "application/x-ndjson")
	require.Contains(t, doc.Paths["/v1/keys/{id}:rotate"]["post"]["responses"], "409", "an operation with a body may conflict")
	require.NotContains(t, doc.Paths["/v1/keys"]["get"]["responses"], "413", "a GET has no body to be too large")
}

// TestOpenAPIv3: /openapi.v3.json is the same API as OpenAPI 3: the same
// paths, the Error schema, and the streams' media types (errors stay
// application/json).
func TestOpenAPIv3(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v2 := h.openAPI(t)
	r := h.do(t, http.MethodGet, "/openapi.v3.json", "")
	require.Equal(t, http.StatusOK, r.code, r.body)
	var v3 struct {
		OpenAPI    string                                      `json:"openapi"`
		Paths      map[string]map[string]map[string]any        `json:"paths"`
		Components struct{ Schemas map[string]map[string]any } `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &v3))
	require.Regexp(t, `^3\.`, v3.OpenAPI)
	require.Len(t, v3.Paths, len(v2.Paths))
	for path := range v2.Paths {
		require.Contains(t, v3.Paths, path)
	}
	require.Contains(t, v3.Components.Schemas, errorDefinition)
	require.NotContains(t, r.body, "#/definitions/", "references point into components")

	responses := v3.Paths["/v1/sessions/{session}/events:stream"]["get"]["responses"].(map[string]any)
	content := func(code string) []string {
		var types []string
		for typ := range responses[code].(map[string]any)["content"].(map[string]any) {
			types = append(types, typ)
		}
		return types
	}
	require.ElementsMatch(t, []string{mimeNDJSON, mimeSSE}, content("200"))
	require.Equal(t, []string{"application/json"}, content("404"))
}
