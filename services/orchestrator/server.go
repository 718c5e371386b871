package orchestrator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/dag"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/pgstore"
	"sylk.dev/sylk/pkg/secrets"
)

// Input formats.
var (
	planPattern      = regexp.MustCompile(`^sessions/[^/]{1,128}/plans/[^/]{1,128}$`)
	requestIDPattern = regexp.MustCompile(`^[\x21-\x7e]{1,128}$`)
)

// maxSessionLimit bounds the session limits a run may carry.
const maxSessionLimit = 10000

// CreateRun validates the DAG, persists the run and its nodes, and starts
// dispatching. A retry with the same request_id returns the first run.
func (s *Service) CreateRun(ctx context.Context, req *orchestratorv1.CreateRunRequest) (_ *orchestratorv1.CreateRunResponse, err error) {
	defer func() { err = apierr.Status(ctx, s.log, "create run", err) }()
	who, err := s.writer(ctx)
	if err != nil {
		return nil, err
	}
	session, err := parseSessionID("session_id", req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if err := s.validateRun(req, session); err != nil {
		return nil, err
	}
	layers, err := dag.Validate(req.GetDag())
	if err != nil {
		return nil, invalidRequest(err)
	}
	if err := validateRunOptions(req); err != nil { // runoptions.go
		return nil, invalidRequest(err)
	}
	if session != "" {
		// Sessions belong to users: a run's events and limits go to its
		// session, so a run may only be in one of the caller's own.
		if err := s.sessions.Open(ctx, who, session, "run in it"); err != nil {
			return nil, err
		}
	}
	run, err := s.newRun(ctx, who, session, req)
	if err != nil {
		return nil, err
	}
	if r := req.GetRequestId(); r != "" {
		if resp, err := s.retried(ctx, who, r, run.RequestHash); resp != nil || err != nil {
			return resp, err
		}
	}
	nodes, err := newNodes(req, layers)
	if err != nil {
		return nil, err
	}
	if resp, err := s.storeRun(ctx, who, run, nodes, req); resp != nil || err != nil {
		return resp, err
	}
	s.log.InfoContext(ctx, "run created", logx.KeyTenantID, run.TenantID, logx.KeyRunID, run.ID,
		logx.KeySessionID, session, "nodes", len(nodes), "max_concurrency", run.MaxConcurrency)
	// The run is stored: start it. Should this fail, the resync loop starts it.
	// It goes on even if the caller goes away, so that effects follow commits.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectsTimeout)
	defer cancel()
	if _, err := s.withRun(sctx, run.TenantID, run.ID, false, func(tx pgx.Tx, r *runRow, eff *effects) error {
		return s.advance(sctx, tx, r, eff)
	}); err != nil {
		s.log.WarnContext(ctx, "start run; the resync loop will retry", logx.KeyRunID, run.ID, logx.Err(err))
	}
	return s.createResponse(ctx, run.TenantID, run.ID)
}

// validateRun checks a CreateRun's fields but its DAG's nodes and options.
func (s *Service) validateRun(req *orchestratorv1.CreateRunRequest, session string) error {
	if p := req.GetPlan(); p != "" {
		if !planPattern.MatchString(p) {
			return apierr.Invalid("plan", `want "sessions/{session}/plans/{plan}"`)
		}
		// A plan is made in a session; its run is in the same one.
		if planSession := strings.Split(p, "/")[1]; !strings.EqualFold(planSession, session) {
			return apierr.Invalid("plan", "%s is in session %s, but session_id is %q", p, planSession, session)
		}
	}
	if r := req.GetRequestId(); r != "" && !requestIDPattern.MatchString(r) {
		return apierr.Invalid("request_id", "want 1-128 printable ASCII characters without spaces")
	}
	if c := req.GetMaxConcurrency(); c < 0 || int(c) > s.cfg.MaxConcurrencyLimit {
		return apierr.Invalid("max_concurrency", "must be between 1 and %d (0 means %d)", s.cfg.MaxConcurrencyLimit, s.cfg.DefaultMaxConcurrency)
	}
	if lim := req.GetSessionLimits(); lim != nil {
		if lim.GetMaxConcurrentTasks() < 0 || lim.GetMaxConcurrentTasks() > maxSessionLimit ||
			lim.GetMaxEngineers() < 0 || lim.GetMaxEngineers() > maxSessionLimit {
			return apierr.Invalid("session_limits", "max_concurrent_tasks and max_engineers must be between 0 and %d", maxSessionLimit)
		}
		if session == "" && (lim.GetMaxConcurrentTasks() > 0 || lim.GetMaxEngineers() > 0) {
			return apierr.Invalid("session_limits", "need session_id")
		}
	}
	if req.GetDag() == nil {
		return apierr.Invalid("dag", "is required")
	}
	if n := proto.Size(req.GetDag()); n > s.cfg.MaxDagBytes {
		return apierr.Invalid("dag", "%d bytes exceed the limit of %d", n, s.cfg.MaxDagBytes)
	}
	return nil
}

// newRun is the row of a run CreateRun is about to store: its repository
// resolved to the tenant's registered one (repository.go) and its starting
// commit, its request digested when it has an id.
func (s *Service) newRun(ctx context.Context, who identity.Identity, session string, req *orchestratorv1.CreateRunRequest) (*runRow, error) {
	repo, err := s.repos.resolve(ctx, who, req.GetRepository())
	if err != nil {
		return nil, err
	}
	var base string
	if repo.Path != "" {
		if base, err = s.resolveBase(ctx, repo); err != nil {
			return nil, err
		}
	}
	blob, err := proto.Marshal(req.GetDag())
	if err != nil {
		return nil, fmt.Errorf("encode dag: %w", err)
	}
	maxConc := req.GetMaxConcurrency()
	if maxConc == 0 {
		maxConc = int32(s.cfg.DefaultMaxConcurrency)
	}
	run := &runRow{
		TenantID: who.TenantID, ID: ids.New(), UserID: who.UserID, SessionID: session, Plan: req.GetPlan(),
		State: statePending, MaxConcurrency: maxConc, DAG: blob,
		FailFast: req.GetDag().GetPolicy().GetFailFast(), LeaseOwner: s.cfg.ReplicaID,
		Repository: repo.Path, RepositoryName: repo.Name, BaseCommit: base, Interactive: req.GetInteractive(),
		SessionMaxTasks:     req.GetSessionLimits().GetMaxConcurrentTasks(),
		SessionMaxEngineers: req.GetSessionLimits().GetMaxEngineers(),
		Layered:             len(req.GetDag().GetExecutionOrder()) > 0,
	}
	if r := req.GetRequestId(); r != "" {
		digest, err := requestDigest(req)
		if err != nil {
			return nil, fmt.Errorf("digest request: %w", err)
		}
		run.RequestID, run.RequestHash = &r, digest
	}
	return run, nil
}

// newNodes is the node rows of a new run: each node's layer, role, retry
// policy and submitted form with its task context (spec H-03).
func newNodes(req *orchestratorv1.CreateRunRequest, layers [][]string) ([]newNode, error) {
	layerOf := make(map[string]int, len(req.GetDag().GetNodes()))
	for i, l := range layers {
		for _, id := range l {
			layerOf[id] = i
		}
	}
	docs := newRunDocs(req.GetContext()) // taskcontext.go
	nodes := make([]newNode, len(req.GetDag().GetNodes()))
	for i, n := range req.GetDag().GetNodes() {
		retry := dag.Retry(req.GetDag(), n)
		spec, err := proto.Marshal(withTaskContext(docs, withReviewPersona(n, req.GetReviewPersona()))) // taskcontext.go (spec H-03)
		if err != nil {
			return nil, fmt.Errorf("encode node: %w", err)
		}
		nodes[i] = newNode{ID: n.GetId(), Position: i, Layer: layerOf[n.GetId()], Role: dag.Role(n), DependsOn: n.GetDependsOn(),
			Priority: n.GetPriority(), MaxRetries: retry.GetMax(), BackoffMS: retry.GetBackoff().AsDuration().Milliseconds(), Spec: spec}
	}
	return nodes, nil
}

// storeRun stores a new run with its nodes and options. A concurrent retry
// with the same request id that stored its run first wins: its run is the
// answer (resp set).
func (s *Service) storeRun(ctx context.Context, who identity.Identity, run *runRow, nodes []newNode,
	req *orchestratorv1.CreateRunRequest) (*orchestratorv1.CreateRunResponse, error) {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := insertRun(ctx, tx, run, s.newLeaseTTL()); err != nil {
			return err
		}
		if err := insertNodes(ctx, tx, run.TenantID, run.ID, nodes); err != nil {
			return err
		}
		if err := saveRunOptions(ctx, tx, run.TenantID, run.ID, req); err != nil { // runoptions.go
			return err
		}
		return s.recordCreated(ctx, tx, who, run, len(nodes)) // audit.go
	})
	if err != nil && run.RequestID != nil && pgstore.IsUniqueViolation(err) {
		resp, rerr := s.retried(ctx, who, *run.RequestID, run.RequestHash)
		if resp == nil && rerr == nil {
			rerr = fmt.Errorf("look up request id: %w", errNotFound)
		}
		return resp, rerr
	}
	if err != nil {
		return nil, fmt.Errorf("create run: %w", err)
	}
	if len(nodes) >= analyzeThreshold {
		// A large run changes the tables' shape: plan its queries on fresh
		// statistics rather than wait for autovacuum. The run starts
		// meanwhile: its first dispatches scan the nodes anyway.
		go func() {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), effectsTimeout)
			defer cancel()
			if err := analyzeNodes(actx, s.db); err != nil {
				s.log.WarnContext(actx, "analyze node tables", logx.Err(err))
			}
		}()
	}
	return nil, nil
}

