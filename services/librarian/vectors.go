package librarian

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/embed"
	"sylk.dev/sylk/pkg/logx"
	rank "sylk.dev/sylk/pkg/search"
	"sylk.dev/sylk/pkg/topology"
)

// vectorStore is this replica's in-memory HNSW per repository, loaded
// from the chunks' stored embeddings and kept current by change events.
type vectorStore struct {
	st    store
	model string
	dims  int
	hnsw  rank.IndexConfig
	// filters are the repositories' term filters, kept in step with the
	// vectors.
	filters *termFilters

	mu    sync.Mutex
	repos map[string]*repoVectors
}

// repoVectors is one repository's graph and the content hash of each
// chunk it holds.
type repoVectors struct {
	// sync serialises updates of this repository.
	sync   sync.Mutex
	idx    atomic.Pointer[rank.Index]
	hashes map[string][]byte
}

func newVectorStore(st store, emb embed.Embedder, cfg Config) *vectorStore {
	return &vectorStore{st: st, model: emb.Name(), dims: emb.Dims(), repos: map[string]*repoVectors{}, filters: newTermFilters(),
		hnsw: rank.IndexConfig{Dims: emb.Dims(), M: cfg.HNSWM, EfConstruction: cfg.HNSWEfConstruction, EfSearch: cfg.HNSWEfSearch}}
}

func repoKey(tenant, repoID string) string { return tenant + "/" + repoID }

func (v *vectorStore) get(tenant, repoID string, create bool) *repoVectors {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := repoKey(tenant, repoID)
	rv := v.repos[k]
	if rv == nil && create {
		idx, _ := rank.NewIndex(v.hnsw)
		rv = &repoVectors{hashes: map[string][]byte{}}
		rv.idx.Store(idx)
		v.repos[k] = rv
	}
	return rv
}

// loadBatch is how many embeddings are read per query while syncing.
const loadBatch = 2000

// sync brings one repository's graph in line with its stored chunks:
// removed chunks leave, new or changed ones are (re)inserted.
func (v *vectorStore) sync(ctx context.Context, tenant, repoID string) error {
	rv := v.get(tenant, repoID, true)
	rv.sync.Lock()
	defer rv.sync.Unlock()
	current, err := v.chunkHashes(ctx, tenant, repoID)
	if err != nil {
		return err
	}
	var removed, wanted []string
	for id := range rv.hashes {
		if _, ok := current[id]; !ok {
			removed = append(removed, id)
		}
	}
	for id, h := range current {
		if old, ok := rv.hashes[id]; !ok || !bytes.Equal(old, h) {
			wanted = append(wanted, id)
		}
	}
	if len(wanted) > 0 && len(wanted) >= len(current)/4 {
		return v.rebuild(ctx, tenant, repoID, rv, len(current))
	}
	return v.update(ctx, tenant, repoID, rv, removed, wanted)
}

// chunkHashes are the content hashes of the repository's chunks embedded
// by this store's model, by chunk id.
func (v *vectorStore) chunkHashes(ctx context.Context, tenant, repoID string) (map[string][]byte, error) {
	rows, err := v.st.db.Query(ctx, `SELECT id, content_hash FROM chunks
		WHERE tenant_id = $1 AND repository_id = $2 AND model = $3`, tenant, uuidParam(repoID), v.model)
	if err != nil {
		return nil, fmt.Errorf("list chunk hashes: %w", err)
	}
	current := map[string][]byte{}
	for rows.Next() {
		var id string
		var h []byte
		if err := rows.Scan(&id, &h); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list chunk hashes: %w", err)
		}
		current[id] = h
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list chunk hashes: %w", err)
	}
	return current, nil
}

