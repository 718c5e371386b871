package agenteval

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"

	"sylk.dev/sylk/pkg/review"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// Runner runs a task through one path.
type Runner interface {
	Run(ctx context.Context, task Task) Outcome
}

// Harness runs tasks through the mesh and the baseline, side by side.
type Harness struct {
	// Sylk and Baseline are the paths; a nil one is not run.
	Sylk, Baseline Runner
	// Parallel is how many tasks run at once (1). A task's two paths run
	// one after the other, so that they do not compete for the machine.
	Parallel int
	// Progress, when set, gets a line per finished run.
	Progress io.Writer
}

// Run runs every task through the paths and returns the results in the
// tasks' order.
func (h Harness) Run(ctx context.Context, tasks []Task) []TaskResult {
	results := make([]TaskResult, len(tasks))
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range max(h.Parallel, 1) {
		wg.Go(func() {
			for i := range work {
				results[i] = h.runTask(ctx, tasks[i], &mu)
			}
		})
	}
	for i := range tasks {
		work <- i
	}
	close(work)
	wg.Wait()
	return results
}

func (h Harness) runTask(ctx context.Context, task Task, mu *sync.Mutex) TaskResult {
	res := TaskResult{ID: task.ID, Language: task.Language, Kind: task.Kind}
	for _, p := range []struct {
		name   string
		runner Runner
		out    **Outcome
	}{{PathSylk, h.Sylk, &res.Sylk}, {PathBaseline, h.Baseline, &res.Baseline}} {
		if p.runner == nil || ctx.Err() != nil {
			continue
		}
		o := p.runner.Run(ctx, task)
		*p.out = &o
		if h.Progress != nil {
			mu.Lock()
			fmt.Fprintf(h.Progress, "%-28s %-8s solved=%-5v state=%-11s turns=%-3d tools=%-3d %.1fs %s\n",
				task.ID, p.name, o.Solved, o.State, o.Turns, o.ToolCalls, o.WallSeconds, oneLine(o.Error))
			mu.Unlock()
		}
	}
	return res
}

// SelectTasks keeps the tasks whose id matches one of patterns, a
// comma-separated list of globs ("go-*,py-slugify-separators"); "" or "*"
// keeps all. A pattern that matches no task is an error.
func SelectTasks(tasks []Task, patterns string) ([]Task, error) {
	if strings.TrimSpace(patterns) == "" {
		return tasks, nil
	}
	var out []Task
	for _, pat := range strings.Split(patterns, ",") {
		pat = strings.TrimSpace(pat)
		matched := false
		for _, t := range tasks {
			ok, err := path.Match(pat, t.ID)
			if err != nil {
				return nil, fmt.Errorf("task pattern %q: %w", pat, err)
			}
			if ok {
				matched = true
				if !containsTask(out, t.ID) {
					out = append(out, t)
				}
			}
		}
		if !matched {
			return nil, fmt.Errorf("task pattern %q matches no task", pat)
		}
	}
	return out, nil
}

func containsTask(tasks []Task, id string) bool {
	for _, t := range tasks {
		if t.ID == id {
			return true
		}
	}
	return false
}

// SmokeTasks is the subset the smoke run plays with the scripts (make
// eval-agent-smoke, and the package's test): a bug and a feature in each
// language, whose scripts together call every workspace tool the mesh's
// Engineer must offer but write_file.
func SmokeTasks() string {
	return strings.Join([]string{
		"go-envfile-equals", "go-expand-defaults",
		"py-settings-bool", "py-duration-days",
		"js-config-defaults-mutated", "js-stats-median",
	}, ",")
}

// StartScripts starts the script model with the tasks' scripts. Each
// baseline script is matched on the baseline's whole first message, each
// Sylk script on the task's prompt, which the mesh must pass verbatim in
// its Engineer's first message. The baseline's first message holds the
// prompt too, so the baseline scripts come first: the first script that
// matches plays.
func StartScripts(tasks []Task) (*scriptmodel.Server, error) {
	var scripts []scriptmodel.Script
	for _, t := range tasks {
		scripts = append(scripts, Script(BaselineBrief(t.Prompt), t.Scripts.Baseline))
	}
	for _, t := range tasks {
		scripts = append(scripts, Script(SylkMatch(t), t.Scripts.Sylk))
	}
	// The Inspector's reviews of the mesh's pipelines find nothing.
	return scriptmodel.New(append(scripts, review.PassingScript())...)
}

// SylkMatch is what the Sylk script of task is matched on: its prompt.
func SylkMatch(task Task) string { return strings.TrimSpace(task.Prompt) }
