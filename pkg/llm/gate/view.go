package gate

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/llm/breaker"
	"sylk.dev/sylk/pkg/llm/signal"
	"sylk.dev/sylk/pkg/logx"
)

// The gate keeps a local view of each provider's shared rate-limit and
// breaker state so that a call checks Redis only when the view says the
// provider may not be fine. Signals (PAUSE_ALL, CIRCUIT_STATE_CHANGE) and this
// replica's own 429s and failures only make the view more cautious; only a
// Redis read (the periodic refresh or a slow-path check) makes it trust the
// provider again, and a read that started before a cautious update is
// discarded. A view older than three refresh intervals is not trusted.

// subscriber is implemented by signal.NATS.
type subscriber interface {
	Subscribe(fn func(*llmv1.Signal), types ...llmv1.SignalType) (*nats.Subscription, error)
}

type pview struct {
	// clear: the last Redis read found the limiter not exceeded and the
	// breaker closed, and nothing cautious happened since.
	clear   bool
	readAt  time.Time
	gen     uint64
	lastUse time.Time
	// pending batched bookkeeping of successful calls.
	successes, requests, tokens int64
}

type view struct {
	mu        sync.Mutex
	providers map[string]*pview
	maxAge    time.Duration
}

func newView(refresh time.Duration) *view {
	return &view{providers: map[string]*pview{}, maxAge: 3 * refresh}
}

func (v *view) getLocked(name string) *pview {
	p := v.providers[name]
	if p == nil {
		p = &pview{}
		v.providers[name] = p
	}
	return p
}

// fast says whether a call to name may skip the Redis checks.
func (v *view) fast(name string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.getLocked(name)
	p.lastUse = now
	return p.clear && now.Sub(p.readAt) <= v.maxAge
}

// caution stops the fast path for name until the next Redis read.
func (v *view) caution(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.getLocked(name)
	p.clear = false
	p.gen++
}

// generation is read before a Redis read, passed to observed after.
func (v *view) generation(name string) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.getLocked(name).gen
}

// observed applies a Redis read started at generation gen.
func (v *view) observed(name string, gen uint64, at time.Time, clear bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.getLocked(name)
	if p.gen != gen {
		return // something cautious happened meanwhile
	}
	p.clear, p.readAt = clear, at
}

// succeeded counts a call admitted while the breaker was closed.
func (v *view) succeeded(name string, tokens int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.getLocked(name)
	p.successes++
	p.requests++
	p.tokens += int64(tokens)
}

type batch struct {
	name                        string
	gen                         uint64
	successes, requests, tokens int64
}

// take removes the pending counters of the providers used lately (all
// providers with pending counters when only is empty; else just only).
func (v *view) take(now time.Time, only string) []batch {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []batch
	for name, p := range v.providers {
		if only != "" && name != only {
			continue
		}
		if p.requests == 0 && now.Sub(p.lastUse) > time.Minute {
			continue // idle: its state is read on its next call
		}
		out = append(out, batch{name: name, gen: p.gen, successes: p.successes, requests: p.requests, tokens: p.tokens})
		p.successes, p.requests, p.tokens = 0, 0, 0
	}
	return out
}

// giveBack returns counters whose write failed.
func (v *view) giveBack(b batch) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.getLocked(b.name)
	p.successes += b.successes
	p.requests += b.requests
	p.tokens += b.tokens
}

// ackSubscriber and broadcaster are implemented by signal.NATS.
type ackSubscriber interface {
	SubscribeAcked(id string, fn func(*llmv1.Signal) llmv1.SignalAckState, types ...llmv1.SignalType) (*nats.Subscription, error)
}

type broadcaster interface {
	Broadcast(ctx context.Context, s *llmv1.Signal, expect []string, timeout time.Duration) (signal.AckResult, error)
}

// subscribe makes PauseAll and breaker changes from any replica stop the
// fast path at once, and acknowledges PauseAll and ResumeAll (B-20).
func (g *Gate) subscribe() error {
	handle := func(s *llmv1.Signal) llmv1.SignalAckState {
		switch s.GetType() {
		case llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL, llmv1.SignalType_SIGNAL_TYPE_CIRCUIT_STATE_CHANGE:
			if s.GetProvider() != "" {
				g.view.caution(s.GetProvider())
			}
			if s.GetType() == llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL {
				return llmv1.SignalAckState_SIGNAL_ACK_STATE_PAUSED
			}
			return llmv1.SignalAckState_SIGNAL_ACK_STATE_CHECKING
		case llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL:
			// The next Redis read confirms it before the fast path resumes.
			return llmv1.SignalAckState_SIGNAL_ACK_STATE_RESUMED
		}
		return llmv1.SignalAckState_SIGNAL_ACK_STATE_IGNORED
	}
	types := []llmv1.SignalType{llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL, llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL,
		llmv1.SignalType_SIGNAL_TYPE_CIRCUIT_STATE_CHANGE}
	var sub *nats.Subscription
	var err error
	switch s := g.rawSig.(type) {
	case ackSubscriber:
		sub, err = s.SubscribeAcked(g.replicaID, handle, types...)
	case subscriber:
		sub, err = s.Subscribe(func(s *llmv1.Signal) { handle(s) }, types...)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	g.unsub = func() { _ = sub.Unsubscribe() }
	return nil
}

// acking sends PauseAll and ResumeAll to every live replica and collects
// their acks off the caller's path; other signals are published as they are.
type acking struct {
	g *Gate
	b broadcaster
}

func (a acking) Publish(ctx context.Context, s *llmv1.Signal) error {
	if t := s.GetType(); t != llmv1.SignalType_SIGNAL_TYPE_PAUSE_ALL && t != llmv1.SignalType_SIGNAL_TYPE_RESUME_ALL {
		return a.g.rawSig.Publish(ctx, s)
	}
	if s.GetId() == "" {
		s = proto.CloneOf(s)
		s.Id = uuid.NewString()
	}
	g := a.g
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*g.cfg.SignalAckTimeout)
		defer cancel()
		expect, err := g.Replicas(bctx)
		if err != nil {
			g.log.Warn("list llm gate replicas", logx.Err(err))
		}
		res, err := a.b.Broadcast(bctx, s, expect, g.cfg.SignalAckTimeout)
		if err != nil {
			g.log.Warn("llm signal not acknowledged by every replica", slog.String("signal", s.GetType().String()),
				slog.String("provider", s.GetProvider()), slog.Any("missing", res.Missing), logx.Err(err))
		}
		if g.onAcks != nil {
			g.onAcks(s, res, err)
		}
	}()
	return nil
}

