// Command sylk-orchestrator runs the orchestrator service on its own. Its flags are those of
// "sylk serve orchestrator"; "sylk-orchestrator healthcheck" checks a running one.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.ServiceMain("orchestrator", os.Args[1:]))
}
