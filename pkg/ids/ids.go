// Package ids makes resource ids: time-ordered UUIDv7 strings, so ids sort by
// creation and index well.
package ids

import "github.com/google/uuid"

// New returns a new UUIDv7 string.
func New() string {
	return uuid.Must(uuid.NewV7()).String()
}

// Valid reports whether s is a UUID string.
func Valid(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}
