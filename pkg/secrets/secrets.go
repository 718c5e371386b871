// Package secrets finds secrets in text (keys, tokens, passwords, private
// keys, credentials in URLs) and redacts them, wherever text enters or
// leaves the mesh: an index, a store, an event, a cache or a model.
//
// Detection is the maintained gitleaks rule set (its default configuration
// and detector, used as a library) plus a few rules of our own for formats
// the defaults miss (rules.toml). A finding's span is the secret itself,
// not the key name before it, so `password = "..."` keeps its shape:
// `password = "[REDACTED:generic-api-key]"`.
package secrets

import (
	"cmp"
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	ahocorasick "github.com/BobuSumisu/aho-corasick"
	"github.com/rs/zerolog"
	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/logging"
)

// Redacted begins every replacement, which reads [REDACTED:<rule>].
const Redacted = "[REDACTED"

// Finding is one secret in a text: the rule that found it and its byte
// span, text[Start:End].
type Finding struct {
	Rule       string
	Start, End int

	generic bool // found by a generic rule, which yields to a specific one
}

//go:embed rules.toml
var extraRules string

// shared is the process's one detector. Building it parses a few hundred
// rules (about 100 ms), and the rule set is the same for every caller, so
// it is built once, on first use, and shared: the detector is safe for
// concurrent use.
var shared = sync.OnceValue(func() *Detector {
	d, err := New()
	if err != nil {
		// The rules are compiled into the binary and checked by the tests;
		// failing here means a broken build, not a bad input.
		panic(fmt.Sprintf("secrets: load rules: %v", err))
	}
	return d
})

// Find returns the secrets in text, in order, without overlaps.
func Find(text string) []Finding { return shared().Find(text) }

// Redact replaces every secret in text by [REDACTED:<rule>] and says how
// many it replaced. Text without secrets comes back as it was.
func Redact(text string) (string, int) { return shared().Redact(text) }

// Scrub is Redact for callers that need only the text.
func Scrub(text string) string {
	s, _ := shared().Redact(text)
	return s
}

// Contains reports whether text holds a secret.
func Contains(text string) bool { return len(shared().Find(text)) > 0 }

// Detector finds secrets with one rule set (prefilter.go says how it
// picks the rules to run on each line).
type Detector struct {
	rules    []*detect.Detector // one library detector per content rule
	generic  []bool             // rules[i] is a generic (assignment) rule
	keywords *ahocorasick.Trie  // every rule's keywords
	kwRules  [][]int            // keyword -> indices of its rules
}

// New builds a detector on the default rules and ours. Most code uses the
// package functions, which share one.
func New() (*Detector, error) {
	// The library logs through a process-wide logger, at trace level with
	// the candidate secret in some messages: it must never write anything.
	logging.Logger = zerolog.Nop()
	base, err := detect.NewDetectorDefaultConfig()
	if err != nil {
		return nil, fmt.Errorf("default rules: %w", err)
	}
	cfg := base.Config
	extra, err := parseRules(extraRules)
	if err != nil {
		return nil, fmt.Errorf("extra rules: %w", err)
	}
	for id, r := range extra.Rules {
		if _, dup := cfg.Rules[id]; dup {
			return nil, fmt.Errorf("extra rule %s shadows a default rule", id)
		}
		cfg.Rules[id] = r
	}
	cfg.Allowlists = append(cfg.Allowlists, extra.Allowlists...)
	return build(cfg), nil
}

// build makes one library detector per content rule, each with the global
// allowlists, and the keyword automaton that picks among them.
func build(cfg config.Config) *Detector {
	d := &Detector{}
	kwIndex := map[string]int{}
	var kws []string
	for _, id := range slices.Sorted(maps.Keys(cfg.Rules)) {
		r := cfg.Rules[id]
		if r.Regex == nil {
			continue // a rule on file names only
		}
		one := cfg
		one.Rules = map[string]config.Rule{id: r}
		one.OrderedRules = []string{id}
		one.Keywords = map[string]struct{}{}
		i := len(d.rules)
		for _, k := range r.Keywords {
			k = strings.ToLower(k)
			one.Keywords[k] = struct{}{}
			n, ok := kwIndex[k]
			if !ok {
				n = len(kws)
				kwIndex[k] = n
				kws = append(kws, k)
				d.kwRules = append(d.kwRules, nil)
			}
			d.kwRules[n] = append(d.kwRules[n], i)
		}
		d.rules = append(d.rules, detect.NewDetector(one))
		d.generic = append(d.generic, strings.Contains(id, "generic"))
	}
	d.keywords = ahocorasick.NewTrieBuilder().AddStrings(kws).Build()
	return d
}

// parseRules reads a rule file on its own configuration reader (the
// library's default loader uses the process-wide one).
func parseRules(toml string) (config.Config, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(toml)); err != nil {
		return config.Config{}, err
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return config.Config{}, err
	}
	return vc.Translate()
}

// Find returns the secrets in text, in order, without overlaps: where two
// rules claim overlapping spans the union is one finding, named for the
// rule whose span starts first (a specific rule before a generic one).
func (d *Detector) Find(text string) []Finding {
	if text == "" {
		return nil
	}
	var out []Finding
	for _, w := range d.windows(text) {
		part := text[w.start:w.end]
		var lines []int
		for _, ri := range w.rules {
			for _, f := range d.rules[ri].DetectString(part) {
				if lines == nil {
					lines = lineStarts(part)
				}
				if start, end, ok := span(part, lines, f.StartLine, f.StartColumn, f.Match, f.Secret); ok {
					out = append(out, Finding{Rule: f.RuleID, Start: w.start + start, End: w.start + end, generic: d.generic[ri]})
				}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return merge(out)
}

// Redact replaces every secret in text by [REDACTED:<rule>], keeping the
// text's line structure (a secret spanning lines leaves its newlines) so
// that line numbers stay true.
func (d *Detector) Redact(text string) (string, int) {
	found := d.Find(text)
	if len(found) == 0 {
		return text, 0
	}
	var b strings.Builder
	b.Grow(len(text))
	last := 0
	for _, f := range found {
		b.WriteString(text[last:f.Start])
		b.WriteString(Redacted + ":" + f.Rule + "]")
		b.WriteString(strings.Repeat("\n", strings.Count(text[f.Start:f.End], "\n")))
		last = f.End
	}
	b.WriteString(text[last:])
	return b.String(), len(found)
}

// span turns a finding (a 0-based line, a 1-based column that the library
// counts one too far after the first line, the whole match and the secret
// within it) into the secret's byte span in text.
func span(text string, lines []int, line, col int, match, secret string) (int, int, bool) {
	if line < 0 || line >= len(lines) || match == "" {
		return 0, 0, false
	}
	from := max(lines[line]+col-2, lines[line])
	i := strings.Index(text[from:], match)
	if i < 0 {
		return 0, 0, false
	}
	start := from + i
	if j := strings.LastIndex(match, secret); secret != "" && j >= 0 {
		return start + j, start + j + len(secret), true
	}
	return start, start + len(match), true
}

// merge sorts findings and joins overlapping ones.
func merge(fs []Finding) []Finding {
	slices.SortFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(b.End, a.End), compareBool(a.generic, b.generic))
	})
	out := fs[:0]
	for _, f := range fs {
		f.generic = false
		if n := len(out); n > 0 && f.Start < out[n-1].End {
			out[n-1].End = max(out[n-1].End, f.End)
			continue
		}
		out = append(out, f)
	}
	return out
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
