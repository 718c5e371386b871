package deploy

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	cmd   string   // upper-case keyword
	flags []string // leading --flag=value words
	args  string   // the rest
}

type stage struct {
	base, name string
	ins        []instruction
}

type dockerfileModel struct {
	globalArgs map[string]string // ARGs before the first FROM, with defaults
	stages     []stage
}

// parseDockerfile reads the instructions of a Dockerfile: comments are
// dropped, continuation lines joined, and the instructions grouped by stage.
func parseDockerfile(t *testing.T, path string) dockerfileModel {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	m := dockerfileModel{globalArgs: map[string]string{}}
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(rest)
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	require.NoError(t, sc.Err())
	require.Zero(t, cur.Len(), "the Dockerfile ends inside a continued line")

	for _, line := range lines {
		cmd, rest, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd)}
		rest = strings.TrimSpace(rest)
		for strings.HasPrefix(rest, "--") {
			flag, after, _ := strings.Cut(rest, " ")
			in.flags = append(in.flags, flag)
			rest = strings.TrimSpace(after)
		}
		in.args = rest
		switch {
		case in.cmd == "FROM":
			fields := strings.Fields(in.args)
			s := stage{base: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.name = fields[2]
			}
			m.stages = append(m.stages, s)
		case len(m.stages) == 0:
			require.Equal(t, "ARG", in.cmd, "only ARG may come before the first FROM")
			name, def, _ := strings.Cut(in.args, "=")
			m.globalArgs[name] = def
		default:
			s := &m.stages[len(m.stages)-1]
			s.ins = append(s.ins, in)
		}
	}
	return m
}

