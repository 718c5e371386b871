package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
)

func providerCommands() []command {
	return []command{
		{name: "list", summary: "list the model providers and where their keys come from", run: runProvidersList},
		{name: "set", summary: "store the tenant's key for a provider (admins)", run: runProvidersSet},
		{name: "verify", summary: "check a provider's key", run: runProvidersVerify},
		{name: "delete", summary: "remove the tenant's key for a provider (admins)", run: runProvidersDelete},
	}
}

func providerPath(name string) string { return "/v1/providers/" + url.PathEscape(name) }

func runProvidersList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk providers list", "[flags]",
		"Lists the model providers: whether each is configured, where its key comes from\n"+
			"(tenant, server, none, offline) and its models. Keys are never shown.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	var resp llmv1.ListProvidersResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/providers", nil, &resp); done {
		return err
	}
	for _, p := range resp.GetProviders() {
		def := ""
		if p.GetIsDefault() {
			def = "  (default)"
		}
		fmt.Fprintf(e.out, "%-10s %-13s key: %-8s %d models%s\n", p.GetName(), map[bool]string{true: "configured", false: "unconfigured"}[p.GetConfigured()],
			p.GetCredentialSource(), len(p.GetModels()), def)
	}
	return nil
}

// runProvidersSet stores the tenant's key, read from standard input so
// that it stays out of the shell's history and the process list.
func runProvidersSet(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk providers set", "PROVIDER --key-stdin [flags]",
		"Stores the tenant's key for a provider (anthropic, openai, gemini), encrypted on the\n"+
			"server, after checking it with the provider. The key is read from standard input. Admins only.")
	keyStdin := fs.Bool("key-stdin", false, "read the key from standard input (required)")
	baseURL := fs.String("base-url", "", "an OpenAI-compatible server's URL (provider openai)")
	skip := fs.Bool("skip-verify", false, "store the key without checking it")
	pos, err := parseN(fs, args, 1, "a provider")
	if err != nil {
		return err
	}
	if !*keyStdin {
		fs.Usage()
		return usageErrorf("sylk providers set needs --key-stdin (the key is never taken as an argument)")
	}
	key, err := e.readInput("-")
	if err != nil {
		return err
	}
	if key = strings.TrimSpace(key); key == "" {
		return usageErrorf("sylk providers set: no key on standard input")
	}
	req := &llmv1.SetProviderCredentialsRequest{ApiKey: key, BaseUrl: *baseURL, SkipVerify: *skip}
	var resp llmv1.SetProviderCredentialsResponse
	if done, err := e.request(ctx, http.MethodPut, providerPath(pos[0])+"/credentials", req, &resp); done {
		return err
	}
	fmt.Fprintf(e.out, "Stored the tenant's key for %s.\n", resp.GetProvider().GetName())
	return nil
}

// runProvidersVerify checks the key in use, or one from standard input.
func runProvidersVerify(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk providers verify", "PROVIDER [flags]",
		"Checks a provider's key in use (or, with --key-stdin, a key without storing it).\nExit 1 when the provider refuses it.")
	keyStdin := fs.Bool("key-stdin", false, "check the key read from standard input instead")
	baseURL := fs.String("base-url", "", "an OpenAI-compatible server's URL to check against")
	pos, err := parseN(fs, args, 1, "a provider")
	if err != nil {
		return err
	}
	req := &llmv1.VerifyProviderRequest{BaseUrl: *baseURL}
	if *keyStdin {
		key, err := e.readInput("-")
		if err != nil {
			return err
		}
		req.ApiKey = strings.TrimSpace(key)
	}
	var resp llmv1.VerifyProviderResponse
	if done, err := e.request(ctx, http.MethodPost, providerPath(pos[0])+":verify", req, &resp); done {
		if err == nil && !resp.GetValid() {
			return &Error{Code: ExitError, Err: fmt.Errorf("%s refused the key", pos[0])}
		}
		return err
	}
	if !resp.GetValid() {
		return &Error{Code: ExitError, Err: fmt.Errorf("%s refused the key: %s", pos[0], resp.GetMessage())}
	}
	fmt.Fprintf(e.out, "%s: the key works.\n", pos[0])
	return nil
}

func runProvidersDelete(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk providers delete", "PROVIDER [flags]", "Removes the tenant's key for a provider. Admins only.")
	pos, err := parseN(fs, args, 1, "a provider")
	if err != nil {
		return err
	}
	var resp llmv1.DeleteProviderCredentialsResponse
	if done, err := e.request(ctx, http.MethodDelete, providerPath(pos[0])+"/credentials", nil, &resp); done {
		return err
	}
	fmt.Fprintf(e.out, "Removed the tenant's key for %s.\n", pos[0])
	return nil
}

// runUsage prints the tenant's model usage and cost.
func runUsage(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk usage", "[flags]", "Prints the tenant's model usage (calls, tokens, cost in USD), in total and per group.")
	var groups stringList
	fs.Var(&groups, "by", "group by provider, model, agent, session, task or period (repeatable)")
	period := fs.String("period", "", "with --by period: hour, day, week or month")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	q := url.Values{"groupBy": groups}
	if *period != "" {
		q.Set("period", *period)
	}
	var resp llmv1.GetUsageReportResponse
	if done, err := e.request(ctx, http.MethodGet, "/v1/usage?"+q.Encode(), nil, &resp); done {
		return err
	}
	for _, r := range resp.GetRows() {
		fmt.Fprintln(e.out, usageLine(groupLabel(r.GetGroup()), r))
	}
	fmt.Fprintln(e.out, usageLine("total", resp.GetTotal()))
	return nil
}

func usageLine(label string, r *llmv1.UsageRow) string {
	return fmt.Sprintf("%-30s %6d calls %9d tokens  $%.4f", label, r.GetRequests(), r.GetTotalTokens(), r.GetCostUsd())
}

// groupLabel is "model=x provider=y", keys sorted.
func groupLabel(g map[string]string) string {
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + g[k]
	}
	return strings.Join(parts, " ")
}
