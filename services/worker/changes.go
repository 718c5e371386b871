package worker

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
)

// changedFiles lists what the task changed against the starting commit,
// committed or not, including new files. The index is rebuilt from the
// files first: one the task wrote could name contents that are not on disk.
func (w *workspace) changedFiles(ctx context.Context) ([]string, error) {
	// Tracked files stay tracked whatever the ignore rules say: the index
	// starts from the starting commit (or from HEAD, when the task
	// committed), then takes every file on disk.
	if _, err := w.run(ctx, "read-tree", "HEAD"); err != nil {
		return nil, err
	}
	if _, err := w.run(ctx, "add", "-A"); err != nil {
		return nil, err
	}
	if err := w.addIgnoredByTask(ctx); err != nil {
		return nil, err
	}
	out, err := w.run(ctx, "diff", "--cached", "--name-only", "-z", w.base)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, l := range strings.Split(out, "\x00") {
		if l != "" {
			files = append(files, l)
		}
	}
	return files, nil
}

// commit records the task's changes, files as changedFiles staged them,
// with a conventional message (spec F-30) and returns the patch from the
// starting commit.
func (w *workspace) commit(ctx context.Context, message string, files []string) (string, error) {
	if len(files) == 0 {
		return "", nil
	}
	// A task that committed its changes itself leaves nothing to commit.
	staged, err := w.run(ctx, "diff", "--cached", "--name-only", "HEAD")
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(staged) != "" {
		if _, err := w.run(ctx, "commit", "--quiet", "--no-verify", "-m", message); err != nil {
			return "", err
		}
	}
	if err := w.verifyObjects(ctx); err != nil {
		return "", err
	}
	if err := w.refuseGitlinks(ctx); err != nil {
		return "", err
	}
	if err := w.refuseConversions(ctx); err != nil {
		return "", err
	}
	return w.run(ctx, "diff", "--binary", "--no-ext-diff", "--no-textconv", w.base, "HEAD")
}

// verifyObjects checks that every object the patch is made of (those
// reachable from HEAD and not from the starting commit) holds what its name
// says. Git trusts an object file it finds under the right name, and the
// task could have written one itself: then the patch would say what is not
// on disk.
func (w *workspace) verifyObjects(ctx context.Context) error {
	list, err := w.run(ctx, "rev-list", "--objects", "--no-object-names", w.base+"..HEAD")
	if err != nil || strings.TrimSpace(list) == "" {
		return err
	}
	out, err := w.runInput(ctx, list, "cat-file", "--batch")
	if err != nil {
		return err
	}
	for rest := out; rest != ""; {
		header, body, ok := strings.Cut(rest, "\n")
		f := strings.Fields(header)
		if !ok || len(f) != 3 {
			return fmt.Errorf("verify the task's objects: unexpected %q", truncateString(header, 80))
		}
		size, err := strconv.Atoi(f[2])
		if err != nil || size < 0 || len(body) < size+1 {
			return fmt.Errorf("verify the task's objects: unexpected %q", truncateString(header, 80))
		}
		if objectID(f[1], body[:size], len(f[0])) != f[0] {
			return errors.New("the task altered the checkout's object files; its changes are not taken")
		}
		rest = body[size+1:]
	}
	return nil
}

