// Package topology is the one place where the mesh's NATS subjects,
// JetStream streams and durable consumer names are built. No other package
// joins subject tokens: services and the gateway call the functions here.
//
// Every subject starts with the bus prefix <p> ("sylk" by default, one per
// test), and every stream name with the prefix in upper case.
//
//	Subject                                      Kind       Payload                    Who publishes -> who reads
//	<p>.agent.<agent>                            AGENTS     sylk.message.v1.Envelope   Guide, agents -> that agent's inbox (durable <agent>)
//	<p>.task.dispatch.<role>                     TASKS      sylk.task.v1.TaskDispatch  Orchestrator -> workers of <role> (durable worker-<role>)
//	<p>.task.result                              TASKS      sylk.task.v1.TaskResult    workers -> Orchestrator (durable orchestrator-results)
//	<p>.events.<tenant>.<session>.<origin>       EVENTS     sylk.event.v1.Event        Guide (origin guide), agents (origin agent) -> REST/SSE
//	                                                                                    readers; the Guide's correlator reads origin agent
//	                                                                                    (durable guide-correlator-agents)
//	<p>.signal.task.cancel                       core       sylk.task.v1.TaskCancel    Orchestrator -> every worker (the one running it stops)
//	<p>.signal.task.control                      core req.  sylk.orchestrator.v1.TaskControl -> TaskControlReply
//	                                                                                    Orchestrator -> the worker running the task
//	<p>.signal.task.claim                        core req.  sylk.task.v1.TaskClaimRequest -> TaskClaimResponse
//	                                                                                    a worker -> any Orchestrator (queue group orchestrator-claims)
//	<p>.signal.task.heartbeat                    core req.  sylk.task.v1.TaskHeartbeatRequest -> TaskHeartbeatResponse
//	                                                                                    a worker -> any Orchestrator (queue group orchestrator-claims)
//	<p>.orchestrator.leases.released             core       sylk.orchestrator.v1.LeasesReleased
//	                                                                                    a stopping Orchestrator -> every replica (take over)
//	<p>.librarian.progress.<repository>          core       sylk.librarian.v1.IndexNotice  Librarian -> Guide (cache), watchers
//	<p>.librarian.changes                        core       sylk.librarian.v1.IndexNotice  Librarian -> every Librarian replica (vectors)
//	<p>.llm.signal.<type>                        core       sylk.llm.v1.Signal         every LLM gate -> every LLM gate (B-19);
//	                                                                                    acknowledged on the request's reply inbox (SignalAck)
//	<p>.llm.stream.<tenant>.<correlation>        core       sylk.llm.v1.StreamMessage  a streaming call -> its watchers
//	<p>.llm.stream.<tenant>.<correlation>.control
//	                                             core       sylk.llm.v1.StreamControl  a watcher -> the streaming call (cancel it)
//	$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<P>_AGENTS.*
//	                                             core       JetStream advisory (JSON)  the server -> the Guide (queue group
//	                                                                                    guide-dead-letters): an inbox message its
//	                                                                                    agent never acknowledged becomes a dead letter
//
// Streams: <P>_AGENTS and <P>_TASKS are work queues (a message is gone once
// acknowledged); <P>_EVENTS keeps every session's events for
// EventsRetention, replayable from any sequence. All three drop a message
// published twice under one Nats-Msg-Id within DuplicateWindow.
package topology

import (
	"time"

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

// DuplicateWindow is how long a stream remembers a message id, unless the
// bus's configuration says otherwise (-nats.duplicate-window).
const DuplicateWindow = 2 * time.Minute

// Durable consumer names.
const (
	DurableResults          = "orchestrator-results"
	DurableCorrelatorAgents = "guide-correlator-agents"
	// DurableCorrelatorLegacy is the correlator's consumer of every event,
	// before events said their origin; the Guide removes it at start.
	DurableCorrelatorLegacy = "guide-correlator"
)

// QueueDeadLetters is the queue group in which Guide replicas share the
// inbox max-deliveries advisories.
const QueueDeadLetters = "guide-dead-letters"

// EventsStream is the name of the session event stream: "<P>_EVENTS".
func EventsStream(b *natsx.Bus) string { return b.Stream(StreamEvents) }

// AgentsStream is the name of the agent inbox stream: "<P>_AGENTS".
func AgentsStream(b *natsx.Bus) string { return b.Stream(StreamAgents) }

// InboxMaxDeliveries is the subject of the server's advisories that an
// inbox consumer gave up on a message (every agent's inbox).
func InboxMaxDeliveries(b *natsx.Bus) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + AgentsStream(b) + ".*"
}

