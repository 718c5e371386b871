// Command openapidump writes the OpenAPI document the gateway serves at
// /openapi.json (with -v3, the OpenAPI 3 one of /openapi.v3.json) to
// standard output or to the file named by -o, so that it can be linted
// without a running gateway (make openapi-lint).
package main

import (
	"flag"
	"fmt"
	"os"

	"sylk.dev/sylk/gateway"
)

func main() {
	out := flag.String("o", "", "write the document to this file instead of standard output")
	v3 := flag.Bool("v3", false, "the OpenAPI 3 document instead of the Swagger 2.0 one")
	flag.Parse()
	if err := run(*out, *v3); err != nil {
		fmt.Fprintln(os.Stderr, "openapidump:", err)
		os.Exit(1)
	}
}

func run(out string, v3 bool) error {
	document := gateway.OpenAPIDocument
	if v3 {
		document = gateway.OpenAPIv3Document
	}
	doc, err := document()
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(doc)
		return err
	}
	return os.WriteFile(out, doc, 0o644)
}
