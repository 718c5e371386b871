package guide

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/testenv"
)

// repoLibrarian holds each tenant's repositories.
type repoLibrarian struct {
	librarianv1.UnimplementedLibrarianServiceServer
	repos map[string][]*librarianv1.Repository
}

func (l repoLibrarian) GetRepository(ctx context.Context, req *librarianv1.GetRepositoryRequest) (*librarianv1.GetRepositoryResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range l.repos[who.TenantID] {
		if r.GetName() == req.GetName() {
			return &librarianv1.GetRepositoryResponse{Repository: r}, nil
		}
	}
	return nil, apierr.NotFound("repository", req.GetName())
}

func (l repoLibrarian) ListRepositories(ctx context.Context, _ *librarianv1.ListRepositoriesRequest) (*librarianv1.ListRepositoriesResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	return &librarianv1.ListRepositoriesResponse{Repositories: l.repos[who.TenantID]}, nil
}

func repo(name string) *librarianv1.Repository {
	id := ids.New()
	return &librarianv1.Repository{Name: "repositories/" + id, Id: id, DisplayName: name}
}

// peerFixture is a Guide whose peers are fakes: a Librarian holding
// repositories, and what register adds (an Architect).
type peerFixture struct {
	flowFixture
	alpha, beta, gamma *librarianv1.Repository // t1's, t1's, t2's
}

func newPeerFixture(t *testing.T, register ...func(*grpc.Server)) peerFixture {
	t.Helper()
	f := peerFixture{alpha: repo("alpha"), beta: repo("beta"), gamma: repo("gamma")}
	lib := repoLibrarian{repos: map[string][]*librarianv1.Repository{"t1": {f.alpha, f.beta}, "t2": {f.gamma}}}
	conn := testenv.ServeGRPC(t, func(s *grpc.Server) {
		librarianv1.RegisterLibrarianServiceServer(s, lib)
		for _, r := range register {
			r(s)
		}
	})
	db, schema := testenv.Postgres(t, "guide", migrations.FS("guide"))
	bus := testenv.NATS(t)
	rc := testenv.Redis(t)
	reg := prometheus.NewRegistry()
	svc, err := New(Config{}, app.Deps{Log: logx.Discard(), DB: db, Schema: schema, Bus: bus, Redis: rc, Registerer: reg,
		Peers: app.Peers{Librarian: conn, Architect: conn}})
	require.NoError(t, err)
	f.flowFixture = flowFixture{fixture: fixture{svc: svc, bus: bus, reg: reg}, db: db, rc: rc}
	return f
}

func asViewer(tenant, user string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: user, Role: identity.RoleViewer})
}

func (f peerFixture) create(t *testing.T, ctx context.Context, repository string) (*guidev1.Session, error) {
	t.Helper()
	resp, err := f.svc.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{Repository: repository}})
	return resp.GetSession(), err
}

func (f peerFixture) update(ctx context.Context, s *guidev1.Session, mask string) (*guidev1.Session, error) {
	resp, err := f.svc.UpdateSession(ctx, &guidev1.UpdateSessionRequest{Session: s, UpdateMask: mask})
	return resp.GetSession(), err
}

