package guide

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/secrets"
)

// TestChatSecretsAreRedacted: keys in a chat message are redacted before
// anything keeps the message: the stored message, its events and every
// value the Guide wrote to Redis (the route cache among them).
func TestChatSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := as("t1", "u1")
	s := f.createSession(t, ctx, "deploy")
	awsID := "AKIA" + "Q7ZP2LK3XW4RT6VN"
	pat := "github_pat_" + "11AQ7ZP2L0k9Xw4Rt8Vn3B_" + "m6Hs1Jd5Fg0CaYe8UqLw2Np4Tx7Rk9Zv3Bm6Hs1Jd5Fg0CaYe8UqLw2Np4T"
	text := "Where is the function ParseConfig defined? It reads " + awsID + " and " + pat
	f.send(t, ctx, s, text)
	f.send(t, ctx, s, text) // the second one is routed from the cache

	redacted := secrets.Scrub(text)
	require.Contains(t, redacted, "[REDACTED:aws-access-token]")
	_, cached := f.svc.cache.route(context.Background(), "t1", redacted)
	require.True(t, cached, "the route is cached under the redacted text")

	msgs, err := f.svc.ListMessages(ctx, &guidev1.ListMessagesRequest{Parent: s.GetName(), PageSize: 100})
	require.NoError(t, err)
	var seen strings.Builder
	for _, m := range msgs.GetMessages() {
		seen.WriteString(m.String())
	}
	for _, e := range f.events(t, ctx, s, 0) {
		seen.WriteString(e.String())
	}
	seen.WriteString(redisValues(t, f))
	require.Contains(t, seen.String(), "[REDACTED:aws-access-token]")
	require.NotContains(t, seen.String(), awsID)
	require.NotContains(t, seen.String(), pat)
}

// redisValues reads every value under the fixture's Redis prefix.
func redisValues(t *testing.T, f fixture) string {
	t.Helper()
	ctx := context.Background()
	rc := f.svc.cache.rc
	keys, err := rc.Keys(ctx, rc.Prefix()+":*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	var b strings.Builder
	for _, k := range keys {
		typ, err := rc.Type(ctx, k).Result()
		require.NoError(t, err)
		switch typ {
		case "string":
			b.WriteString(rc.Get(ctx, k).Val())
		case "hash":
			for f, v := range rc.HGetAll(ctx, k).Val() {
				b.WriteString(f + v)
			}
		case "list":
			b.WriteString(strings.Join(rc.LRange(ctx, k, 0, -1).Val(), ""))
		case "set":
			b.WriteString(strings.Join(rc.SMembers(ctx, k).Val(), ""))
		case "zset":
			b.WriteString(strings.Join(rc.ZRange(ctx, k, 0, -1).Val(), ""))
		}
		b.WriteString(k)
	}
	return b.String()
}
