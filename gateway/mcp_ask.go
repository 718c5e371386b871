package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// ask puts a question to the Guide, as the console does: in a session (a
// new one unless one is given), then it follows the session's events until
// the request's outcome arrives: an agent's answer, a question back to the
// user, a plan awaiting approval, or a failure.

func (m *mcpServer) addAskTool(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Annotations: &mcp.ToolAnnotations{OpenWorldHint: new(false)},
		Description: "Ask Sylk a question in plain language (where is X, how does Y work, what did we decide about Z, " +
			"what do the docs say). The Guide routes it to the right agent; the answer cites its sources and says how well " +
			"its citations held. If Sylk asks a question back, answer it with ask again, passing session and inReplyTo. " +
			"A change request becomes a plan: approve it with approve_plan."}, m.ask)
}

// AskInput is ask's input.
type AskInput struct {
	Question string `json:"question,omitempty" jsonschema:"the question or request; required unless answerOf is set"`
	Session  string `json:"session,omitempty" jsonschema:"the session to ask in (sessions/{id} or its id), to keep a conversation's context; a new session when empty"`
	// Repository scopes a new session.
	Repository string `json:"repository,omitempty" jsonschema:"for a new session: the repository it works on (repositories/{id} or its id)"`
	InReplyTo  string `json:"inReplyTo,omitempty" jsonschema:"the clarification this answers (sessions/{s}/clarifications/{c}, from a previous ask)"`
	// AnswerOf resumes waiting for a request that did not finish in time.
	AnswerOf       string `json:"answerOf,omitempty" jsonschema:"wait again for the answer to this earlier request (its correlationId) instead of asking; needs session"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty" jsonschema:"how long to wait for the answer (default and most: the gateway's request timeout less 5s)"`
}

// Citation is a source an answer rests on.
type Citation struct {
	Name      string `json:"name"`
	Title     string `json:"title,omitempty"`
	Path      string `json:"path,omitempty"`
	LineStart int32  `json:"lineStart,omitempty"`
	LineEnd   int32  `json:"lineEnd,omitempty"`
	Revision  string `json:"revision,omitempty"`
	Heading   string `json:"heading,omitempty"`
	// Problem says why a dropped citation failed verification.
	Problem string `json:"problem,omitempty"`
}

// Clarification is a question Sylk asks back.
type Clarification struct {
	// Name is what inReplyTo takes.
	Name        string   `json:"name"`
	Question    string   `json:"question"`
	Options     []string `json:"options,omitempty"`
	Reason      string   `json:"reason,omitempty"`
	RequestedBy string   `json:"requestedBy,omitempty"`
}

// PlanRef is a plan a request produced.
type PlanRef struct {
	Name  string `json:"name"`
	Title string `json:"title,omitempty"`
	Nodes int32  `json:"nodes,omitempty"`
}

// AskOutput is ask's answer. Outcome says which part is set: "answered"
// (answer, citations, grounding), "clarification", "plan" or "reply" (the
// Guide's own reply to a command).
type AskOutput struct {
	Session       string `json:"session"`
	CorrelationID string `json:"correlationId,omitempty"`
	Outcome       string `json:"outcome"`
	Agent         string `json:"agent,omitempty"`
	Answer        string `json:"answer,omitempty"`
	// CannotHelp is set when the agent could not help, with the reason.
	CannotHelp       bool       `json:"cannotHelp,omitempty"`
	CannotHelpReason string     `json:"cannotHelpReason,omitempty"`
	Citations        []Citation `json:"citations,omitempty"`
	// GroundingRatio is the share of the model's citations that held when
	// checked against what they cite (0 when no model wrote the answer).
	GroundingRatio   float64    `json:"groundingRatio"`
	Ungrounded       bool       `json:"ungrounded,omitempty"`
	Grounding        string     `json:"grounding,omitempty"`
	DroppedCitations []Citation `json:"droppedCitations,omitempty"`
	Model            string     `json:"model,omitempty"`
	Revision         string     `json:"revision,omitempty"`
	// Confidence is the chain's cumulative confidence and its band.
	Confidence      float64        `json:"confidence,omitempty"`
	ConfidenceBand  string         `json:"confidenceBand,omitempty"`
	SuggestedAction string         `json:"suggestedAction,omitempty"`
	Clarification   *Clarification `json:"clarification,omitempty"`
	Plan            *PlanRef       `json:"plan,omitempty"`
}

