package gateway

import (
	"fmt"
	"regexp"
	"strings"
)

// errorResponse is the description of an error response the gateway may
// answer an operation with; every one has an Error body.
type errorResponse struct {
	status, description string
	// bodyOnly: only operations that take a body get it.
	bodyOnly bool
	headers  map[string]any
}

var retryAfterHeader = map[string]any{"Retry-After": map[string]any{"type": "integer",
	"description": "Seconds to wait before retrying."}}

// errorResponses are the error statuses declared on operations; any other
// (500, 501, 504) is the default response.
var errorResponses = []errorResponse{
	{status: "400", description: "The request is not valid (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE): " +
		"a field, the path, a query parameter or the body is wrong, or the resource is not in a state that allows " +
		"this. reason says which; details hold a google.rpc.BadRequest naming the fields at fault."},
	{status: "401", description: "No API key, or an unknown, revoked or expired one (UNAUTHENTICATED; reason " +
		"API_KEY_MISSING, API_KEY_INVALID, AUTH_SCHEME_UNSUPPORTED). The message says which; an expired key's says " +
		"it expired.", headers: map[string]any{"WWW-Authenticate": map[string]any{"type": "string",
		"description": "Bearer realm=\"sylk\""}}},
	{status: "403", description: "The caller's role may not do this (PERMISSION_DENIED; reason ROLE_READ_ONLY, " +
		"ADMIN_ROLE_REQUIRED, ...). The denial is recorded in the audit log."},
	{status: "404", description: "The resource does not exist in the caller's tenant, or no route has this path " +
		"(NOT_FOUND)."},
	{status: "409", bodyOnly: true, description: "The resource exists already, or a concurrent change conflicted " +
		"(ALREADY_EXISTS, ABORTED): read it again and retry."},
	{status: "413", bodyOnly: true, description: "The body exceeds the gateway's limit (BODY_TOO_LARGE; metadata " +
		"limit_bytes)."},
	{status: "429", description: "Too many failed authentications from the address or with keys of the prefix " +
		"(AUTH_THROTTLED), or a rate, token or cost budget is used up (RESOURCE_EXHAUSTED).", headers: retryAfterHeader},
	{status: "503", description: "A service or store behind the gateway does not answer (UNAVAILABLE): retry later.",
		headers: retryAfterHeader},
}

// describeOperations declares on every operation the error responses the
// gateway sends (each an Error), a one-line summary, its path parameters
// and, on the streaming ones, how they frame their messages.
func describeOperations(doc map[string]any) error {
	paths, _ := doc["paths"].(map[string]any)
	renamePathParams(paths)
	for path, p := range paths {
		ops, _ := p.(map[string]any)
		for method, o := range ops {
			op, _ := o.(map[string]any)
			responses, _ := op["responses"].(map[string]any)
			if responses == nil {
				return fmt.Errorf("OpenAPI operation %s %s has no responses", method, path)
			}
			if op["summary"] == nil {
				return fmt.Errorf("OpenAPI operation %s %s has no summary: comment its RPC", method, path)
			}
			declareErrors(op, responses)
			splitSummary(op)
			describePathParams(path, op)
			describeStream(op, responses)
		}
	}
	return nil
}

func declareErrors(op, responses map[string]any) {
	errRef := map[string]any{"$ref": "#/definitions/" + errorDefinition}
	hasBody := false
	params, _ := op["parameters"].([]any)
	for _, p := range params {
		if p, _ := p.(map[string]any); p["in"] == "body" {
			hasBody = true
		}
	}
	for _, e := range errorResponses {
		if e.bodyOnly && !hasBody {
			continue
		}
		r := map[string]any{"description": e.description, "schema": errRef}
		if e.headers != nil {
			r["headers"] = e.headers
		}
		responses[e.status] = r
	}
	responses["default"] = map[string]any{
		"description": "Any other error (INTERNAL, UNIMPLEMENTED, DEADLINE_EXCEEDED, ...).",
		"schema":      errRef,
	}
}

