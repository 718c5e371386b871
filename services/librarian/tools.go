package librarian

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"sync"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/tooldetect"
)

// toolProto is a detected tool in the API's form.
func toolProto(t tooldetect.Tool) *librarianv1.Tool {
	return &librarianv1.Tool{Id: t.ID, Name: t.Name, Language: t.Language, Command: t.Command,
		Confidence: t.Confidence, Reason: t.Reason, Installed: t.Installed}
}

// discover detects the tools of a project (pkg/tooldetect) and warns about
// the chosen ones that are not installed.
func discover(facts tooldetect.Facts, lookPath func(string) bool) *librarianv1.DiscoverToolsResponse {
	res := tooldetect.Discover(facts, lookPath)
	resp := &librarianv1.DiscoverToolsResponse{}
	for _, cat := range []struct {
		in  []tooldetect.Tool
		out *[]*librarianv1.Tool
	}{{res.Formatters, &resp.Formatters}, {res.Linters, &resp.Linters}, {res.LanguageServers, &resp.LanguageServers},
		{res.TestFrameworks, &resp.TestFrameworks}, {res.Alternatives, &resp.Alternatives}} {
		for _, t := range cat.in {
			*cat.out = append(*cat.out, toolProto(t))
		}
	}
	for _, list := range [][]*librarianv1.Tool{resp.Formatters, resp.Linters, resp.LanguageServers, resp.TestFrameworks} {
		for _, t := range list {
			if !t.GetInstalled() {
				resp.Warnings = append(resp.Warnings, t.GetName()+" ("+t.GetId()+") is not installed on the librarian's PATH")
			}
		}
	}
	if len(res.Languages) == 0 {
		resp.Warnings = append(resp.Warnings, "no source files of a known language were found")
	}
	return resp
}

// toolCache holds each repository's last answer with the fingerprint of
// the configuration it was computed from, in process; with Redis the answer
// lives there instead, shared by every replica.
type toolCache struct {
	mu      sync.Mutex
	entries map[string]toolCacheEntry
}

type toolCacheEntry struct {
	fingerprint string
	resp        *librarianv1.DiscoverToolsResponse
}

// storedTools is a cached answer as stored in Redis.
type storedTools struct {
	Fingerprint string `json:"fingerprint"`
	// Response is the DiscoverToolsResponse in protobuf wire format.
	Response []byte `json:"response"`
}

// toolsKey is the Redis key of a repository's cached answer; it names the
// tenant, so tenants never share entries.
func (s *Service) toolsKey(tenant, repoID string) string {
	return s.redis.Key("librarian", "tools", tenant, repoID)
}

// cachedTools returns the cached answer for a repository when it was
// computed from the configuration with fingerprint fp.
func (s *Service) cachedTools(ctx context.Context, tenant, repoID, fp string) (*librarianv1.DiscoverToolsResponse, bool) {
	if s.redis == nil {
		s.tools.mu.Lock()
		e, ok := s.tools.entries[tenant+"/"+repoID]
		s.tools.mu.Unlock()
		if !ok || e.fingerprint != fp {
			return nil, false
		}
		return proto.Clone(e.resp).(*librarianv1.DiscoverToolsResponse), true
	}
	data, err := s.redis.Get(ctx, s.toolsKey(tenant, repoID)).Bytes()
	if err != nil {
		if !errors.Is(err, redis.Nil) {
			s.log.WarnContext(ctx, "read tool cache", logx.Err(err))
		}
		return nil, false
	}
	var st storedTools
	if json.Unmarshal(data, &st) != nil || st.Fingerprint != fp {
		return nil, false
	}
	out := &librarianv1.DiscoverToolsResponse{}
	if proto.Unmarshal(st.Response, out) != nil {
		return nil, false
	}
	return out, true
}

// storeTools caches a repository's answer; failures only cost the cache.
func (s *Service) storeTools(ctx context.Context, tenant, repoID, fp string, resp *librarianv1.DiscoverToolsResponse) {
	if s.redis == nil {
		s.tools.mu.Lock()
		s.tools.entries[tenant+"/"+repoID] = toolCacheEntry{fingerprint: fp, resp: proto.Clone(resp).(*librarianv1.DiscoverToolsResponse)}
		s.tools.mu.Unlock()
		return
	}
	wire, err := proto.Marshal(resp)
	if err != nil {
		return
	}
	data, err := json.Marshal(storedTools{Fingerprint: fp, Response: wire})
	if err != nil {
		return
	}
	if err := s.redis.Set(ctx, s.toolsKey(tenant, repoID), data, s.cfg.ToolsCacheTTL).Err(); err != nil {
		s.log.WarnContext(ctx, "write tool cache", logx.Err(err))
	}
}

// DiscoverTools detects a repository's formatter, linter, language server
// and test framework per language (E-19..E-22). Answers are cached per
// repository (in Redis when configured, so replicas share them) under the
// content hash of the configuration files the detection reads and the
// languages present; any change to those recomputes the answer.
func (s *Service) DiscoverTools(ctx context.Context, req *librarianv1.DiscoverToolsRequest) (*librarianv1.DiscoverToolsResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	repoID, err := parseName(req.GetRepository(), "repository")
	if err != nil {
		return nil, err
	}
	r, err := s.store.getRepo(ctx, id.TenantID, repoID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "discover tools", err)
	}
	root, problem := s.checkRoot(id.TenantID, r.Path)
	if problem != "" {
		return nil, unreadable("repository path: %s", problem)
	}
	facts, fp := tooldetect.ReadFacts(root)
	if !req.GetRefresh() {
		if out, ok := s.cachedTools(ctx, id.TenantID, repoID, fp); ok {
			out.Cached = true
			return out, nil
		}
	}
	resp := discover(facts, func(p string) bool { _, err := exec.LookPath(p); return err == nil })
	s.storeTools(ctx, id.TenantID, repoID, fp, resp)
	return resp, nil
}
