package guide

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/pgstore"
)

const sessionsCollection = "sessions/"

func sessionName(id string) string { return sessionsCollection + id }

func messageName(sessionID, id string) string {
	return sessionsCollection + sessionID + "/messages/" + id
}

// parseSessionName returns the id in "sessions/{uuid}", or an InvalidArgument
// status naming field.
func parseSessionName(field, name string) (string, error) {
	if name == "" {
		return "", apierr.Invalid(field, "required")
	}
	id, ok := strings.CutPrefix(name, sessionsCollection)
	if !ok || !ids.Valid(id) {
		return "", apierr.Invalid(field, "want sessions/{uuid}, got %q", truncate(name, 100))
	}
	return strings.ToLower(id), nil
}

// callerSession is the caller and the id of the session name names
// (field, for the error).
func callerSession(ctx context.Context, field, name string) (identity.Identity, string, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return identity.Identity{}, "", err
	}
	id, err := parseSessionName(field, name)
	return who, id, err
}

// pageSize applies the default and the maximum to a requested page size.
func pageSize(requested int32, def, max int) (int, error) {
	switch {
	case requested < 0:
		return 0, apierr.Invalid("page_size", "must not be negative, got %d", requested)
	case requested == 0:
		return def, nil
	case int(requested) > max:
		return max, nil
	}
	return int(requested), nil
}

// encodeCursor makes an opaque page token from a keyset position.
func encodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMicro(), 10) + "." + id))
}

// decodeCursor reads a page token made by encodeCursor.
func decodeCursor(token string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return time.Time{}, "", apierr.Invalid("page_token", "not a token this service issued")
	}
	us, id, ok := strings.Cut(string(raw), ".")
	micros, perr := strconv.ParseInt(us, 10, 64)
	t, inRange := pgstore.TokenTime(micros)
	if !ok || perr != nil || !inRange || !ids.Valid(id) {
		return time.Time{}, "", apierr.Invalid("page_token", "not a token this service issued")
	}
	return t, id, nil
}

// truncate shortens s to at most n bytes for use in messages, on a rune
// boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
