package librarian

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/identity"
)

// TestAsyncIndexOperation: a registration answers at once by default with
// an operation that ends with the repository READY, its progress complete,
// and the repository names it; an index of another tenant's operation is
// not found.
func TestAsyncIndexOperation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := writeFixture(t)
	resp, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Path: root}})
	require.NoError(t, err)
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_INDEXING, resp.GetRepository().GetIndexState())
	opName := resp.GetOperation()
	require.Equal(t, opName, resp.GetRepository().GetOperation())

	op := waitOperation(t, h.svc, ctx, opName)
	require.Nil(t, op.GetError())
	md := op.GetMetadata()
	require.Equal(t, librarianv1.IndexPhase_INDEX_PHASE_DONE, md.GetPhase())
	require.True(t, md.GetLexicalReady() && md.GetSemanticReady())
	require.Equal(t, md.GetFilesTotal(), md.GetFilesDone())
	require.Positive(t, md.GetFilesDone())
	require.Equal(t, md.GetChunksTotal(), md.GetChunksDone(), "every new chunk embedded")
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_READY, op.GetRepository().GetIndexState())
	require.Equal(t, opName, op.GetRepository().GetOperation())
	require.NotEmpty(t, search(t, ctx, h.svc, "parseHTTPRequest"))

	// A re-index with wait answers once done and names its operation too.
	idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: resp.GetRepository().GetName(), Full: true, Wait: true})
	require.NoError(t, err)
	require.NotEqual(t, opName, idx.GetOperation())
	require.Equal(t, idx.GetOperation(), idx.GetRepository().GetOperation())
	list, err := h.svc.ListOperations(ctx, &librarianv1.ListOperationsRequest{Repository: resp.GetRepository().GetName(), PageSize: 1})
	require.NoError(t, err)
	require.Len(t, list.GetOperations(), 1)
	require.Equal(t, idx.GetOperation(), list.GetOperations()[0].GetName(), "newest first")
	next, err := h.svc.ListOperations(ctx, &librarianv1.ListOperationsRequest{Repository: resp.GetRepository().GetName(), PageToken: list.GetNextPageToken()})
	require.NoError(t, err)
	require.Len(t, next.GetOperations(), 1)
	require.Equal(t, opName, next.GetOperations()[0].GetName())

	_, err = h.svc.GetOperation(as(t, "t2"), &librarianv1.GetOperationRequest{Name: opName})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = h.svc.CancelOperation(as(t, "t2"), &librarianv1.CancelOperationRequest{Name: opName})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = h.svc.GetOperation(ctx, &librarianv1.GetOperationRequest{Name: "operations/nope"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

// TestLostOperation: an operation whose runner went silent (its process is
// gone) reads as failed, and its repository FAILED, not INDEXING forever.
func TestLostOperation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	repo := create(t, ctx, h.svc, writeFixture(t), false)
	repoID := repo.GetId()
	op := operation{ID: "0190a3c5-0000-7000-8000-000000000001", RepoID: repoID, Kind: opKindIndex, progress: progress{Phase: phaseLexical}}
	require.NoError(t, h.svc.store.insertOperation(ctx, "t1", op))
	// Its runner's last write was long ago.
	_, err := h.svc.store.db.Exec(ctx, `UPDATE operations SET update_time = now() - interval '1 hour' WHERE id = $1`, uuidParam(op.ID))
	require.NoError(t, err)
	// A second index is refused while it counts as running.
	got, err := h.svc.GetOperation(ctx, &librarianv1.GetOperationRequest{Name: operationPrefix + op.ID})
	require.NoError(t, err)
	require.True(t, got.GetOperation().GetDone())
	require.EqualValues(t, codes.Aborted, got.GetOperation().GetError().GetCode())
	require.Contains(t, got.GetOperation().GetError().GetMessage(), "stopped")
	r, err := h.svc.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: repo.GetName()})
	require.NoError(t, err)
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_FAILED, r.GetRepository().GetIndexState())
	require.Equal(t, operationPrefix+op.ID, r.GetRepository().GetOperation())
	// The repository can be indexed again.
	_, err = h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
}

