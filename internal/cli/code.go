package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

func codeCommands() []command {
	return []command{
		{name: "symbol", summary: "show a symbol's definition", run: runCodeSymbol},
		{name: "similar", summary: "symbols nearest to one by meaning", run: runCodeSimilar},
		{name: "history", summary: "commits that changed a symbol's (or a file's) lines", run: runCodeHistory},
		{name: "tools", summary: "a repository's detected formatter, linter, language server and tests", run: runCodeTools},
	}
}

// repoPath is "/v1/repositories/{id}/<what>?<q>".
func repoPath(repo, what string, q url.Values) string {
	return "/v1/" + repoName(repo) + "/" + what + "?" + q.Encode()
}

func runCodeSymbol(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk code symbol", "REPO SYMBOL [flags]",
		"Shows a symbol's definition: kind, file and lines, signature and doc comment. SYMBOL is\n"+
			"its qualified (<package path>.<Name>) or plain name.")
	source := fs.Bool("source", false, "print its source too")
	pos, err := parseN(fs, args, 2, "a repository and a symbol")
	if err != nil {
		return err
	}
	q := url.Values{"symbol": {pos[1]}, "includeSource": {strconv.FormatBool(*source)}}
	var resp librarianv1.GetSymbolResponse
	if done, err := e.request(ctx, http.MethodGet, repoPath(pos[0], "symbol", q), nil, &resp); done {
		return err
	}
	sym := resp.GetSymbol()
	fmt.Fprintf(e.out, "%s %s  %s%s\n  id: %s\n", sym.GetKind(), sym.GetName(), sym.GetPath(), lines(sym.GetLineStart(), sym.GetLineEnd()), sym.GetId())
	if sym.GetSignature() != "" {
		fmt.Fprintf(e.out, "  %s\n", sym.GetSignature())
	}
	if sym.GetDoc() != "" {
		writeIndented(e.out, sym.GetDoc(), 2)
	}
	if sym.GetSource() != "" {
		writeIndented(e.out, sym.GetSource(), 4)
	}
	return nil
}

func runCodeSimilar(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk code similar", "REPO SYMBOL-ID [flags]", "Lists the symbols nearest by meaning to one (its id, from sylk code symbol).")
	limit := fs.Int("n", 10, "at most this many")
	sameKind := fs.Bool("same-kind", false, "only symbols of the same kind")
	pos, err := parseN(fs, args, 2, "a repository and a symbol id")
	if err != nil {
		return err
	}
	q := url.Values{"symbol": {pos[1]}, "pageSize": {strconv.Itoa(*limit)}, "sameKindOnly": {strconv.FormatBool(*sameKind)}}
	var resp librarianv1.FindSimilarSymbolsResponse
	if done, err := e.request(ctx, http.MethodGet, repoPath(pos[0], "similarSymbols", q), nil, &resp); done {
		return err
	}
	if len(resp.GetSymbols()) == 0 {
		fmt.Fprintln(e.out, "No similar symbols.")
	}
	for i, s := range resp.GetSymbols() {
		fmt.Fprintf(e.out, "%d. %s %s  %s%s  (score %.3f)\n", i+1, s.GetSymbolKind(), s.GetSymbol(), s.GetPath(), lines(s.GetLineStart(), s.GetLineEnd()), s.GetScore())
	}
	return nil
}

func runCodeHistory(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk code history", "REPO (--symbol ID | --path FILE [--lines A-B]) [flags]", "Lists the commits that changed a symbol's lines, or a file's (lines).")
	symbol := fs.String("symbol", "", "the symbol's id (from sylk code symbol)")
	path := fs.String("path", "", "a file instead")
	span := fs.String("lines", "", "with --path, only these lines: A-B")
	limit := fs.Int("n", 20, "at most this many commits")
	pos, err := parseN(fs, args, 1, "a repository")
	if err != nil {
		return err
	}
	if (*symbol == "") == (*path == "") {
		fs.Usage()
		return usageErrorf("sylk code history needs --symbol or --path")
	}
	q := url.Values{"pageSize": {strconv.Itoa(*limit)}}
	for k, v := range map[string]string{"symbol": *symbol, "path": *path} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *span != "" {
		a, b, ok := strings.Cut(*span, "-")
		if !ok {
			return usageErrorf("--lines %q: want A-B", *span)
		}
		q.Set("lineStart", a)
		q.Set("lineEnd", b)
	}
	var resp librarianv1.GetHistoryResponse
	if done, err := e.request(ctx, http.MethodGet, repoPath(pos[0], "history", q), nil, &resp); done {
		return err
	}
	fmt.Fprintf(e.out, "%s%s\n", resp.GetPath(), lines(resp.GetLineStart(), resp.GetLineEnd()))
	for _, c := range resp.GetCommits() {
		fmt.Fprintf(e.out, "  %.12s  %s  %-16s %s\n", c.GetSha(), c.GetAuthorTime().AsTime().Local().Format(time.DateOnly), c.GetAuthor(), c.GetSubject())
	}
	if resp.GetTruncated() {
		fmt.Fprintln(e.out, "  (more: raise -n)")
	}
	return nil
}

func runCodeTools(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk code tools", "REPO [flags]", "Shows a repository's detected formatters, linters, language servers and test frameworks.")
	pos, err := parseN(fs, args, 1, "a repository")
	if err != nil {
		return err
	}
	var resp librarianv1.DiscoverToolsResponse
	if done, err := e.request(ctx, http.MethodGet, repoPath(pos[0], "tools", nil), nil, &resp); done {
		return err
	}
	for _, group := range []struct {
		label string
		tools []*librarianv1.Tool
	}{{"formatters", resp.GetFormatters()}, {"linters", resp.GetLinters()}, {"language servers", resp.GetLanguageServers()}, {"tests", resp.GetTestFrameworks()}} {
		fmt.Fprintf(e.out, "%s:\n", group.label)
		if len(group.tools) == 0 {
			fmt.Fprintln(e.out, "  none detected")
		}
		for _, t := range group.tools {
			installed := "not installed"
			if t.GetInstalled() {
				installed = "installed"
			}
			fmt.Fprintf(e.out, "  %-14s %-8s %s  (%s)\n", t.GetName(), t.GetLanguage(), strings.Join(t.GetCommand(), " "), installed)
		}
	}
	for _, w := range resp.GetWarnings() {
		fmt.Fprintf(e.out, "warning: %s\n", w)
	}
	return nil
}
