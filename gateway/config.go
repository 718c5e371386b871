package gateway

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"sylk.dev/sylk/pkg/identity"
)

// Config configures the REST edge and the bootstrap admin key.
type Config struct {
	// ListenAddress is the HTTP address the gateway serves on.
	ListenAddress string
	// MaxBodyBytes is the largest request body accepted; larger bodies get 413.
	MaxBodyBytes int64
	// MaxDocumentBodyBytes is the body limit of POST /v1/documents, which
	// carries a whole document: the Academic's -academic.max-document-bytes
	// plus room for JSON escaping and the other fields.
	MaxDocumentBodyBytes int64
	// RequestTimeout bounds every non-streaming request.
	RequestTimeout time.Duration
	// IndexTimeout bounds a request that registers or indexes a repository
	// with wait set, waiting for the index (without wait it answers at once;
	// the index is an operation that outlives the request either way).
	IndexTimeout time.Duration
	// DrainTimeout is how long in-flight requests get to finish on shutdown.
	DrainTimeout time.Duration
	// ShutdownDelay is how long the gateway goes on serving once shutdown
	// begins, with /readyz answering 503, so that load balancers stop
	// sending requests before it stops taking them (the services'
	// -shutdown-delay; set by the process, not a flag of its own).
	ShutdownDelay time.Duration
	// SSEKeepalive is the interval of keepalive comments on event streams.
	SSEKeepalive time.Duration
	// AuthCacheTTL is how long a resolved API key is trusted without asking
	// the key store again: a revocation takes effect within it, on open
	// streams too. 0 asks on every request (and every SSEKeepalive on
	// open streams).
	AuthCacheTTL time.Duration
	// AuthFailAddrLimit and AuthFailKeyLimit are how many failed
	// authentications a client address and a key prefix may have within
	// AuthFailWindow before their requests get 429 (0: no limit).
	AuthFailAddrLimit int64
	AuthFailKeyLimit  int64
	AuthFailWindow    time.Duration

	// ReadHeaderTimeout bounds reading a request's headers, BodyTimeout
	// reading its body (from the start of the request; streams are not
	// bound once authenticated), IdleTimeout how long a kept-alive
	// connection may wait for its next request.
	ReadHeaderTimeout time.Duration
	BodyTimeout       time.Duration
	IdleTimeout       time.Duration

	// BootstrapKey is an admin API key stored (hashed) at start when set. It
	// is a secret: it is never logged.
	BootstrapKey string
	// BootstrapTenant and BootstrapUser own the bootstrap key.
	BootstrapTenant string
	BootstrapUser   string
}

// defaultDocumentBodyBytes is the Academic's default document limit
// (-academic.max-document-bytes, 2 MiB) twice over, for JSON escaping
// (every newline or quote of the content takes two bytes), plus 64 KiB for
// the other fields.
const defaultDocumentBodyBytes = 2*(2<<20) + 64<<10

// RegisterFlags registers the gateway and auth flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ListenAddress, "gateway.listen-address", ":8080", "HTTP listen address of the REST gateway")
	fs.Int64Var(&c.MaxBodyBytes, "gateway.max-body-bytes", 1<<20, "largest request body accepted (larger bodies get 413)")
	fs.Int64Var(&c.MaxDocumentBodyBytes, "gateway.max-document-body-bytes", defaultDocumentBodyBytes,
		"largest body of POST /v1/documents (a whole document): keep it above -academic.max-document-bytes plus JSON escaping")
	fs.DurationVar(&c.RequestTimeout, "gateway.request-timeout", 60*time.Second, "time limit of a non-streaming request")
	fs.DurationVar(&c.IndexTimeout, "gateway.index-timeout", time.Hour,
		"time limit of a request that registers or indexes a repository with wait=true, waiting for the index (without wait the call answers at once; the index goes on as an operation after either)")
	fs.DurationVar(&c.DrainTimeout, "gateway.drain-timeout", 15*time.Second, "time in-flight requests get to finish on shutdown")
	fs.DurationVar(&c.SSEKeepalive, "gateway.sse-keepalive", 15*time.Second, "interval of keepalive comments on server-sent event streams")
	fs.DurationVar(&c.AuthCacheTTL, "gateway.auth-cache-ttl", 5*time.Second, "how long a resolved API key is trusted before the key store is asked again (a revocation takes effect within it; 0 asks every time)")
	fs.Int64Var(&c.AuthFailAddrLimit, "gateway.auth-fail-addr-limit", 30, "failed authentications a client address may have within -gateway.auth-fail-window before it gets 429 (0: no limit)")
	fs.Int64Var(&c.AuthFailKeyLimit, "gateway.auth-fail-key-limit", 10, "failed authentications with keys of one prefix within -gateway.auth-fail-window before they get 429 (0: no limit)")
	fs.DurationVar(&c.AuthFailWindow, "gateway.auth-fail-window", 5*time.Minute, "window of the failed-authentication limits, from the first failure")
	fs.DurationVar(&c.ReadHeaderTimeout, "gateway.read-header-timeout", 10*time.Second, "time a client has to send a request's headers")
	fs.DurationVar(&c.BodyTimeout, "gateway.body-timeout", 30*time.Second, "time a client has to send a request's body, from the start of the request (the connection is closed after it)")
	fs.DurationVar(&c.IdleTimeout, "gateway.idle-timeout", 2*time.Minute, "time a kept-alive connection may wait for its next request")
	fs.StringVar(&c.BootstrapKey, "auth.bootstrap-key", "", "admin API key (sylk_...) stored at start when set; prefer the SYLK_AUTH_BOOTSTRAP_KEY environment variable")
	fs.StringVar(&c.BootstrapTenant, "auth.bootstrap-tenant", "default", "tenant of the bootstrap admin key")
	fs.StringVar(&c.BootstrapUser, "auth.bootstrap-user", "admin", "user of the bootstrap admin key")
}

