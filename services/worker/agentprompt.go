package worker

import (
	"fmt"
	"sort"
	"strings"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
)

// What each role's agent is told. The Engineer changes the code; the
// Tester writes and runs tests; the Inspector reads and reviews, and
// changes nothing.
const (
	engineerSystem = `You are the Engineer of Sylk, a software team's agent. You carry out one task in a git repository, working only through your tools: they read, search and change the repository's files, and run commands in a sandbox without network.

How to work:
1. Understand first. Find the code the task is about (list_files, grep; search_code, get_symbol and references when offered, which search by meaning and by symbol) and read it. When the task touches something with history, consult the archivalist for past decisions and failures.
2. Change the code: the smallest complete change that does what the task asks, in the repository's own style. edit_file replaces an exact string (copy it from read_file's output, without the line numbers); multi_edit applies several edits to one file, all or none; write_file creates a file.
3. Check it: run the tests (run_tests), or build or run what you changed (run_command). Fix what fails.
4. Call finish with your report once the task is done (or cannot be done: then say why and change nothing more).

Rules: paths are relative to the repository root. Never weaken, skip or delete tests to make them pass, unless the task asks for it. Do not push, merge or reset history. If you are stuck on something only a person can decide, call request_help. Keep your messages short: the tools' results are what matters.`

	testerSystem = `You are the Tester of Sylk, a software team's agent. You carry out one testing task in a git repository, working only through your tools: they read, search and change the repository's files, and run commands in a sandbox without network.

Find the code the task is about and how the repository tests it (list_files, grep, read_file). Write or extend tests in the repository's own style and framework, run them (run_tests, run_command), and make sure they pass against the current code, or show a real defect (say which in your report). Never change the code under test unless the task asks for it. Call finish with your report: what you tested and the outcome.`

	inspectorSystem = `You are the Inspector of Sylk, a software team's agent. You review one aspect of a git repository, as the task asks, working only through your tools: they read and search the repository's files and run commands in a sandbox without network. You change nothing.

Read the code the task is about (list_files, grep, read_file), run the checks that help (linters, builds, tests through run_command or run_tests), and call finish with your report: each finding with its file and line, how severe it is, and what to do about it; "none" when the code is sound.`
)

// agentSystem is the system prompt of a role's agent.
func agentSystem(role string) string {
	switch role {
	case roleTester:
		return testerSystem
	case roleInspector:
		return inspectorSystem
	}
	return engineerSystem
}

// Worker roles, as the dispatch names them.
const (
	roleTester    = "tester"
	roleInspector = "inspector"
)

// taskBrief is the agent's first message: the task as the user (or the
// plan) put it, first and verbatim, then what the Orchestrator adds to
// it. The repository's files are not in it: the agent reads what it needs.
func taskBrief(d *taskv1.TaskDispatch, spec *orchestratorv1.Node) string {
	var b strings.Builder
	b.WriteString(spec.GetPrompt() + "\n")
	if spec.GetName() != "" {
		fmt.Fprintf(&b, "\n(Task %s of the plan: %s.)\n", d.GetNodeId(), spec.GetName())
	}
	if spec.GetDoneWhen() != "" {
		b.WriteString("\n## Done when\n\n" + spec.GetDoneWhen() + "\n")
	}
	if files := spec.GetFiles(); len(files) > 0 {
		b.WriteString("\n## Files the plan expects you to touch (a hint: read them first)\n\n")
		for _, f := range files {
			b.WriteString("- " + f + "\n")
		}
	}
	if kc := spec.GetKeyConstraints(); len(kc) > 0 {
		b.WriteString("\n## Constraints to respect\n\n")
		for _, c := range kc {
			b.WriteString("- " + c + "\n")
		}
	}
	if sc := spec.GetSuccessCriteria(); len(sc) > 0 {
		b.WriteString("\n## Success criteria\n\n")
		for _, c := range sc {
			b.WriteString("- " + c.GetCriterion() + "\n")
		}
	}
	if spec.GetTaskContext() != "" {
		b.WriteString("\n## Context\n\n" + spec.GetTaskContext() + "\n")
	}
	if up := d.GetUpstreamOutputs(); len(up) > 0 {
		keys := make([]string, 0, len(up))
		for k := range up {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("\n## Output of the tasks this one depends on\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "\n### %s\n\n%s\n", k, truncateString(up[k], 4<<10))
		}
	}
	if deps := d.GetDependencyPatches(); len(deps) > 0 {
		names := make([]string, len(deps))
		for i, p := range deps {
			names[i] = p.GetNodeId()
		}
		fmt.Fprintf(&b, "\nThe repository already holds the changes of the tasks this one depends on (%s).\n", strings.Join(names, ", "))
	}
	b.WriteString(briefingSection(spec.GetRetryBriefing()))
	b.WriteString(handoffSection(spec.GetHandoff()))
	if g := spec.GetGuidance(); len(g) > 0 {
		b.WriteString("\n## The user's guidance (follow it)\n\n")
		for _, x := range g {
			b.WriteString("- " + x + "\n")
		}
	}
	return b.String()
}

// feedbackTurn is the agent's next user turn in a pipeline: the Inspector's
// and the Tester's findings, and the user's guidance it has not seen.
func feedbackTurn(feedback, guidance []string) string {
	var b strings.Builder
	if len(feedback) > 0 {
		b.WriteString("Your change was checked, and it is not done yet. Fix all of this, check again, then call finish:\n\n")
		for _, f := range feedback {
			b.WriteString("- " + f + "\n")
		}
	}
	if len(guidance) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString("The user's new guidance (follow it):\n\n")
		for _, g := range guidance {
			b.WriteString("- " + g + "\n")
		}
	}
	if b.Len() == 0 {
		b.WriteString("Go on with the task, then call finish.\n")
	}
	return b.String()
}
