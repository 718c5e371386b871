package toolexec

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// Class says whose work a subprocess serves.
type Class int

const (
	// ClassPipeline is agent work: it may use the general slots only and
	// waits at most the acquire timeout.
	ClassPipeline Class = iota
	// ClassUser is user-interactive work: it may use the reserve too, and
	// when every slot is taken it preempts the lowest-priority pipeline.
	ClassUser
)

// ErrPoolTimeout is returned when no slot freed up in time (spec C-23, C-34).
var ErrPoolTimeout = errors.New("subprocess pool exhausted: timeout waiting for resource")

// ErrPreempted is the cause of a pipeline call cancelled to make room for a
// user call.
var ErrPreempted = errors.New("preempted by a user-interactive call")

// Pool is the subprocess slot pool shared by every invocation of a process:
// Total slots of which Reserve are kept for user-interactive calls (spec
// C-15, C-21, SM-5). Waiters are served user first, then by priority
// (higher first), then in arrival order.
type Pool struct {
	mu       sync.Mutex
	total    int
	reserve  int
	inUse    int
	pipeline int // slots held by pipeline calls
	seq      uint64
	waiters  waitQueue
	holders  map[*holder]struct{}
}

type holder struct {
	class    Class
	priority int
	preempt  context.CancelCauseFunc
}

type waiter struct {
	class    Class
	priority int
	seq      uint64
	index    int
	h        *holder
	granted  chan struct{}
}

// NewPool makes a pool of total slots, reservePercent of them (rounded
// down) kept for user calls.
func NewPool(total, reservePercent int) *Pool {
	total = max(total, 1)
	return &Pool{total: total, reserve: total * reservePercent / 100, holders: map[*holder]struct{}{}}
}

// Stats are the pool's counts.
type Stats struct{ Total, Reserve, InUse, Waiting int }

// Stats returns the current counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Total: p.total, Reserve: p.reserve, InUse: p.inUse, Waiting: len(p.waiters)}
}

func (p *Pool) canGrant(c Class) bool {
	if p.inUse >= p.total {
		return false
	}
	return c == ClassUser || p.pipeline < p.total-p.reserve
}

func (p *Pool) grant(h *holder) {
	p.inUse++
	if h.class == ClassPipeline {
		p.pipeline++
	}
	p.holders[h] = struct{}{}
}

// Acquire takes a slot. A pipeline call waits at most timeout; preempt, when
// set, is called with ErrPreempted if a user call needs the slot. The
// returned release gives the slot back; it is safe to call more than once.
func (p *Pool) Acquire(ctx context.Context, class Class, priority int, timeout time.Duration, preempt context.CancelCauseFunc) (func(), error) {
	h := &holder{class: class, priority: priority, preempt: preempt}
	p.mu.Lock()
	if len(p.waiters) == 0 && p.canGrant(class) {
		p.grant(h)
		p.mu.Unlock()
		return p.releaser(h), nil
	}
	p.seq++
	w := &waiter{class: class, priority: priority, seq: p.seq, h: h, granted: make(chan struct{})}
	heap.Push(&p.waiters, w)
	if class == ClassUser {
		p.preemptLowest()
	}
	p.dispatchLocked()
	p.mu.Unlock()

	var expired <-chan time.Time
	if class == ClassPipeline && timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case <-w.granted:
		return p.releaser(h), nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-expired:
		err = ErrPoolTimeout
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-w.granted:
		// Granted while giving up: hand the slot on.
		p.releaseLocked(h)
	default:
		heap.Remove(&p.waiters, w.index)
	}
	return nil, err
}

// preemptLowest cancels the lowest-priority pipeline holder, once.
func (p *Pool) preemptLowest() {
	if p.inUse < p.total {
		return
	}
	var victim *holder
	for h := range p.holders {
		if h.class == ClassPipeline && h.preempt != nil && (victim == nil || h.priority < victim.priority) {
			victim = h
		}
	}
	if victim != nil {
		victim.preempt(ErrPreempted)
		victim.preempt = nil
	}
}

func (p *Pool) releaser(h *holder) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.releaseLocked(h)
			p.mu.Unlock()
		})
	}
}

func (p *Pool) releaseLocked(h *holder) {
	if _, ok := p.holders[h]; !ok {
		return
	}
	delete(p.holders, h)
	p.inUse--
	if h.class == ClassPipeline {
		p.pipeline--
	}
	p.dispatchLocked()
}

// dispatchLocked hands free slots to waiters in order. User waiters come
// first, and every pipeline waiter has the same condition, so a head that
// cannot be served means no one behind it can.
func (p *Pool) dispatchLocked() {
	for len(p.waiters) > 0 {
		w := p.waiters[0]
		if !p.canGrant(w.class) {
			return
		}
		heap.Pop(&p.waiters)
		p.grant(w.h)
		close(w.granted)
	}
}

// waitQueue orders waiters: user first, then priority, then arrival.
type waitQueue []*waiter

func (q waitQueue) Len() int { return len(q) }
func (q waitQueue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.class != b.class {
		return a.class == ClassUser
	}
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.seq < b.seq
}
func (q waitQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *waitQueue) Push(x any) {
	w := x.(*waiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *waitQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	*q = old[:len(old)-1]
	w.index = -1
	return w
}
