package archivalist

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
	"sylk.dev/sylk/pkg/textsearch"
)

type fixture struct {
	svc *Service
	reg *prometheus.Registry
	bus *natsx.Bus
}

// newFixture builds the service on a fresh schema; withBus adds a NATS bus.
func newFixture(t *testing.T, withBus bool) fixture {
	t.Helper()
	pool, schema := testenv.Postgres(t, "archivalist", migrations.FS("archivalist"))
	f := fixture{reg: prometheus.NewRegistry()}
	if withBus {
		f.bus = testenv.NATS(t)
	}
	svc, err := New(testenv.FromFlags[Config](t), app.Deps{Log: logx.Discard(), DB: pool, Schema: schema, Bus: f.bus, Registerer: f.reg})
	require.NoError(t, err)
	f.svc = svc
	return f
}

func as(tenant, user, role string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: user, Role: role})
}

func admin(tenant string) context.Context { return as(tenant, "u1", identity.RoleAdmin) }

func (f fixture) create(t *testing.T, ctx context.Context, e *archivalistv1.Entry) *archivalistv1.Entry {
	t.Helper()
	resp, err := f.svc.CreateEntry(ctx, &archivalistv1.CreateEntryRequest{Entry: e})
	require.NoError(t, err)
	return resp.GetEntry()
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, testenv.FromFlags[Config](t).Validate())
	err := Config{MaxContentBytes: 0, MaxQueryBytes: 0, InboxHits: 0, InboxTimeout: 0}.Validate()
	require.Error(t, err)
	for _, flag := range []string{"max-content-bytes", "max-query-bytes", "inbox-hits", "inbox-timeout", "guide-timeout"} {
		require.Contains(t, err.Error(), "archivalist."+flag)
	}
}

func TestCreateAndGetEntry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", "alice", identity.RoleMember)
	session := ids.New()
	got := f.create(t, ctx, &archivalistv1.Entry{
		Category:  "decision",
		Title:     "Use keyset pagination",
		Content:   "Offsets get slow on large tables.",
		SessionId: session,
	})
	require.True(t, ids.Valid(got.GetId()))
	require.Equal(t, "entries/"+got.GetId(), got.GetName())
	require.Equal(t, "t1", got.GetTenantId())
	require.Equal(t, "alice", got.GetUserId())
	require.Equal(t, DefaultSource, got.GetSource())
	require.Equal(t, session, got.GetSessionId())
	require.WithinDuration(t, time.Now(), got.GetCreateTime().AsTime(), time.Minute)

	resp, err := f.svc.GetEntry(ctx, &archivalistv1.GetEntryRequest{Name: got.GetName()})
	require.NoError(t, err)
	require.Equal(t, got.GetTitle(), resp.GetEntry().GetTitle())
	require.Equal(t, got.GetContent(), resp.GetEntry().GetContent())
	require.True(t, got.GetCreateTime().AsTime().Equal(resp.GetEntry().GetCreateTime().AsTime()))

	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.created.WithLabelValues("decision")))

	noSession := f.create(t, ctx, &archivalistv1.Entry{Category: "note", Title: "No session", Source: "architect"})
	require.Empty(t, noSession.GetSessionId())
	require.Equal(t, "architect", noSession.GetSource())
}

func TestCreateEntryValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	long := strings.Repeat("x", MaxTitleChars+1)
	tests := []struct {
		name     string
		ctx      context.Context
		entry    *archivalistv1.Entry
		code     codes.Code
		contains []string
	}{
		{"no identity", context.Background(), &archivalistv1.Entry{Category: "note", Title: "x"}, codes.Unauthenticated, nil},
		{"viewer", as("t1", "v", identity.RoleViewer), &archivalistv1.Entry{Category: "note", Title: "x"}, codes.PermissionDenied, nil},
		{"no entry", admin("t1"), nil, codes.InvalidArgument, []string{"entry: required"}},
		{"no category", admin("t1"), &archivalistv1.Entry{Title: "x"}, codes.InvalidArgument,
			[]string{"entry.category: required", "decision, failure, outcome, pattern, note, routing_failure, consultation, message, pipeline_handoff, architect_workflow, inspector_findings, tester_summary"}},
		{"unknown category", admin("t1"), &archivalistv1.Entry{Category: "gossip", Title: "x"}, codes.InvalidArgument,
			[]string{`"gossip" is not allowed`, "allowed values: decision"}},
		{"no title", admin("t1"), &archivalistv1.Entry{Category: "note"}, codes.InvalidArgument, []string{"entry.title: required"}},
		{"blank title", admin("t1"), &archivalistv1.Entry{Category: "note", Title: "  "}, codes.InvalidArgument, []string{"entry.title: required"}},
		{"long title", admin("t1"), &archivalistv1.Entry{Category: "note", Title: long}, codes.InvalidArgument, []string{"entry.title: at most 200"}},
		{"big content", admin("t1"), &archivalistv1.Entry{Category: "note", Title: "x", Content: strings.Repeat("a", 64<<10+1)},
			codes.InvalidArgument, []string{"entry.content: at most 65536 bytes"}},
		{"bad session", admin("t1"), &archivalistv1.Entry{Category: "note", Title: "x", SessionId: "s1"}, codes.InvalidArgument,
			[]string{"entry.session_id: must be a UUID"}},
		{"nul", admin("t1"), &archivalistv1.Entry{Category: "note", Title: "x", Content: "a\x00b"}, codes.InvalidArgument,
			[]string{"entry.content: must be valid UTF-8"}},
		{"every problem", admin("t1"), &archivalistv1.Entry{Category: "x", SessionId: "nope"}, codes.InvalidArgument,
			[]string{"entry.category", "entry.title", "entry.session_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := f.svc.CreateEntry(tt.ctx, &archivalistv1.CreateEntryRequest{Entry: tt.entry})
			testenv.RequireCode(t, err, tt.code, tt.contains...)
		})
	}
	// Exactly at the limits is accepted.
	f.create(t, admin("t1"), &archivalistv1.Entry{Category: "note", Title: strings.Repeat("é", MaxTitleChars), Content: strings.Repeat("a", 64<<10)})
}

func TestGetEntryErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	e := f.create(t, admin("t1"), &archivalistv1.Entry{Category: "note", Title: "secret plan"})
	tests := []struct {
		name string
		ctx  context.Context
		req  string
		code codes.Code
	}{
		{"malformed", admin("t1"), "entries/xyz", codes.InvalidArgument},
		{"wrong collection", admin("t1"), "documents/" + e.GetId(), codes.InvalidArgument},
		{"missing", admin("t1"), "entries/" + ids.New(), codes.NotFound},
		{"other tenant", admin("t2"), e.GetName(), codes.NotFound},
		{"no identity", context.Background(), e.GetName(), codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := f.svc.GetEntry(tt.ctx, &archivalistv1.GetEntryRequest{Name: tt.req})
			testenv.RequireCode(t, err, tt.code)
		})
	}
}

func hitTitles(resp *archivalistv1.SearchEntriesResponse) []string {
	var out []string
	for _, h := range resp.GetHits() {
		out = append(out, h.GetEntry().GetTitle())
	}
	return out
}

func TestSearchSessionScoping(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	sessA, sessB := ids.New(), ids.New()
	f.create(t, ctx, &archivalistv1.Entry{Category: "failure", Title: "Migration deadlock", Content: "The schema migration deadlocked against the reindex job.", SessionId: sessA})
	f.create(t, ctx, &archivalistv1.Entry{Category: "note", Title: "Unrelated", Content: "Nothing about that here.", SessionId: sessB})
	f.create(t, ctx, &archivalistv1.Entry{Category: "pattern", Title: "Migrations take an advisory lock", Content: "Avoids deadlock between replicas."})

	search := func(req *archivalistv1.SearchEntriesRequest) []string {
		t.Helper()
		resp, err := f.svc.SearchEntries(ctx, req)
		require.NoError(t, err)
		return hitTitles(resp)
	}
	require.Empty(t, search(&archivalistv1.SearchEntriesRequest{Query: "deadlock", SessionId: sessB}))
	require.Equal(t, []string{"Migration deadlock"}, search(&archivalistv1.SearchEntriesRequest{Query: "deadlock", SessionId: sessA}))
	require.ElementsMatch(t, []string{"Migration deadlock", "Migrations take an advisory lock"},
		search(&archivalistv1.SearchEntriesRequest{Query: "deadlock", SessionId: sessB, CrossSession: true}))
	require.ElementsMatch(t, []string{"Migration deadlock", "Migrations take an advisory lock"},
		search(&archivalistv1.SearchEntriesRequest{Query: "deadlock", CrossSession: true}))
	require.Equal(t, []string{"Migrations take an advisory lock"},
		search(&archivalistv1.SearchEntriesRequest{Query: "deadlock", CrossSession: true, Category: "pattern"}))

	_, err := f.svc.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: "deadlock"})
	testenv.RequireCode(t, err, codes.InvalidArgument, "session_id: required unless cross_session is set")

	// Another tenant sees none of it, even across sessions.
	resp, err := f.svc.SearchEntries(admin("t2"), &archivalistv1.SearchEntriesRequest{Query: "deadlock", CrossSession: true})
	require.NoError(t, err)
	require.Empty(t, resp.GetHits())
	resp, err = f.svc.SearchEntries(admin("t2"), &archivalistv1.SearchEntriesRequest{Query: "deadlock", SessionId: sessA})
	require.NoError(t, err)
	require.Empty(t, resp.GetHits())
}

