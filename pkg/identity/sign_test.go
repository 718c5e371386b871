package identity

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
)

func signer(t *testing.T, key string, now time.Time) *Signer {
	t.Helper()
	s, err := NewSigner([]byte(key))
	require.NoError(t, err)
	s.now = func() time.Time { return now }
	return s
}

func TestSignVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	const key = "0123456789abcdef0123456789abcdef"
	s := signer(t, key, now)
	id := Identity{TenantID: "acme", UserID: "ann", Role: RoleMember}
	const method = "/sylk.guide.v1.SessionService/ListSessions"
	sig := s.Sign(id, method)
	require.NoError(t, s.Verify(id, method, sig))

	// Any other identity, method, key or time fails.
	require.ErrorIs(t, s.Verify(id, "/sylk.guide.v1.SessionService/DeleteSession", sig), ErrBadSignature)
	for name, other := range map[string]Identity{
		"tenant": {TenantID: "acmf", UserID: "ann", Role: RoleMember},
		"user":   {TenantID: "acme", UserID: "bob", Role: RoleMember},
		"role":   {TenantID: "acme", UserID: "ann", Role: RoleAdmin},
		// Moving a boundary between parts changes the input.
		"boundary": {TenantID: "acmea", UserID: "nn", Role: RoleMember},
	} {
		require.ErrorIs(t, s.Verify(other, method, sig), ErrBadSignature, name)
	}
	require.ErrorIs(t, signer(t, key+"x", now).Verify(id, method, sig), ErrBadSignature)
	require.NoError(t, signer(t, key, now.Add(MaxSkew)).Verify(id, method, sig))
	require.ErrorIs(t, signer(t, key, now.Add(MaxSkew+time.Second)).Verify(id, method, sig), ErrBadSignature)
	require.ErrorIs(t, signer(t, key, now.Add(-MaxSkew-time.Second)).Verify(id, method, sig), ErrBadSignature)

	// A signature whose time was changed no longer matches.
	parts := strings.Split(sig, ".")
	require.Len(t, parts, 3)
	require.ErrorIs(t, s.Verify(id, method, parts[0]+".1800000001."+parts[2]), ErrBadSignature)
	for _, bad := range []string{"", "v1", "v1.", "v1.x.y", "v2." + parts[1] + "." + parts[2], "v1." + parts[1] + ".!!", "v1." + parts[1]} {
		require.ErrorIs(t, s.Verify(id, method, bad), ErrBadSignature, bad)
	}
}

func TestSignedOutgoing(t *testing.T) {
	t.Parallel()
	s := signer(t, strings.Repeat("k", MinKeyLen), time.Now())
	id := Identity{TenantID: "acme", UserID: "ann", Role: RoleMember}
	// The identity in the context is added and signed; a signature the
	// caller put there is replaced.
	ctx := metadata.AppendToOutgoingContext(NewContext(context.Background(), id), MDSignature, "v1.1.forged")
	md, _ := metadata.FromOutgoingContext(forward(ctx, s, "/m"))
	require.Equal(t, []string{"acme"}, md.Get(MDTenant))
	require.Len(t, md.Get(MDSignature), 1)
	in := metadata.NewIncomingContext(context.Background(), md)
	require.NoError(t, s.VerifyIncoming(in, id, "/m"))
	require.ErrorIs(t, s.VerifyIncoming(in, id, "/other"), ErrBadSignature)
	require.ErrorIs(t, s.VerifyIncoming(in, Identity{TenantID: "other", UserID: "ann", Role: RoleMember}, "/m"), ErrBadSignature)
	// No identity, nothing to sign.
	md, _ = metadata.FromOutgoingContext(forward(context.Background(), s, "/m"))
	require.Empty(t, md.Get(MDSignature))
	// Two signatures are refused, not picked from.
	md = metadata.Pairs(MDSignature, s.Sign(id, "/m"), MDSignature, s.Sign(id, "/m"))
	require.ErrorIs(t, s.VerifyIncoming(metadata.NewIncomingContext(context.Background(), md), id, "/m"), ErrBadSignature)
}

func TestKeyConfig(t *testing.T) {
	t.Parallel()
	_, err := KeyConfig{}.Signer()
	require.ErrorContains(t, err, "SYLK_INTERNAL_KEY")
	s, err := KeyConfig{AllowUnsigned: true}.Signer()
	require.NoError(t, err)
	require.Nil(t, s)

	require.ErrorContains(t, KeyConfig{Key: "short"}.Validate(), "at least 32 bytes")
	require.NotContains(t, KeyConfig{Key: "short-secret"}.Validate().Error(), "short-secret")
	long := strings.Repeat("s", 40)
	require.NoError(t, KeyConfig{Key: long}.Validate())
	require.Error(t, KeyConfig{Key: long, KeyFile: "/x"}.Validate())

	file := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(file, []byte(long+"\n"), 0o600))
	fromFile, err := KeyConfig{KeyFile: file}.Signer()
	require.NoError(t, err)
	inline, err := KeyConfig{Key: long}.Signer()
	require.NoError(t, err)
	id := Identity{TenantID: "acme", UserID: "ann"}
	require.NoError(t, fromFile.Verify(id, "/m", inline.Sign(id, "/m")), "the file's trailing newline is not part of the key")

	require.NoError(t, os.WriteFile(file, []byte("short\n"), 0o600))
	_, err = KeyConfig{KeyFile: file}.Signer()
	require.ErrorContains(t, err, "at least 32 bytes")
	_, err = KeyConfig{KeyFile: filepath.Join(t.TempDir(), "missing")}.Signer()
	require.ErrorContains(t, err, "internal.key-file")
}
