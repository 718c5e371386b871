package librarian

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
)

// GetOperation returns one of the tenant's index operations. One whose
// process is gone (silent for opStaleAfter) is marked failed first.
func (s *Service) GetOperation(ctx context.Context, req *librarianv1.GetOperationRequest) (*librarianv1.GetOperationResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	opID, err := parseOperationName(req.GetName(), "name")
	if err != nil {
		return nil, err
	}
	op, err := s.loadOperation(ctx, id.TenantID, opID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get operation", err)
	}
	return &librarianv1.GetOperationResponse{Operation: op}, nil
}

// loadOperation reads an operation with its repository once it succeeded.
func (s *Service) loadOperation(ctx context.Context, tenant, opID string) (*librarianv1.Operation, error) {
	o, err := s.store.getOperation(ctx, tenant, opID)
	if err != nil {
		return nil, err
	}
	if !o.Done && time.Since(o.UpdateTime) > opStaleAfter {
		if _, err := s.store.expireOperations(ctx, tenant, opStaleAfter); err != nil {
			return nil, err
		}
		if o, err = s.store.getOperation(ctx, tenant, opID); err != nil {
			return nil, err
		}
	}
	return s.operationProto(ctx, tenant, o)
}

func (s *Service) operationProto(ctx context.Context, tenant string, o operation) (*librarianv1.Operation, error) {
	var repo *librarianv1.Repository
	if o.Done && o.ErrorCode == 0 {
		r, err := s.store.getRepo(ctx, tenant, o.RepoID)
		if err == nil {
			repo = toProto(r)
		} else if !errors.Is(err, errNotFound) {
			return nil, err
		}
	}
	return toOperationProto(o, repo), nil
}

// ListOperations pages through the tenant's index operations, newest
// first, of one repository when asked.
func (s *Service) ListOperations(ctx context.Context, req *librarianv1.ListOperationsRequest) (*librarianv1.ListOperationsResponse, error) {
	id, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultListPage, maxListPage)
	if err != nil {
		return nil, err
	}
	repoID := ""
	if req.GetRepository() != "" {
		if repoID, err = parseName(req.GetRepository(), "repository"); err != nil {
			return nil, err
		}
	}
	var after *operation
	if tok := req.GetPageToken(); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !ids.Valid(string(raw)) {
			return nil, apierr.Invalid("page_token", "is not a token from a previous response")
		}
		last, err := s.store.getOperation(ctx, id.TenantID, string(raw))
		if err != nil {
			return nil, apierr.Invalid("page_token", "is not a token from a previous response")
		}
		after = &last
	}
	rows, err := s.store.listOperations(ctx, id.TenantID, repoID, after, size+1)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list operations", err)
	}
	resp := &librarianv1.ListOperationsResponse{}
	if len(rows) > size {
		rows = rows[:size]
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(rows[size-1].ID))
	}
	for _, o := range rows {
		op, err := s.operationProto(ctx, id.TenantID, o)
		if err != nil {
			return nil, apierr.Status(ctx, s.log, "list operations", err)
		}
		resp.Operations = append(resp.Operations, op)
	}
	return resp, nil
}

// CancelOperation asks a running index operation to stop: at once when
// this replica runs it, else at its runner's next progress write (within
// opFlushEvery). A finished operation is returned as it is.
func (s *Service) CancelOperation(ctx context.Context, req *librarianv1.CancelOperationRequest) (*librarianv1.CancelOperationResponse, error) {
	id, err := requireWriter(ctx)
	if err != nil {
		return nil, err
	}
	opID, err := parseOperationName(req.GetName(), "name")
	if err != nil {
		return nil, err
	}
	if _, err := s.store.getOperation(ctx, id.TenantID, opID); err != nil {
		return nil, apierr.Status(ctx, s.log, "cancel operation", err)
	}
	if err := s.store.requestCancel(ctx, id.TenantID, opID); err != nil {
		return nil, apierr.Status(ctx, s.log, "cancel operation", err)
	}
	s.notifyOperation(opID)
	s.ops.mu.Lock()
	t := s.ops.runs[opID]
	s.ops.mu.Unlock()
	if t != nil && t.tenant == id.TenantID {
		t.cancel(errCancelRequested)
		// The caller sees the operation done when it stopped promptly.
		select {
		case <-t.done:
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
	}
	op, err := s.loadOperation(ctx, id.TenantID, opID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "cancel operation", err)
	}
	return &librarianv1.CancelOperationResponse{Operation: op}, nil
}

// parseOperationName returns the id of an "operations/{id}" name.
func parseOperationName(name, field string) (string, error) {
	if name == "" {
		return "", apierr.Invalid(field, "required")
	}
	id, ok := strings.CutPrefix(name, operationPrefix)
	if !ok || !ids.Valid(id) {
		return "", apierr.Invalid(field, "%q is not an operation name (want %s{uuid})", truncateRunes(name, 100), operationPrefix)
	}
	return strings.ToLower(id), nil
}
