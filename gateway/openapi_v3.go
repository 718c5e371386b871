package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

// OpenAPIv3Document returns the OpenAPI 3 document the gateway serves at
// /openapi.v3.json: the Swagger 2.0 document of /openapi.json converted,
// for tools that read only OpenAPI 3.
func OpenAPIv3Document() ([]byte, error) {
	v2, err := openAPIDocument()
	if err != nil {
		return nil, err
	}
	return openAPIv3(v2)
}

// servedOpenAPIv3 is OpenAPIv3Document, made once on first use: the
// embedded document does not change.
var servedOpenAPIv3 = sync.OnceValues(OpenAPIv3Document)

// openAPIv3 converts the Swagger 2.0 document v2 and checks the result.
func openAPIv3(v2 []byte) ([]byte, error) {
	var doc2 openapi2.T
	if err := json.Unmarshal(v2, &doc2); err != nil {
		return nil, fmt.Errorf("parse OpenAPI 2 document: %w", err)
	}
	doc3, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return nil, fmt.Errorf("convert OpenAPI document to version 3: %w", err)
	}
	fixV3Content(doc3)
	// Swagger 2.0 without a host means the host that serves the document.
	doc3.Servers = openapi3.Servers{{URL: "/", Description: "The gateway that serves this document."}}
	if err := doc3.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("OpenAPI 3 document: %w", err)
	}
	b, err := json.Marshal(doc3)
	if err != nil {
		return nil, fmt.Errorf("encode OpenAPI 3 document: %w", err)
	}
	return b, nil
}

// fixV3Content corrects what the conversion cannot know: an operation's
// produces become the content types of all its responses, but only its
// 200 streams; errors are always application/json, and a server-sent
// event stream is text, not one JSON line.
func fixV3Content(doc *openapi3.T) {
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for code, r := range op.Responses.Map() {
				if r.Value == nil || len(r.Value.Content) < 2 && r.Value.Content.Get(mimeNDJSON) == nil {
					continue
				}
				if code != "200" {
					schema := r.Value.Content.Get(mimeNDJSON).Schema
					r.Value.Content = openapi3.NewContentWithJSONSchemaRef(schema)
					continue
				}
				if sse := r.Value.Content.Get(mimeSSE); sse != nil {
					text := openapi3.NewStringSchema()
					text.Description = "Server-sent events: per event an \"id\" (its sequence), an \"event\" " +
						"(its type) and a \"data\" line (the event as JSON); see the operation's description."
					sse.Schema = openapi3.NewSchemaRef("", text)
				}
			}
		}
	}
}
