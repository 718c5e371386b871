package librarian

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/secrets"
	"sylk.dev/sylk/pkg/tooldetect"
)

// sniffBytes is how much of a file is checked for a NUL byte, the sign of a
// binary file.
const sniffBytes = 8 << 10

// skippedDirs are never descended into, in addition to hidden directories.
var skippedDirs = tooldetect.SkippedDirs

// Reasons a file is not indexed; they label the index metric.
const (
	resultIndexed  = "indexed"
	skipBinary     = "skipped_binary"
	skipTooLarge   = "skipped_too_large"
	skipSymlink    = "skipped_symlink"
	skipUnreadable = "skipped_unreadable"
	skipNotRegular = "skipped_not_regular"
	skipIgnored    = "skipped_ignored"
	skipGenerated  = "skipped_generated"
)

// chunk is one unit of a file: a declaration, a section or a line window.
type chunk struct {
	id                 string
	lineStart, lineEnd int
	content            string
	tokens             string
	pathTokens         string
	symbol, kind       string
	names              []string
	hash               []byte
	embedding          []float32
}

// sourceFile is one indexed file.
type sourceFile struct {
	path      string // slash-separated, relative to the repository root
	language  string
	size      int64
	lineCount int
	sha256    []byte
	chunks    []chunk
	symbols   []symbolRow
	edges     []edgeRow
}

// walker reads a repository's indexable files.
type walker struct {
	root         string // absolute, symlinks resolved
	maxFileBytes int64
	maxFiles     int
	chunkLines   int
	overlap      int
	// maxChunkLines is the longest unit kept whole.
	maxChunkLines int
	// ignore holds the configured and .gitignore patterns.
	ignore ignoreRules
	// modulePath qualifies Go symbol ids ("std" for the standard library).
	modulePath string
	// skipped counts files left out, by reason.
	skipped map[string]int
	indexed int
	// onError, when set, hears of each file that could not be read.
	onError func(rel string)
}

// walk calls fn for each indexable file under w.root, in lexical order.
func (w *walker) walk(ctx context.Context, fn func(sourceFile) error) error {
	w.skipped = map[string]int{}
	return filepath.WalkDir(w.root, func(p string, d fs.DirEntry, err error) error {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if err != nil {
			if p == w.root {
				return unreadable("repository directory cannot be read")
			}
			// An unreadable directory or entry is left out, not fatal.
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			w.unreadable(p)
			return nil
		}
		if p == w.root {
			return nil
		}
		name := d.Name()
		rel, err := filepath.Rel(w.root, p)
		if err != nil {
			return fmt.Errorf("relative path of %s: %w", p, err)
		}
		if d.IsDir() {
			if strings.HasPrefix(name, ".") || skippedDirs[name] || w.ignore.match(filepath.ToSlash(rel), true) {
				return fs.SkipDir
			}
			return nil
		}
		if w.ignore.match(filepath.ToSlash(rel), false) {
			w.skipped[skipIgnored]++
			return nil
		}
		real := p
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, ok := w.symlinkTarget(p)
			if !ok {
				w.skipped[skipSymlink]++
				return nil
			}
			real = target
		case !d.Type().IsRegular():
			w.skipped[skipNotRegular]++
			return nil
		}
		f, reason := w.read(real, filepath.ToSlash(rel))
		if reason == skipUnreadable {
			w.unreadable(p)
			return nil
		}
		if reason != "" {
			w.skipped[reason]++
			return nil
		}
		if w.indexed >= w.maxFiles {
			return apierr.FailedPrecondition(reasonRepositoryTooLarge, "repository has more than %d indexable files (librarian.max-files)", w.maxFiles)
		}
		w.indexed++
		return fn(f)
	})
}

// unreadable counts a file that could not be read and reports it by its
// path relative to the root.
func (w *walker) unreadable(p string) {
	w.skipped[skipUnreadable]++
	if w.onError == nil {
		return
	}
	if rel, err := filepath.Rel(w.root, p); err == nil {
		w.onError(filepath.ToSlash(rel))
	}
}

