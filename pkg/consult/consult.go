// Package consult governs direct consultation between agents (spec A-40 to
// an agent that knows its target calls it over gRPC, naming itself
// in the x-sylk-agent metadata; the target's interceptor checks the pair
// against the permission matrix (PermissionDenied otherwise) and logs the
// consultation to the Archivalist asynchronously, with the question cut to
// 100 characters. Calls that name no agent (users through the gateway) are
// not consultations and pass untouched.
package consult

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/grpcserver"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
)

// MDAgent is the metadata key naming the calling agent.
const MDAgent = "x-sylk-agent"

// SummaryChars is how much of a question a consultation log keeps (spec A-40).
const SummaryChars = 100

// CategoryConsultation is the Archivalist category of consultation logs.
const CategoryConsultation = "consultation"

// Agents.
const (
	Guide        = "guide"
	Architect    = "architect"
	Engineer     = "engineer"
	Designer     = "designer"
	Inspector    = "inspector"
	Tester       = "tester"
	Librarian    = "librarian"
	Archivalist  = "archivalist"
	Academic     = "academic"
	Orchestrator = "orchestrator"
)

// everyone lists the agents of the matrix.
var everyone = []string{Guide, Architect, Engineer, Designer, Inspector, Tester, Librarian, Archivalist, Academic}

// matrix is the consultation permission matrix (spec A-42): who may call
// whom directly. Pairs not listed go through the Guide.
var matrix = func() map[string]map[string]bool {
	m := map[string]map[string]bool{}
	allow := func(from string, to ...string) {
		if m[from] == nil {
			m[from] = map[string]bool{}
		}
		for _, t := range to {
			if t != from {
				m[from][t] = true
			}
		}
	}
	for _, a := range []string{Guide, Architect, Engineer, Designer} {
		allow(a, everyone...)
	}
	for _, a := range []string{Inspector, Tester} {
		for _, t := range everyone {
			if t != Academic {
				allow(a, t)
			}
		}
	}
	allow(Librarian, Guide, Archivalist, Academic)
	allow(Archivalist, Guide, Librarian, Academic)
	allow(Academic, Guide, Librarian, Archivalist)
	// The orchestrator consults rarely, and through the Guide (spec A-32).
	allow(Orchestrator, Guide)
	return m
}()

// Allowed reports whether from may consult to directly. An agent may
// always call itself.
func Allowed(from, to string) bool {
	from, to = strings.ToLower(from), strings.ToLower(to)
	return from == to || matrix[from][to]
}

// WithCaller marks ctx's outgoing calls as a consultation by agent.
func WithCaller(ctx context.Context, agent string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MDAgent, agent)
}

// Caller returns the consulting agent of an incoming call, "" when the
// call names none.
func Caller(ctx context.Context) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	if v := md.Get(MDAgent); len(v) > 0 {
		return strings.ToLower(strings.TrimSpace(v[0]))
	}
	return ""
}

// Summary cuts a question to SummaryChars characters plus "...".
func Summary(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if utf8.RuneCountInString(q) <= SummaryChars {
		return q
	}
	return string([]rune(q)[:SummaryChars]) + "..."
}

// Log is one consultation (spec A-40: ConsultationLog).
type Log struct {
	From, To  string
	Method    string
	Summary   string
	SessionID string
	TenantID  string
	UserID    string
	Time      time.Time
}

// Sink receives consultation logs. Log must not block.
type Sink interface {
	Log(ctx context.Context, l Log)
}

// UnaryServerInterceptor enforces the matrix for calls to target and logs
// each allowed consultation to sink.
func UnaryServerInterceptor(target string, sink Sink) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		from := Caller(ctx)
		if from == "" {
			return handler(ctx, req)
		}
		if !Allowed(from, target) {
			return nil, denied(from, target)
		}
		resp, err := handler(ctx, req)
		if sink != nil {
			sink.Log(ctx, newLog(ctx, from, target, info.FullMethod, req))
		}
		return resp, err
	}
}

// StreamServerInterceptor enforces the matrix on streaming calls.
func StreamServerInterceptor(target string, sink Sink) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		from := Caller(ss.Context())
		if from == "" {
			return handler(srv, ss)
		}
		if !Allowed(from, target) {
			return denied(from, target)
		}
		if sink != nil {
			sink.Log(ss.Context(), newLog(ss.Context(), from, target, info.FullMethod, nil))
		}
		return handler(srv, ss)
	}
}

func denied(from, to string) error {
	return status.Errorf(codes.PermissionDenied,
		"the %s may not consult the %s directly (consultation permission matrix); send the request through the guide", from, to)
}

func newLog(ctx context.Context, from, to, method string, req any) Log {
	l := Log{From: from, To: to, Method: method, Time: time.Now().UTC()}
	if id, ok := identity.FromContext(ctx); ok {
		l.TenantID, l.UserID = id.TenantID, id.UserID
	} else if id, ok := identity.FromIncoming(ctx); ok {
		l.TenantID, l.UserID = id.TenantID, id.UserID
	}
	question := method
	if m, ok := req.(proto.Message); ok {
		q, sid := inspect(m.ProtoReflect())
		if q != "" {
			question = q
		}
		l.SessionID = sid
	}
	l.Summary = Summary(question)
	return l
}

