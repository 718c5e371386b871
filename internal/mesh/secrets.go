package mesh

import (
	"os"
	"path/filepath"

	"sylk.dev/sylk/pkg/pgstore"
)

// secretFiles are the files named in common that hold secrets (keys).
func secretFiles(common Common) []string {
	var out []string
	for _, f := range []string{common.Internal.KeyFile, common.LLMCredentials.KeyFile, common.TLS.KeyFile,
		common.NATS.TLS.KeyFile, common.Redis.TLS.KeyFile,
		common.LLM.Anthropic.APIKeyFile, common.LLM.OpenAI.APIKeyFile, common.LLM.Gemini.APIKeyFile} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// hideSecretFiles keeps the worker's task commands from reading the secret
// files in common and the PostgreSQL client's credential files: each file,
// the file a symlink resolves to, and the whole directory of a mounted
// Kubernetes Secret (which holds ..data: its files are swapped through
// symlinks when it changes). A symlinked file outside such a directory is
// hidden where it resolves at start.
func hideSecretFiles(sc *ServiceConfigs, common Common) {
	files := append(secretFiles(common), pgstore.CredentialFiles(common.Postgres.DSN)...)
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			continue
		}
		hidden := []string{abs}
		if r, err := filepath.EvalSymlinks(abs); err == nil && r != abs {
			hidden = append(hidden, r)
		}
		if dir := filepath.Dir(abs); dir != "/" {
			if _, err := os.Lstat(filepath.Join(dir, "..data")); err == nil {
				hidden = append(hidden, dir)
			}
		}
		sc.Worker.Tools.ConfineHidden = append(sc.Worker.Tools.ConfineHidden, hidden...)
	}
}
