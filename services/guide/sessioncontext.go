package guide

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	"sylk.dev/sylk/pkg/apierr"
)

// A session's context is its private working state, versioned: an update
// names the version it read (optimistic concurrency). A suspended
// session's context is frozen in its snapshot.

// loadContext reads a session's context and its version.
func loadContext(ctx context.Context, q querier, o owner, id string) (*guidev1.SessionContext, int64, error) {
	var raw []byte
	var version int64
	err := q.QueryRow(ctx, `SELECT context, context_version FROM sessions WHERE tenant_id = $1 AND user_id = $2 AND id = $3`,
		o.tenant, o.user, id).Scan(&raw, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, sessionNotFound(id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("load context of %s: %w", id, err)
	}
	c := &guidev1.SessionContext{}
	if err := protojson.Unmarshal(raw, c); err != nil {
		return nil, 0, fmt.Errorf("decode context of %s: %w", id, err)
	}
	return c, version, nil
}

func storeContext(ctx context.Context, q querier, o owner, id string, c *guidev1.SessionContext, version int64) error {
	raw, err := protojson.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode context: %w", err)
	}
	_, err = q.Exec(ctx, `UPDATE sessions SET context = $4::jsonb, context_version = $5
		WHERE tenant_id = $1 AND user_id = $2 AND id = $3`, o.tenant, o.user, id, string(raw), version)
	if err != nil {
		return fmt.Errorf("store context of %s: %w", id, err)
	}
	return nil
}

// GetSessionContext returns a session's private context.
func (s *Service) GetSessionContext(ctx context.Context, req *guidev1.GetSessionContextRequest) (*guidev1.GetSessionContextResponse, error) {
	who, id, err := callerSession(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	c, v, err := loadContext(ctx, s.db, ownerOf(who), id)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "get session context", err)
	}
	return &guidev1.GetSessionContextResponse{Context: c, Version: v}, nil
}

// maxContextBytes bounds a session context's JSON.
const maxContextBytes = 256 << 10

// UpdateSessionContext replaces a live session's context when the version
// matches. A suspended session's context is frozen in its snapshot.
func (s *Service) UpdateSessionContext(ctx context.Context, req *guidev1.UpdateSessionContextRequest) (*guidev1.UpdateSessionContextResponse, error) {
	who, id, err := callerSession(ctx, "name", req.GetName())
	if err != nil {
		return nil, err
	}
	if req.GetContext() == nil {
		return nil, apierr.Invalid("context", "required")
	}
	if d := structDepth(req.GetContext().GetExtra()); d > maxExtraDepth {
		return nil, apierr.Invalid("context.extra", "nested %d levels deep; at most %d", d, maxExtraDepth)
	}
	raw, err := protojson.Marshal(req.GetContext())
	if err != nil {
		return nil, apierr.Invalid("context", "%v", err)
	}
	if len(raw) > maxContextBytes {
		return nil, apierr.Invalid("context", "%d bytes exceeds the limit of %d bytes", len(raw), maxContextBytes)
	}
	o := ownerOf(who)
	var version int64
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		cur, err := getSession(ctx, tx, o, id, true)
		if err != nil {
			return err
		}
		if cur.State != stateActive && cur.State != stateCreated {
			return stateError(reasonSessionNotOpen, cur.State, "update its context", stateCreated, stateActive)
		}
		_, v, err := loadContext(ctx, tx, o, id)
		if err != nil {
			return err
		}
		if req.GetVersion() != v {
			return conflict(reasonContextVersionMismatch, "context version is %d, not %d; read it again", v, req.GetVersion())
		}
		version = v + 1
		return storeContext(ctx, tx, o, id, req.GetContext(), version)
	})
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "update session context", err)
	}
	return &guidev1.UpdateSessionContextResponse{Context: req.GetContext(), Version: version}, nil
}

// maxExtraDepth bounds the nesting of a session context's free-form extra:
// a context is kept and returned inside larger messages (a snapshot), which
// must stay within what protobuf decoders accept.
const maxExtraDepth = 32

// structDepth is how deeply objects and lists nest in st (1 for a flat one).
func structDepth(st *structpb.Struct) int {
	if st == nil {
		return 0
	}
	d := 0
	for _, v := range st.GetFields() {
		d = max(d, valueDepth(v))
	}
	return d + 1
}

func valueDepth(v *structpb.Value) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return structDepth(k.StructValue)
	case *structpb.Value_ListValue:
		d := 0
		for _, e := range k.ListValue.GetValues() {
			d = max(d, valueDepth(e))
		}
		return d + 1
	}
	return 0
}
