// Package console holds the console's built static files (dist/, made by
// `make console` from the TypeScript sources beside it), embedded so that
// the gateway serves them without node at run time.
package console

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// FS returns the built console: index.html at its root, assets under
// assets/.
func FS() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// dist is embedded at build time; Sub fails only on a bad name.
		panic(err)
	}
	return sub
}
