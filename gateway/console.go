package gateway

import (
	"bytes"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"sylk.dev/sylk/web/console"
)

// consoleCSP lets the console load only its own scripts, styles and
// images and talk only to this origin; nothing inline runs.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// consoleAssets is the folder of the console's content-hashed files.
const consoleAssets = "/assets/"

// consoleFiles serves the embedded console (web/console).
type consoleFiles struct {
	fs    fs.FS
	index []byte
}

func newConsoleFiles(fsys fs.FS) (*consoleFiles, error) {
	index, err := fs.ReadFile(fsys, "index.html")
	if err != nil {
		return nil, err
	}
	return &consoleFiles{fs: fsys, index: index}, nil
}

// consoleRequest reports whether r asks for the console rather than the
// API: GET or HEAD of /, of an asset, or of any other page outside /v1/
// that a browser navigates to (Accept: text/html), which the console's
// router resolves.
func consoleRequest(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	switch {
	case p == "/" || p == "/index.html" || strings.HasPrefix(p, consoleAssets):
		return true
	case p == "/v1" || strings.HasPrefix(p, "/v1/"):
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// serve answers a console request: the asset asked for, or index.html.
// Assets are named by their content and cached for good; index.html is
// revalidated every time.
func (c *consoleFiles) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	if strings.HasPrefix(r.URL.Path, consoleAssets) {
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		b, err := fs.ReadFile(c.fs, name)
		if err != nil {
			writeError(w, errRouteNotFound.Withf("no console file %s", r.URL.Path))
			return
		}
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
		return
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", "text/html; charset=utf-8")
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(c.index))
}

// consoleFS is the built console the gateway serves.
func consoleFS() fs.FS { return console.FS() }
