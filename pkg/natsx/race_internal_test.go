package natsx

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The errors a stream create gets when it races another change on the
// server are retried; others are not.
func TestCreateRace(t *testing.T) {
	t.Parallel()
	for code, want := range map[jetstream.ErrorCode]bool{
		jetstream.JSErrCodeStreamNameInUse: true,
		10065:                              true,  // subjects overlap
		10049:                              true,  // the store could not be made (its account directory went away)
		10071:                              false, // wrong last sequence
	} {
		require.Equal(t, want, createRace(&jetstream.APIError{ErrorCode: code}), "code %d", code)
	}
	require.False(t, createRace(errors.New("nats: timeout")))
}
