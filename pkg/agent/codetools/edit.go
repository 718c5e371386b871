package codetools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/llm"
)

// maxWriteBytes is the largest file write_file and the edits leave.
const maxWriteBytes = 2 << 20

// edit is one exact-string replacement.
type edit struct {
	Old        string `json:"old_string"`
	New        string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

func editProps() map[string]any {
	return map[string]any{
		"old_string":  str("The exact text to replace, whitespace and indentation included; it must occur once unless replace_all."),
		"new_string":  str("The text to put in its place."),
		"replace_all": boolean("Replace every occurrence of old_string."),
	}
}

func (w *Workspace) editFileTool() agent.Tool {
	props := editProps()
	props["path"] = str("Path relative to the repository root.")
	return agent.Tool{Writes: true, Def: llm.Tool{Name: "edit_file",
		Description: "Replace an exact string in a file. old_string must match the file's text exactly (read the file first) and be unique unless replace_all is set; include enough surrounding lines to make it unique.",
		Schema:      schema([]string{"path", "old_string", "new_string"}, props)},
		Run: func(_ context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Path string `json:"path"`
				edit
			}
			if err := decode(raw, &a); err != nil {
				return "", err
			}
			return w.applyEdits(a.Path, []edit{a.edit})
		}}
}

func (w *Workspace) multiEditTool() agent.Tool {
	return agent.Tool{Writes: true, Def: llm.Tool{Name: "multi_edit",
		Description: "Make several exact-string replacements in one file, in order, each on the result of the one before. All apply or none does.",
		Schema: schema([]string{"path", "edits"}, map[string]any{
			"path": str("Path relative to the repository root."),
			"edits": map[string]any{"type": "array", "minItems": 1, "description": "The replacements, in order.",
				"items": schema([]string{"old_string", "new_string"}, editProps())},
		})},
		Run: func(_ context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Path  string `json:"path"`
				Edits []edit `json:"edits"`
			}
			if err := decode(raw, &a); err != nil {
				return "", err
			}
			if len(a.Edits) == 0 {
				return "", errors.New("edits is empty")
			}
			return w.applyEdits(a.Path, a.Edits)
		}}
}

// applyEdits applies edits to a file in memory and writes the result only
// when every one applied (spec E-13).
func (w *Workspace) applyEdits(p string, edits []edit) (string, error) {
	rel, err := writablePath(p)
	if err != nil {
		return "", err
	}
	data, err := w.readBounded(rel)
	if err != nil {
		return "", err
	}
	text := string(data)
	first := -1
	for i, e := range edits {
		next, at, err := replace(text, e)
		if err != nil {
			if len(edits) > 1 {
				return "", fmt.Errorf("edit %d of %d: %v; no edit was applied", i+1, len(edits), err)
			}
			return "", fmt.Errorf("%s: %v", rel, err)
		}
		if first < 0 || at < first {
			first = at
		}
		text = next
	}
	if err := w.write(rel, text); err != nil {
		return "", err
	}
	line := strings.Count(text[:first], "\n") + 1
	out := fmt.Sprintf("edited %s (%d %s); around the first change:\n", rel, len(edits), plural(len(edits), "edit", "edits"))
	snippet, _ := w.readFile(rel, max(line-3, 1), line+8)
	return out + snippet, nil
}

// replace applies one edit and returns where it changed text.
func replace(text string, e edit) (string, int, error) {
	if e.Old == "" {
		return "", 0, errors.New("old_string is empty: to create a file use write_file")
	}
	if e.Old == e.New {
		return "", 0, errors.New("old_string and new_string are the same")
	}
	n := strings.Count(text, e.Old)
	switch {
	case n == 0:
		return "", 0, errors.New(notFoundHint(text, e.Old))
	case n > 1 && !e.ReplaceAll:
		return "", 0, fmt.Errorf("old_string occurs %d times; add surrounding lines to make it unique, or set replace_all", n)
	}
	at := strings.Index(text, e.Old)
	if e.ReplaceAll {
		return strings.ReplaceAll(text, e.Old, e.New), at, nil
	}
	return text[:at] + e.New + text[at+len(e.Old):], at, nil
}

// notFoundHint says old_string is absent, and whether it is there but for
// white space.
func notFoundHint(text, old string) string {
	msg := "old_string was not found"
	squash := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if strings.Contains(squash(text), squash(old)) {
		return msg + " exactly, but it is there with other white space or indentation: read the lines again and copy them exactly"
	}
	if first := strings.TrimSpace(strings.SplitN(strings.TrimSpace(old), "\n", 2)[0]); first != "" && strings.Contains(text, first) {
		return msg + fmt.Sprintf("; its first line %q is there, so a later line differs: read the file again", first)
	}
	return msg + ": read the file again and copy the text exactly"
}

func (w *Workspace) writeFileTool() agent.Tool {
	return agent.Tool{Writes: true, Def: llm.Tool{Name: "write_file",
		Description: "Write a whole file: create a new file (with its directories) or replace a file's content entirely. Prefer edit_file for changes to an existing file.",
		Schema: schema([]string{"path", "content"}, map[string]any{
			"path":    str("Path relative to the repository root."),
			"content": str("The file's complete content."),
		})},
		Run: func(_ context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Path    string `json:"path"`
				Content string `json:"content"`
			}
			if err := decode(raw, &a); err != nil {
				return "", err
			}
			rel, err := writablePath(a.Path)
			if err != nil {
				return "", err
			}
			if w.isDir(rel) {
				return "", fmt.Errorf("%s is a directory", rel)
			}
			_, statErr := w.root.Stat(rel)
			if err := w.write(rel, a.Content); err != nil {
				return "", err
			}
			verb := "replaced"
			if errors.Is(statErr, fs.ErrNotExist) {
				verb = "created"
			}
			return fmt.Sprintf("%s %s (%d lines)", verb, rel, len(splitLines(a.Content))), nil
		}}
}

// write writes a file of the workspace, making its directories, and keeps
// an existing file's mode.
func (w *Workspace) write(rel, content string) error {
	if len(content) > maxWriteBytes {
		return fmt.Errorf("%s would be %d bytes, over the limit of %d", rel, len(content), maxWriteBytes)
	}
	if dir := path.Dir(rel); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make %s: %v", dir, pathErr(err))
		}
	}
	mode := fs.FileMode(0o644)
	if fi, err := w.root.Lstat(rel); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", rel)
		}
		mode = fi.Mode().Perm()
	}
	if err := w.root.WriteFile(rel, []byte(content), mode); err != nil {
		return fmt.Errorf("write %s: %v", rel, pathErr(err))
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