// A session names a repository of its tenant at creation or by
// UpdateSession; a new one takes its user's last; listings show it, and
// its stream hears of each change.
func TestSessionRepository(t *testing.T) {
	t.Parallel()
	f := newPeerFixture(t)
	ctx := as("t1", "u1")

	s, err := f.create(t, ctx, f.alpha.GetName())
	require.NoError(t, err)
	require.Equal(t, f.alpha.GetName(), s.GetRepository())
	_, err = f.create(t, ctx, f.gamma.GetName())
	testenv.RequireReason(t, err, codes.NotFound, "REPOSITORY_NOT_FOUND", f.gamma.GetName())
	_, err = f.create(t, ctx, "alpha")
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "repositories/{uuid}")

	// Listings show it.
	got, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, f.alpha.GetName(), got.GetSession().GetRepository())
	list, err := f.svc.ListSessions(ctx, &guidev1.ListSessionsRequest{})
	require.NoError(t, err)
	require.Equal(t, f.alpha.GetName(), list.GetSessions()[0].GetRepository())
	active, err := f.svc.GetActiveSession(ctx, &guidev1.GetActiveSessionRequest{})
	require.NoError(t, err)
	require.Equal(t, f.alpha.GetName(), active.GetSession().GetRepository())

	// A session that names none takes the user's last; another user's
	// sessions have their own.
	second, err := f.create(t, ctx, "")
	require.NoError(t, err)
	require.Equal(t, f.alpha.GetName(), second.GetRepository())
	other, err := f.create(t, as("t1", "u2"), "")
	require.NoError(t, err)
	require.Empty(t, other.GetRepository())

	// UpdateSession changes it; the stream says so, and it is the last one now.
	up, err := f.update(ctx, &guidev1.Session{Name: second.GetName(), Repository: f.beta.GetName()}, "repository")
	require.NoError(t, err)
	require.Equal(t, f.beta.GetName(), up.GetRepository())
	ev := f.waitEvent(t, ctx, second, func(e *eventv1.Event) bool {
		return e.GetType() == eventv1.EventType_EVENT_TYPE_SESSION_UPDATED
	})
	require.Equal(t, f.beta.GetName(), ev.GetSession().GetRepository())
	require.Equal(t, "user", ev.GetSession().GetCause())
	require.Contains(t, ev.GetText(), "now works on "+f.beta.GetName())
	third, err := f.create(t, ctx, "")
	require.NoError(t, err)
	require.Equal(t, f.beta.GetName(), third.GetRepository(), "the last one set")

	// Another tenant's repository is not found; nothing changes.
	_, err = f.update(ctx, &guidev1.Session{Name: second.GetName(), Repository: f.gamma.GetName()}, "repository")
	testenv.RequireReason(t, err, codes.NotFound, "REPOSITORY_NOT_FOUND", "not found")
	got, err = f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: second.GetName()})
	require.NoError(t, err)
	require.Equal(t, f.beta.GetName(), got.GetSession().GetRepository())
}

// Who may change a session, and what: only its owner, not as a viewer, not
// once it has ended; the mask names the fields.
func TestUpdateSessionRules(t *testing.T) {
	t.Parallel()
	f := newPeerFixture(t)
	ctx := as("t1", "u1")
	s, err := f.create(t, ctx, f.alpha.GetName())
	require.NoError(t, err)

	_, err = f.update(asViewer("t1", "u1"), &guidev1.Session{Name: s.GetName(), Repository: f.beta.GetName()}, "")
	testenv.RequireReason(t, err, codes.PermissionDenied, reasonViewerReadOnly, "viewers")
	_, err = f.update(as("t1", "u2"), &guidev1.Session{Name: s.GetName(), DisplayName: "mine"}, "")
	testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", s.GetName())
	_, err = f.update(as("t2", "u1"), &guidev1.Session{Name: s.GetName(), Repository: f.gamma.GetName()}, "")
	testenv.RequireReason(t, err, codes.NotFound, "SESSION_NOT_FOUND", s.GetName())
	_, err = f.update(ctx, &guidev1.Session{Name: s.GetName()}, "colour")
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "colour")
	_, err = f.update(ctx, &guidev1.Session{Name: s.GetName()}, "")
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "changes nothing")
	_, err = f.update(ctx, &guidev1.Session{Name: s.GetName(), Config: &guidev1.SessionConfig{ReviewPersona: "pirate"}}, "config")
	testenv.RequireReason(t, err, codes.InvalidArgument, apierr.ReasonInvalidField, "session.config.review_persona")

	// With no mask, the fields set change: the name here, the repository kept.
	up, err := f.update(ctx, &guidev1.Session{Name: s.GetName(), DisplayName: "renamed"}, "")
	require.NoError(t, err)
	require.Equal(t, "renamed", up.GetDisplayName())
	require.Equal(t, f.alpha.GetName(), up.GetRepository())
	up, err = f.update(ctx, &guidev1.Session{Name: s.GetName(), Config: &guidev1.SessionConfig{AutoApproveTrivial: true,
		AllowPush: true, ReviewPersona: "Security"}}, "config")
	require.NoError(t, err)
	require.True(t, up.GetConfig().GetAutoApproveTrivial())
	require.True(t, up.GetConfig().GetAllowPush())
	require.Equal(t, "security", up.GetConfig().GetReviewPersona())
	require.Equal(t, int32(DefaultSessionMaxEngineers), up.GetConfig().GetMaxEngineers(), "unset limits take the defaults")
	// A repository named in the mask and left empty is cleared.
	up, err = f.update(ctx, &guidev1.Session{Name: s.GetName()}, "repository, display_name")
	require.NoError(t, err)
	require.Empty(t, up.GetRepository())
	require.Empty(t, up.GetDisplayName())
	got, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.True(t, got.GetSession().GetConfig().GetAutoApproveTrivial(), "stored")

	_, err = f.svc.CompleteSession(ctx, &guidev1.CompleteSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	_, err = f.update(ctx, &guidev1.Session{Name: s.GetName(), Repository: f.beta.GetName()}, "repository")
	testenv.RequireReason(t, err, codes.FailedPrecondition, reasonSessionEnded, "does not change")
}

