package natsx_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
)

func TestPublishConsumeDedupAndTrace(t *testing.T) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider()
	bus := testenv.NATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := bus.EnsureStream(ctx, jetstream.StreamConfig{
		Name: bus.Stream("WORK"), Subjects: []string{bus.Subject("work", ">")},
		Retention: jetstream.WorkQueuePolicy, Duplicates: time.Minute,
	})
	require.NoError(t, err)

	pctx, span := tp.Tracer("t").Start(ctx, "publish")
	want := span.SpanContext().TraceID()
	for range 3 { // the same id three times: stored once
		_, err := bus.Publish(pctx, bus.Subject("work", "a"), "msg-1", &messagev1.Envelope{Id: "msg-1"})
		require.NoError(t, err)
	}
	span.End()
	_, err = bus.Publish(ctx, bus.Subject("work", "a"), "msg-2", &messagev1.Envelope{Id: "msg-2"})
	require.NoError(t, err)

	var mu sync.Mutex
	var got []string
	var traceOK atomic.Bool
	stop := testenv.Start(t, func(ctx context.Context) error {
		return bus.Consume(ctx, natsx.ConsumerSpec{Stream: bus.Stream("WORK"), Durable: "w", FilterSubjects: []string{bus.Subject("work", "a")}},
			func(ctx context.Context, msg jetstream.Msg) error {
				var env messagev1.Envelope
				if err := natsx.Unmarshal(msg, &env); err != nil {
					return err
				}
				if env.Id == "msg-1" && trace.SpanContextFromContext(ctx).TraceID() == want {
					traceOK.Store(true)
				}
				mu.Lock()
				got = append(got, env.Id)
				mu.Unlock()
				return nil
			})
	})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 }, 30*time.Second, 10*time.Millisecond)
	require.True(t, traceOK.Load(), "the consumer continues the publisher's trace")
	stop()
	mu.Lock()
	require.Equal(t, []string{"msg-1", "msg-2"}, got)
	mu.Unlock()
}

func TestConsumeRedeliversAndTerminates(t *testing.T) {
	t.Parallel()
	bus := testenv.NATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := bus.EnsureStream(ctx, jetstream.StreamConfig{Name: bus.Stream("WORK"), Subjects: []string{bus.Subject("work", ">")}})
	require.NoError(t, err)
	_, err = bus.Publish(ctx, bus.Subject("work", "retry"), "", &messagev1.Envelope{Id: "retry"})
	require.NoError(t, err)
	_, err = bus.Publish(ctx, bus.Subject("work", "poison"), "", &messagev1.Envelope{Id: "poison"})
	require.NoError(t, err)

	var retries, poison atomic.Int32
	testenv.Start(t, func(ctx context.Context) error {
		return bus.Consume(ctx, natsx.ConsumerSpec{Stream: bus.Stream("WORK"), Durable: "r", NakDelay: time.Millisecond},
			func(ctx context.Context, msg jetstream.Msg) error {
				var env messagev1.Envelope
				_ = natsx.Unmarshal(msg, &env)
				if env.Id == "poison" {
					poison.Add(1)
					return natsx.Permanent(errors.New("cannot handle"))
				}
				if retries.Add(1) < 3 {
					return errors.New("transient")
				}
				return nil
			})
	})
	require.Eventually(t, func() bool { return retries.Load() == 3 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		info, err := bus.JS.Consumer(ctx, bus.Stream("WORK"), "r")
		if err != nil {
			return false
		}
		ci, err := info.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, int32(1), poison.Load(), "a permanent failure is not redelivered")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, natsx.Config{URL: "nats://x:4222", Prefix: "sylk"}.Validate())
	require.Error(t, natsx.Config{URL: "nats://x:4222", Prefix: "Bad.Prefix"}.Validate())
	require.Equal(t, "a_b_c", natsx.Token("a.b c"))
}

// Services provision the same streams at the same moment when the mesh
// starts; every one of them must succeed.
func TestEnsureStreamConcurrent(t *testing.T) {
	bus := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range 20 {
		cfg := jetstream.StreamConfig{
			Name:       bus.Stream("RACE" + string(rune('A'+round))),
			Subjects:   []string{bus.Subject("race", string(rune('a'+round)), ">")},
			Retention:  jetstream.WorkQueuePolicy,
			Storage:    jetstream.FileStorage,
			Duplicates: time.Minute,
		}
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for range 6 {
			wg.Go(func() {
				_, err := bus.EnsureStream(ctx, cfg)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d", round)
		}
	}
}

// A connection error names the server without the credentials in its URL.
func TestConnectErrorHidesCredentials(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"nats://s3cr3t-token@127.0.0.1:1", "nats://user:s3cr3t-token@127.0.0.1:1,nats://127.0.0.1:2"} {
		_, err := natsx.Connect(t.Context(), natsx.Config{URL: u, Prefix: "x"}, logx.Discard(), "t")
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cr3t-token")
		require.Contains(t, err.Error(), "127.0.0.1:1")
	}
	// Nor when the URL does not parse: the parse error would quote it.
	for _, u := range []string{"nats://user:s3cr3t-token%zz@127.0.0.1:1", "nats://user:s3cr3t token@127.0.0.1:1"} {
		_, err := natsx.Connect(t.Context(), natsx.Config{URL: u, Prefix: "x"}, logx.Discard(), "t")
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cr3t")
	}
}
