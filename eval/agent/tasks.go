// Package agenteval holds the fixture tasks of the coding-agent evaluation
// and what it takes to set one up and judge it. A task (tasks/<id>/) is a
// small repository with one problem, the hidden acceptance tests that judge
// a run, and two scripted solutions: one with Sylk's workspace tools, one
// with a lone bash tool, so that the harness can be played through without a
// model. The package loads the tasks, copies a task's repository into a
// working directory, overlays the hidden files and runs the test command.
package agenteval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"sylk.dev/sylk/pkg/agent/codetools"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// Languages a task is written in.
const (
	LanguageGo         = "go"
	LanguagePython     = "python"
	LanguageJavaScript = "javascript"
)

// Kinds of task.
const (
	KindBug     = "bug"
	KindFeature = "feature"
)

// Names the scripts use.
const (
	// BashTool is the baseline loop's only tool; its argument is
	// {"command": "..."}.
	BashTool = "bash"
	// FinishTool ends a Sylk run.
	FinishTool = "finish"
	// FinishMarker ends a baseline run: its last turn is text holding it,
	// with no tool call.
	FinishMarker = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
)

// Task is one fixture task, as its task.json describes it.
type Task struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Kind     string `json:"kind"`
	Title    string `json:"title"`
	// Prompt is what the user asks: the symptom or the feature.
	Prompt string `json:"prompt"`
	// TestCommand judges a run: run by sh -c in the repository root after
	// the hidden files are copied in, exit 0 means solved.
	TestCommand string `json:"test_command"`
	// Hidden are the acceptance files' paths, relative to the repository
	// root (and to hidden/, which mirrors it).
	Hidden  []string `json:"hidden"`
	Scripts Scripts  `json:"scripts"`
	// Dir is the task's directory (set by LoadTasks).
	Dir string `json:"-"`
}

// Scripts are a task's scripted solutions.
type Scripts struct {
	// Sylk solves it with Sylk's workspace tools and ends with finish.
	Sylk []Turn `json:"sylk"`
	// Baseline solves it with the bash tool and ends with a text turn
	// holding FinishMarker.
	Baseline []Turn `json:"baseline"`
}

// Turn is one assistant turn of a script.
type Turn struct {
	// Expect lists texts the results of the previous turn's calls must
	// contain (the prompt, for the first turn).
	Expect []string `json:"expect,omitempty"`
	Text   string   `json:"text,omitempty"`
	Calls  []Call   `json:"calls,omitempty"`
}

