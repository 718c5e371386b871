package guide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Routing tiers, as reported in Route.tier.
const (
	tierSlashCommand = "slash_command"
	tierClassifier   = "classifier"
)

// Event types the Guide publishes for a message.
const (
	eventReceived      = "message.received"
	eventRouted        = "message.routed"
	eventAnswered      = "message.answered"
	eventClarification = "clarification.requested"
)

// agentPurposes describe the routable agents when the Guide asks the user
// to choose, in the order they are offered.
var agentPurposes = []struct{ agent, purpose string }{
	{topology.AgentLibrarian, "search this codebase"},
	{topology.AgentArchivalist, "recall what was done or decided before"},
	{topology.AgentAcademic, "look up external knowledge (documentation, best practices, research)"},
	{topology.AgentArchitect, "plan a change to the code"},
}

func (m message) proto() *guidev1.Message {
	return &guidev1.Message{
		Name:          messageName(m.SessionID, m.ID),
		Id:            m.ID,
		Text:          m.Text,
		Author:        m.Author,
		CreateTime:    timestamppb.New(m.CreateTime),
		CorrelationId: m.CorrelationID,
	}
}

func (m message) response() *guidev1.SendMessageResponse {
	return &guidev1.SendMessageResponse{
		Message: m.proto(),
		Route: &guidev1.Route{
			Target:     m.Route.Target,
			Confidence: m.Route.Confidence,
			Tier:       m.Route.Tier,
			IntentType: m.Route.IntentType,
			Reason:     m.Route.Reason,
		},
		Reply:         m.Reply,
		CorrelationId: m.CorrelationID,
	}
}

// SendMessage stores a user message, then answers it (slash commands), asks
// the user to clarify (low confidence) or routes it to an agent's inbox,
// publishing each step on the session's event stream.
func (s *Service) SendMessage(ctx context.Context, req *guidev1.SendMessageRequest) (*guidev1.SendMessageResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sid, err := parseSessionName("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	text := strings.TrimSpace(req.GetText())
	if text == "" {
		return nil, invalid("text", "required")
	}
	if len(text) > s.cfg.MaxMessageBytes {
		return nil, invalid("text", "%d bytes exceeds the limit of %d bytes", len(text), s.cfg.MaxMessageBytes)
	}
	if !utf8.ValidString(text) {
		return nil, invalid("text", "must be valid UTF-8")
	}
	requestID := req.GetRequestId()
	if utf8.RuneCountInString(requestID) > maxRequestIDChars {
		return nil, invalid("request_id", "longer than %d characters", maxRequestIDChars)
	}
	o := ownerOf(who)
	sess, err := getSession(ctx, s.db, o, sid, false)
	if err != nil {
		return nil, s.toStatus(ctx, "send message", err)
	}
	if requestID != "" {
		stored, ok, err := messageByRequest(ctx, s.db, o, sid, requestID)
		if err != nil {
			return nil, s.toStatus(ctx, "send message", err)
		}
		if ok {
			return s.replay(ctx, who, stored)
		}
	}
	if sess.State != stateActive {
		return nil, s.toStatus(ctx, "send message", sendStateError(sess.State))
	}

	start := time.Now()
	m := message{
		ID:            ids.New(),
		SessionID:     sid,
		Author:        authorUser,
		Text:          text,
		CorrelationID: ids.New(),
		CreateTime:    s.now(),
	}
	if requestID != "" {
		m.RequestID = &requestID
	}
	slash := isSlashCommand(text)
	if slash {
		m.Route = outcomeRoute{
			Target:     authorGuide,
			Tier:       tierSlashCommand,
			Confidence: 1,
			IntentType: "COMMAND",
			Reason:     "slash command " + truncate(commandName(text), 64),
		}
	} else if err := s.classify(ctx, &m); err != nil {
		return nil, err
	}

	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		active, err := touchActiveSession(ctx, tx, o, sid, m.CreateTime)
		if err != nil {
			return err
		}
		if !active {
			cur, err := getSession(ctx, tx, o, sid, false)
			if err != nil {
				return err
			}
			return sendStateError(cur.State)
		}
		if err := insertMessage(ctx, tx, o, m); err != nil {
			return err
		}
		if slash {
			reply, err := runCommand(ctx, commandEnv{q: tx, owner: o, session: sess}, text)
			if err != nil {
				return err
			}
			replyID := ids.New()
			m.Reply, m.ReplyID = reply, &replyID
			if err := setReply(ctx, tx, o, m.ID, reply, replyID); err != nil {
				return err
			}
		}
		if m.ReplyID == nil {
			return nil
		}
		return insertMessage(ctx, tx, o, message{
			ID:            *m.ReplyID,
			SessionID:     sid,
			Author:        authorGuide,
			Text:          m.Reply,
			CorrelationID: m.CorrelationID,
			CreateTime:    s.now(),
		})
	})
	if errors.Is(err, errDuplicateRequest) {
		// The same request id was stored concurrently: answer with its outcome.
		stored, ok, err := messageByRequest(ctx, s.db, o, sid, requestID)
		if err != nil || !ok {
			return nil, s.toStatus(ctx, "send message", fmt.Errorf("reload duplicate request: %w (found %v)", err, ok))
		}
		return s.replay(ctx, who, stored)
	}
	if err != nil {
		return nil, s.toStatus(ctx, "send message", err)
	}
	s.metrics.routing.Observe(time.Since(start).Seconds())
	target := m.Route.Target
	if target == "" {
		target = "none"
	}
	s.metrics.messages.WithLabelValues(m.Route.Tier, target).Inc()
	s.log.DebugContext(ctx, "message handled", slog.String(logx.KeySessionID, sid),
		slog.String(logx.KeyCorrelationID, m.CorrelationID), slog.String("tier", m.Route.Tier),
		slog.String(logx.KeyAgent, m.Route.Target), slog.Float64("confidence", m.Route.Confidence))
	if err := s.dispatch(ctx, who, m); err != nil {
		return nil, err
	}
	return m.response(), nil
}

