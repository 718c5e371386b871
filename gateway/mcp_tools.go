package gateway

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// The reading tools: code (the Librarian), history (the Archivalist) and
// documents (the Academic). Each is one call of the service's own RPC, so
// its scoping, validation and errors are the service's.

// readOnlyTool marks a tool that changes nothing.
var readOnlyTool = &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}

func (m *mcpServer) addKnowledgeTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "search_code", Annotations: readOnlyTool,
		Description: "Search the code of the tenant's indexed repositories (hybrid lexical and semantic by default). " +
			"Returns the best matching chunks with their file, lines, symbol and snippet."}, m.searchCode)
	mcp.AddTool(s, &mcp.Tool{Name: "get_symbol", Annotations: readOnlyTool,
		Description: "Get one symbol's definition (function, method, type, const, var) by its qualified or plain name: " +
			"file, lines, signature, doc comment and optionally its source."}, m.getSymbol)
	mcp.AddTool(s, &mcp.Tool{Name: "references", Annotations: readOnlyTool,
		Description: "What uses a symbol or package (direction \"in\": callers, implementers, importers), " +
			"or what it uses (direction \"out\": calls, imports), from the repository's symbol graph."}, m.references)
	mcp.AddTool(s, &mcp.Tool{Name: "search_history", Annotations: readOnlyTool,
		Description: "Search what the tenant's sessions recorded: decisions, failures, outcomes, patterns and notes, " +
			"optionally within a repository, a category or a time scope."}, m.searchHistory)
	mcp.AddTool(s, &mcp.Tool{Name: "search_docs", Annotations: readOnlyTool,
		Description: "Search the tenant's documents (design notes, specifications, guides) by section."}, m.searchDocs)
}

// SearchCodeInput is search_code's input.
type SearchCodeInput struct {
	Query      string `json:"query" jsonschema:"what to look for: words, an identifier, or a regular expression with mode regex"`
	Repository string `json:"repository,omitempty" jsonschema:"only this repository (repositories/{id} or its id); all of the tenant's when empty"`
	Mode       string `json:"mode,omitempty" jsonschema:"hybrid (default), semantic, lexical or regex"`
	Limit      int32  `json:"limit,omitempty" jsonschema:"at most this many hits (default 10)"`
	PathGlob   string `json:"pathGlob,omitempty" jsonschema:"only paths matching this glob (* within a segment, ** across segments)"`
	Language   string `json:"language,omitempty" jsonschema:"only files of this language (go, python, ...)"`
}

// CodeHit is one code search hit.
type CodeHit struct {
	Repository string  `json:"repository"`
	Path       string  `json:"path"`
	LineStart  int32   `json:"lineStart"`
	LineEnd    int32   `json:"lineEnd"`
	Symbol     string  `json:"symbol,omitempty"`
	SymbolKind string  `json:"symbolKind,omitempty"`
	Language   string  `json:"language,omitempty"`
	Score      float64 `json:"score"`
	Snippet    string  `json:"snippet"`
}

// SearchCodeOutput is search_code's answer.
type SearchCodeOutput struct {
	Hits []CodeHit `json:"hits"`
	// Status is "ok", or "no_matches" with a hint.
	Status       string   `json:"status"`
	Hint         string   `json:"hint,omitempty"`
	Truncated    bool     `json:"truncated,omitempty"`
	AlsoExistsIn []string `json:"alsoExistsIn,omitempty"`
	Suggestions  []string `json:"suggestions,omitempty"`
}

var searchModes = map[string]librarianv1.SearchMode{
	"":         librarianv1.SearchMode_SEARCH_MODE_HYBRID,
	"hybrid":   librarianv1.SearchMode_SEARCH_MODE_HYBRID,
	"semantic": librarianv1.SearchMode_SEARCH_MODE_SEMANTIC,
	"lexical":  librarianv1.SearchMode_SEARCH_MODE_LEXICAL,
	"regex":    librarianv1.SearchMode_SEARCH_MODE_REGEX,
}

