package academic

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	"sylk.dev/sylk/migrations"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/app"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/natsx"
	"sylk.dev/sylk/pkg/testenv"
)

type fixture struct {
	svc *Service
	bus *natsx.Bus
}

// newFixture builds the service on a fresh schema; withBus adds a NATS bus.
func newFixture(t *testing.T, withBus bool) fixture {
	t.Helper()
	pool, schema := testenv.Postgres(t, "academic", migrations.FS("academic"))
	var f fixture
	if withBus {
		f.bus = testenv.NATS(t)
	}
	svc, err := New(testenv.FromFlags[Config](t), app.Deps{Log: logx.Discard(), DB: pool, Schema: schema, Bus: f.bus, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	f.svc = svc
	return f
}

func as(tenant, role string) context.Context {
	return identity.NewContext(context.Background(), identity.Identity{TenantID: tenant, UserID: "u1", Role: role})
}

func admin(tenant string) context.Context { return as(tenant, identity.RoleAdmin) }

func (f fixture) create(t *testing.T, ctx context.Context, d *academicv1.Document) *academicv1.Document {
	t.Helper()
	resp, err := f.svc.CreateDocument(ctx, &academicv1.CreateDocumentRequest{Document: d})
	require.NoError(t, err)
	return resp.GetDocument()
}

const guide = `# Sylk operations guide

How to run the mesh.

## Install

### Linux

Install the Debian package and start the services.

` + "```sh" + `
# configure the database first
sylk migrate
` + "```" + `

### macOS

Use the tap and run the binary.

## Troubleshooting

If NATS is unreachable, check the JetStream storage directory permissions.
`

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, testenv.FromFlags[Config](t).Validate())
	err := Config{}.Validate()
	require.Error(t, err)
	for _, name := range []string{"max-document-bytes", "max-section-bytes", "text-section-lines", "max-query-bytes", "inbox-hits", "inbox-timeout"} {
		require.Contains(t, err.Error(), "academic."+name)
	}
}

func TestCreateGetAndSearchDocument(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	doc := f.create(t, ctx, &academicv1.Document{Title: "Operations guide", Source: "docs/ops.md", Content: guide})
	require.True(t, ids.Valid(doc.GetId()))
	require.Equal(t, "documents/"+doc.GetId(), doc.GetName())
	require.Equal(t, FormatMarkdown, doc.GetFormat(), "markdown is the default")
	require.Equal(t, int32(4), doc.GetSectionCount())
	require.Empty(t, doc.GetContent(), "content is input only")
	require.Equal(t, 1.0, testutil.ToFloat64(f.svc.metrics.ingested.WithLabelValues(FormatMarkdown)))
	require.Equal(t, 4.0, testutil.ToFloat64(f.svc.metrics.sections))

	got, err := f.svc.GetDocument(ctx, &academicv1.GetDocumentRequest{Name: doc.GetName()})
	require.NoError(t, err)
	require.Equal(t, doc.GetTitle(), got.GetDocument().GetTitle())
	require.Equal(t, "docs/ops.md", got.GetDocument().GetSource())
	require.Equal(t, int32(4), got.GetDocument().GetSectionCount())

	tests := []struct {
		query      string
		heading    string
		start, end int32
		snippet    string
	}{
		{"debian package", "Sylk operations guide > Install > Linux", 7, 14, "«Debian»"},
		{"configure database", "Sylk operations guide > Install > Linux", 7, 14, "«configure»"},
		{"tap", "Sylk operations guide > Install > macOS", 16, 18, "«tap»"},
		{"jetstream permissions", "Sylk operations guide > Troubleshooting", 20, 22, "«JetStream»"},
		{"linux", "Sylk operations guide > Install > Linux", 7, 14, ""},
		{"jetstream kubernetes", "Sylk operations guide > Troubleshooting", 20, 22, ""},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			resp, err := f.svc.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: tt.query})
			require.NoError(t, err)
			require.NotEmpty(t, resp.GetHits())
			top := resp.GetHits()[0]
			require.Equal(t, doc.GetName(), top.GetDocument())
			require.Equal(t, "Operations guide", top.GetDocumentTitle())
			require.Equal(t, tt.heading, top.GetHeading())
			require.Equal(t, tt.start, top.GetLineStart())
			require.Equal(t, tt.end, top.GetLineEnd())
			require.Positive(t, top.GetScore())
			require.LessOrEqual(t, len([]rune(top.GetSnippet())), SnippetChars)
			if tt.snippet != "" {
				require.Contains(t, top.GetSnippet(), tt.snippet)
			}
		})
	}

	resp, err := f.svc.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: "install", PageSize: 1})
	require.NoError(t, err)
	require.Len(t, resp.GetHits(), 1)

	// Another tenant sees nothing.
	resp, err = f.svc.SearchDocuments(admin("t2"), &academicv1.SearchDocumentsRequest{Query: "debian"})
	require.NoError(t, err)
	require.Empty(t, resp.GetHits())
	_, err = f.svc.GetDocument(admin("t2"), &academicv1.GetDocumentRequest{Name: doc.GetName()})
	testenv.RequireCode(t, err, codes.NotFound)
	list, err := f.svc.ListDocuments(admin("t2"), &academicv1.ListDocumentsRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetDocuments())
}

