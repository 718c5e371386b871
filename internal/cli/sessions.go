package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
)

func sessionCommands() []command {
	cmds := []command{
		{name: "list", summary: "list your sessions", run: runSessionsList},
		{name: "create", summary: "start a session (it becomes the current one)", run: runSessionsCreate},
		{name: "show", summary: "show a session (default: the current one)", run: runSessionsShow},
		{name: "active", summary: "show your active session on the server", run: runSessionsActive},
		{name: "switch", summary: "make a session your active and current one", run: runSessionsSwitch},
		{name: "context", summary: "show a session's working context", run: runSessionsContext},
		{name: "snapshot", summary: "show what suspending a session froze", run: runSessionsSnapshot},
	}
	for _, verb := range []string{"suspend", "resume", "complete", "activate"} {
		cmds = append(cmds, command{name: verb, summary: verb + " a session (default: the current one)",
			run: func(ctx context.Context, e *env, args []string) error { return e.sessionVerb(ctx, args, verb) }})
	}
	return cmds
}

func runSessionsList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk sessions list", "[flags]", "Lists your sessions, newest first; * marks the current one.")
	state := fs.String("state", "", "only sessions in this state: created, active, suspended, completed, failed")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	q := url.Values{"pageSize": {"100"}}
	if *state != "" {
		if _, ok := guidev1.SessionState_value["SESSION_STATE_"+strings.ToUpper(*state)]; !ok {
			return usageErrorf("sylk sessions list: unknown state %q", *state)
		}
		q.Set("state", "SESSION_STATE_"+strings.ToUpper(*state))
	}
	var resp guidev1.ListSessionsResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/sessions?"+q.Encode(), nil, &resp); done {
		return err
	}
	if len(resp.GetSessions()) == 0 {
		fmt.Fprintln(e.out, "No sessions: sylk sessions create, or just sylk chat.")
	}
	for _, s := range resp.GetSessions() {
		mark := " "
		if s.GetName() == e.cfg.Session {
			mark = "*"
		}
		fmt.Fprintf(e.out, "%s %s  %-10s %-20s %s\n", mark, s.GetName(), sessionState(s), s.GetDisplayName(), s.GetRepository())
	}
	return nil
}

func runSessionsCreate(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk sessions create", "[flags]", "Starts a session and makes it the current one (sylk chat, ask and plans use it).")
	name := fs.String("name", "", "a name for it")
	repo := fs.String("repo", "", "the repository it works on (default: the last one you set)")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	s := &guidev1.Session{DisplayName: *name}
	if *repo != "" {
		s.Repository = repoName(*repo)
	}
	var resp guidev1.CreateSessionResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/sessions", s, &resp); done {
		if err == nil {
			e.rememberSession(resp.GetSession().GetName())
		}
		return err
	}
	e.rememberSession(resp.GetSession().GetName())
	e.renderSession(resp.GetSession())
	return nil
}

// sessionArg is the session named in args, or the current one.
func (e *env) sessionArg(pos []string) (string, error) {
	if len(pos) == 1 {
		return sessionName(pos[0]), nil
	}
	if e.cfg.Session == "" {
		return "", usageErrorf("no current session: name one (sylk sessions list shows them)")
	}
	return e.cfg.Session, nil
}

func runSessionsShow(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk sessions show", "[SESSION] [flags]", "Shows a session: its state, name, repository and summary.")
	return e.onSession(ctx, fs.Name(), args, http.MethodGet, "", func(fsArgs []string) ([]string, error) { return parse(fs, fsArgs) })
}

func runSessionsActive(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk sessions active", "[flags]", "Shows your active session on the server.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	var resp guidev1.GetActiveSessionResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/sessions:active", nil, &resp); done {
		return err
	}
	e.renderSession(resp.GetSession())
	return nil
}

func runSessionsSwitch(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk sessions switch", "SESSION [flags]",
		"Makes a session your active one on the server (others active are suspended) and the current one here.")
	pos, err := parseN(fs, args, 1, "a session")
	if err != nil {
		return err
	}
	name := sessionName(pos[0])
	var resp guidev1.SwitchSessionResponse
	done, err := e.request(ctx, http.MethodPost, "/v1/"+name+":switch", &guidev1.SwitchSessionRequest{}, &resp)
	if err != nil {
		return err
	}
	e.rememberSession(resp.GetSession().GetName())
	if !done {
		e.renderSession(resp.GetSession())
		for _, s := range resp.GetSuspended() {
			fmt.Fprintf(e.out, "Suspended %s.\n", s.GetName())
		}
	}
	return nil
}

// sessionVerb suspends, resumes, completes or activates a session.
func (e *env) sessionVerb(ctx context.Context, args []string, verb string) error {
	fs := e.flags("sylk sessions "+verb, "[SESSION] [flags]", "Asks the server to "+verb+" a session (default: the current one).")
	return e.onSession(ctx, fs.Name(), args, http.MethodPost, ":"+verb, func(fsArgs []string) ([]string, error) { return parse(fs, fsArgs) })
}

// onSession parses [SESSION], calls method on it (with suffix, such as
// ":suspend") and prints the session the answer carries.
func (e *env) onSession(ctx context.Context, cmd string, args []string, method, suffix string, parseArgs func([]string) ([]string, error)) error {
	pos, err := parseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageErrorf("%s takes at most one session", cmd)
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	name, err := e.sessionArg(pos)
	if err != nil {
		return err
	}
	var body proto.Message
	if method == http.MethodPost {
		body = &emptypb.Empty{}
	}
	// Every state change answers {"session": ...}, as GetSession does.
	var resp guidev1.GetSessionResponse
	raw, err := c.call(ctx, method, "/v1/"+name+suffix, body, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	e.renderSession(resp.GetSession())
	return nil
}

func (e *env) renderSession(s *guidev1.Session) {
	fmt.Fprintf(e.out, "%s  %s  %s\n", s.GetName(), sessionState(s), s.GetDisplayName())
	if s.GetRepository() != "" {
		fmt.Fprintf(e.out, "  repository: %s\n", s.GetRepository())
	}
	if s.GetSummary() != "" {
		fmt.Fprintf(e.out, "  summary:    %s\n", oneLine(s.GetSummary()))
	}
}

func sessionState(s *guidev1.Session) string {
	return strings.ToLower(strings.TrimPrefix(s.GetState().String(), "SESSION_STATE_"))
}
