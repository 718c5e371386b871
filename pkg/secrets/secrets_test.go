package secrets

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The keys below are built at run time from a prefix and a deterministic
// random body, so that the repository holds no string a scanner would take
// for a live key, while each has the exact shape of a real one.

const (
	upperDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	alnum       = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	urlsafe     = alnum + "_-"
	b64         = alnum + "+/"
	hexDigits   = "0123456789abcdef"
	digits      = "0123456789"
)

// rnd returns n characters of alphabet, the same for the same seed.
func rnd(seed uint64, alphabet string, n int) string {
	x := seed*0x9E3779B97F4A7C15 + 1
	b := make([]byte, n)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = alphabet[x%uint64(len(alphabet))]
	}
	return string(b)
}

func pem(kind, body string) string {
	var lines []string
	for len(body) > 64 {
		lines = append(lines, body[:64])
		body = body[64:]
	}
	lines = append(lines, body)
	return "-----BEGIN " + kind + "-----\n" + strings.Join(lines, "\n") + "\n-----END " + kind + "-----"
}

// bodyLine is the second line of a PEM block's body.
func bodyLine(block string) string { return strings.Split(block, "\n")[2] }

func jwt() string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		enc([]byte(`{"sub":"1234567890","name":"`+rnd(40, alnum, 12)+`","iat":1516239022}`)) + "." + rnd(41, urlsafe, 43)
}

