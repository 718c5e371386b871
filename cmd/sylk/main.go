// Command sylk runs the Sylk mesh (the whole of it for local use with sylk dev,
// one service at a time, migrations, API-key administration) and is its
// client: sylk login, chat, ask, search, repos, plans, runs and keys.
package main

import (
	"os"

	"sylk.dev/sylk/internal/mesh"
)

func main() {
	os.Exit(mesh.Main(os.Args[1:], os.Stdout, os.Stderr))
}