// DurableWorker is the durable consumer of a worker role's queue.
func DurableWorker(role string) string { return "worker-" + role }

// InboxSubject is an agent's inbox: "<p>.agent.<agent>".
func InboxSubject(b *natsx.Bus, agent string) string { return b.Subject("agent", agent) }

// AgentOfInbox is the agent whose inbox subject is subject ("" when it is
// not an inbox).
func AgentOfInbox(b *natsx.Bus, subject string) string {
	prefix := b.Subject("agent") + "."
	if len(subject) <= len(prefix) || subject[:len(prefix)] != prefix {
		return ""
	}
	return subject[len(prefix):]
}

// TaskSubject is where tasks for a worker role go: "<p>.task.dispatch.<role>".
func TaskSubject(b *natsx.Bus, role string) string { return b.Subject("task", "dispatch", role) }

// ResultSubject is where workers report results: "<p>.task.result".
func ResultSubject(b *natsx.Bus) string { return b.Subject("task", "result") }

// TaskCancelSubject is where the Orchestrator cancels a running task.
func TaskCancelSubject(b *natsx.Bus) string { return b.Subject("signal", "task", "cancel") }

// TaskClaimSubject is where a worker claims a dispatch before it runs it.
func TaskClaimSubject(b *natsx.Bus) string { return b.Subject("signal", "task", "claim") }

// TaskHeartbeatSubject is where a worker keeps its claims alive.
func TaskHeartbeatSubject(b *natsx.Bus) string { return b.Subject("signal", "task", "heartbeat") }

// ClaimsQueue is the queue group of the Orchestrator replicas answering
// claims and heartbeats: one replica answers each.
const ClaimsQueue = "orchestrator-claims"

// TaskControlSubject is where the Orchestrator sends a running task the
// user's actions (spec F-13), request-reply.
func TaskControlSubject(b *natsx.Bus) string { return b.Subject("signal", "task", "control") }

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

// TenantOfEventSubject reads the tenant token of an event subject ("" when
// subject is not one).
func TenantOfEventSubject(b *natsx.Bus, subject string) string {
	prefix := b.Subject("events") + "."
	if len(subject) <= len(prefix) || subject[:len(prefix)] != prefix {
		return ""
	}
	rest := subject[len(prefix):]
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' {
			return rest[:i]
		}
	}
	return ""
}

// LeasesReleasedSubject is where a stopping Orchestrator replica tells the
// others that it released its run leases: "<p>.orchestrator.leases.released".
func LeasesReleasedSubject(b *natsx.Bus) string {
	return b.Subject("orchestrator", "leases", "released")
}

// IndexProgressSubject is where the Librarian reports a repository's index
// run; "*" as repository matches every repository.
func IndexProgressSubject(b *natsx.Bus, repository string) string {
	return b.Subject("librarian", "progress", repository)
}

// IndexChangesSubject tells every Librarian replica that an index changed.
func IndexChangesSubject(b *natsx.Bus) string { return b.Subject("librarian", "changes") }

// LLMSignalSubject is the subject of an LLM gate signal type; "*" matches
// every type.
func LLMSignalSubject(b *natsx.Bus, typ string) string { return b.Subject("llm", "signal", typ) }

// LLMStreamSubject carries a streaming model call's chunks to watchers.
func LLMStreamSubject(b *natsx.Bus, tenant, correlation string) string {
	return b.Subject("llm", "stream", natsx.Token(tenant), natsx.Token(correlation))
}

// LLMStreamControlSubject carries StreamControl messages to a streaming
// model call.
func LLMStreamControlSubject(b *natsx.Bus, tenant, correlation string) string {
	return b.Subject("llm", "stream", natsx.Token(tenant), natsx.Token(correlation), "control")
}
