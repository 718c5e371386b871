package topology

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"sylk.dev/sylk/pkg/natsx"
)

// EnsureEvents provisions the session event stream: every event of every
// session, kept for EventsRetention, replayable from any sequence.
func EnsureEvents(ctx context.Context, b *natsx.Bus) error {
	_, err := b.EnsureStream(ctx, jetstream.StreamConfig{
		Name:       b.Stream(StreamEvents),
		Subjects:   []string{b.Subject("events", ">")},
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.FileStorage,
		MaxAge:     EventsRetention,
		Duplicates: duplicateWindow(b),
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
		Duplicates: duplicateWindow(b),
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
		Duplicates: duplicateWindow(b),
	})
	return err
}

// InboxConsumer is agent's inbox consumer: spec supplies the delivery
// settings (AckWait, MaxDeliver, NakDelay, MaxAckPending); its stream,
// durable name and filter are set here.
func InboxConsumer(b *natsx.Bus, agent string, spec natsx.ConsumerSpec) natsx.ConsumerSpec {
	spec.Stream = b.Stream(StreamAgents)
	spec.Durable = agent
	spec.FilterSubjects = []string{InboxSubject(b, agent)}
	return spec
}

// TaskConsumer is the consumer of a worker role's task queue.
func TaskConsumer(b *natsx.Bus, role string, spec natsx.ConsumerSpec) natsx.ConsumerSpec {
	spec.Stream = b.Stream(StreamTasks)
	spec.Durable = DurableWorker(role)
	spec.FilterSubjects = []string{TaskSubject(b, role)}
	return spec
}

// ResultConsumer is the Orchestrator's consumer of task results.
func ResultConsumer(b *natsx.Bus, spec natsx.ConsumerSpec) natsx.ConsumerSpec {
	spec.Stream = b.Stream(StreamTasks)
	spec.Durable = DurableResults
	spec.FilterSubjects = []string{ResultSubject(b)}
	return spec
}

// AgentEventsConsumer is the Guide's correlator: every session's events
// from the agents.
func AgentEventsConsumer(b *natsx.Bus, spec natsx.ConsumerSpec) natsx.ConsumerSpec {
	spec.Stream = b.Stream(StreamEvents)
	spec.Durable = DurableCorrelatorAgents
	spec.FilterSubjects = []string{AgentEvents(b)}
	return spec
}

// ConsumeInbox provisions the agent inboxes and the session event stream,
// then hands each message of agent's inbox to handler until ctx is done.
// spec supplies the delivery settings (see InboxConsumer).
func ConsumeInbox(ctx context.Context, b *natsx.Bus, agent string, spec natsx.ConsumerSpec, handler natsx.Handler) error {
	if err := EnsureAgents(ctx, b); err != nil {
		return err
	}
	if err := EnsureEvents(ctx, b); err != nil {
		return err
	}
	return b.Consume(ctx, InboxConsumer(b, agent, spec), handler)
}

// duplicateWindow is the bus's configured duplicate window, or
// DuplicateWindow when it has none.
func duplicateWindow(b *natsx.Bus) time.Duration {
	if w := b.DuplicateWindow(); w > 0 {
		return w
	}
	return DuplicateWindow
}
