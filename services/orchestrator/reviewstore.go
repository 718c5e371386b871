package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// ReviewNode is the node id of a review task; it cannot clash with a DAG
// node ("~" is not allowed in node ids). A review task's run id is the
// review's id.
const ReviewNode = "~review"

// dagRoleInspector runs review tasks.
const dagRoleInspector = "inspector"

// Review states as stored.
const (
	reviewPending = "PENDING"
	reviewRunning = "RUNNING"
	reviewDone    = "DONE"
	reviewFailed  = "FAILED"
)

// reviewPoll is how often a waiting CreateReview looks for a review
// another replica completed.
const reviewPoll = time.Second

// reviewRow is a stored review request.
type reviewRow struct {
	TenantID, ID, UserID, SessionID string
	Repository, RepoPath            string
	BaseRef, HeadRef, Patch         string
	Persona, State, Error           string
	Review                          []byte
	CreateTime                      time.Time
	EndTime                         *time.Time
}

const reviewColumns = `tenant_id, id, user_id, session_id, repository, repo_path, base_ref, head_ref, patch, persona, state, review, error,
	create_time, end_time`

func scanReview(row pgx.Row) (*reviewRow, error) {
	var r reviewRow
	err := row.Scan(&r.TenantID, &r.ID, &r.UserID, &r.SessionID, &r.Repository, &r.RepoPath, &r.BaseRef, &r.HeadRef, &r.Patch,
		&r.Persona, &r.State, &r.Review, &r.Error, &r.CreateTime, &r.EndTime)
	return &r, err
}

func insertReview(ctx context.Context, q querier, r *reviewRow) error {
	return q.QueryRow(ctx, `INSERT INTO reviews (tenant_id, id, user_id, session_id, repository, repo_path, base_ref, head_ref, patch, persona, state)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING create_time`,
		r.TenantID, r.ID, r.UserID, r.SessionID, r.Repository, r.RepoPath, r.BaseRef, r.HeadRef, r.Patch, r.Persona, r.State).Scan(&r.CreateTime)
}

// listReviews pages through a user's reviews, newest first.
func listReviews(ctx context.Context, q querier, tenant, user string, after *pageCursor, limit int) ([]*reviewRow, error) {
	args := []any{tenant, user, limit}
	cond := ""
	if after != nil {
		cond = ` AND (create_time, id) < ($4, $5)`
		args = append(args, after.CreateTime, after.ID)
	}
	rows, err := q.Query(ctx, `SELECT `+reviewColumns+` FROM reviews WHERE tenant_id = $1 AND user_id = $2`+cond+`
		ORDER BY create_time DESC, id DESC LIMIT $3`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*reviewRow, error) { return scanReview(row) })
}

// proto is the API form of a review request; withPatch keeps its patch.
func (r *reviewRow) proto(withPatch bool) *orchestratorv1.ReviewRequest {
	out := &orchestratorv1.ReviewRequest{Name: "reviews/" + r.ID, Id: r.ID, Repository: r.Repository, BaseRef: r.BaseRef, HeadRef: r.HeadRef,
		Persona: r.Persona, SessionId: r.SessionID, Error: r.Error, CreateTime: timestamppb.New(r.CreateTime), EndTime: optTime(r.EndTime),
		State: orchestratorv1.ReviewState(orchestratorv1.ReviewState_value["REVIEW_STATE_"+r.State])}
	if withPatch {
		out.Patch = r.Patch
	}
	if len(r.Review) > 0 {
		out.Review = &orchestratorv1.Review{}
		if err := proto.Unmarshal(r.Review, out.Review); err != nil {
			out.Review = nil
		}
	}
	return out
}

