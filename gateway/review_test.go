package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

// fakeReviews is a ReviewService that answers every review done, and
// records who asked what.
type fakeReviews struct {
	orchestratorv1.UnimplementedReviewServiceServer
	mu      sync.Mutex
	who     []identity.Identity
	created []*orchestratorv1.CreateReviewRequest
}

var doneReview = &orchestratorv1.ReviewRequest{Name: "reviews/rv1", Id: "rv1", Repository: "repositories/r1", BaseRef: "main", HeadRef: "feature",
	Persona: "security", State: orchestratorv1.ReviewState_REVIEW_STATE_DONE, Review: &orchestratorv1.Review{
		Outcome: orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_REVIEWED, Persona: "security", Blocking: true, InputTokens: 1200,
		Findings: []*orchestratorv1.Finding{{Severity: orchestratorv1.Severity_SEVERITY_HIGH, File: "calc.py", Line: 2,
			Message: "wrong sign", Suggestion: "use +", Category: "correctness", Blocking: true}}}}

func (f *fakeReviews) record(ctx context.Context) error {
	who, err := identity.Require(ctx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.who = append(f.who, who)
	return nil
}

func (f *fakeReviews) CreateReview(ctx context.Context, req *orchestratorv1.CreateReviewRequest) (*orchestratorv1.CreateReviewResponse, error) {
	if err := f.record(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.created = append(f.created, req)
	f.mu.Unlock()
	return &orchestratorv1.CreateReviewResponse{Review: doneReview}, nil
}

func (f *fakeReviews) GetReview(ctx context.Context, req *orchestratorv1.GetReviewRequest) (*orchestratorv1.GetReviewResponse, error) {
	if err := f.record(ctx); err != nil {
		return nil, err
	}
	if req.GetName() != doneReview.GetName() {
		return nil, apierr.NotFound("review", req.GetName())
	}
	return &orchestratorv1.GetReviewResponse{Review: doneReview}, nil
}

func (f *fakeReviews) ListReviews(ctx context.Context, _ *orchestratorv1.ListReviewsRequest) (*orchestratorv1.ListReviewsResponse, error) {
	if err := f.record(ctx); err != nil {
		return nil, err
	}
	return &orchestratorv1.ListReviewsResponse{Reviews: []*orchestratorv1.ReviewRequest{doneReview}}, nil
}

// The review API's REST routes reach the Orchestrator's ReviewService as
// the caller, and answer what /openapi.json documents.
func TestReviewRoutes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	fake := &fakeReviews{}
	conn := testenv.ServeGRPC(t, func(s *grpc.Server) { orchestratorv1.RegisterReviewServiceServer(s, fake) })
	gw, err := New(h.gw.cfg, logx.Discard(), h.db, Conns{Guide: h.conn, Orchestrator: conn}, prometheus.NewRegistry())
	require.NoError(t, err)
	c := &harness{url: newTestServer(t, gw)}
	doc := h.openAPI(t)

	r := c.do(t, http.MethodPost, "/v1/reviews?waitSeconds=120",
		`{"repository":"repositories/r1","baseRef":"main","headRef":"feature","persona":"security"}`, bearer(h.member))
	require.Equal(t, http.StatusOK, r.code, r.body)
	var created map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.body), &created))
	schema := doc.Paths["/v1/reviews"]["post"]["responses"].(map[string]any)["200"].(map[string]any)["schema"].(map[string]any)
	conform(t, doc, schema, created, "CreateReviewResponse")
	require.Equal(t, "REVIEW_OUTCOME_REVIEWED", created["review"].(map[string]any)["review"].(map[string]any)["outcome"])
	fake.mu.Lock()
	require.Len(t, fake.created, 1)
	require.Equal(t, int32(120), fake.created[0].GetWaitSeconds())
	require.Equal(t, "feature", fake.created[0].GetReview().GetHeadRef())
	require.Equal(t, "acme", fake.who[0].TenantID)
	require.Equal(t, "bob", fake.who[0].UserID)
	fake.mu.Unlock()

	r = c.do(t, http.MethodGet, "/v1/reviews/rv1", "", bearer(h.member))
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, `"name":"reviews/rv1"`)
	r = c.do(t, http.MethodGet, "/v1/reviews?pageSize=10", "", bearer(h.member))
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, `"reviews":[`)
	requireError(t, c.do(t, http.MethodGet, "/v1/reviews/nope", "", bearer(h.member)), http.StatusNotFound, codes.NotFound, "REVIEW_NOT_FOUND",
		"review reviews/nope not found")
	requireError(t, c.do(t, http.MethodGet, "/v1/reviews", ""), http.StatusUnauthorized, codes.Unauthenticated, ReasonAPIKeyMissing, "missing API key")
}
