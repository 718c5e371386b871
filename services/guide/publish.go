package guide

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/topology"
)

// outbound is one JetStream publication of a batch.
type outbound struct {
	subject, id string
	msg         proto.Message
}

// newEvent is an event the Guide publishes about a session; the caller sets
// its payload (and its source, when it relays an agent's).
func newEvent(typ eventv1.EventType, sessionID, correlationID, text string) *eventv1.Event {
	return &eventv1.Event{Type: typ, SessionId: sessionID, Source: authorGuide, CorrelationId: correlationID, Text: text}
}

// eventOut is ev, checked and stamped as topology.PublishEvent would, as a
// publication of a batch under de-duplication id id.
func (s *Service) eventOut(tenant, id string, ev *eventv1.Event) (outbound, error) {
	if err := topology.PrepareEvent(ev); err != nil {
		return outbound{}, err
	}
	return outbound{subject: topology.EventSubject(s.bus, tenant, ev.GetSessionId(), ev.GetSource()), id: id, msg: ev}, nil
}

// publishEvent appends ev to its session's stream under de-duplication id
// id.
func (s *Service) publishEvent(ctx context.Context, tenant, id string, ev *eventv1.Event) error {
	_, err := topology.PublishEvent(ctx, s.bus, tenant, id, ev)
	return err
}

// publishBatch publishes msgs in order without waiting for each
// acknowledgement in turn: the publications are pipelined on the one
// connection (the server stores them in the order sent) and the batch
// returns once every one is acknowledged, or fails when they are not all
// acknowledged within Config.PublishTimeout (a bus that is down: the client
// holds the publications until it reconnects). Headers match
// natsx.Bus.Publish.
func (s *Service) publishBatch(ctx context.Context, msgs []outbound) error {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, o := range msgs {
		data, err := proto.Marshal(o.msg)
		if err != nil {
			return fmt.Errorf("marshal %T: %w", o.msg, err)
		}
		nm := nats.NewMsg(o.subject)
		nm.Data = data
		nm.Header.Set(natsx.HeaderType, string(proto.MessageName(o.msg)))
		if o.id != "" {
			nm.Header.Set(jetstream.MsgIDHeader, o.id)
		}
		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(http.Header(nm.Header)))
		f, err := s.bus.JS.PublishMsgAsync(nm)
		if err != nil {
			return fmt.Errorf("publish %s: %w", o.subject, err)
		}
		futures = append(futures, f)
	}
	acked := time.NewTimer(s.cfg.PublishTimeout)
	defer acked.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-acked.C:
			return fmt.Errorf("publish %s: no acknowledgement within %s", f.Msg().Subject, s.cfg.PublishTimeout)
		}
	}
	return nil
}
