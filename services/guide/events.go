package guide

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// readerIdleTimeout lets the server remove an event reader's consumer soon
// after a client goes away without the cleanup below reaching it.
const readerIdleTimeout = time.Minute

// ListEvents returns a session's events with a sequence above
// after_sequence, in order.
func (s *Service) ListEvents(ctx context.Context, req *guidev1.ListEventsRequest) (*guidev1.ListEventsResponse, error) {
	who, sid, err := callerSession(ctx, "parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultEventPageSize, maxEventPageSize)
	if err != nil {
		return nil, err
	}
	if err := checkAfterSequence(req.GetAfterSequence()); err != nil {
		return nil, err
	}
	if _, err := getSession(ctx, s.db, ownerOf(who), sid, false); err != nil {
		return nil, apierr.Status(ctx, s.log, "list events", err)
	}
	resp := &guidev1.ListEventsResponse{}
	err = s.readEvents(ctx, who.TenantID, sid, req.GetAfterSequence(), false, func(e *eventv1.Event) bool {
		resp.Events = append(resp.Events, e)
		return len(resp.Events) < size
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// StreamEvents sends a session's events with a sequence above
// after_sequence, then follows new ones until the client goes away.
func (s *Service) StreamEvents(req *guidev1.StreamEventsRequest, stream grpc.ServerStreamingServer[guidev1.StreamEventsResponse]) error {
	ctx := stream.Context()
	who, err := identity.Require(ctx)
	if err != nil {
		return err
	}
	sid, err := parseSessionName("parent", req.GetParent())
	if err != nil {
		return err
	}
	if err := checkAfterSequence(req.GetAfterSequence()); err != nil {
		return err
	}
	if _, err := getSession(ctx, s.db, ownerOf(who), sid, false); err != nil {
		return apierr.Status(ctx, s.log, "stream events", err)
	}
	// Send the headers now, so clients (and the gateway's server-sent events)
	// see the stream open before the first event arrives.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return apierr.Status(ctx, s.log, "stream events", err)
	}
	var sendErr error
	err = s.readEvents(ctx, who.TenantID, sid, req.GetAfterSequence(), true, func(e *eventv1.Event) bool {
		sendErr = stream.Send(&guidev1.StreamEventsResponse{Event: e})
		return sendErr == nil
	})
	if err != nil {
		return err
	}
	if sendErr != nil && ctx.Err() == nil {
		return apierr.Status(ctx, s.log, "stream events", sendErr)
	}
	return nil
}

// checkAfterSequence refuses a sequence no stream reaches (the next one
// would overflow).
func checkAfterSequence(seq uint64) error {
	if seq > math.MaxInt64 {
		return apierr.Invalid("after_sequence", "must be at most %d", int64(math.MaxInt64))
	}
	return nil
}

// readEvents reads the session's events from the EVENTS stream with an
// ordered consumer, starting after afterSeq, and hands each to yield until
// yield returns false. Without follow it stops at the last stored event;
// with follow it waits for new events until ctx is done.
func (s *Service) readEvents(ctx context.Context, tenant, sessionID string, afterSeq uint64, follow bool, yield func(*eventv1.Event) bool) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{topology.SessionEvents(s.bus, tenant, sessionID)},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: readerIdleTimeout,
		MaxResetAttempts:  3,
	}
	if afterSeq > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = afterSeq + 1
	}
	stream := topology.EventsStream(s.bus)
	// A bus that does not answer fails the read within PublishTimeout
	// (UNAVAILABLE) rather than holding the caller until it gives up: the
	// start of every read, and the whole of a page.
	bctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	cons, err := s.bus.JS.OrderedConsumer(bctx, stream, cfg)
	if err != nil {
		return s.eventsUnavailable(ctx, err)
	}
	defer func() {
		// The ordered consumer is ephemeral; remove it now rather than
		// leaving it to the idle timeout.
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := s.bus.JS.DeleteConsumer(dctx, stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				s.log.DebugContext(ctx, "delete event reader", logx.Err(err))
			}
		}
	}()
	if !follow {
		if info := cons.CachedInfo(); info == nil || info.NumPending == 0 {
			return nil
		}
	}
	it, err := cons.Messages()
	if err != nil {
		return s.eventsUnavailable(ctx, err)
	}
	defer it.Stop()
	readCtx := ctx
	if !follow {
		readCtx = bctx
	}
	for {
		msg, err := it.Next(jetstream.NextContext(readCtx))
		if err != nil {
			if ctx.Err() != nil {
				if follow {
					return nil
				}
				return apierr.Status(ctx, s.log, "read events", ctx.Err())
			}
			return s.eventsUnavailable(ctx, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return s.eventsUnavailable(ctx, err)
		}
		ev := &eventv1.Event{}
		if err := proto.Unmarshal(msg.Data(), ev); err != nil {
			s.log.WarnContext(ctx, "skip undecodable event", slog.Uint64("sequence", meta.Sequence.Stream), logx.Err(err))
		} else {
			ev.Sequence = meta.Sequence.Stream
			if !yield(ev) {
				return nil
			}
		}
		if !follow && meta.NumPending == 0 {
			return nil
		}
	}
}

func (s *Service) eventsUnavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return apierr.Status(ctx, s.log, "read events", ctx.Err())
	}
	s.log.ErrorContext(ctx, "read events", logx.Err(err))
	return apierr.Status(ctx, s.log, "read events", apierr.Unavailable(apierr.ReasonBusUnavailable, "event stream unavailable; retry later"))
}
