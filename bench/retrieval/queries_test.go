package retrieval

// judged is one benchmark question with the definitions that answer it.
// A relevant entry is "path" (any hit in the file) or "path:Symbol"
// (a hit overlapping the declaration of Symbol, or Recv.Method); paths are
// relative to the corpus root: pgx/ is the pgx driver, std/ a few
// standard library packages.
type judged struct {
	kind     string
	text     string
	relevant []string
}

// Query kinds.
const (
	kindIdent   = "ident"   // an identifier lookup
	kindWhere   = "where"   // "where is X configured/handled?"
	kindConcept = "concept" // a paraphrased question naming none of the code's words
	kindTests   = "tests"   // a question about tests: test files are the answer
)

var queries = []judged{
	// Identifier lookups.
	{kindIdent, "ParseConfig", []string{"pgx/conn.go:ParseConfig", "pgx/pgxpool/pool.go:ParseConfig", "pgx/pgconn/config.go:ParseConfig"}},
	{kindIdent, "NewWithConfig", []string{"pgx/pgxpool/pool.go:NewWithConfig"}},
	{kindIdent, "CollectRows", []string{"pgx/rows.go:CollectRows"}},
	{kindIdent, "RowToStructByName", []string{"pgx/rows.go:RowToStructByName"}},
	{kindIdent, "SafeToRetry", []string{"pgx/pgconn/errors.go:SafeToRetry"}},
	{kindIdent, "PgError", []string{"pgx/pgconn/errors.go:PgError"}},
	{kindIdent, "BeginTxFunc", []string{"pgx/tx.go:BeginTxFunc"}},
	{kindIdent, "QueryExecMode", []string{"pgx/conn.go:QueryExecMode"}},
	{kindIdent, "NamedArgs", []string{"pgx/named_args.go:NamedArgs"}},
	{kindIdent, "scramClient", []string{"pgx/pgconn/auth_scram.go:scramClient"}},
	{kindIdent, "OpenDBFromPool", []string{"pgx/stdlib/sql.go:OpenDBFromPool"}},
	{kindIdent, "CommandTag", []string{"pgx/pgconn/pgconn.go:CommandTag"}},
	{kindIdent, "json Unmarshal", []string{"std/encoding/json/decode.go:Unmarshal", "std/encoding/json/v2_decode.go:Unmarshal"}},
	{kindIdent, "SetMaxOpenConns", []string{"std/database/sql/sql.go:DB.SetMaxOpenConns"}},
	{kindIdent, "CopyFromSource", []string{"pgx/copy_from.go:CopyFromSource"}},

	// Where is X configured / handled.
	{kindWhere, "where is the connection pool configured?", []string{"pgx/pgxpool/pool.go:Config", "pgx/pgxpool/pool.go:ParseConfig"}},
	{kindWhere, "where are connection string settings parsed?", []string{"pgx/pgconn/config.go:ParseConfigWithOptions", "pgx/pgconn/config.go:parseKeywordValueSettings", "pgx/pgconn/parse_url.go:parseURLSettings", "pgx/pgconn/config.go:ParseConfig"}},
	{kindWhere, "where is the maximum number of pool connections set?", []string{"pgx/pgxpool/pool.go:Config", "pgx/pgxpool/pool.go:ParseConfig"}},
	{kindWhere, "where is TLS configured for a connection?", []string{"pgx/pgconn/config.go:configTLS", "pgx/pgconn/config.go:prepareTLSConfigForConnect"}},
	{kindWhere, "where is SCRAM authentication handled?", []string{"pgx/pgconn/auth_scram.go:PgConn.scramAuth", "pgx/pgconn/auth_scram.go:scramClient"}},
	{kindWhere, "where are LISTEN notifications handled?", []string{"pgx/conn.go:Conn.WaitForNotification", "pgx/conn.go:Conn.bufferNotifications", "pgx/pgconn/pgconn.go:Notification", "pgx/pgconn/pgconn.go:NotificationHandler"}},
	{kindWhere, "where is the statement cache capacity configured?", []string{"pgx/conn.go:ConnConfig", "pgx/conn.go:ParseConfigWithOptions"}},
	{kindWhere, "where are named arguments rewritten into positional parameters?", []string{"pgx/named_args.go:NamedArgs.RewriteQuery", "pgx/named_args.go:rewriteQuery"}},
	{kindWhere, "where is the pool health check period configured?", []string{"pgx/pgxpool/pool.go:Config", "pgx/pgxpool/pool.go:ParseConfig"}},
	{kindWhere, "where is the idle connection limit of database/sql set?", []string{"std/database/sql/sql.go:DB.SetMaxIdleConns"}},
	{kindWhere, "where does the JSON decoder reject unknown fields?", []string{"std/encoding/json/stream.go:Decoder.DisallowUnknownFields", "std/encoding/json/v2_stream.go:Decoder.DisallowUnknownFields", "std/encoding/json/decode.go:decodeState.object"}},
	{kindWhere, "where are command line flags parsed?", []string{"std/flag/flag.go:FlagSet.Parse", "std/flag/flag.go:Parse", "std/flag/flag.go:FlagSet.parseOne"}},
	{kindWhere, "where are passwords redacted from connection strings?", []string{"pgx/pgconn/errors.go:redactPW", "pgx/pgconn/errors.go:redactURLPassword"}},
	{kindWhere, "where is the connect timeout configured?", []string{"pgx/pgconn/config.go:parseConnectTimeoutSetting", "pgx/pgconn/config.go:makeConnectTimeoutDialFunc", "pgx/pgconn/config.go:Config"}},
	{kindWhere, "where are environment variables for connection defaults read?", []string{"pgx/pgconn/config.go:parseEnvSettings"}},

	// Paraphrased concept questions.
	{kindConcept, "reuse database sessions instead of opening a new one for every request", []string{"pgx/pgxpool/pool.go:Pool", "pgx/pgxpool/pool.go:Pool.Acquire", "pgx/pgxpool/doc.go"}},
	{kindConcept, "send many statements to the server in one round trip", []string{"pgx/batch.go:Batch", "pgx/conn.go:Conn.SendBatch"}},
	{kindConcept, "map result columns onto struct fields by their names", []string{"pgx/rows.go:RowToStructByName", "pgx/rows.go:RowToAddrOfStructByName", "pgx/rows.go:namedStructRowScanner.ScanRow"}},
	{kindConcept, "bulk load lots of rows quickly into a table", []string{"pgx/copy_from.go:Conn.CopyFrom", "pgx/copy_from.go:CopyFromRows", "pgx/copy_from.go:copyFrom.run"}},
	{kindConcept, "is it safe to try the operation again after a failure", []string{"pgx/pgconn/errors.go:SafeToRetry"}},
	{kindConcept, "turn a percent-encoded URL query into key value pairs", []string{"std/net/url/url.go:ParseQuery", "std/net/url/url.go:parseQuery"}},
	{kindConcept, "quote an identifier so it can be used safely in SQL", []string{"pgx/conn.go:Identifier.Sanitize", "pgx/conn.go:quoteIdentifier"}},
	{kindConcept, "check that the database server is still alive", []string{"pgx/conn.go:Conn.Ping", "pgx/pgconn/pgconn.go:PgConn.Ping", "pgx/pgxpool/pool.go:Pool.Ping"}},
	{kindConcept, "run a function inside a transaction that commits or rolls back", []string{"pgx/tx.go:BeginFunc", "pgx/tx.go:BeginTxFunc", "pgx/tx.go:beginFuncExec"}},
	{kindConcept, "read text line by line from a stream", []string{"std/bufio/scan.go:Scanner", "std/bufio/scan.go:ScanLines", "std/bufio/bufio.go:Reader.ReadLine"}},
	{kindConcept, "store big binary blobs outside regular table rows", []string{"pgx/large_objects.go:LargeObjects", "pgx/large_objects.go:LargeObject"}},
	{kindConcept, "prefer the primary server when several hosts are given", []string{"pgx/pgconn/pgconn.go:connectPreferred", "pgx/pgconn/config.go:ValidateConnectTargetSessionAttrsPrimary", "pgx/pgconn/config.go:ValidateConnectTargetSessionAttrsReadWrite"}},
	{kindConcept, "encode go values as json text", []string{"std/encoding/json/encode.go:Marshal", "std/encoding/json/v2_encode.go:Marshal"}},
	{kindConcept, "close connections that have been open too long", []string{"pgx/pgxpool/pool.go:Config", "pgx/pgxpool/pool.go:Pool.checkConnsHealth", "pgx/pgxpool/pool.go:Pool.isExpired"}},
	{kindConcept, "hash the password with a salt for the challenge response login", []string{"pgx/pgconn/auth_scram.go:scramClient.clientFinalMessage", "pgx/pgconn/auth_scram.go:computeClientProof", "pgx/pgconn/pgconn.go:hexMD5"}},

	// Questions about tests: test files rank first for these.
	{kindTests, "tests for parsing connection strings", []string{"pgx/pgconn/config_test.go", "pgx/pgconn/parse_url_test.go"}},
	{kindTests, "test of pool acquire and release", []string{"pgx/pgxpool/pool_test.go", "pgx/pgxpool/conn_test.go"}},
	{kindTests, "unit tests for named arguments", []string{"pgx/named_args_test.go"}},
	{kindTests, "tests of large objects", []string{"pgx/large_objects_test.go", "pgx/large_objects_private_test.go"}},
}
