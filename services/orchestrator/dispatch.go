package orchestrator

import (
	"context"
	"fmt"
	"maps"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
	"sylk.dev/sylk/pkg/toolexec"
	"sylk.dev/sylk/pkg/topology"
)

// dispatchInputs is what the dispatches of a decision carry besides the
// nodes themselves.
type dispatchInputs struct {
	specs map[string]*orchestratorv1.Node
	// outputs are the dependencies' stdout; prior, the earlier attempts of
	// retried nodes (spec B-38); handed, the state a handed-off pipeline
	// left (spec F-23); patches, the dependencies' patches of a repository
	// run's nodes, in the order they apply (spec T-10).
	outputs map[string]string
	prior   map[string][]*orchestratorv1.AttemptSummary
	handed  map[string]handedState
	patches map[string][]*taskv1.DependencyPatch
}

// queueTasks adds the dispatches of nodes, at the given attempts, to a
// decision's effects (marked as re-sends with republish). A node whose task
// cannot carry its dependencies' patches fails instead (dependencies.go).
// On an error nothing is added.
func (s *Service) queueTasks(ctx context.Context, q querier, run *runRow, nodes []*schedNode, attempts map[string]int32, republish bool,
	eff *effects) error {
	msgs, refused, err := s.buildDispatches(ctx, q, run, nodes, attempts)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		if err := s.failRefused(ctx, q, run, refused, eff); err != nil {
			return err
		}
	}
	for _, m := range msgs {
		m.republish = republish
		eff.steps = append(eff.steps, step{dispatch: m})
	}
	return nil
}

// buildDispatches makes the task messages of nodes at the given attempts,
// and lists those that cannot be sent.
func (s *Service) buildDispatches(ctx context.Context, q querier, run *runRow, nodes []*schedNode, attempts map[string]int32) ([]*dispatchMsg,
	[]refusedTask, error) {
	in, err := s.dispatchInputs(ctx, q, run, nodes, attempts)
	if err != nil {
		return nil, nil, err
	}
	msgs := make([]*dispatchMsg, 0, len(nodes))
	var refused []refusedTask
	for _, n := range nodes {
		spec, ok := in.specs[n.ID]
		if !ok {
			return nil, nil, fmt.Errorf("run %s: node %s is missing from the stored dag", run.ID, n.ID)
		}
		attempt := attempts[n.ID]
		msgID := fmt.Sprintf("%s:%s:%d", run.ID, n.ID, attempt)
		d := s.newDispatch(run, n.ID, n.Role, attempt, msgID)
		d.Timeout = spec.GetTimeout()
		d.UpstreamOutputs = s.upstream(n.DependsOn, in.outputs)
		b := retryBriefing(spec, attempt, in.prior[n.ID])
		h, handedOff := in.handed[n.ID]
		if b != nil || handedOff {
			spec = proto.Clone(spec).(*orchestratorv1.Node)
			spec.RetryBriefing, spec.Handoff = b, h.handoff
		}
		d.Node = spec
		if run.Repository != "" {
			d.StartPatch = h.patch
			if ps := in.patches[n.ID]; len(ps) > 0 {
				if why := s.withDependencyPatches(d, ps); why != "" {
					refused = append(refused, refusedTask{node: n.ID, attempt: attempt, reason: why})
					continue
				}
			}
		}
		msgs = append(msgs, &dispatchMsg{subject: topology.TaskSubject(s.bus, n.Role), msgID: msgID, node: n.ID, attempt: attempt, task: d})
	}
	return msgs, refused, nil
}

// newDispatch is a dispatch of one attempt of a run's node (or of its
// session check), fenced by its message id and this replica.
func (s *Service) newDispatch(run *runRow, node, role string, attempt int32, msgID string) *taskv1.TaskDispatch {
	d := &taskv1.TaskDispatch{
		TenantId:         run.TenantID,
		UserId:           run.UserID,
		SessionId:        run.SessionID,
		RunId:            run.ID,
		NodeId:           node,
		Attempt:          attempt,
		Role:             role,
		OutputLimitBytes: int64(s.cfg.OutputLimitBytes),
		Fence:            &taskv1.TaskFence{AttemptId: msgID, ReplicaId: s.cfg.ReplicaID},
		DispatchTime:     timestamppb.Now(),
		Priority:         messagev1.Priority_PRIORITY_PIPELINE,
	}
	if run.Repository != "" {
		d.Repository, d.BaseCommit, d.RepositoryName = run.Repository, run.BaseCommit, run.RepositoryName
	}
	return d
}