func TestSearchRankingSnippetAndFallback(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	session := ids.New()
	body := strings.Repeat("Filler words about nothing in particular. ", 40) + "Then the cache was moved to Redis with a one hour TTL. " + strings.Repeat("More filler text. ", 40)
	f.create(t, ctx, &archivalistv1.Entry{Category: "decision", Title: "Notes from the meeting", Content: body, SessionId: session})
	f.create(t, ctx, &archivalistv1.Entry{Category: "decision", Title: "Redis cache for routes", Content: "Routes are cached.", SessionId: session})

	resp, err := f.svc.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: "redis", SessionId: session})
	require.NoError(t, err)
	require.Equal(t, []string{"Redis cache for routes", "Notes from the meeting"}, hitTitles(resp), "a title match ranks first")
	require.Greater(t, resp.GetHits()[0].GetScore(), resp.GetHits()[1].GetScore())
	snippet := resp.GetHits()[1].GetSnippet()
	require.Contains(t, snippet, "«Redis»")
	require.LessOrEqual(t, len([]rune(snippet)), SnippetChars)
	require.NotContains(t, snippet, "\n")

	// No entry has every word: the search falls back to any word.
	resp, err = f.svc.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: "redis unicorn", SessionId: session})
	require.NoError(t, err)
	require.Len(t, resp.GetHits(), 2)

	// Web-search syntax: a quoted phrase and an exclusion.
	resp, err = f.svc.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: `"one hour" -routes`, SessionId: session})
	require.NoError(t, err)
	require.Equal(t, []string{"Notes from the meeting"}, hitTitles(resp))

	// Stop words only: nothing to match, no error.
	resp, err = f.svc.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: "the and of", SessionId: session})
	require.NoError(t, err)
	require.Empty(t, resp.GetHits())

	resp, err = f.svc.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: "redis", SessionId: session, PageSize: 1})
	require.NoError(t, err)
	require.Len(t, resp.GetHits(), 1)

	require.Equal(t, 1, testutil.CollectAndCount(f.svc.metrics.searchDuration), "session searches are timed")
}

func TestSearchValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	tests := []struct {
		name     string
		req      *archivalistv1.SearchEntriesRequest
		contains string
	}{
		{"no query", &archivalistv1.SearchEntriesRequest{SessionId: ids.New()}, "query: required"},
		{"long query", &archivalistv1.SearchEntriesRequest{Query: strings.Repeat("a", 1025), CrossSession: true}, "query: at most 1024 bytes"},
		{"no session", &archivalistv1.SearchEntriesRequest{Query: "x"}, "session_id: required unless cross_session is set"},
		{"bad session", &archivalistv1.SearchEntriesRequest{Query: "x", SessionId: "abc"}, "session_id: must be a UUID"},
		{"bad category", &archivalistv1.SearchEntriesRequest{Query: "x", CrossSession: true, Category: "gossip"}, "allowed values"},
		{"negative page size", &archivalistv1.SearchEntriesRequest{Query: "x", CrossSession: true, PageSize: -1}, "page_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := f.svc.SearchEntries(admin("t1"), tt.req)
			testenv.RequireCode(t, err, codes.InvalidArgument, tt.contains)
		})
	}
}

