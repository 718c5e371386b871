package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/review"
)

// The review API (ReviewService, spec P-01..P-14 without a run): a review
// request is stored for its user, dispatched as a review task to the
// inspector queue, and completed when the worker reports its Review
// (reviewstore.go). A repository to review must be one the tenant
// registered with the Librarian (repository.go); a patch alone needs none.

// Limits of a review request.
const (
	// maxReviewWait bounds CreateReview's wait_seconds.
	maxReviewWait = 300
	// maxReviewPatchBytes bounds a patch to review: the task carrying it
	// must fit one bus message.
	maxReviewPatchBytes = 512 << 10
)

// reviewServer serves the ReviewService.
type reviewServer struct {
	orchestratorv1.UnimplementedReviewServiceServer
	s *Service
	// waiters are the CreateReview calls waiting on a review, by
	// reviewKey; each channel is closed when this replica applies its
	// result.
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

func newReviewServer(s *Service) *reviewServer {
	return &reviewServer{s: s, waiters: map[string][]chan struct{}{}}
}

// Reviews is the ReviewService (Register serves it).
func (s *Service) Reviews() orchestratorv1.ReviewServiceServer { return s.reviews }

// CreateReview stores a review request, dispatches its task and answers
// at once, or once it is done within wait_seconds.
func (r *reviewServer) CreateReview(ctx context.Context, req *orchestratorv1.CreateReviewRequest) (_ *orchestratorv1.CreateReviewResponse, err error) {
	s := r.s
	defer func() { err = apierr.Status(ctx, s.log, "create review", err) }()
	who, err := s.writer(ctx)
	if err != nil {
		return nil, err
	}
	wait := req.GetWaitSeconds()
	if wait < 0 || wait > maxReviewWait {
		return nil, apierr.Invalid("wait_seconds", "must be between 0 and %d", maxReviewWait)
	}
	row, err := newReviewRow(who, req.GetReview())
	if err != nil {
		return nil, err
	}
	if row.SessionID != "" {
		if err := s.sessions.Open(ctx, who, row.SessionID, "review in it"); err != nil {
			return nil, err
		}
	}
	repo, err := s.repos.resolve(ctx, who, row.Repository) // repository.go
	if err != nil {
		return nil, err
	}
	row.Repository, row.RepoPath = repo.Name, repo.Path
	if err := insertReview(ctx, s.db, row); err != nil {
		return nil, fmt.Errorf("store review: %w", err)
	}
	// Stored: the review goes on even if the caller goes away.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectsTimeout)
	defer cancel()
	r.dispatch(dctx, row)
	if wait > 0 {
		r.wait(ctx, who.TenantID, row.ID, time.Duration(wait)*time.Second)
	}
	out, err := r.load(ctx, who, row.ID, true)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.CreateReviewResponse{Review: out}, nil
}

// GetReview returns one of the caller's reviews.
func (r *reviewServer) GetReview(ctx context.Context, req *orchestratorv1.GetReviewRequest) (_ *orchestratorv1.GetReviewResponse, err error) {
	defer func() { err = apierr.Status(ctx, r.s.log, "get review", err) }()
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := strings.CutPrefix(req.GetName(), "reviews/")
	if !ok || !ids.Valid(id) {
		return nil, apierr.Invalid("name", `want "reviews/{uuid}", got %q`, truncateForError(req.GetName()))
	}
	out, err := r.load(ctx, who, strings.ToLower(id), true)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.GetReviewResponse{Review: out}, nil
}

// ListReviews pages through the caller's reviews, newest first; listed
// reviews leave their patch out (GetReview has it).
func (r *reviewServer) ListReviews(ctx context.Context, req *orchestratorv1.ListReviewsRequest) (_ *orchestratorv1.ListReviewsResponse, err error) {
	s := r.s
	defer func() { err = apierr.Status(ctx, s.log, "list reviews", err) }()
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	size, cursor, err := s.pageOf(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	if err := r.expire(ctx, who, ""); err != nil {
		return nil, err
	}
	rows, err := listReviews(ctx, s.db, who.TenantID, who.UserID, cursor, size+1)
	if err != nil {
		return nil, fmt.Errorf("list reviews: %w", err)
	}
	resp := &orchestratorv1.ListReviewsResponse{}
	rows, resp.NextPageToken = page(rows, size, func(r *reviewRow) pageCursor { return pageCursor{CreateTime: r.CreateTime, ID: r.ID} })
	for _, row := range rows {
		resp.Reviews = append(resp.Reviews, row.proto(false))
	}
	return resp, nil
}

// newReviewRow checks a review request at the edge and makes its row.
func newReviewRow(who identity.Identity, in *orchestratorv1.ReviewRequest) (*reviewRow, error) {
	if in == nil {
		return nil, apierr.Invalid("review", "is required")
	}
	session, err := parseSessionID("review.session_id", in.GetSessionId())
	if err != nil {
		return nil, err
	}
	row := &reviewRow{TenantID: who.TenantID, ID: ids.New(), UserID: who.UserID, SessionID: session, Repository: in.GetRepository(),
		BaseRef: in.GetBaseRef(), HeadRef: in.GetHeadRef(), Patch: in.GetPatch(), Persona: in.GetPersona(), State: reviewPending}
	if err := review.CheckPersona(row.Persona); err != nil {
		return nil, apierr.Invalid("review.persona", "%s", strings.TrimPrefix(err.Error(), review.ErrUnknownPersona.Error()+" "))
	}
	switch {
	case row.Patch == "" && row.Repository == "":
		return nil, apierr.Invalid("review.repository", "give a repository with base_ref (and head_ref), or a patch")
	case len(row.Patch) > maxReviewPatchBytes:
		return nil, apierr.Invalid("review.patch", "%d bytes exceed the limit of %d", len(row.Patch), maxReviewPatchBytes)
	case row.Patch != "" && len(review.Parse(row.Patch)) == 0:
		return nil, apierr.Invalid("review.patch", "is not a unified diff")
	case row.Patch != "" && row.HeadRef != "":
		return nil, apierr.Invalid("review.head_ref", "a patch is reviewed as it applies on base_ref: give no head_ref")
	case row.Patch == "" && row.BaseRef == "":
		return nil, apierr.Invalid("review.base_ref", "is required to review a repository (the change is base_ref...head_ref)")
	}
	if row.Repository != "" && row.Patch != "" && row.BaseRef == "" {
		row.BaseRef = "HEAD"
	}
	for field, ref := range map[string]string{"review.base_ref": row.BaseRef, "review.head_ref": row.HeadRef} {
		if ref != "" {
			if err := review.CheckRef(ref); err != nil {
				return nil, apierr.Invalid(field, "%s", err.Error())
			}
		}
	}
	return row, nil
}