// keyCases are real key formats, each in the context it is usually found
// in; secret is the part that must not survive redaction.
func keyCases() []struct{ name, text, secret string } {
	awsID := "AKIA" + rnd(1, upperDigits, 16)
	awsSecret := rnd(2, b64, 40)
	antShort := "sk-ant-api03-" + rnd(3, urlsafe, 40)
	antLong := "sk-ant-api03-" + rnd(4, urlsafe, 93) + "AA"
	projMarked := "sk-proj-" + rnd(5, urlsafe, 74) + "T3BlbkFJ" + rnd(6, urlsafe, 74)
	projBare := "sk-proj-" + rnd(7, urlsafe, 48)
	openaiOld := "sk-" + rnd(8, alnum, 20) + "T3BlbkFJ" + rnd(9, alnum, 20)
	openai48 := "sk-" + rnd(10, alnum, 48)
	ghFine := "github_pat_" + rnd(11, alnum, 22) + "_" + rnd(12, alnum, 59)
	ghp := "ghp_" + rnd(13, alnum, 36)
	gho := "gho_" + rnd(14, alnum, 36)
	xoxb := "xoxb-" + rnd(15, digits, 11) + "-" + rnd(16, digits, 12) + "-" + rnd(17, alnum, 24)
	xoxp := "xoxp-" + rnd(18, digits, 11) + "-" + rnd(19, digits, 11) + "-" + rnd(20, digits, 12) + "-" + rnd(21, hexDigits, 32)
	hook := "https://hooks.slack.com/services/T" + rnd(22, upperDigits, 8) + "/B" + rnd(23, upperDigits, 10) + "/" + rnd(24, alnum, 24)
	stripe := "sk_live_" + rnd(25, alnum, 99)[:24]
	stripeR := "rk_live_" + rnd(26, alnum, 24)
	google := "AIza" + rnd(27, urlsafe, 35)
	rsa := pem("RSA PRIVATE KEY", "MIIEpAIBAAKCAQEA"+rnd(28, b64, 300))
	encrypted := pem("ENCRYPTED PRIVATE KEY", "MIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkq"+rnd(43, b64, 300))
	openssh := pem("OPENSSH PRIVATE KEY", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"+rnd(47, b64, 200))
	gcpKey := pem("PRIVATE KEY", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"+rnd(30, b64, 200))
	gcp := `{"type": "service_account", "project_id": "demo", "private_key_id": "` + rnd(29, hexDigits, 40) +
		`", "private_key": "` + strings.ReplaceAll(gcpKey, "\n", `\n`) +
		`\n", "client_email": "x@demo.iam.gserviceaccount.com"}`
	token := jwt()
	npm := "npm_" + rnd(31, alnum, 36)
	pypi := "pypi-AgEIcHlwaS5vcmc" + rnd(32, urlsafe, 70)
	glpat := "glpat-" + rnd(33, urlsafe, 20)
	twilio := "SK" + rnd(34, hexDigits, 32)
	sendgrid := "SG." + rnd(35, urlsafe, 22) + "." + rnd(36, urlsafe, 43)
	azure := rnd(37, b64, 86) + "=="
	pgPass := rnd(38, alnum, 14)
	genericPass := rnd(39, alnum, 18)
	yamlKey := rnd(42, hexDigits, 32)
	return []struct{ name, text, secret string }{
		{"aws access key id, bare", "found " + awsID + " in the log", awsID},
		{"aws secret key", "aws_secret_access_key = " + awsSecret + "\n", awsSecret},
		{"anthropic key, short", "ANTHROPIC_API_KEY=" + antShort, antShort},
		{"anthropic key, long", `key := "` + antLong + `"`, antLong},
		{"openai project key", "OPENAI_API_KEY=" + projMarked, projMarked},
		{"openai project key, no marker", "use " + projBare + " here", projBare},
		{"openai key, legacy marker", "openai.api_key = '" + openaiOld + "'", openaiOld},
		{"openai key, 48 characters", "sk: " + openai48, openai48},
		{"github fine-grained token", "GITHUB_TOKEN=" + ghFine, ghFine},
		{"github classic token", "git clone https://" + ghp + "@github.com/o/r", ghp},
		{"github oauth token", "Authorization: token " + gho, gho},
		{"slack bot token", `slack_token: "` + xoxb + `"`, xoxb},
		{"slack user token", "export SLACK=" + xoxp, xoxp},
		{"slack webhook", "curl -X POST " + hook, hook},
		{"stripe secret key", `Stripe.apiKey = "` + stripe + `";`, stripe},
		{"stripe restricted key", "STRIPE=" + stripeR, stripeR},
		{"google api key", `const maps = "` + google + `"`, google},
		{"pem rsa private key", "config:\n" + rsa + "\nrest", bodyLine(rsa)},
		{"pem encrypted private key", encrypted, bodyLine(encrypted)},
		{"pem legacy encrypted rsa key", "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC," + rnd(44, "0123456789ABCDEF", 32) +
			"\n\n" + rnd(45, b64, 64) + "\n" + rnd(46, b64, 64) + "\n-----END RSA PRIVATE KEY-----", rnd(45, b64, 64)},
		{"openssh private key", openssh, bodyLine(openssh)},
		{"gcp service account json", gcp, bodyLine(gcpKey)},
		{"jwt", "Authorization: Bearer " + token, token},
		{"npm token", "//registry.npmjs.org/:_authToken=" + npm, npm},
		{"pypi token", "password = " + pypi, pypi},
		{"gitlab token", "GITLAB_TOKEN=" + glpat, glpat},
		{"twilio api key", "twilio sid " + twilio + " ok", twilio},
		{"sendgrid key", "SENDGRID_API_KEY=" + sendgrid, sendgrid},
		{"azure storage key", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + azure + ";EndpointSuffix=core.windows.net", azure},
		{"postgres url with password", "dsn: postgres://app:" + pgPass + "@db.internal:5432/app", pgPass},
		{"generic password assignment", `password = "` + genericPass + `"`, genericPass},
		{"generic api key in yaml", "api_key: " + yamlKey, yamlKey},
	}
}

func TestFindsRealKeyFormats(t *testing.T) {
	t.Parallel()
	for _, tt := range keyCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.True(t, Contains(tt.text), "not detected: %q", tt.text)
			out, n := Redact(tt.text)
			require.Positive(t, n)
			require.NotContains(t, out, tt.secret)
			require.Contains(t, out, Redacted+":")
			require.Equal(t, strings.Count(tt.text, "\n"), strings.Count(out, "\n"), "line structure kept")
		})
	}
}

