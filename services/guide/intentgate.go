package guide

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	archivalistv1 "sylk.dev/sylk/gen/go/sylk/archivalist/v1"
	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Steps 2 and 3 of the intent gate (spec A-30), for the implementation
// requests (EXPLICIT, OPEN_ENDED, GITHUB_WORK) that go to the architect.
//
// Step 2 checks the request before routing it: that its assumptions are
// explicit, its scope bounded and its context enough to act on. A failed
// check asks the user instead of routing. OPEN_ENDED requests skip the
// scope check: their scope is what the architect clarifies (spec A-29).
//
// Step 3 consults the librarian (codebase health of the target area) and
// the archivalist (similar failures recorded before) and attaches both
// answers to the routed envelope (its pre_route). The librarian searches
// the session's repository, when it names one.

// Step 2 checks, as named in the clarification's context.
const (
	checkContext     = "context"
	checkScope       = "scope"
	checkAssumptions = "assumptions"
)

var (
	// A change whose only object is a pronoun or a placeholder.
	vagueSubjects = map[string]bool{"": true, "it": true, "this": true, "that": true, "these": true, "those": true,
		"them": true, "stuff": true, "things": true, "something": true, "everything": true, "the_code": true, "code": true}
	unboundedPattern = regexp.MustCompile(`\b(everything|every file|all (?:the )?(?:code|files)|(?:the )?(?:whole|entire) (?:codebase|code base|project|repo|repository|system|app|application))\b`)
	implicitPattern  = regexp.MustCompile(`\b(the usual way|as usual|as (?:we )?discussed|like we discussed|the way we (?:talked about|agreed)|you know (?:what|how) i mean|the normal way|the way i like)\b`)
)

// validateChange runs step 2 on a change routed to the architect; it
// returns the failed check and the question to ask, or "" when the
// request may be routed.
func validateChange(cl Classification, text string) (check, question string) {
	if cl.Target != topology.AgentArchitect {
		return "", ""
	}
	switch cl.IntentType {
	case gateExplicit, gateOpenEnded, gateGitHubWork:
	default:
		return "", ""
	}
	lower := strings.ToLower(text)
	if m := implicitPattern.FindString(lower); m != "" {
		return checkAssumptions, fmt.Sprintf("Which approach do you mean by %q? Please state it, so that the plan does not rest on a guess.", m)
	}
	if cl.IntentType != gateOpenEnded && unboundedPattern.MatchString(lower) && !specificPattern.MatchString(lower) && !hasIdentifier(text) {
		return checkScope, "That could touch the whole codebase. Which part should this cover (a package, file, feature or endpoint)?"
	}
	if cl.IntentType != gateGitHubWork && vagueSubjects[strings.ToLower(cl.Subject)] {
		return checkContext, "What should be changed? Name the file, function, feature or behaviour you mean."
	}
	return "", ""
}

func hasIdentifier(text string) bool {
	for _, w := range wordPattern.FindAllString(text, -1) {
		if isIdentifier(w) {
			return true
		}
	}
	return false
}

// maxConsultHits bounds each consultation's answer.
const maxConsultHits = 5

// preRoute runs step 3 for a change going to the architect: it asks the
// librarian and the archivalist at once, each within Config.PreRouteTimeout,
// and returns what to attach to the envelope. A consultation that fails is
// attached as unavailable, with the reason; routing goes on. repository,
// when set, is the one the librarian searches.
func (s *Service) preRoute(ctx context.Context, cl Classification, text, repository string) *messagev1.PreRouteContext {
	if cl.Target != topology.AgentArchitect {
		return nil
	}
	switch cl.IntentType {
	case gateExplicit, gateOpenEnded, gateGitHubWork:
	default:
		return nil
	}
	area := strings.ReplaceAll(cl.Subject, "_", " ")
	if strings.TrimSpace(area) == "" {
		area = text
	}
	ctx = consult.WithCaller(ctx, topology.AgentGuide)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.PreRouteTimeout)
	defer cancel()
	out := &messagev1.PreRouteContext{}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		out.CodebaseHealth = truncate(s.codebaseHealth(cctx, area, repository), 2000)
	}()
	go func() {
		defer wg.Done()
		out.FailurePatterns = truncate(s.failurePatterns(cctx, area), 2000)
	}()
	wg.Wait()
	return out
}

// codebaseHealth asks the librarian about the target area, in repository
// when it is set.
func (s *Service) codebaseHealth(ctx context.Context, area, repository string) string {
	if s.librarian == nil {
		return "unavailable: no librarian configured"
	}
	req := &librarianv1.SearchCodeRequest{Query: area, PageSize: maxConsultHits}
	if repository != "" {
		req.Repositories = []string{repository}
	}
	resp, err := s.librarian.SearchCode(ctx, req)
	if err != nil {
		s.log.WarnContext(ctx, "pre-routing consultation of the librarian", logx.Err(err))
		return "unavailable: " + consultError(err)
	}
	if len(resp.GetHits()) == 0 {
		msg := "no code found for " + area
		if h := resp.GetHint(); h != "" {
			msg += " (" + h + ")"
		}
		return msg
	}
	parts := make([]string, 0, len(resp.GetHits()))
	for _, h := range resp.GetHits() {
		p := fmt.Sprintf("%s:%d-%d", h.GetPath(), h.GetLineStart(), h.GetLineEnd())
		if h.GetSymbol() != "" {
			p += " " + h.GetSymbol()
		}
		parts = append(parts, p)
	}
	return fmt.Sprintf("%d places in the code: %s", len(parts), strings.Join(parts, "; "))
}

// failurePatterns asks the archivalist for failures recorded about the
// area in any session of the tenant.
func (s *Service) failurePatterns(ctx context.Context, area string) string {
	if s.archivalist == nil {
		return "unavailable: no archivalist configured"
	}
	resp, err := s.archivalist.SearchEntries(ctx, &archivalistv1.SearchEntriesRequest{Query: area, CrossSession: true,
		Category: "failure", PageSize: maxConsultHits})
	if err != nil {
		s.log.WarnContext(ctx, "pre-routing consultation of the archivalist", logx.Err(err))
		return "unavailable: " + consultError(err)
	}
	if len(resp.GetHits()) == 0 {
		return "no similar failures recorded"
	}
	parts := make([]string, 0, len(resp.GetHits()))
	for _, h := range resp.GetHits() {
		parts = append(parts, truncate(h.GetEntry().GetTitle(), 200))
	}
	return fmt.Sprintf("%d similar failures recorded: %s", len(parts), strings.Join(parts, "; "))
}

// consultError says briefly why a consultation failed.
func consultError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		return "no answer in time"
	}
	return truncate(err.Error(), 200)
}