// Validate checks the values and joins every problem. It never echoes the
// bootstrap key.
func (c Config) Validate() error {
	var errs []error
	if c.ListenAddress == "" {
		errs = append(errs, errors.New("gateway.listen-address: must be set"))
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("gateway.max-body-bytes: must be at least 1024, got %d", c.MaxBodyBytes))
	}
	if c.MaxDocumentBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("gateway.max-document-body-bytes: must be at least 1024, got %d", c.MaxDocumentBodyBytes))
	}
	if c.RequestTimeout <= 0 || c.IndexTimeout <= 0 {
		errs = append(errs, errors.New("gateway.request-timeout and gateway.index-timeout: must be positive"))
	}
	if c.AuthCacheTTL < 0 {
		errs = append(errs, errors.New("gateway.auth-cache-ttl: must not be negative"))
	}
	if c.AuthFailAddrLimit < 0 || c.AuthFailKeyLimit < 0 {
		errs = append(errs, errors.New("gateway.auth-fail-addr-limit and gateway.auth-fail-key-limit: must not be negative"))
	}
	if (c.AuthFailAddrLimit > 0 || c.AuthFailKeyLimit > 0) && c.AuthFailWindow < time.Second {
		errs = append(errs, errors.New("gateway.auth-fail-window: must be at least 1s"))
	}
	if c.ReadHeaderTimeout <= 0 || c.BodyTimeout <= 0 || c.IdleTimeout <= 0 {
		errs = append(errs, errors.New("gateway.read-header-timeout, gateway.body-timeout and gateway.idle-timeout: must be positive"))
	}
	if c.DrainTimeout < 0 {
		errs = append(errs, errors.New("gateway.drain-timeout: must not be negative"))
	}
	if c.SSEKeepalive <= 0 {
		errs = append(errs, errors.New("gateway.sse-keepalive: must be positive"))
	}
	if c.BootstrapKey != "" {
		if err := checkKeyFormat(c.BootstrapKey); err != nil {
			errs = append(errs, fmt.Errorf("auth.bootstrap-key: %w", err))
		}
	}
	if !idPattern(c.BootstrapTenant) {
		errs = append(errs, fmt.Errorf("auth.bootstrap-tenant: %q is not a valid tenant id (letters, digits, '_', '.', '@', '-'; at most 128)", c.BootstrapTenant))
	}
	if !idPattern(c.BootstrapUser) {
		errs = append(errs, fmt.Errorf("auth.bootstrap-user: %q is not a valid user id (letters, digits, '_', '.', '@', '-'; at most 128)", c.BootstrapUser))
	}
	return errors.Join(errs...)
}

// LogValue keeps the bootstrap key out of logs.
func (c Config) LogValue() slog.Value {
	key := ""
	if c.BootstrapKey != "" {
		key = "[redacted]"
	}
	return slog.GroupValue(
		slog.String("listen_address", c.ListenAddress),
		slog.Int64("max_body_bytes", c.MaxBodyBytes),
		slog.Int64("max_document_body_bytes", c.MaxDocumentBodyBytes),
		slog.Duration("request_timeout", c.RequestTimeout),
		slog.Duration("index_timeout", c.IndexTimeout),
		slog.Duration("drain_timeout", c.DrainTimeout),
		slog.Duration("sse_keepalive", c.SSEKeepalive),
		slog.Duration("auth_cache_ttl", c.AuthCacheTTL),
		slog.Int64("auth_fail_addr_limit", c.AuthFailAddrLimit),
		slog.Int64("auth_fail_key_limit", c.AuthFailKeyLimit),
		slog.Duration("auth_fail_window", c.AuthFailWindow),
		slog.Duration("read_header_timeout", c.ReadHeaderTimeout),
		slog.Duration("body_timeout", c.BodyTimeout),
		slog.Duration("idle_timeout", c.IdleTimeout),
		slog.String("bootstrap_key", key),
		slog.String("bootstrap_tenant", c.BootstrapTenant),
		slog.String("bootstrap_user", c.BootstrapUser),
	)
}

// idPattern reports whether s is a valid tenant or user id.
func idPattern(s string) bool {
	return identity.Identity{TenantID: s, UserID: s}.Valid()
}
