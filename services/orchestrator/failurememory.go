package orchestrator

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/secrets"
	"sylk.dev/sylk/pkg/textsearch"
	"sylk.dev/sylk/pkg/topology"
)

// Failure memory (spec E-09, G-25, H-10). When a run ends, each failed
// attempt of its nodes (their pipelines, when they ran as one) is recorded
// in the Archivalist under the shared "failure" category: the task's name
// and prompt, the files it touched or was meant to touch, the attempt's
// error tier and error, the end of its output, an error signature, and the
// run's repository (in the entry's typed repository too). An attempt a
// later attempt of the same node overcame is recorded too, marked
// recovered ("Recovered: attempt N succeeded"): why a task failed first is
// what the next one on its files should know. The next plan on the same
// area finds them in its consultation (the Architect, which counts how
// often the area failed), the next Engineer on those files in its prompt
// (the worker), and the next session on the repository in its briefing
// (the Guide). Secrets are scrubbed here, and again by the Archivalist. A
// record's id derives from the run, node and attempt, so a re-sent one is
// a duplicate: a run retried from its failure records its new attempts
// only, and a record keeps what it said when first sent.

// CategoryFailure is the Archivalist category of failure records.
const CategoryFailure = "failure"

// Bounds of a failure record's parts.
const (
	maxFailurePrompt    = 1500
	maxFailureError     = 1500
	maxFailureOutput    = 2000
	maxFailureFiles     = 30
	maxFailureSignature = 120
)

// failedNode is what a failure record says of a failed attempt of a node.
type failedNode struct {
	id, role, err, stderr, patch string
	attempt, exitCode            int32
	// recoveredBy is the later attempt that succeeded, or 0.
	recoveredBy int32
	timedOut    bool
	spec        []byte
}

// failedAttemptsSQL finds a run's failed attempts: the node's own row for
// its last attempt (with its output and patch), the attempt history for
// the earlier ones (with the end of their output), and the first later
// attempt of the node that succeeded.
const failedAttemptsSQL = `WITH failed AS (
		SELECT node_id, attempt, exit_code, timed_out, error, stderr, patch FROM nodes
		WHERE tenant_id = $1 AND run_id = $2 AND state = 'FAILED'
		UNION ALL
		SELECT a.node_id, a.attempt, a.exit_code, a.timed_out, a.error, a.stderr_tail, '' FROM attempts a
		WHERE a.tenant_id = $1 AND a.run_id = $2 AND a.state = 'FAILED' AND NOT EXISTS (SELECT 1 FROM nodes n
			WHERE n.tenant_id = $1 AND n.run_id = $2 AND n.node_id = a.node_id AND n.attempt = a.attempt AND n.state = 'FAILED'))
	SELECT f.node_id, n.role, f.attempt, f.exit_code, f.timed_out, f.error, f.stderr, f.patch, n.spec,
		COALESCE((SELECT min(b.attempt) FROM attempts b WHERE b.tenant_id = $1 AND b.run_id = $2 AND b.node_id = f.node_id
			AND b.attempt > f.attempt AND b.state = 'SUCCEEDED'), 0)
	FROM failed f JOIN nodes n ON n.tenant_id = $1 AND n.run_id = $2 AND n.node_id = f.node_id
	ORDER BY n.layer, n.position, f.attempt`

