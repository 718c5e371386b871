package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/toolexec"
)

// A review task (ReviewService, a dispatch with review) reviews a change
// without a run: base_ref...head_ref of the dispatch's repository (what
// head changed since it forked from base), or a patch, checked to apply on
// base_ref when there is a repository. The repository is read from a bare
// clone in the task's directory; no command of the repository's runs.

// reviewTask runs a review task; its result carries the Review.
func (s *Service) reviewTask(ctx context.Context, t *taskRun) (taskOutcome, bool) {
	rt := t.d.GetReview()
	start := time.Now()
	diff, err := t.reviewDiff(ctx, rt)
	if ctx.Err() != nil {
		return taskOutcome{}, true
	}
	var rv *orchestratorv1.Review
	if err != nil {
		rv = &orchestratorv1.Review{Outcome: orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED, Persona: review.ResolvePersona(rt.GetPersona()),
			Summary: "the review failed: " + err.Error()}
	} else {
		title := rt.GetReview()
		if rt.GetPatch() == "" {
			title += ": " + rt.GetBaseRef() + "..." + headRef(rt)
		}
		rv, err = s.reviewChange(ctx, t.d, title, rt.GetPersona(), diff)
		if ctx.Err() != nil {
			return taskOutcome{}, true
		}
	}
	t.res.Review, t.res.Stdout = rv, rv.GetSummary()
	if err != nil {
		t.res.ExitCode, t.res.Error = 1, rv.GetSummary()
	}
	t.res.Duration = durationpb.New(time.Since(start))
	return taskOutcome{msg: t.res}, false
}

func headRef(rt *taskv1.ReviewTask) string {
	if h := rt.GetHeadRef(); h != "" {
		return h
	}
	return "HEAD"
}

// reviewDiff is the change a review task reviews.
func (t *taskRun) reviewDiff(ctx context.Context, rt *taskv1.ReviewTask) (string, error) {
	repo := t.d.GetRepository()
	if repo == "" {
		if strings.TrimSpace(rt.GetPatch()) == "" {
			return "", errors.New("a review needs a repository or a patch")
		}
		return rt.GetPatch(), nil
	}
	for _, ref := range []string{rt.GetBaseRef(), rt.GetHeadRef()} {
		if ref != "" {
			if err := review.CheckRef(ref); err != nil {
				return "", err
			}
		}
	}
	if rt.GetBaseRef() == "" {
		return "", errors.New("a review of a repository needs base_ref")
	}
	g := &bareRepo{t: t, dir: filepath.Join(t.ws, "review.git")}
	if _, err := g.git(ctx, t.ws, "clone", "--bare", "--quiet", "--no-hardlinks", "--", repo, g.dir); err != nil {
		return "", fmt.Errorf("could not read the repository: %w", err)
	}
	base, err := g.commit(ctx, rt.GetBaseRef())
	if err != nil {
		return "", err
	}
	if p := rt.GetPatch(); p != "" {
		return p, g.applies(ctx, base, p)
	}
	head, err := g.commit(ctx, headRef(rt))
	if err != nil {
		return "", err
	}
	return g.git(ctx, g.dir, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", base+"..."+head)
}

// bareRepo is a review task's bare clone of its repository.
type bareRepo struct {
	t   *taskRun
	dir string
}

// git runs one git command in dir on the clone (GIT_DIR), audited in the
// task's result, with the options and environment of a call on a
// repository the worker did not write (toolexec.SafeGitArgs, GitEnv).
func (g *bareRepo) git(ctx context.Context, dir string, args ...string) (string, error) {
	return g.gitEnv(ctx, dir, nil, args...)
}

func (g *bareRepo) gitEnv(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", slices.Concat(toolexec.SafeGitArgs, args)...)
	cmd.Dir = dir
	cmd.Env = slices.Concat(toolexec.GitEnv(g.t.s.cfg.Tools.ExtraSecretPatterns), []string{"HOME=" + g.t.ws}, env)
	if args[0] != "clone" {
		cmd.Env = append(cmd.Env, "GIT_DIR="+g.dir)
	}
	cmd.WaitDelay = time.Second
	var stderr strings.Builder
	stdout := &cappedBuffer{limit: maxReviewDiffBytes}
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	err := cmd.Run()
	g.t.res.GitAudit = append(g.t.res.GitAudit, "worker: git "+strings.Join(args, " "))
	switch {
	case stdout.over:
		return "", fmt.Errorf("git %s: the output exceeds %d MiB: the change is too large to review", args[0], maxReviewDiffBytes>>20)
	case err != nil:
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(lastLine(stderr.String())))
	}
	return stdout.String(), nil
}

// maxReviewDiffBytes bounds the change a review task reads.
const maxReviewDiffBytes = 64 << 20

// cappedBuffer keeps what is written up to limit bytes, then refuses more.
type cappedBuffer struct {
	strings.Builder
	limit int
	over  bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		b.over = true
		return 0, errors.New("output limit reached")
	}
	return b.Builder.Write(p)
}

// commit resolves ref to a commit of the clone.
func (g *bareRepo) commit(ctx context.Context, ref string) (string, error) {
	out, err := g.git(ctx, g.dir, "rev-parse", "--verify", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("the repository has no commit %q", ref)
	}
	return strings.TrimSpace(out), nil
}

// applies checks that patch applies on base (in an index of its own).
func (g *bareRepo) applies(ctx context.Context, base, patch string) error {
	tmp := filepath.Join(g.t.ws, ".tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	file := filepath.Join(tmp, "review.patch")
	if err := os.WriteFile(file, []byte(patch), 0o600); err != nil {
		return err
	}
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "review.index")}
	if _, err := g.gitEnv(ctx, g.dir, env, "read-tree", base); err != nil {
		return err
	}
	if _, err := g.gitEnv(ctx, g.dir, env, "apply", "--cached", "--check", file); err != nil {
		return fmt.Errorf("the patch does not apply on %s: %w", base, err)
	}
	return nil
}
