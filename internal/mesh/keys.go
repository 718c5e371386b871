package mesh

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"sylk.dev/sylk/gateway"
	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/config"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/pgstore"
)

// cliActor is the audit log's actor of what an operator does with this
// command line (it talks to PostgreSQL directly).
const cliActor = "cli"

// keyFlags are the flags every key command takes.
type keyFlags struct {
	pg             pgstore.Config
	prefix, tenant string
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	k.pg.RegisterFlags(fs)
	fs.StringVar(&k.prefix, "postgres.schema-prefix", "", "prefix of every schema name")
	fs.StringVar(&k.tenant, "tenant", "default", "tenant of the keys")
}

// open opens the auth schema and the audit log.
func (k *keyFlags) open(ctx context.Context) (*gateway.Keys, func(), error) {
	if !(identity.Identity{TenantID: k.tenant, UserID: k.tenant}).Valid() {
		return nil, nil, errors.New("-tenant: letters, digits and . _ @ - only, at most 128 characters")
	}
	pool, err := OpenSchema(ctx, k.pg, k.prefix, authSchema)
	if err != nil {
		return nil, nil, err
	}
	apool, err := OpenSchema(ctx, k.pg, k.prefix, audit.Schema)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	log, err := audit.New(apool, Schema(k.prefix, audit.Schema))
	if err != nil {
		pool.Close()
		apool.Close()
		return nil, nil, err
	}
	return &gateway.Keys{DB: pool, Audit: log}, func() { pool.Close(); apool.Close() }, nil
}

func runCreateAPIKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sylk create-api-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kf keyFlags
	var user, role, desc string
	var ttl time.Duration
	kf.register(fs)
	fs.StringVar(&user, "user", "", "user the key acts as (created when missing)")
	fs.StringVar(&role, "role", identity.RoleMember, "role of a new user: admin, member or viewer")
	fs.StringVar(&desc, "description", "", "what the key is for")
	fs.DurationVar(&ttl, "expires-in", 0, "the key stops working after this long (0: never)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if user == "" {
		return errors.New("create-api-key: -user is required")
	}
	if ttl < 0 {
		return errors.New("create-api-key: -expires-in must not be negative")
	}
	keys, done, err := kf.open(ctx)
	if err != nil {
		return fmt.Errorf("create-api-key: %w", err)
	}
	defer done()
	spec := gateway.KeySpec{Tenant: kf.tenant, User: user, Role: role, Description: desc}
	if ttl > 0 {
		t := time.Now().Add(ttl)
		spec.ExpiresAt = &t
	}
	_, key, err := gateway.IssueAPIKey(ctx, keys.DB, keys.Audit, cliActor, spec)
	if err != nil {
		return fmt.Errorf("create-api-key: %w", err)
	}
	fmt.Fprintln(stdout, key)
	return nil
}

func runListAPIKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sylk list-api-keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kf keyFlags
	kf.register(fs)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	keys, done, err := kf.open(ctx)
	if err != nil {
		return fmt.Errorf("list-api-keys: %w", err)
	}
	defer done()
	list, err := gateway.ListAPIKeys(ctx, keys.DB, kf.tenant)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tUSER\tROLE\tPREFIX\tCREATED\tEXPIRES\tREVOKED\tDESCRIPTION")
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, k := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.UserID, k.Role, k.Prefix, when(&k.CreatedAt),
			when(k.ExpiresAt), when(k.RevokedAt), k.Description)
	}
	return w.Flush()
}

func runRevokeAPIKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sylk revoke-api-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kf keyFlags
	var id string
	kf.register(fs)
	fs.StringVar(&id, "id", "", "id of the key (list-api-keys shows it)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if id == "" {
		return errors.New("revoke-api-key: -id is required")
	}
	keys, done, err := kf.open(ctx)
	if err != nil {
		return fmt.Errorf("revoke-api-key: %w", err)
	}
	defer done()
	if err := gateway.RevokeAPIKeyAs(ctx, keys.DB, keys.Audit, cliActor, kf.tenant, id); err != nil {
		return fmt.Errorf("revoke-api-key: %w", err)
	}
	fmt.Fprintf(stdout, "revoked %s (gateways stop taking it within -gateway.auth-cache-ttl)\n", id)
	return nil
}
