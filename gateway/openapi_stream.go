package gateway

import "strings"

// The media types of the streams.
const (
	mimeNDJSON = "application/x-ndjson"
	mimeSSE    = "text/event-stream"
)

// ndjsonDescription is the 200 response of a streaming operation.
const ndjsonDescription = "A stream of newline-delimited JSON (application/x-ndjson): one line {\"result\": ...} per " +
	"message, flushed as it comes. A failure after the first line ends the stream with a line {\"error\": Error}; a " +
	"failure before it is answered like any call, with an error status and an Error body."

// describeStream describes a streaming operation's framing; it leaves
// other operations as they are. The generator describes a stream as one
// object {"result": ...}: it is one line of it.
func describeStream(op, responses map[string]any) {
	ok, _ := responses["200"].(map[string]any)
	line, _ := ok["schema"].(map[string]any)
	props, _ := line["properties"].(map[string]any)
	if _, streams := props["result"]; !streams {
		return
	}
	props["error"] = map[string]any{"$ref": "#/definitions/" + errorDefinition}
	line["description"] = "One line of the stream: result, or error as the last line."
	ok["description"] = ndjsonDescription
	op["produces"] = []any{mimeNDJSON}
	if op["operationId"] != sseOperation {
		return
	}
	op["produces"] = []any{mimeNDJSON, mimeSSE}
	desc, _ := op["description"].(string)
	op["description"] = strings.TrimSpace(desc + sseDescription)
	ok["description"] = ndjsonDescription + " With text/event-stream: server-sent events, see the operation's description."
	params, _ := op["parameters"].([]any)
	op["parameters"] = append(params,
		map[string]any{"name": "format", "in": "query", "required": false, "type": "string", "enum": []any{"sse"},
			"description": "sse: stream server-sent events, as \"Accept: text/event-stream\" does."},
		map[string]any{"name": "Last-Event-ID", "in": "header", "required": false, "type": "string",
			"description": "Server-sent events only: the id of the last event received (a sequence number); the " +
				"stream resumes after it, and it wins over afterSequence. Browsers' EventSource sends it when " +
				"they reconnect."},
	)
}