func (s *Service) createResponse(ctx context.Context, tenant, id string) (*orchestratorv1.CreateRunResponse, error) {
	r, err := s.loadRun(ctx, tenant, "", id)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.CreateRunResponse{Run: r}, nil
}

// GetRun returns a run with the status of each node, in DAG order.
func (s *Service) GetRun(ctx context.Context, req *orchestratorv1.GetRunRequest) (_ *orchestratorv1.GetRunResponse, err error) {
	defer func() { err = apierr.Status(ctx, s.log, "get run", err) }()
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseRunName(req.GetName())
	if err != nil {
		return nil, err
	}
	r, err := s.loadRun(ctx, who.TenantID, runOwner(who), id)
	if err != nil {
		return nil, err
	}
	return &orchestratorv1.GetRunResponse{Run: r}, nil
}

// ListRuns pages through the caller's runs (an admin's: the tenant's),
// newest first. Listed runs carry neither the DAG nor node statuses: GetRun
// has them.
func (s *Service) ListRuns(ctx context.Context, req *orchestratorv1.ListRunsRequest) (_ *orchestratorv1.ListRunsResponse, err error) {
	defer func() { err = apierr.Status(ctx, s.log, "list runs", err) }()
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	size, cursor, err := s.pageOf(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	session, err := parseSessionID("session_id", req.GetSessionId())
	if err != nil {
		return nil, err
	}
	rows, err := listRuns(ctx, s.db, who.TenantID, runOwner(who), session, cursor, size+1)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	resp := &orchestratorv1.ListRunsResponse{}
	rows, resp.NextPageToken = page(rows, size, func(r *runRow) pageCursor { return pageCursor{CreateTime: r.CreateTime, ID: r.ID} })
	for _, r := range rows {
		resp.Runs = append(resp.Runs, runProto(r, nil, nil))
	}
	return resp, nil
}

// runOwner is whose runs the caller may see and act on: their own (a
// service acting for a user counts as that user), or, for an admin, every
// run of the tenant ("").
func runOwner(who identity.Identity) string {
	if who.Role == identity.RoleAdmin {
		return ""
	}
	return who.UserID
}

// owns reports whether run is owner's to see (every run when owner is "").
func owns(owner string, run *runRow) bool { return owner == "" || run.UserID == owner }

// checkRun answers NotFound unless run id is one the caller may see (see
// runOwner), as for a run that does not exist.
func (s *Service) checkRun(ctx context.Context, who identity.Identity, id string) error {
	var one int
	err := s.db.QueryRow(ctx, `SELECT 1 FROM runs WHERE tenant_id = $1 AND id = $2 AND ($3 = '' OR user_id = $3)`,
		who.TenantID, id, runOwner(who)).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return runNotFound(runName(id))
	}
	if err != nil {
		return fmt.Errorf("load run: %w", err)
	}
	return nil
}

