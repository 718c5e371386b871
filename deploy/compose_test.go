package deploy

import (
	"context"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
)

const (
	composeFile = "compose/docker-compose.yml"
	dockerfile  = "deploy/docker/Dockerfile"
)

// infraServices are the stores the stack runs next to Sylk; each must report
// healthy before anything that uses it starts.
var infraServices = []string{"postgres", "redis", "nats"}

// commonEnv is what every Sylk service container is given.
var commonEnv = []string{
	"SYLK_POSTGRES_DSN", "SYLK_REDIS_URL", "SYLK_NATS_URL",
	"SYLK_GRPC_LISTEN_ADDRESS", "SYLK_HTTP_LISTEN_ADDRESS", "SYLK_LOG_LEVEL", "SYLK_OTEL_ENDPOINT", "SYLK_SHUTDOWN_DELAY",
	"SYLK_PEER_GUIDE", "SYLK_PEER_ARCHITECT", "SYLK_PEER_ORCHESTRATOR", "SYLK_PEER_LIBRARIAN", "SYLK_PEER_ARCHIVALIST", "SYLK_PEER_ACADEMIC",
	"SYLK_INTERNAL_KEY",
}

// serviceEnv are the settings only one service reads.
var serviceEnv = map[string][]string{
	"gateway":      {"SYLK_GATEWAY_LISTEN_ADDRESS", "SYLK_AUTH_BOOTSTRAP_KEY"},
	"worker":       {"SYLK_WORKER_ROLES", "SYLK_WORKER_WORKSPACE_ROOT", "SYLK_WORKER_CACHE_ROOT", "SYLK_WORKER_DRAIN_TIMEOUT"},
	"librarian":    {"SYLK_LIBRARIAN_DATA_DIR", "SYLK_LIBRARIAN_ALLOWED_ROOTS"},
	"orchestrator": {"SYLK_ORCHESTRATOR_CLONE_DIR"},
}

// loadCompose loads the compose file the way the compose CLI does (with
// interpolation of the documented defaults, normalisation and the consistency
// checks) but with an empty environment, so the defaults are what is tested.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "deploy", "compose")
	opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "docker-compose.yml")},
		cli.WithWorkingDirectory(dir),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	require.NoError(t, err)
	p, err := opts.LoadProject(context.Background())
	require.NoError(t, err, "load %s", composeFile)
	return p
}

func env(t *testing.T, s types.ServiceConfig, key string) string {
	t.Helper()
	v, ok := s.Environment[key]
	require.True(t, ok, "service %s: environment lacks %s", s.Name, key)
	require.NotNil(t, v, "service %s: %s has no value", s.Name, key)
	return *v
}

// listenPort returns the port of a ":port" or "host:port" listen address.
func listenPort(t *testing.T, what, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, "%s: listen address %q", what, addr)
	n, err := strconv.Atoi(port)
	require.NoError(t, err, "%s: listen address %q", what, addr)
	return n
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	require.Equal(t, "sylk", p.Name)
	want := append(append([]string{"migrate"}, infraServices...), services...)
	require.ElementsMatch(t, want, p.ServiceNames())
}

func TestComposeBuildsFromDockerfile(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	root := repoRoot(t)
	images := map[string]string{}
	for _, name := range append([]string{"migrate"}, services...) {
		t.Run(name, func(t *testing.T) {
			s, err := p.GetService(name)
			require.NoError(t, err)
			require.NotNil(t, s.Build, "%s must be built from the repository", name)
			require.Equal(t, root, s.Build.Context, "%s: build context must be the repository root", name)
			require.Equal(t, dockerfile, s.Build.Dockerfile)
			arg, ok := s.Build.Args["SERVICE"]
			require.True(t, ok && arg != nil, "%s: build arg SERVICE missing", name)
			bin := "sylk-" + *arg
			if name == "migrate" {
				require.Equal(t, "sylk", *arg, "migrate runs the sylk CLI")
				bin = "sylk"
				require.Equal(t, types.ShellCommand{"migrate"}, s.Command)
			} else {
				require.Equal(t, name, *arg, "%s: build arg SERVICE", name)
			}
			requireCommandDir(t, root, bin)
			if slices.Contains(gitServices, name) {
				require.Equal(t, name, s.Build.Target, "%s runs programs (task commands, git): its own target has them", name)
			} else {
				require.Empty(t, s.Build.Target, "%s: the default (distroless) stage", name)
			}
			require.NotEmpty(t, s.Image, "%s: the built image needs a name", name)
			require.NotContains(t, images, s.Image, "%s: image name shared with %s", name, images[s.Image])
			images[s.Image] = name
			require.Empty(t, s.User, "%s: keep the image's non-root user", name)
			require.True(t, s.ReadOnly, "%s: root filesystem must be read-only", name)
			require.Contains(t, s.CapDrop, "ALL", "%s: drop every capability", name)
			require.Contains(t, s.SecurityOpt, "no-new-privileges:true", name)
		})
	}
}

