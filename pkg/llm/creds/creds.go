// Package creds stores provider API keys per tenant, encrypted at rest with
// AES-256-GCM under a key from configuration (a Kubernetes Secret mounted as
// a file, or a variable), and resolves a tenant's provider from them
// (D-09..D-16). Plaintext keys are never logged, returned or given to
// agents: they only ever become a provider client inside the gate.
package creds

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/llm"
)

// Config locates the encryption key.
type Config struct {
	// Key is the base64 of 32 random bytes (SYLK_LLM_CREDENTIALS_KEY).
	Key string
	// KeyFile holds the same, for a mounted Kubernetes Secret.
	KeyFile string
	// VerifyTimeout bounds a key check (D-11: 10s).
	VerifyTimeout time.Duration
	// CacheTTL is how long a tenant's provider client is reused.
	CacheTTL time.Duration
	// PrivateBaseURLs lets a tenant's stored base URL lead to the service's
	// own networks (loopback, private, link-local addresses).
	PrivateBaseURLs bool
}

// RegisterFlags registers -llm.credentials.*.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Key, "llm.credentials.key", "", "base64 of the 32-byte AES-256-GCM key that encrypts stored provider keys (prefer the variable or the key file)")
	fs.StringVar(&c.KeyFile, "llm.credentials.key-file", "", "file holding the credentials encryption key (a mounted Kubernetes Secret)")
	fs.DurationVar(&c.VerifyTimeout, "llm.credentials.verify-timeout", 10*time.Second, "timeout of a provider key check")
	fs.DurationVar(&c.CacheTTL, "llm.credentials.cache-ttl", 30*time.Second, "how long a tenant's provider client is reused before its key is re-read")
	fs.BoolVar(&c.PrivateBaseURLs, "llm.credentials.private-base-urls", false, "let tenants' base URLs lead to this service's own networks (loopback, private and link-local addresses), where every tenant admin may reach them; without it such calls are refused")
}

// Validate checks the key decodes when given.
func (c Config) Validate() error {
	var errs []error
	if c.Key != "" {
		if _, err := decodeKey(c.Key); err != nil {
			errs = append(errs, fmt.Errorf("llm.credentials.key: %w", err))
		}
	}
	if c.VerifyTimeout <= 0 {
		errs = append(errs, errors.New("llm.credentials.verify-timeout: must be positive"))
	}
	return errors.Join(errs...)
}

func decodeKey(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("not base64")
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("want 32 bytes, got %d", len(b))
	}
	return b, nil
}

// Errors, which a client sees as they are (FailedPrecondition: the
// server's configuration must change).
var (
	// ErrNoKey means no encryption key is configured, so keys cannot be stored.
	ErrNoKey = apierr.FailedPrecondition("CREDENTIALS_KEY_MISSING",
		"no credentials encryption key configured (llm.credentials.key or llm.credentials.key-file)")
	// ErrWrongKey means a stored key was encrypted under another key.
	ErrWrongKey = apierr.FailedPrecondition("CREDENTIALS_KEY_MISMATCH", "stored credential was encrypted with a different key")
)

// Store keeps encrypted keys in the llm schema.
type Store struct {
	db    *pgxpool.Pool
	aead  cipher.AEAD
	keyID string
}