// questionFields and sessionFields are where requests carry them.
var (
	questionFields = []protoreflect.Name{"question", "query", "text", "request", "prompt"}
	sessionFields  = []protoreflect.Name{"session_id", "parent", "name"}
)

// inspect finds a request's question and session id by field name.
func inspect(m protoreflect.Message) (string, string) {
	fields := m.Descriptor().Fields()
	str := func(n protoreflect.Name) string {
		f := fields.ByName(n)
		if f == nil || f.Kind() != protoreflect.StringKind || f.IsList() {
			return ""
		}
		return m.Get(f).String()
	}
	var q, sid string
	for _, n := range questionFields {
		if q = str(n); q != "" {
			break
		}
	}
	for _, n := range sessionFields {
		v := str(n)
		if rest, ok := strings.CutPrefix(v, "sessions/"); ok {
			v, _, _ = strings.Cut(rest, "/")
		}
		if ids.Valid(v) {
			sid = v
			break
		}
	}
	return q, sid
}

// SinkConfig bounds the asynchronous logging.
type SinkConfig struct {
	// MaxInFlight bounds logs being published at once; more are dropped
	// (and counted) rather than slowing consultations down. 0 means 64.
	MaxInFlight int
	// Timeout bounds one publish; 0 means 5s.
	Timeout time.Duration
}

// NATSSink publishes each log to the Archivalist's inbox as a STORE_REQUEST
// (category "consultation"), fire and forget.
type NATSSink struct {
	bus      *natsx.Bus
	subject  string
	log      *slog.Logger
	cfg      SinkConfig
	inFlight atomic.Int64
	sent     prometheus.Counter
	dropped  prometheus.Counter
}

// NewNATSSink builds a sink on bus; archivalistInbox is the subject of the
// Archivalist's inbox. reg may be nil.
func NewNATSSink(bus *natsx.Bus, archivalistInbox string, log *slog.Logger, reg prometheus.Registerer, cfg SinkConfig) *NATSSink {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if log == nil {
		log = logx.Discard()
	}
	f := promauto.With(reg)
	return &NATSSink{bus: bus, subject: archivalistInbox, log: log, cfg: cfg,
		sent: f.NewCounter(prometheus.CounterOpts{Name: "sylk_consult_logs_total", Help: "Consultations logged to the Archivalist."}),
		dropped: f.NewCounter(prometheus.CounterOpts{Name: "sylk_consult_logs_dropped_total",
			Help: "Consultation logs dropped because too many were in flight or the bus failed."}),
	}
}

// Log publishes l in the background.
func (s *NATSSink) Log(ctx context.Context, l Log) {
	if l.TenantID == "" {
		s.dropped.Inc()
		return
	}
	if s.inFlight.Add(1) > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		s.dropped.Inc()
		return
	}
	env := Envelope(l)
	go func() {
		defer s.inFlight.Add(-1)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		defer cancel()
		if _, err := s.bus.Publish(pctx, s.subject, env.GetId(), env); err != nil {
			s.dropped.Inc()
			s.log.WarnContext(pctx, "log consultation", logx.Err(err))
			return
		}
		s.sent.Inc()
	}()
}

// Envelope is the STORE_REQUEST a consultation log travels in.
func Envelope(l Log) *messagev1.Envelope {
	return &messagev1.Envelope{
		Id:        ids.New(),
		TenantId:  l.TenantID,
		SessionId: l.SessionID,
		UserId:    l.UserID,
		Source:    l.From,
		Target:    Archivalist,
		Type:      messagev1.MessageType_MESSAGE_TYPE_STORE_REQUEST,
		CreatedAt: timestamppb.New(l.Time),
		Status:    messagev1.MessageStatus_MESSAGE_STATUS_PENDING,
		Attempt:   1,
		Priority:  messagev1.Priority_PRIORITY_KNOWLEDGE,
		// Annotations only: the entry itself is the store request.
		Metadata: map[string]string{
			"consult.to": l.To,
			"method":     l.Method,
		},
		Payload: &messagev1.Envelope_StoreRequest{StoreRequest: &messagev1.StoreRequest{
			Source:   l.From,
			Category: CategoryConsultation,
			Title:    fmt.Sprintf("%s consulted %s", l.From, l.To),
			Content:  fmt.Sprintf("%s -> %s: %s", l.From, l.To, l.Summary),
		}},
	}
}

// ServerOption installs the consultation interceptors for a server that
// plays target, after the server's own chain (so the caller's identity is
// known).
func ServerOption(target string, sink Sink) grpcserver.Option {
	return grpcserver.WithInterceptors(
		[]grpc.UnaryServerInterceptor{UnaryServerInterceptor(target, sink)},
		[]grpc.StreamServerInterceptor{StreamServerInterceptor(target, sink)},
	)
}
