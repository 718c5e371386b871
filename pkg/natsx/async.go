package natsx

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// PublishAsync sends m to a JetStream subject without waiting for the
// stream's ack; the returned future yields it. Messages published on one
// bus reach the stream in publish order, so a caller can send many and then
// wait for all the acks at once. msgID is used as in Publish.
func (b *Bus) PublishAsync(ctx context.Context, subject, msgID string, m proto.Message) (jetstream.PubAckFuture, error) {
	msg, err := b.newMsg(ctx, subject, msgID, m)
	if err != nil {
		return nil, err
	}
	f, err := b.JS.PublishMsgAsync(msg)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	return f, nil
}

// AwaitAck waits for an async publish's ack.
func AwaitAck(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
	case <-ctx.Done():
		return nil, fmt.Errorf("publish %s: %w", f.Msg().Subject, ctx.Err())
	}
}
