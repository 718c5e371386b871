package guide

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/secrets"
)

// SendMessage stores a user message, then answers it (slash commands), asks
// the user to clarify (low confidence) or routes it to an agent's inbox,
// publishing each step on the session's event stream.
func (s *Service) SendMessage(ctx context.Context, req *guidev1.SendMessageRequest) (*guidev1.SendMessageResponse, error) {
	return s.sendMessage(ctx, req, true)
}

// sendMessage is SendMessage; plainReply says whether a message without
// in_reply_to answers the session's latest pending question (a replayed
// message is sent as it was recorded, and answers none).
func (s *Service) sendMessage(ctx context.Context, req *guidev1.SendMessageRequest, plainReply bool) (*guidev1.SendMessageResponse, error) {
	in, err := readSend(ctx, req, s.cfg.MaxMessageBytes)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "send message", err)
	}
	sess, stored, err := s.sendTarget(ctx, in)
	switch {
	case err != nil:
		return nil, apierr.Status(ctx, s.log, "send message", err)
	case stored != nil:
		return s.replayRequest(ctx, in.who, *stored, in.requestID, in.text)
	case sess.State != stateActive:
		return nil, apierr.Status(ctx, s.log, "send message", sendStateError(sess.State))
	case in.inReplyTo != "":
		return s.answerClarification(ctx, in.who, sess, in.text, in.inReplyTo, in.requestID)
	}
	if reply, ok := s.planAnswer(ctx, in, sess); ok { // planchat.go
		in.plan = &reply
	}
	if plainReply && in.command == "" && in.plan == nil {
		name, err := s.latestClarification(ctx, in) // clarificationreply.go
		if err != nil {
			return nil, apierr.Status(ctx, s.log, "send message", err)
		}
		if name != "" {
			return s.answerClarification(ctx, in.who, sess, in.text, name, in.requestID)
		}
	}
	start := time.Now()
	m := s.newMessage(in)
	m.Repository = sess.Repository
	plan, err := s.handle(ctx, in, sess, &m)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "send message", err)
	}
	after, err := s.storeMessage(ctx, in, sess, &m, plan)
	if errors.Is(err, errDuplicateRequest) {
		return s.replayDuplicate(ctx, in)
	}
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "send message", err)
	}
	s.observe(ctx, in, sess, m, start)
	if err := s.dispatch(ctx, in.who, m); err != nil {
		return nil, err
	}
	for _, f := range after {
		f(ctx)
	}
	return m.response(), nil
}

// sendRequest is a SendMessage request, checked.
type sendRequest struct {
	who       identity.Identity
	owner     owner
	sessionID string
	text      string
	requestID string
	inReplyTo string
	// command is the slash command the text invokes ("/help", "/session
	// list"), "" for a message to route.
	command string
	// pure answers a command from the Guide's own state, before the
	// message is stored; nil for a command that runs in the message's
	// transaction (it reads the session's state or calls other services).
	pure func() string
	// plan is the answer the message gives a plan awaiting approval, nil
	// for a message that answers none. It runs in the message's
	// transaction, as a command does.
	plan *planReply
}

// runsInTx says the message is a command, or an answer to a plan, that
// runs in its transaction.
func (r sendRequest) runsInTx() bool { return r.command != "" && r.pure == nil || r.plan != nil }

// pureCommands are the slash commands whose reply needs nothing but the
// command: they are stored in group commits like routed messages.
var pureCommands = map[string]func() string{"/help": helpText}

