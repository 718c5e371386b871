package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/toolexec"
)

// gitTimeout bounds one git call of the Orchestrator.
const gitTimeout = 30 * time.Second

// git runs one audited git command (spec F-33) and returns its output.
func (s *Service) git(ctx context.Context, dir string, args ...string) (string, error) {
	return s.gitEnv(ctx, dir, nil, args...)
}

// gitEnv is git with env added to (and overriding) its environment.
func (s *Service) gitEnv(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	// The run's repository is its users': nothing its configuration names
	// (hooks, a file-system monitor) runs, and what else it may run
	// (filters) gets no secrets.
	cmd := exec.CommandContext(ctx, "git", append(slices.Clone(toolexec.SafeGitArgs), args...)...)
	cmd.Dir = dir
	cmd.Env = append(toolexec.GitEnv(toolexec.DefaultConfig().ExtraSecretPatterns),
		"GIT_AUTHOR_NAME=Sylk Orchestrator", "GIT_AUTHOR_EMAIL=orchestrator@sylk.invalid",
		"GIT_COMMITTER_NAME=Sylk Orchestrator", "GIT_COMMITTER_EMAIL=orchestrator@sylk.invalid")
	cmd.Env = append(cmd.Env, env...)
	// Only what git prints on stdout is its answer: its warnings can quote
	// paths a task chose, whole lines of a diff among them.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	s.log.InfoContext(ctx, "git", slog.String("dir", dir), slog.String("args", strings.Join(args, " ")), slog.Bool("ok", err == nil))
	if err != nil {
		return string(out) + stderr.String(), fmt.Errorf("git %s: %w", args[0], err)
	}
	return string(out), nil
}

// resolveBase checks that the tenant's repository is a git repository
// with a commit and returns its HEAD: the run's starting commit. The
// repository is the caller's own, so the answer may say what is wrong
// with its directory.
func (s *Service) resolveBase(ctx context.Context, repo repoRef) (string, error) {
	if fi, err := os.Stat(repo.Path); err != nil || !fi.IsDir() {
		return "", errRepositoryNotRegistered.Withf("the directory of %s cannot be read by the orchestrator", repo.Name)
	}
	out, err := s.git(ctx, repo.Path, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return "", apierr.FailedPrecondition(ReasonRepositoryNoCommit, "%s is not a git repository with a commit", repo.Name)
	}
	return strings.TrimSpace(out), nil
}

// mergePatches applies the nodes' patches, in topological order, to a
// scratch clone of the repository at base. A patch that does not apply on
// top of the ones before is a conflict (spec B-27): it is left out and
// named, never forced over another node's change. It returns the combined
// patch.
func (s *Service) mergePatches(ctx context.Context, repo, base string, nodePatches [][2]string) (string, []string, error) {
	dir, err := os.MkdirTemp("", "sylk-merge-")
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if _, err := s.git(ctx, dir, "clone", "--quiet", "--no-checkout", repo, "src"); err != nil {
		return "", nil, err
	}
	src := filepath.Join(dir, "src")
	if _, err := s.git(ctx, src, "-c", "advice.detachedHead=false", "checkout", "--quiet", base); err != nil {
		return "", nil, err
	}
	var conflicts []string
	for i, np := range nodePatches {
		file := filepath.Join(dir, fmt.Sprintf("%d.patch", i))
		if err := os.WriteFile(file, []byte(np[1]), 0o600); err != nil {
			return "", nil, err
		}
		if _, err := s.git(ctx, src, "apply", "--check", "--index", file); err != nil {
			conflicts = append(conflicts, np[0])
			continue
		}
		if _, err := s.git(ctx, src, "apply", "--index", file); err != nil {
			return "", nil, err
		}
	}
	out, err := s.git(ctx, src, "diff", "--binary", "--no-ext-diff", "--no-textconv", "--cached", base)
	if err != nil {
		return "", nil, err
	}
	return out, conflicts, nil
}

// mergeRun merges a finished repository run's patches and stores the result.
func (s *Service) mergeRun(ctx context.Context, log *slog.Logger, tenant, runID, repo, base string) {
	ps, err := patches(ctx, s.db, tenant, runID)
	if err != nil {
		log.ErrorContext(ctx, "load patches", logx.Err(err))
		return
	}
	_, _, _ = s.mergeAndStore(ctx, log, tenant, runID, repo, base, ps, stateSucceeded)
}

// mergeAndStore merges loaded node patches into the run's result patch and
// returns the conflicts it stored.
func (s *Service) mergeAndStore(ctx context.Context, log *slog.Logger, tenant, runID, repo, base string, ps [][2]string, states ...string) ([]string, bool, error) {
	patch, conflicts, err := s.mergePatches(ctx, repo, base, ps)
	if err != nil {
		log.ErrorContext(ctx, "merge patches", logx.Err(err))
		conflicts = []string{"merge failed: " + errors.Unwrap(err).Error()}
	}
	stored, err := storeMerge(ctx, s.db, tenant, runID, patch, conflicts, states...)
	if err != nil {
		log.ErrorContext(ctx, "store merged patch", logx.Err(err))
	}
	if len(conflicts) > 0 {
		log.WarnContext(ctx, "patches conflict", slog.Any("nodes", conflicts))
	}
	return conflicts, stored, err
}
