package cli

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
)

func historyCommands() []command {
	return []command{
		{name: "record", summary: "store an entry (a decision, a failure, a note) in the history", run: runHistoryRecord},
		{name: "search", summary: "search the history", run: runHistorySearch},
		{name: "list", summary: "list history entries, newest first", run: runHistoryList},
	}
}

// sessionID is the id of a session given as an id or a name.
func sessionID(s string) string { return strings.TrimPrefix(s, "sessions/") }

// runHistoryRecord stores one entry with the Archivalist.
func runHistoryRecord(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk history record", `--category CATEGORY --title "TITLE" [CONTENT|-] [flags]`,
		"Stores an entry in the tenant's history (the Archivalist's). The content is the\n"+
			"argument, or standard input for \"-\".")
	category := fs.String("category", "", `the kind of entry: decision, failure, note, ... (required)`)
	title := fs.String("title", "", "a one-line title (required)")
	session := fs.String("session", "", "one of your sessions it belongs to (default: none)")
	repo := fs.String("repo", "", "the registered repository it is about")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *category == "" || *title == "" || len(pos) > 1 {
		fs.Usage()
		return usageErrorf("sylk history record needs --category, --title and at most one content argument")
	}
	entry := &archivalistv1.Entry{Category: *category, Title: *title, SessionId: sessionID(*session)}
	if *repo != "" {
		entry.Repository = repoName(*repo)
	}
	if len(pos) == 1 {
		if entry.Content = pos[0]; pos[0] == "-" {
			if entry.Content, err = e.readInput("-"); err != nil {
				return err
			}
		}
	}
	var resp archivalistv1.CreateEntryResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/entries", entry, &resp); done {
		return err
	}
	fmt.Fprintf(e.out, "Recorded %s.\n", resp.GetEntry().GetName())
	return nil
}

// historyFilters are the filters search and list share.
type historyFilters struct {
	category, repo, window string
}

func (e *env) historyFlags(name, usage, help string) (*historyFilters, *flag.FlagSet) {
	fs := e.flags(name, usage, help)
	f := &historyFilters{}
	fs.StringVar(&f.category, "category", "", "only this category (decision, failure, architect_workflow, ...)")
	fs.StringVar(&f.repo, "repo", "", "only entries about this repository")
	fs.StringVar(&f.window, "window", "", "only this time window: today, yesterday, this_week, last_week,\nlast_month, last_year, recent (7 days)")
	return f, fs
}

func runHistorySearch(ctx context.Context, e *env, args []string) error {
	f, fs := e.historyFlags("sylk history search", `"QUERY" [flags]`,
		"Searches the tenant's history: every session's by default, or one session's.")
	session := fs.String("session", "", "only this session's entries")
	limit := fs.Int("n", 10, "at most this many entries")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	query := strings.TrimSpace(strings.Join(pos, " "))
	if query == "" {
		fs.Usage()
		return usageErrorf("sylk history search needs a query")
	}
	req := &archivalistv1.SearchEntriesRequest{Query: query, Category: f.category, TimeScope: f.window,
		PageSize: int32(*limit), SessionId: sessionID(*session), CrossSession: *session == ""}
	if f.repo != "" {
		req.Repository = repoName(f.repo)
	}
	var resp archivalistv1.SearchEntriesResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/entries:search", req, &resp); done {
		return err
	}
	if len(resp.GetHits()) == 0 {
		fmt.Fprintln(e.out, "No matches.")
	}
	for i, h := range resp.GetHits() {
		fmt.Fprintf(e.out, "%d. %s\n", i+1, entryLine(h.GetEntry()))
		writeIndented(e.out, firstNonEmpty(h.GetSnippet(), oneLine(h.GetEntry().GetContent())), 6)
	}
	return nil
}

func runHistoryList(ctx context.Context, e *env, args []string) error {
	f, fs := e.historyFlags("sylk history list", "[flags]", "Lists the tenant's history entries, newest first.")
	session := fs.String("session", "", "only this session's entries")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	q := url.Values{"pageSize": {"100"}}
	for k, v := range map[string]string{"category": f.category, "timeScope": f.window, "sessionId": sessionID(*session)} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.repo != "" {
		q.Set("repository", repoName(f.repo))
	}
	var resp archivalistv1.ListEntriesResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/entries?"+q.Encode(), nil, &resp); done {
		return err
	}
	if len(resp.GetEntries()) == 0 {
		fmt.Fprintln(e.out, "No entries.")
	}
	for _, en := range resp.GetEntries() {
		fmt.Fprintln(e.out, entryLine(en))
	}
	return nil
}

// entryLine is "entries/x  2026-11-28 10:00  decision  Title".
func entryLine(en *archivalistv1.Entry) string {
	when := ""
	if t := en.GetCreateTime(); t != nil {
		when = t.AsTime().Local().Format(time.DateTime[:16])
	}
	return fmt.Sprintf("%s  %s  %-12s %s", en.GetName(), when, en.GetCategory(), en.GetTitle())
}