func (m *mcpServer) searchCode(ctx context.Context, req *mcp.CallToolRequest, in SearchCodeInput) (*mcp.CallToolResult, SearchCodeOutput, error) {
	var out SearchCodeOutput
	mode, ok := searchModes[strings.ToLower(strings.TrimSpace(in.Mode))]
	if !ok {
		return nil, out, fmt.Errorf("INVALID_ARGUMENT: mode %q: want hybrid, semantic, lexical or regex", in.Mode)
	}
	ctx, done, err := m.begin(ctx, req, toolCall{service: "librarian", ready: m.librarian != nil})
	defer done()
	if err != nil {
		return nil, out, err
	}
	r := &librarianv1.SearchCodeRequest{Query: in.Query, PageSize: in.Limit, Mode: mode, PathGlob: in.PathGlob, Language: in.Language}
	if in.Repository != "" {
		r.Repositories = []string{resourceName("repositories", in.Repository)}
	}
	resp, err := m.librarian.SearchCode(ctx, r)
	if err != nil {
		return nil, out, toolError(err)
	}
	out = SearchCodeOutput{Hits: []CodeHit{}, Status: resp.GetStatus(), Hint: resp.GetHint(), Truncated: resp.GetTruncated(),
		AlsoExistsIn: resp.GetAlsoExistsIn(), Suggestions: resp.GetSuggestions()}
	var b strings.Builder
	for _, h := range resp.GetHits() {
		out.Hits = append(out.Hits, CodeHit{Repository: h.GetRepository(), Path: h.GetPath(), LineStart: h.GetLineStart(),
			LineEnd: h.GetLineEnd(), Symbol: h.GetSymbol(), SymbolKind: h.GetSymbolKind(), Language: h.GetLanguage(),
			Score: h.GetScore(), Snippet: h.GetSnippet()})
		fmt.Fprintf(&b, "%s %s:%d-%d", h.GetRepository(), h.GetPath(), h.GetLineStart(), h.GetLineEnd())
		if h.GetSymbol() != "" {
			fmt.Fprintf(&b, " (%s %s)", h.GetSymbolKind(), h.GetSymbol())
		}
		fmt.Fprintf(&b, "\n%s\n\n", indent(h.GetSnippet()))
	}
	if len(out.Hits) == 0 {
		fmt.Fprintf(&b, "No matches. %s\n", out.Hint)
	}
	for _, s := range out.Suggestions {
		fmt.Fprintf(&b, "%s\n", s)
	}
	return textResult(strings.TrimSpace(b.String())), out, nil
}

// indent indents a snippet for the readable answer.
func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// GetSymbolInput is get_symbol's input.
type GetSymbolInput struct {
	Repository    string `json:"repository" jsonschema:"the repository that defines it (repositories/{id} or its id)"`
	Symbol        string `json:"symbol" jsonschema:"qualified name (<package path>.<Name> or <package path>.<Receiver>.<Method>) or plain name"`
	IncludeSource bool   `json:"includeSource,omitempty" jsonschema:"also return the definition's source"`
}

// SymbolOutput is one symbol's definition.
type SymbolOutput struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Path      string `json:"path"`
	LineStart int32  `json:"lineStart"`
	LineEnd   int32  `json:"lineEnd"`
	Package   string `json:"package,omitempty"`
	Signature string `json:"signature,omitempty"`
	Doc       string `json:"doc,omitempty"`
	Source    string `json:"source,omitempty"`
}

func (m *mcpServer) getSymbol(ctx context.Context, req *mcp.CallToolRequest, in GetSymbolInput) (*mcp.CallToolResult, SymbolOutput, error) {
	var out SymbolOutput
	ctx, done, err := m.begin(ctx, req, toolCall{service: "librarian", ready: m.librarian != nil})
	defer done()
	if err != nil {
		return nil, out, err
	}
	resp, err := m.librarian.GetSymbol(ctx, &librarianv1.GetSymbolRequest{Repository: resourceName("repositories", in.Repository),
		Symbol: in.Symbol, IncludeSource: in.IncludeSource})
	if err != nil {
		return nil, out, toolError(err)
	}
	s := resp.GetSymbol()
	out = SymbolOutput{ID: s.GetId(), Name: s.GetName(), Kind: s.GetKind(), Path: s.GetPath(), LineStart: s.GetLineStart(),
		LineEnd: s.GetLineEnd(), Package: s.GetPackage(), Signature: s.GetSignature(), Doc: s.GetDoc(), Source: s.GetSource()}
	text := fmt.Sprintf("%s %s at %s:%d-%d", out.Kind, out.ID, out.Path, out.LineStart, out.LineEnd)
	for _, part := range []string{out.Signature, out.Doc, out.Source} {
		if part != "" {
			text += "\n\n" + part
		}
	}
	return textResult(text), out, nil
}

