package cli

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
)

func docCommands() []command {
	return []command{
		{name: "add", summary: "ingest a markdown document for the Academic", run: runDocsAdd},
		{name: "list", summary: "list the tenant's documents", run: runDocsList},
		{name: "search", summary: "search the documents' sections", run: runDocsSearch},
	}
}

// runDocsAdd ingests a markdown file (or standard input) as a document.
func runDocsAdd(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk docs add", "FILE|- [flags]",
		"Ingests a markdown document: its sections become searchable, and the Academic\n"+
			"answers from them. \"-\" reads it from standard input.")
	title := fs.String("title", "", "the document's title (default: the file's name)")
	source := fs.String("source", "", "where it comes from (a URL or a path), for citations")
	pos, err := parseN(fs, args, 1, "a file (or - for standard input)")
	if err != nil {
		return err
	}
	content, err := e.readInput(pos[0])
	if err != nil {
		return err
	}
	doc := &academicv1.Document{Title: *title, Source: *source, Content: content}
	if doc.Title == "" && pos[0] != "-" {
		doc.Title = strings.TrimSuffix(filepath.Base(pos[0]), filepath.Ext(pos[0]))
	}
	if doc.Title == "" {
		fs.Usage()
		return usageErrorf("sylk docs add - needs --title")
	}
	var resp academicv1.CreateDocumentResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/documents", doc, &resp); done {
		return err
	}
	d := resp.GetDocument()
	fmt.Fprintf(e.out, "Added %s %q: %d sections.\n", d.GetName(), d.GetTitle(), d.GetSectionCount())
	return nil
}

func runDocsList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk docs list", "[flags]", "Lists the tenant's documents, newest first.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	var resp academicv1.ListDocumentsResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/documents?pageSize=100", nil, &resp); done {
		return err
	}
	if len(resp.GetDocuments()) == 0 {
		fmt.Fprintln(e.out, "No documents.")
	}
	for _, d := range resp.GetDocuments() {
		fmt.Fprintf(e.out, "%s  %4d sections  %s\n", d.GetName(), d.GetSectionCount(), d.GetTitle())
	}
	return nil
}

func runDocsSearch(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk docs search", `"QUERY" [flags]`, "Searches the sections of the tenant's documents.")
	limit := fs.Int("n", 10, "at most this many sections")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	query := strings.TrimSpace(strings.Join(pos, " "))
	if query == "" {
		fs.Usage()
		return usageErrorf("sylk docs search needs a query")
	}
	var resp academicv1.SearchDocumentsResponse
	req := &academicv1.SearchDocumentsRequest{Query: query, PageSize: int32(*limit)}
	if done, err := e.request(ctx, http.MethodPost, "/v1/documents:search", req, &resp); done {
		return err
	}
	if len(resp.GetHits()) == 0 {
		fmt.Fprintln(e.out, "No matches.")
	}
	for i, h := range resp.GetHits() {
		fmt.Fprintf(e.out, "%d. %s > %s%s  (%s)\n", i+1, h.GetDocumentTitle(), h.GetHeading(),
			lines(h.GetLineStart(), h.GetLineEnd()), h.GetDocument())
		writeIndented(e.out, h.GetSnippet(), 6)
	}
	return nil
}
