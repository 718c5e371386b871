// Package cli is the client half of the sylk command: login, chat, ask,
// search, repositories, plans, runs and keys, spoken to the REST gateway
// with an API key. The server half (dev, serve, migrate, ...) lives in
// internal/mesh, which hands these commands here.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
)

// Usage lists the client commands, for the sylk usage text.
const Usage = `Client commands (they speak the REST API with an API key):
  sylk login --server URL --key-stdin   store the server and key (0600 in the user's config directory)
  sylk logout                      forget the stored key
  sylk chat [--session ID]         talk to the agents; /help inside lists the slash commands
  sylk ask "QUESTION"              ask one question and print the answer with its citations
  sylk search "QUERY"              search the indexed code
  sylk code symbol|similar|history|tools   a symbol, similar ones, its commits; a repository's tools
  sylk sessions list|create|show|active|switch|suspend|resume|complete|activate|context|snapshot   your sessions
  sylk repos add|list|show|index|operations|cancel   register and index repositories (--wait shows progress)
  sylk plans create|list|show|approve|revise|reject   draft and review the plans of a session
  sylk runs create|list|show|watch|logs|cancel|pause|resume|settle|decisions|bundle|task   start, follow, stop and settle runs
  sylk keys list|create|revoke|rotate        manage the tenant's API keys
  sylk docs add|list|search        ingest and search documents (the Academic)
  sylk expectations "REQUEST"      what users of its feature domain expect (--constraint rules some out)
  sylk history record|search|list  the tenant's history (the Archivalist)
  sylk reviews create|list|show    have a branch or a patch reviewed
  sylk providers list|set|verify|delete   model providers and the tenant's keys
  sylk usage [--by provider]       model usage and cost
  sylk audit list|verify           the audit log (admins)
  Every client command takes --json (print the server's JSON), --server URL and -h.
  SYLK_SERVER and SYLK_API_KEY override the stored server and key.

Exit codes: 0 ok, 1 error, 2 usage, 3 not logged in or key refused (401/403),
4 not found, 5 timed out, 6 needs a clarification (ask), 7 the run or index
operation failed or was cancelled, 130 interrupted (Ctrl-C).
`

// command is one client command.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
	// sub are a group's commands (repos, plans, runs, keys).
	sub []command
	// interactive commands read Ctrl-C themselves (chat).
	interactive bool
}

func commands() []command {
	return []command{
		{name: "login", summary: "store the server address and API key", run: runLogin},
		{name: "logout", summary: "forget the stored API key", run: runLogout},
		{name: "chat", summary: "talk to the agents interactively", run: runChat, interactive: true},
		{name: "ask", summary: "ask one question and wait for the answer", run: runAsk},
		{name: "search", summary: "search the indexed code", run: runSearch},
		{name: "sessions", summary: "list, start, switch and end sessions", sub: sessionCommands()},
		{name: "repos", summary: "register and index repositories", sub: repoCommands()},
		{name: "code", summary: "symbols, their history, similar code, a repository's tools", sub: codeCommands()},
		{name: "plans", summary: "review the plans of a session", sub: planCommands()},
		{name: "runs", summary: "follow and stop runs", sub: runCommands()},
		{name: "keys", summary: "manage the tenant's API keys", sub: keyCommands()},
		{name: "docs", summary: "ingest and search documents (the Academic)", sub: docCommands()},
		{name: "expectations", summary: "what users of a request's feature domain expect", run: runExpectations},
		{name: "history", summary: "record and search the history (the Archivalist)", sub: historyCommands()},
		{name: "reviews", summary: "have changes reviewed", sub: reviewCommands()},
		{name: "providers", summary: "model providers and the tenant's keys for them", sub: providerCommands()},
		{name: "usage", summary: "model usage and cost", run: runUsage},
		{name: "audit", summary: "the tenant's audit log (admins)", sub: auditCommands()},
	}
}

// Handles reports whether name is a client command.
func Handles(name string) bool {
	return slices.ContainsFunc(commands(), func(c command) bool { return c.name == name })
}

// env is what a command runs with.
type env struct {
	out, errw io.Writer
	stdin     io.Reader
	lookup    func(string) (string, bool)
	// interrupts delivers Ctrl-C.
	interrupts <-chan os.Signal
	cfgPath    string
	cfg        Config
	opts       options
}

// options are the flags every client command takes.
type options struct {
	json    bool
	server  string
	timeout time.Duration
}