// writer returns the caller, who must be allowed to change runs.
func (s *Service) writer(ctx context.Context) (identity.Identity, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return who, err
	}
	if who.Role == identity.RoleViewer {
		return who, errViewer
	}
	return who, nil
}

// loadRun reads a run with its DAG and node statuses: one owner created,
// unless owner is "" (see runOwner).
func (s *Service) loadRun(ctx context.Context, tenant, owner, id string) (*orchestratorv1.Run, error) {
	var (
		run   *runRow
		nodes []nodeRow
	)
	// One snapshot, so that the run and its nodes agree.
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if run, err = getRun(ctx, tx, tenant, id); err != nil {
			return err
		}
		if !owns(owner, run) {
			return errNotFound
		}
		if nodes, err = listNodes(ctx, tx, tenant, id); err != nil {
			return err
		}
		if run.DecisionLog, err = decisionLog(ctx, tx, tenant, id); err != nil {
			return err
		}
		run.DecisionLog = withOutcome(run.DecisionLog, run.State, changesOf(nodes)) // outcome.go
		return nil
	})
	if errors.Is(err, errNotFound) {
		return nil, runNotFound(runName(id))
	}
	if err != nil {
		return nil, fmt.Errorf("load run: %w", err)
	}
	var d orchestratorv1.Dag
	if err := proto.Unmarshal(run.DAG, &d); err != nil {
		return nil, fmt.Errorf("decode dag: %w", err)
	}
	out := runProto(run, &d, nodes)
	if err := s.addRunExtras(ctx, tenant, out); err != nil { // runoptions.go
		return nil, fmt.Errorf("load run: %w", err)
	}
	return out, nil
}

