package librarian

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"sylk.dev/sylk/pkg/apierr"
)

// A repository registered by path (or by a file:// URL) must live under
// one of the directories the deployment allows its tenant: the roots of
// -librarian.allowed-roots for every tenant, and those given for that
// tenant alone. Without any, a tenant registers git URLs only. A path is
// checked as given before anything on the filesystem is looked at, then
// again with its symlinks resolved, so that a link under a root pointing
// elsewhere (to /etc, to another tenant's root) is refused; a refusal
// reads the same whether the path exists or not.

// Roots are the directories repositories may be registered under.
type Roots struct {
	// All are every tenant's.
	All []string
	// Tenants are each tenant's own, by tenant id.
	Tenants map[string][]string
}

// For is the roots of tenant: every tenant's, then its own.
func (r Roots) For(tenant string) []string {
	return append(slices.Clone(r.All), r.Tenants[tenant]...)
}

// Empty says whether no tenant may register a path.
func (r Roots) Empty() bool { return len(r.All) == 0 && len(r.Tenants) == 0 }

// String is the roots in the flag's syntax.
func (r *Roots) String() string {
	if r == nil {
		return ""
	}
	entries := slices.Clone(r.All)
	tenants := make([]string, 0, len(r.Tenants))
	for t := range r.Tenants {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	for _, t := range tenants {
		entries = append(entries, t+"="+strings.Join(r.Tenants[t], ":"))
	}
	return strings.Join(entries, ",")
}

// Set replaces the roots with those of v: comma-separated entries, each an
// absolute directory for every tenant or "tenant=/dir[:/dir...]" for one.
func (r *Roots) Set(v string) error {
	out := Roots{Tenants: map[string][]string{}}
	for _, entry := range strings.Split(v, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		tenant, dirs, forOne := strings.Cut(entry, "=")
		if !forOne {
			out.All = append(out.All, filepath.Clean(entry))
			continue
		}
		if tenant = strings.TrimSpace(tenant); tenant == "" {
			return fmt.Errorf("%q names no tenant before =", entry)
		}
		for _, d := range strings.Split(dirs, ":") {
			if d = strings.TrimSpace(d); d != "" {
				out.Tenants[tenant] = append(out.Tenants[tenant], filepath.Clean(d))
			}
		}
		if len(out.Tenants[tenant]) == 0 {
			return fmt.Errorf("%q names no directory for tenant %s", entry, tenant)
		}
	}
	if len(out.Tenants) == 0 {
		out.Tenants = nil
	}
	*r = out
	return nil
}

// validate reports roots that are not absolute paths.
func (r Roots) validate() error {
	var errs []error
	check := func(dir string) {
		if !filepath.IsAbs(dir) {
			errs = append(errs, fmt.Errorf("librarian.allowed-roots: %q is not an absolute path", dir))
		}
	}
	for _, d := range r.All {
		check(d)
	}
	for _, dirs := range r.Tenants {
		for _, d := range dirs {
			check(d)
		}
	}
	return errors.Join(errs...)
}

// reasonPathNotAllowed: the path is not under a directory the deployment
// allows the tenant, or the deployment allows no paths at all.
const reasonPathNotAllowed = "PATH_NOT_ALLOWED"

// checkNewPath checks a path a tenant asks to register (field names the
// request field) and returns it with its symlinks resolved.
func (s *Service) checkNewPath(tenant, field, p string) (string, error) {
	resolved, problem, refused := s.rootCheck(tenant, p)
	switch {
	case refused:
		return "", apierr.New(codes.PermissionDenied, reasonPathNotAllowed, "%s: %s", field, problem)
	case problem != "":
		return "", apierr.Invalid(field, "%s", problem)
	}
	return resolved, nil
}

// checkRoot validates a tenant's repository path and returns it with
// symlinks resolved, or a description of the problem.
func (s *Service) checkRoot(tenant, p string) (string, string) {
	resolved, problem, _ := s.rootCheck(tenant, p)
	return resolved, problem
}

// rootCheck is checkRoot that also says whether the path was refused for
// where it is (refused) rather than for what it is. Inside the data
// directory, where repositories registered by URL are cloned, a tenant
// reaches its own clones only.
func (s *Service) rootCheck(tenant, p string) (resolved, problem string, refused bool) {
	switch {
	case p == "":
		return "", "required", false
	case len(p) > maxPathLen:
		return "", fmt.Sprintf("must be at most %d bytes", maxPathLen), false
	case !plainText(p):
		return "", "must be valid UTF-8 without NUL", false
	case !filepath.IsAbs(p):
		return "", fmt.Sprintf("%q must be an absolute path", p), false
	}
	// Where the path claims to be, before the filesystem is asked anything.
	clean := filepath.Clean(p)
	roots := s.rootsOf(tenant)
	dd, own := s.cloneDirs(tenant)
	if problem, refused := placed(clean, roots, dd, own); refused {
		return "", problem, true
	}
	info, err := os.Stat(clean)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Sprintf("%q does not exist", p), false
	case err != nil:
		return "", fmt.Sprintf("%q cannot be read", p), false
	case !info.IsDir():
		return "", fmt.Sprintf("%q is not a directory", p), false
	}
	if resolved, err = filepath.EvalSymlinks(clean); err != nil {
		return "", fmt.Sprintf("%q cannot be resolved", p), false
	}
	// Where it is: the same refusal for a link that leads out.
	resolved = filepath.Clean(resolved)
	if problem, refused := placed(resolved, roots, dd, own); refused {
		return "", strings.Replace(problem, fmt.Sprintf("%q", resolved), fmt.Sprintf("%q", p), 1), true
	}
	return resolved, "", false
}

// placed says why p may not be registered where it is, if it may not: in
// the data directory outside the tenant's own clones, or under none of
// roots.
func placed(p string, roots []string, dataDir, own string) (string, bool) {
	if dataDir != "" && within(dataDir, p) {
		if within(own, p) {
			return "", false
		}
		return fmt.Sprintf("%q is in the librarian's data directory: register a repository there by URL", p), true
	}
	if len(roots) == 0 {
		return "this deployment registers no directories for your tenant (librarian.allowed-roots): register a git URL", true
	}
	for _, r := range roots {
		if within(r, p) {
			return "", false
		}
	}
	return fmt.Sprintf("%q is not under a directory this deployment allows for your tenant (librarian.allowed-roots)", p), true
}

// rootsOf is tenant's allowed roots, each both as configured and with its
// symlinks resolved, so that a path given through either form is placed.
func (s *Service) rootsOf(tenant string) []string {
	var out []string
	for _, r := range s.cfg.AllowedRoots.For(tenant) {
		out = append(out, r)
		if resolved, err := filepath.EvalSymlinks(r); err == nil && resolved != r {
			out = append(out, resolved)
		}
	}
	return out
}
