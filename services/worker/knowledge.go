package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/logx"
)

// The knowledge agents a task's agent may ask (spec E: consult the
// Librarian and the Archivalist before implementing): the Librarian's code
// search, symbols and references, scoped to the run's repository when the
// Librarian indexes it, and consultations of the Archivalist, the Academic
// and the Librarian under the permission matrix (spec A-42).

// knowledgeTimeout bounds one call to a knowledge agent.
const knowledgeTimeout = 20 * time.Second

// knowledge holds the clients of the knowledge agents (nil when the worker
// has no connection to one).
type knowledge struct {
	librarian   librarianv1.LibrarianServiceClient
	archivalist archivalistv1.ArchivalistServiceClient
	academic    academicv1.AcademicServiceClient
}

func newKnowledge(lib, arch, acad grpc.ClientConnInterface) knowledge {
	var k knowledge
	if lib != nil {
		k.librarian = librarianv1.NewLibrarianServiceClient(lib)
	}
	if arch != nil {
		k.archivalist = archivalistv1.NewArchivalistServiceClient(arch)
	}
	if acad != nil {
		k.academic = academicv1.NewAcademicServiceClient(acad)
	}
	return k
}

// asUser is ctx calling as the task's user (read access only) and as the
// consulting agent role.
func asUser(ctx context.Context, d *taskv1.TaskDispatch, role string) context.Context {
	ctx = identity.NewContext(ctx, identity.Identity{TenantID: d.GetTenantId(), UserID: d.GetUserId(), Role: identity.RoleViewer})
	return consult.WithCaller(ctx, role)
}

// knowledgeTools are the tools of the knowledge agents the task's agent may
// use.
func (s *Service) knowledgeTools(ctx context.Context, d *taskv1.TaskDispatch, role string) []agent.Tool {
	var out []agent.Tool
	if repo := s.indexedRepository(ctx, d, role); repo != "" {
		out = append(out, s.searchCodeTool(d, role, repo), s.getSymbolTool(d, role, repo), s.referencesTool(d, role, repo))
	}
	if t := s.consultTool(d, role); t != nil {
		out = append(out, *t)
	}
	return out
}

// indexedRepository is the Librarian's name of the run's repository
// ("repositories/<id>"), or "" when it does not index it (or cannot be
// asked).
func (s *Service) indexedRepository(ctx context.Context, d *taskv1.TaskDispatch, role string) string {
	if s.know.librarian == nil || d.GetRepository() == "" {
		return ""
	}
	cctx, cancel := context.WithTimeout(asUser(ctx, d, role), knowledgeTimeout)
	defer cancel()
	resp, err := s.know.librarian.ListRepositories(cctx, &librarianv1.ListRepositoriesRequest{PageSize: 1000})
	if err != nil {
		s.log.WarnContext(ctx, "find the run's repository in the librarian", logx.Err(err))
		return ""
	}
	want := filepath.Clean(d.GetRepository())
	for _, r := range resp.GetRepositories() {
		if filepath.Clean(r.GetPath()) == want && r.GetIndexState() == librarianv1.IndexState_INDEX_STATE_READY {
			return r.GetName()
		}
	}
	return ""
}

func knowledgeSchema(required []string, props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

func strProp(desc string) map[string]any {
	return map[string]any{"type": "string", "description": desc}
}

func (s *Service) searchCodeTool(d *taskv1.TaskDispatch, role, repo string) agent.Tool {
	return agent.Tool{Def: llm.Tool{Name: "search_code",
		Description: "Search the repository's code index by meaning and by name (it holds the code as it was at the run's start, not your changes). Returns places with snippets.",
		Schema: knowledgeSchema([]string{"query"}, map[string]any{
			"query":     strProp("What to find, in words or identifiers."),
			"path_glob": strProp("Only paths matching this glob."),
			"language":  strProp("Only files of this language (go, python, javascript, ...)."),
		})},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Query    string `json:"query"`
				PathGlob string `json:"path_glob"`
				Language string `json:"language"`
			}
			if err := json.Unmarshal(raw, &a); err != nil {
				return "", err
			}
			cctx, cancel := context.WithTimeout(asUser(ctx, d, role), knowledgeTimeout)
			defer cancel()
			resp, err := s.know.librarian.SearchCode(cctx, &librarianv1.SearchCodeRequest{Query: a.Query, Repositories: []string{repo},
				PageSize: 10, PathGlob: a.PathGlob, Language: a.Language})
			if err != nil {
				return "", fmt.Errorf("the librarian could not search: %v", err)
			}
			return renderCodeHits(resp), nil
		}}
}