// ReferencesInput is references' input.
type ReferencesInput struct {
	Repository string `json:"repository" jsonschema:"the repository (repositories/{id} or its id)"`
	Symbol     string `json:"symbol" jsonschema:"a symbol id (<package path>.<Name>), an import path, or file:<path> with direction out"`
	Direction  string `json:"direction,omitempty" jsonschema:"in (default): what uses it; out: what it uses"`
	EdgeKind   string `json:"edgeKind,omitempty" jsonschema:"only edges of this kind: calls, imports, implements, embeds, ..."`
}

// Edge is one relation of the symbol graph.
type Edge struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Kind   string `json:"kind"`
	Path   string `json:"path,omitempty"`
	Line   int32  `json:"line,omitempty"`
}

// ReferencesOutput is references' answer.
type ReferencesOutput struct {
	Direction string `json:"direction"`
	Edges     []Edge `json:"edges"`
}

func (m *mcpServer) references(ctx context.Context, req *mcp.CallToolRequest, in ReferencesInput) (*mcp.CallToolResult, ReferencesOutput, error) {
	out := ReferencesOutput{Direction: strings.ToLower(strings.TrimSpace(in.Direction)), Edges: []Edge{}}
	if out.Direction == "" {
		out.Direction = "in"
	}
	if out.Direction != "in" && out.Direction != "out" {
		return nil, out, fmt.Errorf("INVALID_ARGUMENT: direction %q: want in (what uses it) or out (what it uses)", in.Direction)
	}
	ctx, done, err := m.begin(ctx, req, toolCall{service: "librarian", ready: m.librarian != nil})
	defer done()
	if err != nil {
		return nil, out, err
	}
	repo := resourceName("repositories", in.Repository)
	var edges []*librarianv1.Edge
	if out.Direction == "in" {
		resp, err := m.librarian.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: repo, Symbol: in.Symbol, EdgeKind: in.EdgeKind})
		if err != nil {
			return nil, out, toolError(err)
		}
		edges = resp.GetEdges()
	} else {
		resp, err := m.librarian.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo, Symbol: in.Symbol, EdgeKind: in.EdgeKind})
		if err != nil {
			return nil, out, toolError(err)
		}
		edges = resp.GetEdges()
	}
	var b strings.Builder
	for _, e := range edges {
		out.Edges = append(out.Edges, Edge{Source: e.GetSource(), Target: e.GetTarget(), Kind: e.GetKind(), Path: e.GetPath(), Line: e.GetLine()})
		fmt.Fprintf(&b, "%s %s %s", e.GetSource(), e.GetKind(), e.GetTarget())
		if e.GetPath() != "" {
			fmt.Fprintf(&b, " (%s:%d)", e.GetPath(), e.GetLine())
		}
		b.WriteString("\n")
	}
	if len(edges) == 0 {
		fmt.Fprintf(&b, "No %s edges for %s.", map[string]string{"in": "incoming", "out": "outgoing"}[out.Direction], in.Symbol)
	}
	return textResult(strings.TrimSpace(b.String())), out, nil
}

// SearchHistoryInput is search_history's input.
type SearchHistoryInput struct {
	Query      string `json:"query" jsonschema:"what to look for"`
	Session    string `json:"session,omitempty" jsonschema:"only this session (sessions/{id} or its id); every session of the tenant when empty"`
	Repository string `json:"repository,omitempty" jsonschema:"only entries about this repository (repositories/{id} or its id)"`
	Category   string `json:"category,omitempty" jsonschema:"only this category: decision, failure, outcome, pattern, note, ..."`
	TimeScope  string `json:"timeScope,omitempty" jsonschema:"today, yesterday, this_week, last_week, last_month or recent (7 days)"`
	Limit      int32  `json:"limit,omitempty" jsonschema:"at most this many hits"`
}

