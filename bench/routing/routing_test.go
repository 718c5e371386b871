// Package routing_bench measures the Guide's offline routing on its
// labelled set by k-fold cross-validation: each fold is scored by a router
// trained without it. The keyword rules alone are scored on the same set in
// the same run as the baseline.
package routing_bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sylk.dev/sylk/services/guide"
)

var (
	folds     = flag.Int("routing.folds", 10, "folds of the cross-validation")
	threshold = flag.Float64("routing.threshold", guide.DefaultRouteThreshold, "confidence below which the Guide asks the user to clarify")
)

// Targets of the offline router (issue 24).
const (
	wantAccuracy  = 0.90
	maxClearAsked = 0.05
)

// score is a router's result on the set.
type score struct {
	n, right      int
	perLabel      map[string][2]int // label -> right, total
	confusions    map[string]int    // "label -> predicted" -> count
	clear, asked  int               // clear requests, and those asked to clarify
	unclear, sent int               // ambiguous messages, and those routed anyway
}

func newScore() *score {
	return &score{perLabel: map[string][2]int{}, confusions: map[string]int{}}
}

// add scores one message: the prediction is the target when its confidence
// reaches the threshold, else a clarification.
func (s *score) add(label string, cl guide.Classification) {
	pred := guide.LabelAmbiguous
	if cl.Target != "" && cl.Confidence >= *threshold {
		pred = cl.Target
	}
	s.n++
	pl := s.perLabel[label]
	pl[1]++
	if pred == label {
		s.right++
		pl[0]++
	} else {
		s.confusions[label+" -> "+pred]++
	}
	s.perLabel[label] = pl
	if label == guide.LabelAmbiguous {
		s.unclear++
		if pred != label {
			s.sent++
		}
		return
	}
	s.clear++
	if pred == guide.LabelAmbiguous {
		s.asked++
	}
}

func (s *score) accuracy() float64     { return float64(s.right) / float64(s.n) }
func (s *score) clarifyShare() float64 { return float64(s.asked) / float64(s.clear) }

func (s *score) report(b *testing.B, name string) {
	b.Logf("%s: %.1f%% right (%d/%d); clear requests asked to clarify %.1f%% (%d/%d); unclear messages routed %d/%d",
		name, 100*s.accuracy(), s.right, s.n, 100*s.clarifyShare(), s.asked, s.clear, s.sent, s.unclear)
	for _, l := range guide.RoutingLabels {
		pl := s.perLabel[l]
		b.Logf("  %-12s %5.1f%% (%d/%d)", l, 100*float64(pl[0])/float64(max(pl[1], 1)), pl[0], pl[1])
	}
	pairs := make([]string, 0, len(s.confusions))
	for p := range s.confusions {
		pairs = append(pairs, p)
	}
	sort.Slice(pairs, func(i, j int) bool {
		if s.confusions[pairs[i]] != s.confusions[pairs[j]] {
			return s.confusions[pairs[i]] > s.confusions[pairs[j]]
		}
		return pairs[i] < pairs[j]
	})
	var lines []string
	for _, p := range pairs {
		lines = append(lines, fmt.Sprintf("%s: %d", p, s.confusions[p]))
	}
	b.Logf("  confusions (label -> routed): %s", strings.Join(lines, "; "))
}

// BenchmarkRouting cross-validates the router and scores the keyword rules
// on the labelled set.
func BenchmarkRouting(b *testing.B) {
	set, err := guide.RoutingSet()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range b.N {
		model, keywords := newScore(), newScore()
		var misses []string
		var train time.Duration
		rules := guide.NewKeywordClassifier()
		for k := range *folds {
			var fit, held []guide.LabelledMessage
			for i, ex := range set {
				if i%*folds == k {
					held = append(held, ex)
				} else {
					fit = append(fit, ex)
				}
			}
			start := time.Now()
			router := guide.TrainModelClassifier(fit)
			train += time.Since(start)
			for _, ex := range held {
				cl, err := router.Classify(ctx, ex.Text)
				if err != nil {
					b.Fatal(err)
				}
				model.add(ex.Label, cl)
				if cl.Target != ex.Label && (ex.Label != guide.LabelAmbiguous || cl.Confidence >= *threshold) {
					misses = append(misses, fmt.Sprintf("%q %s -> %s %.2f", ex.Text, ex.Label, cl.Target, cl.Confidence))
				}
				kw, err := rules.Classify(ctx, ex.Text)
				if err != nil {
					b.Fatal(err)
				}
				keywords.add(ex.Label, kw)
			}
		}
		b.Logf("%d labelled messages, %d folds, threshold %.2f; training %s per fold", len(set), *folds, *threshold,
			(train / time.Duration(*folds)).Round(time.Microsecond))
		keywords.report(b, "keyword rules (baseline)")
		model.report(b, "model router (cross-validated)")
		slices.Sort(misses)
		b.Logf("model misses:\n  %s", strings.Join(misses, "\n  "))
		b.ReportMetric(100*model.accuracy(), "%right")
		b.ReportMetric(100*model.clarifyShare(), "%clear-asked")
		b.ReportMetric(100*keywords.accuracy(), "%right-keywords")
		if model.accuracy() < wantAccuracy || model.clarifyShare() > maxClearAsked {
			b.Errorf("targets missed: %.1f%% right (want >= %.0f%%), %.1f%% of clear requests asked (want <= %.0f%%)",
				100*model.accuracy(), 100*wantAccuracy, 100*model.clarifyShare(), 100*maxClearAsked)
		}
	}
}
