package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Filter selects records of one tenant's chain, newest first.
type Filter struct {
	Action string
	Actor  string
	// Since and Until bound the records' times (Since inclusive, Until
	// exclusive); zero leaves that side open.
	Since, Until time.Time
	// BeforeSeq lists records before this sequence number (a page token);
	// 0 starts at the newest.
	BeforeSeq int64
	// Limit is the page size (1 to MaxPage).
	Limit int
}

// MaxPage is the largest page List returns.
const MaxPage = 500

const selectEntry = `SELECT tenant_id, seq, id, created_at, actor, action, target, details, prev_hash, hash FROM `

func scanEntry(r pgx.CollectableRow) (Entry, error) {
	var e Entry
	err := r.Scan(&e.TenantID, &e.Seq, &e.ID, &e.Time, &e.Actor, &e.Action, &e.Target, &e.Details, &e.PrevHash, &e.Hash)
	e.Time = e.Time.UTC()
	return e, err
}

// List returns up to f.Limit records of tenant's chain matching f, newest
// first, and whether more follow (the next page starts before the last
// record's sequence).
func (l *Log) List(ctx context.Context, tenant string, f Filter) ([]Entry, bool, error) {
	if f.Limit < 1 || f.Limit > MaxPage {
		return nil, false, fmt.Errorf("%w: page size must be 1 to %d", ErrInvalid, MaxPage)
	}
	where := []string{"tenant_id = $1"}
	args := []any{tenant}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if f.Action != "" {
		add("action = ?", f.Action)
	}
	if f.Actor != "" {
		add("actor = ?", f.Actor)
	}
	if !f.Since.IsZero() {
		add("created_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		add("created_at < ?", f.Until)
	}
	if f.BeforeSeq > 0 {
		add("seq < ?", f.BeforeSeq)
	}
	args = append(args, f.Limit+1)
	rows, err := l.db.Query(ctx, selectEntry+l.records+` WHERE `+strings.Join(where, " AND ")+
		` ORDER BY seq DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, false, fmt.Errorf("audit: list records: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, false, fmt.Errorf("audit: list records: %w", err)
	}
	if len(out) > f.Limit {
		return out[:f.Limit], true, nil
	}
	return out, false, nil
}

// Problem is what is wrong at the first broken record of a chain.
type Problem string

// Problems Verify reports.
const (
	// ProblemAltered: the record's fields do not give its hash (edited,
	// or moved to another place in the chain).
	ProblemAltered Problem = "altered"
	// ProblemMissing: records before this one are missing (deleted).
	ProblemMissing Problem = "missing"
	// ProblemUnlinked: the record's previous hash is not the hash of the
	// record before it (a record before it was replaced, or records were
	// reordered).
	ProblemUnlinked Problem = "unlinked"
	// ProblemTruncated: the chain's head names a later record than the
	// last one stored (the last records were deleted), or the head was
	// changed.
	ProblemTruncated Problem = "truncated"
)

// Break is the first broken place of a chain.
type Break struct {
	// Seq is the sequence number expected or found there.
	Seq int64
	// ID is the record's id, when a record is there.
	ID      string
	Problem Problem
}

// Report is the outcome of Verify.
type Report struct {
	// Checked counts the records checked.
	Checked int64
	// HeadSeq and HeadHash are the chain's head as stored: keep them
	// outside the database to detect later a chain rewritten whole.
	HeadSeq  int64
	HeadHash []byte
	// Broken is the first broken place; nil when the chain is whole.
	Broken *Break
}

// verifyBatch is how many records Verify reads at a time.
const verifyBatch = 1000

// Verify walks tenant's chain from its first record and reports the first
// broken place: a record whose hash does not match its fields, a gap in
// the sequence, a record not linked to the one before, or a head beyond
// the last record.
func (l *Log) Verify(ctx context.Context, tenant string) (Report, error) {
	var rep Report
	err := l.db.QueryRow(ctx, `SELECT seq, hash FROM `+l.heads+` WHERE tenant_id = $1`, tenant).Scan(&rep.HeadSeq, &rep.HeadHash)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Report{}, fmt.Errorf("audit: read chain head: %w", err)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		rep.HeadHash = genesis
	}
	last := Entry{PrevHash: genesis, Hash: genesis}
	for {
		rows, err := l.db.Query(ctx, selectEntry+l.records+` WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
			tenant, last.Seq, verifyBatch)
		if err != nil {
			return Report{}, fmt.Errorf("audit: read records: %w", err)
		}
		batch, err := pgx.CollectRows(rows, scanEntry)
		if err != nil {
			return Report{}, fmt.Errorf("audit: read records: %w", err)
		}
		for _, e := range batch {
			if b := check(last, e); b != nil {
				rep.Broken = b
				return rep, nil
			}
			rep.Checked++
			last = e
		}
		if len(batch) < verifyBatch {
			break
		}
	}
	if last.Seq != rep.HeadSeq || !bytes.Equal(last.Hash, rep.HeadHash) {
		rep.Broken = &Break{Seq: last.Seq + 1, Problem: ProblemTruncated}
	}
	return rep, nil
}

// check returns what is wrong with e following prev, or nil.
func check(prev, e Entry) *Break {
	switch {
	case e.Seq != prev.Seq+1:
		return &Break{Seq: prev.Seq + 1, Problem: ProblemMissing}
	case !bytes.Equal(e.hash(), e.Hash):
		return &Break{Seq: e.Seq, ID: e.ID, Problem: ProblemAltered}
	case !bytes.Equal(e.PrevHash, prev.Hash):
		return &Break{Seq: e.Seq, ID: e.ID, Problem: ProblemUnlinked}
	}
	return nil
}
