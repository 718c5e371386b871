// Package topology names the mesh's NATS subjects and JetStream streams in one
// place. Every service provisions the streams it uses at start (creating or
// updating them is idempotent).
package topology

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/natsx"
)

// Agents that have an inbox on the AGENTS stream.
const (
	AgentGuide        = "guide"
	AgentLibrarian    = "librarian"
	AgentArchivalist  = "archivalist"
	AgentAcademic     = "academic"
	AgentArchitect    = "architect"
	AgentOrchestrator = "orchestrator"
)

// Worker roles.
const (
	RoleEngineer  = "engineer"
	RoleInspector = "inspector"
	RoleTester    = "tester"
)

// Roles lists the worker roles.
var Roles = []string{RoleEngineer, RoleInspector, RoleTester}

// Stream base names (the bus adds its prefix).
const (
	StreamEvents = "EVENTS"
	StreamAgents = "AGENTS"
	StreamTasks  = "TASKS"
)

// EventsRetention is how long session events are kept.
const EventsRetention = 30 * 24 * time.Hour

// EnsureEvents provisions the session event stream: every event of every
// session, kept for EventsRetention, replayable from any sequence.
func EnsureEvents(ctx context.Context, b *natsx.Bus) error {
	_, err := b.EnsureStream(ctx, jetstream.StreamConfig{
		Name:       b.Stream(StreamEvents),
		Subjects:   []string{b.Subject("events", ">")},
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.FileStorage,
		MaxAge:     EventsRetention,
		Duplicates: 2 * time.Minute,
	})
	return err
}

// EnsureAgents provisions the agent inboxes: a work queue, one consumer per agent.
func EnsureAgents(ctx context.Context, b *natsx.Bus) error {
	_, err := b.EnsureStream(ctx, jetstream.StreamConfig{
		Name:       b.Stream(StreamAgents),
		Subjects:   []string{b.Subject("agent", ">")},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	})
	return err
}

// EnsureTasks provisions task dispatch (per role) and task results.
func EnsureTasks(ctx context.Context, b *natsx.Bus) error {
	_, err := b.EnsureStream(ctx, jetstream.StreamConfig{
		Name:       b.Stream(StreamTasks),
		Subjects:   []string{b.Subject("task", ">")},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	})
	return err
}

// InboxSubject is an agent's inbox: "<p>.agent.<agent>".
func InboxSubject(b *natsx.Bus, agent string) string { return b.Subject("agent", agent) }

// TaskSubject is where tasks for a worker role go: "<p>.task.dispatch.<role>".
func TaskSubject(b *natsx.Bus, role string) string { return b.Subject("task", "dispatch", role) }

// ResultSubject is where workers report results: "<p>.task.result".
func ResultSubject(b *natsx.Bus) string { return b.Subject("task", "result") }

// Event origins: the last token of an event's subject says whether the
// Guide or an agent published it, so that a consumer of the agents' events
// (the Guide's correlator) is not sent the Guide's own.
const (
	OriginGuide = "guide"
	OriginAgent = "agent"
)

// EventSubject is the subject of a session's events from source:
// "<p>.events.<tenant>.<session>.<origin>".
func EventSubject(b *natsx.Bus, tenant, session, source string) string {
	origin := OriginAgent
	if source == AgentGuide {
		origin = OriginGuide
	}
	return b.Subject("events", natsx.Token(tenant), natsx.Token(session), origin)
}

// SessionEvents filters a session's events, from every source.
func SessionEvents(b *natsx.Bus, tenant, session string) string {
	return b.Subject("events", natsx.Token(tenant), natsx.Token(session), "*")
}

// AgentEvents filters every session's events from the agents (not the
// Guide).
func AgentEvents(b *natsx.Bus) string { return b.Subject("events", "*", "*", OriginAgent) }

// Event builds a session event.
type Event struct {
	Tenant, Session string
	// ID de-duplicates the event on the stream; optional.
	ID            string
	Type          string
	Source        string
	CorrelationID string
	Text          string
	Data          map[string]any
}

// PublishEvent appends an event to the session's stream and returns its sequence.
func PublishEvent(ctx context.Context, b *natsx.Bus, e Event) (uint64, error) {
	var data *structpb.Struct
	if e.Data != nil {
		s, err := structpb.NewStruct(e.Data)
		if err != nil {
			return 0, err
		}
		data = s
	}
	ev := &guidev1.Event{
		SessionId:     e.Session,
		Type:          e.Type,
		Source:        e.Source,
		CorrelationId: e.CorrelationID,
		CreateTime:    timestamppb.Now(),
		Text:          e.Text,
		Data:          data,
	}
	ack, err := b.Publish(ctx, EventSubject(b, e.Tenant, e.Session, e.Source), e.ID, ev)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// ConsumeInbox provisions the agent inboxes and the session event stream,
// then hands each message of agent's inbox to handler until ctx is done.
// spec supplies the delivery settings (AckWait, MaxDeliver, NakDelay); its
// stream, durable name and filter are set here.
func ConsumeInbox(ctx context.Context, b *natsx.Bus, agent string, spec natsx.ConsumerSpec, handler natsx.Handler) error {
	if err := EnsureAgents(ctx, b); err != nil {
		return err
	}
	if err := EnsureEvents(ctx, b); err != nil {
		return err
	}
	spec.Stream = b.Stream(StreamAgents)
	spec.Durable = agent
	spec.FilterSubjects = []string{InboxSubject(b, agent)}
	return b.Consume(ctx, spec, handler)
}

// MaxRecordBytes is the Archivalist's default bound on a record's content
// (-archivalist.max-content-bytes): agents clip what they record to it.
const MaxRecordBytes = 64 << 10

// Record is an entry an agent stores in the Archivalist's history.
type Record struct {
	// ID is the message id: a record sent again under it is a duplicate.
	ID, Tenant, Session, Correlation string
	// User is whose work it records (the Archivalist keeps some categories
	// private to their user).
	User string
	// Source is the agent that records it.
	Source, Category, Title, Text string
}

// StoreRequest is the envelope that asks the Archivalist to store r.
func StoreRequest(r Record) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id:            r.ID,
		CorrelationId: r.Correlation,
		TenantId:      r.Tenant,
		SessionId:     r.Session,
		UserId:        r.User,
		Source:        r.Source,
		Target:        AgentArchivalist,
		Type:          messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST,
		CreatedAt:     timestamppb.Now(),
		Attempt:       1,
		Priority:      messagev1.Priority_PRIORITY_KNOWLEDGE,
		Metadata:      map[string]string{"category": r.Category, "title": r.Title},
		Payload: &messagev1.Envelope_AgentResponse{AgentResponse: &messagev1.AgentResponse{
			Agent: r.Source, Text: r.Text}},
	}
}
