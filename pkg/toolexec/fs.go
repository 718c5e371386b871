package toolexec

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// UserFixableError is a failure the user can fix, with the fix to try.
type UserFixableError struct {
	Msg string
	Fix string
}

func (e *UserFixableError) Error() string { return e.Msg + " (" + e.Fix + ")" }

// WriteRecord is the audit entry of one write (spec C-30).
type WriteRecord struct {
	Session  string
	Pipeline string
	// Path is the requested path; Target where the bytes went (the staging
	// copy for a pipeline write).
	Path   string
	Target string
	Size   int
	Time   time.Time
}

// FS is the filesystem write path: permission pre-check, symlink-resolving
// boundary check, staging of pipeline writes, audit, then the write.
type FS struct {
	boundary    *Boundary
	projectRoot string
	stagingRoot string
	audit       func(context.Context, WriteRecord)
}

// NewFS builds the write path for a project; writes made for a pipeline go
// to stagingRoot/<pipeline>/<path relative to the project>. audit may be nil.
func NewFS(boundary *Boundary, projectRoot, stagingRoot string, audit func(context.Context, WriteRecord)) (*FS, error) {
	pr, err := filepath.EvalSymlinks(projectRoot)
	if err != nil {
		return nil, fmt.Errorf("project root: %w", err)
	}
	sr, err := filepath.EvalSymlinks(stagingRoot)
	if err != nil {
		return nil, fmt.Errorf("staging root: %w", err)
	}
	return &FS{boundary: boundary, projectRoot: pr, stagingRoot: sr, audit: audit}, nil
}

// Write writes data to path for a session and, when pipeline is set, into
// that pipeline's staging area. It returns where the bytes went.
func (f *FS) Write(ctx context.Context, session, pipeline, path string, data []byte) (string, error) {
	if err := writable(path); err != nil {
		return "", err
	}
	resolved, err := f.boundary.CheckPath(path)
	if err != nil {
		return "", err
	}
	target := resolved
	if pipeline != "" {
		rel, err := filepath.Rel(f.projectRoot, resolved)
		if err != nil || !within(f.projectRoot, resolved) {
			return "", fmt.Errorf("path %s: pipeline writes must be inside the project", path)
		}
		target = filepath.Join(f.stagingRoot, filepath.Base(filepath.Clean("/"+pipeline)), rel)
	}
	if f.audit != nil {
		f.audit(ctx, WriteRecord{Session: session, Pipeline: pipeline, Path: path, Target: target, Size: len(data), Time: time.Now()})
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(target, data, 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return target, nil
}

// writable pre-checks that the nearest existing directory of path can be
// written: its owner write bit is set (root ignores permissions, so the
// mode bits are checked too) and access(2) agrees.
func writable(path string) error {
	dir := filepath.Dir(filepath.Clean(path))
	for {
		info, err := os.Stat(dir)
		if err == nil {
			if !info.IsDir() || info.Mode().Perm()&0o200 == 0 || syscall.Access(dir, 2) != nil {
				return &UserFixableError{Msg: "cannot write to " + dir, Fix: "Check permissions: ls -la " + dir}
			}
			return nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return &UserFixableError{Msg: "cannot write to " + path, Fix: "Check permissions: ls -la " + dir}
		}
		dir = parent
	}
}
