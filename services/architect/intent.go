package architect

import (
	"context"
	"log/slog"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/status"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	architectv1 "sylk.dev/sylk/gen/go/sylk/architect/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/consult"
	"sylk.dev/sylk/pkg/intent"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// How implicit requirements inference ended for a plan (spec A-10, state
// machine of seed001-A.md section 2).
const (
	inferenceEnriched       = "enriched"
	inferenceNoExpectations = "no_expectations_found"
	inferenceDomainUnknown  = "domain_unknown"
	inferenceUnavailable    = "unavailable: "
)

// Bounds of the user's own constraints and criteria on a plan.
const (
	maxStatements     = intent.MaxStatements
	maxStatementBytes = intent.MaxStatementBytes
)

// statedIntent is what the user said a plan must respect and achieve.
type statedIntent struct {
	intentType  string
	constraints []string
	criteria    []string
}

// enrich derives the request's feature domain, asks the academic what users
// of that domain expect, and merges the answer into the user's criteria
// (spec ). When the academic cannot answer, the plan keeps the
// user's own criteria and names why in its inference.
func (s *Service) enrich(ctx context.Context, request string, stated statedIntent) *architectv1.PlanIntent {
	pi := &architectv1.PlanIntent{KeyConstraints: stated.constraints}
	domain, ok := intent.FeatureDomain(request)
	if !ok {
		pi.Inference = inferenceDomainUnknown
		pi.SuccessCriteria = intent.Merge("", nil, stated.criteria, nil)
		return pi
	}
	pi.FeatureDomain = domain
	resp, err := s.expectations(ctx, domain, stated)
	if err != nil {
		s.metrics.inference.WithLabelValues("unavailable").Inc()
		pi.Inference = inferenceUnavailable + err.Error()
		pi.SuccessCriteria = intent.Merge(domain, nil, stated.criteria, nil)
		return pi
	}
	pi.SuccessCriteria = intent.MergeProto(domain, stated.constraints, stated.criteria, resp.GetExpectations())
	pi.Inference = inferenceEnriched
	if len(resp.GetExpectations()) == 0 {
		pi.Inference = inferenceNoExpectations
	}
	s.metrics.inference.WithLabelValues(pi.Inference).Inc()
	return pi
}

// expectations consults the academic directly (spec A-40: the architect
// may), within Config.AcademicTimeout.
func (s *Service) expectations(ctx context.Context, domain string, stated statedIntent) (*academicv1.GetDomainExpectationsResponse, error) {
	if s.academic == nil {
		return nil, errNoAcademic
	}
	ctx = consult.WithCaller(ctx, topology.AgentArchitect)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AcademicTimeout)
	defer cancel()
	resp, err := s.academic.GetDomainExpectations(ctx, &academicv1.GetDomainExpectationsRequest{
		IntentType: stated.intentType, FeatureDomain: domain, ExistingConstraints: stated.constraints})
	if err != nil {
		s.log.WarnContext(ctx, "ask the academic for domain expectations", slog.String("domain", domain), logx.Err(err))
		return nil, academicError{err}
	}
	return resp, nil
}

// errNoAcademic is the inference's reason when no academic is configured.
var errNoAcademic = academicError{}

type academicError struct{ err error }

func (e academicError) Error() string {
	if e.err == nil {
		return "no academic configured"
	}
	return "the academic did not answer: " + status.Convert(e.err).Message()
}

// checkStatements trims the user's constraints or criteria, drops empty
// ones and checks their number and size.
func checkStatements(field string, in []string) ([]string, error) {
	if len(in) > maxStatements {
		return nil, apierr.Invalid(field, "%d entries exceed the limit of %d", len(in), maxStatements)
	}
	var out []string
	for i, v := range in {
		v = strings.TrimSpace(v)
		switch {
		case len(v) > maxStatementBytes:
			return nil, apierr.Invalid(field, "entry %d: %d bytes exceeds the limit of %d bytes", i, len(v), maxStatementBytes)
		case !utf8.ValidString(v):
			return nil, apierr.Invalid(field, "entry %d: must be valid UTF-8", i)
		case v != "":
			out = append(out, v)
		}
	}
	return out, nil
}

// clipStatements bounds what arrives from another agent (the Guide's
// structured intent) as checkStatements would, cutting instead of refusing.
func clipStatements(in []string) []string {
	var out []string
	for _, v := range in {
		v = strings.ToValidUTF8(strings.TrimSpace(v), "")
		if len(v) > maxStatementBytes {
			v = strings.ToValidUTF8(v[:maxStatementBytes], "")
		}
		if v != "" && len(out) < maxStatements {
			out = append(out, v)
		}
	}
	return out
}
