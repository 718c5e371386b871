// Command sylk-academic runs the academic service on its own. Its flags are those of
// "sylk serve academic"; "sylk-academic healthcheck" checks a running one.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.ServiceMain("academic", os.Args[1:]))
}