// expand replaces ${NAME} and $NAME with the global ARG defaults.
func (m dockerfileModel) expand(s string) string {
	return os.Expand(s, func(k string) string { return m.globalArgs[k] })
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// envOf returns the KEY=VALUE pairs of a stage's ENV instructions.
func (s stage) envOf() map[string]string {
	env := map[string]string{}
	for _, in := range s.all("ENV") {
		for _, kv := range strings.Fields(in.args) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	return env
}

func (s stage) hasArg(name string) bool {
	return slices.ContainsFunc(s.all("ARG"), func(in instruction) bool {
		n, _, _ := strings.Cut(in.args, "=")
		return n == name
	})
}

// buildRun is the RUN instruction that compiles the binary.
func (s stage) buildRun(t *testing.T) instruction {
	t.Helper()
	var found []instruction
	for _, in := range s.all("RUN") {
		if strings.Contains(in.args, "go build") {
			found = append(found, in)
		}
	}
	require.Len(t, found, 1, "one RUN compiles the binary")
	return found[0]
}

func loadDockerfile(t *testing.T) (m dockerfileModel, build, final stage) {
	t.Helper()
	m = parseDockerfile(t, filepath.Join(repoRoot(t), filepath.FromSlash(dockerfile)))
	require.GreaterOrEqual(t, len(m.stages), 2, "a multi-stage build")
	return m, m.stages[0], m.stages[len(m.stages)-1]
}

func TestDockerfileStages(t *testing.T) {
	t.Parallel()
	m, build, final := loadDockerfile(t)

	require.True(t, strings.HasPrefix(m.expand(build.base), "golang:1.26"), "builder image %s", m.expand(build.base))
	require.NotEmpty(t, build.name, "the builder stage is named")
	base := m.expand(final.base)
	require.True(t, base == "scratch" || strings.HasPrefix(base, "gcr.io/distroless/static"),
		"the runtime image holds no shell or libc: %s", base)
	require.Empty(t, final.all("RUN"), "the runtime image has no shell to RUN with")

	copies := final.all("COPY")
	require.NotEmpty(t, copies)
	for _, c := range copies {
		require.Contains(t, c.flags, "--from="+build.name, "the runtime image only takes the builder's output")
	}
}

// The worker, the librarian and the orchestrator run programs (task
// commands, git): their targets are built on a Debian stage with a shell,
// as non-root. The librarian and the orchestrator run under an init that
// reaps what git leaves behind; the
// worker is process 1 itself (it adopts and reaps what its commands leave
// behind), so that no dumpable process of the commands' user holds the
// container's environment in /proc/1/environ.
func TestDockerfileProgramStages(t *testing.T) {
	t.Parallel()
	m, _, _ := loadDockerfile(t)
	byName := func(name string) *stage {
		i := slices.IndexFunc(m.stages, func(s stage) bool { return s.name == name })
		require.GreaterOrEqual(t, i, 0, "a %s stage", name)
		return &m.stages[i]
	}
	programs := byName("programs")
	require.True(t, strings.HasPrefix(m.expand(programs.base), "debian:"), "the programs stage has a shell: %s", programs.base)
	users := programs.all("USER")
	require.Len(t, users, 1)
	require.Equal(t, "65532:65532", users[0].args, "programs run as non-root")
	copies := programs.all("COPY")
	require.Len(t, copies, 1)
	require.Contains(t, copies[0].flags, "--from=build")
	require.Contains(t, programs.all("RUN")[0].args, " tini", "the programs stage installs tini")
	require.Empty(t, programs.all("ENTRYPOINT"))

	entry := func(name string) []string {
		s := byName(name)
		require.Equal(t, "programs", s.base, "%s is built on the programs stage", name)
		e := s.all("ENTRYPOINT")
		require.Len(t, e, 1)
		var argv []string
		require.NoError(t, json.Unmarshal([]byte(e[0].args), &argv))
		return argv
	}
	require.Equal(t, []string{"/usr/local/bin/sylk-entrypoint"}, entry("worker"), "the worker is process 1")
	require.Equal(t, []string{"/usr/bin/tini", "--", "/usr/local/bin/sylk-entrypoint"}, entry("librarian"))
	require.Equal(t, []string{"/usr/bin/tini", "--", "/usr/local/bin/sylk-entrypoint"}, entry("orchestrator"))
	require.Equal(t, m.stages[len(m.stages)-1].name, "service", "the distroless stage stays the default (last) target")
}

// Every image that runs git has it: the targets of the services that run
// git (which compose and the chart build and run) install it from Debian's
// packages, and make the mount point of the volume of repositories theirs.
func TestDockerfileGitWhereItRuns(t *testing.T) {
	t.Parallel()
	m, _, _ := loadDockerfile(t)
	stages := map[string]stage{}
	for _, s := range m.stages {
		stages[s.name] = s
	}
	for _, name := range gitServices {
		installs, mountPoint := false, false
		// Walk the stage and those it is built on.
		for s, ok := stages[name]; ok; s, ok = stages[s.base] {
			for _, run := range s.all("RUN") {
				installs = installs || regexp.MustCompile(`apt-get install [^&]*\bgit\b`).MatchString(run.args)
				mountPoint = mountPoint || strings.Contains(run.args, "-o 65532 -g 65532") && strings.Contains(run.args, " "+repositoriesPath)
			}
		}
		require.True(t, installs, "the %s image runs git: its stage must install it", name)
		require.True(t, mountPoint, "the %s image holds %s, owned by the non-root user", name, repositoriesPath)
	}
}

func TestDockerfileNonRoot(t *testing.T) {
	t.Parallel()
	m, _, final := loadDockerfile(t)
	users := final.all("USER")
	require.NotEmpty(t, users, "the runtime stage sets a USER")
	user := users[len(users)-1].args
	name, _, _ := strings.Cut(user, ":")
	require.NotContains(t, []string{"", "root", "0"}, name, "USER %s", user)
	require.Contains(t, []string{"nonroot", "65532"}, name, "the distroless non-root user")
	if name == "nonroot" {
		require.Contains(t, m.expand(final.base), ":nonroot", "the nonroot user exists in the :nonroot image")
	}
}

func TestDockerfileStaticBuild(t *testing.T) {
	t.Parallel()
	_, build, final := loadDockerfile(t)
	require.True(t, build.hasArg("SERVICE"), "ARG SERVICE selects the binary")

	env := build.envOf()
	run := build.buildRun(t)
	require.True(t, env["CGO_ENABLED"] == "0" || strings.Contains(run.args, "CGO_ENABLED=0"), "CGO_ENABLED=0 for a static binary")
	require.Contains(t, run.args, "-trimpath")
	require.Regexp(t, `-ldflags ["']-s -w`, run.args, "strip symbols and DWARF")
	require.Contains(t, run.args, "./cmd/${bin}")
	require.Contains(t, run.args, `bin="sylk-${SERVICE}"`)
	require.Contains(t, run.flags, "--mount=type=cache,target=/go/pkg/mod")
	require.Contains(t, run.flags, "--mount=type=cache,target=/root/.cache/go-build")

	entry := final.all("ENTRYPOINT")
	require.Len(t, entry, 1)
	var argv []string
	require.NoError(t, json.Unmarshal([]byte(entry[0].args), &argv), "ENTRYPOINT in exec form (no shell in the image)")
	require.NotEmpty(t, argv)

	var ports []string
	for _, in := range final.all("EXPOSE") {
		ports = append(ports, strings.Fields(in.args)...)
	}
	for _, p := range []string{"9090", "9091", "8080"} {
		require.Contains(t, ports, p)
	}
}

func TestDockerignore(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), ".dockerignore"))
	require.NoError(t, err)
	var patterns []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	require.Contains(t, patterns, ".git")
	// What `go build` needs must stay in the context.
	for _, keep := range []string{"go.mod", "go.sum", "cmd", "pkg", "internal", "services", "gateway", "gen", "migrations"} {
		for _, p := range patterns {
			ok, err := filepath.Match(p, keep)
			require.NoError(t, err)
			require.False(t, ok || p == keep, ".dockerignore pattern %q drops %s", p, keep)
		}
	}
}

