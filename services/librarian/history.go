package librarian

import (
	"context"
	"errors"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
)

// History limits.
const (
	defaultHistoryPage = 10
	maxHistoryPage     = 100
	historyTimeout     = 15 * time.Second
	maxSubjectRunes    = 300
)

// GetHistory lists the commits that changed an indexed file, a line range
// of it or a symbol's lines (history for code), newest first. Only files
// in the tenant's index can be asked about, so nothing the index leaves
// out (hidden directories, ignored files) is reachable.
func (s *Service) GetHistory(ctx context.Context, req *librarianv1.GetHistoryRequest) (*librarianv1.GetHistoryResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	repoID, err := parseName(req.GetRepository(), "repository")
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultHistoryPage, maxHistoryPage)
	if err != nil {
		return nil, err
	}
	lines, err := historyLinesOf(req)
	if err != nil {
		return nil, err
	}
	r, err := s.store.getRepo(ctx, id.TenantID, repoID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get history", err)
	}
	if lines, err = s.locate(ctx, id.TenantID, repoID, lines); err != nil {
		return nil, apierr.Status(ctx, s.log, "get history", err)
	}
	root, problem := s.checkRoot(id.TenantID, r.Path)
	if problem != "" {
		return nil, unreadable("repository path: %s", problem)
	}
	commits, err := gitHistory(ctx, root, lines, size+1)
	if err != nil {
		return nil, err
	}
	resp := &librarianv1.GetHistoryResponse{Path: lines.file, LineStart: int32(lines.start), LineEnd: int32(lines.end)}
	if len(commits) > size {
		commits, resp.Truncated = commits[:size], true
	}
	resp.Commits = commits
	return resp, nil
}

// historyLines is what a history is asked of: a file (and a line range
// of it), or a symbol, whose file and lines the index knows.
type historyLines struct {
	file, symbol string
	start, end   int
}

// historyLinesOf checks what a history request asks about.
func historyLinesOf(req *librarianv1.GetHistoryRequest) (historyLines, error) {
	h := historyLines{file: req.GetPath(), symbol: req.GetSymbol(), start: int(req.GetLineStart()), end: int(req.GetLineEnd())}
	switch {
	case h.file == "" && h.symbol == "":
		return h, apierr.Invalid("path", "set path or symbol")
	case h.file != "" && h.symbol != "":
		return h, apierr.Invalid("path", "set path or symbol, not both")
	case h.symbol != "" && (len(h.symbol) > maxSymbolLen || !plainText(h.symbol)):
		return h, apierr.Invalid("symbol", "must be valid UTF-8 without NUL of at most %d bytes", maxSymbolLen)
	case h.symbol != "" && (h.start != 0 || h.end != 0):
		return h, apierr.Invalid("line_start", "a symbol brings its own lines")
	case h.file != "" && !validRelPath(h.file):
		return h, apierr.Invalid("path", "must be a clean relative path inside the repository")
	case h.start < 0 || h.end < 0 || (h.start == 0) != (h.end == 0) || h.end < h.start:
		return h, apierr.Invalid("line_start", "set both line_start and line_end (1-based, line_end >= line_start), or neither")
	}
	return h, nil
}

// locate finds a symbol's file and lines in the index, or checks that the
// file asked about is indexed.
func (s *Service) locate(ctx context.Context, tenant, repoID string, h historyLines) (historyLines, error) {
	if h.symbol != "" {
		err := s.store.db.QueryRow(ctx, `SELECT path, line_start, line_end FROM symbols
			WHERE tenant_id = $1 AND repository_id = $2 AND (id = $3 OR name = $3)
			ORDER BY (id = $3) DESC, path, line_start LIMIT 1`, tenant, uuidParam(repoID), h.symbol).Scan(&h.file, &h.start, &h.end)
		if errors.Is(err, pgx.ErrNoRows) {
			return h, apierr.NotFound("symbol", strconv.Quote(truncateRunes(h.symbol, 100)))
		}
		return h, err
	}
	var one int
	err := s.store.db.QueryRow(ctx, `SELECT 1 FROM files WHERE tenant_id = $1 AND repository_id = $2 AND path = $3`,
		tenant, uuidParam(repoID), h.file).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, apierr.NotFound("file", strconv.Quote(truncateRunes(h.file, 200))).Withf("file %q is not in the index", truncateRunes(h.file, 200))
	}
	return h, err
}

// gitHistory reads up to limit commits that changed h's file (or lines)
// from the git work tree at root, within historyTimeout.
func gitHistory(ctx context.Context, root string, h historyLines, limit int) ([]*librarianv1.HistoryCommit, error) {
	gctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	if gitHead(gctx, root) == "" {
		return nil, errNotAWorkTree
	}
	args := []string{"log", "--no-color", "--max-count=" + strconv.Itoa(limit), "--format=%x1e%H%x1f%an%x1f%at%x1f%s"}
	if h.start > 0 {
		args = append(args, "-s", "-L", strconv.Itoa(h.start)+","+strconv.Itoa(h.end)+":"+h.file)
	} else {
		args = append(args, "--follow", "--", h.file)
	}
	out, err := gitOutput(gctx, root, args...)
	if err != nil {
		if gctx.Err() != nil {
			return nil, apierr.New(codes.DeadlineExceeded, apierr.ReasonDeadlineExceeded, "reading the history took too long")
		}
		// A range beyond the committed file, or a file never committed.
		return nil, apierr.FailedPrecondition(reasonNoHistory, "no history for %s lines %d-%d in the last commit", h.file, h.start, h.end)
	}
	return parseHistory(string(out)), nil
}

// validRelPath reports whether p is a clean, slash-separated path inside
// the repository.
func validRelPath(p string) bool {
	return len(p) <= maxPathLen && utf8.ValidString(p) && !strings.ContainsAny(p, "\x00\\") &&
		!strings.HasPrefix(p, "/") && !strings.HasPrefix(p, ":") && path.Clean(p) == p && p != "." &&
		p != ".." && !strings.HasPrefix(p, "../")
}

// parseHistory reads the records of the git log format GetHistory asks
// for: record separator, then hash, author, author time and subject
// separated by unit separators.
func parseHistory(out string) []*librarianv1.HistoryCommit {
	var commits []*librarianv1.HistoryCommit
	for _, rec := range strings.Split(out, "\x1e") {
		line, _, _ := strings.Cut(strings.TrimLeft(rec, "\n"), "\n")
		f := strings.SplitN(line, "\x1f", 4)
		if len(f) != 4 {
			continue
		}
		secs, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		commits = append(commits, &librarianv1.HistoryCommit{
			Sha: f[0], Author: f[1], AuthorTime: timestamppb.New(time.Unix(secs, 0)), Subject: truncateRunes(f[3], maxSubjectRunes),
		})
	}
	return commits
}