func TestListEntriesPagination(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	session := ids.New()
	const total = 25
	for i := range total {
		e := &archivalistv1.Entry{Category: "note", Title: fmt.Sprintf("entry %02d", i)}
		if i%5 == 0 {
			e.SessionId = session
			e.Category = "outcome"
		}
		f.create(t, ctx, e)
	}
	f.create(t, admin("t2"), &archivalistv1.Entry{Category: "note", Title: "other tenant"})

	var all []*archivalistv1.Entry
	token := ""
	pages := 0
	for {
		resp, err := f.svc.ListEntries(ctx, &archivalistv1.ListEntriesRequest{PageSize: 10, PageToken: token})
		require.NoError(t, err)
		all = append(all, resp.GetEntries()...)
		pages++
		token = resp.GetNextPageToken()
		if token == "" {
			break
		}
		require.Len(t, resp.GetEntries(), 10)
	}
	require.Equal(t, 3, pages)
	require.Len(t, all, total)
	seen := map[string]bool{}
	for i, e := range all {
		require.False(t, seen[e.GetId()], "duplicate %s", e.GetTitle())
		seen[e.GetId()] = true
		require.Equal(t, "t1", e.GetTenantId())
		if i > 0 {
			prev, cur := all[i-1].GetCreateTime().AsTime(), e.GetCreateTime().AsTime()
			require.False(t, cur.After(prev), "newest first")
		}
	}
	require.Equal(t, "entry 24", all[0].GetTitle())
	require.Equal(t, "entry 00", all[total-1].GetTitle())

	resp, err := f.svc.ListEntries(ctx, &archivalistv1.ListEntriesRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), DefaultPageSize)

	resp, err = f.svc.ListEntries(ctx, &archivalistv1.ListEntriesRequest{SessionId: session, PageSize: 500})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), 5)
	require.Empty(t, resp.GetNextPageToken())

	resp, err = f.svc.ListEntries(ctx, &archivalistv1.ListEntriesRequest{Category: "outcome", PageSize: 3})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), 3)
	resp, err = f.svc.ListEntries(ctx, &archivalistv1.ListEntriesRequest{Category: "outcome", PageSize: 3, PageToken: resp.GetNextPageToken()})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), 2)
	require.Empty(t, resp.GetNextPageToken())

	for _, req := range []*archivalistv1.ListEntriesRequest{
		{PageToken: "not-a-token"},
		{PageToken: textsearch.Cursor{Created: time.Now(), ID: "x"}.Token()},
		{SessionId: "abc"},
		{Category: "gossip"},
		{PageSize: -5},
	} {
		_, err := f.svc.ListEntries(ctx, req)
		testenv.RequireCode(t, err, codes.InvalidArgument)
	}
}

func TestStoreInsertIsIdempotentPerMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := context.Background()
	e := entry{TenantID: "t1", ID: ids.New(), Category: "note", Title: "once"}
	_, err := f.svc.store.insert(ctx, e, "msg-1")
	require.NoError(t, err)
	e.ID = ids.New()
	_, err = f.svc.store.insert(ctx, e, "msg-1")
	require.ErrorIs(t, err, errDuplicate)
	// The same message id in another tenant is another message.
	e.TenantID = "t2"
	_, err = f.svc.store.insert(ctx, e, "msg-1")
	require.NoError(t, err)
}

// Entries about one user's own work (their routing failures, their runs'
// checkpoints and handoffs, their pipelines' findings) are theirs and the
// tenant's admins'; the rest is the tenant's shared memory.
func TestPrivateEntriesAreTheirUsers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	alice, bob := as("t1", "alice", identity.RoleMember), as("t1", "bob", identity.RoleMember)
	private := f.create(t, alice, &archivalistv1.Entry{Category: "routing_failure", Title: "Routing failure",
		Content: "original_request: where is the quokkapayroll export"})
	f.create(t, alice, &archivalistv1.Entry{Category: "decision", Title: "Shared decision", Content: "quokkapayroll exports run nightly"})

	titles := func(ctx context.Context) []string {
		t.Helper()
		resp, err := f.svc.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: "quokkapayroll", CrossSession: true})
		require.NoError(t, err)
		return hitTitles(resp)
	}
	require.ElementsMatch(t, []string{"Routing failure", "Shared decision"}, titles(alice))
	require.ElementsMatch(t, []string{"Routing failure", "Shared decision"}, titles(admin("t1")))
	require.Equal(t, []string{"Shared decision"}, titles(bob))

	_, err := f.svc.GetEntry(bob, &archivalistv1.GetEntryRequest{Name: private.GetName()})
	testenv.RequireCode(t, err, codes.NotFound)
	require.Equal(t, "ENTRY_NOT_FOUND", apierr.Reason(err), "another user's private entry is reported as missing")
	_, err = f.svc.GetEntry(admin("t1"), &archivalistv1.GetEntryRequest{Name: private.GetName()})
	require.NoError(t, err)
	listed, err := f.svc.ListEntries(bob, &archivalistv1.ListEntriesRequest{})
	require.NoError(t, err)
	require.Len(t, listed.GetEntries(), 1)
	require.Equal(t, "Shared decision", listed.GetEntries()[0].GetTitle())
}