// Call is a tool call of a turn.
type Call struct {
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

// RepoDir is the repository as the agent sees it.
func (t Task) RepoDir() string { return filepath.Join(t.Dir, "repo") }

// HiddenDir holds the hidden files, laid out as in the repository.
func (t Task) HiddenDir() string { return filepath.Join(t.Dir, "hidden") }

// Script is turns as the script model plays them, for the conversation
// whose first user message contains match.
func Script(match string, turns []Turn) scriptmodel.Script {
	s := scriptmodel.Script{Match: match}
	for _, t := range turns {
		st := scriptmodel.Turn{Expect: t.Expect, Text: t.Text}
		for _, c := range t.Calls {
			st.Calls = append(st.Calls, scriptmodel.Call{Name: c.Name, Args: c.Args})
		}
		s.Turns = append(s.Turns, st)
	}
	return s
}

// LoadTasks reads every task under dir (one directory each, holding
// task.json), sorted by id, and checks that each is well formed.
func LoadTasks(dir string) ([]Task, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	var tasks []Task
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		t, err := loadTask(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", e.Name(), err))
			continue
		}
		tasks = append(tasks, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("no tasks in %s", dir)
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
	return tasks, nil
}

func loadTask(dir string) (Task, error) {
	data, err := os.ReadFile(filepath.Join(dir, "task.json"))
	if err != nil {
		return Task{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Task
	if err := dec.Decode(&t); err != nil {
		return Task{}, fmt.Errorf("task.json: %w", err)
	}
	t.Dir = dir
	if t.ID != filepath.Base(dir) {
		return Task{}, fmt.Errorf("id %q is not the directory's name", t.ID)
	}
	return t, t.validate()
}

// validate checks what every task needs, its scripts' shape included.
func (t Task) validate() error {
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(slices.Contains([]string{LanguageGo, LanguagePython, LanguageJavaScript}, t.Language), "language %q is not go, python or javascript", t.Language)
	check(t.Kind == KindBug || t.Kind == KindFeature, "kind %q is not bug or feature", t.Kind)
	check(strings.TrimSpace(t.Title) != "", "title is empty")
	check(strings.TrimSpace(t.Prompt) != "", "prompt is empty")
	check(strings.TrimSpace(t.TestCommand) != "", "test_command is empty")
	if fi, err := os.Stat(t.RepoDir()); err != nil || !fi.IsDir() {
		errs = append(errs, errors.New("repo/ is missing"))
	}
	errs = append(errs, t.validateHidden()...)
	errs = append(errs, validateSylk(t.Scripts.Sylk)...)
	errs = append(errs, validateBaseline(t.Scripts.Baseline)...)
	return errors.Join(errs...)
}

// validateHidden checks that hidden lists exactly the files under hidden/.
func (t Task) validateHidden() []error {
	if len(t.Hidden) == 0 {
		return []error{errors.New("hidden lists no files")}
	}
	var onDisk []string
	err := filepath.WalkDir(t.HiddenDir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(t.HiddenDir(), p)
		onDisk = append(onDisk, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return []error{fmt.Errorf("hidden/: %w", err)}
	}
	listed := slices.Clone(t.Hidden)
	for _, h := range listed {
		if h != path.Clean(h) || path.IsAbs(h) || strings.HasPrefix(h, "../") {
			return []error{fmt.Errorf("hidden path %q is not a clean relative path", h)}
		}
	}
	slices.Sort(listed)
	slices.Sort(onDisk)
	if !slices.Equal(listed, onDisk) {
		return []error{fmt.Errorf("hidden lists %v but hidden/ holds %v", listed, onDisk)}
	}
	return nil
}

func validateSylk(turns []Turn) []error {
	if len(turns) == 0 {
		return []error{errors.New("the sylk script is empty")}
	}
	var errs []error
	for i, tn := range turns {
		if len(tn.Calls) == 0 {
			errs = append(errs, fmt.Errorf("sylk turn %d calls no tool", i+1))
		}
	}
	last := turns[len(turns)-1]
	if len(last.Calls) != 1 || last.Calls[0].Name != FinishTool {
		errs = append(errs, errors.New("the sylk script does not end with a lone finish call"))
	}
	for i, tn := range turns[:len(turns)-1] {
		for _, c := range tn.Calls {
			if c.Name == FinishTool {
				errs = append(errs, fmt.Errorf("sylk turn %d calls finish before the last turn", i+1))
			}
		}
	}
	return errs
}

func validateBaseline(turns []Turn) []error {
	if len(turns) < 2 {
		return []error{errors.New("the baseline script needs a bash turn and a final text turn")}
	}
	var errs []error
	for i, tn := range turns[:len(turns)-1] {
		if len(tn.Calls) == 0 {
			errs = append(errs, fmt.Errorf("baseline turn %d calls no tool", i+1))
		}
		for _, c := range tn.Calls {
			cmd, ok := c.Args["command"].(string)
			if c.Name != BashTool || !ok || strings.TrimSpace(cmd) == "" || len(c.Args) != 1 {
				errs = append(errs, fmt.Errorf("baseline turn %d: a call that is not bash with one command", i+1))
			}
		}
	}
	last := turns[len(turns)-1]
	if len(last.Calls) != 0 || !strings.Contains(last.Text, FinishMarker) {
		errs = append(errs, fmt.Errorf("the baseline script does not end with a text turn holding %s", FinishMarker))
	}
	return errs
}

// CopyRepo copies the task's repository into dst, which is made if absent.
func (t Task) CopyRepo(dst string) error {
	return copyTree(dst, t.RepoDir())
}

// OverlayHidden copies the hidden files into the repository at dst,
// replacing files of the same path.
func (t Task) OverlayHidden(dst string) error {
	return copyTree(dst, t.HiddenDir())
}

// copyTree copies the files under src into dst, keeping their permission
// bits and replacing what is there.
func copyTree(dst, src string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s is not a regular file", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
}

// RunTestCommand runs the task's test command in dir, a copy of its
// repository.
func (t Task) RunTestCommand(ctx context.Context, dir string, timeout time.Duration) (codetools.CommandResult, error) {
	return RunCommand(ctx, dir, t.TestCommand, timeout)
}

// ShellRunner runs commands with sh -c in Dir: the tasks' commands as the
// evaluation runs them outside the mesh.
type ShellRunner struct {
	Dir string
}

// Run runs command.
func (r ShellRunner) Run(ctx context.Context, command string, timeout time.Duration) (codetools.CommandResult, error) {
	return RunCommand(ctx, r.Dir, command, timeout)
}

// RunCommand runs command with sh -c in dir, in a process group of its own
// that is killed at the timeout. A command that ran and failed is a result,
// not an error.
func RunCommand(ctx context.Context, dir, command string, timeout time.Duration) (codetools.CommandResult, error) {
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code, timedOut, err := runShell(ctx, dir, command, timeout, &stdout, &stderr)
	res := codetools.CommandResult{ExitCode: code, TimedOut: timedOut, Stdout: stdout.String(), Stderr: stderr.String(),
		Duration: time.Since(start)}
	return res, err
}

// runShell runs command with sh -c in dir, writing what it prints to
// stdout and stderr (one writer may be both: the output is then
// interleaved as on a terminal). The exit code is -1 when it timed out.
func runShell(ctx context.Context, dir, command string, timeout time.Duration, stdout, stderr io.Writer) (code int, timedOut bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = dir
	cmd.Env = commandEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return -1, true, nil
	case errors.As(err, &exit):
		return exit.ExitCode(), false, nil
	case err != nil:
		return -1, false, fmt.Errorf("run %q: %w", command, err)
	}
	return 0, false, nil
}

// commandEnv is the environment of the tasks' commands: the toolchains
// installed here and nothing fetched (GOTOOLCHAIN=local), no workspace file
// of an enclosing directory, no bytecode or colours written.
func commandEnv() []string {
	return append(os.Environ(),
		"GOTOOLCHAIN=local",
		"GOWORK=off",
		"PYTHONDONTWRITEBYTECODE=1",
		"NO_COLOR=1",
	)
}
