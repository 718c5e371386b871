package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestConfigPath(t *testing.T) {
	t.Parallel()
	p, err := configPath(envOf(map[string]string{"XDG_CONFIG_HOME": "/cfg"}))
	require.NoError(t, err)
	require.Equal(t, "/cfg/sylk/config.json", p)
	p, err = configPath(envOf(map[string]string{"XDG_CONFIG_HOME": "/cfg", "SYLK_CONFIG": "/x/c.json"}))
	require.NoError(t, err)
	require.Equal(t, "/x/c.json", p)
}

func TestSaveConfigIsPrivate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sylk", "config.json")
	missing, err := loadConfig(path)
	require.NoError(t, err)
	require.Equal(t, Config{}, missing)

	want := Config{Server: "http://127.0.0.1:8080", Key: "sylk_secret", Session: "sessions/s1"}
	require.NoError(t, saveConfig(path, want))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	dir, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), dir.Mode().Perm())
	got, err := loadConfig(path)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// Saving again keeps the mode and leaves no temporary file behind.
	require.NoError(t, saveConfig(path, Config{Server: "http://h", Key: "k"}))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1)
}

func TestConfigResolve(t *testing.T) {
	t.Parallel()
	stored := Config{Server: "http://stored", Key: "stored-key"}
	tests := []struct {
		name string
		flag string
		env  map[string]string
		want Config
	}{
		{"stored", "", nil, stored},
		{"environment", "", map[string]string{"SYLK_SERVER": "http://env", "SYLK_API_KEY": "env-key"}, Config{Server: "http://env", Key: "env-key"}},
		{"flag wins", "http://flag", map[string]string{"SYLK_SERVER": "http://env"}, Config{Server: "http://flag", Key: "stored-key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, stored.resolve(tt.flag, envOf(tt.env)))
		})
	}
}
