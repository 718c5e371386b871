package architect

import (
	"context"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/dag"
)

// Draft is a plan proposed by a planner.
type Draft struct {
	Title string
	DAG   *orchestratorv1.Dag
	// Planner names who drafted it: "local" or a model name.
	Planner string
	// Notes are what the user should know of it before approving.
	Notes []string
}

// Brief is what a plan is drafted from.
type Brief struct {
	Request string
	// Repository is the plan's ("repositories/{id}"), or "".
	Repository string
	// Consultation is what was found before planning (spec E-11).
	Consultation *architectv1.PlanConsultation
}

// Revision is what a plan's next version is drafted from: its brief, its
// versions so far (oldest first; the last is the one revised) and the
// user's feedback on the last.
type Revision struct {
	Brief
	Versions []*architectv1.PlanVersion
	Feedback string
}

// current is the version being revised.
func (r Revision) current() *architectv1.PlanVersion { return r.Versions[len(r.Versions)-1] }

// Planner drafts a plan from a request, and revises it from feedback. The
// local template planner is the offline default; a model-backed planner
// can take its place.
type Planner interface {
	Draft(ctx context.Context, b Brief) (Draft, error)
	Revise(ctx context.Context, r Revision) (Draft, error)
	// Offline says that no language model drafts the plans, nor carries
	// out their implementation tasks.
	Offline() bool
}

// plannerLocal names the built-in template planner; plannerUser names plans
// whose DAG the caller supplied.
const (
	plannerLocal = "local"
	plannerUser  = "user"
)

const maxTitleChars = 80

// localPlanner drafts a three-step DAG from templates chosen by the
// request's wording: fixes start by reproducing the problem, refactors by
// mapping what they touch, everything else by surveying the code; each ends
// with verification by a tester.
type localPlanner struct{}

type step struct {
	id, role, verb, prompt, doneWhen string
}

var (
	fixWords      = regexp.MustCompile(`(?i)\b(fix|fixes|fixing|bug|bugs|crash|crashes|broken|regression|fails|failing)\b`)
	refactorWords = regexp.MustCompile(`(?i)\b(refactor|refactoring|rename|restructure|simplify|clean\s+up|extract|split)\b`)
)

// Draft implements Planner.
func (localPlanner) Draft(_ context.Context, b Brief) (Draft, error) {
	request := b.Request
	title := titleOf(request)
	var steps []step
	switch {
	case fixWords.MatchString(request):
		steps = []step{
			{"reproduce", dag.RoleTester, "Reproduce",
				"Write a test that reproduces the problem described below; it must fail before the fix.\n\nProblem: " + request,
				"A test reproduces the problem and fails."},
			{"fix", dag.RoleEngineer, "Fix",
				"Fix the problem described below so that the reproducing test passes, changing as little as possible.\n\nProblem: " + request,
				"The reproducing test passes."},
			{"verify", dag.RoleTester, "Verify",
				"Run the reproducing test and the tests of every package the fix touched; all must pass.\n\nProblem: " + request,
				"The reproducing test and the tests of every package the fix touched pass."},
		}
	case refactorWords.MatchString(request):
		steps = []step{
			{"survey", dag.RoleEngineer, "Survey",
				"Map the code this refactoring touches: definitions, call sites and the tests that cover them.\n\nRequest: " + request,
				"The definitions, call sites and tests the refactoring touches are listed."},
			{"refactor", dag.RoleEngineer, "Refactor",
				"Carry out the refactoring below without changing behaviour.\n\nRequest: " + request,
				"The code is refactored as asked, and behaves as before."},
			{"verify", dag.RoleTester, "Verify",
				"Run the full test suite; behaviour must be unchanged and every test must pass.\n\nRequest: " + request,
				"Every test passes."},
		}
	default:
		steps = []step{
			{"survey", dag.RoleEngineer, "Survey",
				"Survey the code relevant to the request below: the files, symbols and tests it touches, and the conventions to follow.\n\nRequest: " + request,
				"The files, symbols and tests the request touches are listed."},
			{"implement", dag.RoleEngineer, "Implement",
				"Implement the request below, with tests for the new behaviour.\n\nRequest: " + request,
				"The request is implemented, with tests of the new behaviour."},
			{"verify", dag.RoleTester, "Verify",
				"Run the tests covering the change and the packages it touched; all must pass.\n\nRequest: " + request,
				"The tests of the change and of the packages it touched pass."},
		}
	}
	d := &orchestratorv1.Dag{}
	prev := ""
	for _, s := range steps {
		n := &orchestratorv1.Node{Id: s.id, Name: s.verb + ": " + title, Role: s.role, Prompt: s.prompt, DoneWhen: s.doneWhen,
			Pipeline: s.role == dag.RoleEngineer}
		if prev != "" {
			n.DependsOn = []string{prev}
		}
		d.Nodes = append(d.Nodes, n)
		prev = s.id
	}
	return Draft{Title: title, DAG: d, Planner: plannerLocal}, nil
}

