// Package natsx connects to NATS, provisions JetStream streams and consumers,
// and publishes and consumes protobuf messages with trace context and
// de-duplication ids in their headers. Every subject and stream name carries
// one prefix, so that tests and deployments sharing a server never collide.
package natsx

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/meshtls"
)

// Config locates NATS.
type Config struct {
	URL    string
	Prefix string
	// DuplicateWindow is how long the streams remember a message id to
	// drop a second publish of it; 0 leaves each stream's default
	// (topology.DuplicateWindow). Every service of a deployment must use
	// the same value, as each one provisions the streams at start.
	DuplicateWindow time.Duration
	// TLS verifies a server whose certificate a private authority signed,
	// and presents a client certificate; a tls:// URL alone verifies with
	// the system's authorities.
	TLS meshtls.StoreTLS
}

// RegisterFlags registers -nats.url, -nats.prefix, -nats.duplicate-window
// and -nats.tls-*.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "nats.url", "nats://127.0.0.1:4222", "NATS server URL")
	fs.StringVar(&c.Prefix, "nats.prefix", "sylk", "first token of every subject, and stream name prefix")
	fs.DurationVar(&c.DuplicateWindow, "nats.duplicate-window", 0,
		"how long the streams drop a second publish of a message id (0: 2m); the same on every service, which each provision the streams")
	c.TLS.RegisterFlags(fs, "nats", "NATS")
}

var prefixPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// Validate checks the prefix.
func (c Config) Validate() error {
	if !prefixPattern.MatchString(c.Prefix) {
		return fmt.Errorf("nats.prefix %q: want lower-case letters, digits and '_', starting with a letter", c.Prefix)
	}
	if c.URL == "" {
		return errors.New("nats.url: must be set")
	}
	if c.DuplicateWindow < 0 {
		return fmt.Errorf("nats.duplicate-window %s: must not be negative", c.DuplicateWindow)
	}
	return c.TLS.Validate("nats")
}

// Bus is a NATS connection with JetStream.
type Bus struct {
	Conn   *nats.Conn
	JS     jetstream.JetStream
	prefix string
	log    *slog.Logger
	// dupWindow is Config.DuplicateWindow.
	dupWindow time.Duration
}

// hideURL is err without the URL a parse error quotes, which may hold a
// password or token: only what was wrong with it.
func hideURL(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	var ee url.EscapeError
	if errors.As(ue.Err, &ee) {
		return errors.New("invalid URL: a bad percent-encoding")
	}
	return fmt.Errorf("invalid URL: %w", ue.Err)
}

// RedactURL is a server URL (or comma-separated list) fit for messages:
// any user, password or token in it replaced.
func RedactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		switch {
		case err != nil:
			parts[i] = "(unparsable URL)"
		case u.User != nil:
			u.User = url.User("redacted")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// Connect opens the connection. name identifies the client to the server.
func Connect(ctx context.Context, cfg Config, log *slog.Logger, name string) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", logx.Err(err))
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected") }),
	}
	if cfg.TLS.Enabled() {
		// The server name is each server's host, as dialled.
		tc, err := cfg.TLS.ClientConfig("")
		if err != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", RedactURL(cfg.URL), hideURL(err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &Bus{Conn: nc, JS: js, prefix: cfg.Prefix, log: log, dupWindow: cfg.DuplicateWindow}, nil
}

// Close drains the connection: in-flight handlers finish, then it closes.
func (b *Bus) Close() {
	if err := b.Conn.Drain(); err != nil {
		b.Conn.Close()
	}
}

// Subject joins tokens under the prefix: Subject("task", "engineer") is
// "sylk.task.engineer".
func (b *Bus) Subject(tokens ...string) string {
	return b.prefix + "." + strings.Join(tokens, ".")
}

// Stream names a stream under the prefix: Stream("TASKS") is "SYLK_TASKS".
func (b *Bus) Stream(name string) string {
	return strings.ToUpper(b.prefix) + "_" + name
}

