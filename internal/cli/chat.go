package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
)

const chatHelp = `Type a question or a request and press Enter; the agents' answers stream in.
When asked to choose, reply with the number or in your own words.
  /session        show the current session
  /session ID     continue another session
  /new            start a new session
  /repo ID        work on a registered repository in this session
  /quit           leave (Ctrl-D does too)
Ctrl-C stops waiting for the current answer. Other slash commands (/status, ...)
go to the Guide.
`

// chat is an interactive conversation's state.
type chat struct {
	e       *env
	c       *client
	session string
	// after is the last event seen: the next exchange reads from there.
	after uint64
	// pending is the latest clarification, which the next line answers.
	pending *eventv1.ClarificationRequested
}

// runChat reads lines from standard input, sends them and streams back
// what happens, until /quit or end of input.
func runChat(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk chat", "[flags]", "Talks to the agents in a session, one line at a time.\n\n"+chatHelp)
	session := fs.String("session", "", "session ID or name to continue (default: the current one)")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	ch := &chat{e: e, c: c}
	if ch.session, ch.after, err = e.startTurn(ctx, c, *session); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "Session %s. /help lists the commands; Ctrl-D leaves.\n", ch.session)
	lines := readLines(e)
	for {
		fmt.Fprint(e.out, "> ")
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(e.out)
				return nil
			}
			line = strings.TrimSpace(l)
		case <-e.interrupts:
			fmt.Fprintln(e.out, "\n(Ctrl-D or /quit leaves)")
			continue
		}
		quit, err := ch.handle(ctx, line)
		if quit || err != nil {
			return err
		}
	}
}

// readLines delivers standard input's lines until it ends.
func readLines(e *env) <-chan string {
	out := make(chan string)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(e.stdin)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	return out
}

// handle runs one line: a local command, or a message to the agents. It
// reports whether to leave; an error ends the chat only when the key no
// longer works.
func (ch *chat) handle(ctx context.Context, line string) (bool, error) {
	if line == "" {
		return false, nil
	}
	if done, quit, err := ch.local(ctx, line); done {
		if err != nil {
			fmt.Fprintf(ch.e.out, "error: %v\n", err)
		}
		return quit, nil
	}
	text, inReplyTo := ch.reply(line)
	turnCtx, stop := ch.e.interruptible(ctx)
	t, err := exchange(turnCtx, ch.c, ch.session, text, inReplyTo, ch.after, func(ev *eventv1.Event) {
		renderEvent(ch.e.out, ev)
	})
	stop()
	ch.after = max(ch.after, t.sequence)
	switch {
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(ch.e.out, "(stopped waiting)")
		return false, nil
	case exitCode(err) == ExitAuth:
		return true, err
	case err != nil:
		fmt.Fprintf(ch.e.out, "error: %v\n", err)
		return false, nil
	}
	ch.pending = nil
	if t.end == endClarify {
		ch.pending = t.event.GetClarificationRequested()
	}
	return false, nil
}

// reply turns a line into the message to send: an answer to the pending
// clarification (a number picks its choice), or a new message.
func (ch *chat) reply(line string) (string, string) {
	q := ch.pending
	if q == nil {
		return line, ""
	}
	if n, err := strconv.Atoi(line); err == nil && n >= 1 && n <= len(q.GetOptions()) {
		line = q.GetOptions()[n-1]
	}
	return line, q.GetClarification()
}

// local runs the chat's own slash commands. done says whether line was
// one; quit whether to leave.
func (ch *chat) local(ctx context.Context, line string) (done, quit bool, err error) {
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/quit", "/exit":
		return true, true, nil
	case "/help":
		fmt.Fprint(ch.e.out, chatHelp)
		return true, false, nil
	case "/session":
		if arg != "" {
			return true, false, ch.switchTo(ctx, sessionName(arg))
		}
		fmt.Fprintf(ch.e.out, "Session %s\n", ch.session)
		return true, false, nil
	case "/new":
		name, err := ch.e.newSession(ctx, ch.c)
		if err != nil {
			return true, false, err
		}
		return true, false, ch.switchTo(ctx, name)
	case "/repo":
		if arg == "" {
			return true, false, errors.New("/repo needs a repository ID (sylk repos list shows them)")
		}
		return true, false, ch.setRepo(ctx, arg)
	}
	return false, false, nil
}

// switchTo continues the session name from its newest event.
func (ch *chat) switchTo(ctx context.Context, name string) error {
	after, err := lastSequence(ctx, ch.c, name)
	if err != nil {
		return err
	}
	ch.session, ch.after, ch.pending = name, after, nil
	ch.e.rememberSession(name)
	fmt.Fprintf(ch.e.out, "Session %s\n", name)
	return nil
}

// setRepo makes the session work on a registered repository.
func (ch *chat) setRepo(ctx context.Context, repo string) error {
	name, err := setSessionRepo(ctx, ch.c, ch.session, repo)
	if err != nil {
		return err
	}
	fmt.Fprintf(ch.e.out, "This session works on %s.\n", name)
	return nil
}

// setSessionRepo sets the repository of session, by ID or name.
func setSessionRepo(ctx context.Context, c *client, session, repo string) (string, error) {
	if !strings.HasPrefix(repo, "repositories/") {
		repo = "repositories/" + repo
	}
	var resp guidev1.UpdateSessionResponse
	_, err := c.call(ctx, http.MethodPatch, "/v1/"+session+"?updateMask=repository",
		&guidev1.Session{Repository: repo}, &resp)
	return repo, err
}
