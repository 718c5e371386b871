// Command openapidump prints the OpenAPI document the gateway serves at
// /openapi.json, so that clients (the console) generate their types from
// exactly what is served.
package main

import (
	"fmt"
	"os"

	"sylk.dev/sylk/gateway"
)

func main() {
	doc, err := gateway.OpenAPIDocument()
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapidump:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(doc); err != nil {
		fmt.Fprintln(os.Stderr, "openapidump:", err)
		os.Exit(1)
	}
}
