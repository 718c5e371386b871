package archivalist

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/testenv"
)

func TestParseTimeScope(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ text, scope, rest string }{
		{"what failed recently?", ScopeRecent, "what failed ?"},
		{"anything recent on the parser", ScopeRecent, "anything on the parser"},
		{"which runs failed today", ScopeToday, "which runs failed"},
		{"what did we decide yesterday about auth", ScopeYesterday, "what did we decide about auth"},
		{"what failed in the last week", ScopeLastWeek, "what failed"},
		{"what changed last month", ScopeLastMonth, "what changed"},
		{"failures this week", ScopeThisWeek, "failures"},
		{"failures in the past 7 days", ScopeRecent, "failures"},
		{"the deadlock", "", "the deadlock"},
	} {
		scope, rest := parseTimeScope(tt.text)
		require.Equal(t, tt.scope, scope, tt.text)
		require.Equal(t, tt.rest, rest, tt.text)
	}
}

func TestScopeWindow(t *testing.T) {
	t.Parallel()
	// A Wednesday.
	now := time.Date(2026, 11, 25, 10, 30, 0, 0, time.UTC)
	day := func(m time.Month, d int) time.Time { return time.Date(2026, m, d, 0, 0, 0, 0, time.UTC) }
	for _, tt := range []struct {
		scope        string
		since, until time.Time
		label        string
	}{
		{ScopeToday, day(11, 25), now.Add(time.Nanosecond), "today (2026-11-25 UTC)"},
		{ScopeYesterday, day(11, 24), day(11, 25), "yesterday"},
		{ScopeThisWeek, day(11, 23), now.Add(time.Nanosecond), "this week"},
		{ScopeLastWeek, day(11, 16), day(11, 23), "last week (2026-11-16 to 2026-11-22 UTC)"},
		{ScopeLastMonth, day(10, 1), day(11, 1), "last month (October 2026)"},
		{ScopeRecent, now.Add(-7 * 24 * time.Hour), now.Add(time.Nanosecond), "in the last 7 days"},
	} {
		w, ok := scopeWindow(tt.scope, now)
		require.True(t, ok, tt.scope)
		require.Equal(t, tt.since, *w.Since, tt.scope)
		require.Equal(t, tt.until, *w.Until, tt.scope)
		require.Contains(t, w.Label, tt.label, tt.scope)
	}
	_, ok := scopeWindow("before", now)
	require.False(t, ok, "a scope that names no window restricts nothing")
	// The Guide's classified scope wins over the text's.
	w, rest := questionWindow(ScopeToday, "what failed recently", now)
	require.Equal(t, ScopeToday, w.Scope)
	require.Equal(t, "what failed", rest)
	w, _ = questionWindow("", "what failed", now)
	require.False(t, w.set())
}

// backdate moves an entry's creation time days into the past.
func (f fixture) backdate(t *testing.T, tenant, id string, days int) {
	t.Helper()
	_, err := f.svc.store.db.Exec(context.Background(), `UPDATE entries SET created_at = now() - make_interval(days => $3) WHERE tenant_id = $1 AND id = $2`,
		tenant, id, days)
	require.NoError(t, err)
}

