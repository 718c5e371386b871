package librarian

import (
	"context"
	"net/url"

	"github.com/jackc/pgx/v5"

	"sylk.dev/sylk/pkg/audit"
	"sylk.dev/sylk/pkg/identity"
)

// recordRegistered records in tx that the caller in ctx registered r in
// tenant: its path, or its URL without any user information.
func (s *Service) recordRegistered(ctx context.Context, tx pgx.Tx, tenant string, r repository) error {
	actor := "service:librarian"
	if id, ok := identity.FromContext(ctx); ok && id.Valid() && id.Role != identity.RoleService {
		actor = id.UserID
	}
	d := map[string]string{"path": r.Path}
	if r.URL != "" {
		d = map[string]string{"url": r.URL}
		if u, err := url.Parse(r.URL); err == nil {
			u.User = nil
			d["url"] = u.Redacted()
		}
	}
	d["display_name"] = r.DisplayName
	_, err := s.audit.AppendTx(ctx, tx, audit.Record{TenantID: tenant, Actor: actor, Action: audit.ActionRepositoryRegistered,
		Target: repositoryPrefix + r.ID, Details: d})
	return err
}
