// Package inbox runs an agent's inbox: the envelopes the Guide (or another
// agent) sends it on the AGENTS stream. Each envelope is decoded and
// checked (a tenant, not yet expired), handed to the agent's Handler within
// a time bound, and the answer the handler returns is published on the
// envelope's session as a message.answered event. The outcome is counted
// and the envelope acknowledged, delivered again (a failure) or dropped (a
// rejection).
//
// An agent supplies what only it knows, the Handler; the stream, durable
// name and filter come from pkg/topology.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/confidence"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// Outcomes counted by every inbox; a handler names its own others
// ("stored", "drafted").
const (
	OutcomeAnswered = "answered"
	// OutcomeExpired: the envelope's deadline passed before it was handled;
	// it is acknowledged unanswered (whoever asked has stopped waiting).
	OutcomeExpired = "expired"
	// OutcomeRejected: the envelope cannot be handled, now or later; it is
	// dropped.
	OutcomeRejected = "rejected"
	// OutcomeFailed: handling failed; the envelope is delivered again.
	OutcomeFailed = "failed"
	// OutcomeUnavailable: handling failed on the last delivery and the
	// agent answered that it could not help just now (Config.Unavailable).
	OutcomeUnavailable = "unavailable"
	// OutcomeRerouted: the agent declined the request (Result.Reroute).
	OutcomeRerouted = "rerouted"
	// OutcomeClarify: the agent asked the user a question first
	// (Result.Clarify).
	OutcomeClarify = "clarification"
)

// Defaults of Config.
const (
	DefaultMaxDeliver = 5
	// ackSlack is how much longer than Timeout a delivery may stay
	// unacknowledged by default: the answer is published after handling.
	ackSlack = 10 * time.Second
	// fallbackTimeout bounds the publishing of Config.Unavailable's answer.
	fallbackTimeout = 5 * time.Second
)

// Config says whose inbox is run and how.
type Config struct {
	// Agent owns the inbox and is the source of its answers.
	Agent string
	// Timeout bounds the handling of one envelope, publishing included.
	Timeout time.Duration
	// AckWait is how long a delivery may stay unacknowledged; 0 means
	// Timeout plus 10s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of an envelope; 0 means 5.
	MaxDeliver int
	// NakDelay spaces the deliveries of an envelope whose handling failed;
	// 0 means 1s.
	NakDelay time.Duration
	// Outcomes, when set, counts envelopes by outcome (its one label).
	Outcomes *prometheus.CounterVec
	// Unavailable, when set, is the answer given when handling a question
	// still fails on its last delivery, so that it is never left
	// unanswered. err is the handler's.
	Unavailable func(env *messagev1.Envelope, err error) *messagev1.AgentAnswer
	// Confidence, when set, is the agent's confidence entry for an answer
	// its handler gave none, so that every answer extends the chain.
	Confidence func(answer *messagev1.AgentAnswer) *messagev1.ConfidenceEntry
	Log        *slog.Logger
	// Ready, when set, is called once the inbox consumer is provisioned and
	// takes envelopes.
	Ready func()
}

// Result is how a handler dealt with an envelope: an answer, a decline or
// a question for the user (the agent's Step 0, spec E-02; step0.go).
type Result struct {
	// Outcome is counted; "" means OutcomeAnswered, or OutcomeRerouted or
	// OutcomeClarify with Reroute or Clarify.
	Outcome string
	// Answer, when set, is published on the envelope's session as a
	// message.answered event, de-duplicated on the envelope's id, with the
	// confidence chain extended by the answer's own entry.
	Answer *messagev1.AgentAnswer
	// Reroute, when set instead, declines the request: it goes to the
	// Guide as a reroute request with this agent's hop appended to the
	// history, and the Guide sends it on to the suggested target.
	Reroute *messagev1.RerouteRequest
	// Clarify, when set instead, is a question for the user that the
	// Guide delivers; the user's answer comes back to this agent as a
	// clarification response (Question reads it with the request).
	Clarify *messagev1.ClarificationRequest
	// Confidence is the agent's entry for a decline or a question,
	// appended to the chain that goes on with the request.
	Confidence *messagev1.ConfidenceEntry
}

