package guide

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/status"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
)

// Slash commands (routing tier 0, spec A-28): the Guide runs them itself,
// deterministically, with no classification. A command matches when its
// name matches with a confidence above the skill threshold (an exact name
// is 1.0; a misspelt one is offered as a suggestion instead).

// isSlashCommand reports whether text is a slash command.
func isSlashCommand(text string) bool { return strings.HasPrefix(text, "/") }

// commandName is the command a slash-command text invokes, for the route's
// reason: "/help", "/session list".
func commandName(text string) string {
	f := strings.Fields(text)
	if len(f) >= 2 && f[0] == "/session" {
		return f[0] + " " + f[1]
	}
	return f[0]
}

// commandEnv is what a command may use: the message's transaction.
type commandEnv struct {
	q       pgx.Tx
	owner   owner
	who     identity.Identity
	session session
	msg     *message
}

// commandResult is a command's reply, an optional route (/plan, /reroute)
// and work to do once the transaction has committed.
type commandResult struct {
	reply      string
	route      *outcomeRoute
	envelopeID *string
	subject    string
	text       string
	plan       routePlan
	after      []func(context.Context)
}

const sessionListLimit = 20

// commands lists every command with its help line.
var commands = []struct{ name, usage, help string }{
	{"/help", "/help", "list these commands"},
	{"/status", "/status", "this session's state, pending requests and runs"},
	{"/session", "/session list|new [name]|switch <id>|suspend [id]|resume <id>", "manage your sessions"},
	{"/tasks", "/tasks", "the runs of this session and their tasks"},
	{"/task", taskUsage, "act on one task of this session's runs"},                                             // taskcmd.go
	{"/settle", settleUsage, "keep, roll back or retry a failed run's work (the default suits how it failed)"}, // settlecmd.go
	{"/repo", repoUsage, "list your repositories, or make this session work on one (by name or id)"},
	{"/plan", planUsage, "ask the architect for a plan; approve, reject or revise the newest one awaiting approval"},
	{"/approve", "/approve [plan]", "approve the newest plan awaiting approval (or the one named)"},
	{"/interrupt", "/interrupt", "cancel this session's running runs"},
	{"/clear", "/clear", "clear this session's working context"},
	{"/reroute", "/reroute <agent>", "send your last request to another agent (records a routing correction)"},
}

func helpText() string {
	var b strings.Builder
	b.WriteString("Commands:")
	for _, c := range commands {
		fmt.Fprintf(&b, "\n  %-62s %s", c.usage, c.help)
	}
	b.WriteString("\nAnything else is routed to the agent that owns it: the librarian (this codebase), the archivalist (project history), the academic (external knowledge) or the architect (changes to make, trivial ones included: it plans them).\nWhile a plan of this session awaits approval, \"approve\" (or \"yes, go ahead\") approves it, \"reject ...\" rejects it, and \"change step 2 to ...\", \"revise the plan: ...\" or \"instead of X do Y\" make its next version.")
	return b.String()
}

