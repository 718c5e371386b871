package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

// EnvConsoleArtifacts names the directory the console test keeps its
// screenshots in (CI keeps it as an artifact); default .artifacts/console
// at the repository's root.
const EnvConsoleArtifacts = "SYLK_CONSOLE_ARTIFACTS"

// The console in Debian's Chromium, headless, against the whole mesh:
// sign in, a code question answered with its sources, a plan drafted,
// approved and its run watched to the end, a search, documents, history, a
// review, a failed run settled, a member without the API keys link, a wrong
// key refused, and no serious accessibility violation on any page
// (web/console/test/console.spec.mjs drives the browser).
func TestConsoleInChromium(t *testing.T) {
	chromium, node, dir := consoleTools(t)
	c := startMesh(t)
	repo := c.ok("POST", "/v1/repositories?wait=true", map[string]any{"path": fixtureRepo(t), "displayName": "fixture"})["repository"].(map[string]any)
	require.Equal(t, "INDEX_STATE_READY", repo["indexState"])
	// A git work tree for the run whose partial work the console settles
	// (a repository run works on a commit).
	gitRepo := fixtureRepo(t)
	gitCmd(t, gitRepo, "init", "--quiet")
	gitCmd(t, gitRepo, "add", "-A")
	gitCmd(t, gitRepo, "commit", "--quiet", "-m", "init")
	settleRepo := c.ok("POST", "/v1/repositories?index=false", map[string]any{"path": gitRepo, "displayName": "settle"})["repository"].(map[string]any)["name"].(string)

	artifacts := os.Getenv(EnvConsoleArtifacts)
	if artifacts == "" {
		artifacts = filepath.Join(dir, "..", "..", ".artifacts", "console")
	}
	artifacts, err := filepath.Abs(artifacts)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "test/console.spec.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SYLK_URL="+c.base,
		"SYLK_KEY="+c.key,
		"SYLK_ARTIFACTS="+artifacts,
		"SYLK_CHROMIUM="+chromium,
		// A second repository, registered and indexed from the console.
		"SYLK_REPO_PATH="+fixtureRepo(t),
		"SYLK_SETTLE_REPO="+settleRepo,
	)
	out, err := cmd.CombinedOutput()
	t.Logf("console test (screenshots in %s):\n%s", artifacts, out)
	require.NoError(t, err, "the console test in Chromium failed")
}

// consoleTools finds Chromium, node and the console's npm packages
// (make console-deps), or skips (fails in CI) without them.
func consoleTools(t *testing.T) (chromium, node, dir string) {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		testenv.MissingTool(t, "chromium (apt-get install chromium)")
	}
	node, err = exec.LookPath("node")
	if err != nil {
		testenv.MissingTool(t, "node")
	}
	dir, err = filepath.Abs(filepath.Join("..", "web", "console"))
	require.NoError(t, err)
	for _, pkg := range []string{"playwright-core", "axe-core"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			testenv.MissingTool(t, "the console's npm package "+pkg+" (make console-deps)")
		}
	}
	return chromium, node, dir
}