// sendStateError explains why a session takes no messages.
func sendStateError(state string) error {
	if state == stateSuspended {
		return &stateError{current: state, hint: "resume it first"}
	}
	return &stateError{current: state, action: "send messages to it"}
}

// classify fills m's route from the classifier: a target when it is sure
// enough, else a clarifying question with options.
func (s *Service) classify(ctx context.Context, m *message) error {
	c, err := s.classifier.Classify(ctx, m.Text)
	if err != nil {
		s.log.ErrorContext(ctx, "classifier failed", logx.Err(err))
		return status.Error(codes.Unavailable, "message classifier unavailable; retry later")
	}
	m.IntentSubject = c.Subject
	m.Route = outcomeRoute{Tier: tierClassifier, Confidence: c.Confidence, IntentType: c.IntentType, Reason: c.Reason}
	if c.Target != "" && c.Confidence >= s.cfg.RouteThreshold {
		m.Route.Target = c.Target
		envelopeID := ids.New()
		m.EnvelopeID = &envelopeID
		return nil
	}
	m.Reply, m.Options = clarification(c)
	replyID := ids.New()
	m.ReplyID = &replyID
	return nil
}

// clarification builds the question asked when routing is ambiguous and the
// agents offered as answers: the plausible ones, or all when fewer than two
// matched.
func clarification(c Classification) (string, []string) {
	options := slices.Clone(c.Candidates)
	if len(options) > 3 {
		options = options[:3]
	}
	if len(options) < 2 {
		for _, p := range agentPurposes {
			if !slices.Contains(options, p.agent) {
				options = append(options, p.agent)
			}
		}
	}
	parts := make([]string, 0, len(options))
	for _, o := range options {
		for _, p := range agentPurposes {
			if p.agent == o {
				parts = append(parts, fmt.Sprintf("%s (%s)", p.purpose, p.agent))
			}
		}
	}
	var list string
	switch len(parts) {
	case 0:
	case 1:
		list = parts[0]
	default:
		list = strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
	}
	return fmt.Sprintf("I am not sure who should handle this. Do you want to %s? Reply with more detail.", list), options
}

// replay answers a retried request with its stored outcome, finishing its
// dispatch if the first attempt could not.
func (s *Service) replay(ctx context.Context, who identity.Identity, m message) (*guidev1.SendMessageResponse, error) {
	if m.DispatchTime == nil {
		if err := s.dispatch(ctx, who, m); err != nil {
			return nil, err
		}
	}
	return m.response(), nil
}

