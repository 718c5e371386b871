package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
)

func reviewCommands() []command {
	return []command{
		{name: "create", summary: "have a change reviewed: a repository's base...head, or a patch", run: runReviewsCreate},
		{name: "list", summary: "list your reviews", run: runReviewsList},
		{name: "show", summary: "show a review and its findings", run: runReviewsShow},
	}
}

func reviewName(s string) string {
	if strings.HasPrefix(s, "reviews/") {
		return s
	}
	return "reviews/" + s
}

// runReviewsCreate asks for a review and, with --wait, prints its findings.
func runReviewsCreate(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk reviews create", "(--repo REPO --base REF --head REF | --patch FILE|-) [flags]",
		"Has the model review a change with a persona, without a run: a registered repository's\n"+
			"base...head, or a patch (\"-\" reads it from standard input). With --wait (the default)\n"+
			"it waits for the findings; exit 7 when the review failed.")
	repo := fs.String("repo", "", "the registered repository (with --base and --head)")
	base := fs.String("base", "", "the base ref, such as main")
	head := fs.String("head", "", "the head ref, such as a feature branch")
	patch := fs.String("patch", "", "a unified diff file to review instead, or - for standard input")
	persona := fs.String("persona", "", "default, security, dx, architecture or quick")
	wait := fs.Duration("wait", 2*time.Minute, "how long the server waits for the findings (at most its limit; 0: do not wait)")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	if (*patch == "") == (*repo == "") {
		fs.Usage()
		return usageErrorf("sylk reviews create needs --repo (with --base and --head) or --patch")
	}
	req := &orchestratorv1.ReviewRequest{BaseRef: *base, HeadRef: *head, Persona: *persona}
	if *repo != "" {
		req.Repository = repoName(*repo)
	}
	if *patch != "" {
		var err error
		if req.Patch, err = e.readInput(*patch); err != nil {
			return err
		}
	}
	q := url.Values{}
	if *wait > 0 {
		q.Set("waitSeconds", strconv.Itoa(int((*wait).Seconds())))
	}
	var resp orchestratorv1.CreateReviewResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/reviews?"+q.Encode(), req, &resp); done {
		return err
	}
	e.renderReview(resp.GetReview())
	return reviewOutcome(resp.GetReview())
}

// reviewOutcome is an ExitFailed error for a failed review.
func reviewOutcome(r *orchestratorv1.ReviewRequest) error {
	if r.GetState() == orchestratorv1.ReviewState_REVIEW_STATE_FAILED {
		return &Error{Code: ExitFailed, Err: fmt.Errorf("review %s failed: %s", r.GetName(), r.GetError())}
	}
	return nil
}

func runReviewsList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk reviews list", "[flags]", "Lists your reviews, newest first.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	var resp orchestratorv1.ListReviewsResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/reviews?pageSize=100", nil, &resp); done {
		return err
	}
	if len(resp.GetReviews()) == 0 {
		fmt.Fprintln(e.out, "No reviews.")
	}
	for _, r := range resp.GetReviews() {
		fmt.Fprintf(e.out, "%s  %-8s %-12s %d findings  %s\n", r.GetName(), reviewState(r), firstNonEmpty(r.GetPersona(), "default"),
			len(r.GetReview().GetFindings()), reviewSubject(r))
	}
	return nil
}

func runReviewsShow(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk reviews show", "REVIEW [flags]", "Shows a review: its state, summary and findings.")
	pos, err := parseN(fs, args, 1, "a review")
	if err != nil {
		return err
	}
	var resp orchestratorv1.GetReviewResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/"+reviewName(pos[0]), nil, &resp); done {
		return err
	}
	e.renderReview(resp.GetReview())
	return nil
}

func (e *env) renderReview(r *orchestratorv1.ReviewRequest) {
	fmt.Fprintf(e.out, "%s  %s  %s\n", r.GetName(), reviewState(r), reviewSubject(r))
	if r.GetError() != "" {
		fmt.Fprintf(e.out, "  error: %s\n", r.GetError())
	}
	rv := r.GetReview()
	if rv == nil {
		if r.GetState() != orchestratorv1.ReviewState_REVIEW_STATE_FAILED {
			fmt.Fprintf(e.out, "Not done yet: sylk reviews show %s\n", r.GetName())
		}
		return
	}
	fmt.Fprintf(e.out, "  outcome: %s (persona %s)\n", strings.ToLower(strings.TrimPrefix(rv.GetOutcome().String(), "REVIEW_OUTCOME_")),
		firstNonEmpty(rv.GetPersona(), "default"))
	if rv.GetSummary() != "" {
		fmt.Fprintf(e.out, "  summary: %s\n", rv.GetSummary())
	}
	if len(rv.GetFindings()) == 0 {
		fmt.Fprintln(e.out, "  no findings")
	}
	for _, f := range rv.GetFindings() {
		block := ""
		if f.GetBlocking() {
			block = " blocking"
		}
		fmt.Fprintf(e.out, "  [%s%s] %s%s: %s\n", strings.ToLower(strings.TrimPrefix(f.GetSeverity().String(), "SEVERITY_")), block,
			f.GetFile(), lines(f.GetLine(), 0), f.GetMessage())
		if f.GetSuggestion() != "" {
			fmt.Fprintf(e.out, "      suggestion: %s\n", f.GetSuggestion())
		}
	}
}

func reviewState(r *orchestratorv1.ReviewRequest) string {
	return strings.ToLower(strings.TrimPrefix(r.GetState().String(), "REVIEW_STATE_"))
}

// reviewSubject is "repositories/x main...feature" or "a patch".
func reviewSubject(r *orchestratorv1.ReviewRequest) string {
	if r.GetRepository() != "" {
		return fmt.Sprintf("%s %s...%s", r.GetRepository(), r.GetBaseRef(), r.GetHeadRef())
	}
	return "a patch"
}
