package architect

import (
	"context"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/dag"
)

// Draft is a plan proposed by a planner.
type Draft struct {
	Title string
	DAG   *orchestratorv1.Dag
	// Planner names who drafted it: "local" or a model name.
	Planner string
}

// Planner drafts a plan from a request. The local template planner is the
// offline default; a model-backed planner can take its place.
type Planner interface {
	Draft(ctx context.Context, request string) (Draft, error)
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
	id, role, verb, prompt string
}

var (
	fixWords      = regexp.MustCompile(`(?i)\b(fix|fixes|fixing|bug|bugs|crash|crashes|broken|regression|fails|failing)\b`)
	refactorWords = regexp.MustCompile(`(?i)\b(refactor|refactoring|rename|restructure|simplify|clean\s+up|extract|split)\b`)
)

// Draft implements Planner.
func (localPlanner) Draft(_ context.Context, request string) (Draft, error) {
	title := titleOf(request)
	var steps []step
	switch {
	case fixWords.MatchString(request):
		steps = []step{
			{"reproduce", dag.RoleTester, "Reproduce",
				"Write a test that reproduces the problem described below; it must fail before the fix.\n\nProblem: " + request},
			{"fix", dag.RoleEngineer, "Fix",
				"Fix the problem described below so that the reproducing test passes, changing as little as possible.\n\nProblem: " + request},
			{"verify", dag.RoleTester, "Verify",
				"Run the reproducing test and the tests of every package the fix touched; all must pass.\n\nProblem: " + request},
		}
	case refactorWords.MatchString(request):
		steps = []step{
			{"survey", dag.RoleEngineer, "Survey",
				"Map the code this refactoring touches: definitions, call sites and the tests that cover them.\n\nRequest: " + request},
			{"refactor", dag.RoleEngineer, "Refactor",
				"Carry out the refactoring below without changing behaviour.\n\nRequest: " + request},
			{"verify", dag.RoleTester, "Verify",
				"Run the full test suite; behaviour must be unchanged and every test must pass.\n\nRequest: " + request},
		}
	default:
		steps = []step{
			{"survey", dag.RoleEngineer, "Survey",
				"Survey the code relevant to the request below: the files, symbols and tests it touches, and the conventions to follow.\n\nRequest: " + request},
			{"implement", dag.RoleEngineer, "Implement",
				"Implement the request below, with tests for the new behaviour.\n\nRequest: " + request},
			{"verify", dag.RoleTester, "Verify",
				"Run the tests covering the change and the packages it touched; all must pass.\n\nRequest: " + request},
		}
	}
	d := &orchestratorv1.Dag{}
	prev := ""
	for _, s := range steps {
		n := &orchestratorv1.Node{Id: s.id, Name: s.verb + ": " + title, Role: s.role, Prompt: s.prompt}
		if prev != "" {
			n.DependsOn = []string{prev}
		}
		d.Nodes = append(d.Nodes, n)
		prev = s.id
	}
	return Draft{Title: title, DAG: d, Planner: plannerLocal}, nil
}

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
