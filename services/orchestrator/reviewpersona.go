package orchestrator

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/review"
)

// A run's review persona (spec P-12) reaches its Inspectors through its
// nodes: a node without one of its own is stored with the run's, so that
// the node's choice wins over the run's (and the run's, which its creator
// fills from the session's, over the session's).

// withReviewPersona is n with persona when it has none of its own.
func withReviewPersona(n *orchestratorv1.Node, persona string) *orchestratorv1.Node {
	if persona == "" || n.GetReviewPersona() != "" {
		return n
	}
	out := proto.Clone(n).(*orchestratorv1.Node)
	out.ReviewPersona = persona
	return out
}

// checkReviewPersonas checks the run's and its nodes' review personas.
func checkReviewPersonas(req *orchestratorv1.CreateRunRequest) error {
	if err := review.CheckPersona(req.GetReviewPersona()); err != nil {
		return fmt.Errorf("review_persona: %w", err)
	}
	for _, n := range req.GetDag().GetNodes() {
		if err := review.CheckPersona(n.GetReviewPersona()); err != nil {
			return fmt.Errorf("dag.nodes[%s].review_persona: %w", n.GetId(), err)
		}
	}
	return nil
}
