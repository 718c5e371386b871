// Package openapi embeds the OpenAPI (Swagger 2.0) document generated from
// the protos, so the gateway can serve it at /openapi.json.
package openapi

import _ "embed"

//go:embed sylk.swagger.json
var document []byte

// JSON returns the generated OpenAPI document. Callers must not modify the
// returned bytes.
func JSON() []byte { return document }