// addIgnoredByTask deals with the files that only ignore rules the task
// wrote itself hide (a .gitignore it added or changed): ignore files among
// them are staged, so the rules travel with the patch; the others (build
// outputs, as a rule) are not, and are named in w.hidden for the task's
// report, so that the patch leaving them out is said.
func (w *workspace) addIgnoredByTask(ctx context.Context) error {
	w.hidden = nil
	ignored, err := w.run(ctx, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
	if err != nil || ignored == "" {
		return err
	}
	verbose, err := w.runInput(ctx, ignored, "check-ignore", "-v", "-z", "--stdin")
	if err != nil {
		return err
	}
	// Records: "<source>\x00<line>\x00<pattern>\x00<path>\x00".
	f := strings.Split(verbose, "\x00")
	made := map[string]bool{}
	var force []string
	for i := 0; i+3 < len(f); i += 4 {
		src, path := f[i], f[i+3]
		m, ok := made[src]
		if !ok {
			m = w.changedByTask(ctx, src)
			made[src] = m
		}
		if !m {
			continue
		}
		paths := []string{path}
		if strings.HasSuffix(path, "/") {
			// A whole directory the task's rules hide: its files.
			inside, err := w.run(ctx, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--", path)
			if err != nil {
				return err
			}
			paths = strings.Split(strings.TrimSuffix(inside, "\x00"), "\x00")
		}
		for _, p := range paths {
			switch {
			case p == "":
			case filepath.Base(p) == ".gitignore", filepath.Base(p) == ".gitattributes":
				force = append(force, p)
			default:
				w.hidden = append(w.hidden, p)
			}
		}
	}
	if len(force) == 0 {
		return nil
	}
	_, err = w.runInput(ctx, strings.Join(force, "\x00"), "add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul")
	return err
}

// changedByTask reports whether the checkout's file at path is new or
// differs from the starting commit's. Files outside the checkout (the
// ignore and attribute files of .git are put back as cloned) are not.
func (w *workspace) changedByTask(ctx context.Context, path string) bool {
	if path == "" || filepath.IsAbs(path) || path == ".git" || strings.HasPrefix(path, ".git/") {
		return false
	}
	want, err := w.run(ctx, "rev-parse", "--verify", "-q", w.base+":"+path)
	if err != nil {
		return true
	}
	// As git would store it: a checkout may have converted it (line endings).
	got, err := w.run(ctx, "hash-object", "--", path)
	return err != nil || strings.TrimSpace(got) != strings.TrimSpace(want)
}

// refuseConversions fails the task when attributes it wrote itself (a
// .gitattributes it added or changed) make what is committed differ from
// what the starting commit's attributes would have committed (ident, an
// encoding, line endings): the tests ran on the disk, and the starting
// commit's attributes are the repository's intent. Each changed file is
// hashed again with the starting commit's attribute files put in place for
// the while.
func (w *workspace) refuseConversions(ctx context.Context) error {
	names, err := w.run(ctx, "diff", "--name-only", "-z", "--no-renames", w.base, "HEAD")
	if err != nil {
		return err
	}
	var paths, attrs []string
	for _, p := range strings.Split(names, "\x00") {
		if p == "" {
			continue
		}
		if filepath.Base(p) == ".gitattributes" {
			attrs = append(attrs, p)
		}
		if fi, err := os.Lstat(filepath.Join(w.dir, p)); err == nil && fi.Mode().IsRegular() {
			paths = append(paths, p)
		}
	}
	if len(attrs) == 0 || len(paths) == 0 {
		return nil
	}
	// The starting commit's attribute files go back where they were, not
	// through a directory the task made a symlink.
	for _, a := range attrs {
		for d := filepath.Dir(a); d != "."; d = filepath.Dir(d) {
			if fi, err := os.Lstat(filepath.Join(w.dir, d)); err == nil && !fi.IsDir() {
				return fmt.Errorf("the task made %s, which holds attributes, something other than a directory; its changes are not taken", d)
			}
		}
	}
	root, err := openDirRoot(w.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	// The task's attribute files, put back when done (their content is
	// committed already; the checkout is the task's until it is removed).
	saved := map[string][]byte{}
	for _, a := range attrs {
		b, err := root.ReadFile(a)
		if err == nil {
			saved[a] = b
		}
		if err := root.Remove(a); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if was, err := w.run(ctx, "cat-file", "blob", w.base+":"+a); err == nil {
			if err := root.MkdirAll(filepath.Dir(a), 0o755); err != nil {
				return err
			}
			if err := root.WriteFile(a, []byte(was), 0o644); err != nil {
				return err
			}
		}
	}
	defer func() {
		for _, a := range attrs {
			_ = root.Remove(a)
			if b, ok := saved[a]; ok {
				_ = root.WriteFile(a, b, 0o644)
			}
		}
	}()
	for _, p := range paths {
		if slices.Contains(attrs, p) {
			continue
		}
		intended, err := w.run(ctx, "hash-object", "--", p)
		if err != nil {
			return err
		}
		committed, err := w.run(ctx, "rev-parse", "--verify", "-q", "HEAD:"+p)
		if err != nil || strings.TrimSpace(intended) != strings.TrimSpace(committed) {
			return fmt.Errorf("attributes the task wrote make %q differ between disk and patch; its changes are not taken", p)
		}
	}
	return nil
}

// refuseGitlinks fails the task when its changes hold a repository of its
// own (git records it as a commit of that repository, not its files, and
// the patch would not carry them).
func (w *workspace) refuseGitlinks(ctx context.Context) error {
	out, err := w.run(ctx, "diff-tree", "-r", "-z", "--no-renames", w.base, "HEAD")
	if err != nil {
		return err
	}
	// Records: ":<old mode> <new mode> <old> <new> <status>\x00<path>\x00".
	f := strings.Split(out, "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(f[i], ":"))
		if len(meta) >= 2 && meta[1] == "160000" {
			return fmt.Errorf("the task left a git repository of its own at %s; its files are not in a patch, so its changes are not taken", f[i+1])
		}
	}
	return nil
}

// objectID is git's name for an object of type typ holding content, in
// the repository's hash (SHA-1, or SHA-256 for 64-digit names).
func objectID(typ, content string, digits int) string {
	h := sha1.New()
	if digits == 64 {
		h = sha256.New()
	}
	fmt.Fprintf(h, "%s %d\x00", typ, len(content))
	io.WriteString(h, content)
	return hex.EncodeToString(h.Sum(nil))
}

// applyPatch applies a git diff from the starting commit to the checkout,
// uncommitted.
func (w *workspace) applyPatch(ctx context.Context, patch string) error {
	f := filepath.Join(w.root, ".start.patch")
	if err := os.WriteFile(f, []byte(patch), 0o600); err != nil {
		return err
	}
	defer os.Remove(f)
	_, err := w.run(ctx, "apply", "--binary", "--whitespace=nowarn", f)
	return err
}

// conventionalMessage makes a commit subject like "feat(api): add handler".
func conventionalMessage(nodeID, name string) string {
	subject := strings.TrimSpace(name)
	if subject == "" {
		subject = "task " + nodeID
	}
	kind := "feat"
	l := strings.ToLower(subject)
	switch {
	case strings.HasPrefix(l, "fix") || strings.Contains(l, "bug"):
		kind = "fix"
	case strings.HasPrefix(l, "test"):
		kind = "test"
	case strings.HasPrefix(l, "doc"):
		kind = "docs"
	case strings.HasPrefix(l, "refactor"):
		kind = "refactor"
	}
	if len(subject) > 72 {
		subject = subject[:72]
	}
	scope := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, strings.ToLower(nodeID))
	return fmt.Sprintf("%s(%s): %s", kind, scope, subject)
}

// applyDependencies starts the checkout from its dependencies' changes
// (spec T-10): each patch, in order, is applied and committed, and the
// task's own changes are then taken from that commit. A patch that does
// not apply fails the task, naming its node and files.
func (w *workspace) applyDependencies(ctx context.Context, deps []*taskv1.DependencyPatch) error {
	applied := 0
	for _, d := range deps {
		if strings.TrimSpace(d.GetPatch()) == "" {
			continue
		}
		if err := w.applyPatch(ctx, d.GetPatch()); err != nil {
			return fmt.Errorf("the changes of node %s (%s) do not apply on top of %s: %w",
				d.GetNodeId(), strings.Join(patchFiles(d.GetPatch()), ", "), dependencyWord(applied), err)
		}
		if _, err := w.run(ctx, "add", "-A"); err != nil {
			return err
		}
		if _, err := w.run(ctx, "commit", "--quiet", "--no-verify", "--allow-empty", "-m", "sylk: the changes of node "+d.GetNodeId()); err != nil {
			return err
		}
		applied++
	}
	if applied == 0 {
		return nil
	}
	head, err := w.run(ctx, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	w.base = strings.TrimSpace(head)
	return nil
}

func dependencyWord(applied int) string {
	if applied == 0 {
		return "the run's base commit"
	}
	return "the base commit and the other dependencies' changes"
}

// patchFiles lists the files a git diff changes.
func patchFiles(patch string) []string {
	var out []string
	for _, line := range strings.Split(patch, "\n") {
		if rest, ok := strings.CutPrefix(line, "diff --git a/"); ok {
			if i := strings.Index(rest, " b/"); i >= 0 {
				out = append(out, rest[:i])
			}
		}
	}
	return out
}
