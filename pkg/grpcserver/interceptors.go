package grpcserver

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
)

type metrics struct {
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		handled: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sylk_grpc_server_handled_total",
			Help: "RPCs completed on the server, by method and status code.",
		}, []string{"method", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sylk_grpc_server_handling_seconds",
			Help:    "Time the server took to handle an RPC.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method"}),
	}
}

// errPanic is what a caller gets for a handler that panicked.
var errPanic = apierr.New(codes.Internal, apierr.ReasonInternal, "internal error")

func recoveryUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "panic in handler", slog.String(logx.KeyMethod, info.FullMethod), slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
				err = errPanic.GRPCStatus().Err()
			}
		}()
		return handler(ctx, req)
	}
}

func recoveryStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ss.Context(), "panic in handler", slog.String(logx.KeyMethod, info.FullMethod), slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
				err = errPanic.GRPCStatus().Err()
			}
		}()
		return handler(srv, ss)
	}
}

func observeUnary(log *slog.Logger, m *metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		observe(ctx, log, m, info.FullMethod, start, err)
		return resp, err
	}
}

func observeStream(log *slog.Logger, m *metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		observe(ss.Context(), log, m, info.FullMethod, start, err)
		return err
	}
}

func observe(ctx context.Context, log *slog.Logger, m *metrics, method string, start time.Time, err error) {
	d := time.Since(start)
	code := status.Code(err)
	m.handled.WithLabelValues(method, code.String()).Inc()
	m.duration.WithLabelValues(method).Observe(d.Seconds())
	if strings.HasPrefix(method, "/grpc.health.v1.") {
		return
	}
	lvl := slog.LevelDebug
	switch code {
	case codes.OK, codes.Canceled:
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unavailable:
		lvl = slog.LevelError
	default:
		lvl = slog.LevelInfo
	}
	log.Log(ctx, lvl, "rpc", slog.String(logx.KeyMethod, method), slog.String(logx.KeyCode, code.String()), slog.Duration(logx.KeyDuration, d))
}

// publicError passes every error that leaves the server through apierr.Status:
// an apierr error becomes its status, a status gets an ErrorInfo when it
// has none, a context's end its code, and anything else a generic Internal
// whose cause is logged here, never sent. op in its log and message is the
// method's name.
func publicError(ctx context.Context, log *slog.Logger, fullMethod string, err error) error {
	return apierr.Status(ctx, log, path.Base(fullMethod), err)
}

func publicUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		return resp, publicError(ctx, log, info.FullMethod, err)
	}
}

func publicStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return publicError(ss.Context(), log, info.FullMethod, handler(srv, ss))
	}
}

func isPublic(public []string, method string) bool {
	for _, p := range public {
		if method == p || (strings.HasSuffix(p, "/") || strings.HasSuffix(p, ".")) && strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// incomingIdentity reads the caller's identity from ctx, checking its
// signature when signer is not nil. A call that names a caller without a
// valid signature is refused even on a public method: no service sends one.
func incomingIdentity(ctx context.Context, log *slog.Logger, signer *identity.Signer, method string) (identity.Identity, bool, error) {
	id, ok := identity.FromIncoming(ctx)
	if !ok || signer == nil {
		return id, ok, nil
	}
	if err := signer.VerifyIncoming(ctx, id, method); err != nil {
		from := ""
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			from = p.Addr.String()
		}
		log.WarnContext(ctx, "refused a call whose caller identity no service signed",
			slog.String(logx.KeyMethod, method), slog.String("peer", from), logx.Err(err))
		return identity.Identity{}, false, apierr.New(codes.Unauthenticated, identity.ReasonIdentityUnsigned, "%s", err.Error())
	}
	return id, true, nil
}

// errNoCaller refuses a call to a method that is not public without a
// caller identity.
var errNoCaller = identity.ErrNoIdentity.Withf("missing or invalid caller identity")

func identityUnary(log *slog.Logger, public []string, signer *identity.Signer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, ok, err := incomingIdentity(ctx, log, signer, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if ok {
			ctx = identity.NewContext(ctx, id)
		} else if !isPublic(public, info.FullMethod) {
			return nil, errNoCaller
		}
		return handler(ctx, req)
	}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

func identityStream(log *slog.Logger, public []string, signer *identity.Signer) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		id, ok, err := incomingIdentity(ss.Context(), log, signer, info.FullMethod)
		if err != nil {
			return err
		}
		if ok {
			ss = ctxStream{ss, identity.NewContext(ss.Context(), id)}
		} else if !isPublic(public, info.FullMethod) {
			return errNoCaller
		}
		return handler(srv, ss)
	}
}

// Validator is implemented by requests that check themselves.
type Validator interface {
	Validate() error
}

func validateUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := checkText(req); err != nil {
			return nil, err
		}
		if v, ok := req.(Validator); ok {
			if err := v.Validate(); err != nil {
				if _, isStatus := status.FromError(err); isStatus {
					return nil, err
				}
				return nil, apierr.New(codes.InvalidArgument, apierr.CodeName(codes.InvalidArgument), "%s", err.Error())
			}
		}
		return handler(ctx, req)
	}
}

// nulField names the first string in m that holds a NUL character (the
// path in the JSON names REST callers use), or returns "". No store takes
// NUL in text, so such input is refused at the edge rather than failing
// deep inside as an internal error.
func nulField(m protoreflect.Message) string {
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		found = nulValue(fd, v)
		if found != "" {
			found = joinField(fd.JSONName(), found)
		}
		return found == ""
	})
	return found
}

// nulValue checks one populated field; a non-empty result is the path below
// the field ("." for the field itself).
func nulValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.IsList():
		l := v.List()
		for i := range l.Len() {
			if p := nulSingle(fd, l.Get(i)); p != "" {
				return joinField(fmt.Sprintf("[%d]", i), p)
			}
		}
	case fd.IsMap():
		var found string
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			if strings.ContainsRune(k.String(), 0) {
				found = "."
			} else if p := nulSingle(fd.MapValue(), mv); p != "" {
				found = joinField(fmt.Sprintf("[%q]", k.String()), p)
			}
			return found == ""
		})
		return found
	default:
		return nulSingle(fd, v)
	}
	return ""
}

func nulSingle(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if strings.ContainsRune(v.String(), 0) {
			return "."
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return nulField(v.Message())
	}
	return ""
}

func joinField(name, below string) string {
	switch {
	case below == ".":
		return name
	case strings.HasPrefix(below, "["):
		return name + below
	default:
		return name + "." + below
	}
}

// checkText refuses a request holding NUL in any string.
func checkText(req any) error {
	if m, ok := req.(proto.Message); ok {
		if f := nulField(m.ProtoReflect()); f != "" {
			return apierr.Invalid(f, "must not contain NUL")
		}
	}
	return nil
}

// textStream checks every message a streaming call receives.
type textStream struct{ grpc.ServerStream }

func (s textStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return checkText(m)
}

func validateStream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, textStream{ss})
	}
}
