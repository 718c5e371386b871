package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// runReposIndex indexes a registered repository again: a delta from its
// last indexed commit, or everything with --full.
func runReposIndex(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk repos index", "REPO [flags]",
		"Indexes a registered repository again: only what changed since its last indexed commit,\n"+
			"or every file with --full. --wait follows it with a progress bar (exit 7 when it fails).")
	full := fs.Bool("full", false, "re-read every file")
	wait := fs.Bool("wait", false, "wait until the index is done, showing its progress")
	fs.DurationVar(&e.opts.timeout, "timeout", 0, "with --wait, how long to wait (0 waits for ever)")
	pos, err := parseN(fs, args, 1, "a repository")
	if err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, e.opts.timeout)
	defer cancel()
	var resp librarianv1.IndexRepositoryResponse
	name := repoName(pos[0])
	raw, err := c.call(ctx, http.MethodPost, "/v1/"+name+":index", &librarianv1.IndexRepositoryRequest{Full: *full}, &resp)
	if err != nil {
		return err
	}
	if op := resp.GetOperation(); *wait && op != "" {
		if !e.opts.json {
			fmt.Fprintf(e.out, "Indexing %s (%s)\n", name, op)
		}
		return e.followOperation(ctx, c, op)
	}
	if e.opts.json {
		e.printJSON(raw)
		return nil
	}
	fmt.Fprintf(e.out, "Indexing %s: sylk repos show %s\n", name, resp.GetOperation())
	return nil
}

// runReposCancel cancels an index operation.
func runReposCancel(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk repos cancel", "operations/ID [flags]", "Cancels a running index operation.")
	pos, err := parseN(fs, args, 1, "an operation")
	if err != nil {
		return err
	}
	name := pos[0]
	if !strings.HasPrefix(name, "operations/") {
		name = "operations/" + name
	}
	var resp librarianv1.CancelOperationResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/"+name+":cancel", &librarianv1.CancelOperationRequest{}, &resp); done {
		return err
	}
	fmt.Fprintln(e.out, operationLine(resp.GetOperation()))
	return nil
}

// runReposOperations lists index operations, newest first.
func runReposOperations(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk repos operations", "[REPO] [flags]", "Lists the tenant's index operations (of one repository when named), newest first.")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return usageErrorf("sylk repos operations takes at most one repository")
	}
	q := url.Values{"pageSize": {"50"}}
	if len(pos) == 1 {
		q.Set("repository", repoName(pos[0]))
	}
	var resp librarianv1.ListOperationsResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/operations?"+q.Encode(), nil, &resp); done {
		return err
	}
	if len(resp.GetOperations()) == 0 {
		fmt.Fprintln(e.out, "No operations.")
	}
	for _, o := range resp.GetOperations() {
		fmt.Fprintln(e.out, operationLine(o))
	}
	return nil
}