// failureRecords builds the Archivalist records of the failed attempts of
// a run that ended.
func failureRecords(ctx context.Context, q querier, tenant, session, user, runID string) ([]*messagev1.Envelope, error) {
	var repoName, plan string
	if err := q.QueryRow(ctx, `SELECT repository_name, plan FROM runs WHERE tenant_id = $1 AND id = $2`, tenant, runID).
		Scan(&repoName, &plan); err != nil {
		return nil, fmt.Errorf("load run: %w", err)
	}
	rows, err := q.Query(ctx, failedAttemptsSQL, tenant, runID)
	if err != nil {
		return nil, fmt.Errorf("load failed attempts: %w", err)
	}
	var out []*messagev1.Envelope
	var n failedNode
	_, err = pgx.ForEachRow(rows, []any{&n.id, &n.role, &n.attempt, &n.exitCode, &n.timedOut, &n.err, &n.stderr, &n.patch, &n.spec,
		&n.recoveredBy}, func() error {
		var spec orchestratorv1.Node
		if n.spec != nil {
			if err := proto.Unmarshal(n.spec, &spec); err != nil {
				return fmt.Errorf("decode node %s: %w", n.id, err)
			}
		}
		title, text := failureText(runID, repoName, plan, n, &spec)
		out = append(out, topology.StoreRequest(topology.Record{
			ID: fmt.Sprintf("%s:%s:%d:failure", runID, n.id, n.attempt), Tenant: tenant, Session: session, User: user,
			Correlation: runName(runID), Source: topology.AgentOrchestrator, Category: CategoryFailure,
			Title: title, Text: text, Repository: repoName,
		}))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load failed attempts: %w", err)
	}
	return out, nil
}

// failureText is a failed attempt's record: a title that names the task
// and says it failed (so "what failed" finds it), and markdown whose lines
// the readers parse ("Files:", "Run:", "Node:", "Signature:",
// "Recovered:").
func failureText(runID, repoName, plan string, n failedNode, spec *orchestratorv1.Node) (title, text string) {
	name := strings.TrimSpace(spec.GetName())
	if name == "" {
		name = "task " + n.id
	}
	files := failureFiles(spec, n.patch)
	title = fmt.Sprintf("Failed: %s (%s, node %s)", name, runName(runID), n.id)
	if n.recoveredBy > 0 {
		title = fmt.Sprintf("Failed, then recovered: %s (%s, node %s, attempt %d)", name, runName(runID), n.id, n.attempt)
	}
	if len(files) > 0 {
		title += " in " + strings.Join(files[:min(len(files), 3)], ", ")
	}
	tier := errorTier(&orchestratorv1.AttemptSummary{ExitCode: n.exitCode, TimedOut: n.timedOut, Error: n.err})
	var b strings.Builder
	if n.recoveredBy > 0 {
		fmt.Fprintf(&b, "Task %s failed at attempt %d (exit %d, error tier %s); attempt %d succeeded.\n\n", name, n.attempt, n.exitCode, tier, n.recoveredBy)
	} else {
		fmt.Fprintf(&b, "Task %s failed after attempt %d (exit %d, error tier %s).\n\n", name, n.attempt, n.exitCode, tier)
	}
	fmt.Fprintf(&b, "Run: %s\nNode: %s\nAttempt: %d\nRole: %s\n", runName(runID), n.id, n.attempt, n.role)
	if n.recoveredBy > 0 {
		fmt.Fprintf(&b, "Recovered: attempt %d succeeded\nOutcome: recovered\n", n.recoveredBy)
	} else {
		b.WriteString("Outcome: not recovered\n")
	}
	if repoName != "" {
		fmt.Fprintf(&b, "Repository: %s\n", repoName)
	}
	if plan != "" {
		fmt.Fprintf(&b, "Plan: %s\n", plan)
	}
	fmt.Fprintf(&b, "Error tier: %s\n", tier)
	if sig := failureSignature(n.err, n.stderr); sig != "" {
		fmt.Fprintf(&b, "Signature: %s\n", sig)
	}
	if len(files) > 0 {
		// The search indexes a path as one word: the area's words let a
		// request that names the package or file find it.
		fmt.Fprintf(&b, "Files: %s\nArea: %s\n", strings.Join(files, ", "), strings.Join(areaWords(files), " "))
	}
	failureSections(&b, n, spec)
	return secrets.Scrub(title), secrets.Scrub(b.String())
}

// failureSections are a record's error, task and output sections.
func failureSections(b *strings.Builder, n failedNode, spec *orchestratorv1.Node) {
	if e := strings.TrimSpace(n.err); e != "" {
		fmt.Fprintf(b, "\n## Error\n\n%s\n", textsearch.Truncate(e, maxFailureError))
	}
	if p := strings.TrimSpace(spec.GetPrompt()); p != "" {
		fmt.Fprintf(b, "\n## Task\n\n%s\n", textsearch.Truncate(p, maxFailurePrompt))
	} else if c := strings.TrimSpace(spec.GetCommand()); c != "" {
		fmt.Fprintf(b, "\n## Command\n\n%s\n", textsearch.Truncate(c, maxFailurePrompt))
	}
	if out := strings.TrimSpace(n.stderr); out != "" {
		fmt.Fprintf(b, "\n## End of its output\n\n%s\n", tail(out, maxFailureOutput))
	}
}

// signatureNoise are the parts of an error line that differ between two
// occurrences of the same failure: numbers and hexadecimal ids.
var signatureNoise = regexp.MustCompile(`\b(0x)?[0-9a-f]{8,}\b|[0-9]+`)

// failureSignature is the normalized first line of a failure: the error's
// first line, or the last line of its output when the error says only how
// the process exited; lower-case, numbers and ids as "#", spaces folded.
// Two failures of the same cause share it (the Architect counts them).
func failureSignature(errText, stderr string) string {
	line := firstLine(errText)
	if line == "" || strings.HasPrefix(strings.ToLower(line), "exit status") {
		if out := lastLine(stderr); out != "" {
			line = out
		}
	}
	line = signatureNoise.ReplaceAllString(strings.ToLower(line), "#")
	return textsearch.Truncate(strings.Join(strings.Fields(line), " "), maxFailureSignature)
}

func firstLine(s string) string {
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// patchFile finds the files a patch changes.
var patchFile = regexp.MustCompile(`(?m)^diff --git a/(\S+) b/`)

// failureFiles are the files a node was meant to touch (the plan's, and
// those it edits) and those its last attempt changed, each once.
func failureFiles(spec *orchestratorv1.Node, patch string) []string {
	var files []string
	add := func(f string) {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(files, f) && len(files) < maxFailureFiles {
			files = append(files, f)
		}
	}
	for _, f := range spec.GetFiles() {
		add(f)
	}
	for _, e := range spec.GetEdits() {
		add(e.GetPath())
	}
	for _, m := range patchFile.FindAllStringSubmatch(patch, -1) {
		add(m[1])
	}
	return files
}

// areaWords are the distinct parts of paths ("pkg/parse/parser.go":
// pkg, parse, parser, go).
func areaWords(paths []string) []string {
	var out []string
	for _, p := range paths {
		for _, w := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '.' || r == '_' || r == '-' }) {
			if !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
	}
	return out
}

// tail is the last n bytes of s, cut at a line when one is near.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < n/4 {
		s = s[i+1:]
	}
	return strings.ToValidUTF8("…"+s, "")
}
