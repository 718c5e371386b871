package pgstore

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// CredentialFiles are the files the PostgreSQL client reads credentials
// from for dsn, where they exist: the password file, the service file and
// the client key, as dsn names them (passfile, servicefile, sslkey), else
// as PGPASSFILE, PGSERVICEFILE and PGSSLKEY do, else at their places in
// the home directory. A service hides them from the programs it runs.
func CredentialFiles(dsn string) []string {
	params := DSNParams(dsn)
	home, _ := os.UserHomeDir()
	var out []string
	for _, c := range []struct{ param, env, def string }{
		{"passfile", "PGPASSFILE", ".pgpass"},
		{"servicefile", "PGSERVICEFILE", ".pg_service.conf"},
		{"sslkey", "PGSSLKEY", filepath.Join(".postgresql", "postgresql.key")},
	} {
		p := params[c.param]
		if p == "" {
			p = os.Getenv(c.env)
		}
		if p == "" && home != "" {
			p = filepath.Join(home, c.def)
		}
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// DSNParams reads the settings of a connection string, in URL or in
// keyword=value form (values quoted with ' as libpq takes them).
func DSNParams(dsn string) map[string]string {
	out := map[string]string{}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return out
		}
		for k, v := range u.Query() {
			out[k] = v[0]
		}
		return out
	}
	for rest := strings.TrimSpace(dsn); rest != ""; rest = strings.TrimSpace(rest) {
		key, after, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		key, after = strings.TrimSpace(key), strings.TrimLeft(after, " ")
		var val strings.Builder
		if strings.HasPrefix(after, "'") {
			i := 1
			for ; i < len(after) && after[i] != '\''; i++ {
				if after[i] == '\\' && i+1 < len(after) {
					i++
				}
				val.WriteByte(after[i])
			}
			rest = after[min(i+1, len(after)):]
		} else {
			v, r, _ := strings.Cut(after, " ")
			val.WriteString(v)
			rest = r
		}
		out[key] = val.String()
	}
	return out
}
