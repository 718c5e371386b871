// Package api serves UsageService and ProviderService (proto sylk.llm.v1)
// from the archivalist process, which owns usage and audit records: usage
// reports of the caller's tenant, the provider list, and the tenant's own
// provider keys (write-only, encrypted at rest, verified with a timeout).
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/creds"
	"sylk.dev/sylk/pkg/llm/provider"
	"sylk.dev/sylk/pkg/llm/usage"
	"sylk.dev/sylk/pkg/logx"
)

// Errors of the provider API; each call tells its own message.
var (
	// errAdminOnly refuses a call only admins may make.
	errAdminOnly = apierr.New(codes.PermissionDenied, "ADMIN_ROLE_REQUIRED", "only admins may do this")
	// errKeyRejected: the provider did not accept the key to store.
	errKeyRejected = apierr.FailedPrecondition("PROVIDER_KEY_REJECTED", "the provider did not accept the key")
)

// Server implements both services.
type Server struct {
	cfg   llm.Config
	cc    creds.Config
	usage *usage.Store
	creds *creds.Store
	log   *slog.Logger
	audit *audit.Log
}

// SetAudit records stored and deleted provider credentials in l.
func (s *Server) SetAudit(l *audit.Log) { s.audit = l }

// record appends r to the audit log; the credentials are stored already,
// so a failure is logged, not returned.
func (s *Server) record(ctx context.Context, r audit.Record) {
	if s.audit == nil {
		return
	}
	if _, err := s.audit.Append(context.WithoutCancel(ctx), r); err != nil {
		s.log.ErrorContext(ctx, "audit provider credentials", logx.Err(err), slog.String("action", r.Action))
	}
}

// New builds the server on a pool of the llm schema (migrated).
func New(cfg llm.Config, cc creds.Config, db *pgxpool.Pool, log *slog.Logger) (*Server, error) {
	if err := errors.Join(cfg.Validate(), cc.Validate()); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("llm api: a database pool on the llm schema is required")
	}
	cs, err := creds.New(cc, db)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = logx.Discard()
	}
	return &Server{cfg: cfg, cc: cc, usage: usage.New(db), creds: cs, log: log.With(logx.KeyComponent, "llm-api")}, nil
}

// Usage returns the usage store (the gate's recorder in this process).
func (s *Server) Usage() *usage.Store { return s.usage }

// Register adds UsageService and ProviderService to g.
func (s *Server) Register(g *grpc.Server) {
	llmv1.RegisterUsageServiceServer(g, &usageServer{s: s})
	llmv1.RegisterProviderServiceServer(g, &providerServer{s: s})
}

type usageServer struct {
	llmv1.UnimplementedUsageServiceServer
	s *Server
}

func (u *usageServer) GetUsageReport(ctx context.Context, req *llmv1.GetUsageReportRequest) (*llmv1.GetUsageReportResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	q := usage.Query{Tenant: who.TenantID, Period: req.GetPeriod(), SessionID: req.GetSessionId(), Provider: req.GetProvider(), AgentType: req.GetAgentType()}
	// A member sees the calls made for them; an admin sees the tenant's
	// (groupBy=user splits them by user).
	if who.Role != identity.RoleAdmin {
		q.UserID = who.UserID
	}
	for _, g := range req.GetGroupBy() {
		// REST clients may send "provider,model" as one value.
		for _, part := range strings.Split(g, ",") {
			if p := strings.TrimSpace(part); p != "" {
				q.GroupBy = append(q.GroupBy, p)
			}
		}
	}
	if req.GetStartTime() != nil {
		q.Start = req.GetStartTime().AsTime()
	}
	if req.GetEndTime() != nil {
		q.End = req.GetEndTime().AsTime()
	}
	if !q.Start.IsZero() && !q.End.IsZero() && q.End.Before(q.Start) {
		return nil, apierr.Invalid("end_time", "must not be before start_time")
	}
	rep, err := u.s.usage.Report(ctx, q)
	if err != nil {
		return nil, apierr.Status(ctx, u.s.log, "usage report", err)
	}
	resp := &llmv1.GetUsageReportResponse{Total: row(rep.Total), Currency: "USD"}
	for _, r := range rep.Rows {
		resp.Rows = append(resp.Rows, row(r))
	}
	return resp, nil
}

func row(r usage.Row) *llmv1.UsageRow {
	return &llmv1.UsageRow{Group: r.Group, Requests: r.Requests, InputTokens: r.InputTokens, OutputTokens: r.OutputTokens,
		TotalTokens: r.InputTokens + r.OutputTokens, CostUsd: r.CostUSD, AvgLatencyMs: r.AvgLatencyMs}
}

type providerServer struct {
	llmv1.UnimplementedProviderServiceServer
	s *Server
}

var known = []string{llm.Anthropic, llm.OpenAI, llm.Gemini, llm.Local}