// sentenceEnd is the end of a comment's first sentence.
var sentenceEnd = regexp.MustCompile(`[.:;]\s`)

// splitSummary makes the summary the first sentence of the RPC's comment,
// on one line; when the comment says more, the description starts with
// all of it.
func splitSummary(op map[string]any) {
	whole := strings.Join(strings.Fields(op["summary"].(string)), " ")
	summary, rest := whole, ""
	if loc := sentenceEnd.FindStringIndex(whole); loc != nil {
		summary, rest = whole[:loc[0]], whole
	}
	summary = strings.TrimSuffix(summary, ".")
	// "ListKeys lists the tenant's keys" → "Lists the tenant's keys": the
	// operationId names the RPC already.
	id, _ := op["operationId"].(string)
	if _, rpc, ok := strings.Cut(id, "_"); ok {
		// A second binding of an RPC is "<Service>_<RPC>2".
		rpc = strings.TrimRight(rpc, "0123456789")
		if after, ok := strings.CutPrefix(summary, rpc+" "); ok && after != "" {
			summary = strings.ToUpper(after[:1]) + after[1:]
		}
	}
	op["summary"] = summary
	desc, _ := op["description"].(string)
	if rest != "" {
		desc = strings.TrimSpace(rest + "\n\n" + desc)
	}
	if desc != "" {
		op["description"] = desc
	}
}

// pathParam is a path parameter's name in a path template.
var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// describePathParams says of each path parameter which resource's id it
// is: a name "sessions/s1" is sent as /v1/sessions/s1, its id in the
// path.
func describePathParams(path string, op map[string]any) {
	params, _ := op["parameters"].([]any)
	for _, p := range params {
		param, _ := p.(map[string]any)
		if param["in"] != "path" || param["description"] != nil {
			continue
		}
		name, _ := param["name"].(string)
		collection := collectionOf(path, name)
		if collection == "" {
			param["description"] = "The " + name + "."
			continue
		}
		param["description"] = fmt.Sprintf("The %s's id: the last part of its resource name %s.",
			singular(collection), pathResourcePattern(path, name))
	}
}

// collectionOf is the path segment before {name} in path ("sessions" for
// {session} in /v1/sessions/{session}/events), or "".
func collectionOf(path, name string) string {
	before, _, ok := strings.Cut(path, "/{"+name+"}")
	if !ok {
		return ""
	}
	return before[strings.LastIndex(before, "/")+1:]
}

// pathResourcePattern is the resource name pattern of {name} in path:
// "sessions/{session}/plans/{plan}" for {plan}.
func pathResourcePattern(path, name string) string {
	end := strings.Index(path, "{"+name+"}") + len(name) + 2
	return strings.TrimPrefix(path[:end], "/v1/")
}

// singular is a collection's singular ("entries" → "entry").
func singular(collection string) string {
	if strings.HasSuffix(collection, "ies") {
		return strings.TrimSuffix(collection, "ies") + "y"
	}
	return strings.TrimSuffix(collection, "s")
}

// renamePathParams gives the path parameters the generator named by
// cutting an "s" ({entrie} for entries, {repositorie} for repositories)
// their singular name, in the path and in its operations' parameters.
func renamePathParams(paths map[string]any) {
	all := make([]string, 0, len(paths))
	for path := range paths {
		all = append(all, path)
	}
	for _, path := range all {
		p := paths[path]
		renamed := path
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			name := m[1]
			collection := collectionOf(path, name)
			if !strings.HasSuffix(collection, "ies") || name != strings.TrimSuffix(collection, "s") {
				continue
			}
			good := singular(collection)
			renamed = strings.Replace(renamed, "{"+name+"}", "{"+good+"}", 1)
			ops, _ := p.(map[string]any)
			for _, o := range ops {
				op, _ := o.(map[string]any)
				params, _ := op["parameters"].([]any)
				for _, param := range params {
					if param, _ := param.(map[string]any); param["in"] == "path" && param["name"] == name {
						param["name"] = good
					}
				}
			}
		}
		if renamed != path {
			delete(paths, path)
			paths[renamed] = p
		}
	}
}
