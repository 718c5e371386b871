package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/textsearch"
)

// The delivered branch's commit is made in a scratch clone that borrows
// the repository's objects: the patch is applied to an index of its own
// read from the base commit, so no working tree is written, and nothing of
// the repository itself changes until the branch is fetched into it. Every
// git call goes through s.git (audited, the safe options and environment).

// branchName is the branch a run is delivered as.
func branchName(runID string) string { return "sylk/" + runID }

// deliveryAuthor signs the delivered commits.
var deliveryAuthor = []string{"GIT_AUTHOR_NAME=Sylk", "GIT_AUTHOR_EMAIL=sylk@sylk.invalid",
	"GIT_COMMITTER_NAME=Sylk", "GIT_COMMITTER_EMAIL=sylk@sylk.invalid"}

// isClone says whether repo is in CloneDir: a clone of a git URL, whose
// branch goes to its remote or stays here, never into the clone.
func (s *Service) isClone(repo string) bool {
	if s.cfg.CloneDir == "" || repo == "" {
		return false
	}
	rel, err := filepath.Rel(resolved(s.cfg.CloneDir), resolved(repo))
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// resolved is p with its symbolic links resolved, or cleaned when it
// cannot be.
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// makeBranch commits the run's change as its branch, keeps the branch's
// bundle when it fits, and places the branch: in the repository, on its
// remote, or nowhere but here. It fills d and returns the bundle. An error
// means there is no branch (a bundle may still hold the commit).
func (s *Service) makeBranch(ctx context.Context, log *slog.Logger, r *deliveryRun, d *orchestratorv1.Delivery) ([]byte, error) {
	dir, err := os.MkdirTemp("", "sylk-deliver-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	src := filepath.Join(dir, "src.git")
	if err := s.commitChange(ctx, dir, src, r, d); err != nil {
		return nil, err
	}
	bundle := s.bundleBranch(ctx, dir, src, r, d)
	if err := s.placeBranch(ctx, log, src, r, d); err != nil {
		if d.BundleAvailable {
			err = fmt.Errorf("%w; its commit is offered for download: GET /v1/%s/bundle", err, runName(r.id))
		}
		return bundle, err
	}
	return bundle, nil
}

// commitChange clones the repository into src, commits the run's patch on
// its base commit, and names the commit as the run's branch there.
func (s *Service) commitChange(ctx context.Context, dir, src string, r *deliveryRun, d *orchestratorv1.Delivery) error {
	if out, err := s.git(ctx, dir, "clone", "--quiet", "--bare", "--shared", "--", r.repo, src); err != nil {
		return gitFailure("clone the repository", out, err)
	}
	patch := filepath.Join(dir, "change.patch")
	if err := os.WriteFile(patch, []byte(r.patch), 0o600); err != nil {
		return err
	}
	index := []string{"GIT_INDEX_FILE=" + filepath.Join(dir, "index")}
	if out, err := s.gitEnv(ctx, src, index, "read-tree", r.base); err != nil {
		return gitFailure("read the base commit "+r.base, out, err)
	}
	if out, err := s.gitEnv(ctx, src, index, "apply", "--cached", "--binary", "--whitespace=nowarn", patch); err != nil {
		return gitFailure("apply the run's patch on its base commit", out, err)
	}
	tree, err := s.gitEnv(ctx, src, index, "write-tree")
	if err != nil {
		return gitFailure("write the tree", tree, err)
	}
	names, err := s.gitEnv(ctx, src, index, "diff-index", "--cached", "--name-only", "-z", r.base)
	if err != nil {
		return gitFailure("list the files changed", names, err)
	}
	for _, f := range strings.Split(names, "\x00") {
		if f != "" {
			d.FilesChanged = append(d.FilesChanged, f)
		}
	}
	// Dated by the run's end, the commit is the same each time it is made.
	date := fmt.Sprintf("@%d +0000", r.endTime.Unix())
	env := append([]string{"GIT_AUTHOR_DATE=" + date, "GIT_COMMITTER_DATE=" + date}, deliveryAuthor...)
	commit, err := s.gitEnv(ctx, src, env, "commit-tree", strings.TrimSpace(tree), "-p", r.base, "-m", r.commitMessage(d.FilesChanged))
	if err != nil {
		return gitFailure("commit", commit, err)
	}
	d.Commit, d.Branch = strings.TrimSpace(commit), branchName(r.id)
	if out, err := s.git(ctx, src, "update-ref", "refs/heads/"+d.Branch, d.Commit); err != nil {
		return gitFailure("name the branch", out, err)
	}
	return nil
}

// bundleBranch bundles the branch from the base commit (a thin bundle:
// fetching it needs the base commit, which every clone of the repository
// has) and returns it when it fits the bound; otherwise d says why none is
// offered.
func (s *Service) bundleBranch(ctx context.Context, dir, src string, r *deliveryRun, d *orchestratorv1.Delivery) []byte {
	file := filepath.Join(dir, "branch.bundle")
	if out, err := s.git(ctx, src, "bundle", "create", "--quiet", file, "refs/heads/"+d.Branch, "^"+r.base); err != nil {
		addDetail(d, gitFailure("no bundle: bundle the branch", out, err).Error())
		return nil
	}
	b, err := os.ReadFile(file)
	switch {
	case err != nil:
		addDetail(d, "no bundle: "+err.Error())
		return nil
	case len(b) > s.cfg.MaxBundleBytes:
		addDetail(d, fmt.Sprintf("no bundle: its %d bytes exceed the %d kept for download (-orchestrator.max-bundle-bytes); the patch is offered",
			len(b), s.cfg.MaxBundleBytes))
		return nil
	}
	d.BundleAvailable = true
	return b
}

// placeBranch puts the branch where the run's repository wants it: a ref in
// a repository given as a path; for a clone of a git URL with allow_push,
// its remote (failing that, and without allow_push, it stays here). A
// branch of that name that is already there is fine when it is the same
// commit, and left alone (an error) when it is not.
func (s *Service) placeBranch(ctx context.Context, log *slog.Logger, src string, r *deliveryRun, d *orchestratorv1.Delivery) error {
	target := r.repo
	if r.clone {
		if !r.allowPush {
			return nil
		}
		remote, err := s.git(ctx, r.repo, "config", "--get", "remote.origin.url")
		if target = strings.TrimSpace(remote); err != nil || target == "" {
			addDetail(d, "not pushed: the repository's clone names no remote; the branch is offered for download")
			return nil
		}
	}
	err := s.pushBranch(ctx, src, target, !r.clone, d)
	switch {
	case err == nil && r.clone:
		d.Pushed, d.Remote = true, redactRemote(target)
	case err != nil && r.clone:
		log.WarnContext(ctx, "push the delivered branch", logx.Err(err))
		// Sylk keeps no git credentials of tenants yet: a remote that wants
		// one refuses the push, and the branch is offered for download.
		addDetail(d, fmt.Sprintf("not pushed to %s: %v (Sylk pushes only where no credential is needed); the branch is offered for download",
			redactRemote(target), err))
		return nil
	}
	return err
}

// pushBranch puts the branch from src into target (a path or a URL),
// unless target has it already. A path repository fetches it rather than
// receive a push: git would run the hooks of a repository that receives,
// whereas the fetching one is this service's git, with its safe options.
func (s *Service) pushBranch(ctx context.Context, src, target string, path bool, d *orchestratorv1.Delivery) error {
	ref := "refs/heads/" + d.Branch
	out, err := s.git(ctx, src, "ls-remote", "--", target, ref)
	if err != nil {
		return gitFailure("read the branch "+d.Branch+" of the repository", out, err)
	}
	if have, _, _ := strings.Cut(strings.TrimSpace(out), "\t"); have == d.Commit {
		return nil
	} else if have != "" {
		return fmt.Errorf("the repository already has a different branch %s (commit %s), which is left as it is", d.Branch, have)
	}
	if path {
		// No automatic housekeeping in the user's repository either.
		out, err = s.git(ctx, target, "-c", "gc.auto=0", "-c", "maintenance.auto=false", "fetch", "--quiet", "--no-tags", "--no-recurse-submodules",
			"--no-write-fetch-head", "--", src, ref+":"+ref)
	} else {
		out, err = s.git(ctx, src, "push", "--quiet", "--", target, ref+":"+ref)
	}
	if err != nil {
		return gitFailure("put the branch "+d.Branch+" in the repository", out, err)
	}
	return nil
}

// gitFailure says what failed, with the first line git printed.
func gitFailure(what, out string, err error) error {
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			line = ": " + textsearch.Clip(l, maxReasonBytes)
			break
		}
	}
	if line == "" && errors.Unwrap(err) != nil {
		line = ": " + errors.Unwrap(err).Error()
	}
	return fmt.Errorf("%s%s", what, line)
}

// redactRemote is a remote's address without a password.
func redactRemote(remote string) string {
	if u, err := url.Parse(remote); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return remote
}