var display = map[string]string{llm.Anthropic: "Anthropic", llm.OpenAI: "OpenAI", llm.Gemini: "Google Gemini", llm.Local: "local"}

func remote(name string) bool {
	return name == llm.Anthropic || name == llm.OpenAI || name == llm.Gemini
}

func (s *Server) describe(name string, stored *creds.Info) *llmv1.Provider {
	pc := s.cfg.For(name)
	p := &llmv1.Provider{Name: name, IsDefault: s.cfg.DefaultProvider() == name, Aliases: map[string]string(pc.Aliases(name)), BaseUrl: publicURL(pc.BaseURL)}
	switch {
	case name == llm.Local:
		p.Configured, p.CredentialSource = true, "offline"
	case stored != nil:
		p.Configured, p.CredentialSource = true, "tenant"
		p.CredentialsUpdateTime = timestamppb.New(stored.UpdatedAt)
		if stored.BaseURL != "" {
			p.BaseUrl = publicURL(stored.BaseURL)
		}
	case pc.Configured():
		p.Configured, p.CredentialSource = true, "server"
	default:
		p.CredentialSource = "none"
	}
	for _, m := range llm.Catalogue(name) {
		p.Models = append(p.Models, &llmv1.Model{Id: m.ID, DisplayName: m.Name, MaxContextTokens: int64(m.MaxContext),
			InputPricePerMillion: m.InputPricePerM, OutputPricePerMillion: m.OutputPricePerM})
	}
	return p
}

// publicURL is a base URL as callers may see it: without a user, password,
// query or fragment, which may carry a credential.
func publicURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

func (ps *providerServer) ListProviders(ctx context.Context, _ *llmv1.ListProvidersRequest) (*llmv1.ListProvidersResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := ps.s.creds.List(ctx, who.TenantID)
	if err != nil {
		return nil, apierr.Status(ctx, ps.s.log, "list providers", err)
	}
	stored := map[string]*creds.Info{}
	for i := range infos {
		stored[infos[i].Provider] = &infos[i]
	}
	resp := &llmv1.ListProvidersResponse{}
	for _, n := range known {
		resp.Providers = append(resp.Providers, ps.s.describe(n, stored[n]))
	}
	return resp, nil
}

func checkProvider(name string) error {
	if !remote(name) {
		return apierr.Invalid("provider", "want anthropic, openai or gemini, not %q", name)
	}
	return nil
}

// checkBaseURL accepts an empty base URL or an absolute http(s) one with a
// host and no credentials in it.
func checkBaseURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https":
		return apierr.Invalid("base_url", "want an absolute http or https URL, such as https://host/v1")
	case u.User != nil:
		return apierr.Invalid("base_url", "must not carry credentials (use api_key)")
	}
	return nil
}

func (ps *providerServer) SetProviderCredentials(ctx context.Context, req *llmv1.SetProviderCredentialsRequest) (*llmv1.SetProviderCredentialsResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	if who.Role != identity.RoleAdmin {
		return nil, errAdminOnly.Withf("only admins can set provider credentials")
	}
	if err := checkProvider(req.GetProvider()); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetApiKey()) == "" {
		return nil, apierr.Invalid("api_key", "is required")
	}
	if req.GetBaseUrl() != "" && req.GetProvider() != llm.OpenAI && req.GetProvider() != llm.Anthropic && req.GetProvider() != llm.Gemini {
		return nil, apierr.Invalid("base_url", "is not supported for this provider")
	}
	if err := checkBaseURL(req.GetBaseUrl()); err != nil {
		return nil, err
	}
	if !ps.s.creds.CanStore() {
		return nil, creds.ErrNoKey.Withf("storing provider keys needs an encryption key: set llm.credentials.key-file (a Secret) on the archivalist")
	}
	if !req.GetSkipVerify() {
		if ok, msg := ps.s.verify(ctx, req.GetProvider(), creds.Secret{APIKey: req.GetApiKey(), BaseURL: req.GetBaseUrl()}); !ok {
			return nil, errKeyRejected.Withf("%s", msg).With("provider", req.GetProvider())
		}
	}
	info, err := ps.s.creds.Set(ctx, who.TenantID, req.GetProvider(), creds.Secret{APIKey: strings.TrimSpace(req.GetApiKey()), BaseURL: req.GetBaseUrl()}, who.UserID)
	if err != nil {
		return nil, apierr.Status(ctx, ps.s.log, "store provider credentials", err)
	}
	ps.s.record(ctx, audit.Record{TenantID: who.TenantID, Actor: who.UserID, Action: audit.ActionCredentialsStored,
		Target: "providers/" + req.GetProvider() + "/credentials", Details: map[string]string{"provider": req.GetProvider()}})
	ps.s.log.InfoContext(ctx, "provider credentials stored", slog.String("provider", req.GetProvider()), slog.String("tenant_id", who.TenantID), slog.String("user_id", who.UserID))
	return &llmv1.SetProviderCredentialsResponse{Provider: ps.s.describe(req.GetProvider(), &info)}, nil
}

