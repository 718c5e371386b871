package secrets

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`password = "hunter2hunter2"`, `[REDACTED]`},
		{"token: ghp_" + strings.Repeat("a", 36), "token: [REDACTED]"},
		{"url = postgres://app:s3cret@db:5432/x", "url = [REDACTED]db:5432/x"},
		{"-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\nnext", "[REDACTED]\n\n\nnext"},
		{"func passwordHash(p string) string", "func passwordHash(p string) string"},
		{"plain text", "plain text"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, Redact(tt.in), tt.in)
	}
}