// dispatch publishes a handled message's events, in order, and its envelope
// when it was routed, then marks it dispatched. Every publication carries a
// de-duplication id derived from the message, so a retry never duplicates.
func (s *Service) dispatch(ctx context.Context, who identity.Identity, m message) error {
	name := messageName(m.SessionID, m.ID)
	events := []topology.Event{{
		ID:   m.ID + ".received",
		Type: eventReceived,
		Text: m.Text,
		Data: map[string]any{"message": name, "author": authorUser},
	}}
	switch {
	case m.Route.Tier == tierSlashCommand:
		events = append(events, topology.Event{
			ID:   m.ID + ".answered",
			Type: eventAnswered,
			Text: m.Reply,
			Data: map[string]any{"message": messageName(m.SessionID, deref(m.ReplyID)), "author": authorGuide, "in_reply_to": name},
		})
	case m.Route.Target == "":
		options := make([]any, len(m.Options))
		for i, o := range m.Options {
			options[i] = o
		}
		events = append(events, topology.Event{
			ID:   m.ID + ".clarification",
			Type: eventClarification,
			Text: m.Reply,
			Data: map[string]any{"options": options, "confidence": m.Route.Confidence, "message": messageName(m.SessionID, deref(m.ReplyID)), "in_reply_to": name},
		})
	default:
		events = append(events, topology.Event{
			ID:   m.ID + ".routed",
			Type: eventRouted,
			Text: fmt.Sprintf("Routed to the %s (%s, confidence %.2f)", m.Route.Target, m.Route.IntentType, m.Route.Confidence),
			Data: map[string]any{
				"target":      m.Route.Target,
				"confidence":  m.Route.Confidence,
				"tier":        m.Route.Tier,
				"intent_type": m.Route.IntentType,
				"message":     name,
			},
		})
	}
	for _, e := range events {
		e.Tenant, e.Session, e.Source, e.CorrelationID = who.TenantID, m.SessionID, authorGuide, m.CorrelationID
		if _, err := topology.PublishEvent(ctx, s.bus, e); err != nil {
			return s.busDown(ctx, m, err)
		}
	}
	if m.Route.Tier != tierSlashCommand && m.Route.Target != "" {
		env := s.envelope(who, m)
		if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, m.Route.Target), env.GetId(), env); err != nil {
			return s.busDown(ctx, m, err)
		}
	}
	if err := markDispatched(ctx, s.db, ownerOf(who), m.ID, s.now()); err != nil {
		// Everything is on the bus; a retry would only republish duplicates
		// that the streams drop.
		s.log.WarnContext(ctx, "mark message dispatched", slog.String("message", name), logx.Err(err))
	}
	return nil
}

func (s *Service) busDown(ctx context.Context, m message, err error) error {
	s.log.ErrorContext(ctx, "publish message outcome", slog.String(logx.KeySessionID, m.SessionID),
		slog.String(logx.KeyCorrelationID, m.CorrelationID), logx.Err(err))
	if ctx.Err() != nil {
		return s.toStatus(ctx, "send message", ctx.Err())
	}
	msg := fmt.Sprintf("event bus unavailable; message %s is stored", messageName(m.SessionID, m.ID))
	if m.RequestID != nil {
		msg += "; retry with the same request_id to finish routing it"
	}
	return status.Error(codes.Unavailable, msg)
}

// envelope is what a routed message looks like in the target's inbox.
func (s *Service) envelope(who identity.Identity, m message) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id:            deref(m.EnvelopeID),
		CorrelationId: m.CorrelationID,
		TenantId:      who.TenantID,
		SessionId:     m.SessionID,
		UserId:        who.UserID,
		Source:        authorGuide,
		Target:        m.Route.Target,
		Type:          messagev1.MessageType_MESSAGE_TYPE_USER_INPUT,
		CreatedAt:     timestamppb.New(m.CreateTime),
		Status:        messagev1.MessageStatus_MESSAGE_STATUS_PENDING,
		Attempt:       1,
		Priority:      messagev1.Priority_PRIORITY_USER,
		Metadata:      map[string]string{"message": messageName(m.SessionID, m.ID)},
		StructuredIntent: &messagev1.StructuredIntent{
			OriginalRequest: m.Text,
			IntentType:      m.Route.IntentType,
			Subject:         m.IntentSubject,
		},
		ConfidenceChain: []*messagev1.ConfidenceEntry{{
			Agent:      authorGuide,
			Confidence: m.Route.Confidence,
			Reason:     m.Route.Reason,
		}},
		Payload: &messagev1.Envelope_UserInput{UserInput: &messagev1.UserInput{Text: m.Text}},
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// ListMessages returns a session's messages, oldest first.
func (s *Service) ListMessages(ctx context.Context, req *guidev1.ListMessagesRequest) (*guidev1.ListMessagesResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	sid, err := parseSessionName("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultMessagePageSize, maxMessagePageSize)
	if err != nil {
		return nil, err
	}
	var after *messageCursor
	if tok := req.GetPageToken(); tok != "" {
		t, id, err := decodeCursor(tok)
		if err != nil {
			return nil, err
		}
		after = &messageCursor{CreateTime: t, ID: id}
	}
	o := ownerOf(who)
	if _, err := getSession(ctx, s.db, o, sid, false); err != nil {
		return nil, s.toStatus(ctx, "list messages", err)
	}
	rows, err := listMessages(ctx, s.db, o, sid, after, size+1)
	if err != nil {
		return nil, s.toStatus(ctx, "list messages", err)
	}
	resp := &guidev1.ListMessagesResponse{}
	if len(rows) > size {
		rows = rows[:size]
		last := rows[len(rows)-1]
		resp.NextPageToken = encodeCursor(last.CreateTime, last.ID)
	}
	for _, m := range rows {
		resp.Messages = append(resp.Messages, m.proto())
	}
	return resp, nil
}