// Prefix returns the subject prefix.
func (b *Bus) Prefix() string { return b.prefix }

// DuplicateWindow is the configured duplicate window of the streams, 0
// when the configuration leaves it to their default.
func (b *Bus) DuplicateWindow() time.Duration { return b.dupWindow }

// EnsureStream creates the stream or updates it to cfg. Several services
// provision the same streams at start; when two create one at the same
// moment, the server can refuse the later create as overlapping the stream
// the earlier one is still registering, or as a name already in use. The
// stream then exists, so the call is repeated, and this time updates it.
func (b *Bus) EnsureStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	var err error
	for i := range 5 {
		var s jetstream.Stream
		s, err = b.JS.CreateOrUpdateStream(ctx, cfg)
		if err == nil {
			return s, nil
		}
		if !createRace(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(i*10) * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("provision stream %s: %w", cfg.Name, err)
}

// createRace reports whether err is what a create that raced another
// change on the server returns: a concurrent create of the same stream, or
// the server removing its account's stream directory as that account's
// last stream was deleted (10049: "error creating store for stream").
func createRace(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamNameInUse, 10065, // 10065: subjects overlap with an existing stream
		10049: // the stream's store could not be made
		return true
	}
	return false
}

// Token makes s safe as one subject token.
func Token(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			return '_'
		}
		return r
	}, s)
}

// Header keys.
const (
	HeaderType = "Sylk-Type"
)

// Publish sends m to a JetStream subject. msgID becomes Nats-Msg-Id, so the
// stream drops a duplicate published within its duplicate window.
func (b *Bus) Publish(ctx context.Context, subject, msgID string, m proto.Message) (*jetstream.PubAck, error) {
	msg, err := b.newMsg(ctx, subject, msgID, m)
	if err != nil {
		return nil, err
	}
	ack, err := b.JS.PublishMsg(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	return ack, nil
}

// PublishCore sends m on core NATS (signals, notifications): no persistence.
func (b *Bus) PublishCore(ctx context.Context, subject string, m proto.Message) error {
	msg, err := b.newMsg(ctx, subject, "", m)
	if err != nil {
		return err
	}
	return b.Conn.PublishMsg(msg)
}

func (b *Bus) newMsg(ctx context.Context, subject, msgID string, m proto.Message) (*nats.Msg, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", m, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(HeaderType, string(proto.MessageName(m)))
	if msgID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(http.Header(msg.Header)))
	return msg, nil
}

// ContextFrom returns ctx carrying the trace context in msg's headers.
func ContextFrom(ctx context.Context, h nats.Header) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(http.Header(h)))
}

// ConsumerSpec describes a durable pull consumer.
type ConsumerSpec struct {
	Stream  string
	Durable string
	// FilterSubjects limits the consumer; all of the stream when empty.
	FilterSubjects []string
	// MaxDeliver bounds redeliveries; 0 means 5.
	MaxDeliver int
	// AckWait is how long a message may stay unacknowledged; 0 means 30s.
	AckWait time.Duration
	// NakDelay is the redelivery delay after a handler error; 0 means 1s.
	NakDelay time.Duration
	// MaxAckPending bounds messages in flight; 0 means 256.
	MaxAckPending int
	// Ready, when set, is called once, when Consume has first provisioned
	// the consumer and is about to take messages (a service's readiness
	// waits for it).
	Ready func()
}

// permanent marks an error that redelivery cannot fix.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent wraps err so that Consume terminates the message instead of
// redelivering it.
func Permanent(err error) error { return permanent{err} }

