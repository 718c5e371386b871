package llm

import "time"

// UsageRecord is one call's attributed usage (B-17), written by the gate.
type UsageRecord struct {
	At        time.Time
	RequestID string
	Attribution
	Provider     string
	Model        string
	InputTokens  int
	OutputTokens int
	CostUSD      float64
	Latency      time.Duration
	// Outcome is ok, error, preempted or refused.
	Outcome string
	// ErrorTier is set when Outcome is error.
	ErrorTier string
}

// Priority classes (B-13).
const (
	PriorityUserInteractive = 100
	PriorityPlanning        = 80
	PriorityExecution       = 60
	PriorityValidation      = 40
	PriorityBackground      = 20
)

// PriorityOf is the gate class of req: its explicit Priority, else 100 when
// a user invoked it, else by agent type (B-13): architect 80, engineer and
// designer 60, inspector and tester 40, archivalist, librarian and academic
// 20, anything else 60.
func PriorityOf(req *Request) int {
	if req.Priority > 0 {
		return req.Priority
	}
	if req.UserInvoked {
		return PriorityUserInteractive
	}
	switch req.AgentType {
	case "architect":
		return PriorityPlanning
	case "engineer", "designer":
		return PriorityExecution
	case "inspector", "tester":
		return PriorityValidation
	case "archivalist", "librarian", "academic":
		return PriorityBackground
	}
	return PriorityExecution
}
