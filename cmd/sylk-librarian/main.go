// Command sylk-librarian runs the librarian service on its own. Its flags are those of
// "sylk serve librarian"; "sylk-librarian healthcheck" checks a running one.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.ServiceMain("librarian", os.Args[1:]))
}