// maxRunOutputBytes bounds the nodes' output in one run message: a run of
// many nodes, each with up to a megabyte per stream, would otherwise not fit
// in a gRPC message at all.
const maxRunOutputBytes = 16 << 20

// fitOutputs trims the nodes' stdout and stderr, in place, so that together
// they hold at most budget bytes: every stream keeps up to the same share,
// the largest share that fits, as its head and tail around a marker, and
// its node says its output was truncated.
func fitOutputs(nodes []nodeRow, budget int) {
	total := 0
	for _, n := range nodes {
		total += len(n.Stdout) + len(n.Stderr)
	}
	if total <= budget {
		return
	}
	sizes := make([]int, 0, 2*len(nodes))
	for _, n := range nodes {
		sizes = append(sizes, len(n.Stdout), len(n.Stderr))
	}
	// The share: streams smaller than it keep everything, larger ones
	// keep the share.
	slices.Sort(sizes)
	share, left := 0, budget
	for i, sz := range sizes {
		if each := left / (len(sizes) - i); sz > each {
			share = each
			break
		}
		left -= sz
	}
	for i := range nodes {
		n := &nodes[i]
		if len(n.Stdout) > share {
			n.Stdout, n.StdoutTruncated = trimOutput(n.Stdout, share), true
		}
		if len(n.Stderr) > share {
			n.Stderr, n.StderrTruncated = trimOutput(n.Stderr, share), true
		}
	}
}

// trimOutput keeps about limit bytes of s: its head and tail, valid UTF-8,
// with a marker saying how much is left out.
func trimOutput(s string, limit int) string {
	marker := fmt.Sprintf("\n... [%d bytes not shown: the run's output is too large for one response] ...\n", len(s)-limit)
	keep := max(limit-len(marker), 0)
	head, tail := s[:keep/2], s[len(s)-(keep-keep/2):]
	return strings.ToValidUTF8(head, "") + marker + strings.ToValidUTF8(tail, "")
}

