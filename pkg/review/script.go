package review

import "sylk.dev/sylk/pkg/scriptmodel"

// Script is a scripted model's side of review conversations (pkg/scriptmodel),
// for tests and the agent harness: those whose first message contains match
// (Marker matches every review; Marker + ": <title>" one) are answered with
// a report_findings call reporting findings, each as the tool's schema has
// it ({"severity": "high", "file": "calc.go", "line": 7, "message": "...",
// "suggestion": "...", "category": "correctness"}).
func Script(match string, findings ...map[string]any) scriptmodel.Script {
	list := make([]any, len(findings))
	for i, f := range findings {
		list[i] = f
	}
	return scriptmodel.Script{Match: match, Turns: []scriptmodel.Turn{
		scriptmodel.Tool(ToolName, map[string]any{"findings": list})}}
}

// PassingScript answers every review with no findings; put it after the
// scripts of reviews that find something.
func PassingScript() scriptmodel.Script { return Script(Marker) }