// TestEntropy: an assignment to a secret-like name is a secret when its
// value looks random, and is left alone when it is a word or a reference.
func TestEntropy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text   string
		secret bool
	}{
		{`password = "` + rnd(50, alnum, 16) + `"`, true},
		{`db_password: ` + rnd(51, alnum, 24), true},
		{`"client_secret": "` + rnd(52, urlsafe, 32) + `"`, true},
		{`AUTH_TOKEN=` + rnd(53, b64, 40), true},
		{`password = "changemechangeme"`, false},
		{`password = os.Getenv("DB_PASSWORD")`, false},
		{`api_key: ${API_KEY}`, false},
		{`token = "aaaaaaaaaaaaaaaaaaaaaaaa"`, false},
		{`secret_name = "production-database"`, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.secret, Contains(tt.text), tt.text)
	}
}

// TestFalsePositives: identifiers and hashes that look random but are not
// secrets are never flagged.
func TestFalsePositives(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"git sha in a log":   "commit " + rnd(60, hexDigits, 40) + "\nAuthor: A <a@b.c>\n\n    fix: keys are rotated",
		"git sha, short":     "Merge " + rnd(61, hexDigits, 7) + " into main (token refresh)",
		"git sha assigned":   `revision: ` + rnd(62, hexDigits, 40),
		"uuid":               `id: "123e4567-e89b-12d3-a456-426614174000"`,
		"uuid as key id":     `session_key := uuid.MustParse("9b2f5c1e-4d3a-4f6b-8e7c-1a2b3c4d5e6f")`,
		"base64 fixture":     `data := "SGVsbG8sIFdvcmxkISBUaGlzIGlzIGEgdGVzdCBmaXh0dXJlLg=="`,
		"go.sum oauth2":      "golang.org/x/oauth2 v0.30.0 h1:" + rnd(63, b64, 43) + "=\ngolang.org/x/oauth2 v0.30.0/go.mod h1:" + rnd(64, b64, 43) + "=\n",
		"go.sum jwt":         "github.com/golang-jwt/jwt/v5 v5.2.2 h1:" + rnd(65, b64, 43) + "=",
		"go.sum keyring":     "github.com/99designs/keyring v1.2.2 h1:" + rnd(66, b64, 43) + "=",
		"sha256 checksum":    rnd(67, hexDigits, 64) + "  sylk-linux-amd64.tar.gz",
		"go code":            "func (s *Server) Token(ctx context.Context, key string) (string, error) {\n\treturn s.tokens.Get(ctx, key)\n}",
		"url without secret": "postgres://postgres@127.0.0.1:5432/sylk?sslmode=disable",
		"url placeholder":    "postgres://user:password@localhost:5432/db",
		"aws docs example":   "AKIAIOSFODNN7EXAMPLE",
		"public key":         "-----BEGIN PUBLIC KEY-----\n" + rnd(68, b64, 64) + "\n-----END PUBLIC KEY-----",
		"prose":              "Rotate the API key every 90 days; the secret manager stores the password.",
	}
	for name, text := range tests {
		require.Empty(t, Find(text), "%s: %q", name, text)
	}
}

func TestFindSpans(t *testing.T) {
	t.Parallel()
	a, b := "ghp_"+rnd(70, alnum, 36), "ghp_"+rnd(71, alnum, 36)
	text := "first " + a + " then\nsecond " + b + " and " + a
	found := Find(text)
	require.Len(t, found, 3)
	for _, f := range found {
		require.Equal(t, "github-pat", f.Rule)
		require.Contains(t, []string{a, b}, text[f.Start:f.End])
	}
	out, n := Redact(text)
	require.Equal(t, 3, n)
	require.Equal(t, "first [REDACTED:github-pat] then\nsecond [REDACTED:github-pat] and [REDACTED:github-pat]", out)
}

func TestRedactKeepsTextWithoutSecrets(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"", "plain text", "func passwordHash(p string) string"} {
		out, n := Redact(text)
		require.Equal(t, text, out)
		require.Zero(t, n)
		require.Equal(t, text, Scrub(text))
	}
}
