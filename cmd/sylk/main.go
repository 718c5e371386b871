// Command sylk runs the Sylk mesh: the whole of it for local use (sylk dev),
// one service at a time, migrations, and API-key administration.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.Main(os.Args[1:], os.Stdout, os.Stderr))
}
