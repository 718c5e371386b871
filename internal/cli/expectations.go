package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
)

// runExpectations asks the Academic what users of a request's feature
// domain expect without saying it.
func runExpectations(ctx context.Context, e *env, args []string) error {
	fs := e.flags("sylk expectations", `"REQUEST" [flags]`,
		"Prints what users of the request's feature domain expect without saying it, with why;\n"+
			"an expectation a --constraint rules out is left out. A request whose domain is not\n"+
			"recognised has none.")
	var constraints stringList
	fs.Var(&constraints, "constraint", "a key constraint of the request (repeatable)")
	domain := fs.String("domain", "", `the feature domain, such as "authentication/logout" (default: derived from the request)`)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	request := strings.TrimSpace(strings.Join(pos, " "))
	if request == "" && *domain == "" {
		fs.Usage()
		return usageErrorf("sylk expectations needs a request (or --domain)")
	}
	req := &academicv1.GetDomainExpectationsRequest{Request: request, FeatureDomain: *domain, ExistingConstraints: constraints}
	var resp academicv1.GetDomainExpectationsResponse
	if done, err := e.request(ctx, http.MethodPost, "/v1/expectations:lookup", req, &resp); done {
		return err
	}
	e.renderExpectations(&resp)
	return nil
}

// renderExpectations prints the domain, then each expectation with its
// priority and rationale.
func (e *env) renderExpectations(resp *academicv1.GetDomainExpectationsResponse) {
	if resp.GetDomain() == "" {
		fmt.Fprintln(e.out, "No feature domain recognised: no expectations.")
		return
	}
	fmt.Fprintf(e.out, "%s (confidence %.2f, source %s)\n", resp.GetDomain(), resp.GetConfidence(), orDash(resp.GetSource()))
	if len(resp.GetExpectations()) == 0 {
		fmt.Fprintln(e.out, "  No expectations left: the constraints rule them out.")
	}
	for _, x := range resp.GetExpectations() {
		fmt.Fprintf(e.out, "  %-11s %s\n", expectationPriority(x.GetPriority()), x.GetExpectation())
		if x.GetRationale() != "" {
			writeIndented(e.out, x.GetRationale(), 14)
		}
	}
}

func expectationPriority(p messagev1.ExpectationPriority) string {
	if p == messagev1.ExpectationPriority_EXPECTATION_PRIORITY_UNSPECIFIED {
		return "-"
	}
	return strings.ToLower(strings.TrimPrefix(p.String(), "EXPECTATION_PRIORITY_"))
}