// /repo lists the tenant's repositories and chooses one by display name,
// id or name; what the Guide routes then names it.
func TestRepoCommand(t *testing.T) {
	t.Parallel()
	f := newPeerFixture(t)
	ctx := as("t1", "u1")
	s, err := f.create(t, ctx, "")
	require.NoError(t, err)
	require.Empty(t, s.GetRepository())

	r := f.send(t, ctx, s, "/repo")
	require.Equal(t, "slash_command", r.GetRoute().GetTier())
	require.Contains(t, r.GetReply(), f.alpha.GetName()+`  "alpha"`)
	require.Contains(t, r.GetReply(), `"beta"`)
	require.NotContains(t, r.GetReply(), "gamma", "only the tenant's")
	require.Contains(t, r.GetReply(), "works on no repository")

	r = f.send(t, ctx, s, "/repo Beta")
	require.Contains(t, r.GetReply(), "now works on "+f.beta.GetName())
	ev := f.waitEvent(t, ctx, s, func(e *eventv1.Event) bool { return e.GetType() == eventv1.EventType_EVENT_TYPE_SESSION_UPDATED })
	require.Equal(t, f.beta.GetName(), ev.GetSession().GetRepository())
	require.Equal(t, "command", ev.GetSession().GetCause())
	require.Contains(t, f.send(t, ctx, s, "/repo").GetReply(), "* "+f.beta.GetName())
	require.Contains(t, f.send(t, ctx, s, "/repo "+f.alpha.GetName()).GetReply(), "now works on "+f.alpha.GetName())
	require.Contains(t, f.send(t, ctx, s, "/repo "+f.alpha.GetId()).GetReply(), "already works on "+f.alpha.GetName())

	// Another tenant's repository is not there, by name or id.
	require.Contains(t, f.send(t, ctx, s, "/repo gamma").GetReply(), `no repository named "gamma"`)
	require.Contains(t, f.send(t, ctx, s, "/repo "+f.gamma.GetName()).GetReply(), "no repository "+f.gamma.GetName())
	require.Contains(t, f.send(t, asViewer("t1", "u1"), s, "/repo beta").GetReply(), "Viewers cannot change a session")
	got, err := f.svc.GetSession(ctx, &guidev1.GetSessionRequest{Name: s.GetName()})
	require.NoError(t, err)
	require.Equal(t, f.alpha.GetName(), got.GetSession().GetRepository())

	// The session's repository travels with what the Guide routes.
	lib := inboxReader(t, f.bus, "librarian")
	arch := inboxReader(t, f.bus, "architect")
	require.Equal(t, "librarian", f.send(t, ctx, s, "where is the function ParseConfig defined?").GetRoute().GetTarget())
	require.Equal(t, f.alpha.GetName(), nextEnvelope(t, lib).GetRepository())
	require.Equal(t, "architect", f.send(t, ctx, s, "fix typo in README").GetRoute().GetTarget())
	require.Equal(t, f.alpha.GetName(), nextEnvelope(t, arch).GetRepository())
	f.send(t, ctx, s, "/plan add a --version flag to cmd/foo")
	require.Equal(t, f.alpha.GetName(), nextEnvelope(t, arch).GetRepository())

	// /session new takes the last one set.
	require.Contains(t, f.send(t, ctx, s, "/session new next").GetReply(), "switched to it")
	next, err := f.svc.GetActiveSession(ctx, &guidev1.GetActiveSessionRequest{})
	require.NoError(t, err)
	require.Equal(t, f.alpha.GetName(), next.GetSession().GetRepository())
}
