package pgstore

import (
	"os"
	"path/filepath"
)

// CredentialFiles are the files the PostgreSQL client reads credentials
// from, where they exist: the password file and the service file (named by
// PGPASSFILE and PGSERVICEFILE, else in the home directory) and the client
// key of PGSSLKEY. A service hides them from the programs it runs.
func CredentialFiles() []string {
	home, _ := os.UserHomeDir()
	var out []string
	for _, c := range []struct{ env, def string }{
		{"PGPASSFILE", ".pgpass"},
		{"PGSERVICEFILE", ".pg_service.conf"},
		{"PGSSLKEY", ""},
	} {
		p := os.Getenv(c.env)
		if p == "" && c.def != "" && home != "" {
			p = filepath.Join(home, c.def)
		}
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
