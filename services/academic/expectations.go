package academic

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	academicv1 "sylk.dev/sylk/gen/go/sylk/academic/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/intent"
)

// Bounds of a domain expectations request.
const (
	maxExpectationRequestBytes = 64 << 10
	maxConstraints             = intent.MaxStatements
	maxConstraintBytes         = intent.MaxStatementBytes
	maxDomainBytes             = 200
)

// Confidence in the built-in table's answer: for a domain the caller named,
// and for one derived from the request's wording.
const (
	confidenceNamedDomain   = 0.9
	confidenceDerivedDomain = 0.8
)

// GetDomainExpectations answers what users of a feature domain expect
// without saying it (spec A-10), from the built-in table of pkg/intent, less
// the expectations the given constraints rule out (spec A-11). An unknown
// domain has no expectations: the answer is empty, with confidence 0.
func (s *Service) GetDomainExpectations(ctx context.Context, req *academicv1.GetDomainExpectationsRequest) (*academicv1.GetDomainExpectationsResponse, error) {
	if _, err := identity.Require(ctx); err != nil {
		return nil, err
	}
	if err := validateExpectationsRequest(req); err != nil {
		return nil, err
	}
	resp := &academicv1.GetDomainExpectationsResponse{Source: intent.SourceLocal}
	domain := strings.ToLower(strings.TrimSpace(req.GetFeatureDomain()))
	confidence := confidenceNamedDomain
	if domain == "" {
		var ok bool
		if domain, ok = intent.FeatureDomain(req.GetRequest()); !ok {
			return resp, nil
		}
		confidence = confidenceDerivedDomain
	}
	resp.Domain = domain
	exps := intent.Lookup(domain)
	if exps == nil {
		return resp, nil
	}
	for _, e := range intent.Allowed(req.GetExistingConstraints(), exps) {
		resp.Expectations = append(resp.Expectations, e.Proto())
	}
	resp.Confidence = confidence
	s.metrics.expectations.WithLabelValues(domain).Inc()
	return resp, nil
}

func validateExpectationsRequest(req *academicv1.GetDomainExpectationsRequest) error {
	switch {
	case strings.TrimSpace(req.GetFeatureDomain()) == "" && strings.TrimSpace(req.GetRequest()) == "":
		return errNoExpectationsSubject
	case len(req.GetFeatureDomain()) > maxDomainBytes:
		return apierr.Invalid("feature_domain", "over %d bytes", maxDomainBytes)
	case len(req.GetRequest()) > maxExpectationRequestBytes:
		return apierr.Invalid("request", "%d bytes exceeds the limit of %d bytes", len(req.GetRequest()), maxExpectationRequestBytes)
	case len(req.GetExistingConstraints()) > maxConstraints:
		return apierr.Invalid("existing_constraints", "%d exceeds the limit of %d", len(req.GetExistingConstraints()), maxConstraints)
	}
	for i, c := range req.GetExistingConstraints() {
		if len(c) > maxConstraintBytes {
			return apierr.Invalid(fmt.Sprintf("existing_constraints[%d]", i), "over %d bytes", maxConstraintBytes)
		}
	}
	for field, v := range map[string]string{"feature_domain": req.GetFeatureDomain(), "request": req.GetRequest()} {
		if !utf8.ValidString(v) {
			return apierr.Invalid(field, "must be valid UTF-8")
		}
	}
	for i, c := range req.GetExistingConstraints() {
		if !utf8.ValidString(c) {
			return apierr.Invalid(fmt.Sprintf("existing_constraints[%d]", i), "must be valid UTF-8")
		}
	}
	return nil
}