func TestTextDocument(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, "Paragraph %d line one.\nParagraph %d line two.\n\n", i, i)
	}
	b.WriteString("The retry budget resets every hour.\n")
	doc := f.create(t, ctx, &academicv1.Document{Title: "Notes", Content: b.String(), Format: "TEXT"})
	require.Equal(t, FormatText, doc.GetFormat())
	require.Equal(t, int32(3), doc.GetSectionCount())

	resp, err := f.svc.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: "retry budget"})
	require.NoError(t, err)
	require.Len(t, resp.GetHits(), 1)
	require.Empty(t, resp.GetHits()[0].GetHeading())
	require.Equal(t, int32(79), resp.GetHits()[0].GetLineStart())
	require.Equal(t, int32(91), resp.GetHits()[0].GetLineEnd())
}

func TestCreateDocumentValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	tests := []struct {
		name     string
		ctx      context.Context
		doc      *academicv1.Document
		code     codes.Code
		contains []string
	}{
		{"no identity", context.Background(), &academicv1.Document{Title: "x", Content: "y"}, codes.Unauthenticated, nil},
		{"viewer", as("t1", identity.RoleViewer), &academicv1.Document{Title: "x", Content: "y"}, codes.PermissionDenied, nil},
		{"no document", admin("t1"), nil, codes.InvalidArgument, []string{"document: required"}},
		{"no title", admin("t1"), &academicv1.Document{Content: "y"}, codes.InvalidArgument, []string{"document.title: required"}},
		{"long title", admin("t1"), &academicv1.Document{Title: strings.Repeat("t", 201), Content: "y"}, codes.InvalidArgument, []string{"document.title: at most 200"}},
		{"no content", admin("t1"), &academicv1.Document{Title: "x", Content: " \n "}, codes.InvalidArgument, []string{"document.content: required"}},
		{"big content", admin("t1"), &academicv1.Document{Title: "x", Content: strings.Repeat("a", 2<<20+1)}, codes.InvalidArgument, []string{"document.content: at most 2097152 bytes"}},
		{"bad format", admin("t1"), &academicv1.Document{Title: "x", Content: "y", Format: "pdf"}, codes.InvalidArgument, []string{`document.format: "pdf" is not supported; allowed values: markdown, text`}},
		{"nul", admin("t1"), &academicv1.Document{Title: "x", Content: "a\x00"}, codes.InvalidArgument, []string{"document.content: must be valid UTF-8"}},
		{"too many sections", admin("t1"), &academicv1.Document{Title: "x", Content: strings.Repeat("# h\n", 50001)}, codes.InvalidArgument,
			[]string{"document.content: splits into more than 50000 sections"}},
		{"every problem", admin("t1"), &academicv1.Document{Format: "doc"}, codes.InvalidArgument, []string{"document.title", "document.content", "document.format"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := f.svc.CreateDocument(tt.ctx, &academicv1.CreateDocumentRequest{Document: tt.doc})
			testenv.RequireCode(t, err, tt.code, tt.contains...)
		})
	}
	for _, tt := range []struct {
		name string
		req  *academicv1.SearchDocumentsRequest
		msg  string
	}{
		{"no query", &academicv1.SearchDocumentsRequest{}, "query: required"},
		{"long query", &academicv1.SearchDocumentsRequest{Query: strings.Repeat("q", 1025)}, "query: at most 1024 bytes"},
		{"negative page size", &academicv1.SearchDocumentsRequest{Query: "q", PageSize: -1}, "page_size"},
	} {
		_, err := f.svc.SearchDocuments(admin("t1"), tt.req)
		testenv.RequireCode(t, err, codes.InvalidArgument, tt.msg)
	}
	for _, name := range []string{"documents/1", "entries/" + ids.New(), ""} {
		_, err := f.svc.GetDocument(admin("t1"), &academicv1.GetDocumentRequest{Name: name})
		testenv.RequireCode(t, err, codes.InvalidArgument, "name")
	}
	_, err := f.svc.GetDocument(admin("t1"), &academicv1.GetDocumentRequest{Name: "documents/" + ids.New()})
	testenv.RequireReason(t, err, codes.NotFound, "DOCUMENT_NOT_FOUND")
	_, err = f.svc.GetDocument(admin("t1"), &academicv1.GetDocumentRequest{Name: "documents/1"})
	require.Equal(t, apierr.ReasonInvalidField, apierr.Reason(err))
}

