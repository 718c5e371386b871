package codetools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/llm"
)

// maxFileBytes is the largest file read_file and grep read.
const maxFileBytes = 4 << 20

// maxLineChars cuts a long line in what the tools show.
const maxLineChars = 400

func (w *Workspace) readFileTool() agent.Tool {
	return agent.Tool{Def: llm.Tool{Name: "read_file",
		Description: fmt.Sprintf("Read a file of the repository, with line numbers. At most %d lines a call: give start_line and end_line to read a part or to read on.", w.cfg.MaxReadLines),
		Schema: schema([]string{"path"}, map[string]any{
			"path":       str("Path relative to the repository root."),
			"start_line": integer("First line to show (1-based)."),
			"end_line":   integer("Last line to show."),
		})},
		Run: func(_ context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Path      string `json:"path"`
				StartLine int    `json:"start_line"`
				EndLine   int    `json:"end_line"`
			}
			if err := decode(raw, &a); err != nil {
				return "", err
			}
			return w.readFile(a.Path, a.StartLine, a.EndLine)
		}}
}

// readFile shows lines [start, end] of a file, numbered, within the line
// cap, and says what it left out.
func (w *Workspace) readFile(p string, start, end int) (string, error) {
	rel, err := relPath(p)
	if err != nil {
		return "", err
	}
	if w.isDir(rel) {
		return "", fmt.Errorf("%s is a directory: list_files shows what it holds", rel)
	}
	data, err := w.readBounded(rel)
	if err != nil {
		return "", err
	}
	if isBinary(data) {
		return "", fmt.Errorf("%s is a binary file (%d bytes)", rel, len(data))
	}
	lines := splitLines(string(data))
	total := len(lines)
	if total == 0 {
		return fmt.Sprintf("%s is empty", rel), nil
	}
	start = max(start, 1)
	if end <= 0 || end > total {
		end = total
	}
	if start > total {
		return "", fmt.Errorf("%s has %d lines; start_line %d is past its end", rel, total, start)
	}
	if end < start {
		return "", fmt.Errorf("end_line %d is before start_line %d", end, start)
	}
	cut := false
	if end-start+1 > w.cfg.MaxReadLines {
		end, cut = start+w.cfg.MaxReadLines-1, true
	}
	var b strings.Builder
	width := len(fmt.Sprint(end))
	for i := start; i <= end; i++ {
		fmt.Fprintf(&b, "%*d\t%s\n", width, i, clipLine(lines[i-1]))
	}
	switch {
	case cut:
		fmt.Fprintf(&b, "[lines %d-%d of %d shown; read on with start_line=%d]\n", start, end, total, end+1)
	case start > 1 || end < total:
		fmt.Fprintf(&b, "[lines %d-%d of %d]\n", start, end, total)
	}
	return b.String(), nil
}

func (w *Workspace) readBounded(rel string) ([]byte, error) {
	f, err := w.root.Open(rel)
	if err != nil {
		return nil, notExist(rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, notExist(rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", rel)
	}
	if fi.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the %d the tools read: grep it instead", rel, fi.Size(), maxFileBytes)
	}
	return io.ReadAll(io.LimitReader(f, maxFileBytes))
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func isBinary(b []byte) bool {
	if len(b) > 8000 {
		b = b[:8000]
	}
	return bytes.IndexByte(b, 0) >= 0
}

func clipLine(s string) string {
	s = strings.TrimSuffix(s, "\r")
	if len(s) <= maxLineChars {
		return s
	}
	cut := maxLineChars
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + fmt.Sprintf(" [... %d more characters]", len(s)-cut)
}

func (w *Workspace) listFilesTool() agent.Tool {
	return agent.Tool{Def: llm.Tool{Name: "list_files",
		Description: "List the repository's files (ignored files left out), as they are now, your changes included. Narrow with a directory and/or a glob such as **/*.go.",
		Schema: schema(nil, map[string]any{
			"path": str("Directory relative to the repository root (default: the root)."),
			"glob": str("Glob on the path relative to the root; * does not cross /, ** does. Without a /, it matches the file name."),
		})},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct{ Path, Glob string }
			if err := decode(raw, &a); err != nil {
				return "", err
			}
			files, err := w.match(ctx, a.Path, a.Glob)
			if err != nil {
				return "", err
			}
			if len(files) == 0 {
				return "no files match", nil
			}
			shown := files
			if len(shown) > w.cfg.MaxListed {
				shown = shown[:w.cfg.MaxListed]
			}
			out := strings.Join(shown, "\n") + "\n"
			if len(files) > len(shown) {
				out += fmt.Sprintf("[%d of %d files shown; narrow with path or glob]\n", len(shown), len(files))
			}
			return out, nil
		}}
}

// match lists the files under dir that glob matches, sorted.
func (w *Workspace) match(ctx context.Context, dir, glob string) ([]string, error) {
	rel, err := relPath(dir)
	if err != nil {
		return nil, err
	}
	if rel != "." && !w.isDir(rel) {
		if _, err := w.root.Stat(rel); err != nil {
			return nil, notExist(rel, err)
		}
	}
	var re *regexp.Regexp
	if glob != "" {
		if re, err = globRegexp(glob); err != nil {
			return nil, err
		}
	}
	all, err := w.files(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range all {
		if rel != "." && f != rel && !strings.HasPrefix(f, rel+"/") {
			continue
		}
		if re != nil && !re.MatchString(f) && !(strings.IndexByte(glob, '/') < 0 && re.MatchString(path.Base(f))) {
			continue
		}
		out = append(out, f)
	}
	return out, nil
}

// files lists every file of the workspace.
func (w *Workspace) files(ctx context.Context) ([]string, error) {
	if w.cfg.Files != nil {
		files, err := w.cfg.Files(ctx)
		if err != nil {
			return nil, fmt.Errorf("list the repository's files: %w", err)
		}
		sort.Strings(files)
		return files, nil
	}
	var out []string
	err := fs.WalkDir(w.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".hg", ".svn":
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			out = append(out, p)
		}
		return ctx.Err()
	})
	sort.Strings(out)
	return out, err
}