// readSend checks a SendMessage request; maxBytes bounds its text.
func readSend(ctx context.Context, req *guidev1.SendMessageRequest, maxBytes int) (sendRequest, error) {
	who, sid, err := callerSession(ctx, "parent", req.GetParent())
	if err != nil {
		return sendRequest{}, err
	}
	text := strings.TrimSpace(req.GetText())
	switch {
	case text == "":
		return sendRequest{}, apierr.Invalid("text", "required")
	case len(text) > maxBytes:
		return sendRequest{}, apierr.Invalid("text", "%d bytes exceeds the limit of %d bytes", len(text), maxBytes)
	case !utf8.ValidString(text):
		return sendRequest{}, apierr.Invalid("text", "must be valid UTF-8")
	case utf8.RuneCountInString(req.GetRequestId()) > maxRequestIDChars:
		return sendRequest{}, apierr.Invalid("request_id", "longer than %d characters", maxRequestIDChars)
	}
	// From here on (routing, the route cache, the store, the agents) the
	// message holds no secret.
	text = secrets.Scrub(text)
	r := sendRequest{who: who, owner: ownerOf(who), sessionID: sid, text: text, requestID: req.GetRequestId(),
		inReplyTo: req.GetInReplyTo()}
	if isSlashCommand(text) {
		r.command = commandName(text)
		r.pure = pureCommands[r.command]
	}
	return r, nil
}

// sendTarget loads the session the message goes to and, for a request id
// stored before, the message stored under it. Routing and the pure
// commands need the session's id and state only, so that they may read it
// from the cache of sessions seen active: the message's writes check again
// that it is.
func (s *Service) sendTarget(ctx context.Context, r sendRequest) (session, *message, error) {
	var sess session
	var err error
	if r.runsInTx() || r.inReplyTo != "" {
		sess, err = getSession(ctx, s.db, r.owner, r.sessionID, false)
	} else {
		sess, err = s.activeSession(ctx, r.owner, r.sessionID)
	}
	if err != nil || r.requestID == "" {
		return sess, nil, err
	}
	stored, ok, err := messageByRequest(ctx, s.db, r.owner, r.sessionID, r.requestID)
	if err != nil || !ok {
		return sess, nil, err
	}
	return sess, &stored, nil
}

// newMessage is the user's message of r, before it is handled.
func (s *Service) newMessage(r sendRequest) message {
	m := message{ID: ids.New(), SessionID: r.sessionID, Author: authorUser, Text: r.text, CorrelationID: ids.New(),
		CreateTime: s.now()}
	if r.requestID != "" {
		m.RequestID = &r.requestID
	}
	return m
}

// handle decides what becomes of m: a slash command is the Guide's own (a
// pure one is answered now), anything else is routed (routing.go).
func (s *Service) handle(ctx context.Context, r sendRequest, sess session, m *message) (routePlan, error) {
	if p := r.plan; p != nil {
		m.Route = outcomeRoute{Target: authorGuide, Tier: tierPlanReply, Confidence: 1, IntentType: "PLAN_" + strings.ToUpper(string(p.verb)),
			Reason: "answers " + p.plan + ", awaiting approval"}
		return routePlan{}, nil
	}
	if r.command == "" {
		return s.decide(ctx, r.who, sess, m)
	}
	m.Route = outcomeRoute{Target: authorGuide, Tier: tierSlashCommand, Confidence: 1, IntentType: "COMMAND",
		Reason: "slash command " + truncate(r.command, 64)}
	if r.pure != nil {
		replyID := ids.New()
		m.Reply, m.ReplyID = r.pure(), &replyID
	}
	return routePlan{}, nil
}

// storeMessage stores m and its plan. A routed message or a pure command
// is stored in a group commit, its writes pipelined with other messages';
// a command that runs in its transaction has one of its own, and returns
// the work to do once it has committed.
func (s *Service) storeMessage(ctx context.Context, r sendRequest, sess session, m *message, plan routePlan) ([]func(context.Context), error) {
	w := &sendWrite{s: s, r: r, sess: sess, m: m, plan: plan}
	var err error
	if r.runsInTx() {
		err = s.writes.alone(ctx, w.inTx)
	} else {
		if r.command == "" {
			if err := s.sealEnvelope(r.who, m); err != nil {
				return nil, err
			}
		}
		err = s.writes.do(ctx, r.owner.tenant+"/"+r.sessionID, w.inTx, w.queue)
	}
	if errors.Is(err, errSessionInactive) {
		return nil, s.inactive(ctx, r.owner, r.sessionID)
	}
	return w.after, err
}

