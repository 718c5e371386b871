package redisx

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A URL that does not parse is refused without quoting its password.
func TestBadURLErrorHidesPassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"redis://:s3cr3t%zz@127.0.0.1:6379/0", "redis://user:s3cr3t pw@127.0.0.1:6379/0"} {
		err := Config{URL: u, Prefix: "x"}.Validate()
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cr3t")
		_, err = Open(t.Context(), Config{URL: u, Prefix: "x"})
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cr3t")
	}
}
