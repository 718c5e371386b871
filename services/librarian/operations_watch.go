package librarian

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

// opWatchPoll is how often WatchOperation reads the operation when nothing
// woke it: the progress of an operation another replica runs is seen by
// this poll; this process's own writes wake the watch at once.
const opWatchPoll = 500 * time.Millisecond

// opSignals wakes the watchers of an operation when this process writes
// its progress.
type opSignals struct {
	mu sync.Mutex
	m  map[string]*opSignal
}

// opSignal is one watched operation: ch is closed (and replaced) at the
// next write; it is dropped with its last watcher.
type opSignal struct {
	ch       chan struct{}
	watchers int
}

// watch registers a watcher of operation id; unwatch ends it.
func (o *opSignals) watch(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]*opSignal{}
	}
	sig := o.m[id]
	if sig == nil {
		sig = &opSignal{ch: make(chan struct{})}
		o.m[id] = sig
	}
	sig.watchers++
}

func (o *opSignals) unwatch(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if sig := o.m[id]; sig != nil {
		if sig.watchers--; sig.watchers <= 0 {
			delete(o.m, id)
		}
	}
}

// next returns the channel closed at the next write of a watched
// operation (nil, which never fires, for one not watched).
func (o *opSignals) next(id string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if sig := o.m[id]; sig != nil {
		return sig.ch
	}
	return nil
}

// notify wakes the watchers of operation id after a write of it.
func (o *opSignals) notify(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if sig := o.m[id]; sig != nil {
		close(sig.ch)
		sig.ch = make(chan struct{})
	}
}

// WatchOperation streams one of the tenant's index operations: its state
// at once, then each change, until it is done. A write of this process
// wakes it at once; other replicas' writes are seen every opWatchPoll.
func (s *Service) WatchOperation(req *librarianv1.WatchOperationRequest, stream grpc.ServerStreamingServer[librarianv1.WatchOperationResponse]) error {
	ctx := stream.Context()
	id, err := identity.Require(ctx)
	if err != nil {
		return err
	}
	opID, err := parseOperationName(req.GetName(), "name")
	if err != nil {
		return err
	}
	s.opSignals.watch(opID)
	defer s.opSignals.unwatch(opID)
	tick := time.NewTicker(opWatchPoll)
	defer tick.Stop()
	var last *librarianv1.Operation
	for {
		// Taken before the read: a write after it wakes the wait below.
		woken := s.opSignals.next(opID)
		op, err := s.loadOperation(ctx, id.TenantID, opID)
		if err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return apierr.Status(ctx, s.log, "watch operation", err)
		}
		if last == nil || !proto.Equal(last, op) {
			if err := stream.Send(&librarianv1.WatchOperationResponse{Operation: op}); err != nil {
				return err
			}
			last = op
		}
		if op.GetDone() {
			return nil
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-woken:
		case <-tick.C:
		}
	}
}

// notifyOperation wakes the watchers of an operation this process wrote.
func (s *Service) notifyOperation(opID string) { s.opSignals.notify(opID) }
