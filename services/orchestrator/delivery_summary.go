package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/textsearch"
)

// deliveryRun is what delivering a run reads of it.
type deliveryRun struct {
	tenant, id, session, plan, state string
	repo, base, patch                string
	conflicts                        []string
	allowPush                        bool
	// clone: the repository is the Librarian's clone of a git URL.
	clone    bool
	reopened int32
	// endTime dates the branch's commit, so that it is the same whoever
	// makes it.
	endTime time.Time
	// check is the run's session check; nil without one.
	check *orchestratorv1.SessionCheck
	nodes []deliveryNode
}

// deliveryNode is what a delivery says of one node.
type deliveryNode struct {
	id, state, reason string
	// changed: the node's patch is part of the run's result.
	changed  bool
	spec     *orchestratorv1.Node
	report   *orchestratorv1.TaskReport
	pipeline *orchestratorv1.PipelineStatus
}

// loadDelivery reads a run awaiting its delivery (errNotFound when it is
// not). A succeeded run whose patches were never merged (its replica
// stopped first) is merged now.
func (s *Service) loadDelivery(ctx context.Context, log *slog.Logger, k runKey) (*deliveryRun, error) {
	r, err := readDelivery(ctx, s.db, k)
	if err != nil {
		return nil, err
	}
	if r.state == stateSucceeded && r.patch == "" && len(r.conflicts) == 0 && slices.ContainsFunc(r.nodes, func(n deliveryNode) bool { return n.changed }) {
		s.mergeRun(ctx, log, k.Tenant, k.ID, r.repo, r.base)
		if r, err = readDelivery(ctx, s.db, k); err != nil {
			return nil, err
		}
	}
	r.clone = s.isClone(r.repo) // delivery_git.go
	return r, nil
}

func readDelivery(ctx context.Context, q querier, k runKey) (*deliveryRun, error) {
	r := &deliveryRun{tenant: k.Tenant, id: k.ID}
	var check string
	err := q.QueryRow(ctx, `SELECT session_id, plan, state, repository, base_commit, result_patch, merge_conflicts, allow_push, reopened,
			coalesce(end_time, now()), session_check
		FROM runs WHERE tenant_id = $1 AND id = $2 AND `+awaitingDelivery, k.Tenant, k.ID).
		Scan(&r.session, &r.plan, &r.state, &r.repo, &r.base, &r.patch, &r.conflicts, &r.allowPush, &r.reopened, &r.endTime, &check)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load run for delivery: %w", err)
	}
	if check != "" {
		r.check = &orchestratorv1.SessionCheck{}
		if err := protojson.Unmarshal([]byte(check), r.check); err != nil {
			return nil, fmt.Errorf("decode session check: %w", err)
		}
	}
	rows, err := q.Query(ctx, `SELECT node_id, state, error, `+keptPatchSQL+`, report, pipeline, spec
		FROM nodes WHERE tenant_id = $1 AND run_id = $2 ORDER BY layer, position`, k.Tenant, k.ID)
	if err != nil {
		return nil, fmt.Errorf("load nodes for delivery: %w", err)
	}
	r.nodes, err = pgx.CollectRows(rows, scanDeliveryNode)
	return r, err
}

func scanDeliveryNode(row pgx.CollectableRow) (deliveryNode, error) {
	var n deliveryNode
	var report, pipeline string
	var spec []byte
	if err := row.Scan(&n.id, &n.state, &n.reason, &n.changed, &report, &pipeline, &spec); err != nil {
		return n, err
	}
	// What cannot be decoded is left out of the summary, not fatal to it.
	if report != "" {
		n.report = &orchestratorv1.TaskReport{}
		_ = protojson.Unmarshal([]byte(report), n.report)
	}
	if pipeline != "" {
		n.pipeline = &orchestratorv1.PipelineStatus{}
		_ = protojson.Unmarshal([]byte(pipeline), n.pipeline)
	}
	if len(spec) > 0 {
		n.spec = &orchestratorv1.Node{}
		_ = proto.Unmarshal(spec, n.spec)
	}
	return n, nil
}