func (m *mcpServer) ask(ctx context.Context, req *mcp.CallToolRequest, in AskInput) (*mcp.CallToolResult, AskOutput, error) {
	var out AskOutput
	wait, err := m.askWait(in)
	if err != nil {
		return nil, out, err
	}
	ctx, done, err := m.begin(ctx, req, toolCall{service: "guide", ready: m.guide != nil, writes: "ask"})
	defer done()
	if err != nil {
		return nil, out, err
	}
	out.Session, out.CorrelationID = resourceName("sessions", in.Session), in.AnswerOf
	if in.AnswerOf == "" {
		if out.Session, err = m.askSession(ctx, out.Session, in.Repository); err != nil {
			return nil, out, err
		}
		sent, err := m.guide.SendMessage(ctx, &guidev1.SendMessageRequest{Parent: out.Session, Text: in.Question,
			InReplyTo: in.InReplyTo})
		if err != nil {
			return nil, out, toolError(err)
		}
		out.CorrelationID = sent.GetCorrelationId()
		if sent.GetReply() != "" {
			out.Outcome, out.Agent, out.Answer = "reply", "guide", sent.GetReply()
			return textResult(out.Answer), out, nil
		}
	}
	ev, err := m.awaitOutcome(ctx, out.Session, out.CorrelationID, wait)
	if err != nil {
		return nil, out, err
	}
	if err := outcomeOf(ev, &out); err != nil {
		return nil, out, err
	}
	return textResult(askText(out)), out, nil
}

// askWait checks ask's input and returns how long it waits.
func (m *mcpServer) askWait(in AskInput) (time.Duration, error) {
	switch {
	case in.AnswerOf == "" && strings.TrimSpace(in.Question) == "":
		return 0, errors.New("INVALID_ARGUMENT: question is required (or answerOf with session, to wait again for an earlier request)")
	case in.AnswerOf != "" && in.Session == "":
		return 0, errors.New("INVALID_ARGUMENT: answerOf needs the session the request was asked in")
	case in.TimeoutSeconds < 0:
		return 0, errors.New("INVALID_ARGUMENT: timeoutSeconds must not be negative")
	}
	wait := m.askTimeout
	if in.TimeoutSeconds > 0 {
		wait = min(wait, time.Duration(in.TimeoutSeconds)*time.Second)
	}
	return wait, nil
}

// askSession returns session, or a new session on repository when it is
// empty.
func (m *mcpServer) askSession(ctx context.Context, session, repository string) (string, error) {
	if session != "" {
		return session, nil
	}
	if m.sessions == nil {
		return "", errServiceMissing("guide")
	}
	resp, err := m.sessions.CreateSession(ctx, &guidev1.CreateSessionRequest{Session: &guidev1.Session{
		DisplayName: "mcp", Repository: resourceName("repositories", repository)}})
	if err != nil {
		return "", toolError(err)
	}
	return resp.GetSession().GetName(), nil
}

// outcomeTypes are the events that end a request's wait.
var outcomeTypes = map[eventv1.EventType]bool{
	eventv1.EventType_EVENT_TYPE_MESSAGE_ANSWERED:        true,
	eventv1.EventType_EVENT_TYPE_CLARIFICATION_REQUESTED: true,
	eventv1.EventType_EVENT_TYPE_PLAN_AWAITING_APPROVAL:  true,
	eventv1.EventType_EVENT_TYPE_MESSAGE_TIMEOUT:         true,
	eventv1.EventType_EVENT_TYPE_MESSAGE_UNDELIVERABLE:   true,
	eventv1.EventType_EVENT_TYPE_ERROR:                   true,
}

// awaitOutcome follows the session's events (from its first: the stream
// is the session's own, and the request's events may already be there)
// until one ends the request with correlation id corr, or wait is over.
func (m *mcpServer) awaitOutcome(ctx context.Context, session, corr string, wait time.Duration) (*eventv1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	stream, err := m.guide.StreamEvents(ctx, &guidev1.StreamEventsRequest{Parent: session})
	if err != nil {
		return nil, toolError(err)
	}
	for {
		resp, err := stream.Recv()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("DEADLINE_EXCEEDED: no answer within %s; the agents may still be working: "+
				"call ask with session %q and answerOf %q to wait again", wait.Round(time.Second), session, corr)
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("UNAVAILABLE: the session's event stream ended before the answer; "+
				"call ask with session %q and answerOf %q to wait again", session, corr)
		case err != nil:
			return nil, toolError(err)
		}
		ev := resp.GetEvent()
		if outcomeTypes[ev.GetType()] && eventCorrelation(ev) == corr {
			return ev, nil
		}
	}
}

// eventCorrelation is the correlation id of an event (an error event may
// carry it in its payload only).
func eventCorrelation(ev *eventv1.Event) string {
	if ev.GetCorrelationId() != "" {
		return ev.GetCorrelationId()
	}
	return ev.GetError().GetCorrelationId()
}

