// Package identity carries the authenticated caller (tenant, user, role)
// through contexts and gRPC metadata. The gateway authenticates requests and
// sets it; every service reads it and scopes every query by its tenant.
package identity

import (
	"context"
	"regexp"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"sylk.dev/sylk/pkg/apierr"
)

// Metadata keys.
const (
	MDTenant = "x-sylk-tenant-id"
	MDUser   = "x-sylk-user-id"
	MDRole   = "x-sylk-role"
)

// Roles.
const (
	RoleAdmin  = "admin"
	RoleMember = "member"
	RoleViewer = "viewer"
	// RoleService marks a call one service makes on its own behalf.
	RoleService = "service"
)

// Reasons of the Unauthenticated errors a call without a usable caller
// identity gets.
const (
	// ReasonIdentityMissing: the call names no caller, or not a valid one.
	ReasonIdentityMissing = "CALLER_IDENTITY_MISSING"
	// ReasonIdentityUnsigned: the call names a caller no service of the
	// deployment signed.
	ReasonIdentityUnsigned = "CALLER_IDENTITY_UNSIGNED"
)

// ErrNoIdentity is returned for a call without a valid caller identity.
var ErrNoIdentity = apierr.New(codes.Unauthenticated, ReasonIdentityMissing, "no caller identity")

// Identity is who is calling.
type Identity struct {
	TenantID string
	UserID   string
	Role     string
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)

// Valid reports whether the identity names a tenant and a user in the
// accepted alphabet.
func (id Identity) Valid() bool {
	return idPattern.MatchString(id.TenantID) && idPattern.MatchString(id.UserID)
}

type ctxKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the identity in ctx.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// Require returns the identity in ctx or ErrNoIdentity.
func Require(ctx context.Context) (Identity, error) {
	id, ok := FromContext(ctx)
	if !ok || !id.Valid() {
		return Identity{}, ErrNoIdentity
	}
	return id, nil
}

// FromIncoming reads the identity from incoming gRPC metadata.
func FromIncoming(ctx context.Context) (Identity, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return Identity{}, false
	}
	id := Identity{TenantID: first(md, MDTenant), UserID: first(md, MDUser), Role: first(md, MDRole)}
	if !id.Valid() {
		return Identity{}, false
	}
	return id, true
}

// AppendOutgoing adds id to ctx's outgoing gRPC metadata.
func AppendOutgoing(ctx context.Context, id Identity) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MDTenant, id.TenantID, MDUser, id.UserID, MDRole, id.Role)
}

// UnaryClientInterceptor forwards the caller's identity to the next service,
// signed by s when s is not nil.
func UnaryClientInterceptor(s *Signer) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(forward(ctx, s, method), method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor forwards the caller's identity on streams, signed
// by s when s is not nil.
func StreamClientInterceptor(s *Signer) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(forward(ctx, s, method), desc, cc, method, opts...)
	}
}

func forward(ctx context.Context, s *Signer, method string) context.Context {
	if md, ok := metadata.FromOutgoingContext(ctx); !ok || len(md.Get(MDTenant)) == 0 {
		if id, ok := FromContext(ctx); ok {
			ctx = AppendOutgoing(ctx, id)
		}
	}
	if s != nil {
		ctx = s.sign(ctx, method)
	}
	return ctx
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
