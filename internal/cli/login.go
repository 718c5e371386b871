package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
)

// runLogin checks a key against the server and stores both.
func runLogin(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk login", "--server URL (--key-stdin | --key KEY)",
		"Checks the API key against the server and stores both in the user's configuration\n"+
			"directory, readable by the user only. The key is read from standard input with\n"+
			"--key-stdin, or from SYLK_API_KEY; --key puts it in the process list, avoid it.")
	key := fs.String("key", "", "the API key (prefer --key-stdin)")
	keyStdin := fs.Bool("key-stdin", false, "read the API key from standard input")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	cfg, err := loadConfig(e.cfgPath)
	if err != nil {
		return err
	}
	r := cfg.resolve(e.opts.server, e.lookup)
	switch {
	case *keyStdin:
		line, err := bufio.NewReader(e.stdin).ReadString('\n')
		if err != nil && line == "" {
			return usageErrorf("--key-stdin: no key on standard input")
		}
		r.Key = strings.TrimSpace(line)
	case *key != "":
		r.Key = *key
	}
	if r.Server == "" || r.Key == "" {
		fs.Usage()
		return usageErrorf("sylk login needs --server URL and a key (--key-stdin or SYLK_API_KEY)")
	}
	if u, err := url.Parse(r.Server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("--server %q: want an http:// or https:// URL", r.Server)
	}
	c := newClient(r.Server, r.Key)
	// Listing one's sessions needs no role beyond membership.
	if _, err := c.call(ctx, http.MethodGet, "/v1/sessions?pageSize=1", nil, &guidev1.ListSessionsResponse{}); err != nil {
		return fmt.Errorf("the key was not accepted: %w", err)
	}
	if r.Server != cfg.Server {
		r.Session = ""
	}
	if err := saveConfig(e.cfgPath, Config{Server: r.Server, Key: r.Key, Session: r.Session}); err != nil {
		return err
	}
	if e.opts.json {
		e.printJSON(fmt.Appendf(nil, `{"server":%q,"config":%q}`, r.Server, e.cfgPath))
		return nil
	}
	fmt.Fprintf(e.out, "Logged in to %s. The key is stored in %s.\n", r.Server, e.cfgPath)
	return nil
}

// runLogout removes the stored key (the server address stays).
func runLogout(_ context.Context, e *env, args []string) error {
	fs := e.flags("sylk logout", "", "Forgets the stored API key; the server address stays.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	cfg, err := loadConfig(e.cfgPath)
	if err != nil {
		return err
	}
	cfg.Key, cfg.Session = "", ""
	if err := saveConfig(e.cfgPath, cfg); err != nil {
		return err
	}
	fmt.Fprintln(e.out, "Logged out.")
	return nil
}

// sessionName turns an id or a name into "sessions/{id}".
func sessionName(s string) string {
	if strings.HasPrefix(s, "sessions/") {
		return s
	}
	return "sessions/" + s
}

// session is the session to talk in: the flag's, else the stored one, else
// a new one (stored for the next command).
func (e *env) session(ctx context.Context, c *client, flagValue string) (string, error) {
	if flagValue != "" {
		return sessionName(flagValue), nil
	}
	if e.cfg.Session != "" {
		return e.cfg.Session, nil
	}
	return e.newSession(ctx, c)
}

// newSession creates a session and stores it as the current one.
func (e *env) newSession(ctx context.Context, c *client) (string, error) {
	var resp guidev1.CreateSessionResponse
	if _, err := c.call(ctx, http.MethodPost, "/v1/sessions", &guidev1.Session{DisplayName: "sylk cli"}, &resp); err != nil {
		return "", fmt.Errorf("create a session: %w", err)
	}
	name := resp.GetSession().GetName()
	if name == "" {
		return "", errors.New("create a session: the server returned no session name")
	}
	e.rememberSession(name)
	return name, nil
}

// rememberSession stores name as the current session when the stored
// configuration is the one in use (not one given by SYLK_* variables alone).
func (e *env) rememberSession(name string) {
	cfg, err := loadConfig(e.cfgPath)
	if err != nil || cfg.Key == "" || cfg.Session == name {
		return
	}
	cfg.Session = name
	if err := saveConfig(e.cfgPath, cfg); err != nil {
		fmt.Fprintf(e.errw, "sylk: could not remember the session: %v\n", err)
	}
	e.cfg.Session = name
}
