package mesh

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"sylk.dev/sylk/pkg/meshtls"
)

// Task commands reach whatever the worker's network reaches, the stores
// included, and never get the services' credentials. A store that takes a
// client without credentials is therefore open to every task: it could read
// and change any tenant's history, caches and messages. A service checks
// this at start and refuses to run beside such a store.

// StoresConfig says whether stores without credentials are accepted.
type StoresConfig struct {
	AllowAnonymous bool
}

// RegisterFlags registers -stores.allow-anonymous.
func (c *StoresConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.AllowAnonymous, "stores.allow-anonymous", false,
		"run even where PostgreSQL, Redis or NATS takes clients without credentials (only where no task command can reach them)")
}

// anonymousCheckTimeout bounds each attempt to connect without credentials.
const anonymousCheckTimeout = 3 * time.Second

// anonymousStores names the stores that take a client without the
// credentials in the configuration: PostgreSQL, Redis, and unless noNATS
// (the gateway's case) NATS.
func anonymousStores(ctx context.Context, common Common, noNATS bool) []string {
	var open []string
	if pgAnonymous(ctx, common.Postgres.DSN) {
		open = append(open, "PostgreSQL")
	}
	if redisAnonymous(ctx, common.Redis.URL, common.Redis.TLS) {
		open = append(open, "Redis")
	}
	if noNATS {
		return open
	}
	if natsAnonymous(common.NATS.URL, common.NATS.TLS) {
		open = append(open, "NATS")
	}
	return open
}

// checkStores returns an error naming the stores m uses that take clients
// without credentials, unless those are allowed.
func checkStores(ctx context.Context, common Common, m *module) error {
	if common.Stores.AllowAnonymous {
		return nil
	}
	if open := anonymousStores(ctx, common, m.rest); len(open) > 0 {
		return fmt.Errorf("%s accept clients without credentials: task commands, which reach what the worker reaches, "+
			"could read and change every tenant's data there; require credentials (deploy/README.md), "+
			"or pass -stores.allow-anonymous where no task command can reach them", strings.Join(open, ", "))
	}
	return nil
}

// pgAnonymous reports whether PostgreSQL takes a client without a password
// or client certificate: as the configured user or as postgres, on the
// postgres database, without the configuration's other options (which
// could only make the client stricter). A server that lets the client in
// far enough for PostgreSQL itself (not a pooler in front of it) to say
// that the database or the role does not exist asked for no credentials
// either.
func pgAnonymous(ctx context.Context, dsn string) bool {
	base, err := pgx.ParseConfig(dsn)
	if err != nil {
		return false
	}
	for _, user := range []string{base.User, "postgres"} {
		cfg := base.Copy()
		cfg.User, cfg.Password, cfg.Database = user, "", "postgres"
		cfg.RuntimeParams = map[string]string{}
		cfg.ConnectTimeout = anonymousCheckTimeout
		if cfg.TLSConfig != nil {
			cfg.TLSConfig.Certificates = nil
		}
		for _, fb := range cfg.Fallbacks {
			if fb.TLSConfig != nil {
				fb.TLSConfig.Certificates = nil
			}
		}
		cctx, cancel := context.WithTimeout(ctx, anonymousCheckTimeout)
		conn, err := pgx.ConnectConfig(cctx, cfg)
		cancel()
		if err == nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return true
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pastAuthentication[pgErr.Routine] {
			return true
		}
	}
	return false
}

// pastAuthentication are the server routines that refuse a session once
// its client has been authenticated: for a missing role or database.
var pastAuthentication = map[string]bool{"InitializeSessionUserId": true, "InitPostgres": true}

// anonymousTLS is the TLS configuration of a store's client without its
// certificate, which is a credential: the configured authorities only.
func anonymousTLS(t meshtls.StoreTLS, serverName string) *tls.Config {
	if !t.Enabled() {
		return nil
	}
	t.CertFile, t.KeyFile = "", ""
	cfg, err := t.ClientConfig(serverName)
	if err != nil {
		return nil
	}
	return cfg
}

// redisAnonymous reports whether Redis answers a client without a user,
// password or client certificate.
func redisAnonymous(ctx context.Context, raw string, tlsFiles meshtls.StoreTLS) bool {
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return false
	}
	opts.Username, opts.Password = "", ""
	if host, _, err := net.SplitHostPort(opts.Addr); err == nil && tlsFiles.Enabled() {
		opts.TLSConfig = anonymousTLS(tlsFiles, host)
	}
	if opts.TLSConfig != nil {
		opts.TLSConfig.Certificates = nil
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = anonymousCheckTimeout, anonymousCheckTimeout, anonymousCheckTimeout
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	defer c.Close()
	return c.Ping(ctx).Err() == nil
}

// natsAnonymous reports whether NATS takes a client without the user,
// password or token in the URL, nor a client certificate: any server of
// the list (each with or without its scheme, as the client takes them),
// tried one by one.
func natsAnonymous(raw string, tlsFiles meshtls.StoreTLS) bool {
	for _, p := range strings.Split(raw, ",") {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		u, err := url.Parse(p)
		if err != nil {
			continue
		}
		u.User = nil
		opts := []nats.Option{nats.Timeout(anonymousCheckTimeout), nats.NoReconnect(), nats.Name("sylk-anonymous-check")}
		if tc := anonymousTLS(tlsFiles, ""); tc != nil {
			opts = append(opts, nats.Secure(tc))
		}
		nc, err := nats.Connect(u.String(), opts...)
		if err == nil {
			nc.Close()
			return true
		}
	}
	return false
}