func renderCodeHits(resp *librarianv1.SearchCodeResponse) string {
	if len(resp.GetHits()) == 0 {
		out := "no matches"
		if h := resp.GetHint(); h != "" {
			out += " (" + h + ")"
		}
		return out
	}
	var b strings.Builder
	for _, h := range resp.GetHits() {
		fmt.Fprintf(&b, "%s:%d-%d", h.GetPath(), h.GetLineStart(), h.GetLineEnd())
		if h.GetSymbol() != "" {
			fmt.Fprintf(&b, " %s %s", h.GetSymbolKind(), h.GetSymbol())
		}
		b.WriteString("\n")
		for i, line := range strings.Split(strings.TrimRight(h.GetSnippet(), "\n"), "\n") {
			if i == 8 {
				b.WriteString("    ...\n")
				break
			}
			b.WriteString("    " + line + "\n")
		}
	}
	return b.String()
}

func (s *Service) getSymbolTool(d *taskv1.TaskDispatch, role, repo string) agent.Tool {
	return agent.Tool{Def: llm.Tool{Name: "get_symbol",
		Description: "Show a symbol's definition (signature, doc and source) from the repository's code index: a function, method, type, const or var, by its name or qualified name.",
		Schema:      knowledgeSchema([]string{"name"}, map[string]any{"name": strProp("The symbol: Name, Type.Method, or <package path>.Name.")})},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(raw, &a); err != nil {
				return "", err
			}
			cctx, cancel := context.WithTimeout(asUser(ctx, d, role), knowledgeTimeout)
			defer cancel()
			id, err := s.symbolID(cctx, repo, a.Name)
			if err != nil {
				return "", err
			}
			resp, err := s.know.librarian.GetSymbol(cctx, &librarianv1.GetSymbolRequest{Repository: repo, Symbol: id, IncludeSource: true})
			if err != nil {
				return "", fmt.Errorf("no symbol %s in the index: %v", a.Name, err)
			}
			sym := resp.GetSymbol()
			return fmt.Sprintf("%s %s (%s:%d-%d)\n%s\n%s", sym.GetKind(), sym.GetId(), sym.GetPath(), sym.GetLineStart(), sym.GetLineEnd(),
				sym.GetDoc(), sym.GetSource()), nil
		}}
}

// symbolID finds the qualified id of the symbol a model names: as given
// when the index has it, else the best search hit that defines it.
func (s *Service) symbolID(ctx context.Context, repo, name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", errors.New("name is empty")
	}
	if _, err := s.know.librarian.GetSymbol(ctx, &librarianv1.GetSymbolRequest{Repository: repo, Symbol: name}); err == nil {
		return name, nil
	}
	resp, err := s.know.librarian.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: name, Repositories: []string{repo}, PageSize: 20})
	if err != nil {
		return "", fmt.Errorf("the librarian could not search: %v", err)
	}
	for _, h := range resp.GetHits() {
		if sym := h.GetSymbol(); sym == name || strings.HasSuffix(sym, "."+name) {
			return sym, nil
		}
	}
	return "", fmt.Errorf("no symbol %s in the index: try search_code or grep", name)
}