var copyInstr = regexp.MustCompile(`^(\S+)\s+(\S+)$`)

// TestDockerfileBuildScript runs the Dockerfile's build step the way the
// builder stage does (its ENV, its script, the repository as context) for
// every image, and checks each result is a static binary that the image's
// ENTRYPOINT and the compose healthchecks find.
func TestDockerfileBuildScript(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	_, build, final := loadDockerfile(t)
	run := build.buildRun(t)

	// The runtime image copies the builder's output directory to destDir.
	copies := final.all("COPY")
	require.Len(t, copies, 1)
	mm := copyInstr.FindStringSubmatch(copies[0].args)
	require.NotNil(t, mm, "COPY %s", copies[0].args)
	srcDir, destDir := strings.TrimSuffix(mm[1], "/"), strings.TrimSuffix(mm[2], "/")
	var argv []string
	require.NoError(t, json.Unmarshal([]byte(final.all("ENTRYPOINT")[0].args), &argv))
	entry, ok := strings.CutPrefix(argv[0], destDir+"/")
	require.True(t, ok, "ENTRYPOINT %s is not among the copied binaries in %s", argv[0], destDir)

	for _, svc := range append([]string{"sylk"}, services...) {
		bin := "sylk-" + svc
		if svc == "sylk" {
			bin = "sylk"
		}
		t.Run(svc, func(t *testing.T) {
			out := t.TempDir()
			script := strings.ReplaceAll(run.args, srcDir, filepath.Join(out, "bin"))
			require.NotContains(t, script, " /out", "the build step writes only to %s", srcDir)
			cmd := exec.Command("sh", "-c", script)
			cmd.Dir = root
			cmd.Env = os.Environ()
			for k, v := range build.envOf() {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			cmd.Env = append(cmd.Env, "SERVICE="+svc, "VERSION=test")
			msg, err := cmd.CombinedOutput()
			require.NoError(t, err, "the image build step for SERVICE=%s fails:\n%s", svc, msg)

			path := filepath.Join(out, "bin", bin)
			requireStatic(t, path)
			target, err := filepath.EvalSymlinks(filepath.Join(out, "bin", entry))
			require.NoError(t, err, "ENTRYPOINT %s", argv[0])
			require.Equal(t, filepath.Base(path), filepath.Base(target), "ENTRYPOINT must run %s", bin)

			if svc == "sylk" {
				return
			}
			// The compose healthcheck runs "<binary> healthcheck": with nothing
			// listening it must answer (fail) rather than hang or not exist.
			hc := exec.Command(path, "healthcheck", "-timeout", "2s")
			hc.Env = []string{"SYLK_GRPC_LISTEN_ADDRESS=127.0.0.1:1", "SYLK_GATEWAY_LISTEN_ADDRESS=127.0.0.1:1"}
			hcOut, err := hc.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "healthcheck against a closed port must exit non-zero:\n%s", hcOut)
			require.Equal(t, 1, exit.ExitCode(), string(hcOut))
		})
	}
}

// requireStatic fails unless path is an ELF executable with no interpreter
// and no shared-library dependencies.
func requireStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "%s is dynamically linked", path)
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs, "%s needs shared libraries", path)
	require.Nil(t, f.Section(".debug_info"), "%s keeps DWARF: build with -ldflags \"-s -w\"", path)
}