func (ps *providerServer) DeleteProviderCredentials(ctx context.Context, req *llmv1.DeleteProviderCredentialsRequest) (*llmv1.DeleteProviderCredentialsResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	if who.Role != identity.RoleAdmin {
		return nil, errAdminOnly.Withf("only admins can delete provider credentials")
	}
	if err := checkProvider(req.GetProvider()); err != nil {
		return nil, err
	}
	ok, err := ps.s.creds.Delete(ctx, who.TenantID, req.GetProvider())
	if err != nil {
		return nil, apierr.Status(ctx, ps.s.log, "delete provider credentials", err)
	}
	if !ok {
		return nil, apierr.NotFound("provider credentials", req.GetProvider()).Withf("no stored credentials for %s", req.GetProvider())
	}
	ps.s.record(ctx, audit.Record{TenantID: who.TenantID, Actor: who.UserID, Action: audit.ActionCredentialsDeleted,
		Target: "providers/" + req.GetProvider() + "/credentials", Details: map[string]string{"provider": req.GetProvider()}})
	return &llmv1.DeleteProviderCredentialsResponse{}, nil
}

func (ps *providerServer) VerifyProvider(ctx context.Context, req *llmv1.VerifyProviderRequest) (*llmv1.VerifyProviderResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetProvider() == llm.Local {
		return &llmv1.VerifyProviderResponse{Valid: true, Message: "the local provider is offline and needs no key"}, nil
	}
	if err := checkProvider(req.GetProvider()); err != nil {
		return nil, err
	}
	if err := checkBaseURL(req.GetBaseUrl()); err != nil {
		return nil, err
	}
	// The server calls the URL it is given: only those who may store one
	// may have it called.
	if req.GetBaseUrl() != "" && who.Role != identity.RoleAdmin {
		return nil, errAdminOnly.Withf("only admins can verify a key against a base_url of their choice")
	}
	sec := creds.Secret{APIKey: strings.TrimSpace(req.GetApiKey()), BaseURL: req.GetBaseUrl()}
	if sec.APIKey == "" {
		stored, ok, err := ps.s.creds.Get(ctx, who.TenantID, req.GetProvider())
		switch {
		case err != nil:
			return nil, apierr.Status(ctx, ps.s.log, "read provider credentials", err)
		case ok:
			sec = stored
		default:
			o, err := ps.s.cfg.OptionsFor(req.GetProvider())
			if err != nil {
				return nil, apierr.Status(ctx, ps.s.log, "verify provider", err)
			}
			sec = creds.Secret{APIKey: o.APIKey, BaseURL: o.BaseURL}
		}
	}
	valid, msg := ps.s.verify(ctx, req.GetProvider(), sec)
	return &llmv1.VerifyProviderResponse{Valid: valid, Message: msg}, nil
}

// verify checks a key by listing models within the verify timeout. The
// message never contains the key.
func (s *Server) verify(ctx context.Context, name string, sec creds.Secret) (bool, string) {
	if sec.APIKey == "" && !(name == llm.OpenAI && sec.BaseURL != "") {
		return false, fmt.Sprintf("no API key configured for %s", display[name])
	}
	o, err := s.cfg.OptionsFor(name)
	if err != nil {
		return false, "server configuration error"
	}
	o.APIKey = sec.APIKey
	if sec.BaseURL != "" {
		// A base URL other than the configured one is a tenant's.
		o.PublicOnly = sec.BaseURL != o.BaseURL && !s.cc.PrivateBaseURLs
		o.BaseURL = sec.BaseURL
	}
	p, err := provider.Build(name, o)
	if err != nil {
		return false, "unknown provider"
	}
	v, ok := p.(llm.Verifier)
	if !ok {
		return false, "this provider cannot be verified"
	}
	vctx, cancel := context.WithTimeout(ctx, s.cc.VerifyTimeout)
	defer cancel()
	err = v.Verify(vctx)
	if err == nil {
		return true, fmt.Sprintf("%s accepted the key", display[name])
	}
	msg := err.Error()
	if sec.APIKey != "" {
		msg = strings.ReplaceAll(msg, sec.APIKey, "[redacted]")
	}
	switch tier := llm.DefaultClassifier().Classify(err); {
	case tier == llm.TierUserFixable:
		return false, fmt.Sprintf("Invalid API key for %s (%s)", display[name], msg)
	case errors.Is(err, context.DeadlineExceeded):
		return false, fmt.Sprintf("%s did not answer within %s", display[name], s.cc.VerifyTimeout)
	default:
		return false, fmt.Sprintf("could not verify the key with %s: %s", display[name], msg)
	}
}