// New opens the store; without a key it can list but not store or read keys.
func New(cfg Config, db *pgxpool.Pool) (*Store, error) {
	s := &Store{db: db}
	raw := cfg.Key
	if raw == "" && cfg.KeyFile != "" {
		b, err := os.ReadFile(cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("read llm.credentials.key-file: %w", err)
		}
		raw = string(b)
	}
	if raw == "" {
		return s, nil
	}
	key, err := decodeKey(raw)
	if err != nil {
		return nil, fmt.Errorf("llm credentials key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	s.aead, err = cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(key)
	s.keyID = hex.EncodeToString(sum[:4])
	return s, nil
}

// CanStore reports whether an encryption key is configured.
func (s *Store) CanStore() bool { return s.aead != nil }

func aad(tenant, provider string) []byte {
	return []byte("sylk-llm-credential|" + tenant + "|" + provider)
}

// Secret is a decrypted credential. It has no String method on purpose:
// callers hand it to a provider constructor and nothing else.
type Secret struct {
	APIKey  string
	BaseURL string
}

// Info describes a stored credential without its value.
type Info struct {
	Provider  string
	BaseURL   string
	UpdatedBy string
	UpdatedAt time.Time
}

// Set encrypts and stores tenant's key for provider.
func (s *Store) Set(ctx context.Context, tenant, provider string, sec Secret, user string) (Info, error) {
	if s.aead == nil {
		return Info{}, ErrNoKey
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Info{}, err
	}
	ct := s.aead.Seal(nil, nonce, []byte(sec.APIKey), aad(tenant, provider))
	var info Info
	err := s.db.QueryRow(ctx, `INSERT INTO provider_credentials (tenant_id, provider, ciphertext, nonce, key_id, base_url, updated_by, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, now())
		ON CONFLICT (tenant_id, provider) DO UPDATE SET ciphertext = EXCLUDED.ciphertext, nonce = EXCLUDED.nonce,
			key_id = EXCLUDED.key_id, base_url = EXCLUDED.base_url, updated_by = EXCLUDED.updated_by, updated_at = now()
		RETURNING provider, base_url, updated_by, updated_at`,
		tenant, provider, ct, nonce, s.keyID, sec.BaseURL, user).Scan(&info.Provider, &info.BaseURL, &info.UpdatedBy, &info.UpdatedAt)
	if err != nil {
		return Info{}, fmt.Errorf("store credential: %w", err)
	}
	s.notify(ctx, tenant)
	return info, nil
}

// ChangeChannel is the PostgreSQL notification channel on which Set and
// Delete announce a tenant whose keys changed (the payload is the tenant
// ID, never a key), so every process drops its cached clients at once.
const ChangeChannel = "sylk_llm_credentials"

// notify announces a change. A lost notification only delays the change
// by the resolvers' cache TTL, so its error is not the caller's.
func (s *Store) notify(ctx context.Context, tenant string) {
	_, _ = s.db.Exec(ctx, `SELECT pg_notify($1, $2)`, ChangeChannel, tenant)
}

// Get decrypts tenant's key for provider.
func (s *Store) Get(ctx context.Context, tenant, provider string) (Secret, bool, error) {
	var ct, nonce []byte
	var keyID string
	var sec Secret
	err := s.db.QueryRow(ctx, `SELECT ciphertext, nonce, key_id, base_url FROM provider_credentials WHERE tenant_id = $1 AND provider = $2`,
		tenant, provider).Scan(&ct, &nonce, &keyID, &sec.BaseURL)
	if errors.Is(err, pgx.ErrNoRows) {
		return Secret{}, false, nil
	}
	if err != nil {
		return Secret{}, false, fmt.Errorf("load credential: %w", err)
	}
	if s.aead == nil {
		return Secret{}, false, ErrNoKey
	}
	if keyID != s.keyID {
		return Secret{}, false, ErrWrongKey
	}
	pt, err := s.aead.Open(nil, nonce, ct, aad(tenant, provider))
	if err != nil {
		return Secret{}, false, ErrWrongKey
	}
	sec.APIKey = string(pt)
	return sec, true, nil
}

// Delete removes tenant's key for provider.
func (s *Store) Delete(ctx context.Context, tenant, provider string) (bool, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM provider_credentials WHERE tenant_id = $1 AND provider = $2`, tenant, provider)
	if err != nil {
		return false, fmt.Errorf("delete credential: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	s.notify(ctx, tenant)
	return true, nil
}

// List describes tenant's stored credentials.
func (s *Store) List(ctx context.Context, tenant string) ([]Info, error) {
	rows, err := s.db.Query(ctx, `SELECT provider, base_url, updated_by, updated_at FROM provider_credentials WHERE tenant_id = $1 ORDER BY provider`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Info, error) {
		var i Info
		err := r.Scan(&i.Provider, &i.BaseURL, &i.UpdatedBy, &i.UpdatedAt)
		return i, err
	})
}

// Builder makes a provider client from options (provider.Build).
type Builder func(name string, o llm.ProviderOptions) (llm.Provider, error)

// Providers resolves a tenant's own provider clients from stored keys, for
// the gate (gate.Deps.Tenants). Clients are cached for CacheTTL.
type Providers struct {
	store *Store
	build Builder
	base  func(provider string) llm.ProviderOptions
	ttl   time.Duration
	// private is Config.PrivateBaseURLs.
	private bool

	mu    sync.Mutex
	cache map[string]cached
	// gen counts invalidations, so a read that raced one is not cached.
	gen uint64
}

type cached struct {
	p   llm.Provider
	ok  bool
	exp time.Time
}

// NewProviders returns a resolver; base gives each provider's configured
// options (aliases, limits), onto which the tenant's key and URL go. Of cfg
// it takes CacheTTL and PrivateBaseURLs.
func NewProviders(store *Store, build Builder, base func(provider string) llm.ProviderOptions, cfg Config) *Providers {
	ttl := cfg.CacheTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	return &Providers{store: store, build: build, base: base, ttl: ttl, private: cfg.PrivateBaseURLs, cache: map[string]cached{}}
}

// Get returns tenant's own client for provider, or ok false when the tenant
// stored no key for it.
func (p *Providers) Get(ctx context.Context, tenant, provider string) (llm.Provider, bool, error) {
	k := tenant + "\x00" + provider
	p.mu.Lock()
	c, hit := p.cache[k]
	gen := p.gen
	p.mu.Unlock()
	if hit && time.Now().Before(c.exp) {
		return c.p, c.ok, nil
	}
	sec, ok, err := p.store.Get(ctx, tenant, provider)
	if err != nil {
		return nil, false, err
	}
	var prov llm.Provider
	if ok {
		o := p.base(provider)
		o.APIKey = sec.APIKey
		if sec.BaseURL != "" {
			o.BaseURL, o.PublicOnly = sec.BaseURL, !p.private
		}
		if prov, err = p.build(provider, o); err != nil {
			return nil, false, err
		}
	}
	p.mu.Lock()
	if p.gen == gen {
		p.cache[k] = cached{p: prov, ok: ok, exp: time.Now().Add(p.ttl)}
	}
	p.mu.Unlock()
	return prov, ok, nil
}

// Forget drops a cached client (after Set or Delete).
func (p *Providers) Forget(tenant, provider string) {
	p.mu.Lock()
	delete(p.cache, tenant+"\x00"+provider)
	p.gen++
	p.mu.Unlock()
}

// ForgetTenant drops every cached client of tenant.
func (p *Providers) ForgetTenant(tenant string) {
	prefix := tenant + "\x00"
	p.mu.Lock()
	for k := range p.cache {
		if strings.HasPrefix(k, prefix) {
			delete(p.cache, k)
		}
	}
	p.gen++
	p.mu.Unlock()
}

func (p *Providers) forgetAll() {
	p.mu.Lock()
	clear(p.cache)
	p.gen++
	p.mu.Unlock()
}

// Listen keeps the cache in step with stored keys across processes: on its
// own connection (cfg, e.g. the llm pool's ConnConfig) it listens on
// ChangeChannel and drops a tenant's cached clients when the tenant's keys
// are stored or deleted anywhere. It returns once listening, or the error
// of the first connection; it then runs until the returned function, which
// stops it and waits, is called. After
// a lost connection it reconnects with backoff and drops the whole cache,
// since changes may have been missed meanwhile; the TTL bounds staleness
// until then.
func (p *Providers) Listen(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger) (func(), error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conn, err := listen(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("listen for credential changes: %w", err)
	}
	// ctx bounds the first connection only (it may be a startup timeout).
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := 100 * time.Millisecond
		for {
			if conn != nil {
				err := p.receive(ctx, conn)
				_ = conn.Close(context.WithoutCancel(ctx))
				conn = nil
				if ctx.Err() != nil {
					return
				}
				log.Warn("llm credential change listener lost its connection; reconnecting", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			c, err := listen(ctx, cfg)
			if err != nil {
				backoff = min(2*backoff, 10*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			conn = c
			p.forgetAll()
		}
	}()
	return func() { cancel(); <-done }, nil
}

func listen(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ChangeChannel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

func (p *Providers) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		p.ForgetTenant(n.Payload)
	}
}