// load reads one of the caller's reviews, given up first when it has been
// pending too long.
func (r *reviewServer) load(ctx context.Context, who identity.Identity, id string, withPatch bool) (*orchestratorv1.ReviewRequest, error) {
	if err := r.expire(ctx, who, id); err != nil {
		return nil, err
	}
	row, err := scanReview(r.s.db.QueryRow(ctx, `SELECT `+reviewColumns+` FROM reviews WHERE tenant_id = $1 AND id = $2 AND user_id = $3`,
		who.TenantID, id, who.UserID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, reviewNotFound("reviews/" + id)
	}
	if err != nil {
		return nil, fmt.Errorf("load review: %w", err)
	}
	return row.proto(withPatch), nil
}

// expire gives up the caller's reviews (id's, or all when id is "") no
// worker reported within ReviewTimeout.
func (r *reviewServer) expire(ctx context.Context, who identity.Identity, id string) error {
	why := fmt.Sprintf("timed out: no inspector worker reported the review within %s", r.s.cfg.ReviewTimeout)
	_, err := r.s.db.Exec(ctx, `UPDATE reviews SET state = 'FAILED', error = $4, end_time = now()
		WHERE tenant_id = $1 AND user_id = $2 AND ($3 = '' OR id = $3) AND state IN ('PENDING', 'RUNNING')
			AND create_time < now() - $5 * interval '1 microsecond'`,
		who.TenantID, who.UserID, id, why, r.s.cfg.ReviewTimeout.Microseconds())
	if err != nil {
		return fmt.Errorf("expire reviews: %w", err)
	}
	return nil
}

// dispatch sends a stored review's task to the inspector queue; one that
// cannot be sent fails.
func (r *reviewServer) dispatch(ctx context.Context, row *reviewRow) {
	s := r.s
	log := s.log.With(logx.KeyTenantID, row.TenantID, "review", row.ID)
	msgID := fmt.Sprintf("%s:%s:1", row.ID, ReviewNode)
	d := &taskv1.TaskDispatch{TenantId: row.TenantID, UserId: row.UserID, SessionId: row.SessionID, RunId: row.ID, NodeId: ReviewNode,
		Attempt: 1, Role: dagRoleInspector, Repository: row.RepoPath, OutputLimitBytes: int64(s.cfg.OutputLimitBytes),
		Fence: &taskv1.TaskFence{AttemptId: msgID, ReplicaId: s.cfg.ReplicaID}, DispatchTime: timestamppb.Now(),
		Priority: messagev1.Priority_PRIORITY_PIPELINE,
		Review:   &taskv1.ReviewTask{Review: "reviews/" + row.ID, BaseRef: row.BaseRef, HeadRef: row.HeadRef, Patch: row.Patch, Persona: row.Persona}}
	state, why := reviewRunning, ""
	if _, err := s.bus.Publish(ctx, topology.TaskSubject(s.bus, dagRoleInspector), msgID, d); err != nil {
		log.ErrorContext(ctx, "dispatch a review", logx.Err(err))
		state, why = reviewFailed, "the review could not be dispatched to an inspector worker"
	}
	// A result may have come first: only a pending review moves.
	if _, err := s.db.Exec(ctx, `UPDATE reviews SET state = $3, error = $4, end_time = CASE WHEN $3 = 'FAILED' THEN now() END
		WHERE tenant_id = $1 AND id = $2 AND state = 'PENDING'`, row.TenantID, row.ID, state, why); err != nil {
		log.ErrorContext(ctx, "store a review's dispatch", logx.Err(err))
	}
}

// handleReviewResult applies a review task's result; it reports whether
// the result was one. A result for a review that is no longer awaited (it
// timed out, or came twice) is dropped.
func (s *Service) handleReviewResult(ctx context.Context, res *result) bool {
	if res.r.GetNodeId() != ReviewNode {
		return false
	}
	tenant, id := res.r.GetTenantId(), res.r.GetRunId()
	log := s.log.With(logx.KeyTenantID, tenant, "review", id)
	rv := res.r.GetReview()
	state, why := reviewDone, ""
	if rv == nil || rv.GetOutcome() == orchestratorv1.ReviewOutcome_REVIEW_OUTCOME_FAILED || res.r.GetError() != "" {
		state = reviewFailed
		why = storable(cmp.Or(res.r.GetError(), rv.GetSummary(), "the worker's report holds no review"), maxStoredErrorBytes)
	}
	var blob []byte
	if rv != nil {
		var err error
		if blob, err = proto.Marshal(rv); err != nil {
			log.ErrorContext(ctx, "review result dropped", logx.Err(err))
			_ = res.msg.Term()
			return true
		}
	}
	var session string
	err := s.db.QueryRow(ctx, `UPDATE reviews SET state = $3, review = $4, error = $5, end_time = now()
		WHERE tenant_id = $1 AND id = $2 AND state IN ('PENDING', 'RUNNING') RETURNING session_id`, tenant, id, state, blob, why).Scan(&session)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		log.InfoContext(ctx, "ignoring a result for a review not awaiting one")
	case err != nil:
		log.WarnContext(ctx, "review result will be redelivered", logx.Err(err))
		_ = res.msg.NakWithDelay(resultRedeliveryDelay)
		return true
	default:
		log.InfoContext(ctx, "review done", slog.String("state", state), slog.String("outcome", rv.GetOutcome().String()))
		s.reviews.wake(tenant, id)
		s.publishEvent(ctx, log, tenant, session, id+":review-completed", &eventv1.Event{Type: eventv1.EventType_EVENT_TYPE_REVIEW_COMPLETED,
			Source: topology.AgentOrchestrator, CorrelationId: "reviews/" + id, Text: "review reviews/" + id + " " + state + ": " + cmp.Or(rv.GetSummary(), why),
			Payload: &eventv1.Event_Review{Review: &eventv1.ReviewEvent{Review: "reviews/" + id, Result: rv}}})
	}
	_ = res.msg.Ack()
	return true
}

func reviewKey(tenant, id string) string { return tenant + "\x00" + id }

// wait returns once review id is done (or failed), within d or ctx: when
// this replica applies its result at once, else within reviewPoll.
func (r *reviewServer) wait(ctx context.Context, tenant, id string, d time.Duration) {
	ch := make(chan struct{})
	key := reviewKey(tenant, id)
	r.mu.Lock()
	r.waiters[key] = append(r.waiters[key], ch)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if left := slices.DeleteFunc(r.waiters[key], func(c chan struct{}) bool { return c == ch }); len(left) > 0 {
			r.waiters[key] = left
		} else {
			delete(r.waiters, key)
		}
	}()
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	poll := time.NewTicker(reviewPoll)
	defer poll.Stop()
	for {
		var state string
		err := r.s.db.QueryRow(ctx, `SELECT state FROM reviews WHERE tenant_id = $1 AND id = $2`, tenant, id).Scan(&state)
		if err != nil || state == reviewDone || state == reviewFailed {
			return
		}
		select {
		case <-ch:
			return
		case <-ctx.Done():
			return
		case <-timeout.C:
			return
		case <-poll.C:
		}
	}
}

// wake releases the calls waiting on review id.
func (r *reviewServer) wake(tenant, id string) {
	key := reviewKey(tenant, id)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.waiters[key] {
		close(ch)
	}
	delete(r.waiters, key)
}
