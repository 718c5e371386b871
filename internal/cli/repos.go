package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// runSearch searches the tenant's indexed code.
func runSearch(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk search", `"QUERY" [flags]`, "Searches the indexed code of the tenant's repositories.")
	var repos stringList
	fs.Var(&repos, "repo", "only this repository ID (repeatable)")
	limit := fs.Int("n", 10, "at most this many results")
	glob := fs.String("path", "", `only paths matching this glob ("**" spans directories)`)
	lang := fs.String("lang", "", `only files of this language ("go", "python", ...)`)
	mode := fs.String("mode", "", "hybrid (default), lexical, semantic or regex")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	query := strings.TrimSpace(strings.Join(pos, " "))
	if query == "" {
		fs.Usage()
		return usageErrorf("sylk search needs a query")
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	req := &librarianv1.SearchCodeRequest{Query: query, PageSize: int32(*limit), PathGlob: *glob, Language: *lang}
	if *mode != "" {
		m, ok := librarianv1.SearchMode_value["SEARCH_MODE_"+strings.ToUpper(*mode)]
		if !ok {
			return usageErrorf("sylk search: --mode %q: want hybrid, lexical, semantic or regex", *mode)
		}
		req.Mode = librarianv1.SearchMode(m)
	}
	for _, r := range repos {
		req.Repositories = append(req.Repositories, repoName(r))
	}
	var resp librarianv1.SearchCodeResponse
	raw, err := c.call(ctx, http.MethodPost, "/v1/code:search", req, &resp)
	if err != nil {
		return err
	}
	if e.opts.json {
		e.printJSON(raw)
		return nil
	}
	if len(resp.GetHits()) == 0 {
		fmt.Fprintln(e.out, firstNonEmpty(resp.GetHint(), "No matches."))
		return nil
	}
	for i, h := range resp.GetHits() {
		fmt.Fprintf(e.out, "%d. %s%s", i+1, h.GetPath(), lines(h.GetLineStart(), h.GetLineEnd()))
		if h.GetSymbol() != "" {
			fmt.Fprintf(e.out, "  %s %s", h.GetSymbolKind(), h.GetSymbol())
		}
		fmt.Fprintf(e.out, "  (%s)\n", h.GetRepository())
		writeIndented(e.out, h.GetSnippet(), 6)
	}
	return nil
}

func repoCommands() []command {
	return []command{
		{name: "add", summary: "register a repository (a local path or a git URL) and index it", run: runReposAdd},
		{name: "list", summary: "list the tenant's repositories", run: runReposList},
		{name: "show", summary: "show a repository, or an index operation's progress", run: runReposShow},
		{name: "index", summary: "index a repository again (what changed, or --full)", run: runReposIndex},
		{name: "operations", summary: "list index operations", run: runReposOperations},
		{name: "cancel", summary: "cancel an index operation", run: runReposCancel},
	}
}

// runReposAdd registers a repository and starts its index; with --wait it
// follows the index to the end with a progress bar.
func runReposAdd(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk repos add", "PATH|URL [flags]",
		"Registers a repository and indexes it. The index runs on the server; --wait follows it\n"+
			"with a progress bar and exits 7 when it fails. Without --wait the operation is printed.")
	name := fs.String("name", "", "display name (default: the directory's name)")
	wait := fs.Bool("wait", false, "wait until the index is done, showing its progress")
	fs.DurationVar(&e.opts.timeout, "timeout", 0, "with --wait, how long to wait (0 waits for ever)")
	pos, err := parseN(fs, args, 1, "a path or a git URL")
	if err != nil {
		return err
	}
	repo := &librarianv1.Repository{DisplayName: *name}
	if isURL(pos[0]) {
		repo.Url = pos[0]
	} else if repo.Path, err = filepath.Abs(pos[0]); err != nil {
		return err
	}
	if repo.DisplayName == "" {
		repo.DisplayName = filepath.Base(strings.TrimSuffix(strings.TrimRight(pos[0], "/"), ".git"))
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, e.opts.timeout)
	defer cancel()
	var resp librarianv1.CreateRepositoryResponse
	raw, err := c.call(ctx, http.MethodPost, "/v1/repositories", repo, &resp)
	if err != nil {
		return err
	}
	op := resp.GetOperation()
	if !*wait || op == "" {
		return e.printAdded(raw, &resp)
	}
	if !e.opts.json {
		fmt.Fprintf(e.out, "Registered %s; indexing (%s)\n", resp.GetRepository().GetName(), op)
	}
	return e.followOperation(ctx, c, op)
}