func TestComposeEnvironment(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	pg, err := p.GetService("postgres")
	require.NoError(t, err)

	known := slices.Clone(commonEnv)
	for _, keys := range serviceEnv {
		known = append(known, keys...)
	}
	var dsn string
	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			s, err := p.GetService(name)
			require.NoError(t, err)
			for _, key := range commonEnv {
				env(t, s, key)
			}
			for _, key := range serviceEnv[name] {
				env(t, s, key)
			}
			for key := range s.Environment {
				require.Contains(t, known, key, "%s: unknown setting %s", name, key)
			}

			require.GreaterOrEqual(t, len(env(t, s, "SYLK_INTERNAL_KEY")), 32, "%s: the internal key the services accept", name)

			// Every service uses the same database as the postgres service's
			// own user, password and database.
			d := env(t, s, "SYLK_POSTGRES_DSN")
			if dsn == "" {
				dsn = d
			}
			require.Equal(t, dsn, d, "%s: every service must use the same database", name)
			u, err := url.Parse(d)
			require.NoError(t, err)
			require.Equal(t, "postgres", u.Scheme)
			require.Equal(t, "postgres:5432", u.Host)
			pw, _ := u.User.Password()
			require.Equal(t, env(t, pg, "POSTGRES_USER"), u.User.Username())
			require.Equal(t, env(t, pg, "POSTGRES_PASSWORD"), pw)
			require.Equal(t, "/"+env(t, pg, "POSTGRES_DB"), u.Path)

			for key, host := range map[string]string{"SYLK_REDIS_URL": "redis:6379", "SYLK_NATS_URL": "nats:4222"} {
				u, err := url.Parse(env(t, s, key))
				require.NoError(t, err, "%s: %s", name, key)
				require.Equal(t, host, u.Host, "%s: %s", name, key)
				store, _, _ := strings.Cut(host, ":")
				require.Contains(t, s.DependsOn, store, "%s uses %s but does not depend on it", name, store)
				// The store wants the credential the URL holds (a
				// service refuses to run beside one that takes anyone).
				secret := u.User.Username()
				if pw, ok := u.User.Password(); ok {
					secret = pw
				}
				require.NotEmpty(t, secret, "%s: %s holds no credential", name, key)
				st, err := p.GetService(store)
				require.NoError(t, err)
				i := slices.Index(st.Command, map[string]string{"redis": "--requirepass", "nats": "--auth"}[store])
				require.GreaterOrEqual(t, i, 0, "%s takes clients without credentials", store)
				require.Equal(t, secret, st.Command[i+1], "%s: %s", name, key)
			}
			require.Equal(t, grpcPort, listenPort(t, name, env(t, s, "SYLK_GRPC_LISTEN_ADDRESS")))
			require.Equal(t, metricsPort, listenPort(t, name, env(t, s, "SYLK_HTTP_LISTEN_ADDRESS")))

			// Peers are compose service names on the port that service listens on.
			for _, peer := range peerServices {
				addr := env(t, s, "SYLK_PEER_"+strings.ToUpper(peer))
				host, port, err := net.SplitHostPort(addr)
				require.NoError(t, err, "%s: SYLK_PEER_%s=%q", name, strings.ToUpper(peer), addr)
				require.Equal(t, peer, host, "%s: peer %s", name, peer)
				ps, err := p.GetService(host)
				require.NoError(t, err, "%s: peer %s is not a compose service", name, peer)
				require.Equal(t, strconv.Itoa(listenPort(t, peer, env(t, ps, "SYLK_GRPC_LISTEN_ADDRESS"))), port,
					"%s: peer %s port", name, peer)
			}
		})
	}

	t.Run("migrate settings", func(t *testing.T) {
		s, err := p.GetService("migrate")
		require.NoError(t, err)
		require.Equal(t, dsn, env(t, s, "SYLK_POSTGRES_DSN"), "migrate must migrate the database the services use")
	})

	t.Run("gateway settings", func(t *testing.T) {
		s, err := p.GetService("gateway")
		require.NoError(t, err)
		require.Equal(t, gatewayPort, listenPort(t, "gateway", env(t, s, "SYLK_GATEWAY_LISTEN_ADDRESS")))
		key := env(t, s, "SYLK_AUTH_BOOTSTRAP_KEY")
		require.True(t, strings.HasPrefix(key, "sylk_") && len(key) >= 32,
			"the default bootstrap key must start with sylk_ and have at least 32 characters")
		require.True(t, slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool {
			return pc.Target == gatewayPort && pc.Published == strconv.Itoa(gatewayPort)
		}), "the gateway must publish port %d", gatewayPort)
		for _, other := range services {
			if other == "gateway" {
				continue
			}
			o, err := p.GetService(other)
			require.NoError(t, err)
			require.Empty(t, o.Ports, "only the gateway is published; %s is not", other)
		}
	})

	t.Run("worker settings", func(t *testing.T) {
		s, err := p.GetService("worker")
		require.NoError(t, err)
		require.NotEmpty(t, env(t, s, "SYLK_WORKER_ROLES"))
		root := env(t, s, "SYLK_WORKER_WORKSPACE_ROOT")
		require.True(t, s.ReadOnly)
		require.True(t, slices.ContainsFunc(s.Tmpfs, func(m string) bool { return strings.HasPrefix(m, root+":") || m == root }),
			"the worker's workspace root %s must be a tmpfs", root)
		require.True(t, slices.ContainsFunc(s.Tmpfs, func(m string) bool { return strings.HasPrefix(m, "/tmp") }))
		// The tenants' Go caches need a writable place on a read-only root.
		require.True(t, strings.HasPrefix(env(t, s, "SYLK_WORKER_CACHE_ROOT"), root+"/"))
	})

	t.Run("repositories", func(t *testing.T) {
		// One volume, at the same path wherever a run's repository is read
		// or written: no filesystem is shared by accident.
		for _, name := range gitServices {
			s, err := p.GetService(name)
			require.NoError(t, err)
			i := slices.IndexFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == repositoriesPath })
			require.GreaterOrEqual(t, i, 0, "%s mounts the repositories at %s", name, repositoriesPath)
			require.Equal(t, types.VolumeTypeVolume, s.Volumes[i].Type, name)
			require.Equal(t, "repositories", s.Volumes[i].Source, name)
			require.False(t, s.Volumes[i].ReadOnly, "%s: the orchestrator writes branches, the librarian clones", name)
			require.True(t, slices.ContainsFunc(s.Tmpfs, func(m string) bool { return strings.HasPrefix(m, "/tmp") }))
		}
		require.Contains(t, p.Volumes, "repositories")
		lib, err := p.GetService("librarian")
		require.NoError(t, err)
		orch, err := p.GetService("orchestrator")
		require.NoError(t, err)
		clones := env(t, lib, "SYLK_LIBRARIAN_DATA_DIR")
		require.True(t, strings.HasPrefix(clones, repositoriesPath+"/"), "the librarian's clones %s are on the volume", clones)
		require.Equal(t, clones, env(t, orch, "SYLK_ORCHESTRATOR_CLONE_DIR"), "the orchestrator knows the clones of git URLs")
	})
}

