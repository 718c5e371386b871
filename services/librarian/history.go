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
	file, symbol := req.GetPath(), req.GetSymbol()
	start, end := int(req.GetLineStart()), int(req.GetLineEnd())
	switch {
	case file == "" && symbol == "":
		return nil, apierr.Invalid("path", "set path or symbol")
	case file != "" && symbol != "":
		return nil, apierr.Invalid("path", "set path or symbol, not both")
	case symbol != "" && (len(symbol) > maxSymbolLen || !plainText(symbol)):
		return nil, apierr.Invalid("symbol", "must be valid UTF-8 without NUL of at most %d bytes", maxSymbolLen)
	case symbol != "" && (start != 0 || end != 0):
		return nil, apierr.Invalid("line_start", "a symbol brings its own lines")
	case file != "" && !validRelPath(file):
		return nil, apierr.Invalid("path", "must be a clean relative path inside the repository")
	case start < 0 || end < 0 || (start == 0) != (end == 0) || end < start:
		return nil, apierr.Invalid("line_start", "set both line_start and line_end (1-based, line_end >= line_start), or neither")
	}
	r, err := s.store.getRepo(ctx, id.TenantID, repoID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get history", err)
	}
	if symbol != "" {
		err := s.store.db.QueryRow(ctx, `SELECT path, line_start, line_end FROM symbols
			WHERE tenant_id = $1 AND repository_id = $2 AND (id = $3 OR name = $3)
			ORDER BY (id = $3) DESC, path, line_start LIMIT 1`, id.TenantID, uuidParam(repoID), symbol).Scan(&file, &start, &end)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, apierr.NotFound("symbol", strconv.Quote(truncateRunes(symbol, 100)))
		}
		if err != nil {
			return nil, apierr.Status(ctx, s.log, "get history", err)
		}
	} else {
		var one int
		err := s.store.db.QueryRow(ctx, `SELECT 1 FROM files WHERE tenant_id = $1 AND repository_id = $2 AND path = $3`,
			id.TenantID, uuidParam(repoID), file).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, apierr.NotFound("file", strconv.Quote(truncateRunes(file, 200))).Withf("file %q is not in the index", truncateRunes(file, 200))
		}
		if err != nil {
			return nil, apierr.Status(ctx, s.log, "get history", err)
		}
	}
	root, problem := s.checkRoot(id.TenantID, r.Path)
	if problem != "" {
		return nil, unreadable("repository path: %s", problem)
	}
	gctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	if gitHead(gctx, root) == "" {
		return nil, errNotAWorkTree
	}
	args := []string{"log", "--no-color", "--max-count=" + strconv.Itoa(size+1), "--format=%x1e%H%x1f%an%x1f%at%x1f%s"}
	if start > 0 {
		args = append(args, "-s", "-L", strconv.Itoa(start)+","+strconv.Itoa(end)+":"+file)
	} else {
		args = append(args, "--follow", "--", file)
	}
	out, err := gitOutput(gctx, root, args...)
	if err != nil {
		if gctx.Err() != nil {
			return nil, apierr.New(codes.DeadlineExceeded, apierr.ReasonDeadlineExceeded, "reading the history took too long")
		}
		// A range beyond the committed file, or a file never committed.
		return nil, apierr.FailedPrecondition(reasonNoHistory, "no history for %s lines %d-%d in the last commit", file, start, end)
	}
	commits := parseHistory(string(out))
	resp := &librarianv1.GetHistoryResponse{Path: file, LineStart: int32(start), LineEnd: int32(end)}
	if len(commits) > size {
		commits, resp.Truncated = commits[:size], true
	}
	resp.Commits = commits
	return resp, nil
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