func (e *env) printAdded(raw []byte, resp *librarianv1.CreateRepositoryResponse) error {
	if e.opts.json {
		e.printJSON(raw)
		return nil
	}
	r := resp.GetRepository()
	fmt.Fprintf(e.out, "Registered %s (%s), %s\n", r.GetName(), r.GetDisplayName(), indexState(r))
	if op := resp.GetOperation(); op != "" {
		fmt.Fprintf(e.out, "Indexing: sylk repos show %s\n", op)
	}
	return nil
}

func (e *env) operationDone(raw []byte, o *librarianv1.Operation) error {
	if e.opts.json {
		e.printJSON(raw)
	}
	if o.GetError() != nil {
		return &Error{Code: ExitFailed, Err: fmt.Errorf("indexing failed: %s", o.GetError().GetMessage())}
	}
	if !e.opts.json {
		r := o.GetRepository()
		fmt.Fprintf(e.out, "Indexed %s: %d files, %d chunks.\n", r.GetName(), r.GetFileCount(), r.GetChunkCount())
	}
	return nil
}

func runReposList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk repos list", "[flags]", "Lists the tenant's repositories.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	var resp librarianv1.ListRepositoriesResponse
	raw, err := c.call(ctx, http.MethodGet, "/v1/repositories?pageSize=100", nil, &resp)
	if err != nil {
		return err
	}
	if e.opts.json {
		e.printJSON(raw)
		return nil
	}
	if len(resp.GetRepositories()) == 0 {
		fmt.Fprintln(e.out, "No repositories: add one with sylk repos add PATH --wait")
	}
	for _, r := range resp.GetRepositories() {
		fmt.Fprintf(e.out, "%s  %-20s %-10s %s\n", r.GetId(), r.GetDisplayName(), indexState(r), firstNonEmpty(r.GetPath(), r.GetUrl()))
	}
	return nil
}

// runReposShow shows a repository or an operation, by name or ID.
func runReposShow(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk repos show", "ID|repositories/ID|operations/ID [flags]", "Shows a repository, or an index operation's progress.")
	pos, err := parseN(fs, args, 1, "a repository or an operation")
	if err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	if strings.HasPrefix(pos[0], "operations/") {
		var resp librarianv1.GetOperationResponse
		raw, err := c.call(ctx, http.MethodGet, "/v1/"+pos[0], nil, &resp)
		if err != nil || e.opts.json {
			e.printIf(raw, err)
			return err
		}
		fmt.Fprintln(e.out, operationLine(resp.GetOperation()))
		return nil
	}
	var resp librarianv1.GetRepositoryResponse
	raw, err := c.call(ctx, http.MethodGet, "/v1/"+repoName(pos[0]), nil, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	r := resp.GetRepository()
	fmt.Fprintf(e.out, "%s  %s\n  state:  %s\n  source: %s\n  files:  %d, chunks: %d\n", r.GetName(), r.GetDisplayName(),
		indexState(r), firstNonEmpty(r.GetPath(), r.GetUrl()), r.GetFileCount(), r.GetChunkCount())
	if r.GetIndexError() != "" {
		fmt.Fprintf(e.out, "  error:  %s\n", r.GetIndexError())
	}
	return nil
}

// printIf prints raw under --json when the call succeeded.
func (e *env) printIf(raw []byte, err error) {
	if err == nil && e.opts.json {
		e.printJSON(raw)
	}
}

func indexState(r *librarianv1.Repository) string {
	return strings.ToLower(strings.TrimPrefix(r.GetIndexState().String(), "INDEX_STATE_"))
}

func repoName(s string) string {
	if strings.HasPrefix(s, "repositories/") {
		return s
	}
	return "repositories/" + s
}

func isURL(s string) bool {
	return strings.Contains(s, "://") || strings.HasPrefix(s, "git@")
}

func writeIndented(w io.Writer, text string, n int) {
	pad := strings.Repeat(" ", n)
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", pad, l)
	}
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