func TestInsertIsAtomic(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := context.Background()
	d := document{TenantID: "t1", ID: ids.New(), Title: "broken", Format: FormatMarkdown}
	bad := []section{{Heading: "ok", Body: "fine", LineStart: 1, LineEnd: 1}, {Heading: "bad", Body: "x", LineStart: 0, LineEnd: 0}}
	_, err := f.svc.store.insert(ctx, d, "content", "sha", bad)
	require.Error(t, err)
	_, err = f.svc.store.get(ctx, "t1", d.ID)
	require.ErrorIs(t, err, errNotFound, "the document is not stored when a section fails")
}

func TestListDocumentsPagination(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	for i := range 7 {
		f.create(t, ctx, &academicv1.Document{Title: fmt.Sprintf("doc %d", i), Content: "# H\nbody"})
	}
	var titles []string
	token := ""
	for {
		resp, err := f.svc.ListDocuments(ctx, &academicv1.ListDocumentsRequest{PageSize: 3, PageToken: token})
		require.NoError(t, err)
		for _, d := range resp.GetDocuments() {
			titles = append(titles, d.GetTitle())
			require.Equal(t, int32(1), d.GetSectionCount())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Equal(t, []string{"doc 6", "doc 5", "doc 4", "doc 3", "doc 2", "doc 1", "doc 0"}, titles)
	_, err := f.svc.ListDocuments(ctx, &academicv1.ListDocumentsRequest{PageToken: "garbage!"})
	testenv.RequireCode(t, err, codes.InvalidArgument, "page_token")
}

func TestGRPCRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	client := academicv1.NewAcademicServiceClient(testenv.ServeGRPC(t, f.svc.Register))

	call := identity.AppendOutgoing(context.Background(), identity.Identity{TenantID: "t1", UserID: "u1", Role: identity.RoleMember})
	created, err := client.CreateDocument(call, &academicv1.CreateDocumentRequest{Document: &academicv1.Document{Title: "Guide", Content: guide}})
	require.NoError(t, err)
	found, err := client.SearchDocuments(call, &academicv1.SearchDocumentsRequest{Query: "tap"})
	require.NoError(t, err)
	require.NotEmpty(t, found.GetHits())
	require.Equal(t, created.GetDocument().GetName(), found.GetHits()[0].GetDocument())
	_, err = client.CreateDocument(call, &academicv1.CreateDocumentRequest{Document: &academicv1.Document{Title: "x", Content: "y", Format: "pdf"}})
	testenv.RequireCode(t, err, codes.InvalidArgument, "document.format")
	_, err = client.SearchDocuments(context.Background(), &academicv1.SearchDocumentsRequest{Query: "tap"})
	testenv.RequireCode(t, err, codes.Unauthenticated)
}

func TestLargeDocument(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := admin("t1")
	var b strings.Builder
	for i := 0; b.Len() < 2<<20-200_000; i++ {
		fmt.Fprintf(&b, "## Topic %d\n\nParagraph about subject%d with some ordinary words to index.\n\n", i, i)
	}
	// One section far larger than the section limit, cut into parts.
	b.WriteString("## Appendix\n")
	for b.Len() < 2<<20-100 {
		b.WriteString("appendix filler line with words\n")
	}
	b.WriteString("needle at the very end\n")
	require.LessOrEqual(t, b.Len(), 2<<20)
	start := time.Now()
	doc := f.create(t, ctx, &academicv1.Document{Title: "Big", Content: b.String()})
	t.Logf("ingested %d bytes into %d sections in %s", b.Len(), doc.GetSectionCount(), time.Since(start))
	require.Greater(t, doc.GetSectionCount(), int32(10000))

	resp, err := f.svc.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: "needle"})
	require.NoError(t, err)
	require.Len(t, resp.GetHits(), 1)
	require.Equal(t, "Appendix", resp.GetHits()[0].GetHeading())
	require.Equal(t, strings.Count(b.String(), "\n"), int(resp.GetHits()[0].GetLineEnd()))

	resp, err = f.svc.SearchDocuments(ctx, &academicv1.SearchDocumentsRequest{Query: "subject1234"})
	require.NoError(t, err)
	require.Len(t, resp.GetHits(), 1)
	require.Equal(t, "Topic 1234", resp.GetHits()[0].GetHeading())
}
