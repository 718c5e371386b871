package guide

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
)

// Recording and replay of a session's queries (spec E-07).

const (
	recordingPrefix    = "rec_"
	maxRecordingTags   = 16
	maxRecordingTagLen = 64
	maxDescription     = 2000
)

type recordingRow struct {
	ID, SessionID, DisplayName, Description string
	Tags                                    []string
	CreateTime                              time.Time
	StopTime                                *time.Time
	Queries                                 []*guidev1.RecordedQuery
	Count                                   int32
}

func recordingName(sessionID, id string) string {
	return sessionsCollection + sessionID + "/recordings/" + id
}

func (r recordingRow) proto() *guidev1.Recording {
	return &guidev1.Recording{
		Name: recordingName(r.SessionID, r.ID), Id: r.ID, DisplayName: r.DisplayName, Description: r.Description,
		SessionId: r.SessionID, CreateTime: timestamppb.New(r.CreateTime), StopTime: tsOrNil(r.StopTime),
		Recording: r.StopTime == nil, QueryCount: r.Count, Tags: r.Tags, Queries: r.Queries,
	}
}

// parseRecordingName returns the session and recording ids.
func parseRecordingName(name string) (string, string, error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "sessions" || parts[2] != "recordings" || !ids.Valid(parts[1]) ||
		!strings.HasPrefix(parts[3], recordingPrefix) || !ids.Valid(strings.TrimPrefix(parts[3], recordingPrefix)) {
		return "", "", apierr.Invalid("name", "want sessions/{uuid}/recordings/rec_{uuid}, got %q", truncate(name, 120))
	}
	return strings.ToLower(parts[1]), strings.ToLower(parts[3]), nil
}

// recordQuery is the write that appends a user message to the session's
// active recording, if it has one with room left: one statement, so that
// it runs with the message whether or not the session is being recorded.
func (s *Service) recordQuery(who identity.Identity, m message) stmt {
	return stmt{sql: `INSERT INTO recorded_queries (recording_id, idx, time, raw_query, classified_intent,
		routed_to, response, success, correlation_id)
		SELECT r.id, n.n, $3, $4, $5, $6, $7, $8, $9 FROM recordings r,
			LATERAL (SELECT count(*) AS n FROM recorded_queries q WHERE q.recording_id = r.id) n
		WHERE r.tenant_id = $1 AND r.session_id = $2 AND r.stop_time IS NULL AND n.n < $10`,
		args: []any{who.TenantID, m.SessionID, m.CreateTime, m.Text, m.Route.IntentType, m.Route.Target,
			truncate(m.Reply, 4<<10), m.Route.Target != "", m.CorrelationID, s.cfg.MaxRecordingQueries}}
}

// StartRecording starts recording a session's queries.
func (s *Service) StartRecording(ctx context.Context, req *guidev1.StartRecordingRequest) (*guidev1.StartRecordingResponse, error) {
	sess, err := s.ownSession(ctx, req.GetParent())
	if err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.GetDisplayName())
	desc := strings.TrimSpace(req.GetDescription())
	switch {
	case utf8.RuneCountInString(name) > s.cfg.MaxDisplayNameChars:
		return nil, apierr.Invalid("display_name", "longer than %d characters", s.cfg.MaxDisplayNameChars)
	case utf8.RuneCountInString(desc) > maxDescription:
		return nil, apierr.Invalid("description", "longer than %d characters", maxDescription)
	case len(req.GetTags()) > maxRecordingTags:
		return nil, apierr.Invalid("tags", "at most %d", maxRecordingTags)
	case !utf8.ValidString(name) || !utf8.ValidString(desc):
		return nil, apierr.Invalid("display_name", "must be valid UTF-8")
	}
	for _, t := range req.GetTags() {
		if t == "" || len(t) > maxRecordingTagLen || !utf8.ValidString(t) {
			return nil, apierr.Invalid("tags", "each tag must be 1 to %d bytes of UTF-8", maxRecordingTagLen)
		}
	}
	if sess.State != stateActive && sess.State != stateCreated {
		return nil, apierr.Status(ctx, s.log, "start recording", stateError(reasonSessionNotOpen, sess.State, "start recording", stateCreated, stateActive))
	}
	r := recordingRow{ID: recordingPrefix + ids.New(), SessionID: sess.ID, DisplayName: name, Description: desc,
		Tags: nonNil(req.GetTags()), CreateTime: s.now()}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var active int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM recordings WHERE tenant_id = $1 AND session_id = $2 AND stop_time IS NULL`,
			sess.TenantID, sess.ID).Scan(&active); err != nil {
			return err
		}
		if active > 0 {
			return apierr.FailedPrecondition(reasonRecordingInProgress, "session is being recorded; stop the current recording first")
		}
		_, err := tx.Exec(ctx, `INSERT INTO recordings (id, tenant_id, user_id, session_id, display_name, description, tags, create_time)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, r.ID, sess.TenantID, sess.UserID, sess.ID, r.DisplayName, r.Description, r.Tags, r.CreateTime)
		return err
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "start recording", err)
	}
	return &guidev1.StartRecordingResponse{Recording: r.proto()}, nil
}