// openInside opens the file p inside the directory root for reading, its
// links resolved: when they lead outside root it fails. The file is opened
// through root, so that a directory on its way swapped for a link leading
// out after the resolution (a race with a writer of the checkout) is
// refused too. Non-blocking, so that a FIFO in a file's place cannot stall
// the open; callers read only regular files.
func openInside(root, p string) (*os.File, error) {
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root, resolved)
	if err != nil || !within(root, resolved) {
		return nil, fmt.Errorf("%s leads outside the repository", p)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// symlinkTarget resolves a symlink found in the tree. It reports false for
// links that dangle, resolve outside the root, or point at anything but a
// regular file (linked directories are not followed: their files are
// indexed where they really live, and following them could loop).
func (w *walker) symlinkTarget(p string) (string, bool) {
	target, err := filepath.EvalSymlinks(p)
	if err != nil || !within(w.root, target) {
		return "", false
	}
	// A link must not expose what the walk leaves out on purpose.
	rel, err := filepath.Rel(w.root, target)
	if err != nil || excluded(filepath.ToSlash(rel)) {
		return "", false
	}
	info, err := os.Stat(target)
	if err != nil || !info.Mode().IsRegular() {
		return "", false
	}
	return target, true
}

// read loads and chunks one file, or returns why it is skipped. real was
// found inside the root, but may lead out by now (openInside).
func (w *walker) read(real, rel string) (sourceFile, string) {
	fh, err := openInside(w.root, real)
	if err != nil {
		return sourceFile{}, skipUnreadable
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return sourceFile{}, skipUnreadable
	}
	if info.Size() > w.maxFileBytes {
		return sourceFile{}, skipTooLarge
	}
	// Read one byte past the limit: the file may have grown since Stat.
	data, err := io.ReadAll(io.LimitReader(fh, w.maxFileBytes+1))
	if err != nil {
		return sourceFile{}, skipUnreadable
	}
	if int64(len(data)) > w.maxFileBytes {
		return sourceFile{}, skipTooLarge
	}
	if bytes.IndexByte(data[:min(len(data), sniffBytes)], 0) >= 0 {
		return sourceFile{}, skipBinary
	}
	sum := sha256.Sum256(data)
	if sensitive(path.Base(rel)) {
		return w.stub(rel, int64(len(data)), sum[:]), ""
	}
	if generated(data) {
		return sourceFile{}, skipGenerated
	}
	text := secrets.Scrub(cleanText(data))
	lines := splitLines(text)
	lang := detectLanguage(rel)
	f := sourceFile{
		path:      rel,
		language:  lang,
		size:      int64(len(data)),
		lineCount: len(lines),
		sha256:    sum[:],
	}
	var spans []span
	if lang == "go" {
		if u, ok := goUnits(rel, text, len(lines), w.goPackage(rel)); ok {
			spans, f.symbols, f.edges = u.spans, u.symbols, u.edges
		}
	}
	if spans == nil {
		spans = heuristicUnits(lang, lines)
		f.symbols, f.edges = otherUnits(lang, rel, lines, spans)
	}
	f.edges = w.finishEdges(rel, f.symbols, f.edges)
	f.chunks = buildChunks(rel, lines, trimSpans(lines, spans), w.maxChunkLines, w.chunkLines, w.overlap)
	for i := range f.chunks {
		h := sha256.Sum256([]byte(f.chunks[i].content))
		f.chunks[i].hash = h[:]
	}
	return f, ""
}

// stub is what a sensitive file is indexed as: its name and type, never
// its contents.
func (w *walker) stub(rel string, size int64, sum []byte) sourceFile {
	ext := strings.TrimPrefix(path.Ext(rel), ".")
	if ext == "" {
		ext = "none"
	}
	content := "# " + path.Base(rel) + "\n(contents not indexed for security)\n\nFile type: " + ext
	c := chunk{
		id: chunkID(rel, kindStub, "", 0, 0), lineStart: 1, lineEnd: 4, content: content,
		tokens: tokenText(content), pathTokens: pathTokens(rel), kind: kindStub,
	}
	h := sha256.Sum256([]byte(content))
	c.hash = h[:]
	return sourceFile{path: rel, language: detectLanguage(rel), size: size, lineCount: 4, sha256: sum, chunks: []chunk{c}}
}

// finishEdges drops type edges whose target is not a type of the
// repository and adds a defines edge (file -> symbol) per definition.
func (w *walker) finishEdges(rel string, syms []symbolRow, edges []edgeRow) []edgeRow {
	out := edges[:0]
	for _, e := range edges {
		switch e.kind {
		case edgeEmbeds, edgeHasField, edgeReturns, edgeReceives:
			if !typeEdgeInRepo(e.target, w.goPackage(rel), w.modulePath) {
				continue
			}
		}
		out = append(out, e)
	}
	for _, s := range syms {
		out = append(out, edgeRow{source: "file:" + rel, target: s.id, kind: edgeDefines, path: rel, line: s.lineStart})
	}
	return out
}

// goPackage is the import path of the package of a Go file.
func (w *walker) goPackage(rel string) string {
	dir := path.Dir(rel)
	switch {
	case w.modulePath == "" || w.modulePath == "std":
		if dir == "." {
			return "main"
		}
		return dir
	case dir == ".":
		return w.modulePath
	}
	return w.modulePath + "/" + dir
}

// trimSpans drops blank lines at the edges of spans and spans left empty.
func trimSpans(lines []string, spans []span) []span {
	out := spans[:0]
	for _, sp := range spans {
		for sp.start <= sp.end && sp.start <= len(lines) && strings.TrimSpace(lines[sp.start-1]) == "" {
			sp.start++
		}
		for sp.end >= sp.start && sp.end <= len(lines) && strings.TrimSpace(lines[sp.end-1]) == "" {
			sp.end--
		}
		if sp.start <= sp.end {
			out = append(out, sp)
		}
	}
	return out
}

// generated reports whether a file carries the standard "generated, do
// not edit" marker near its top.
func generated(data []byte) bool {
	head := data[:min(len(data), 2048)]
	i := bytes.Index(head, []byte("Code generated "))
	return i >= 0 && bytes.Contains(head[i:], []byte("DO NOT EDIT"))
}

// cleanText makes file bytes storable as database text: invalid UTF-8
// becomes U+FFFD and stray NUL bytes (past the binary sniff) are dropped.
func cleanText(data []byte) string {
	s := string(data)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ReplaceAll(s, "\x00", "")
}

// splitLines splits text into lines without their terminators ("\n" or
// "\r\n"). A final newline does not start another line.
func splitLines(text string) []string {
	if text == "" {
		return nil
	}
	text = strings.TrimSuffix(text, "\n")
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

// chunkLines cuts lines into windows of size lines sharing overlap lines,
// never splitting a line. Line numbers are 1-based and inclusive. prefix
// (the file's path tokens) starts every chunk's token text so that a search
// for a file's name finds it.
func chunkLines(lines []string, size, overlap int, prefix string) []chunk {
	var out []chunk
	for start := 0; start < len(lines); {
		end := min(start+size, len(lines))
		content := strings.Join(lines[start:end], "\n")
		tokens := tokenText(content)
		if prefix != "" {
			tokens = prefix + " " + tokens
		}
		out = append(out, chunk{lineStart: start + 1, lineEnd: end, content: content, tokens: tokens})
		if end == len(lines) {
			break
		}
		start = end - overlap
	}
	return out
}

// pathTokens are the tokens of a file's name (without extension) and of
// its directory's name.
func pathTokens(rel string) string {
	base := path.Base(rel)
	base = strings.TrimSuffix(base, path.Ext(base))
	dir := path.Base(path.Dir(rel))
	if dir == "." {
		dir = ""
	}
	return tokenText(dir + " " + base)
}

// excluded reports whether a path relative to the root lies in a directory
// the walk skips or names a credentials file.
func excluded(rel string) bool {
	parts := strings.Split(rel, "/")
	for _, dir := range parts[:len(parts)-1] {
		if strings.HasPrefix(dir, ".") || skippedDirs[dir] {
			return true
		}
	}
	return sensitive(parts[len(parts)-1])
}

// sensitive reports whether a file name marks credentials, which are never
// indexed.
func sensitive(name string) bool {
	lower := strings.ToLower(name)
	switch {
	case lower == ".env" || strings.HasPrefix(lower, ".env."),
		lower == ".netrc", lower == ".npmrc", lower == ".pgpass", lower == ".pypirc",
		strings.Contains(lower, "credentials"), strings.Contains(lower, "secrets"),
		strings.HasPrefix(lower, "id_rsa"), strings.HasPrefix(lower, "id_ecdsa"), strings.HasPrefix(lower, "id_ed25519"):
		return true
	}
	switch path.Ext(lower) {
	case ".pem", ".key", ".p12", ".pfx", ".jks", ".keystore":
		return true
	}
	return false
}

// within reports whether target is root or inside it, by path relation
// (never by string prefix). Both must be absolute and clean.
func within(root, target string) bool {
	rel, err := filepath.Rel(root, target)
	if err != nil {
		return false
	}
	return rel == "." || rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// detectLanguage names a file's language from its name, "text" when unknown.
func detectLanguage(rel string) string { return tooldetect.Language(rel) }
