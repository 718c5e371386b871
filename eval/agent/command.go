package agenteval

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sylk.dev/sylk/pkg/config"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// CommandConfig is the eval-agent command's configuration. Each flag not
// given is read from SYLK_EVAL_<FLAG> (-base-url from SYLK_EVAL_BASE_URL,
// -api-key from SYLK_EVAL_API_KEY, -postgres.dsn from
// SYLK_EVAL_POSTGRES_DSN).
type CommandConfig struct {
	Model ModelConfig
	// TasksDir holds the tasks; Tasks selects some (SelectTasks).
	TasksDir, Tasks string
	// Scripted plays the tasks' scripts instead of calling a model; Smoke
	// is Scripted over SmokeTasks.
	Scripted, Smoke bool
	// BaselineOnly and MeshOnly run one path.
	BaselineOnly, MeshOnly bool
	Parallel               int
	// Out is where report.json, report.md and mesh.log are written.
	Out string
	// WallTime bounds each task on each path; ToolCalls and CommandTimeout
	// bound the baseline (the mesh's Engineer has its own, alike).
	WallTime, CommandTimeout time.Duration
	ToolCalls                int
	// The stores of the mesh started in this process.
	PostgresDSN, RedisURL, NATSURL string
	// ContextTokens is the model's context window, for the mesh's
	// Engineer (0: the model catalogue's, 8192 for a model it does not
	// list).
	ContextTokens int
	// MeshFlags are more flags for the mesh, space-separated.
	MeshFlags string
}

// RegisterFlags registers the command's flags.
func (c *CommandConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Model.Provider, "provider", llm.OpenAI, "the model's API: openai (OpenAI, or any server that speaks its chat completions API) or anthropic")
	fs.StringVar(&c.Model.BaseURL, "base-url", "", "the API's base URL, e.g. http://127.0.0.1:8000/v1 for a local server (empty: the provider's public endpoint)")
	fs.StringVar(&c.Model.Model, "model", "", "the model's name as the server knows it (docs/agent-eval.md has examples)")
	fs.StringVar(&c.Model.APIKey, "api-key", "", "the API key (prefer SYLK_EVAL_API_KEY; a local server may need none)")
	fs.IntVar(&c.Model.MaxTokens, "max-tokens", 4096, "the most tokens of one answer")
	fs.StringVar(&c.TasksDir, "tasks-dir", "eval/agent/tasks", "the directory of the tasks")
	fs.StringVar(&c.Tasks, "tasks", "", "comma-separated globs of the task ids to run, e.g. 'go-*,py-slugify-separators' (empty: all)")
	fs.BoolVar(&c.Scripted, "scripted", false, "play each task's scripts with the script model instead of calling a model")
	fs.BoolVar(&c.Smoke, "smoke", false, "the smoke run: -scripted over a bug and a feature per language ("+SmokeTasks()+")")
	fs.BoolVar(&c.BaselineOnly, "baseline-only", false, "run only the baseline (no mesh is started)")
	fs.BoolVar(&c.MeshOnly, "mesh-only", false, "run only the mesh")
	fs.IntVar(&c.Parallel, "parallel", 1, "tasks run at once")
	fs.StringVar(&c.Out, "out", "bin/eval-agent", "directory for report.json, report.md and mesh.log")
	fs.DurationVar(&c.WallTime, "timeout", 10*time.Minute, "wall time of each task on each path")
	fs.DurationVar(&c.CommandTimeout, "command-timeout", 2*time.Minute, "timeout of each of the baseline's commands")
	fs.IntVar(&c.ToolCalls, "tool-calls", 60, "the most tool calls of the baseline per task")
	fs.StringVar(&c.PostgresDSN, "postgres.dsn", DefaultPostgresDSN, "PostgreSQL for the mesh (it uses schemas of its own and drops them)")
	fs.StringVar(&c.RedisURL, "redis.url", DefaultRedisURL, "Redis for the mesh (it uses a key prefix of its own and deletes its keys)")
	fs.StringVar(&c.NATSURL, "nats.url", DefaultNATSURL, "NATS for the mesh (it uses a subject prefix of its own and deletes its streams)")
	fs.IntVar(&c.ContextTokens, "context-tokens", 0, "the model's context window in tokens, for the mesh's Engineer (0: the model catalogue's; 8192 for a model it does not list, such as a local one)")
	fs.StringVar(&c.MeshFlags, "mesh-flags", "", "more flags for the mesh (those of sylk dev), space-separated")
}

// scripted says whether the scripts play.
func (c CommandConfig) scripted() bool { return c.Scripted || c.Smoke }

// Validate joins every problem.
func (c CommandConfig) Validate() error {
	var errs []error
	if c.BaselineOnly && c.MeshOnly {
		errs = append(errs, errors.New("-baseline-only and -mesh-only exclude each other"))
	}
	if c.Smoke && c.Tasks != "" {
		errs = append(errs, errors.New("-smoke runs its own tasks: leave out -tasks"))
	}
	if c.Parallel < 1 {
		errs = append(errs, errors.New("-parallel: at least 1"))
	}
	if c.WallTime <= 0 || c.CommandTimeout <= 0 || c.ToolCalls <= 0 {
		errs = append(errs, errors.New("-timeout, -command-timeout and -tool-calls must be positive"))
	}
	if c.ContextTokens < 0 {
		errs = append(errs, errors.New("-context-tokens must not be negative"))
	}
	if !c.scripted() {
		errs = append(errs, c.Model.Validate())
	} else if c.Model.Provider != llm.OpenAI && c.Model.Provider != llm.Anthropic {
		errs = append(errs, fmt.Errorf("provider %q: want openai or anthropic", c.Model.Provider))
	}
	return errors.Join(errs...)
}