// summary is the run's delivery before its branch is made: what was
// tested, what reviews found, and what the agents used.
func (r *deliveryRun) summary() *orchestratorv1.Delivery {
	d := &orchestratorv1.Delivery{BaseCommit: r.base, Tests: r.testsLine(), Findings: r.findingsLine()}
	var unpriced []string
	for _, n := range r.nodes {
		act := n.report.GetActivity()
		if act == nil {
			continue
		}
		d.InputTokens += act.GetInputTokens()
		d.OutputTokens += act.GetOutputTokens()
		provider, model, _ := strings.Cut(act.GetModel(), "/")
		m, known := llm.LookupModel(provider, model)
		if !known && act.GetInputTokens()+act.GetOutputTokens() > 0 && !slices.Contains(unpriced, act.GetModel()) {
			unpriced = append(unpriced, act.GetModel())
		}
		d.CostUsd += m.Cost(llm.Usage{InputTokens: int(act.GetInputTokens()), OutputTokens: int(act.GetOutputTokens())})
	}
	if len(unpriced) > 0 {
		addDetail(d, "cost: models not in the catalogue are counted at $0 ("+joinClipped(unpriced)+")")
	}
	return d
}

// testsLine says how the tests went: the session check's, else those of
// the tasks' Testers.
func (r *deliveryRun) testsLine() string {
	if c := r.check; c.GetState() != "" {
		line := "session check " + c.GetState()
		switch tr := c.GetTestResult(); {
		case tr != nil:
			line += ": " + testCounts(tr.GetPassed(), tr.GetFailed(), tr.GetSkipped())
		case c.GetDetail() != "":
			line += ": " + textsearch.Clip(oneLine(c.GetDetail()), maxReasonBytes)
		}
		return line
	}
	var passed, failed, skipped int32
	tested := 0
	for _, n := range r.nodes {
		if tr := n.pipeline.GetLastTestResult(); tr != nil {
			passed, failed, skipped = passed+tr.GetPassed(), failed+tr.GetFailed(), skipped+tr.GetSkipped()
			tested++
		}
	}
	if tested == 0 {
		return "no tests ran"
	}
	return fmt.Sprintf("%s (the tests of %d tasks)", testCounts(passed, failed, skipped), tested)
}

func testCounts(passed, failed, skipped int32) string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", passed, failed, skipped)
}

// findingsLine counts the review findings over the run's tasks by
// severity, most severe first ("high: 1, low: 2").
func (r *deliveryRun) findingsLine() string {
	counts := map[orchestratorv1.Severity]int{}
	reviews := 0
	for _, n := range r.nodes {
		rv := n.report.GetReview()
		if rv == nil {
			continue
		}
		reviews++
		for _, f := range rv.GetFindings() {
			counts[f.GetSeverity()]++
		}
	}
	if reviews == 0 {
		return "no review"
	}
	var parts []string
	for sev := orchestratorv1.Severity_SEVERITY_CRITICAL; sev >= orchestratorv1.Severity_SEVERITY_UNSPECIFIED; sev-- {
		if counts[sev] == 0 {
			continue
		}
		name := strings.ToLower(strings.TrimPrefix(sev.String(), "SEVERITY_"))
		if sev == orchestratorv1.Severity_SEVERITY_UNSPECIFIED {
			name = "unrated"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, counts[sev]))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("no findings (%d reviews)", reviews)
	}
	return strings.Join(parts, ", ")
}

// noChangeReasons says why a NO_CHANGES run changed nothing.
func (r *deliveryRun) noChangeReasons() string {
	c := runChanges{nodes: len(r.nodes)}
	for _, n := range r.nodes {
		if n.state == stateNoChanges {
			c.unchanged = append(c.unchanged, noChange{node: n.id, reason: n.reason})
		}
	}
	return c.reasons(maxEventReasons)
}

// addDetail adds a note to the delivery's detail.
func addDetail(d *orchestratorv1.Delivery, note string) { d.Detail = joinNotes(d.Detail, note) }

// joinNotes joins the notes that are not empty.
func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

// joinClipped lists names in a bounded line.
func joinClipped(names []string) string {
	return textsearch.Clip(strings.Join(names, ", "), maxReasonBytes)
}

