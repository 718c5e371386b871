package librarian

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// watchStream is the server side of a WatchOperation stream: what it sends
// arrives on got.
type watchStream struct {
	grpc.ServerStream
	ctx context.Context
	got chan *librarianv1.Operation
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (w *watchStream) Send(r *librarianv1.WatchOperationResponse) error {
	select {
	case w.got <- r.GetOperation():
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// watch starts WatchOperation of name; its result arrives on the returned
// channel once the stream ends.
func watch(ctx context.Context, svc *Service, name string) (*watchStream, <-chan error) {
	st := &watchStream{ctx: ctx, got: make(chan *librarianv1.Operation, 64)}
	errc := make(chan error, 1)
	go func() { errc <- svc.WatchOperation(&librarianv1.WatchOperationRequest{Name: name}, st) }()
	return st, errc
}

// next returns the stream's next message.
func (w *watchStream) next(t *testing.T) *librarianv1.Operation {
	t.Helper()
	select {
	case op := <-w.got:
		return op
	case <-time.After(30 * time.Second):
		require.FailNow(t, "no message on the watch stream")
		return nil
	}
}

// TestWatchOperation: a watch sends the operation's state at once, then
// each change of its progress as the runner writes it, and ends with the
// done state; another tenant's watch is not found.
func TestWatchOperation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	repo := create(t, ctx, h.svc, writeFixture(t), true)
	step := make(chan struct{})
	tr, err := h.svc.startOperation(ctx, identityOf(t, ctx), repository{ID: repo.GetId()}, opKindIndex, false,
		func(rctx context.Context, tr *opTracker) (indexResult, error) {
			tr.phase(phaseLexical)
			for i := 1; i <= 3; i++ {
				<-step
				tr.files(i, 3)
				tr.chunks(2)
			}
			<-step
			tr.lexicalReady(rctx)
			return indexResult{}, nil
		})
	require.NoError(t, err)
	name := operationPrefix + tr.id

	err = h.svc.WatchOperation(&librarianv1.WatchOperationRequest{Name: name}, &watchStream{ctx: as(t, "t2")})
	require.Equal(t, codes.NotFound, status.Code(err), "another tenant's operation")

	st, errc := watch(ctx, h.svc, name)
	first := st.next(t)
	require.False(t, first.GetDone())
	require.Equal(t, name, first.GetName())
	// Each step is seen before the next one is taken.
	var filesSeen, chunksSeen int64
	for want := int64(1); want <= 3; want++ {
		step <- struct{}{}
		for filesSeen < want {
			op := st.next(t)
			require.False(t, op.GetDone())
			md := op.GetMetadata()
			require.GreaterOrEqual(t, md.GetFilesDone(), filesSeen, "progress never goes back")
			require.GreaterOrEqual(t, md.GetChunksDone(), chunksSeen)
			filesSeen, chunksSeen = md.GetFilesDone(), md.GetChunksDone()
		}
	}
	step <- struct{}{}
	var last *librarianv1.Operation
	for last == nil || !last.GetDone() {
		last = st.next(t)
	}
	require.NoError(t, <-errc, "the stream ends once the operation is done")
	require.Nil(t, last.GetError())
	md := last.GetMetadata()
	require.Equal(t, librarianv1.IndexPhase_INDEX_PHASE_DONE, md.GetPhase())
	require.True(t, md.GetLexicalReady())
	require.EqualValues(t, 3, md.GetFilesDone())
	require.EqualValues(t, 6, md.GetChunksDone())

	// A watch of a finished operation sends it once and ends.
	st, errc = watch(ctx, h.svc, name)
	require.True(t, st.next(t).GetDone())
	require.NoError(t, <-errc)

	err = h.svc.WatchOperation(&librarianv1.WatchOperationRequest{Name: "operations/nope"}, &watchStream{ctx: ctx})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

// TestWatchOperationIndex: the watch of a registration's operation ends
// with the index done, every file read.
func TestWatchOperationIndex(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	resp, err := h.svc.CreateRepository(ctx, &librarianv1.CreateRepositoryRequest{
		Repository: &librarianv1.Repository{Path: writeFixture(t)}})
	require.NoError(t, err)
	st, errc := watch(ctx, h.svc, resp.GetOperation())
	var last *librarianv1.Operation
	for last == nil || !last.GetDone() {
		op := st.next(t)
		if last != nil {
			require.GreaterOrEqual(t, op.GetMetadata().GetFilesDone(), last.GetMetadata().GetFilesDone())
		}
		last = op
	}
	require.NoError(t, <-errc)
	require.Nil(t, last.GetError())
	require.Positive(t, last.GetMetadata().GetFilesDone())
	require.Equal(t, last.GetMetadata().GetFilesTotal(), last.GetMetadata().GetFilesDone())
	require.Equal(t, librarianv1.IndexState_INDEX_STATE_READY, last.GetRepository().GetIndexState())
}

// TestWatchOperationCancelled: the watch of a cancelled operation ends
// with its cancelled state; a watch whose client went away ends too.
func TestWatchOperationCancelled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	repo := create(t, ctx, h.svc, writeFixture(t), true)
	tr, err := h.svc.startOperation(ctx, identityOf(t, ctx), repository{ID: repo.GetId()}, opKindIndex, false,
		func(rctx context.Context, _ *opTracker) (indexResult, error) {
			<-rctx.Done()
			return indexResult{}, context.Cause(rctx)
		})
	require.NoError(t, err)
	name := operationPrefix + tr.id

	gone, leave := context.WithCancel(ctx)
	st, goneErr := watch(gone, h.svc, name)
	require.False(t, st.next(t).GetDone())
	leave()
	require.Equal(t, codes.Canceled, status.Code(<-goneErr), "the client went away")

	st, errc := watch(ctx, h.svc, name)
	require.False(t, st.next(t).GetDone())
	_, err = h.svc.CancelOperation(ctx, &librarianv1.CancelOperationRequest{Name: name})
	require.NoError(t, err)
	var last *librarianv1.Operation
	for last == nil || !last.GetDone() {
		last = st.next(t)
	}
	require.NoError(t, <-errc)
	require.EqualValues(t, codes.Canceled, last.GetError().GetCode())
	require.True(t, last.GetMetadata().GetCancelRequested())
	require.Empty(t, h.svc.opSignals.m, "no watcher left registered")
}

// TestWatchOperationOtherReplica: a watch on a replica that does not run
// the operation sees its progress by reading it, and its end.
func TestWatchOperationOtherReplica(t *testing.T) {
	t.Parallel()
	replica, _ := replicas(t, nil)
	runner, watcher := replica(), replica()
	ctx := as(t, "t1")
	repo := create(t, ctx, runner, writeFixture(t), true)
	step := make(chan struct{})
	tr, err := runner.startOperation(ctx, identityOf(t, ctx), repository{ID: repo.GetId()}, opKindIndex, false,
		func(rctx context.Context, tr *opTracker) (indexResult, error) {
			<-step
			tr.files(2, 2)
			<-step
			return indexResult{}, nil
		})
	require.NoError(t, err)
	st, errc := watch(ctx, watcher, operationPrefix+tr.id)
	require.False(t, st.next(t).GetDone())
	step <- struct{}{}
	op := st.next(t)
	require.False(t, op.GetDone())
	require.EqualValues(t, 2, op.GetMetadata().GetFilesDone())
	step <- struct{}{}
	var last *librarianv1.Operation
	for last == nil || !last.GetDone() {
		last = st.next(t)
	}
	require.NoError(t, <-errc)
	require.Nil(t, last.GetError())
}