// replicaKey is the sorted set of live gates (score: last sync, ms).
func (g *Gate) replicaKey() string { return g.rdb.Key("llm", "replicas") }

// replicaTTL is how long a gate counts as live after its last sync.
func (g *Gate) replicaTTL() time.Duration { return max(3*time.Second, 10*g.cfg.StateRefresh) }

// Replicas lists the ids of the live gates sharing this Redis (each
// registers itself at every sync), this one included.
func (g *Gate) Replicas(ctx context.Context) ([]string, error) {
	since := strconv.FormatInt(time.Now().Add(-g.replicaTTL()).UnixMilli(), 10)
	return g.rdb.ZRangeByScore(ctx, g.replicaKey(), &redis.ZRangeBy{Min: since, Max: "+inf"}).Result()
}

// ReplicaID is this gate's id among the replicas.
func (g *Gate) ReplicaID() string { return g.replicaID }

func (g *Gate) register(ctx context.Context) {
	pipe := g.rdb.Pipeline()
	now := time.Now()
	pipe.ZAdd(ctx, g.replicaKey(), redis.Z{Score: float64(now.UnixMilli()), Member: g.replicaID})
	pipe.ZRemRangeByScore(ctx, g.replicaKey(), "-inf", strconv.FormatInt(now.Add(-g.replicaTTL()).UnixMilli(), 10))
	pipe.PExpire(ctx, g.replicaKey(), time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		g.log.Warn("register llm gate replica", logx.Err(err))
	}
}

// sync writes the batched counters of every recently used provider (or of
// only) and reads their shared state back, in one round trip; then it
// carries settled budget usage to Redis and returns idle leases.
func (g *Gate) sync(ctx context.Context, only string, final bool) {
	now := time.Now()
	batches := g.view.take(now, only)
	if len(batches) > 0 {
		pipe := g.rdb.Pipeline()
		type read struct {
			b     batch
			write func() error
			cb    func() (breaker.State, error)
			lim   func() (bool, error)
			st    func() (breaker.State, error)
		}
		reads := make([]read, 0, len(batches))
		for _, b := range batches {
			b.gen = g.view.generation(b.name)
			r := read{b: b}
			if b.requests > 0 {
				r.write = g.limiter.BatchCmd(ctx, pipe, b.name, b.successes, b.requests, b.tokens)
				r.cb = g.breakers.SuccessesCmd(ctx, pipe, b.name, b.successes)
			}
			ls := g.limiter.StateCmd(ctx, pipe, b.name)
			r.lim = func() (bool, error) { _, paused, err := ls(); return paused, err }
			r.st = g.breakers.StateCmd(ctx, pipe, b.name)
			reads = append(reads, r)
		}
		_, _ = pipe.Exec(ctx) // each command's error is read below
		for _, r := range reads {
			var werr error
			if r.write != nil {
				_, cerr := r.cb()
				werr = errors.Join(r.write(), cerr)
				if isNoScript(werr) {
					g.view.giveBack(r.b)
				}
			}
			paused, lerr := r.lim()
			st, serr := r.st()
			if err := errors.Join(werr, lerr, serr); err != nil {
				if isNoScript(err) {
					if lerr := g.load(ctx); lerr != nil {
						g.log.Warn("reload Redis scripts", logx.Err(lerr))
					}
				}
				g.log.Warn("sync shared llm state", slog.String("provider", r.b.name), logx.Err(err))
				continue
			}
			g.view.observed(r.b.name, r.b.gen, now, !paused && st == breaker.Closed)
		}
	}
	if only == "" {
		if final {
			if err := g.rdb.ZRem(ctx, g.replicaKey(), g.replicaID).Err(); err != nil {
				g.log.Warn("unregister llm gate replica", logx.Err(err))
			}
		} else {
			g.register(ctx)
		}
		if err := g.leases.Flush(ctx, final); err != nil {
			g.log.Warn("flush budget leases", logx.Err(err))
		}
	}
}

// syncLoop runs sync every StateRefresh until stop closes.
func (g *Gate) syncLoop(stop <-chan struct{}) {
	defer g.syncWG.Done()
	t := time.NewTicker(g.cfg.StateRefresh)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			g.sync(ctx, "", false)
			cancel()
		}
	}
}

// FastPath reports whether calls to provider currently skip the Redis
// checks (the local view trusts it); for tests and diagnostics.
func (g *Gate) FastPath(provider string) bool {
	g.view.mu.Lock()
	defer g.view.mu.Unlock()
	p := g.view.providers[provider]
	return p != nil && p.clear && time.Since(p.readAt) <= g.view.maxAge
}
