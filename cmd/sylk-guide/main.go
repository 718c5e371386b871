// Command sylk-guide runs the guide service on its own. Its flags are those of
// "sylk serve guide"; "sylk-guide healthcheck" checks a running one.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.ServiceMain("guide", os.Args[1:]))
}