// Command is the eval-agent command: it parses args (and the SYLK_EVAL_*
// variables lookup finds), runs the selected tasks through both paths,
// prints the table and writes the reports. It returns the exit code: 2
// for bad flags, 1 when the evaluation could not run, or when a scripted
// run did not solve every task as its scripts say.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	var cfg CommandConfig
	fs := flag.NewFlagSet("eval-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.RegisterFlags(fs)
	evalEnv := func(name string) (string, bool) { return lookup("SYLK_EVAL_" + strings.TrimPrefix(name, "SYLK_")) }
	if err := config.ParseWithLookup(fs, args, evalEnv); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	report, err := evaluate(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "eval-agent:", err)
		return 1
	}
	if err := writeReports(cfg.Out, report, stdout); err != nil {
		fmt.Fprintln(stderr, "eval-agent:", err)
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "eval-agent: interrupted; the report holds the runs that ended")
		return 1
	}
	if cfg.scripted() && (!report.AllSolved() || len(report.ScriptFailures) > 0) {
		fmt.Fprintln(stderr, "eval-agent: the scripted run did not solve every task as its scripts say")
		return 1
	}
	return 0
}

// evaluate runs the selected tasks through the selected paths.
func evaluate(ctx context.Context, cfg CommandConfig, progress io.Writer) (Report, error) {
	tasks, err := LoadTasks(cfg.TasksDir)
	if err != nil {
		return Report{}, err
	}
	pattern := cfg.Tasks
	if cfg.Smoke {
		pattern = SmokeTasks()
	}
	if tasks, err = SelectTasks(tasks, pattern); err != nil {
		return Report{}, err
	}
	model := cfg.Model
	var scripts *scriptmodel.Server
	if cfg.scripted() {
		if scripts, err = StartScripts(tasks); err != nil {
			return Report{}, err
		}
		defer scripts.Close()
		model = ScriptedModel(scripts, cfg.Model.Provider)
	}
	start := time.Now()
	h := Harness{Parallel: cfg.Parallel, Progress: progress}
	if !cfg.MeshOnly {
		b, err := NewBaseline(BaselineConfig{Model: model, ToolCalls: cfg.ToolCalls, WallTime: cfg.WallTime, CommandTimeout: cfg.CommandTimeout})
		if err != nil {
			return Report{}, err
		}
		h.Baseline = b
	}
	if !cfg.BaselineOnly {
		local, log, err := startMesh(ctx, cfg, model, progress)
		if err != nil {
			return Report{}, err
		}
		defer func() {
			if err := local.Close(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintln(progress, "eval-agent: stop the mesh:", err)
			}
			_ = log.Close()
		}()
		h.Sylk = NewMesh(MeshConfig{URL: local.URL(), Key: local.Key(), Model: model, WallTime: cfg.WallTime})
	}
	fmt.Fprintf(progress, "eval-agent: %d tasks, model %s/%s\n", len(tasks), model.Provider, model.Model)
	report := NewReport(model.Provider+"/"+model.Model, cfg.scripted(), start, h.Run(ctx, tasks))
	if scripts != nil {
		report.ScriptFailures = scripts.Failures()
	}
	return report, nil
}

// startMesh starts the mesh in this process, its log in the output
// directory (the caller closes it after the mesh).
func startMesh(ctx context.Context, cfg CommandConfig, model ModelConfig, progress io.Writer) (*LocalMesh, *os.File, error) {
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, nil, err
	}
	logPath := filepath.Join(cfg.Out, "mesh.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(progress, "eval-agent: starting the mesh (its log: %s)\n", logPath)
	var flags []string
	if cfg.ContextTokens > 0 {
		flags = append(flags, "-worker.engineer-context-tokens", fmt.Sprint(cfg.ContextTokens))
	}
	local, err := StartLocalMesh(ctx, LocalMeshConfig{PostgresDSN: cfg.PostgresDSN, RedisURL: cfg.RedisURL, NATSURL: cfg.NATSURL,
		Model: model, Flags: append(flags, strings.Fields(cfg.MeshFlags)...), Log: log})
	if err != nil {
		_ = log.Close()
		return nil, nil, err
	}
	return local, log, nil
}

// writeReports prints the table and writes report.md and report.json.
func writeReports(dir string, r Report, stdout io.Writer) error {
	var md, js bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		return err
	}
	if err := r.WriteJSON(&js); err != nil {
		return err
	}
	if _, err := stdout.Write(md.Bytes()); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return errors.Join(os.WriteFile(filepath.Join(dir, "report.md"), md.Bytes(), 0o644),
		os.WriteFile(filepath.Join(dir, "report.json"), js.Bytes(), 0o644))
}
