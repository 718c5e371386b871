// Package migrations embeds the SQL migrations of every schema.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed */*.sql
var files embed.FS

// FS returns the migrations of one schema ("guide", "librarian", ...).
func FS(schema string) fs.FS {
	sub, err := fs.Sub(files, schema)
	if err != nil {
		panic(err) // unreachable: fs.Sub fails only on an invalid path
	}
	return sub
}