// sendWrite stores a user message: its writes (writes.go), after its
// session's touch, run in a transaction (inTx) or queued on a group
// commit's batch (queue).
type sendWrite struct {
	s     *Service
	r     sendRequest
	sess  session
	m     *message
	plan  routePlan
	after []func(context.Context)
}

// inTx runs the writes in tx: the touch first, so that a command runs only
// in an active session, then the command, then the rest in one round trip.
func (w *sendWrite) inTx(ctx context.Context, tx pgx.Tx, counts *routeCounts) error {
	if err := touchSession(ctx, tx, w.r.owner, w.r.sessionID, w.m.CreateTime); err != nil {
		return err
	}
	if w.r.runsInTx() {
		if err := w.runCommand(ctx, tx); err != nil {
			return err
		}
	}
	q, err := w.s.messageWrites(w.r.who, *w.m, w.plan, counts)
	if err != nil {
		return err
	}
	return q.send(ctx, tx)
}

// queue queues the touch and the writes on a group commit's batch.
func (w *sendWrite) queue(_ context.Context, b *pgx.Batch, counts *routeCounts) error {
	q, err := w.s.messageWrites(w.r.who, *w.m, w.plan, counts)
	if err != nil {
		return err
	}
	append(stmts{touch(w.r.owner, w.r.sessionID, w.m.CreateTime)}, q...).queue(b)
	return nil
}

// runCommand runs the command in tx, first, so that the message is stored
// once, with its reply; a command that routes (/plan, /reroute) makes the
// message's route and envelope.
func (w *sendWrite) runCommand(ctx context.Context, tx pgx.Tx) error {
	m := w.m
	env := &commandEnv{q: tx, owner: w.r.owner, who: w.r.who, session: w.sess, msg: m}
	var res commandResult
	var err error
	if w.r.plan != nil {
		res, err = w.s.answerPlan(ctx, env, *w.r.plan)
	} else {
		res, err = w.s.runCommand(ctx, env, m.Text)
	}
	if err != nil {
		return err
	}
	w.after = res.after
	replyID := ids.New()
	m.Reply, m.ReplyID = res.reply, &replyID
	if res.route != nil {
		m.Route = *res.route
		m.EnvelopeID = res.envelopeID
		m.IntentSubject = res.subject
		m.RouteText = res.text
		w.plan = res.plan
	}
	return w.s.sealEnvelope(w.r.who, m)
}

// replayDuplicate answers a request whose id was stored concurrently with
// the outcome stored under it.
func (s *Service) replayDuplicate(ctx context.Context, r sendRequest) (*guidev1.SendMessageResponse, error) {
	stored, ok, err := messageByRequest(ctx, s.db, r.owner, r.sessionID, r.requestID)
	if err != nil || !ok {
		return nil, apierr.Status(ctx, s.log, "send message", fmt.Errorf("reload duplicate request: %w (found %v)", err, ok))
	}
	return s.replayRequest(ctx, r.who, stored, r.requestID, r.text)
}

// observe counts a stored message and logs its route. A routed message
// found its session active and left it so: the session is trusted for
// another TTL, so that a session in use is not loaded again every TTL.
func (s *Service) observe(ctx context.Context, r sendRequest, sess session, m message, start time.Time) {
	if !r.runsInTx() {
		s.sessions.put(r.owner, sess, time.Now())
	}
	s.metrics.routing.Observe(time.Since(start).Seconds())
	target := m.Route.Target
	if target == "" {
		target = "none"
	}
	s.metrics.messages.WithLabelValues(m.Route.Tier, target).Inc()
	if m.Route.Target != "" && m.Route.Target != authorGuide && m.Route.IntentType != "" && m.AnswerTo == nil {
		// As routing_counts counts them (writes.go).
		s.metrics.decisions.WithLabelValues(bucketLabel(confidenceBucket(m.Route.Confidence))).Inc()
	}
	s.logRouteDecision(ctx, m)
}