// Handler handles one envelope that has a tenant and has not expired. A
// Reject error drops the envelope; any other error has it delivered again.
type Handler func(ctx context.Context, env *messagev1.Envelope) (Result, error)

// rejection is an envelope that redelivery cannot fix.
type rejection struct{ error }

func (r rejection) Unwrap() error { return natsx.Permanent(r.error) }

// Reject is the error of a handler that cannot handle its envelope, now
// or later: the envelope is counted rejected and dropped.
func Reject(format string, args ...any) error {
	return rejection{fmt.Errorf(format, args...)}
}

// Question is the text env asks: its user input, or else the request the
// Guide's structured intent holds; for the user's answer to the agent's
// own question, the request refined by the answer. An envelope without
// any, or whose session is not a session id, is rejected.
func Question(env *messagev1.Envelope) (string, error) {
	if !ids.Valid(env.GetSessionId()) {
		return "", Reject("envelope %q: session_id %q is not a session id", env.GetId(), env.GetSessionId())
	}
	if original, answer, ok := Clarified(env); ok {
		if q := strings.TrimSpace(original + " " + answer); q != "" {
			return q, nil
		}
		return "", Reject("envelope %q: the clarification response carries no answer", env.GetId())
	}
	if env.GetUserInput() == nil && env.GetStructuredIntent() == nil {
		return "", Reject("envelope %q: %s carries no question", env.GetId(), env.GetType())
	}
	if text := env.GetUserInput().GetText(); strings.TrimSpace(text) != "" {
		return text, nil
	}
	return env.GetStructuredIntent().GetOriginalRequest(), nil
}

// Run consumes cfg.Agent's inbox, handing each envelope to h, until ctx is
// done (then it returns nil). It provisions the agent inboxes and the
// session event stream first.
func Run(ctx context.Context, bus *natsx.Bus, cfg Config, h Handler) error {
	in, err := newInbox(bus, cfg, h)
	if err != nil {
		return err
	}
	spec := natsx.ConsumerSpec{AckWait: in.cfg.AckWait, MaxDeliver: in.cfg.MaxDeliver, NakDelay: cfg.NakDelay, Ready: cfg.Ready}
	in.log.InfoContext(ctx, "inbox consumer starting", slog.String("subject", topology.InboxSubject(bus, cfg.Agent)))
	err = topology.ConsumeInbox(ctx, bus, cfg.Agent, spec, in.handle)
	if ctx.Err() != nil {
		return nil // stopped, perhaps while provisioning: a clean stop
	}
	return err
}

// inbox is one agent's running inbox.
type inbox struct {
	bus     *natsx.Bus
	cfg     Config
	handler Handler
	log     *slog.Logger
}

