package llm

// EstimateTokens is the offline token estimate ceil(len/4) (P-05).
func EstimateTokens(s string) int {
	return (len(s) + 3) / 4
}

// messageOverhead covers role markers and separators per message.
const messageOverhead = 4

// EstimateMessage estimates one message's tokens.
func EstimateMessage(m Message) int {
	n := EstimateTokens(m.Content) + messageOverhead
	for _, tc := range m.ToolCalls {
		n += EstimateTokens(tc.Name) + EstimateTokens(tc.Arguments)
	}
	return n
}

// EstimateRequest estimates the prompt tokens of req: system prompt,
// messages and tool schemas.
func EstimateRequest(req *Request) int {
	n := 0
	if req.System != "" {
		n += EstimateTokens(req.System) + messageOverhead
	}
	for _, m := range req.Messages {
		n += EstimateMessage(m)
	}
	for _, t := range req.Tools {
		n += EstimateTokens(t.Name) + EstimateTokens(t.Description) + 16*len(t.Schema)
	}
	return n
}
