package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// applyEdits writes the node's explicit edits inside the checkout; a path
// that leaves it, lexically or through a symlink (one in the repository, or
// one an earlier command made), is refused before anything is created. The
// writes go through an os.Root, so a symlink swapped in meanwhile cannot
// lead out either.
func applyEdits(dir string, edits map[string]string) ([]string, error) {
	root, err := openDirRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open the workspace: %w", err)
	}
	defer root.Close()
	var written []string
	for p, content := range edits {
		clean := filepath.Clean(p)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || clean == ".git" || strings.HasPrefix(clean, ".git"+string(filepath.Separator)) {
			return written, fmt.Errorf("edit %q: must be a relative path inside the workspace", p)
		}
		if parent := filepath.Dir(clean); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return written, fmt.Errorf("edit %q: %w", p, err)
			}
		}
		if err := root.WriteFile(clean, []byte(content), 0o644); err != nil {
			return written, fmt.Errorf("edit %q: %w", p, err)
		}
		written = append(written, clean)
	}
	return written, nil
}

// openDirRoot opens dir as a root for the worker's own reads and writes,
// refusing a dir that is a symlink (the task's commands may have swapped
// its checkout for a link to another task's) or that changed while it was
// opened.
func openDirRoot(dir string) (*os.Root, error) {
	before, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !before.IsDir() {
		return nil, errDirReplaced
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	if opened, err := root.Stat("."); err != nil || !os.SameFile(before, opened) {
		root.Close()
		return nil, errDirReplaced
	}
	return root, nil
}
