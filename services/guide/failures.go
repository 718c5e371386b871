package guide

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	guidev1 "sylk.dev/sylk/gen/go/sylk/guide/v1"
	messagev1 "sylk.dev/sylk/gen/go/sylk/message/v1"
	"sylk.dev/sylk/pkg/apierr"
	"sylk.dev/sylk/pkg/identity"
	"sylk.dev/sylk/pkg/ids"
	"sylk.dev/sylk/pkg/logx"
	"sylk.dev/sylk/pkg/topology"
)

// Routing-failure tracking (spec A-33): each failure is stored here, for
// the accuracy metrics and the confidence feedback, and sent to the
// Archivalist as a routing_failure entry.

// CategoryRoutingFailure is the Archivalist category of routing failures.
const CategoryRoutingFailure = "routing_failure"

const (
	maxFailureRequestBytes = 4 << 10
	defaultFailureLimit    = 20
	maxFailureLimit        = 200
)

type routingFailure struct {
	ID              string
	TenantID        string
	UserID          string
	SessionID       string
	OriginalRequest string
	Pattern         string
	ClassifiedAs    string
	RoutedTo        string
	ShouldHaveBeen  string
	Signal          guidev1.RoutingFailureSignal
	CreateTime      time.Time
	// RoutedConfidence and RoutedTime are the confidence and the time of
	// the routing decision the failure corrects, when known (spec A-33:
	// failure rate per confidence, time to correction).
	RoutedConfidence *float64
	RoutedTime       *time.Time
	// Key, when set, names what raised the failure (an agent's envelope):
	// the same key again, from a redelivery, stores nothing more, and
	// insertFailure says so in Repeat.
	Key    string
	Repeat bool
}

// decided fills in the routing decision f corrects from its pending
// request: when it was routed, and with what confidence (the Guide's entry
// of the envelope's confidence chain).
func (f routingFailure) decided(p pendingRequest) routingFailure {
	t := p.CreateTime
	f.RoutedTime = &t
	if env := decodeEnvelope(p.Envelope); env != nil {
		f.RoutedConfidence = guideConfidence(env)
	}
	return f
}

// guideConfidence is the Guide's routing confidence in env's chain.
func guideConfidence(env *messagev1.Envelope) *float64 {
	for _, c := range env.GetConfidenceChain() {
		if c.GetAgent() == authorGuide {
			v := c.GetConfidence()
			return &v
		}
	}
	return nil
}

// signalName is the spec's name of a signal: "EXPLICIT_REDIRECT".
func signalName(s guidev1.RoutingFailureSignal) string {
	return strings.TrimPrefix(s.String(), "ROUTING_FAILURE_SIGNAL_")
}

func signalFromName(name string) guidev1.RoutingFailureSignal {
	return guidev1.RoutingFailureSignal(guidev1.RoutingFailureSignal_value["ROUTING_FAILURE_SIGNAL_"+name])
}

func (f routingFailure) proto() *guidev1.RoutingFailure {
	return &guidev1.RoutingFailure{
		Id:               f.ID,
		OriginalRequest:  f.OriginalRequest,
		ClassifiedAs:     f.ClassifiedAs,
		RoutedTo:         f.RoutedTo,
		ShouldHaveBeen:   f.ShouldHaveBeen,
		FailureSignal:    f.Signal,
		PatternExtracted: f.Pattern,
		SessionId:        f.SessionID,
		CreateTime:       timestamppb.New(f.CreateTime),
	}
}

// insertFailure stores a routing failure in q's transaction; afterFailure
// does the rest once it has committed.
func (s *Service) insertFailure(ctx context.Context, q querier, f routingFailure) (routingFailure, error) {
	f.ID = "route_fail_" + ids.New()
	if f.Key != "" {
		f.ID = "route_fail_" + idFor(f.TenantID+"\x00"+f.Key+".routing_failure")
	}
	f.Pattern = requestPattern(f.OriginalRequest)
	f.CreateTime = s.now()
	tag, err := q.Exec(ctx, `INSERT INTO routing_failures (id, tenant_id, session_id, original_request, pattern,
		classified_as, routed_to, should_have_been, failure_signal, create_time, user_id, routed_confidence, routed_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (id) DO NOTHING`, f.ID, f.TenantID, f.SessionID, f.OriginalRequest, f.Pattern,
		f.ClassifiedAs, f.RoutedTo, f.ShouldHaveBeen, signalName(f.Signal), f.CreateTime, f.UserID, f.RoutedConfidence, f.RoutedTime)
	if err != nil {
		return routingFailure{}, fmt.Errorf("insert routing failure: %w", err)
	}
	if tag.RowsAffected() == 0 {
		f.Repeat = true
		return f, nil
	}
	s.failures.invalidate(f.TenantID)
	return f, nil
}

