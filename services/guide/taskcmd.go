package guide

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchestratorv1 "sylk.dev/sylk/gen/go/sylk/orchestrator/v1"
	"sylk.dev/sylk/pkg/logx"
)

// taskUsage is the /task command's usage line.
const taskUsage = "/task <node> query|prompt <guidance>|interrupt|ignore_inspector|ignore_tester|retry [max_loops]|skip [reason]|escalate [message]|handoff"

// taskActions maps the /task spelling of an action (spec F-13, F-11).
var taskActions = map[string]orchestratorv1.TaskActionType{
	"query":            orchestratorv1.TaskActionType_TASK_ACTION_TYPE_QUERY,
	"interrupt":        orchestratorv1.TaskActionType_TASK_ACTION_TYPE_INTERRUPT,
	"ignore_inspector": orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_INSPECTOR,
	"ignore_tester":    orchestratorv1.TaskActionType_TASK_ACTION_TYPE_IGNORE_TESTER,
	"retry":            orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY,
	"prompt":           orchestratorv1.TaskActionType_TASK_ACTION_TYPE_PROMPT,
	"skip":             orchestratorv1.TaskActionType_TASK_ACTION_TYPE_SKIP,
	"escalate":         orchestratorv1.TaskActionType_TASK_ACTION_TYPE_ESCALATE,
	"handoff":          orchestratorv1.TaskActionType_TASK_ACTION_TYPE_HANDOFF,
}

// taskCommand acts on a node of the session's newest run holding it:
// "/task <node> <action> [max_loops | message]". "<run id>/<node>" names
// the run.
func (s *Service) taskCommand(ctx context.Context, env *commandEnv, args []string) (commandResult, error) {
	if len(args) < 2 {
		return commandResult{reply: "usage: " + taskUsage}, nil
	}
	act, ok := taskActions[strings.ToLower(args[1])]
	if !ok {
		return commandResult{reply: fmt.Sprintf("unknown task action %s; usage: %s", truncate(args[1], 32), taskUsage)}, nil
	}
	if s.orchestrator == nil {
		return commandResult{reply: "The orchestrator is not configured, so there are no tasks to act on."}, nil
	}
	req := &orchestratorv1.TaskActionRequest{NodeId: args[0], Action: act, Session: "sessions/" + env.session.ID}
	if run, node, ok := strings.Cut(args[0], "/"); ok {
		req.Name, req.Session, req.NodeId = "runs/"+run, "", node
	}
	rest := args[2:]
	if act == orchestratorv1.TaskActionType_TASK_ACTION_TYPE_RETRY && len(rest) > 0 {
		n, err := strconv.Atoi(rest[0])
		if err != nil || n < 1 {
			return commandResult{reply: "retry takes the new max_loops, a positive number; usage: " + taskUsage}, nil
		}
		req.MaxLoops, rest = int32(n), rest[1:]
	}
	req.Message = unquote(strings.Join(rest, " "))
	cctx, cancel := s.peerContext(ctx, env.owner)
	defer cancel()
	resp, err := s.orchestrator.TaskAction(cctx, req)
	if err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.Unavailable:
			return commandResult{reply: "/task: " + status.Convert(err).Message()}, nil
		}
		s.log.WarnContext(ctx, "task action", logx.Err(err))
		return commandResult{reply: "The orchestrator did not answer; try /task again shortly."}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", resp.GetRun(), resp.GetNodeId(), resp.GetDetail())
	fmt.Fprintf(&b, "\nstate: %s", strings.ToLower(strings.TrimPrefix(resp.GetNodeState().String(), "NODE_STATE_")))
	if p := resp.GetPipeline(); p != nil {
		fmt.Fprintf(&b, "; pipeline %s", p.GetState())
		if p.GetStage() != "" {
			fmt.Fprintf(&b, ", stage %s", p.GetStage())
		}
		fmt.Fprintf(&b, ", loop %d of %d", p.GetLoops(), p.GetMaxLoops())
	}
	if fb := resp.GetLastFeedback(); fb != "" {
		b.WriteString("\nlast feedback: " + truncate(fb, 500))
	}
	return commandResult{reply: b.String()}, nil
}

// unquote drops one pair of quotes around a whole message:
// /task n1 prompt "focus on errors" gives the guidance without them.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
