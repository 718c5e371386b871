// Command sylk-worker runs the worker service on its own. Its flags are those of
// "sylk serve worker"; "sylk-worker healthcheck" checks a running one.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.ServiceMain("worker", os.Args[1:]))
}