// afterFailure counts a stored failure, forgets the cached route it
// contradicts and sends it to the Archivalist.
func (s *Service) afterFailure(ctx context.Context, f routingFailure) {
	s.failures.invalidate(f.TenantID) // again, now that it is committed
	s.metrics.failures.WithLabelValues(signalName(f.Signal), f.RoutedTo, f.ShouldHaveBeen).Inc()
	if f.RoutedConfidence != nil {
		s.metrics.failedConfidence.WithLabelValues(bucketLabel(confidenceBucket(*f.RoutedConfidence))).Inc()
	}
	if f.RoutedTime != nil {
		s.metrics.correction.Observe(f.CreateTime.Sub(*f.RoutedTime).Seconds())
	}
	s.cache.forgetRoute(ctx, f.TenantID, f.OriginalRequest)
	s.log.InfoContext(ctx, "routing failure", slog.String("signal", signalName(f.Signal)),
		slog.String("routed_to", f.RoutedTo), slog.String("should_have_been", f.ShouldHaveBeen))
	content := fmt.Sprintf("id: %s\noriginal_request: %s\nclassified_as: %s\nrouted_to: %s\nshould_have_been: %s\nfailure_signal: %s\npattern_extracted: %s\ntimestamp: %s",
		f.ID, f.OriginalRequest, f.ClassifiedAs, f.RoutedTo, f.ShouldHaveBeen, signalName(f.Signal), f.Pattern,
		f.CreateTime.Format(time.RFC3339Nano))
	env := topology.StoreRequest(topology.Record{ID: ids.New(), Tenant: f.TenantID, Session: f.SessionID, User: f.UserID,
		Source: authorGuide, Category: CategoryRoutingFailure, Text: content,
		Title: truncateRunes(fmt.Sprintf("Routing failure (%s): %s -> %s", signalName(f.Signal), f.RoutedTo, f.ShouldHaveBeen), 200)})
	env.CreatedAt = timestamppb.New(f.CreateTime)
	if _, err := s.bus.Publish(ctx, topology.InboxSubject(s.bus, topology.AgentArchivalist), env.GetId(), env); err != nil {
		s.log.WarnContext(ctx, "send routing failure to the archivalist", logx.Err(err))
	}
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// RecordRoutingFailure records a misroute reported by an agent or a client.
func (s *Service) RecordRoutingFailure(ctx context.Context, req *guidev1.RecordRoutingFailureRequest) (*guidev1.RecordRoutingFailureResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	f := routingFailure{TenantID: who.TenantID, UserID: who.UserID, OriginalRequest: strings.TrimSpace(req.GetOriginalRequest()),
		ClassifiedAs: strings.TrimSpace(req.GetClassifiedAs()), RoutedTo: strings.ToLower(strings.TrimSpace(req.GetRoutedTo())),
		ShouldHaveBeen: strings.ToLower(strings.TrimSpace(req.GetShouldHaveBeen())), Signal: req.GetFailureSignal()}
	switch {
	case f.OriginalRequest == "":
		return nil, apierr.Invalid("original_request", "required")
	case len(f.OriginalRequest) > maxFailureRequestBytes:
		return nil, apierr.Invalid("original_request", "%d bytes exceeds the limit of %d bytes", len(f.OriginalRequest), maxFailureRequestBytes)
	case !utf8.ValidString(f.OriginalRequest) || !utf8.ValidString(f.ClassifiedAs):
		return nil, apierr.Invalid("original_request", "must be valid UTF-8")
	case !knownAgent(f.RoutedTo):
		return nil, apierr.Invalid("routed_to", "want one of %s, got %q", strings.Join(slices.Concat(routableAgents, topology.Roles), ", "), truncate(f.RoutedTo, 40))
	case !routable(f.ShouldHaveBeen):
		return nil, apierr.Invalid("should_have_been", "want one of %s, got %q", strings.Join(routableAgents, ", "), truncate(f.ShouldHaveBeen, 40))
	case f.Signal == guidev1.RoutingFailureSignal_ROUTING_FAILURE_SIGNAL_UNSPECIFIED || signalName(f.Signal) == f.Signal.String():
		return nil, apierr.Invalid("failure_signal", "required: one of EXPLICIT_REDIRECT, USER_CORRECTION, TASK_HELP_ESCALATION, CLARIFICATION_LOOP, EMPTY_RESPONSE")
	case len(f.ClassifiedAs) > 64:
		return nil, apierr.Invalid("classified_as", "longer than 64 bytes")
	}
	if sid := req.GetSessionId(); sid != "" {
		if !ids.Valid(sid) {
			return nil, apierr.Invalid("session_id", "want a UUID, got %q", truncate(sid, 60))
		}
		if _, err := getSession(ctx, s.db, ownerOf(who), strings.ToLower(sid), false); err != nil {
			return nil, apierr.Status(ctx, s.log, "record routing failure", err)
		}
		f.SessionID = strings.ToLower(sid)
	}
	stored, err := s.insertFailure(ctx, s.db, f)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "record routing failure", err)
	}
	s.afterFailure(ctx, stored)
	return &guidev1.RecordRoutingFailureResponse{Failure: stored.proto()}, nil
}