// dispatchInputs loads what the dispatches of nodes carry: their specs,
// their dependencies' outputs (and, in a repository run, their patches),
// and for retried nodes their earlier attempts and any handoff.
func (s *Service) dispatchInputs(ctx context.Context, q querier, run *runRow, nodes []*schedNode, attempts map[string]int32) (*dispatchInputs, error) {
	specs, err := s.specsOf(ctx, q, run, nodes)
	if err != nil {
		return nil, err
	}
	in := &dispatchInputs{specs: specs, outputs: map[string]string{}}
	var deps, dependents, retried []string
	for _, n := range nodes {
		deps = append(deps, n.DependsOn...)
		if len(n.DependsOn) > 0 && run.Repository != "" {
			dependents = append(dependents, n.ID)
		}
		if attempts[n.ID] > 1 {
			retried = append(retried, n.ID)
		}
	}
	switch {
	case len(dependents) > 0:
		// The stdouts and the patches in one round trip (spec T-10).
		if in.outputs, in.patches, err = dependencyInputs(ctx, q, run.TenantID, run.ID, dependents, s.cfg.MaxUpstreamBytes > 0); err != nil {
			return nil, fmt.Errorf("load what the dependencies pass on: %w", err)
		}
	case len(deps) > 0 && s.cfg.MaxUpstreamBytes > 0:
		if in.outputs, err = stdouts(ctx, q, run.TenantID, run.ID, deps); err != nil {
			return nil, fmt.Errorf("load upstream outputs: %w", err)
		}
	}
	if len(retried) == 0 {
		return in, nil
	}
	// Retries are briefed on their prior attempts (spec B-38).
	if in.prior, err = priorAttempts(ctx, q, run.TenantID, run.ID, retried); err != nil {
		return nil, fmt.Errorf("load prior attempts: %w", err)
	}
	// A pipeline carrying on from a handoff starts from its state and its
	// files (spec F-23).
	if in.handed, err = handedStates(ctx, q, run.TenantID, run.ID, retried); err != nil {
		return nil, fmt.Errorf("load handoffs: %w", err)
	}
	return in, nil
}

// specsOf returns the submitted form of nodes, from their rows (or from the
// run's DAG for rows stored without one).
func (s *Service) specsOf(ctx context.Context, q querier, run *runRow, nodes []*schedNode) (map[string]*orchestratorv1.Node, error) {
	raw := make(map[string][]byte, len(nodes))
	var missing []string
	for _, n := range nodes {
		if n.Spec != nil {
			raw[n.ID] = n.Spec
		} else {
			missing = append(missing, n.ID)
		}
	}
	if len(missing) > 0 {
		got, err := nodeSpecs(ctx, q, run.TenantID, run.ID, missing)
		if err != nil {
			return nil, fmt.Errorf("load node specs: %w", err)
		}
		maps.Copy(raw, got)
	}
	specs := make(map[string]*orchestratorv1.Node, len(nodes))
	for id, b := range raw {
		var n orchestratorv1.Node
		if err := proto.Unmarshal(b, &n); err != nil {
			return nil, fmt.Errorf("decode node %s of run %s: %w", id, run.ID, err)
		}
		specs[id] = &n
	}
	if len(specs) == len(nodes) {
		return specs, nil
	}
	full, err := getRun(ctx, q, run.TenantID, run.ID)
	if err != nil {
		return nil, fmt.Errorf("load dag of run %s: %w", run.ID, err)
	}
	var d orchestratorv1.Dag
	if err := proto.Unmarshal(full.DAG, &d); err != nil {
		return nil, fmt.Errorf("decode dag of run %s: %w", run.ID, err)
	}
	for _, n := range d.GetNodes() {
		if _, ok := specs[n.GetId()]; !ok {
			specs[n.GetId()] = n
		}
	}
	return specs, nil
}

// upstream is the capped stdout of a node's dependencies.
func (s *Service) upstream(deps []string, outputs map[string]string) map[string]string {
	if len(deps) == 0 || s.cfg.MaxUpstreamBytes == 0 {
		return nil
	}
	each := min(s.cfg.UpstreamOutputBytes, s.cfg.MaxUpstreamBytes/len(deps))
	out := make(map[string]string, len(deps))
	for _, d := range deps {
		out[d] = truncateMiddle(outputs[d], each)
	}
	return out
}

// truncateMiddle keeps the head and the tail of s within limit bytes, with a
// marker saying how much was dropped.
func truncateMiddle(s string, limit int) string {
	out, _ := toolexec.ClipMiddle(s, limit, "\uFFFD")
	return out
}