// Run runs the client command args[0] and returns the exit code.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	e := &env{stdin: stdin, out: stdout, errw: stderr, lookup: os.LookupEnv, interrupts: sig}
	err := e.dispatch(commands(), "sylk", args)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "sylk: %v\n", err)
	}
	return exitCode(err)
}

// dispatch finds the command args[0] among cmds and runs it.
func (e *env) dispatch(cmds []command, prefix string, args []string) error {
	if len(args) == 0 || isHelp(args[0]) {
		printGroup(e.errw, prefix, cmds)
		if len(args) == 0 {
			return usageErrorf("%s: name a command", prefix)
		}
		return flag.ErrHelp
	}
	i := slices.IndexFunc(cmds, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		printGroup(e.errw, prefix, cmds)
		return usageErrorf("%s: unknown command %q", prefix, args[0])
	}
	c := cmds[i]
	if c.sub != nil {
		return e.dispatch(c.sub, prefix+" "+c.name, args[1:])
	}
	path, err := configPath(e.lookup)
	if err != nil {
		return err
	}
	e.cfgPath = path
	ctx := context.Background()
	if !c.interactive {
		var stop func()
		ctx, stop = e.interruptible(ctx)
		defer stop()
	}
	return c.run(ctx, e, args[1:])
}

func isHelp(s string) bool {
	return s == "-h" || s == "-help" || s == "--help" || s == "help"
}

func printGroup(w io.Writer, prefix string, cmds []command) {
	fmt.Fprintf(w, "Usage: %s COMMAND [flags]\n\nCommands:\n", prefix)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun \"%s COMMAND -h\" for a command's flags.\n", prefix)
}

// interruptible is ctx cancelled at Ctrl-C, with errInterrupted as cause.
func (e *env) interruptible(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-e.interrupts:
			cancel(errInterrupted)
		case <-done:
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

// flags starts a command's flag set with the options every command takes.
// usage is the line after the command's name; help says what it does.
func (e *env) flags(name, usage, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.errw)
	fs.BoolVar(&e.opts.json, "json", false, "print the server's JSON instead of text")
	fs.StringVar(&e.opts.server, "server", "", "server URL (default: the stored one, or SYLK_SERVER)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s %s\n\n%s\n\nFlags:\n", name, usage, help)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags given before, between or after the positional
// arguments, and returns the positional ones. "--" ends the flags.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &Error{Code: ExitUsage, Err: err}
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseN is parse that wants exactly n positional arguments, named by what.
func parseN(fs *flag.FlagSet, args []string, n int, what string) ([]string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) != n {
		fs.Usage()
		if n == 0 {
			return nil, usageErrorf("%s takes no arguments", fs.Name())
		}
		return nil, usageErrorf("%s needs %s", fs.Name(), what)
	}
	return pos, nil
}

// connect loads the configuration and returns a client for it.
func (e *env) connect() (*client, error) {
	cfg, err := loadConfig(e.cfgPath)
	if err != nil {
		return nil, err
	}
	e.cfg = cfg
	r := cfg.resolve(e.opts.server, e.lookup)
	if r.Server == "" || r.Key == "" {
		return nil, &Error{Code: ExitAuth, Err: errors.New("not logged in: run sylk login --server URL --key-stdin (or set SYLK_SERVER and SYLK_API_KEY)")}
	}
	return newClient(r.Server, r.Key), nil
}

// withTimeout bounds ctx by d when d is set.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// printJSON writes raw (the server's answer) and a newline.
func (e *env) printJSON(raw []byte) {
	fmt.Fprintln(e.out, strings.TrimSpace(string(raw)))
}

// request connects, sends one call and decodes its answer into out. Under
// --json it prints the answer as it came. It reports whether the command is
// done: true after an error or the JSON, false when the caller should print
// out as text.
func (e *env) request(ctx context.Context, method, path string, body, out proto.Message) (bool, error) {
	c, err := e.connect()
	if err != nil {
		return true, err
	}
	raw, err := c.call(ctx, method, path, body, out)
	if err != nil {
		return true, err
	}
	if e.opts.json {
		e.printJSON(raw)
		return true, nil
	}
	return false, nil
}

// readInput is the text of file, or of standard input for "-".
func (e *env) readInput(file string) (string, error) {
	if file == "-" {
		b, err := io.ReadAll(e.stdin)
		if err != nil {
			return "", fmt.Errorf("read standard input: %w", err)
		}
		return string(b), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", &Error{Code: ExitUsage, Err: fmt.Errorf("read %s: %w", file, err)}
	}
	return string(b), nil
}
