package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "sylk.dev/sylk/gen/go/sylk/admin/v1"
)

func keyCommands() []command {
	return []command{
		{name: "list", summary: "list the tenant's API keys (never the keys themselves)", run: runKeysList},
		{name: "create", summary: "create an API key for a user of the tenant", run: runKeysCreate},
		{name: "revoke", summary: "revoke an API key by its ID", run: runKeysRevoke},
		{name: "rotate", summary: "replace an API key with a new one for the same user", run: runKeysRotate},
	}
}

func runKeysList(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk keys list", "[flags]", "Lists the tenant's API keys: ID, user, role, prefix, state. Needs an admin key.")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	var resp adminv1.ListKeysResponse
	raw, err := c.call(ctx, http.MethodGet, "/v1/keys", nil, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	for _, k := range resp.GetApiKeys() {
		fmt.Fprintf(e.out, "%s  %-16s %-7s %s…  %-8s %s\n", k.GetId(), k.GetUserId(), k.GetRole(), k.GetPrefix(), keyState(k), k.GetDescription())
	}
	return nil
}

func keyState(k *adminv1.ApiKey) string {
	switch {
	case k.GetRevokeTime() != nil && k.GetRevokeTime().AsTime().After(time.Now()):
		return "rotating" // it still works until its revoke time
	case k.GetRevokeTime() != nil:
		return "revoked"
	case k.GetExpireTime() != nil && k.GetExpireTime().AsTime().Before(time.Now()):
		return "expired"
	}
	return "active"
}

func runKeysCreate(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk keys create", "--user USER [flags]",
		"Creates an API key for a user of the tenant and prints it once: store it now.\nNeeds an admin key.")
	user := fs.String("user", "", "the user the key acts as (required)")
	role := fs.String("role", "", `"member" or "admin" (default: member)`)
	desc := fs.String("description", "", "what the key is for")
	ttl := fs.Duration("expires-in", 0, "the key stops working after this long (0: never)")
	if _, err := parseN(fs, args, 0, ""); err != nil {
		return err
	}
	if *user == "" {
		fs.Usage()
		return usageErrorf("sylk keys create needs --user")
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	req := &adminv1.CreateKeyRequest{UserId: *user, Role: *role, Description: *desc}
	if *ttl > 0 {
		req.ExpireTime = timestamppb.New(time.Now().Add(*ttl))
	}
	var resp adminv1.CreateKeyResponse
	raw, err := c.call(ctx, http.MethodPost, "/v1/keys", req, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	k := resp.GetApiKey()
	fmt.Fprintf(e.out, "%s\n", resp.GetKey())
	fmt.Fprintf(e.errw, "Created key %s for %s (%s). It is shown only now.\n", k.GetId(), k.GetUserId(), k.GetRole())
	return nil
}

func runKeysRevoke(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk keys revoke", "ID [flags]", "Revokes an API key by its ID: it stops working at once. Needs an admin key.")
	pos, err := parseN(fs, args, 1, "a key ID")
	if err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	var resp adminv1.RevokeKeyResponse
	raw, err := c.call(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(pos[0])+":revoke", &adminv1.RevokeKeyRequest{}, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	fmt.Fprintf(e.out, "Revoked %s.\n", resp.GetApiKey().GetId())
	return nil
}

func runKeysRotate(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk keys rotate", "ID [flags]",
		"Replaces an API key with a new one for the same user, role and description, and prints the new key once.\n"+
			"The old key stops at once, or after --grace. Members may rotate their own keys; admins any of the tenant's.")
	grace := fs.Duration("grace", 0, "how long the old key keeps working (at most 168h; 0: it stops at once)")
	ttl := fs.Duration("expires-in", 0, "the new key stops working after this long (0: the old key's lifetime, or never)")
	pos, err := parseN(fs, args, 1, "a key ID")
	if err != nil {
		return err
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	req := &adminv1.RotateKeyRequest{}
	if *grace > 0 {
		req.GracePeriod = durationpb.New(*grace)
	}
	if *ttl > 0 {
		req.ExpireTime = timestamppb.New(time.Now().Add(*ttl))
	}
	var resp adminv1.RotateKeyResponse
	raw, err := c.call(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(pos[0])+":rotate", req, &resp)
	if err != nil || e.opts.json {
		e.printIf(raw, err)
		return err
	}
	k, old := resp.GetApiKey(), resp.GetRotatedKey()
	fmt.Fprintf(e.out, "%s\n", resp.GetKey())
	fmt.Fprintf(e.errw, "Created key %s for %s (%s). It is shown only now. Key %s stops at %s.\n",
		k.GetId(), k.GetUserId(), k.GetRole(), old.GetId(), old.GetRevokeTime().AsTime().Local().Format(time.RFC3339))
	return nil
}