// globRegexp turns a glob into an anchored regexp: * and ? do not cross a
// slash, ** does (and "**/" matches no directory too), [...] is a class.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		c := glob[i]
		switch {
		case c == '*' && i+1 < len(glob) && glob[i+1] == '*':
			i++
			if i+1 < len(glob) && glob[i+1] == '/' {
				i++
				b.WriteString("(?:.*/)?")
			} else {
				b.WriteString(".*")
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(glob[i:], ']')
			if j < 0 {
				return nil, errors.New("glob has a [ without ]")
			}
			class := glob[i+1 : i+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + class + "]")
			i += j
		case c == '{':
			j := strings.IndexByte(glob[i:], '}')
			if j < 0 {
				return nil, errors.New("glob has a { without }")
			}
			alts := strings.Split(glob[i+1:i+j], ",")
			for k := range alts {
				alts[k] = regexp.QuoteMeta(alts[k])
			}
			b.WriteString("(?:" + strings.Join(alts, "|") + ")")
			i += j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

func (w *Workspace) grepTool() agent.Tool {
	return agent.Tool{Def: llm.Tool{Name: "grep",
		Description: "Search the repository's files (your changes included) for a regular expression (RE2 syntax), line by line. Returns path:line: text.",
		Schema: schema([]string{"pattern"}, map[string]any{
			"pattern":     str("Regular expression, RE2 syntax."),
			"path":        str("Directory or file to search (default: the whole repository)."),
			"glob":        str("Only files whose path matches this glob (as list_files)."),
			"ignore_case": boolean("Match without regard to case."),
		})},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Pattern, Path, Glob string
				IgnoreCase          bool `json:"ignore_case"`
			}
			if err := decode(raw, &a); err != nil {
				return "", err
			}
			return w.grep(ctx, a.Pattern, a.Path, a.Glob, a.IgnoreCase)
		}}
}

func (w *Workspace) grep(ctx context.Context, pattern, dir, glob string, ignoreCase bool) (string, error) {
	if ignoreCase {
		pattern = "(?i)" + pattern
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return "", fmt.Errorf("pattern is not a valid RE2 regular expression: %v", err)
	}
	files, err := w.match(ctx, dir, glob)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	matches, inFiles := 0, 0
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		data, err := w.readBounded(f)
		if err != nil || isBinary(data) {
			continue
		}
		found := false
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64<<10), maxFileBytes)
		for n := 1; sc.Scan(); n++ {
			if !re.Match(sc.Bytes()) {
				continue
			}
			matches++
			found = true
			if matches <= w.cfg.MaxMatches {
				fmt.Fprintf(&b, "%s:%d: %s\n", f, n, clipLine(sc.Text()))
			}
		}
		if found {
			inFiles++
		}
	}
	if matches == 0 {
		return "no matches", nil
	}
	if matches > w.cfg.MaxMatches {
		fmt.Fprintf(&b, "[%d of %d matches (in %d files) shown; narrow with path, glob or a tighter pattern]\n", w.cfg.MaxMatches, matches, inFiles)
	}
	return b.String(), nil
}