// rebuild builds a new graph of the repository (of about size vectors)
// from one pass over its rows while searches keep using the old one, then
// swaps; its term filter is rebuilt from the same rows meanwhile.
func (v *vectorStore) rebuild(ctx context.Context, tenant, repoID string, rv *repoVectors, size int) error {
	v.filters.markStale(tenant, repoID)
	filterDone := make(chan error, 1)
	go func() { filterDone <- v.rebuildFilter(ctx, tenant, repoID) }()
	fresh, err := rank.NewIndex(v.hnsw)
	if err != nil {
		<-filterDone
		return err
	}
	hashes := make(map[string][]byte, size)
	allKeys, allVecs := make([]string, 0, size), make([][]float32, 0, size)
	err = v.scan(ctx, `SELECT id, content_hash, embedding FROM chunks
		WHERE tenant_id = $1 AND repository_id = $2 AND model = $3`,
		[]any{tenant, uuidParam(repoID), v.model}, nil, func(keys []string, vecs [][]float32, hs [][]byte) error {
			allKeys, allVecs = append(allKeys, keys...), append(allVecs, vecs...)
			for i, id := range keys {
				hashes[id] = hs[i]
			}
			return nil
		})
	if err == nil {
		// One batch: every worker stays busy until the graph is built.
		err = fresh.Add(allKeys, allVecs)
	}
	if err != nil {
		<-filterDone
		return err
	}
	rv.idx.Store(fresh)
	rv.hashes = hashes
	return <-filterDone
}

// update removes the removed chunks from the repository's graph and adds
// the wanted ones, in batches, and their terms to its filter.
func (v *vectorStore) update(ctx context.Context, tenant, repoID string, rv *repoVectors, removed, wanted []string) error {
	idx := rv.idx.Load()
	if len(removed) > 0 {
		idx.Delete(removed...)
		for _, id := range removed {
			delete(rv.hashes, id)
		}
	}
	add := func(keys []string, vecs [][]float32, hashes [][]byte) error {
		if err := idx.Add(keys, vecs); err != nil {
			return err
		}
		for i, id := range keys {
			rv.hashes[id] = hashes[i]
		}
		return nil
	}
	for start := 0; start < len(wanted); start += loadBatch {
		batch := wanted[start:min(start+loadBatch, len(wanted))]
		err := v.scan(ctx, `SELECT id, content_hash, embedding FROM chunks
			WHERE tenant_id = $1 AND repository_id = $2 AND id = ANY($3) AND model = $4`,
			[]any{tenant, uuidParam(repoID), batch, v.model}, nil, add)
		if err != nil {
			return err
		}
	}
	return v.updateFilter(ctx, tenant, repoID, wanted)
}

// scan reads (id, hash, embedding) rows, keeps those in want (all when
// want is nil) and hands them to add in batches.
func (v *vectorStore) scan(ctx context.Context, sql string, args []any, want map[string]bool,
	add func([]string, [][]float32, [][]byte) error) error {
	rows, err := v.st.db.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("load embeddings: %w", err)
	}
	defer rows.Close()
	var keys []string
	var vecs [][]float32
	var hashes [][]byte
	for rows.Next() {
		var id string
		var h, e []byte
		if err := rows.Scan(&id, &h, &e); err != nil {
			return fmt.Errorf("load embeddings: %w", err)
		}
		if want != nil && !want[id] {
			continue
		}
		vec, err := embed.Decode(e)
		if err != nil || len(vec) != v.dims {
			continue
		}
		keys, vecs, hashes = append(keys, id), append(vecs, vec), append(hashes, h)
		if len(keys) == loadBatch {
			if err := add(keys, vecs, hashes); err != nil {
				return err
			}
			keys, vecs, hashes = nil, nil, nil
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load embeddings: %w", err)
	}
	if len(keys) > 0 {
		return add(keys, vecs, hashes)
	}
	return nil
}

// count is how many vectors a repository holds here.
func (v *vectorStore) count(tenant, repoID string) int {
	rv := v.get(tenant, repoID, false)
	if rv == nil {
		return 0
	}
	return rv.idx.Load().Len()
}

// drop forgets a repository.
func (v *vectorStore) drop(tenant, repoID string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.repos, repoKey(tenant, repoID))
	v.filters.drop(tenant, repoID)
}

