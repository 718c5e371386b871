// Command sylk-architect runs the architect service on its own. Its flags are those of
// "sylk serve architect"; "sylk-architect healthcheck" checks a running one.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.ServiceMain("architect", os.Args[1:]))
}
