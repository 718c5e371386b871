package identity

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
)

// Services pass the caller's identity to each other in plain metadata, so a
// service must not take it from anyone who can reach its port: a task
// command runs beside the services, with their network. Every call a
// service makes therefore carries an HMAC of the identity, the method
// called and the time, under a key the services of one deployment share,
// and a service accepts an identity only with a signature it verifies: a
// signature seen on the wire is good for no other identity or method, and
// only for MaxSkew.

// MDSignature is the metadata key of the identity's signature.
const MDSignature = "x-sylk-identity-sig"

// MaxSkew is how far a signature's time may be from the receiver's clock.
// Each call is signed when it is made, so this only has to cover clocks
// that differ between machines.
const MaxSkew = 2 * time.Minute

// MinKeyLen is the shortest key accepted, in bytes.
const MinKeyLen = 32

// ErrBadSignature is returned for an identity without a valid signature.
var ErrBadSignature = errors.New("caller identity is not signed by a service of this deployment")

// Signer signs and verifies identities under one key.
type Signer struct {
	key []byte
	now func() time.Time
}

// NewSigner returns a signer for key, which must have at least MinKeyLen
// bytes.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("the internal key must have at least %d bytes, it has %d", MinKeyLen, len(key))
	}
	return &Signer{key: append([]byte(nil), key...), now: time.Now}, nil
}

// mac is the HMAC-SHA256 of the identity calling method at unix time t.
// Each part is length-prefixed, so no two calls share an input.
func (s *Signer) mac(id Identity, method string, t int64) []byte {
	h := hmac.New(sha256.New, s.key)
	var n [8]byte
	for _, part := range []string{"sylk-identity-v1", id.TenantID, id.UserID, id.Role, method} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	binary.BigEndian.PutUint64(n[:], uint64(t))
	h.Write(n[:])
	return h.Sum(nil)
}

// Sign returns the signature of id calling method (a full gRPC method name)
// now.
func (s *Signer) Sign(id Identity, method string) string {
	t := s.now().Unix()
	return "v1." + strconv.FormatInt(t, 10) + "." + base64.RawURLEncoding.EncodeToString(s.mac(id, method, t))
}

// Verify checks that sig is a signature of id calling method made within
// MaxSkew of now.
func (s *Signer) Verify(id Identity, method, sig string) error {
	rest, ok := strings.CutPrefix(sig, "v1.")
	if !ok {
		return ErrBadSignature
	}
	ts, enc, ok := strings.Cut(rest, ".")
	if !ok {
		return ErrBadSignature
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrBadSignature
	}
	got, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || !hmac.Equal(got, s.mac(id, method, t)) {
		return ErrBadSignature
	}
	if d := s.now().Sub(time.Unix(t, 0)); d > MaxSkew || d < -MaxSkew {
		return fmt.Errorf("%w: signed %s from this service's clock", ErrBadSignature, d.Round(time.Second))
	}
	return nil
}

// VerifyIncoming checks the signature of id calling method in ctx's
// incoming metadata.
func (s *Signer) VerifyIncoming(ctx context.Context, id Identity, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	sigs := md.Get(MDSignature)
	if len(sigs) != 1 {
		return ErrBadSignature
	}
	return s.Verify(id, method, sigs[0])
}

// sign returns ctx with its outgoing identity, if any, signed for a call of
// method; a signature already there (one a caller chose) is replaced.
func (s *Signer) sign(ctx context.Context, method string) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return ctx
	}
	id := Identity{TenantID: first(md, MDTenant), UserID: first(md, MDUser), Role: first(md, MDRole)}
	if id.TenantID == "" && id.UserID == "" {
		return ctx
	}
	md = md.Copy()
	md.Set(MDSignature, s.Sign(id, method))
	return metadata.NewOutgoingContext(ctx, md)
}

// KeyConfig locates the key the services of a deployment share.
type KeyConfig struct {
	// Key is the key itself (SYLK_INTERNAL_KEY).
	Key string
	// KeyFile holds it, for a mounted Kubernetes Secret.
	KeyFile string
	// AllowUnsigned runs a service without a key: it then takes any
	// caller identity it is sent, so only for a service no untrusted
	// process can reach.
	AllowUnsigned bool
}

// RegisterFlags registers -internal.*.
func (c *KeyConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Key, "internal.key", "", fmt.Sprintf("key (at least %d bytes) with which the services of one deployment sign the caller identities they pass to each other; the same on every service (prefer the variable or the key file)", MinKeyLen))
	fs.StringVar(&c.KeyFile, "internal.key-file", "", "file holding the internal key (a mounted Kubernetes Secret)")
	fs.BoolVar(&c.AllowUnsigned, "internal.allow-unsigned", false, "run without an internal key, taking any caller identity sent to this service (only where nothing untrusted, task commands included, can reach its port)")
}

// Validate checks the key's length when it is given inline.
func (c KeyConfig) Validate() error {
	if c.Key != "" && len(strings.TrimSpace(c.Key)) < MinKeyLen {
		return fmt.Errorf("internal.key: must have at least %d bytes", MinKeyLen)
	}
	if c.Key != "" && c.KeyFile != "" {
		return errors.New("internal.key and internal.key-file: set one")
	}
	return nil
}

// Configured reports whether a key is given.
func (c KeyConfig) Configured() bool { return c.Key != "" || c.KeyFile != "" }

// Signer loads the key. With no key it returns nil, or an error unless
// AllowUnsigned is set.
func (c KeyConfig) Signer() (*Signer, error) {
	key := strings.TrimSpace(c.Key)
	if key == "" && c.KeyFile != "" {
		b, err := os.ReadFile(c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("read internal.key-file: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	if key == "" {
		if c.AllowUnsigned {
			return nil, nil
		}
		return nil, errors.New("no internal key: set SYLK_INTERNAL_KEY (or -internal.key-file) to the same secret on every service, " +
			"or -internal.allow-unsigned where nothing untrusted can reach the service")
	}
	return NewSigner([]byte(key))
}
