package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/intent"
)

// saveRunOptions stores the run's context documents and whether it gets
// session checks.
func saveRunOptions(ctx context.Context, tx pgx.Tx, tenant, id string, req *orchestratorv1.CreateRunRequest) error {
	if err := saveDeliveryOptions(ctx, tx, tenant, id, req); err != nil { // delivery_server.go
		return err
	}
	if req.GetContext() == nil && !req.GetSessionChecks() {
		return nil
	}
	var blob []byte
	if req.GetContext() != nil {
		var err error
		if blob, err = proto.Marshal(req.GetContext()); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `UPDATE runs SET context = $3, session_checks = $4 WHERE tenant_id = $1 AND id = $2`, tenant, id, blob, req.GetSessionChecks())
	return err
}

// addRunExtras fills a run's context and session check.
func (s *Service) addRunExtras(ctx context.Context, tenant string, r *orchestratorv1.Run) error {
	if r.DecisionLog != "" && !strings.HasPrefix(r.DecisionLog, decisionLogTitle) {
		r.DecisionLog = decisionLogTitle + r.DecisionLog
	}
	var blob []byte
	var check string
	err := s.db.QueryRow(ctx, `SELECT context, session_check FROM runs WHERE tenant_id = $1 AND id = $2`, tenant, r.GetId()).Scan(&blob, &check)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(blob) > 0 {
		r.Context = &orchestratorv1.RunContext{}
		if err := proto.Unmarshal(blob, r.Context); err != nil {
			return err
		}
	}
	if check != "" {
		r.SessionCheck = &orchestratorv1.SessionCheck{}
		if err := protojson.Unmarshal([]byte(check), r.SessionCheck); err != nil {
			return err
		}
	}
	return addDelivery(ctx, s.db, tenant, r) // delivery_server.go
}

// validateRunOptions checks the options at the edge.
func validateRunOptions(req *orchestratorv1.CreateRunRequest) error {
	if req.GetSessionChecks() && req.GetRepository() == "" {
		return errors.New("session_checks: needs repository")
	}
	if err := validateDelivery(req); err != nil { // delivery_server.go
		return err
	}
	if err := checkReviewPersonas(req); err != nil { // reviewpersona.go
		return err
	}
	rc := req.GetContext()
	if err := checkContext(rc, req.GetDag().GetNodes()); err != nil { // taskcontext.go
		return err
	}
	if n := len(rc.GetKeyConstraints()); n > maxIntentStatements {
		return fmt.Errorf("context.key_constraints: %d entries exceed the limit of %d", n, maxIntentStatements)
	}
	if n := len(rc.GetSuccessCriteria()); n > maxIntentStatements {
		return fmt.Errorf("context.success_criteria: %d entries exceed the limit of %d", n, maxIntentStatements)
	}
	for i, k := range rc.GetKeyConstraints() {
		if len(k) > maxIntentStatementBytes {
			return fmt.Errorf("context.key_constraints[%d]: over %d bytes", i, maxIntentStatementBytes)
		}
	}
	for i, c := range rc.GetSuccessCriteria() {
		if len(c.GetCriterion()) > maxIntentStatementBytes || len(c.GetRationale()) > maxIntentStatementBytes {
			return fmt.Errorf("context.success_criteria[%d]: over %d bytes", i, maxIntentStatementBytes)
		}
	}
	return nil
}

// Bounds of a run's intent (its key constraints and success criteria): a
// plan's merged criteria are the user's plus its domain's.
const (
	maxIntentStatements     = 2 * intent.MaxStatements
	maxIntentStatementBytes = intent.MaxStatementBytes
)