func (s *Service) loadRecording(ctx context.Context, q querier, o owner, sessionID, id string) (recordingRow, error) {
	var r recordingRow
	err := q.QueryRow(ctx, `SELECT id, session_id, display_name, description, tags, create_time, stop_time FROM recordings
		WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3 AND id = $4`, o.tenant, o.user, sessionID, id).
		Scan(&r.ID, &r.SessionID, &r.DisplayName, &r.Description, &r.Tags, &r.CreateTime, &r.StopTime)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, apierr.NotFound("recording", recordingName(sessionID, id))
	}
	if err != nil {
		return r, fmt.Errorf("load recording: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT idx, time, raw_query, classified_intent, routed_to, response, success
		FROM recorded_queries WHERE recording_id = $1 ORDER BY idx`, id)
	if err != nil {
		return r, fmt.Errorf("load recorded queries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q guidev1.RecordedQuery
		var t time.Time
		if err := rows.Scan(&q.Index, &t, &q.RawQuery, &q.ClassifiedIntent, &q.RoutedTo, &q.Response, &q.Success); err != nil {
			return r, err
		}
		q.Time = timestamppb.New(t)
		r.Queries = append(r.Queries, &q)
	}
	r.Count = int32(len(r.Queries))
	return r, rows.Err()
}

// StopRecording stops a recording.
func (s *Service) StopRecording(ctx context.Context, req *guidev1.StopRecordingRequest) (*guidev1.StopRecordingResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sid, rid, err := parseRecordingName(req.GetName())
	if err != nil {
		return nil, err
	}
	o := ownerOf(who)
	if _, err := s.db.Exec(ctx, `UPDATE recordings SET stop_time = $5 WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3
		AND id = $4 AND stop_time IS NULL`, o.tenant, o.user, sid, rid, s.now()); err != nil {
		return nil, apierr.Status(ctx, s.log, "stop recording", err)
	}
	r, err := s.loadRecording(ctx, s.db, o, sid, rid)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "stop recording", err)
	}
	return &guidev1.StopRecordingResponse{Recording: r.proto()}, nil
}

// GetRecording returns a recording with its queries.
func (s *Service) GetRecording(ctx context.Context, req *guidev1.GetRecordingRequest) (*guidev1.GetRecordingResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sid, rid, err := parseRecordingName(req.GetName())
	if err != nil {
		return nil, err
	}
	r, err := s.loadRecording(ctx, s.db, ownerOf(who), sid, rid)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get recording", err)
	}
	return &guidev1.GetRecordingResponse{Recording: r.proto()}, nil
}

// ListRecordings returns a session's recordings, without their queries.
func (s *Service) ListRecordings(ctx context.Context, req *guidev1.ListRecordingsRequest) (*guidev1.ListRecordingsResponse, error) {
	sess, err := s.ownSession(ctx, req.GetParent())
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT r.id, r.session_id, r.display_name, r.description, r.tags, r.create_time, r.stop_time,
		(SELECT count(*) FROM recorded_queries q WHERE q.recording_id = r.id)
		FROM recordings r WHERE r.tenant_id = $1 AND r.session_id = $2 ORDER BY r.create_time, r.id`, sess.TenantID, sess.ID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list recordings", err)
	}
	defer rows.Close()
	resp := &guidev1.ListRecordingsResponse{}
	for rows.Next() {
		var r recordingRow
		if err := rows.Scan(&r.ID, &r.SessionID, &r.DisplayName, &r.Description, &r.Tags, &r.CreateTime, &r.StopTime, &r.Count); err != nil {
			return nil, apierr.Status(ctx, s.log, "list recordings", err)
		}
		resp.Recordings = append(resp.Recordings, r.proto())
	}
	if err := rows.Err(); err != nil {
		return nil, apierr.Status(ctx, s.log, "list recordings", err)
	}
	return resp, nil
}