// ListRoutingFailures returns the tenant's routing failures whose pattern
// shares a word with request_pattern (all of them when it is empty), newest first.
func (s *Service) ListRoutingFailures(ctx context.Context, req *guidev1.ListRoutingFailuresRequest) (*guidev1.ListRoutingFailuresResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	limit, err := pageSize(req.GetLimit(), defaultFailureLimit, maxFailureLimit)
	if err != nil {
		return nil, apierr.Invalid("limit", "must not be negative")
	}
	words := strings.Fields(requestPattern(req.GetRequestPattern()))
	// A failure holds its user's message: a member sees their own, an
	// admin the tenant's.
	owner := who.UserID
	if who.Role == identity.RoleAdmin {
		owner = ""
	}
	rows, err := s.db.Query(ctx, `SELECT id, session_id, original_request, pattern, classified_as, routed_to,
		should_have_been, failure_signal, create_time FROM routing_failures
		WHERE tenant_id = $1 AND (cardinality($2::text[]) = 0 OR string_to_array(pattern, ' ') && $2::text[])
			AND ($4 = '' OR user_id = $4)
		ORDER BY create_time DESC, id LIMIT $3`, who.TenantID, words, limit, owner)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "list routing failures", fmt.Errorf("list routing failures: %w", err))
	}
	defer rows.Close()
	resp := &guidev1.ListRoutingFailuresResponse{}
	for rows.Next() {
		var f routingFailure
		var signal string
		if err := rows.Scan(&f.ID, &f.SessionID, &f.OriginalRequest, &f.Pattern, &f.ClassifiedAs, &f.RoutedTo,
			&f.ShouldHaveBeen, &signal, &f.CreateTime); err != nil {
			return nil, apierr.Status(ctx, s.log, "list routing failures", err)
		}
		f.Signal = signalFromName(signal)
		resp.Failures = append(resp.Failures, f.proto())
	}
	if err := rows.Err(); err != nil {
		return nil, apierr.Status(ctx, s.log, "list routing failures", err)
	}
	return resp, nil
}

// GetRoutingAccuracy reports routing accuracy: routed messages against
// routing failures, per intent type, with the misroute pairs.
func (s *Service) GetRoutingAccuracy(ctx context.Context, _ *guidev1.GetRoutingAccuracyRequest) (*guidev1.GetRoutingAccuracyResponse, error) {
	who, err := identity.Require(ctx)
	if err != nil {
		return nil, err
	}
	resp := &guidev1.GetRoutingAccuracyResponse{BySignal: map[string]int64{}}
	byIntent := map[string]*guidev1.IntentAccuracy{}
	var order []string
	rows, err := s.db.Query(ctx, `SELECT intent_type, sum(routed)::bigint FROM routing_counts WHERE tenant_id = $1
		GROUP BY intent_type ORDER BY intent_type`, who.TenantID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "routing accuracy", err)
	}
	for rows.Next() {
		a := &guidev1.IntentAccuracy{}
		if err := rows.Scan(&a.IntentType, &a.Routed); err != nil {
			rows.Close()
			return nil, apierr.Status(ctx, s.log, "routing accuracy", err)
		}
		byIntent[a.IntentType] = a
		order = append(order, a.IntentType)
		resp.Routed += a.Routed
	}
	rows.Close()
	rows, err = s.db.Query(ctx, `SELECT classified_as, routed_to, should_have_been, failure_signal FROM routing_failures WHERE tenant_id = $1`, who.TenantID)
	if err != nil {
		return nil, apierr.Status(ctx, s.log, "routing accuracy", err)
	}
	pairs := map[[2]string]int64{}
	for rows.Next() {
		var intent, from, to, signal string
		if err := rows.Scan(&intent, &from, &to, &signal); err != nil {
			rows.Close()
			return nil, apierr.Status(ctx, s.log, "routing accuracy", err)
		}
		resp.Failures++
		resp.BySignal[signal]++
		pairs[[2]string{from, to}]++
		if intent == "" {
			intent = "UNKNOWN"
		}
		a, ok := byIntent[intent]
		if !ok {
			a = &guidev1.IntentAccuracy{IntentType: intent}
			byIntent[intent] = a
			order = append(order, intent)
		}
		a.Failures++
	}
	rows.Close()
	if err := s.accuracyByConfidence(ctx, who.TenantID, resp); err != nil {
		return nil, apierr.Status(ctx, s.log, "routing accuracy", err)
	}
	resp.Accuracy = accuracy(resp.Routed, resp.Failures)
	for _, k := range order {
		a := byIntent[k]
		a.Accuracy = accuracy(a.Routed, a.Failures)
		resp.ByIntent = append(resp.ByIntent, a)
	}
	for k, n := range pairs {
		resp.Misroutes = append(resp.Misroutes, &guidev1.MisroutePair{RoutedTo: k[0], ShouldHaveBeen: k[1], Count: n})
	}
	sortPairs(resp.Misroutes)
	return resp, nil
}