// Handler processes one message. Returning nil acknowledges it; an error
// naks it for redelivery after NakDelay, or terminates it when Permanent.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Consume provisions the durable consumer and runs handler for each message,
// one at a time, until ctx is done. It returns nil when ctx ends. Should the
// consumer stop while ctx is live (removed on the server), it is provisioned
// again and consuming goes on.
func (b *Bus) Consume(ctx context.Context, spec ConsumerSpec, handler Handler) error {
	for {
		cons, err := b.EnsureConsumer(ctx, spec)
		if err != nil {
			if ctx.Err() != nil { // stopped while provisioning: a clean stop
				return nil
			}
			return err
		}
		if spec.Ready != nil {
			spec.Ready()
			spec.Ready = nil
		}
		if err := b.consume(ctx, spec, cons, handler); err != nil || ctx.Err() != nil {
			return err
		}
		b.log.WarnContext(ctx, "consumer stopped; provisioning it again", slog.String("durable", spec.Durable))
	}
}

// consume runs handler for each message of cons until ctx is done or the
// consumer stops.
func (b *Bus) consume(ctx context.Context, spec ConsumerSpec, cons jetstream.Consumer, handler Handler) error {
	nakDelay := spec.NakDelay
	if nakDelay == 0 {
		nakDelay = time.Second
	}
	// One message at a time, as the handler takes them: a message waiting
	// in a local buffer would run out its ack wait there and be delivered
	// again, counted towards MaxDeliver, though no handler had seen it.
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		return fmt.Errorf("consume %s/%s: %w", spec.Stream, spec.Durable, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	tracer := otel.Tracer("sylk/natsx")
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			b.log.WarnContext(ctx, "consumer next", slog.String("durable", spec.Durable), logx.Err(err))
			continue
		}
		mctx := ContextFrom(ctx, msg.Headers())
		mctx, span := tracer.Start(mctx, "consume "+msg.Subject(), trace.WithSpanKind(trace.SpanKindConsumer))
		herr := safely(mctx, handler, msg)
		span.End()
		switch {
		case herr == nil:
			if err := msg.Ack(); err != nil {
				b.log.WarnContext(ctx, "ack", slog.String("subject", msg.Subject()), logx.Err(err))
			}
		case errors.As(herr, new(permanent)):
			b.log.ErrorContext(ctx, "message dropped", slog.String("subject", msg.Subject()), logx.Err(herr))
			_ = msg.Term()
		default:
			b.log.WarnContext(ctx, "message will be redelivered", slog.String("subject", msg.Subject()), logx.Err(herr))
			_ = msg.NakWithDelay(nakDelay)
		}
	}
}

// safely runs handler on msg, turning a panic into an error: the message
// is delivered again, up to MaxDeliver, like one whose handler failed,
// rather than ending the process and coming back to end it again at every
// start.
func safely(ctx context.Context, handler Handler, msg jetstream.Msg) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked on %s: %v\n%s", msg.Subject(), r, debug.Stack())
		}
	}()
	return handler(ctx, msg)
}

// EnsureConsumer creates or updates the durable consumer of spec.
func (b *Bus) EnsureConsumer(ctx context.Context, spec ConsumerSpec) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxDeliver:    orInt(spec.MaxDeliver, 5),
		AckWait:       orDur(spec.AckWait, 30*time.Second),
		MaxAckPending: orInt(spec.MaxAckPending, 256),
	}
	// A single filter goes in FilterSubject: servers before 2.10 know no other.
	if len(spec.FilterSubjects) == 1 {
		cfg.FilterSubject = spec.FilterSubjects[0]
	} else {
		cfg.FilterSubjects = spec.FilterSubjects
	}
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("provision consumer %s/%s: %w", spec.Stream, spec.Durable, err)
	}
	return cons, nil
}

// Unmarshal decodes msg's data into m.
func Unmarshal(msg jetstream.Msg, m proto.Message) error {
	if err := proto.Unmarshal(msg.Data(), m); err != nil {
		return Permanent(fmt.Errorf("decode %s: %w", msg.Subject(), err))
	}
	return nil
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func orDur(v, d time.Duration) time.Duration {
	if v == 0 {
		return d
	}
	return v
}