// deliveryText is what the RUN_DELIVERED event says.
func deliveryText(runID, repo string, clone bool, d *orchestratorv1.Delivery) string {
	var b strings.Builder
	short := d.GetCommit()[:min(len(d.GetCommit()), 12)]
	switch {
	case d.GetBranch() == "":
		fmt.Fprintf(&b, "%s delivered no branch: %s", runName(runID), d.GetDetail())
	case d.GetPushed():
		fmt.Fprintf(&b, "%s delivered as branch %s (commit %s), pushed to %s", runName(runID), d.GetBranch(), short, d.GetRemote())
	case clone:
		fmt.Fprintf(&b, "%s delivered as branch %s (commit %s), kept for download: GET /v1/%s/bundle", runName(runID), d.GetBranch(), short,
			runName(runID))
	default:
		fmt.Fprintf(&b, "%s delivered as branch %s (commit %s) in %s: git -C %s log %s", runName(runID), d.GetBranch(), short, repo, repo,
			d.GetBranch())
	}
	fmt.Fprintf(&b, "; files changed: %d; tests: %s; findings: %s; tokens: %d in, %d out; cost: $%.4f",
		len(d.GetFilesChanged()), d.GetTests(), d.GetFindings(), d.GetInputTokens(), d.GetOutputTokens(), d.GetCostUsd())
	if d.GetBranch() != "" && d.GetDetail() != "" {
		b.WriteString("; note: " + d.GetDetail())
	}
	return b.String()
}

// commitMessage is the branch's commit message (spec F-30): a
// conventional subject, then the run and the tasks whose changes it holds.
func (r *deliveryRun) commitMessage(files []string) string {
	var tasks []deliveryNode
	for _, n := range r.nodes {
		if n.changed {
			tasks = append(tasks, n)
		}
	}
	title, more := "the changes of "+runName(r.id), ""
	if len(tasks) > 0 {
		title = taskTitle(tasks[0])
	}
	if len(tasks) > 1 {
		more = fmt.Sprintf(" (+%d tasks)", len(tasks)-1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s%s\n\nDelivered by Sylk from %s, on %s.\n", commitKind(title, files), clipRunes(title, maxSubjectRunes-len(more)),
		more, runName(r.id), r.base)
	if r.plan != "" {
		fmt.Fprintf(&b, "Plan: %s\n", r.plan)
	}
	b.WriteString("\nTasks:\n")
	for i, n := range tasks {
		if i == maxMessageTasks {
			fmt.Fprintf(&b, "- and %d more\n", len(tasks)-i)
			break
		}
		fmt.Fprintf(&b, "- %s: %s\n", n.id, clipRunes(taskTitle(n), 72))
	}
	return b.String()
}

// Bounds of the commit message: its subject's summary (spec F-31) and the
// tasks it lists.
const (
	maxSubjectRunes = 50
	maxMessageTasks = 50
)

// taskTitle names a task in a line: its name, else its prompt's first
// line, else its command.
func taskTitle(n deliveryNode) string {
	for _, s := range []string{n.spec.GetName(), n.spec.GetPrompt(), n.spec.GetCommand()} {
		if line, _, _ := strings.Cut(strings.TrimSpace(s), "\n"); line != "" {
			return oneLine(line)
		}
	}
	return "task " + n.id
}

// commitKind is the conventional type of a change titled title that
// changed files: what the title says it does, else what the files are.
func commitKind(title string, files []string) string {
	l := strings.ToLower(title)
	for _, k := range []struct{ kind, prefix string }{
		{"fix", "fix"}, {"fix", "repair"}, {"test", "test"}, {"docs", "doc"}, {"refactor", "refactor"}, {"style", "style"}, {"style", "format"},
	} {
		if strings.HasPrefix(l, k.prefix) {
			return k.kind
		}
	}
	switch {
	case strings.Contains(l, "bug"):
		return "fix"
	case len(files) > 0 && !slices.ContainsFunc(files, func(f string) bool { return !isDocFile(f) }):
		return "docs"
	case len(files) > 0 && !slices.ContainsFunc(files, func(f string) bool { return !isTestFile(f) }):
		return "test"
	}
	return "feat"
}

func isDocFile(f string) bool {
	ext := strings.ToLower(path.Ext(f))
	return ext == ".md" || ext == ".rst" || ext == ".adoc" || strings.HasPrefix(f, "docs/") || strings.HasPrefix(strings.ToUpper(path.Base(f)), "README")
}

func isTestFile(f string) bool {
	base := path.Base(f)
	return strings.Contains(base, "_test.") || strings.HasPrefix(base, "test_") || strings.Contains(base, ".test.") ||
		strings.Contains(base, ".spec.") || strings.HasPrefix(f, "tests/")
}

// clipRunes keeps the first n runes of s.
func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