// accuracyByConfidence adds the failure rate per tenth of confidence and
// the time to correction (spec A-33) to resp.
func (s *Service) accuracyByConfidence(ctx context.Context, tenant string, resp *guidev1.GetRoutingAccuracyResponse) error {
	var routed, failed [10]int64
	if err := s.countBuckets(ctx, &routed, `SELECT confidence_bucket, sum(routed)::bigint FROM routing_counts
		WHERE tenant_id = $1 AND confidence_bucket BETWEEN 0 AND 9 GROUP BY confidence_bucket`, tenant); err != nil {
		return err
	}
	if err := s.countBuckets(ctx, &failed, `SELECT least(greatest(floor(routed_confidence * 10), 0), 9)::int2, count(*)
		FROM routing_failures WHERE tenant_id = $1 AND routed_confidence IS NOT NULL GROUP BY 1`, tenant); err != nil {
		return err
	}
	for b := range routed {
		if routed[b] == 0 && failed[b] == 0 {
			continue
		}
		resp.ByConfidence = append(resp.ByConfidence, &guidev1.ConfidenceAccuracy{MinConfidence: float64(b) / 10,
			Routed: routed[b], Failures: failed[b], FailureRate: 1 - accuracy(routed[b], failed[b])})
	}
	var p50, mean *float64
	err := s.db.QueryRow(ctx, `SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM create_time - routed_time)),
			avg(extract(epoch FROM create_time - routed_time))::float8
		FROM routing_failures WHERE tenant_id = $1 AND routed_time IS NOT NULL`, tenant).Scan(&resp.CorrectionsTimed, &p50, &mean)
	if err != nil {
		return err
	}
	if p50 != nil && mean != nil {
		resp.TimeToCorrectionP50 = durationpb.New(time.Duration(*p50 * float64(time.Second)))
		resp.TimeToCorrectionMean = durationpb.New(time.Duration(*mean * float64(time.Second)))
	}
	return nil
}

// countBuckets reads (tenth, count) rows of query into counts.
func (s *Service) countBuckets(ctx context.Context, counts *[10]int64, query string, args ...any) error {
	rows, err := s.db.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var b int16
		var n int64
		if err := rows.Scan(&b, &n); err != nil {
			return err
		}
		counts[b] = n
	}
	return rows.Err()
}

// accuracy is the share of routed messages that did not fail; 1 when
// nothing was routed.
func accuracy(routed, failures int64) float64 {
	if routed <= 0 {
		if failures > 0 {
			return 0
		}
		return 1
	}
	ok := routed - failures
	if ok < 0 {
		ok = 0
	}
	return float64(ok) / float64(routed)
}

func sortPairs(p []*guidev1.MisroutePair) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0; j-- {
			a, b := p[j-1], p[j]
			if a.GetCount() > b.GetCount() || a.GetCount() == b.GetCount() && a.GetRoutedTo()+a.GetShouldHaveBeen() <= b.GetRoutedTo()+b.GetShouldHaveBeen() {
				break
			}
			p[j-1], p[j] = b, a
		}
	}
}
