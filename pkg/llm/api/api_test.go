package api_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	llmv1 "sylk.dev/sylk/gen/go/sylk/llm/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/llm"
	"sylk.dev/sylk/pkg/llm/api"
	"sylk.dev/sylk/pkg/llm/creds"
	"sylk.dev/sylk/pkg/testenv"
)

func setup(t *testing.T, withKey bool) (llmv1.UsageServiceClient, llmv1.ProviderServiceClient) {
	u, p, _ := setupServer(t, withKey)
	return u, p
}

// setupServer is setup, with the server itself (for its usage store).
func setupServer(t *testing.T, withKey bool) (llmv1.UsageServiceClient, llmv1.ProviderServiceClient, *api.Server) {
	t.Helper()
	return setupConfig(t, withKey, nil)
}

// setupConfig is setupServer with the flags args.
func setupConfig(t *testing.T, withKey bool, args []string) (llmv1.UsageServiceClient, llmv1.ProviderServiceClient, *api.Server) {
	t.Helper()
	pool, _ := testenv.Postgres(t, "llm", migrations.FS("llm"))
	var cfg llm.Config
	var cc creds.Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cc.RegisterFlags(fs)
	require.NoError(t, fs.Parse(args))
	if withKey {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		cc.Key = base64.StdEncoding.EncodeToString(k)
	}
	s, err := api.New(cfg, cc, pool, nil)
	require.NoError(t, err)
	lis := bufconn.Listen(1 << 20)
	// The identity interceptor of pkg/grpcserver puts the caller in the
	// context from metadata; this test server does the same.
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if id, ok := identity.FromIncoming(ctx); ok {
			ctx = identity.NewContext(ctx, id)
		}
		return h(ctx, req)
	}))
	s.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///buf", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return llmv1.NewUsageServiceClient(conn), llmv1.NewProviderServiceClient(conn), s
}

func as(t *testing.T, role string) context.Context { return asUser(t, "u1", role) }

func asUser(t *testing.T, user, role string) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return identity.AppendOutgoing(ctx, identity.Identity{TenantID: "t1", UserID: user, Role: role})
}

// A member's usage report holds the calls made for them; an admin's, the
// tenant's, which groupBy=user splits by user.
func TestUsageScope(t *testing.T) {
	t.Parallel()
	usage, _, s := setupServer(t, false)
	for _, r := range []llm.UsageRecord{
		{Attribution: llm.Attribution{TenantID: "t1", UserID: "u1", SessionID: "s1"}, Provider: "local", Model: "local", InputTokens: 10, Outcome: "ok"},
		{Attribution: llm.Attribution{TenantID: "t1", UserID: "u2", SessionID: "s2"}, Provider: "local", Model: "local", InputTokens: 20, Outcome: "ok"},
		{Attribution: llm.Attribution{TenantID: "t2", UserID: "u1", SessionID: "s3"}, Provider: "local", Model: "local", InputTokens: 40, Outcome: "ok"},
	} {
		require.NoError(t, s.Usage().Record(t.Context(), r))
	}
	own, err := usage.GetUsageReport(asUser(t, "u1", "member"), &llmv1.GetUsageReportRequest{GroupBy: []string{"session"}})
	require.NoError(t, err)
	require.EqualValues(t, 10, own.GetTotal().GetInputTokens())
	require.Len(t, own.GetRows(), 1)
	require.Equal(t, "s1", own.GetRows()[0].GetGroup()["session"])

	all, err := usage.GetUsageReport(asUser(t, "u1", "admin"), &llmv1.GetUsageReportRequest{GroupBy: []string{"user"}})
	require.NoError(t, err)
	require.EqualValues(t, 30, all.GetTotal().GetInputTokens(), "the tenant's, not another tenant's")
	require.Len(t, all.GetRows(), 2)
	require.Equal(t, "u2", all.GetRows()[1].GetGroup()["user"])
}