// loadAll syncs every indexed repository of every tenant.
func (v *vectorStore) loadAll(ctx context.Context) error {
	rows, err := v.st.db.Query(ctx, `SELECT tenant_id, id::text FROM repositories WHERE index_time IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("list repositories: %w", err)
	}
	type pair struct{ tenant, id string }
	var all []pair
	for rows.Next() {
		var p pair
		if err := rows.Scan(&p.tenant, &p.id); err != nil {
			rows.Close()
			return fmt.Errorf("list repositories: %w", err)
		}
		all = append(all, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, p := range all {
		if err := v.sync(ctx, p.tenant, p.id); err != nil {
			return err
		}
	}
	return nil
}

// vectorHit is one semantic neighbour.
type vectorHit struct {
	repoID, id string
	score      float32
}

// search returns up to k neighbours of q in each of the repositories.
func (v *vectorStore) search(tenant string, repoIDs []string, q []float32, k int) []vectorHit {
	var out []vectorHit
	for _, r := range repoIDs {
		rv := v.get(tenant, r, false)
		if rv == nil {
			continue
		}
		for _, res := range rv.idx.Load().Search(q, k) {
			out = append(out, vectorHit{repoID: r, id: res.Key, score: res.Score})
		}
	}
	return out
}

// backgroundSyncChunks is how many rewritten chunks make the vector
// update of an index run in the background: the index answers as soon as
// its rows are committed (lexical search sees them at once) and semantic
// search follows when the graph is built.
const backgroundSyncChunks = 5000

// announceChange tells every replica that a repository's index changed
// and updates this replica's vectors: at once for small changes, in the
// background for large ones (WaitVectors waits for those).
func (s *Service) announceChange(ctx context.Context, tenant, repoID string, changedChunks int64) {
	if s.bus != nil {
		s.publishNotice(ctx, topology.IndexChangesSubject(s.bus), &librarianv1.IndexNotice{TenantId: tenant, Repository: repositoryPrefix + repoID})
	}
	s.invalidateCache(ctx, tenant, repoID)
	syncNow := func(ctx context.Context) {
		start := time.Now()
		if err := s.vectors.sync(ctx, tenant, repoID); err != nil {
			s.log.WarnContext(ctx, "sync vectors after index", logx.Err(err))
			return
		}
		s.log.InfoContext(ctx, "vectors synced", slog.String("repository", repoID),
			slog.Int("vectors", s.vectors.count(tenant, repoID)), slog.Duration("duration", time.Since(start)))
	}
	if changedChunks < backgroundSyncChunks {
		syncNow(ctx)
		return
	}
	// Until the background update is done, the repository's term filter
	// may lack new terms: it answers "maybe" meanwhile.
	s.vectors.filters.markStale(tenant, repoID)
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		syncNow(context.WithoutCancel(ctx))
	}()
}

// WaitVectors blocks until this replica's background vector updates are
// done (tests and benchmarks use it to wait for semantic search).
func (s *Service) WaitVectors() { s.background.Wait() }

// followChanges keeps the vectors current from the index notices of
// every replica until ctx is done.
func (s *Service) followChanges(ctx context.Context) (*nats.Subscription, error) {
	return s.bus.Conn.Subscribe(topology.IndexChangesSubject(s.bus), func(m *nats.Msg) {
		var n librarianv1.IndexNotice
		if err := proto.Unmarshal(m.Data, &n); err != nil {
			return
		}
		repoID, ok := strings.CutPrefix(n.GetRepository(), repositoryPrefix)
		if !ok || repoID == "" || n.GetTenantId() == "" {
			return
		}
		if n.GetDeleted() {
			s.vectors.drop(n.GetTenantId(), repoID)
			return
		}
		if err := s.vectors.sync(ctx, n.GetTenantId(), repoID); err != nil {
			s.log.WarnContext(ctx, "sync vectors from an index notice", logx.Err(err))
		}
	})
}