// TestOneOperationPerRepository: while an operation runs, another index of
// the repository is refused, naming it; a cancel ends it as CANCELLED and
// leaves the repository FAILED with the reason.
func TestOneOperationPerRepository(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	repo := create(t, ctx, h.svc, writeFixture(t), true)
	// A running operation of this repository, as another replica's.
	op := operation{ID: "0190a3c5-0000-7000-8000-000000000002", RepoID: repo.GetId(), Kind: opKindIndex, progress: progress{Phase: phaseLexical}}
	require.NoError(t, h.svc.store.insertOperation(ctx, "t1", op))
	_, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName()})
	require.Equal(t, codes.Aborted, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), operationPrefix+op.ID)
	// The cancel is recorded for its runner to see.
	c, err := h.svc.CancelOperation(ctx, &librarianv1.CancelOperationRequest{Name: operationPrefix + op.ID})
	require.NoError(t, err)
	require.True(t, c.GetOperation().GetMetadata().GetCancelRequested())

	// A run of this replica stops on cancel.
	_, err = h.svc.store.db.Exec(ctx, `UPDATE operations SET done = true WHERE id = $1`, uuidParam(op.ID))
	require.NoError(t, err)
	started := make(chan struct{})
	tr, err := h.svc.startOperation(ctx, identityOf(t, ctx), repository{ID: repo.GetId()}, opKindIndex, false, func(rctx context.Context, _ *opTracker) (indexResult, error) {
		close(started)
		<-rctx.Done()
		return indexResult{}, context.Cause(rctx)
	})
	require.NoError(t, err)
	<-started
	c, err = h.svc.CancelOperation(ctx, &librarianv1.CancelOperationRequest{Name: operationPrefix + tr.id})
	require.NoError(t, err)
	require.True(t, c.GetOperation().GetDone())
	require.EqualValues(t, codes.Canceled, c.GetOperation().GetError().GetCode())
	require.Equal(t, codes.Canceled, status.Code(tr.wait(ctx)))
}

// TestFailedFirstIndexStaysVisible: a registration whose clone fails in its
// operation leaves the operation failed with why and the repository
// registered and FAILED with index_error, not removed; once the remote is
// there, an index of it clones and indexes it. Registering without index
// clones only and leaves the repository PENDING.
func TestFailedFirstIndexStaysVisible(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	writeFile(t, src, "lib/lib.go", "package lib\n\n// Later comes later.\nfunc Later() {}\n")
	h := newHarness(t, false, "-librarian.data-dir", t.TempDir(), "-librarian.allowed-roots", filepath.Dir(src))
	ctx := as(t, "t1")
	resp, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Url: "file://" + src}})
	require.NoError(t, err, "the clone runs in the operation, not the request")
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_INDEXING, resp.GetRepository().GetIndexState())
	op := waitOperation(t, h.svc, ctx, resp.GetOperation())
	require.EqualValues(t, codes.FailedPrecondition, op.GetError().GetCode())
	require.Contains(t, op.GetError().GetMessage(), "cloning file://"+src)
	got, err := h.svc.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: resp.GetRepository().GetName()})
	require.NoError(t, err, "a failed first index is not rolled back")
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_FAILED, got.GetRepository().GetIndexState())
	require.Contains(t, got.GetRepository().GetIndexError(), "cloning file://"+src+" failed")

	// Waiting says the same, and where the repository is.
	_, err = h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Url: "file://" + src}, Wait: true})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "stays registered (FAILED)")

	git(t, src, "init", "-q")
	commitAll(t, src, "initial")
	idx, err := h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: got.GetRepository().GetName(), Wait: true})
	require.NoError(t, err)
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_READY, idx.GetRepository().GetIndexState())
	require.Equal(t, "Later", search(t, ctx, h.svc, "Later")[0].GetSymbol())

	only, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Url: "file://" + src}, Index: proto.Bool(false), Wait: true})
	require.NoError(t, err)
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_PENDING, only.GetRepository().GetIndexState())
	require.DirExists(t, filepath.Join(only.GetRepository().GetPath(), ".git"))
}

func waitOperation(t *testing.T, svc *Service, ctx context.Context, name string) *librarianv1.Operation {
	t.Helper()
	var op *librarianv1.Operation
	require.Eventually(t, func() bool {
		resp, err := svc.GetOperation(ctx, &librarianv1.GetOperationRequest{Name: name})
		require.NoError(t, err)
		op = resp.GetOperation()
		return op.GetDone()
	}, time.Minute, 20*time.Millisecond)
	return op
}

func identityOf(t *testing.T, ctx context.Context) identity.Identity {
	t.Helper()
	id, ok := identity.FromContext(ctx)
	require.True(t, ok)
	return id
}
