package librarian

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/publicnet"
)

// maxURLLen bounds a repository URL.
const maxURLLen = 2048

// clonePath checks a git URL to register and returns where its clone will
// live in the data directory (the repository's operation clones it there,
// fetchRepository). file:// URLs must name a directory under the tenant's
// allowed roots, as paths do (roots.go); https, ssh and git URLs are cloned
// as given, a member's only when they resolve to public addresses.
func (s *Service) clonePath(ctx context.Context, id identity.Identity, repoID, raw string) (string, error) {
	if len(raw) > maxURLLen || strings.ContainsAny(raw, "\x00\n\r") || strings.HasPrefix(raw, "-") {
		return "", apierr.Invalid("repository.url", "is not a git URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", apierr.Invalid("repository.url", "is not a URL")
	}
	switch u.Scheme {
	case "file":
		if _, err := s.checkNewPath(id.TenantID, "repository.url", u.Path); err != nil {
			return "", err
		}
	case "https", "http", "ssh", "git":
		if u.Host == "" {
			return "", apierr.Invalid("repository.url", "has no host")
		}
		if _, hasPassword := u.User.Password(); hasPassword {
			return "", apierr.Invalid("repository.url", "carries a password; give the librarian's git its credentials instead")
		}
	default:
		return "", apierr.Invalid("repository.url", "scheme %q is not file, https, http, ssh or git", u.Scheme)
	}
	if s.cfg.DataDir == "" {
		return "", errNoDataDir
	}
	if s.publicOnly(id, raw) {
		if _, err = publicRemote(ctx, raw, u); err != nil {
			return "", err
		}
	}
	// The tenant's clone directory exists before its path is resolved, so
	// that the path stored is the one the clone resolves to.
	if err := os.MkdirAll(filepath.Join(s.cfg.DataDir, tenantDir(id.TenantID)), 0o755); err != nil {
		return "", fmt.Errorf("create data directory: %w", err)
	}
	_, own := s.cloneDirs(id.TenantID)
	return filepath.Join(own, repoID), nil
}

// publicOnly reports whether the remote raw, registered by id, must resolve
// to public addresses: a member's network remote, unless every member may
// name internal ones.
func (s *Service) publicOnly(id identity.Identity, raw string) bool {
	return !strings.HasPrefix(strings.ToLower(raw), "file:") && id.Role != identity.RoleAdmin && !s.cfg.MembersPrivateRemotes
}

// gitClone clones raw into dest, creating dest's parent; a failed clone
// leaves nothing behind.
func gitClone(ctx context.Context, raw, dest string, config ...string) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if _, err := gitOutputConfig(ctx, filepath.Dir(dest), config, "clone", "--quiet", "--", raw, dest); err != nil {
		_ = os.RemoveAll(dest)
		return fmt.Errorf("clone failed: %s", firstLine(err.Error()))
	}
	return nil
}

// fetchRepository brings a repository registered by URL up to date: a pull
// into its clone, or, when the clone is gone (the data directory is only a
// cache of the remote: an emptyDir after a restart, say), a new clone at
// the same place, inside the tenant's own directory.
func (s *Service) fetchRepository(ctx context.Context, tenant string, r repository) error {
	// A member's remote is checked again, and pinned, at every fetch: its
	// name may resolve elsewhere by now.
	var pin []string
	if r.PublicRemote && !s.cfg.MembersPrivateRemotes {
		u, err := url.Parse(r.URL)
		if err != nil {
			return fmt.Errorf("its URL: %w", err)
		}
		if pin, err = publicRemote(ctx, r.URL, u); err != nil {
			return errors.New(status.Convert(err).Message())
		}
	}
	if _, err := os.Lstat(r.Path); !errors.Is(err, os.ErrNotExist) {
		_, err := gitOutputConfig(ctx, r.Path, pin, "pull", "--quiet", "--ff-only")
		return err
	}
	if dd, own := s.cloneDirs(tenant); dd == "" || !within(own, r.Path) {
		return fmt.Errorf("its clone %s is gone and not in this librarian's data directory", r.Path)
	}
	return gitClone(ctx, r.URL, r.Path, pin...)
}

