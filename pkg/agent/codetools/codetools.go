// Package codetools holds the workspace tools of Sylk's coding agents:
// reading, listing and searching files, exact-string edits (one, or several
// applied all or none), new files, commands and tests. Every path is
// relative to the workspace and opened through an os.Root of it, so that no
// call reads or writes outside it, whatever links or ".." it names.
//
// The package is the tools' side only: a command runs through the Runner
// the caller gives (the sandboxed executor in the mesh), tests through its
// TestRunner, and the agent loop (pkg/agent) calls the tools.
package codetools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/agent"
	"sylk.dev/sylk/pkg/llm"
)

// Runner runs a shell command in the workspace.
type Runner interface {
	Run(ctx context.Context, command string, timeout time.Duration) (CommandResult, error)
}

// CommandResult is what a command did.
type CommandResult struct {
	ExitCode       int
	Stdout, Stderr string
	// TimedOut is set when the command was stopped at its timeout.
	TimedOut bool
	Duration time.Duration
}

// TestRunner runs the workspace's tests (filter narrows them, "" is all)
// and says what happened, for a person: the framework, the counts and the
// failures.
type TestRunner interface {
	RunTests(ctx context.Context, filter string) (string, error)
}

// Lister lists the workspace's files (relative, slash-separated), with its
// ignore rules applied; nil walks the directory, leaving out VCS metadata.
type Lister func(ctx context.Context) ([]string, error)

// Config is the workspace and what the tools may do in it.
type Config struct {
	// Dir is the workspace directory.
	Dir string
	// Runner runs commands (run_command is left out when nil).
	Runner Runner
	// Tests runs the tests (run_tests is left out when nil).
	Tests TestRunner
	// Files lists the files for list_files and grep.
	Files Lister
	// MaxReadLines is the most lines one read_file returns (400).
	MaxReadLines int
	// MaxListed is the most paths list_files returns (500).
	MaxListed int
	// MaxMatches is the most lines grep returns (200).
	MaxMatches int
	// DefaultTimeout and MaxTimeout bound run_command (2m, 10m).
	DefaultTimeout, MaxTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxReadLines <= 0 {
		c.MaxReadLines = 400
	}
	if c.MaxListed <= 0 {
		c.MaxListed = 500
	}
	if c.MaxMatches <= 0 {
		c.MaxMatches = 200
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = 2 * time.Minute
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 10 * time.Minute
	}
	return c
}

// Workspace is an open workspace the tools act on.
type Workspace struct {
	cfg  Config
	root *os.Root
}

// Open opens the workspace dir.
func Open(cfg Config) (*Workspace, error) {
	root, err := os.OpenRoot(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	return &Workspace{cfg: cfg.withDefaults(), root: root}, nil
}

// Close releases the workspace.
func (w *Workspace) Close() error { return w.root.Close() }

// Tools are the workspace's tools for the agent loop, finish included.
func (w *Workspace) Tools() []agent.Tool {
	tools := []agent.Tool{
		w.readFileTool(), w.listFilesTool(), w.grepTool(),
		w.editFileTool(), w.multiEditTool(), w.writeFileTool(),
	}
	if w.cfg.Runner != nil {
		tools = append(tools, w.runCommandTool())
	}
	if w.cfg.Tests != nil {
		tools = append(tools, w.runTestsTool())
	}
	return append(tools, FinishTool())
}

// relPath checks a path the model gave and makes it relative to the root,
// slash-separated; "" and "." are the root.
func relPath(p string) (string, error) {
	p = strings.TrimSpace(p)
	if strings.ContainsRune(p, 0) {
		return "", errors.New("the path holds a NUL byte")
	}
	if filepath.IsAbs(p) {
		return "", fmt.Errorf("%s is absolute: give a path relative to the repository root", p)
	}
	clean := path.Clean(filepath.ToSlash(p))
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%s leads outside the repository", p)
	}
	return clean, nil
}

// writablePath is relPath for a file a tool writes: never the VCS
// metadata.
func writablePath(p string) (string, error) {
	rel, err := relPath(p)
	if err != nil {
		return "", err
	}
	if rel == "." {
		return "", errors.New("give the path of a file")
	}
	if first, _, _ := strings.Cut(rel, "/"); first == ".git" {
		return "", errors.New("the .git directory is not for editing: change the work tree only")
	}
	return rel, nil
}

// decode reads a call's arguments into v.
func decode(raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("arguments do not match the tool's schema: %v", err)
	}
	return nil
}

// schema builds a JSON schema object.
func schema(required []string, props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

func str(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
func integer(desc string) map[string]any {
	return map[string]any{"type": "integer", "description": desc}
}
func boolean(desc string) map[string]any {
	return map[string]any{"type": "boolean", "description": desc}
}

// Finish is what the model reports when it finishes (spec H-06).
type Finish struct {
	Summary    string `json:"summary"`
	Tested     string `json:"tested"`
	Decisions  string `json:"decisions"`
	Deviations string `json:"deviations"`
	Concerns   string `json:"concerns"`
}

// FinishTool ends the task with its report.
func FinishTool() agent.Tool {
	return agent.Tool{Ends: true, Def: llm.Tool{Name: "finish",
		Description: "End the task once it is done (or cannot be done) with your report. Call it alone, after your last change.",
		Schema: schema([]string{"summary"}, map[string]any{
			"summary":    str("What you changed and why, or why nothing was changed."),
			"tested":     str("How you checked the change (commands, tests and their outcome)."),
			"decisions":  str("Choices you made that a reviewer should know."),
			"deviations": str("Where you departed from the task, or none."),
			"concerns":   str("Risks or open questions, or none."),
		})},
		Run: func(_ context.Context, raw json.RawMessage) (string, error) {
			var f Finish
			if err := decode(raw, &f); err != nil {
				return "", err
			}
			if strings.TrimSpace(f.Summary) == "" {
				return "", errors.New("summary is empty: say what you changed")
			}
			return "task finished", nil
		}}
}

// ParseFinish reads a finish call's arguments.
func ParseFinish(raw json.RawMessage) (Finish, error) {
	var f Finish
	err := json.Unmarshal(raw, &f)
	return f, err
}

// isDir reports whether rel is a directory of the workspace.
func (w *Workspace) isDir(rel string) bool {
	fi, err := w.root.Stat(rel)
	return err == nil && fi.IsDir()
}

// notExist words a missing path for the model.
func notExist(rel string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s does not exist (list_files shows what does)", rel)
	}
	return fmt.Errorf("%s: %v", rel, pathErr(err))
}

// pathErr drops the workspace's own directory from an error.
func pathErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
