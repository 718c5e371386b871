package gateway

import (
	"context"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// Repositories are resources: sylk://repositories lists the caller's
// tenant's, sylk://repositories/{id} is one of them, as the REST API
// renders it (JSON). resources/list names each of the tenant's
// repositories too, so that clients can offer them.

const (
	uriRepositories     = "sylk://repositories"
	uriRepositoryPrefix = uriRepositories + "/"
	mimeJSON            = "application/json"
	// cachePrivate marks an answer that is the caller's tenant's: no cache
	// may serve it to anyone else.
	cachePrivate = "private"
	// maxListedRepositories bounds the repositories one listing reads.
	maxListedRepositories = 1000
	repositoryPageSize    = 200
)

func (m *mcpServer) addResources(s *mcp.Server) {
	s.AddResource(&mcp.Resource{URI: uriRepositories, Name: "repositories", Title: "Repositories", MIMEType: mimeJSON,
		Description: "The tenant's registered repositories: name, path or URL, index state, file and chunk counts, last indexed commit."},
		m.readRepositories)
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: uriRepositories + "/{id}", Name: "repository", Title: "Repository",
		MIMEType: mimeJSON, Description: "One registered repository of the tenant, by id."}, m.readRepository)
	s.AddReceivingMiddleware(m.listRepositoryResources)
}

// listRepositories reads the tenant's repositories, up to
// maxListedRepositories.
func (m *mcpServer) listRepositories(ctx context.Context, req mcp.Request) ([]*librarianv1.Repository, error) {
	ctx, done, err := m.begin(ctx, req, toolCall{service: "librarian", ready: m.librarian != nil})
	defer done()
	if err != nil {
		return nil, err
	}
	var repos []*librarianv1.Repository
	token := ""
	for {
		resp, err := m.librarian.ListRepositories(ctx, &librarianv1.ListRepositoriesRequest{PageSize: repositoryPageSize, PageToken: token})
		if err != nil {
			return nil, toolError(err)
		}
		repos = append(repos, resp.GetRepositories()...)
		token = resp.GetNextPageToken()
		if token == "" || len(repos) >= maxListedRepositories {
			return repos, nil
		}
	}
}

func (m *mcpServer) readRepositories(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	repos, err := m.listRepositories(ctx, req)
	if err != nil {
		return nil, err
	}
	return jsonResource(uriRepositories, &librarianv1.ListRepositoriesResponse{Repositories: repos})
}

func (m *mcpServer) readRepository(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, uriRepositoryPrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	ctx, done, err := m.begin(ctx, req, toolCall{service: "librarian", ready: m.librarian != nil})
	defer done()
	if err != nil {
		return nil, err
	}
	resp, err := m.librarian.GetRepository(ctx, &librarianv1.GetRepositoryRequest{Name: "repositories/" + id})
	if status.Code(err) == codes.NotFound {
		// Another tenant's repository is not found either: the Librarian
		// scopes the lookup to the caller's tenant.
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, toolError(err)
	}
	return jsonResource(uri, resp.GetRepository())
}

func jsonResource(uri string, msg proto.Message) (*mcp.ReadResourceResult, error) {
	text, err := protojson.MarshalOptions{Indent: "  "}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Cacheable: mcp.Cacheable{CacheScope: cachePrivate},
		Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mimeJSON, Text: string(text)}}}, nil
}

// listRepositoryResources adds the caller's repositories to the first page
// of resources/list (the registered resources are the same for everyone;
// these are the caller's tenant's).
func (m *mcpServer) listRepositoryResources(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "resources/list" || err != nil {
			return res, err
		}
		list, ok := res.(*mcp.ListResourcesResult)
		params, _ := req.GetParams().(*mcp.ListResourcesParams)
		if !ok || params != nil && params.Cursor != "" || m.librarian == nil {
			return res, nil
		}
		repos, err := m.listRepositories(ctx, req)
		if err != nil {
			return nil, errors.New("list repositories: " + err.Error())
		}
		list.CacheScope = cachePrivate
		for _, r := range repos {
			name := r.GetDisplayName()
			if name == "" {
				name = r.GetId()
			}
			list.Resources = append(list.Resources, &mcp.Resource{URI: uriRepositoryPrefix + r.GetId(), Name: name,
				Title: name, MIMEType: mimeJSON, Description: "Repository " + r.GetName() + " (" + r.GetIndexState().String() + ")"})
		}
		return list, nil
	}
}