// matchCommand returns the command closest to name and the match confidence.
func matchCommand(name string) (string, float64) {
	best, conf := "", 0.0
	for _, c := range commands {
		d := editDistance(name, c.name)
		n := max(len(name), len(c.name))
		if score := 1 - float64(d)/float64(n); score > conf {
			best, conf = c.name, score
		}
	}
	return best, conf
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// runCommand answers a slash command.
func (s *Service) runCommand(ctx context.Context, env *commandEnv, text string) (commandResult, error) {
	f := strings.Fields(text)
	name, conf := matchCommand(strings.ToLower(f[0]))
	if conf <= s.cfg.SkillThreshold {
		if conf >= 0.6 {
			return commandResult{reply: fmt.Sprintf("unknown command %s; did you mean %s? Try /help", truncate(f[0], 64), name)}, nil
		}
		return commandResult{reply: fmt.Sprintf("unknown command %s; try /help", truncate(f[0], 64))}, nil
	}
	args := f[1:]
	rest := strings.TrimSpace(strings.TrimPrefix(text, f[0]))
	switch name {
	case "/help":
		return commandResult{reply: helpText()}, nil
	case "/status":
		return s.statusCommand(ctx, env)
	case "/session":
		return s.sessionCommand(ctx, env, args)
	case "/tasks":
		return s.tasksCommand(ctx, env)
	case "/task":
		return s.taskCommand(ctx, env, args)
	case "/settle":
		return s.settleCommand(ctx, env, args)
	case "/repo":
		return s.repoCommand(ctx, env, rest)
	case "/plan":
		return s.planCommand(ctx, env, rest)
	case "/approve":
		return s.approveCommand(ctx, env, args)
	case "/interrupt":
		return s.interruptCommand(ctx, env)
	case "/clear":
		_, v, err := loadContext(ctx, env.q, env.owner, env.session.ID)
		if err != nil {
			return commandResult{}, err
		}
		if err := storeContext(ctx, env.q, env.owner, env.session.ID, &guidev1.SessionContext{}, v+1); err != nil {
			return commandResult{}, err
		}
		return commandResult{reply: "Cleared this session's working context."}, nil
	case "/reroute":
		return s.rerouteCommand(ctx, env, args)
	}
	return commandResult{reply: fmt.Sprintf("unknown command %s; try /help", truncate(f[0], 64))}, nil
}

func (s *Service) statusCommand(ctx context.Context, env *commandEnv) (commandResult, error) {
	counts, err := countMessages(ctx, env.q, env.owner, env.session.ID)
	if err != nil {
		return commandResult{}, err
	}
	counts[authorUser]++ // this command, stored with its reply
	total := 0
	for _, n := range counts {
		total += n
	}
	pending, err := pendingRequests(ctx, env.q, env.owner.tenant, env.session.ID, statePending)
	if err != nil {
		return commandResult{}, err
	}
	clar, err := pendingClarifications(ctx, env.q, env.owner.tenant, env.session.ID, s.clarificationCutoff())
	if err != nil {
		return commandResult{}, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Session %s", sessionName(env.session.ID))
	if env.session.DisplayName != "" {
		fmt.Fprintf(&b, " (%q)", env.session.DisplayName)
	}
	fmt.Fprintf(&b, " is %s.\n", env.session.State)
	fmt.Fprintf(&b, "Created %s.\n", env.session.CreateTime.Format(time.RFC3339))
	fmt.Fprintf(&b, "Messages: %d (%d from you, %d from the guide, %d from agents).\n",
		total, counts[authorUser], counts[authorGuide], total-counts[authorUser]-counts[authorGuide])
	fmt.Fprintf(&b, "Waiting for answers: %d; questions for you: %d.", len(pending), len(clar))
	for _, p := range pending {
		fmt.Fprintf(&b, "\n  - %s since %s", p.Target, p.CreateTime.Format(time.RFC3339))
	}
	return commandResult{reply: b.String()}, nil
}

func (s *Service) sessionCommand(ctx context.Context, env *commandEnv, args []string) (commandResult, error) {
	if len(args) == 0 {
		return commandResult{reply: "usage: /session list|new [name]|switch <id>|suspend [id]|resume <id>"}, nil
	}
	target := func() (string, bool) {
		if len(args) < 2 {
			return "", false
		}
		id := strings.TrimPrefix(args[1], sessionsCollection)
		return strings.ToLower(id), ids.Valid(id)
	}
	switch args[0] {
	case "list":
		return s.sessionListReply(ctx, env)
	case "new":
		return s.newSessionCommand(ctx, env, strings.TrimSpace(strings.Join(args[1:], " ")))
	case "switch":
		id, ok := target()
		if !ok {
			return commandResult{reply: "usage: /session switch <session id>"}, nil
		}
		return s.switchCommand(ctx, env, id, "Switched to "+sessionName(id), nil)
	case "suspend", "resume":
		id, ok := target()
		if !ok && (args[0] == "resume" || len(args) > 1) {
			// Only a bare /session suspend means this session: a mistyped
			// id must not suspend the one the user is in.
			usage := "usage: /session resume <session id>"
			if args[0] == "suspend" {
				usage = "usage: /session suspend [session id] (no id: this session)"
			}
			return commandResult{reply: usage}, nil
		}
		if !ok {
			id = env.session.ID
		}
		t := suspendTransition
		if args[0] == "resume" {
			t = resumeTransition
		}
		var dags dagState
		if t.to == stateSuspended {
			dags = s.dagState(ctx, env.owner, id)
		}
		cur, err := getSession(ctx, env.q, env.owner, id, true)
		if err == nil {
			cur, err = s.applyLocked(ctx, env.q, cur, t, "", "command", dags)
		}
		if reply, ok := commandReply(err); ok {
			return commandResult{reply: reply}, nil
		}
		if err != nil {
			return commandResult{}, err
		}
		next := cur
		return commandResult{
			reply: fmt.Sprintf("Session %s is %s.", sessionName(id), next.State),
			after: []func(context.Context){func(ctx context.Context) { s.afterTransition(ctx, next, t, "") }},
		}, nil
	}
	return commandResult{reply: fmt.Sprintf("unknown command /session %s; try /help", truncate(args[0], 64))}, nil
}

// newSessionCommand is /session new [name]: a session of the user's, with
// their last repository, switched to at once.
func (s *Service) newSessionCommand(ctx context.Context, env *commandEnv, name string) (commandResult, error) {
	if len([]rune(name)) > s.cfg.MaxDisplayNameChars {
		return commandResult{reply: fmt.Sprintf("a session name may have at most %d characters", s.cfg.MaxDisplayNameChars)}, nil
	}
	now := s.now()
	sess := session{ID: ids.New(), TenantID: env.owner.tenant, UserID: env.owner.user, DisplayName: name,
		State: stateCreated, Metadata: map[string]string{}, CreateTime: now, UpdateTime: now, LastActiveTime: now,
		Transitions: []transitionRecord{{To: stateCreated, Time: now, Reason: "command"}}}
	var err error
	if sess.Config, err = s.sessionConfigFromProto(nil); err != nil {
		return commandResult{}, err
	}
	// The user's last repository, as CreateSession gives it.
	if sess.Repository, _, err = s.newSessionRepository(ctx, env.q, env.who, ""); err != nil {
		return commandResult{}, err
	}
	if err := createSession(ctx, env.q, sess); err != nil {
		return commandResult{}, err
	}
	return s.switchCommand(ctx, env, sess.ID, fmt.Sprintf("Created %s and switched to it", sessionName(sess.ID)),
		func(ctx context.Context) {
			s.publishSessionEvent(ctx, sess, eventv1.EventType_EVENT_TYPE_SESSION_CREATED, fmt.Sprintf("Session %s created", sessionName(sess.ID)))
		})
}

// switchCommand switches inside the message's transaction.
func (s *Service) switchCommand(ctx context.Context, env *commandEnv, id, reply string, first func(context.Context)) (commandResult, error) {
	target, suspended, err := s.switchTo(ctx, env.owner, id, env.q)
	if reply, ok := commandReply(err); ok {
		return commandResult{reply: reply}, nil
	}
	if err != nil {
		return commandResult{}, err
	}
	var t *transition
	if len(target.Transitions) > 0 {
		last := target.Transitions[len(target.Transitions)-1]
		if last.Reason == "switch" {
			switch last.From {
			case stateSuspended:
				x := resumeTransition
				t = &x
			case stateCreated:
				x := activateTransition
				t = &x
			}
		}
	}
	return commandResult{reply: reply + ".", after: []func(context.Context){func(ctx context.Context) {
		if first != nil {
			first(ctx)
		}
		s.afterSwitch(ctx, target, t, suspended)
	}}}, nil
}

func (s *Service) sessionListReply(ctx context.Context, env *commandEnv) (commandResult, error) {
	list, err := listSessions(ctx, env.q, env.owner, "", nil, sessionListLimit+1)
	if err != nil {
		return commandResult{}, err
	}
	more := len(list) > sessionListLimit
	if more {
		list = list[:sessionListLimit]
	}
	var b strings.Builder
	b.WriteString("Your sessions, newest first:")
	for _, x := range list {
		mark := " "
		if x.ID == env.session.ID {
			mark = "*"
		}
		fmt.Fprintf(&b, "\n%s %s  %-9s  %s", mark, sessionName(x.ID), x.State, x.CreateTime.Format(time.RFC3339))
		if x.DisplayName != "" {
			fmt.Fprintf(&b, "  %q", x.DisplayName)
		}
	}
	if more {
		fmt.Fprintf(&b, "\n(only the %d newest are shown; ListSessions pages through all)", sessionListLimit)
	}
	b.WriteString("\n* this session")
	return commandResult{reply: b.String()}, nil
}

// peerContext acts for the session's owner towards another service.
func (s *Service) peerContext(ctx context.Context, o owner) (context.Context, context.CancelFunc) {
	return context.WithTimeout(identity.AppendOutgoing(context.WithoutCancel(ctx),
		identity.Identity{TenantID: o.tenant, UserID: o.user, Role: identity.RoleMember}), s.cfg.PeerTimeout)
}

// maxTasksListed bounds the tasks /tasks lists per run.
const maxTasksListed = 50

func (s *Service) tasksCommand(ctx context.Context, env *commandEnv) (commandResult, error) {
	if s.orchestrator == nil {
		return commandResult{reply: "The orchestrator is not configured, so there are no tasks to show."}, nil
	}
	cctx, cancel := s.peerContext(ctx, env.owner)
	defer cancel()
	runs, err := s.sessionRuns(cctx, env.session.ID, 20, true)
	if err != nil {
		s.log.WarnContext(ctx, "list runs", logx.Err(err))
		return commandResult{reply: "The orchestrator did not answer; try /tasks again shortly."}, nil
	}
	if len(runs) == 0 {
		return commandResult{reply: "This session has no runs."}, nil
	}
	var b strings.Builder
	b.WriteString("Runs of this session, newest first:")
	for _, r := range runs {
		fmt.Fprintf(&b, "\n%s  %s", r.GetName(), strings.TrimPrefix(r.GetState().String(), "RUN_STATE_"))
		for i, n := range r.GetNodes() {
			if i == maxTasksListed {
				fmt.Fprintf(&b, "\n  ... and %d more (GET /v1/%s)", len(r.GetNodes())-i, r.GetName())
				break
			}
			fmt.Fprintf(&b, "\n  - %s: %s", n.GetNodeId(), strings.TrimPrefix(n.GetState().String(), "NODE_STATE_"))
		}
	}
	return commandResult{reply: b.String()}, nil
}

func (s *Service) interruptCommand(ctx context.Context, env *commandEnv) (commandResult, error) {
	if s.orchestrator == nil {
		return commandResult{reply: "The orchestrator is not configured, so nothing is running."}, nil
	}
	cctx, cancel := s.peerContext(ctx, env.owner)
	defer cancel()
	resp, err := s.orchestrator.ListRuns(cctx, &orchestratorv1.ListRunsRequest{SessionId: env.session.ID, PageSize: 100})
	if err != nil {
		return commandResult{reply: "The orchestrator did not answer; try /interrupt again shortly."}, nil
	}
	var cancelled []string
	for _, r := range resp.GetRuns() {
		if runEnded(r.GetState()) {
			continue
		}
		if _, err := s.orchestrator.CancelRun(cctx, &orchestratorv1.CancelRunRequest{Name: r.GetName()}); err != nil {
			s.log.WarnContext(ctx, "cancel run", slog.String("run", r.GetName()), logx.Err(err))
			continue
		}
		cancelled = append(cancelled, r.GetName())
	}
	if len(cancelled) == 0 {
		return commandResult{reply: "Nothing of this session is running."}, nil
	}
	return commandResult{reply: "Cancelled " + strings.Join(cancelled, ", ") + "."}, nil
}

// rerouteCommand sends the session's last routed request to the agent the
// user names, and records the correction as a routing failure (spec A-33).
func (s *Service) rerouteCommand(ctx context.Context, env *commandEnv, args []string) (commandResult, error) {
	to, ok := "", len(args) == 1
	if ok {
		to, ok = routeTarget(args[0])
	}
	if !ok {
		return commandResult{reply: "usage: /reroute <agent>, where agent is one of " + strings.Join(routableAgents, ", ")}, nil
	}
	var last pendingRequest
	err := env.q.QueryRow(ctx, `SELECT `+pendingColumns+` FROM pending_requests
		WHERE tenant_id = $1 AND session_id = $2 ORDER BY create_time DESC LIMIT 1`, env.owner.tenant, env.session.ID).
		Scan(&last.CorrelationID, &last.TenantID, &last.UserID, &last.SessionID, &last.MessageID, &last.Target, &last.IntentType,
			&last.Original, &last.Envelope, &last.Deadline, &last.Clarifications, &last.CreateTime, &last.State)
	if err == pgx.ErrNoRows {
		return commandResult{reply: "There is no routed request in this session to reroute."}, nil
	}
	if err != nil {
		return commandResult{}, fmt.Errorf("load last request: %w", err)
	}
	if last.Target == to {
		return commandResult{reply: fmt.Sprintf("Your last request already went to the %s.", to)}, nil
	}
	if _, err := setPendingState(ctx, env.q, env.owner.tenant, last.CorrelationID, last.State, stateClosed); err != nil {
		return commandResult{}, err
	}
	f := routingFailure{TenantID: env.owner.tenant, SessionID: env.session.ID, UserID: env.owner.user,
		OriginalRequest: last.Original, ClassifiedAs: last.IntentType, RoutedTo: last.Target, ShouldHaveBeen: to,
		Signal: guidev1.RoutingFailureSignal_ROUTING_FAILURE_SIGNAL_USER_CORRECTION}.decided(last)
	stored, err := s.insertFailure(ctx, env.q, f)
	if err != nil {
		return commandResult{}, err
	}
	envelopeID := ids.New()
	route := outcomeRoute{Target: to, Tier: tierSlashCommand, Confidence: 1, IntentType: last.IntentType,
		Reason: "rerouted by the user from the " + last.Target}
	if prev := (&messageEnvelope{raw: last.Envelope}).subject(); prev != "" {
		env.msg.IntentSubject = prev
	}
	return commandResult{
		reply: fmt.Sprintf("Sent your last request to the %s instead of the %s; recorded as a routing correction.", to, last.Target),
		route: &route, envelopeID: &envelopeID, text: last.Original, subject: env.msg.IntentSubject, plan: routePlan{pending: true},
		after: []func(context.Context){func(ctx context.Context) { s.afterFailure(ctx, stored) }},
	}, nil
}

// messageEnvelope reads fields of a stored envelope.
type messageEnvelope struct{ raw []byte }

func (e *messageEnvelope) subject() string {
	env := decodeEnvelope(e.raw)
	if env == nil {
		return ""
	}
	return env.GetStructuredIntent().GetSubject()
}

func statusMessage(err error) string { return truncate(status.Convert(err).Message(), 200) }