// Revise implements Planner: it applies the feedback when it is one of
// the revisions it knows (see reviseOffline), and otherwise keeps the
// tasks and says why.
func (localPlanner) Revise(_ context.Context, r Revision) (Draft, error) {
	return reviseOffline(r), nil
}

// Offline implements Planner.
func (localPlanner) Offline() bool { return true }

// titleOf makes a short title from a request: its first line or sentence,
// capitalised and cut to maxTitleChars.
func titleOf(request string) string {
	t := strings.TrimSpace(request)
	if i := strings.IndexAny(t, "\r\n"); i >= 0 {
		t = t[:i]
	}
	if i := strings.Index(t, ". "); i > 0 {
		t = t[:i]
	}
	t = strings.TrimRight(strings.Join(strings.Fields(t), " "), ".!?;:, ")
	if utf8.RuneCountInString(t) > maxTitleChars {
		r := []rune(t)[:maxTitleChars-1]
		t = strings.TrimRight(string(r), " ") + "…"
	}
	if t == "" {
		return "Untitled plan"
	}
	r, size := utf8.DecodeRuneInString(t)
	return string(unicode.ToUpper(r)) + t[size:]
}

// trivialDraft is a trivial request's plan (spec D-40: TRIVIAL, execute
// now): one engineer task carrying the request, on the files the Librarian
// found, reviewed and tested as any engineer task is.
func trivialDraft(b Brief) Draft {
	title := titleOf(b.Request)
	n := &orchestratorv1.Node{Id: "change", Name: "Change: " + title, Role: dag.RoleEngineer, Pipeline: true,
		Prompt:   "Make this small change, and nothing else:\n\n" + b.Request,
		DoneWhen: "The change the request asks for is made, and nothing else changed."}
	if len(b.Consultation.GetFiles()) > 0 {
		n.Files = b.Consultation.GetFiles()[:min(len(b.Consultation.GetFiles()), maxConsultFiles)]
	}
	return Draft{Title: title, DAG: &orchestratorv1.Dag{Nodes: []*orchestratorv1.Node{n}}, Planner: plannerLocal}
}

// withFindings shows what was found before planning in an offline plan:
// each engineer task without files gets the files the Librarian found, and
// its prompt the whole consultation. (A model planner was given it in its
// prompt, and drew on it itself.)
func withFindings(d *orchestratorv1.Dag, b Brief) {
	text := consultationText(b.Repository, b.Consultation)
	files := b.Consultation.GetFiles()
	for _, n := range d.GetNodes() {
		if dag.Role(n) != dag.RoleEngineer || n.GetPrompt() == "" {
			continue
		}
		if len(n.GetFiles()) == 0 && len(files) > 0 {
			n.Files = files[:min(len(files), maxConsultFiles)]
		}
		n.Prompt += "\n\n" + text
	}
}

// Notes a plan version may carry.
const (
	noteNoRepository = "no repository is set: /repo <name> sets one; the run will have no repository to change"
	noteOffline      = "drafted by offline rules, not by a language model: implementation tasks need a model " +
		"(configure a provider, see docs/llm.md); approving runs them with no change made, and the run will end NO_CHANGES"
)

// notesFor are the notes of a plan on repository with DAG d; offline says
// that no model carries out its tasks.
func notesFor(repository string, d *orchestratorv1.Dag, offline bool, extra ...string) []string {
	var out []string
	if repository == "" {
		out = append(out, noteNoRepository)
	}
	if offline && needsModel(d) {
		out = append(out, noteOffline)
	}
	return append(out, extra...)
}

// needsModel says whether a task of d is left to an agent: it has a
// prompt and neither a command nor files to write.
func needsModel(d *orchestratorv1.Dag) bool {
	for _, n := range d.GetNodes() {
		if n.GetPrompt() != "" && n.GetCommand() == "" && len(n.GetEdits()) == 0 {
			return true
		}
	}
	return false
}
