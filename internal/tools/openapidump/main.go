// Command openapidump writes the OpenAPI document the gateway serves at
// /openapi.json to standard output or to the file named by -o, so that it
// can be linted without a running gateway (make openapi-lint).
package main

import (
	"flag"
	"fmt"
	"os"

	"sylk.dev/sylk/gateway"
)

func main() {
	out := flag.String("o", "", "write the document to this file instead of standard output")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "openapidump:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	doc, err := gateway.OpenAPIDocument()
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(doc)
		return err
	}
	return os.WriteFile(out, doc, 0o644)
}