func (s *Service) referencesTool(d *taskv1.TaskDispatch, role, repo string) agent.Tool {
	return agent.Tool{Def: llm.Tool{Name: "references",
		Description: "List what refers to a symbol in the repository's code index: its callers, implementations and other uses, with their places.",
		Schema:      knowledgeSchema([]string{"symbol"}, map[string]any{"symbol": strProp("The symbol: Name, Type.Method, or <package path>.Name.")})},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Symbol string `json:"symbol"`
			}
			if err := json.Unmarshal(raw, &a); err != nil {
				return "", err
			}
			cctx, cancel := context.WithTimeout(asUser(ctx, d, role), knowledgeTimeout)
			defer cancel()
			id, err := s.symbolID(cctx, repo, a.Symbol)
			if err != nil {
				return "", err
			}
			resp, err := s.know.librarian.GetDependents(cctx, &librarianv1.GetDependentsRequest{Repository: repo, Symbol: id})
			if err != nil {
				return "", fmt.Errorf("the librarian could not list references: %v", err)
			}
			if len(resp.GetEdges()) == 0 {
				return "no references to " + id + " in the index (grep may find uses it does not resolve)", nil
			}
			var b strings.Builder
			for i, e := range resp.GetEdges() {
				if i == 100 {
					fmt.Fprintf(&b, "[%d more]\n", len(resp.GetEdges())-i)
					break
				}
				fmt.Fprintf(&b, "%s:%d %s %s %s\n", e.GetPath(), e.GetLine(), e.GetSource(), e.GetKind(), e.GetTarget())
			}
			return b.String(), nil
		}}
}

// consultTool asks a knowledge agent a question directly, as far as the
// permission matrix lets the role (spec A-42).
func (s *Service) consultTool(d *taskv1.TaskDispatch, role string) *agent.Tool {
	var agents []string
	for _, a := range []struct {
		name string
		ok   bool
	}{{consult.Archivalist, s.know.archivalist != nil}, {consult.Academic, s.know.academic != nil}, {consult.Librarian, s.know.librarian != nil}} {
		if a.ok && consult.Allowed(role, a.name) {
			agents = append(agents, a.name)
		}
	}
	if len(agents) == 0 {
		return nil
	}
	return &agent.Tool{Def: llm.Tool{Name: "consult",
		Description: "Ask another agent: the archivalist (the team's history: past decisions, failures, notes), the academic (ingested documents and practices) or the librarian (all of the team's indexed code).",
		Schema: knowledgeSchema([]string{"agent", "question"}, map[string]any{
			"agent":    map[string]any{"type": "string", "enum": agents, "description": "Whom to ask."},
			"question": strProp("What you want to know, in words."),
		})},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a struct {
				Agent, Question string
			}
			if err := json.Unmarshal(raw, &a); err != nil {
				return "", err
			}
			cctx, cancel := context.WithTimeout(asUser(ctx, d, role), knowledgeTimeout)
			defer cancel()
			return s.consult(cctx, strings.ToLower(a.Agent), a.Question)
		}}
}

func (s *Service) consult(ctx context.Context, to, question string) (string, error) {
	switch to {
	case consult.Archivalist:
		resp, err := s.know.archivalist.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: question, CrossSession: true, PageSize: 5})
		if err != nil {
			return "", fmt.Errorf("the archivalist could not answer: %v", err)
		}
		if len(resp.GetHits()) == 0 {
			return "the archivalist holds nothing about this", nil
		}
		var b strings.Builder
		for _, h := range resp.GetHits() {
			fmt.Fprintf(&b, "- [%s] %s: %s\n", h.GetEntry().GetCategory(), h.GetEntry().GetTitle(), oneLine(h.GetSnippet()))
		}
		return b.String(), nil
	case consult.Academic:
		resp, err := s.know.academic.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: question, PageSize: 5})
		if err != nil {
			return "", fmt.Errorf("the academic could not answer: %v", err)
		}
		if len(resp.GetHits()) == 0 {
			return "no ingested document says anything about this", nil
		}
		var b strings.Builder
		for _, h := range resp.GetHits() {
			fmt.Fprintf(&b, "- %s > %s: %s\n", h.GetDocumentTitle(), h.GetHeading(), oneLine(h.GetSnippet()))
		}
		return b.String(), nil
	case consult.Librarian:
		resp, err := s.know.librarian.SearchCode(ctx, &librarianv1.SearchCodeRequest{Query: question, PageSize: 8})
		if err != nil {
			return "", fmt.Errorf("the librarian could not answer: %v", err)
		}
		return renderCodeHits(resp), nil
	}
	return "", fmt.Errorf("cannot consult %q: ask the archivalist, the academic or the librarian", to)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