// outcomeOf fills out from the event that ended the request, or returns
// the failure it reports.
func outcomeOf(ev *eventv1.Event, out *AskOutput) error {
	switch p := ev.GetPayload().(type) {
	case *eventv1.Event_MessageAnswered:
		out.Outcome = "answered"
		fillAnswer(p.MessageAnswered, out)
	case *eventv1.Event_ClarificationRequested:
		c := p.ClarificationRequested
		out.Outcome, out.Agent = "clarification", c.GetRequestingAgent()
		out.Clarification = &Clarification{Name: c.GetClarification(), Question: ev.GetText(), Options: c.GetOptions(),
			Reason: c.GetReason(), RequestedBy: c.GetRequestingAgent()}
	case *eventv1.Event_Plan:
		out.Outcome, out.Agent = "plan", ev.GetSource()
		out.Plan = &PlanRef{Name: p.Plan.GetPlan(), Title: p.Plan.GetTitle(), Nodes: p.Plan.GetNodes()}
	case *eventv1.Event_MessageUnanswered:
		u := p.MessageUnanswered
		return fmt.Errorf("UNAVAILABLE: %s did not answer (%s): %s; try again later, or rephrase the question",
			u.GetTarget(), u.GetReason(), firstNonEmpty(u.GetDetail(), ev.GetText()))
	case *eventv1.Event_Error:
		return fmt.Errorf("%s: %s", firstNonEmpty(p.Error.GetReason(), "FAILED"), firstNonEmpty(p.Error.GetMessage(), ev.GetText()))
	default:
		return fmt.Errorf("INTERNAL: unexpected event %s", ev.GetType())
	}
	return nil
}

func fillAnswer(a *messagev1.AgentAnswer, out *AskOutput) {
	out.Agent, out.Answer, out.Model, out.Revision = a.GetAgent(), a.GetText(), a.GetModel(), a.GetRevision()
	out.CannotHelp, out.CannotHelpReason = a.GetCannotHelp(), a.GetCannotHelpReason()
	out.GroundingRatio, out.Ungrounded, out.Grounding = a.GetGroundingRatio(), a.GetUngrounded(), a.GetGrounding()
	out.Confidence, out.ConfidenceBand, out.SuggestedAction = a.GetCumulativeConfidence(), a.GetConfidenceBand(), a.GetSuggestedAction()
	out.Citations = citations(a.GetCitations())
	out.DroppedCitations = citations(a.GetDroppedCitations())
}

func citations(cs []*messagev1.Citation) []Citation {
	var out []Citation
	for _, c := range cs {
		out = append(out, Citation{Name: c.GetName(), Title: c.GetTitle(), Path: c.GetPath(), LineStart: c.GetLineStart(),
			LineEnd: c.GetLineEnd(), Revision: c.GetRevision(), Heading: c.GetHeading(), Problem: c.GetProblem()})
	}
	return out
}

// askText is ask's readable answer.
func askText(out AskOutput) string {
	var b strings.Builder
	switch out.Outcome {
	case "clarification":
		c := out.Clarification
		fmt.Fprintf(&b, "Sylk asks: %s\n", c.Question)
		for _, o := range c.Options {
			fmt.Fprintf(&b, "- %s\n", o)
		}
		fmt.Fprintf(&b, "Answer with ask: session %q, inReplyTo %q.", out.Session, c.Name)
	case "plan":
		fmt.Fprintf(&b, "Plan %s (%s, %d tasks) awaits approval: review it with get_plan, start it with approve_plan.",
			out.Plan.Name, out.Plan.Title, out.Plan.Nodes)
	default:
		b.WriteString(out.Answer)
		if out.CannotHelp {
			fmt.Fprintf(&b, "\n\n%s could not help: %s", out.Agent, out.CannotHelpReason)
		}
		if len(out.Citations) > 0 {
			b.WriteString("\n\nSources:")
			for _, c := range out.Citations {
				fmt.Fprintf(&b, "\n- %s", citationText(c))
			}
		}
		if out.Grounding != "" {
			fmt.Fprintf(&b, "\n\n%s", out.Grounding)
		}
	}
	fmt.Fprintf(&b, "\n\n(session %s)", out.Session)
	return b.String()
}

func citationText(c Citation) string {
	s := c.Name
	if c.Path != "" {
		s += " " + c.Path
		if c.LineStart > 0 {
			s += fmt.Sprintf(":%d-%d", c.LineStart, c.LineEnd)
		}
	}
	if c.Heading != "" {
		s += " > " + c.Heading
	}
	if c.Title != "" && c.Path == "" {
		s += " (" + c.Title + ")"
	}
	return s
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
