package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/scriptmodel"
)

// TestToolResultSecretsNeverReachTheModel: a key in a file the Engineer
// reads and in a command's output comes back to the model redacted, and
// the task's report of its tool calls holds it redacted too.
func TestToolResultSecretsNeverReachTheModel(t *testing.T) {
	awsID := "AKIA" + "Q7ZP2LK3XW4RT6VN"
	pat := "github_pat_" + "11AQ7ZP2L0k9Xw4Rt8Vn3B_" + "m6Hs1Jd5Fg0CaYe8UqLw2Np4Tx7Rk9Zv3Bm6Hs1Jd5Fg0CaYe8UqLw2Np4T"
	g, srv := scriptGate(t, scriptmodel.Script{Match: "Check the deploy settings", Turns: []scriptmodel.Turn{
		call("read_file", map[string]any{"path": "deploy.env.example"}),
		{Expect: []string{"[REDACTED:aws-access-token]"}, Reject: []string{awsID},
			Calls: []scriptmodel.Call{{Name: "run_command", Args: map[string]any{"command": "cat deploy.env.example; echo pushed with " + pat}}}},
		{Expect: []string{"[REDACTED:github-fine-grained-pat]"}, Reject: []string{awsID, pat},
			Calls: []scriptmodel.Call{{Name: "finish", Args: map[string]any{"summary": "checked"}}}},
	}})
	repo, base := brokenRepo(t)
	require.NoError(t, os.WriteFile(filepath.Join(repo, "deploy.env.example"), []byte("AWS_ACCESS_KEY_ID="+awsID+"\nREGION=eu-west-1\n"), 0o644))
	for _, args := range [][]string{{"add", "-A"}, {"commit", "--quiet", "-m", "settings"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	head, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	base = string(head[:len(head)-1])

	s := pipelineService(t)
	s.SetModel(g)
	d := repoTask(t, repo, base, &orchestratorv1.Node{Id: "check", Name: "check", Prompt: "Check the deploy settings."})
	d.TenantId, d.SessionId = "t1", "s1"
	out, _ := s.runTask(context.Background(), "engineer", d)
	require.Empty(t, srv.Failures())
	for _, r := range srv.Requests() {
		for _, m := range r.Messages {
			require.NotContains(t, m.Content, awsID)
			require.NotContains(t, m.Content, pat)
		}
	}
	_, rep := pipelineOf(t, out)
	require.NotContains(t, rep.String(), awsID)
	require.NotContains(t, rep.String(), pat)
}