func runProto(r *runRow, d *orchestratorv1.Dag, nodes []nodeRow) *orchestratorv1.Run {
	out := &orchestratorv1.Run{
		Name:           runName(r.ID),
		Id:             r.ID,
		SessionId:      r.SessionID,
		Plan:           r.Plan,
		State:          orchestratorv1.RunState(orchestratorv1.RunState_value["RUN_STATE_"+r.State]),
		MaxConcurrency: r.MaxConcurrency,
		Dag:            d,
		CreateTime:     timestamppb.New(r.CreateTime),
		StartTime:      optTime(r.StartTime),
		EndTime:        optTime(r.EndTime),
		Repository:     r.shownRepository(),
		BaseCommit:     r.BaseCommit,
		ResultPatch:    r.ResultPatch,
		MergeConflicts: r.MergeConflicts,
		DecisionLog:    r.DecisionLog,
		Interactive:    r.Interactive,
	}
	fitOutputs(nodes, maxRunOutputBytes)
	for _, n := range nodes {
		ns := &orchestratorv1.NodeStatus{
			NodeId:          n.NodeID,
			State:           orchestratorv1.NodeState(orchestratorv1.NodeState_value["NODE_STATE_"+n.State]),
			Attempt:         n.Attempt,
			ExitCode:        n.ExitCode,
			Stdout:          n.Stdout,
			Stderr:          n.Stderr,
			OutputTruncated: n.StdoutTruncated || n.StderrTruncated,
			Error:           n.Error,
			StartTime:       optTime(n.StartTime),
			EndTime:         optTime(n.EndTime),
			WorkerId:        n.WorkerID,
			TimedOut:        n.TimedOut,
			Paused:          n.Paused,
			Patch:           n.Patch,
			Handoffs:        n.Handoffs,
			OutputPartial:   n.OutputPartial,
		}
		if n.Handoff != "" {
			ns.Handoff, _ = decodeHandoff(n.Handoff)
		}
		if n.Report != "" {
			ns.Report = &orchestratorv1.TaskReport{}
			_ = protojson.Unmarshal([]byte(n.Report), ns.Report)
		}
		if n.Pipeline != "" {
			ns.Pipeline = &orchestratorv1.PipelineStatus{}
			_ = protojson.Unmarshal([]byte(n.Pipeline), ns.Pipeline)
		}
		if n.State == statePending {
			ns.NextAttemptTime = optTime(n.NotBefore)
			if n.Paused {
				ns.State = orchestratorv1.NodeState_NODE_STATE_PAUSED
			}
		}
		if n.State == stateSucceeded || n.State == stateFailed || n.State == stateNoChanges {
			ns.Duration = durationpb.New(time.Duration(n.DurationUS) * time.Microsecond)
		}
		out.Nodes = append(out.Nodes, ns)
	}
	if r.State == stateFailed {
		out.PartialFailure = partialFailure(nodes)
	}
	// The plan's commands and prompts are shown without secrets, as the
	// outputs are stored (results.go); the workers run them as written.
	out.Plan = secrets.Scrub(out.Plan)
	secrets.ScrubMessage(out.Dag)
	return out
}

func optTime(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// parseRunName accepts "runs/{uuid}".
func parseRunName(name string) (string, error) {
	id, ok := strings.CutPrefix(name, "runs/")
	if name == "" {
		return "", apierr.Invalid("name", "is required")
	}
	if !ok || !ids.Valid(id) {
		return "", apierr.Invalid("name", `want "runs/{uuid}", got %q`, truncateForError(name))
	}
	return strings.ToLower(id), nil
}

// parseSessionID accepts a session id or its resource name
// "sessions/{id}", and returns the id in lower case (as ids makes them);
// empty stays empty.
func parseSessionID(field, v string) (string, error) {
	if v == "" {
		return "", nil
	}
	id := strings.TrimPrefix(v, "sessions/")
	if !ids.Valid(id) {
		return "", apierr.Invalid(field, `want a session id (a UUID) or "sessions/{id}", got %q`, truncateForError(v))
	}
	return strings.ToLower(id), nil
}

func truncateForError(s string) string {
	if len(s) > 80 {
		return strings.ToValidUTF8(s[:80], "") + "..."
	}
	return s
}

func encodeCursor(c pageCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreateTime.UnixMicro(), 10) + "|" + c.ID))
}

func decodeCursor(tok string) (*pageCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, err
	}
	ts, id, ok := strings.Cut(string(b), "|")
	us, err := strconv.ParseInt(ts, 10, 64)
	t, inRange := pgstore.TokenTime(us)
	if !ok || err != nil || !inRange || !ids.Valid(id) {
		return nil, errors.New("malformed page token")
	}
	return &pageCursor{CreateTime: t, ID: id}, nil
}

// retried answers a CreateRun whose request id the caller used before: the
// run it created, or AlreadyExists when the id came with another request.
// Both are nil when the id is new.
func (s *Service) retried(ctx context.Context, who identity.Identity, requestID string, digest []byte) (*orchestratorv1.CreateRunResponse, error) {
	id, stored, err := runForRequest(ctx, s.db, who.TenantID, who.UserID, requestID)
	switch {
	case errors.Is(err, errNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look up request id: %w", err)
	case stored != nil && !bytes.Equal(stored, digest):
		return nil, errRequestIDReused.Withf("request_id %q was used for another request (run runs/%s); use a new id", requestID, id)
	}
	return s.createResponse(ctx, who.TenantID, id)
}

// requestDigest digests what a CreateRun asks for, its request id aside.
func requestDigest(req *orchestratorv1.CreateRunRequest) ([]byte, error) {
	c := proto.Clone(req).(*orchestratorv1.CreateRunRequest)
	c.RequestId = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}
