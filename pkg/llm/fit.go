package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
)

// DefaultContextReserve is kept free for the answer (B-18).
const DefaultContextReserve = 4096

// Summarizer condenses messages into text (usually a fast model's call).
type Summarizer func(ctx context.Context, msgs []Message) (string, error)

// OverflowSink keeps messages dropped from the window (the Archivalist's
// context overflow store) so that nothing is lost.
type OverflowSink func(ctx context.Context, msgs []Message) error

// Fitter fits a conversation into a model's context window (B-18).
type Fitter struct {
	// Reserve is kept free for the answer; 0 means DefaultContextReserve.
	Reserve   int
	Summarize Summarizer
	Overflow  OverflowSink
	Log       *slog.Logger
}

// Fit strategies.
const (
	FitUnchanged   = "unchanged"
	FitSmartSelect = "smart_select"
	FitSummarized  = "summarized"
	FitTruncated   = "truncated"
)

// FitResult is the fitted conversation.
type FitResult struct {
	Messages []Message
	Strategy string
	// Dropped counts messages left out of the window (summarised or not).
	Dropped int
}

// Fit returns req.Messages fitted into maxContext tokens. System messages
// (and req.System) are always kept. In order: unchanged if it fits; else
// smart selection by relevance when messages are scored (greedy by score
// until the first that does not fit, original order restored); else hand the
// older half off to the overflow sink and replace it with one
// "[Context summary of N earlier messages]" system message, or drop it when
// summarising fails. It fails with ErrContextTooLarge when even the system
// prompt does not fit.
func (f Fitter) Fit(ctx context.Context, req *Request, maxContext int) (FitResult, error) {
	reserve := f.Reserve
	if reserve <= 0 {
		reserve = DefaultContextReserve
	}
	available := maxContext - reserve
	total := EstimateRequest(req)
	if total <= available {
		return FitResult{Messages: req.Messages, Strategy: FitUnchanged}, nil
	}
	sysTokens := 0
	if req.System != "" {
		sysTokens = EstimateTokens(req.System) + messageOverhead
	}
	for _, t := range req.Tools {
		sysTokens += EstimateTokens(t.Name) + EstimateTokens(t.Description) + 16*len(t.Schema)
	}
	var conv []int // indexes of non-system messages
	for i, m := range req.Messages {
		if m.Role == RoleSystem {
			sysTokens += EstimateMessage(m)
		} else {
			conv = append(conv, i)
		}
	}
	availConv := available - sysTokens
	if availConv <= 0 {
		return FitResult{}, fmt.Errorf("%w: system prompt needs %d tokens, %d available", ErrContextTooLarge, sysTokens, available)
	}
	keep := func(sel map[int]bool) []Message {
		var out []Message
		for i, m := range req.Messages {
			if m.Role == RoleSystem || sel[i] {
				out = append(out, m)
			}
		}
		return out
	}

	// 1. Smart selection.
	scored := false
	for _, i := range conv {
		if req.Messages[i].Relevance > 0 {
			scored = true
			break
		}
	}
	if scored {
		byScore := append([]int(nil), conv...)
		sort.SliceStable(byScore, func(a, b int) bool {
			return req.Messages[byScore[a]].Relevance > req.Messages[byScore[b]].Relevance
		})
		sel := map[int]bool{}
		used := 0
		for _, i := range byScore {
			n := EstimateMessage(req.Messages[i])
			if used+n > availConv {
				break
			}
			used += n
			sel[i] = true
		}
		if len(sel) > 0 {
			return FitResult{Messages: keep(sel), Strategy: FitSmartSelect, Dropped: len(conv) - len(sel)}, nil
		}
	}

	// 2. Hand-off: the most recent messages that fit in half the budget stay.
	half := availConv / 2
	recent := map[int]bool{}
	used := 0
	cut := len(conv)
	for k := len(conv) - 1; k >= 0; k-- {
		n := EstimateMessage(req.Messages[conv[k]])
		if used+n > half {
			break
		}
		used += n
		recent[conv[k]] = true
		cut = k
	}
	var overflow []Message
	for _, i := range conv[:cut] {
		overflow = append(overflow, req.Messages[i])
	}
	if f.Overflow != nil && len(overflow) > 0 {
		if err := f.Overflow(ctx, overflow); err != nil && f.Log != nil {
			f.Log.WarnContext(ctx, "context overflow hand-off failed; continuing", slog.Any("error", err))
		}
	}

	// 3. Summarise the overflow into the other half.
	if f.Summarize != nil && len(overflow) > 0 {
		s, err := f.Summarize(ctx, overflow)
		if err == nil {
			text := fmt.Sprintf("[Context summary of %d earlier messages]\n%s", len(overflow), s)
			if limit := (availConv-used)*4 - messageOverhead*4; len(text) > limit && limit > 0 {
				text = text[:limit]
			}
			summary := Message{Role: RoleSystem, Content: text}
			var out []Message
			for _, m := range req.Messages {
				if m.Role == RoleSystem {
					out = append(out, m)
				}
			}
			out = append(out, summary)
			for _, i := range conv[cut:] {
				out = append(out, req.Messages[i])
			}
			return FitResult{Messages: out, Strategy: FitSummarized, Dropped: len(overflow)}, nil
		}
		if f.Log != nil {
			f.Log.WarnContext(ctx, "context summary failed; keeping recent messages only", slog.Any("error", err))
		}
	}
	return FitResult{Messages: keep(recent), Strategy: FitTruncated, Dropped: len(overflow)}, nil
}

// contextOverflow matches providers' "prompt too long" rejections.
var contextOverflow = regexp.MustCompile(`(?i)context[ _]length|context window|prompt is too long|too many tokens|maximum context|context_length_exceeded|input is too long`)

// IsContextOverflow reports whether a provider rejected a prompt for its
// length (P-07), as opposed to any other bad request.
func IsContextOverflow(err error) bool {
	if err == nil {
		return false
	}
	var pe *Error
	if errors.As(err, &pe) && pe.StatusCode != 0 && pe.StatusCode != 400 && pe.StatusCode != 413 {
		return false
	}
	msg := err.Error()
	if pe != nil && pe.Err != nil {
		msg += " " + pe.Err.Error()
	}
	return contextOverflow.MatchString(msg)
}

// RefitFactor shrinks the window for the one extra fitting pass after a
// provider rejected a prompt as too long (P-07).
const RefitFactor = 0.85