func TestComposeHealthchecks(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	for _, name := range p.ServiceNames() {
		if name == "migrate" {
			continue // one-shot: others wait for it to complete instead
		}
		t.Run(name, func(t *testing.T) {
			s, err := p.GetService(name)
			require.NoError(t, err)
			hc := s.HealthCheck
			require.NotNil(t, hc, "%s has no healthcheck", name)
			require.False(t, hc.Disable, name)
			require.NotEmpty(t, hc.Test, name)
			require.Contains(t, []string{"CMD", "CMD-SHELL"}, hc.Test[0], name)
			require.NotNil(t, hc.Interval, name)
			require.NotNil(t, hc.Timeout, name)
			require.NotNil(t, hc.Retries, name)
			if slices.Contains(services, name) {
				// Distroless has no shell or curl: the binary checks itself.
				require.Equal(t, types.HealthCheckTest{"CMD", "/usr/local/bin/sylk-" + name, "healthcheck"}, hc.Test)
			}
		})
	}
	nats, err := p.GetService("nats")
	require.NoError(t, err)
	require.Contains(t, nats.Command, "-js", "NATS must run JetStream")
	require.Contains(t, strings.Join(nats.HealthCheck.Test, " "), "/healthz")
}

func TestComposeDependsOn(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)

	migrate, err := p.GetService("migrate")
	require.NoError(t, err)
	require.Equal(t, types.ServiceConditionHealthy, migrate.DependsOn["postgres"].Condition)

	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			s, err := p.GetService(name)
			require.NoError(t, err)
			require.Equal(t, types.ServiceConditionCompletedSuccessfully, s.DependsOn["migrate"].Condition,
				"%s must wait for the migrations", name)
			for _, infra := range infraServices {
				require.Equal(t, types.ServiceConditionHealthy, s.DependsOn[infra].Condition, "%s -> %s", name, infra)
			}
			for _, peer := range requiredPeers[name] {
				require.Equal(t, types.ServiceConditionHealthy, s.DependsOn[peer].Condition, "%s -> %s", name, peer)
			}
			for dep, d := range s.DependsOn {
				require.True(t, d.Required, "%s -> %s must be required", name, dep)
				if d.Condition == types.ServiceConditionHealthy {
					ds, err := p.GetService(dep)
					require.NoError(t, err)
					require.NotNil(t, ds.HealthCheck, "%s waits for %s to be healthy, which has no healthcheck", name, dep)
				}
			}
		})
	}
}

// A stopping worker lets running tasks finish within its drain timeout:
// compose must not kill it before (its default stop grace period is 10s).
func TestComposeWorkerDrains(t *testing.T) {
	t.Parallel()
	s, err := loadCompose(t).GetService("worker")
	require.NoError(t, err)
	drain, err := time.ParseDuration(env(t, s, "SYLK_WORKER_DRAIN_TIMEOUT"))
	require.NoError(t, err)
	require.NotNil(t, s.StopGracePeriod, "the worker needs a stop_grace_period")
	require.Greater(t, time.Duration(*s.StopGracePeriod), drain+30*time.Second, "stop_grace_period must outlast the drain and the hand-back")
}
