// Command sylk-gateway runs the gateway service on its own. Its flags are those of
// "sylk serve gateway"; "sylk-gateway healthcheck" checks a running one.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.ServiceMain("gateway", os.Args[1:]))
}