// HistoryHit is one entry found in the history.
type HistoryHit struct {
	Entry      string  `json:"entry"`
	Title      string  `json:"title"`
	Category   string  `json:"category"`
	Snippet    string  `json:"snippet,omitempty"`
	Score      float64 `json:"score"`
	Session    string  `json:"session,omitempty"`
	Repository string  `json:"repository,omitempty"`
	CreateTime string  `json:"createTime,omitempty"`
}

// SearchHistoryOutput is search_history's answer.
type SearchHistoryOutput struct {
	Hits []HistoryHit `json:"hits"`
}

func (m *mcpServer) searchHistory(ctx context.Context, req *mcp.CallToolRequest, in SearchHistoryInput) (*mcp.CallToolResult, SearchHistoryOutput, error) {
	out := SearchHistoryOutput{Hits: []HistoryHit{}}
	ctx, done, err := m.begin(ctx, req, toolCall{service: "archivalist", ready: m.archivalist != nil})
	defer done()
	if err != nil {
		return nil, out, err
	}
	session := strings.TrimPrefix(strings.TrimSpace(in.Session), "sessions/")
	resp, err := m.archivalist.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: in.Query, SessionId: session,
		CrossSession: session == "", Category: in.Category, PageSize: in.Limit,
		Repository: resourceName("repositories", in.Repository), TimeScope: in.TimeScope})
	if err != nil {
		return nil, out, toolError(err)
	}
	var b strings.Builder
	for _, h := range resp.GetHits() {
		e := h.GetEntry()
		hit := HistoryHit{Entry: e.GetName(), Title: e.GetTitle(), Category: e.GetCategory(), Snippet: h.GetSnippet(),
			Score: h.GetScore(), Session: e.GetSessionId(), Repository: e.GetRepository(), CreateTime: timeText(e.GetCreateTime())}
		out.Hits = append(out.Hits, hit)
		fmt.Fprintf(&b, "[%s] %s (%s, %s)\n%s\n\n", hit.Category, hit.Title, hit.Entry, hit.CreateTime, indent(hit.Snippet))
	}
	if len(out.Hits) == 0 {
		b.WriteString("Nothing recorded matches.")
	}
	return textResult(strings.TrimSpace(b.String())), out, nil
}

// SearchDocsInput is search_docs' input.
type SearchDocsInput struct {
	Query string `json:"query" jsonschema:"what to look for"`
	Limit int32  `json:"limit,omitempty" jsonschema:"at most this many sections"`
}

// DocHit is one document section found.
type DocHit struct {
	Document  string  `json:"document"`
	Title     string  `json:"title"`
	Heading   string  `json:"heading,omitempty"`
	LineStart int32   `json:"lineStart"`
	LineEnd   int32   `json:"lineEnd"`
	Snippet   string  `json:"snippet"`
	Score     float64 `json:"score"`
}

// SearchDocsOutput is search_docs' answer.
type SearchDocsOutput struct {
	Hits []DocHit `json:"hits"`
}

func (m *mcpServer) searchDocs(ctx context.Context, req *mcp.CallToolRequest, in SearchDocsInput) (*mcp.CallToolResult, SearchDocsOutput, error) {
	out := SearchDocsOutput{Hits: []DocHit{}}
	ctx, done, err := m.begin(ctx, req, toolCall{service: "academic", ready: m.academic != nil})
	defer done()
	if err != nil {
		return nil, out, err
	}
	resp, err := m.academic.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: in.Query, PageSize: in.Limit})
	if err != nil {
		return nil, out, toolError(err)
	}
	var b strings.Builder
	for _, h := range resp.GetHits() {
		out.Hits = append(out.Hits, DocHit{Document: h.GetDocument(), Title: h.GetDocumentTitle(), Heading: h.GetHeading(),
			LineStart: h.GetLineStart(), LineEnd: h.GetLineEnd(), Snippet: h.GetSnippet(), Score: h.GetScore()})
		fmt.Fprintf(&b, "%s: %s > %s (lines %d-%d)\n%s\n\n", h.GetDocument(), h.GetDocumentTitle(), h.GetHeading(),
			h.GetLineStart(), h.GetLineEnd(), indent(h.GetSnippet()))
	}
	if len(out.Hits) == 0 {
		b.WriteString("No document section matches.")
	}
	return textResult(strings.TrimSpace(b.String())), out, nil
}