func TestSearchAndListByWindowAndRepository(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := as("t1", "alice", identity.RoleMember)
	repo, other := "repositories/"+ids.New(), "repositories/"+ids.New()
	fresh := f.create(t, ctx, &archivalistv1.Entry{Category: "failure", Title: "Failed: parser rewrite", Content: "Files: pkg/parse/parser.go", Repository: repo})
	old := f.create(t, ctx, &archivalistv1.Entry{Category: "failure", Title: "Failed: parser cleanup", Content: "Files: pkg/parse/parser.go", Repository: repo})
	elsewhere := f.create(t, ctx, &archivalistv1.Entry{Category: "failure", Title: "Failed: parser port", Content: "elsewhere", Repository: other})
	require.Equal(t, repo, fresh.GetRepository())
	f.backdate(t, "t1", old.GetId(), 10)

	search := func(req *archivalistv1.SearchEntriesRequest) []string {
		t.Helper()
		req.Query, req.CrossSession = "parser", true
		resp, err := f.svc.SearchEntries(ctx, req)
		require.NoError(t, err)
		return hitTitles(resp)
	}
	require.ElementsMatch(t, []string{fresh.GetTitle(), old.GetTitle(), elsewhere.GetTitle()}, search(&archivalistv1.SearchEntriesRequest{}))
	require.ElementsMatch(t, []string{fresh.GetTitle(), elsewhere.GetTitle()}, search(&archivalistv1.SearchEntriesRequest{TimeScope: "recent"}))
	require.ElementsMatch(t, []string{fresh.GetTitle()}, search(&archivalistv1.SearchEntriesRequest{TimeScope: "recent", Repository: repo}))
	require.ElementsMatch(t, []string{old.GetTitle()}, search(&archivalistv1.SearchEntriesRequest{Repository: repo,
		Until: timestamppb.New(time.Now().Add(-9 * 24 * time.Hour))}))
	require.ElementsMatch(t, []string{fresh.GetTitle(), elsewhere.GetTitle()}, search(&archivalistv1.SearchEntriesRequest{
		Since: timestamppb.New(time.Now().Add(-time.Hour))}))

	list, err := f.svc.ListEntries(ctx, &archivalistv1.ListEntriesRequest{Repository: repo, Since: timestamppb.New(time.Now().Add(-7 * 24 * time.Hour))})
	require.NoError(t, err)
	require.Len(t, list.GetEntries(), 1)
	require.Equal(t, fresh.GetId(), list.GetEntries()[0].GetId())
}

func TestTimeWindowValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	for _, tt := range []struct {
		name  string
		req   *archivalistv1.SearchEntriesRequest
		field string
	}{
		{"unknown scope", &archivalistv1.SearchEntriesRequest{TimeScope: "fortnight"}, "time_scope: \"fortnight\" is not a time scope; allowed values"},
		{"scope and bounds", &archivalistv1.SearchEntriesRequest{TimeScope: "today", Since: timestamppb.Now()}, "time_scope: give either"},
		{"inverted bounds", &archivalistv1.SearchEntriesRequest{Since: timestamppb.Now(), Until: timestamppb.New(time.Now().Add(-time.Hour))}, "until: must be after since"},
		{"bad timestamp", &archivalistv1.SearchEntriesRequest{Since: &timestamppb.Timestamp{Nanos: -1}}, "since: must be a valid timestamp"},
		{"bad repository", &archivalistv1.SearchEntriesRequest{Repository: "my-repo"}, "repository: want repositories/{uuid}"},
	} {
		tt.req.Query, tt.req.CrossSession = "parser", true
		_, err := f.svc.SearchEntries(ctx, tt.req)
		testenv.RequireCode(t, err, codes.InvalidArgument, tt.field)
	}
	_, err := f.svc.ListEntries(ctx, &archivalistv1.ListEntriesRequest{TimeScope: "someday"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "allowed values")
	_, err = f.svc.CreateEntry(ctx, &archivalistv1.CreateEntryRequest{Entry: &archivalistv1.Entry{Category: "note", Title: "x", Repository: "x"}})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestInboxAnswersWithinTimeScope(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	ctx := admin("t1")
	sessA, sessB := ids.New(), ids.New()
	fresh := f.create(t, ctx, &archivalistv1.Entry{Category: "failure", Title: "Failed: parser rewrite", Content: "The task failed.", SessionId: sessA})
	old := f.create(t, ctx, &archivalistv1.Entry{Category: "failure", Title: "Failed: lexer rewrite", Content: "The task failed.", SessionId: sessA})
	f.backdate(t, "t1", old.GetId(), 10)
	publish := runInbox(t, f)

	// From another session: a time-scoped question searches them all.
	q := question("t1", sessB, "what failed recently?")
	publish(q)
	ev := awaitAnswer(t, f, "t1", sessB, q.GetCorrelationId())
	require.Equal(t, eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED, ev.GetType())
	answer := ev.GetMessageAnswered()
	require.True(t, answer.GetCrossSession())
	require.Equal(t, []string{fresh.GetId()}, idsOf(answer.GetHits()))
	require.Contains(t, ev.GetText(), "in the last 7 days")

	// The Guide's classified scope is applied as it says.
	q = question("t1", sessB, "what failed")
	q.StructuredIntent = &messagev1.StructuredIntent{TimeScope: "recent"}
	publish(q)
	ev = awaitAnswer(t, f, "t1", sessB, q.GetCorrelationId())
	require.Equal(t, []string{fresh.GetId()}, idsOf(ev.GetMessageAnswered().GetHits()))
}
