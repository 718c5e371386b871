package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
)

// runAsk asks one question and waits for what ends its exchange.
func runAsk(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk ask", `"QUESTION" [flags]`,
		"Sends one message and waits for the answer, which is printed with its sources.\n"+
			"Without --session the current session is used (one is created when there is none).\n"+
			"A question that needs a clarification prints the choices and exits 6: answer with\n"+
			"sylk ask --reply-to CLARIFICATION \"choice\" (or the choice's number).")
	session := fs.String("session", "", "session ID or name to ask in")
	replyTo := fs.String("reply-to", "", "the clarification (sessions/…/clarifications/…) this message answers")
	repo := fs.String("repo", "", "repository ID the session works on (set on the session)")
	verbose := fs.Bool("v", false, "also print routing and the other events on the way")
	fs.DurationVar(&e.opts.timeout, "timeout", 5*time.Minute, "how long to wait for the answer (0 waits for ever)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	text := strings.TrimSpace(strings.Join(pos, " "))
	if text == "" {
		fs.Usage()
		return usageErrorf("sylk ask needs a question")
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, e.opts.timeout)
	defer cancel()
	if *replyTo != "" && *session == "" {
		// A clarification's name starts with its session's.
		*session, _, _ = strings.Cut(*replyTo, "/clarifications/")
	}
	name, after, err := e.startTurn(ctx, c, *session)
	if err != nil {
		return err
	}
	if *replyTo != "" {
		if text, err = choice(ctx, c, name, *replyTo, text); err != nil {
			return err
		}
	}
	if *repo != "" {
		if _, err := setSessionRepo(ctx, c, name, *repo); err != nil {
			return err
		}
	}
	t, err := exchange(ctx, c, name, text, *replyTo, after, e.verboseShow(*verbose))
	if err != nil {
		return err
	}
	return e.finishAsk(t)
}

// finishAsk prints how an exchange ended and returns its exit status.
func (e *env) finishAsk(t turn) error {
	if e.opts.json {
		e.printJSON(t.raw)
	} else {
		renderEvent(e.out, t.event)
	}
	switch t.end {
	case endClarify:
		if !e.opts.json {
			if q := t.event.GetClarificationRequested().GetClarification(); q != "" {
				fmt.Fprintf(e.errw, "Answer with: sylk ask --reply-to %s \"CHOICE\"\n", q)
			}
		}
		return &Error{Code: ExitClarify, Err: errors.New("the question needs a clarification")}
	case endUnanswered:
		return errors.New(firstNonEmpty(t.event.GetText(), "the question was not answered"))
	}
	return nil
}

// verboseShow renders the events on the way to the answer on standard
// error when verbose is set; the answer itself goes to standard output.
func (e *env) verboseShow(verbose bool) func(*eventv1.Event) {
	if !verbose || e.opts.json {
		return nil
	}
	return func(ev *eventv1.Event) {
		if _, ends := endOf(ev); !ends {
			renderEvent(e.errw, ev)
		}
	}
}

// choice turns a number into the clarification's choice of that number;
// other text is the answer as it is.
func choice(ctx context.Context, c *client, session, clarification, text string) (string, error) {
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 {
		return text, nil
	}
	var resp guidev1.ListClarificationsResponse
	if _, err := c.call(ctx, http.MethodGet, "/v1/"+session+"/clarifications", nil, &resp); err != nil {
		return "", err
	}
	for _, q := range resp.GetClarifications() {
		if q.GetName() == clarification && n <= len(q.GetOptions()) {
			return q.GetOptions()[n-1], nil
		}
	}
	return text, nil
}