// ReplayRecording replays a recording: exact sends every query now,
// dry_run classifies them without sending, interactive starts a replay
// that StepReplay advances.
func (s *Service) ReplayRecording(ctx context.Context, req *guidev1.ReplayRecordingRequest) (*guidev1.ReplayRecordingResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sid, rid, err := parseRecordingName(req.GetName())
	if err != nil {
		return nil, err
	}
	mode := req.GetMode()
	if mode == guidev1.ReplayMode_REPLAY_MODE_UNSPECIFIED {
		mode = guidev1.ReplayMode_REPLAY_MODE_INTERACTIVE
	}
	if _, ok := guidev1.ReplayMode_name[int32(mode)]; !ok {
		return nil, apierr.Invalid("mode", "unknown replay mode %d", mode)
	}
	o := ownerOf(who)
	rec, err := s.loadRecording(ctx, s.db, o, sid, rid)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "replay recording", err)
	}
	target := sid
	if ts := req.GetTargetSession(); ts != "" {
		if target, err = parseSessionName("target_session", ts); err != nil {
			return nil, err
		}
	}
	tsess, err := getSession(ctx, s.db, o, target, false)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "replay recording", err)
	}
	if mode != guidev1.ReplayMode_REPLAY_MODE_DRY_RUN && tsess.State != stateActive {
		return nil, apierr.Status(ctx, s.log, "replay recording", stateError(reasonSessionNotActive, tsess.State, "replay into it", stateActive))
	}
	now := s.now()
	state := &guidev1.ReplayState{Recording: req.GetName(), Mode: mode, StartTime: timestamppb.New(now), Modifications: map[int32]string{}}
	resp := &guidev1.ReplayRecordingResponse{State: state}
	switch mode {
	case guidev1.ReplayMode_REPLAY_MODE_DRY_RUN:
		for _, q := range rec.Queries {
			r, err := s.dryRun(ctx, who, q)
			if err != nil {
				return nil, err
			}
			resp.Results = append(resp.Results, r)
		}
		state.CurrentIndex, state.Done = int32(len(rec.Queries)), true
	case guidev1.ReplayMode_REPLAY_MODE_EXACT:
		for _, q := range rec.Queries {
			r, err := s.replaySend(ctx, target, q.GetIndex(), q.GetRawQuery(), "sent", "")
			if err != nil {
				return nil, err
			}
			resp.Results = append(resp.Results, r)
		}
		state.CurrentIndex, state.Done = int32(len(rec.Queries)), true
	default:
		id := ids.New()
		if _, err := s.db.Exec(ctx, `INSERT INTO replays (id, tenant_id, user_id, session_id, recording_id, mode, start_time, done)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, id, o.tenant, o.user, target, rid, "interactive", now, len(rec.Queries) == 0); err != nil {
			return nil, apierr.Status(ctx, s.log, "replay recording", err)
		}
		state.Name = sessionsCollection + target + "/replays/" + id
		state.Done = len(rec.Queries) == 0
	}
	return resp, nil
}

// dryRun classifies a recorded query as it would be routed now.
func (s *Service) dryRun(ctx context.Context, who identity.Identity, q *guidev1.RecordedQuery) (*guidev1.ReplayStepResult, error) {
	text := q.GetRawQuery()
	r := &guidev1.ReplayStepResult{Index: q.GetIndex(), Query: text, Action: "classified"}
	if isSlashCommand(text) {
		r.Route = &guidev1.Route{Target: authorGuide, Tier: tierSlashCommand, Confidence: 1, IntentType: "COMMAND"}
		return r, nil
	}
	// As a message is routed, past routing failures included, so that the
	// dry run shows the route a replay would take.
	cl, tier, err := s.classifyText(ctx, who.TenantID, text)
	if err != nil {
		return nil, err
	}
	route := outcomeRoute{Tier: tier, Confidence: cl.Confidence, IntentType: cl.IntentType, Reason: cl.Reason,
		KnowledgeIntent: cl.KnowledgeIntent, TimeScope: cl.TimeScope}
	switch check, _ := validateChange(cl, text); {
	case cl.Target == "" || cl.Confidence < s.cfg.RouteThreshold:
		route.IntentType = gateAmbiguous
		route.KnowledgeIntent, route.TimeScope = "", ""
	case check != "":
		// The intent gate's step 2 would ask the user first.
		route.Reason += "; " + check + " check failed"
	default:
		route.Target = cl.Target
	}
	r.Route = route.proto()
	return r, nil
}

// replaySend sends one query into the target session, under requestID
// when it is not empty.
func (s *Service) replaySend(ctx context.Context, target string, index int32, text, action, requestID string) (*guidev1.ReplayStepResult, error) {
	resp, err := s.sendMessage(ctx, &guidev1.SendMessageRequest{Parent: sessionName(target), Text: text, RequestId: requestID}, false)
	if err != nil {
		return nil, err
	}
	return &guidev1.ReplayStepResult{Index: index, Query: text, Action: action, Route: resp.GetRoute(), CorrelationId: resp.GetCorrelationId()}, nil
}

// StepReplay advances an interactive replay by one query: continue sends
// it, modify sends the given text instead, skip passes over it, abort ends
// the replay.
func (s *Service) StepReplay(ctx context.Context, req *guidev1.StepReplayRequest) (*guidev1.StepReplayResponse, error) {
	st, err := readReplayStep(ctx, req)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "step replay", err)
	}
	if err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return st.load(ctx, tx) }); err != nil {
		return nil, apierr.Status(ctx, s.log, "step replay", err)
	}
	// The query is sent before the replay moves past it, so that one the
	// session did not take (suspended, or the bus down) is still the next
	// one.
	result, err := s.sendStep(ctx, st)
	if err != nil {
		return nil, err
	}
	if err := st.save(ctx, s.db); err != nil {
		return nil, apierr.Status(ctx, s.log, "step replay", err)
	}
	return &guidev1.StepReplayResponse{State: st.state(), Result: result}, nil
}

// replayStep is one step of an interactive replay: the replay as read,
// the query it is at, and the replay as it will be after the step.
type replayStep struct {
	name, action, text string
	owner              owner
	sessionID, id      string
	recordingID        string
	index, next        int32
	skipped            []int32
	mods               map[string]string
	done               bool
	start              time.Time
	query              *guidev1.RecordedQuery
}

// readReplayStep checks a StepReplay request.
func readReplayStep(ctx context.Context, req *guidev1.StepReplayRequest) (*replayStep, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(req.GetName(), "/")
	if len(parts) != 4 || parts[0] != "sessions" || parts[2] != "replays" || !ids.Valid(parts[1]) || !ids.Valid(parts[3]) {
		return nil, apierr.Invalid("name", "want sessions/{uuid}/replays/{uuid}, got %q", truncate(req.GetName(), 120))
	}
	action := strings.ToLower(strings.TrimSpace(req.GetAction()))
	switch action {
	case "continue", "skip", "modify", "abort":
	default:
		return nil, apierr.Invalid("action", "want continue, skip, modify or abort, got %q", truncate(action, 20))
	}
	text := strings.TrimSpace(req.GetText())
	if action == "modify" && text == "" {
		return nil, apierr.Invalid("text", "required to modify a query")
	}
	return &replayStep{name: req.GetName(), action: action, text: text, owner: ownerOf(who),
		sessionID: strings.ToLower(parts[1]), id: strings.ToLower(parts[3])}, nil
}

// load reads the replay and the query it is at, and works out where the
// step leaves it.
func (st *replayStep) load(ctx context.Context, tx pgx.Tx) error {
	err := tx.QueryRow(ctx, `SELECT recording_id, current_index, skipped, modifications, done, start_time FROM replays
		WHERE tenant_id = $1 AND user_id = $2 AND session_id = $3 AND id = $4`, st.owner.tenant, st.owner.user, st.sessionID, st.id).
		Scan(&st.recordingID, &st.index, &st.skipped, &st.mods, &st.done, &st.start)
	if errors.Is(err, pgx.ErrNoRows) {
		return apierr.NotFound("replay", st.name)
	}
	if err != nil {
		return err
	}
	if st.done {
		return apierr.FailedPrecondition(reasonReplayFinished, "this replay is done; start another")
	}
	// A replay covers the queries recorded when it started: replaying a
	// recording that is still recording into its own session records each
	// query again, and those must not be replayed in turn.
	var total int32
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM recorded_queries WHERE recording_id = $1 AND time <= $2`,
		st.recordingID, st.start).Scan(&total); err != nil {
		return err
	}
	if st.action != "abort" && st.index < total {
		st.query = &guidev1.RecordedQuery{}
		if err := tx.QueryRow(ctx, `SELECT idx, raw_query FROM recorded_queries WHERE recording_id = $1 AND idx = $2`,
			st.recordingID, st.index).Scan(&st.query.Index, &st.query.RawQuery); err != nil {
			return err
		}
	}
	st.next = st.index
	switch st.action {
	case "abort":
		st.done = true
	case "skip":
		st.skipped = append(st.skipped, st.index)
		st.next++
	case "modify":
		st.mods[strconv.Itoa(int(st.index))] = st.text
		st.next++
	default:
		st.next++
	}
	st.done = st.done || st.next >= total
	return nil
}

