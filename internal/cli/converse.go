package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
)

// turnEnd is how a message's exchange ended.
type turnEnd int

const (
	// endAnswered: an agent, or the Guide, answered.
	endAnswered turnEnd = iota
	// endClarify: the user is asked to choose or say more.
	endClarify
	// endPlan: a plan waits for approval.
	endPlan
	// endUnanswered: no agent answered in time, or none could be reached.
	endUnanswered
)

// turn is one message's exchange: what was sent and the event that ended it.
type turn struct {
	end   turnEnd
	event *eventv1.Event
	// raw is the ending event as the server sent it, for --json.
	raw []byte
	// sequence is the last event read, to resume after.
	sequence uint64
}

// exchange sends text to session (answering the clarification inReplyTo
// when set) and follows the session's events from after until the one that
// ends this message's exchange. show sees each event of the exchange on the
// way (nil shows nothing).
func exchange(ctx context.Context, c *client, session, text, inReplyTo string, after uint64, show func(*eventv1.Event)) (turn, error) {
	var resp guidev1.SendMessageResponse
	req := &guidev1.SendMessageRequest{Text: text, InReplyTo: inReplyTo}
	if _, err := c.call(ctx, http.MethodPost, "/v1/"+session+"/messages", req, &resp); err != nil {
		return turn{}, err
	}
	corr := resp.GetCorrelationId()
	t := turn{sequence: after}
	err := c.streamEvents(ctx, session, after, func(ev *eventv1.Event, raw []byte) (bool, error) {
		t.sequence = max(t.sequence, ev.GetSequence())
		if ev.GetCorrelationId() != corr {
			return false, nil
		}
		if show != nil {
			show(ev)
		}
		end, ok := endOf(ev)
		if ok {
			t.end, t.event, t.raw = end, ev, raw
		}
		return ok, nil
	})
	return t, err
}

// endOf says whether ev ends a message's exchange, and how.
func endOf(ev *eventv1.Event) (turnEnd, bool) {
	switch ev.GetType() {
	case eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED:
		return endAnswered, true
	case eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED:
		return endClarify, true
	case eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL:
		return endPlan, true
	case eventv1.EventType_EVENT_TYPE_MESSAGE_TIMEOUT, eventv1.EventType_EVENT_TYPE_MESSAGE_UNDELIVERABLE,
		eventv1.EventType_EVENT_TYPE_ERROR:
		return endUnanswered, true
	}
	return 0, false
}

// lastSequence is the sequence of the session's newest event (0 when it
// has none), so that a stream can start after what was already said.
func lastSequence(ctx context.Context, c *client, session string) (uint64, error) {
	const page = 1000
	var after uint64
	for {
		var resp guidev1.ListEventsResponse
		q := url.Values{"afterSequence": {fmt.Sprint(after)}, "pageSize": {fmt.Sprint(page)}}
		if _, err := c.call(ctx, http.MethodGet, "/v1/"+session+"/events?"+q.Encode(), nil, &resp); err != nil {
			return 0, err
		}
		evs := resp.GetEvents()
		for _, ev := range evs {
			after = max(after, ev.GetSequence())
		}
		if len(evs) < page {
			return after, nil
		}
	}
}

// startTurn finds where session's stream stands; a stored session that is
// gone is replaced by a new one when the session was not named explicitly.
func (e *env) startTurn(ctx context.Context, c *client, named string) (string, uint64, error) {
	session, err := e.session(ctx, c, named)
	if err != nil {
		return "", 0, err
	}
	after, err := lastSequence(ctx, c, session)
	var ae *Error
	if named == "" && errors.As(err, &ae) && ae.Code == ExitNotFound {
		if session, err = e.newSession(ctx, c); err != nil {
			return "", 0, err
		}
		return session, 0, nil
	}
	return session, after, err
}