// cloneDirs returns the data directory, symlinks resolved, and the
// tenant's own clone directory in it; both "" without a data directory.
func (s *Service) cloneDirs(tenant string) (dataDir, tenants string) {
	if s.cfg.DataDir == "" {
		return "", ""
	}
	dd, err := filepath.EvalSymlinks(s.cfg.DataDir)
	if err != nil {
		dd = filepath.Clean(s.cfg.DataDir)
	}
	return dd, filepath.Join(dd, tenantDir(tenant))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return truncateRunes(s, 300)
}

// tenantDir is the directory, under the data directory, of a tenant's
// clones: a digest, so that a tenant id never shapes a path.
func tenantDir(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(sum[:8])
}

// publicRemote refuses a remote whose host is, or resolves to, an address
// of the librarian's own networks (loopback, private, link-local, shared,
// unspecified or multicast): a member could otherwise have the librarian
// reach the services and stores beside it, or a cloud's metadata address.
// It returns the clone's configuration that pins the host to the address
// checked (pinRemote), so that a second lookup cannot answer differently.
func publicRemote(ctx context.Context, raw string, u *url.URL) ([]string, error) {
	host := u.Hostname()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return nil, apierr.FailedPrecondition(reasonRemoteUnresolved, "repository.url: the host %q could not be resolved", host)
	}
	for _, a := range addrs {
		if !publicnet.Addr(a) {
			return nil, apierr.New(codes.PermissionDenied, reasonAdminOnly,
				"repository.url: %s is an address of the librarian's own networks; only admins may register such a remote (librarian.members-private-remotes)", a)
		}
	}
	return pinRemote(raw, u, addrs[0], sshCommand(ctx))
}

// sshCommand is the ssh command git would run for this service: the
// GIT_SSH_COMMAND of its environment, else the core.sshCommand of its git
// configuration, else ssh. A pin adds to it (gitOutputConfig then sets it
// in place of GIT_SSH_COMMAND).
func sshCommand(ctx context.Context) string {
	if c := strings.TrimSpace(os.Getenv("GIT_SSH_COMMAND")); c != "" {
		return c
	}
	out, err := exec.CommandContext(ctx, "git", "-C", "/", "config", "--get", "core.sshCommand").Output()
	if c := strings.TrimSpace(string(out)); err == nil && c != "" {
		return c
	}
	return "ssh"
}

// sshHostName is what an ssh or git remote's host may be to be pinned: a
// DNS name, which the pin puts in ssh's command line.
var sshHostName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// pinRemote is the clone's configuration that has git reach the remote raw
// (parsed as u) at addr, the address checked, rather than look its host up
// again. For http(s) the host is resolved to addr and no redirect is
// followed. For ssh and git the URL's scheme and authority are rewritten to
// the address (url.<pinned>.insteadOf); ssh, run as ssh (the command git
// would run), still checks the host key of the name (HostKeyAlias).
func pinRemote(raw string, u *url.URL, addr netip.Addr, ssh string) ([]string, error) {
	addr = addr.Unmap()
	host := addr.String()
	if addr.Is6() {
		host = "[" + host + "]"
	}
	switch u.Scheme {
	case "http", "https":
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		// Redirects could lead anywhere: none are followed.
		return []string{"http.followRedirects=false", "http.curloptResolve=" + u.Hostname() + ":" + port + ":" + host}, nil
	case "ssh", "git":
	default:
		return nil, nil
	}
	name := u.Hostname()
	if !sshHostName.MatchString(name) {
		return nil, apierr.Invalid("repository.url", "host %q is not a DNS name", name)
	}
	// The prefix is raw's own text up to the path, since insteadOf
	// compares text: scheme://[user@]host[:port]/.
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, apierr.Invalid("repository.url", "is not a URL")
	}
	authority, _, hasPath := strings.Cut(rest, "/")
	user, _, hasUser := strings.Cut(authority, "@")
	pinned := scheme + "://"
	if hasUser {
		pinned += user + "@"
	}
	pinned += host
	if p := u.Port(); p != "" {
		pinned += ":" + p
	}
	prefix := scheme + "://" + authority
	if hasPath {
		prefix, pinned = prefix+"/", pinned+"/"
	}
	pin := []string{"url." + pinned + ".insteadOf=" + prefix}
	if u.Scheme == "ssh" {
		pin = append(pin, "core.sshCommand="+ssh+" -o HostKeyAlias="+name)
	}
	return pin, nil
}
