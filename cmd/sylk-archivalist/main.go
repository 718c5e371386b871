// Command sylk-archivalist runs the archivalist service on its own. Its flags are those of
// "sylk serve archivalist"; "sylk-archivalist healthcheck" checks a running one.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.ServiceMain("archivalist", os.Args[1:]))
}