func newInbox(bus *natsx.Bus, cfg Config, h Handler) (*inbox, error) {
	var errs []error
	if bus == nil {
		errs = append(errs, errors.New("inbox: a NATS bus is required"))
	}
	if cfg.Agent == "" {
		errs = append(errs, errors.New("inbox: an agent is required"))
	}
	if cfg.Timeout <= 0 {
		errs = append(errs, errors.New("inbox: the timeout must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = cfg.Timeout + ackSlack
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = DefaultMaxDeliver
	}
	log := cfg.Log
	if log == nil {
		log = logx.Discard()
	}
	return &inbox{bus: bus, cfg: cfg, handler: h, log: log}, nil
}

// handle is the natsx handler of one delivery: nil acknowledges it, an
// error has it delivered again or, when permanent, dropped.
func (in *inbox) handle(ctx context.Context, msg jetstream.Msg) error {
	var env messagev1.Envelope
	if err := natsx.Unmarshal(msg, &env); err != nil {
		in.count(OutcomeRejected)
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, in.cfg.Timeout)
	defer cancel()
	log := in.log.With(slog.String("message_id", env.GetId()), slog.String(logx.KeyCorrelationID, env.GetCorrelationId()),
		slog.String(logx.KeyTenantID, env.GetTenantId()), slog.String(logx.KeySessionID, env.GetSessionId()))
	outcome, err := in.process(ctx, log, msg, &env)
	in.count(outcome)
	return err
}

// process checks env, hands it to the handler and publishes its answer; it
// returns the outcome to count.
func (in *inbox) process(ctx context.Context, log *slog.Logger, msg jetstream.Msg, env *messagev1.Envelope) (string, error) {
	if !(identity.Identity{TenantID: env.GetTenantId(), UserID: in.cfg.Agent}).Valid() {
		return OutcomeRejected, natsx.Permanent(fmt.Errorf("envelope %q: tenant_id %q is not a tenant", env.GetId(), env.GetTenantId()))
	}
	if d := env.GetDeadline(); d != nil && d.IsValid() && time.Now().After(d.AsTime()) {
		log.WarnContext(ctx, "inbox message expired before handling")
		return OutcomeExpired, nil
	}
	res, err := in.handler(ctx, env)
	switch {
	case errors.As(err, new(rejection)):
		return OutcomeRejected, err
	case err != nil && (in.cfg.Unavailable == nil || !in.lastDelivery(msg)):
		return OutcomeFailed, err
	case err != nil:
		log.ErrorContext(ctx, "handling failed on the last delivery; answering that the agent is unavailable", logx.Err(err))
		res = Result{Outcome: OutcomeUnavailable, Answer: in.cfg.Unavailable(env, err)}
		// The handler may have used up the time bound: the answer has one
		// of its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), fallbackTimeout)
		defer cancel()
	}
	if res.Answer == nil && (res.Reroute != nil || res.Clarify != nil) {
		return in.toGuide(ctx, log, env, res)
	}
	if res.Answer != nil {
		if err := in.publish(ctx, env, res.Answer); err != nil {
			return OutcomeFailed, err
		}
		log.InfoContext(ctx, "question answered", slog.Int("hits", len(res.Answer.GetHits())),
			slog.Int("recent", len(res.Answer.GetRecent())), slog.Bool("cannot_help", res.Answer.GetCannotHelp()))
	}
	if res.Outcome == "" {
		return OutcomeAnswered, nil
	}
	return res.Outcome, nil
}

// publish appends answer to env's session as a message.answered event of
// the agent, correlated with env (its correlation id, else its id).
func (in *inbox) publish(ctx context.Context, env *messagev1.Envelope, answer *messagev1.AgentAnswer) error {
	if answer.GetAgent() == "" {
		answer.Agent = in.cfg.Agent
	}
	own := answer.GetConfidence()
	if own == nil && in.cfg.Confidence != nil {
		own = in.cfg.Confidence(answer)
		answer.Confidence = own
	}
	if own != nil && own.GetAgent() == "" {
		own.Agent = in.cfg.Agent
	}
	confidence.Annotate(answer, confidence.Append(env.GetConfidenceChain(), own))
	answer.RerouteHistory = env.GetRerouteHistory()
	correlation := env.GetCorrelationId()
	if correlation == "" {
		correlation = env.GetId()
	}
	eventID := ""
	if env.GetId() != "" {
		eventID = env.GetId() + ":answer"
	}
	_, err := topology.PublishEvent(ctx, in.bus, env.GetTenantId(), eventID, &eventv1.Event{
		SessionId:     env.GetSessionId(),
		Type:          eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED,
		Source:        in.cfg.Agent,
		CorrelationId: correlation,
		Text:          answer.GetText(),
		Payload:       &eventv1.Event_MessageAnswered{MessageAnswered: answer},
	})
	if err != nil {
		return fmt.Errorf("publish the answer to envelope %q: %w", env.GetId(), err)
	}
	return nil
}

// lastDelivery reports whether msg will not be delivered again after a
// failure.
func (in *inbox) lastDelivery(msg jetstream.Msg) bool {
	md, err := msg.Metadata()
	return err == nil && md.NumDelivered >= uint64(in.cfg.MaxDeliver)
}

func (in *inbox) count(outcome string) {
	if in.cfg.Outcomes != nil {
		in.cfg.Outcomes.WithLabelValues(outcome).Inc()
	}
}