func TestCodes(t *testing.T) {
	t.Parallel()
	usage, providers := setup(t, false)
	tests := []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"no identity", func() error { _, err := usage.GetUsageReport(t.Context(), &llmv1.GetUsageReportRequest{}); return err }, codes.Unauthenticated, "CALLER_IDENTITY_MISSING"},
		{"bad group", func() error {
			_, err := usage.GetUsageReport(as(t, "viewer"), &llmv1.GetUsageReportRequest{GroupBy: []string{"colour"}})
			return err
		}, codes.InvalidArgument, "INVALID_FIELD"},
		{"window ends before it starts", func() error {
			_, err := usage.GetUsageReport(as(t, "viewer"), &llmv1.GetUsageReportRequest{
				StartTime: timestamppb.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), EndTime: timestamppb.New(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))})
			return err
		}, codes.InvalidArgument, "INVALID_FIELD"},
		{"member cannot set keys", func() error {
			_, err := providers.SetProviderCredentials(as(t, "member"), &llmv1.SetProviderCredentialsRequest{Provider: "openai", ApiKey: "x"})
			return err
		}, codes.PermissionDenied, "ADMIN_ROLE_REQUIRED"},
		{"unknown provider", func() error {
			_, err := providers.SetProviderCredentials(as(t, "admin"), &llmv1.SetProviderCredentialsRequest{Provider: "nope", ApiKey: "x"})
			return err
		}, codes.InvalidArgument, "INVALID_FIELD"},
		{"empty key", func() error {
			_, err := providers.SetProviderCredentials(as(t, "admin"), &llmv1.SetProviderCredentialsRequest{Provider: "openai"})
			return err
		}, codes.InvalidArgument, "INVALID_FIELD"},
		{"no encryption key", func() error {
			_, err := providers.SetProviderCredentials(as(t, "admin"), &llmv1.SetProviderCredentialsRequest{Provider: "openai", ApiKey: "x", SkipVerify: true})
			return err
		}, codes.FailedPrecondition, "CREDENTIALS_KEY_MISSING"},
		{"base url of another scheme", func() error {
			_, err := providers.SetProviderCredentials(as(t, "admin"), &llmv1.SetProviderCredentialsRequest{Provider: "openai", ApiKey: "x", BaseUrl: "gopher://x", SkipVerify: true})
			return err
		}, codes.InvalidArgument, "INVALID_FIELD"},
		{"base url with credentials", func() error {
			_, err := providers.SetProviderCredentials(as(t, "admin"), &llmv1.SetProviderCredentialsRequest{Provider: "openai", ApiKey: "x", BaseUrl: "https://u:p@host/v1", SkipVerify: true})
			return err
		}, codes.InvalidArgument, "INVALID_FIELD"},
		{"verify a relative base url", func() error {
			_, err := providers.VerifyProvider(as(t, "admin"), &llmv1.VerifyProviderRequest{Provider: "openai", ApiKey: "x", BaseUrl: "/v1"})
			return err
		}, codes.InvalidArgument, "INVALID_FIELD"},
		{"member verifies against a base url", func() error {
			_, err := providers.VerifyProvider(as(t, "member"), &llmv1.VerifyProviderRequest{Provider: "openai", ApiKey: "x", BaseUrl: "http://127.0.0.1:5432"})
			return err
		}, codes.PermissionDenied, "ADMIN_ROLE_REQUIRED"},
		{"nothing to delete", func() error {
			_, err := providers.DeleteProviderCredentials(as(t, "admin"), &llmv1.DeleteProviderCredentialsRequest{Provider: "gemini"})
			return err
		}, codes.NotFound, "PROVIDER_CREDENTIALS_NOT_FOUND"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Equal(t, tt.code, status.Code(err))
			require.Equal(t, tt.reason, apierr.Reason(err))
		})
	}
	v, err := providers.VerifyProvider(as(t, "member"), &llmv1.VerifyProviderRequest{Provider: "anthropic"})
	require.NoError(t, err)
	require.False(t, v.GetValid())
	require.Contains(t, v.GetMessage(), "no API key configured for Anthropic")
	v, err = providers.VerifyProvider(as(t, "member"), &llmv1.VerifyProviderRequest{Provider: "local"})
	require.NoError(t, err)
	require.True(t, v.GetValid())
}

func TestStoreWithoutVerify(t *testing.T) {
	t.Parallel()
	_, providers := setup(t, true)
	r, err := providers.SetProviderCredentials(as(t, "admin"), &llmv1.SetProviderCredentialsRequest{Provider: "gemini", ApiKey: "AIza-secret", SkipVerify: true})
	require.NoError(t, err)
	require.Equal(t, "tenant", r.GetProvider().GetCredentialSource())
	require.NotContains(t, r.String(), "AIza-secret")
	list, err := providers.ListProviders(as(t, "viewer"), &llmv1.ListProvidersRequest{})
	require.NoError(t, err)
	require.Equal(t, "tenant", list.GetProviders()[2].GetCredentialSource())
	require.True(t, list.GetProviders()[3].GetIsDefault(), "local is the default with nothing configured")
}

// A configured base URL is listed to every caller without what would let
// them use it: its user and password, and its query.
func TestListProvidersHidesBaseURLCredentials(t *testing.T) {
	t.Parallel()
	_, p, _ := setupConfig(t, false, []string{"-llm.openai.base-url", "https://proxy:s3cret@llm.example.com/v1?api-key=k3y"})
	resp, err := p.ListProviders(as(t, identity.RoleViewer), &llmv1.ListProvidersRequest{})
	require.NoError(t, err)
	var got string
	for _, pr := range resp.GetProviders() {
		if pr.GetName() == llm.OpenAI {
			got = pr.GetBaseUrl()
		}
	}
	require.Equal(t, "https://llm.example.com/v1", got)
}

// A keyless OpenAI-compatible server's failure is reported as it is: with
// no key, there is nothing to redact.
func TestVerifyKeylessServerSaysWhy(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":{"message":"models are off","type":"permission_error"}}`))
	}))
	t.Cleanup(hs.Close)
	_, p, _ := setupConfig(t, false, []string{"-llm.openai.base-url", hs.URL + "/v1"})
	resp, err := p.VerifyProvider(as(t, identity.RoleMember), &llmv1.VerifyProviderRequest{Provider: llm.OpenAI})
	require.NoError(t, err)
	require.False(t, resp.GetValid())
	require.Contains(t, resp.GetMessage(), "HTTP 403")
	require.NotContains(t, resp.GetMessage(), "[redacted]")
}
