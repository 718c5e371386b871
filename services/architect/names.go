package architect

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

func planName(sessionID, id string) string { return "sessions/" + sessionID + "/plans/" + id }

// parseParent returns the session id in "sessions/{uuid}".
func parseParent(name string) (string, error) {
	if name == "" {
		return "", apierr.Invalid("parent", "required")
	}
	id, ok := strings.CutPrefix(name, "sessions/")
	if !ok || !ids.Valid(id) {
		return "", apierr.Invalid("parent", "want sessions/{uuid}, got %q", clip(name, 100))
	}
	return strings.ToLower(id), nil
}

// planCaller is the caller of an RPC on a plan, and the session and plan
// ids in the plan's name.
func planCaller(ctx context.Context, name string) (who identity.Identity, sessionID, planID string, err error) {
	if who, err = identity.Require(ctx); err != nil {
		return identity.Identity{}, "", "", err
	}
	sessionID, planID, err = parsePlanName(name)
	return who, sessionID, planID, err
}

// parsePlanName returns the session and plan ids in
// "sessions/{uuid}/plans/{uuid}".
func parsePlanName(name string) (sessionID, planID string, err error) {
	if name == "" {
		return "", "", apierr.Invalid("name", "required")
	}
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "sessions" || parts[2] != "plans" || !ids.Valid(parts[1]) || !ids.Valid(parts[3]) {
		return "", "", apierr.Invalid("name", "want sessions/{uuid}/plans/{uuid}, got %q", clip(name, 120))
	}
	return strings.ToLower(parts[1]), strings.ToLower(parts[3]), nil
}

func pageSize(requested int32) (int, error) {
	switch {
	case requested < 0:
		return 0, apierr.Invalid("page_size", "must not be negative, got %d", requested)
	case requested == 0:
		return defaultPlanPageSize, nil
	case requested > maxPlanPageSize:
		return maxPlanPageSize, nil
	}
	return int(requested), nil
}

// planCursor is a keyset position in a newest-first plan listing.
type planCursor struct {
	CreateTime time.Time
	ID         string
}

func encodeCursor(c planCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreateTime.UnixMicro(), 10) + "." + c.ID))
}

func decodeCursor(token string) (*planCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return nil, apierr.Invalid("page_token", "not a token this service issued")
	}
	us, id, ok := strings.Cut(string(raw), ".")
	micros, perr := strconv.ParseInt(us, 10, 64)
	t, inRange := pgstore.TokenTime(micros)
	if !ok || perr != nil || !inRange || !ids.Valid(id) {
		return nil, apierr.Invalid("page_token", "not a token this service issued")
	}
	return &planCursor{CreateTime: t, ID: id}, nil
}

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "..."
}
