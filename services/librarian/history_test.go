package librarian

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

func TestGetHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := gitRepo(t, map[string]string{"shop/shop.go": shopGo, "README.md": "# Shop\n"})
	// Three more commits: one touching NormalizeSKU, one touching Cart.Add,
	// one touching only the README.
	writeFile(t, root, "shop/shop.go", strings.Replace(shopGo, "strings.ToUpper(trim(s))", "strings.ToUpper(trim(s)) // upper", 1))
	commitAll(t, root, "normalize: note the case")
	writeFile(t, root, "shop/shop.go", strings.Replace(strings.Replace(shopGo, "strings.ToUpper(trim(s))", "strings.ToUpper(trim(s)) // upper", 1),
		"append(c.items, NormalizeSKU(s))", "append(c.items, NormalizeSKU(strings.TrimSpace(s)))", 1))
	commitAll(t, root, "cart: keep codes normalized")
	writeFile(t, root, "README.md", "# Shop\n\nA shop.\n")
	commitAll(t, root, "docs: describe the shop")
	repo := create(t, ctx, h.svc, root, true)
	get := func(req *librarianv1.GetHistoryRequest) (*librarianv1.GetHistoryResponse, error) {
		req.Repository = repo.GetName()
		return h.svc.GetHistory(ctx, req)
	}
	subjects := func(resp *librarianv1.GetHistoryResponse) []string {
		var out []string
		for _, c := range resp.GetCommits() {
			require.Len(t, c.GetSha(), 40)
			require.Equal(t, "t", c.GetAuthor())
			require.NotZero(t, c.GetAuthorTime().GetSeconds())
			out = append(out, c.GetSubject())
		}
		return out
	}

	t.Run("file", func(t *testing.T) {
		resp, err := get(&librarianv1.GetHistoryRequest{Path: "shop/shop.go"})
		require.NoError(t, err)
		require.Equal(t, []string{"cart: keep codes normalized", "normalize: note the case", "initial"}, subjects(resp))
		require.False(t, resp.GetTruncated())
	})
	t.Run("symbol", func(t *testing.T) {
		resp, err := get(&librarianv1.GetHistoryRequest{Symbol: "shop.Cart.Add"})
		require.NoError(t, err)
		require.Equal(t, "shop/shop.go", resp.GetPath())
		require.Positive(t, resp.GetLineStart())
		require.Equal(t, []string{"cart: keep codes normalized", "initial"}, subjects(resp))
		resp, err = get(&librarianv1.GetHistoryRequest{Symbol: "NormalizeSKU"})
		require.NoError(t, err)
		require.Equal(t, []string{"normalize: note the case", "initial"}, subjects(resp))
	})
	t.Run("line range and page size", func(t *testing.T) {
		resp, err := get(&librarianv1.GetHistoryRequest{Path: "README.md", LineStart: 1, LineEnd: 1})
		require.NoError(t, err)
		require.Equal(t, []string{"initial"}, subjects(resp))
		resp, err = get(&librarianv1.GetHistoryRequest{Path: "shop/shop.go", PageSize: 1})
		require.NoError(t, err)
		require.Equal(t, []string{"cart: keep codes normalized"}, subjects(resp))
		require.True(t, resp.GetTruncated())
	})
	t.Run("bad input", func(t *testing.T) {
		for _, req := range []*librarianv1.GetHistoryRequest{
			{},
			{Path: "shop/shop.go", Symbol: "NormalizeSKU"},
			{Path: "../outside.go"},
			{Path: "/etc/passwd"},
			{Path: "shop/../shop/shop.go"},
			{Path: "shop/shop.go", LineStart: 5},
			{Path: "shop/shop.go", LineStart: 5, LineEnd: 2},
			{Symbol: "NormalizeSKU", LineStart: 1, LineEnd: 2},
			{Path: "shop/shop.go", PageSize: -1},
		} {
			_, err := get(req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", req)
		}
		_, err := get(&librarianv1.GetHistoryRequest{})
		require.Equal(t, "path: set path or symbol", status.Convert(err).Message())
		// Only indexed files: nothing under .git, nothing unknown.
		_, err = get(&librarianv1.GetHistoryRequest{Path: ".git/config"})
		require.Equal(t, codes.NotFound, status.Code(err))
		_, err = get(&librarianv1.GetHistoryRequest{Symbol: "NoSuchThing"})
		require.Equal(t, codes.NotFound, status.Code(err))
		_, err = get(&librarianv1.GetHistoryRequest{Path: "README.md", LineStart: 50, LineEnd: 60})
		require.Equal(t, codes.FailedPrecondition, status.Code(err))
	})
	t.Run("tenant scoped", func(t *testing.T) {
		_, err := h.svc.GetHistory(as(t, "other"), &librarianv1.GetHistoryRequest{Repository: repo.GetName(), Path: "shop/shop.go"})
		require.Equal(t, codes.NotFound, status.Code(err))
	})
}
