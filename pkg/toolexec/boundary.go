package toolexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Boundary errors (spec C-25, C-30).
var (
	ErrNotAbsolute     = errors.New("invalid working directory: must be absolute path")
	ErrOutsideBoundary = errors.New("directory outside allowed boundaries")
	// ErrOutsideWorkspace is a working directory that resolves outside the
	// workspace its call names.
	ErrOutsideWorkspace = errors.New("working directory outside its workspace")
)

// systemDirs are never acceptable roots, nor places a tool may run in.
var systemDirs = []string{"/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/sbin", "/sys", "/usr", "/var"}

// Boundary holds the directories tools may run and write in: the project
// root, the staging root, the temp root and any extra allowed paths. Every
// check resolves symlinks first and then tests relative-path containment,
// so /proj2 is not inside /proj and a link inside the project pointing out
// of it is refused.
type Boundary struct {
	roots []string
}

// NewBoundary resolves roots (empty ones are ignored). A root that is the
// home directory, a system directory or missing is an error.
func NewBoundary(roots ...string) (*Boundary, error) {
	home, _ := os.UserHomeDir()
	b := &Boundary{}
	for _, r := range roots {
		if r == "" {
			continue
		}
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("boundary root %q: must be absolute path", r)
		}
		res, err := filepath.EvalSymlinks(r)
		if err != nil {
			return nil, fmt.Errorf("boundary root %q: %w", r, err)
		}
		if isSystemOrHome(res, home) {
			return nil, fmt.Errorf("boundary root %q: the home directory and system directories cannot be roots", r)
		}
		b.roots = append(b.roots, res)
	}
	if len(b.roots) == 0 {
		return nil, errors.New("boundary: at least one root is required")
	}
	return b, nil
}

func isSystemOrHome(p, home string) bool {
	if home != "" && p == filepath.Clean(home) {
		return true
	}
	for _, s := range systemDirs {
		if p == s {
			return true
		}
	}
	return false
}

// Roots are the resolved roots.
func (b *Boundary) Roots() []string { return append([]string(nil), b.roots...) }

// Contains reports whether the resolved path p lies within a root.
func (b *Boundary) contains(p string) bool {
	for _, r := range b.roots {
		if within(r, p) {
			return true
		}
	}
	return false
}

// within reports whether p is root or below it, by relative path.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel))
}

// CheckDir validates a working directory: absolute, existing, and inside a
// root after resolving symlinks. It returns the resolved directory.
func (b *Boundary) CheckDir(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", ErrNotAbsolute
	}
	res, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("invalid working directory: %w", err)
	}
	if !b.contains(res) {
		return "", ErrOutsideBoundary
	}
	return res, nil
}

// CheckPath validates a file path that may not exist yet: the path itself
// when it exists, else its nearest existing ancestor, is resolved, and the
// result must be inside a root. It returns the resolved path.
func (b *Boundary) CheckPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %s: must be absolute path", p)
	}
	p = filepath.Clean(p)
	rest := ""
	cur := p
	for {
		res, err := filepath.EvalSymlinks(cur)
		if err == nil {
			full := filepath.Join(res, rest)
			if !b.contains(full) {
				return "", fmt.Errorf("path %s resolves to %s which is outside allowed boundaries", p, full)
			}
			return full, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("path %s: %w", p, err)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", fmt.Errorf("path %s: no existing ancestor", p)
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