// sendStep sends the step's query (or its modified text) into the session.
// Its request id makes a step retried after a failure, or taken twice at
// once, send it once.
func (s *Service) sendStep(ctx context.Context, st *replayStep) (*guidev1.ReplayStepResult, error) {
	q := st.query
	if q == nil {
		return nil, nil
	}
	requestID := fmt.Sprintf("replay/%s/%d", st.id, q.GetIndex())
	switch st.action {
	case "skip":
		return &guidev1.ReplayStepResult{Index: q.GetIndex(), Query: q.GetRawQuery(), Action: "skipped"}, nil
	case "modify":
		return s.replaySend(ctx, st.sessionID, q.GetIndex(), st.text, "modified", requestID)
	}
	return s.replaySend(ctx, st.sessionID, q.GetIndex(), q.GetRawQuery(), "sent", requestID)
}

// save moves the replay on, unless another step moved it first.
func (st *replayStep) save(ctx context.Context, q querier) error {
	tag, err := q.Exec(ctx, `UPDATE replays SET current_index = $3, skipped = $4, modifications = $5, done = $6
		WHERE id = $1 AND current_index = $2 AND NOT done AND tenant_id = $7 AND user_id = $8`,
		st.id, st.index, st.next, st.skipped, st.mods, st.done, st.owner.tenant, st.owner.user)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return conflict(reasonReplayMovedOn, "the replay moved on meanwhile; read it again")
	}
	return nil
}

// state is the replay after the step.
func (st *replayStep) state() *guidev1.ReplayState {
	out := &guidev1.ReplayState{Name: st.name, Recording: recordingName(st.sessionID, st.recordingID),
		Mode: guidev1.ReplayMode_REPLAY_MODE_INTERACTIVE, CurrentIndex: st.next, SkippedIndices: st.skipped,
		Modifications: map[int32]string{}, Done: st.done, StartTime: timestamppb.New(st.start)}
	for k, v := range st.mods {
		n, _ := strconv.Atoi(k)
		out.Modifications[int32(n)] = v
	}
	return out
}
