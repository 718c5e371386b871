package review

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// entry is one changed file as the review sees it.
type entry struct {
	File
	tier int
	// reason says why a tier-1 file is left out.
	reason string
	// security is "category: rationale" for a security-sensitive file.
	security string
	// adjacent marks a test of one of the changed files.
	adjacent bool
}

// plan is a change sorted for review: the files the prompt shows, in risk
// order, and those left out with their reason.
type plan struct {
	title    string
	included []*entry
	excluded []*entry
	// added and deleted count the whole change's lines.
	added, deleted int
}

// classify runs the security registry first (spec P-09: a match is never
// excluded), then the two-tier exclusion (P-04) and the exclusion patterns
// (P-11), and orders the rest by risk.
func classify(files []File, patterns []string) *plan {
	p := &plan{}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	for _, f := range files {
		p.added += f.Added
		p.deleted += f.Deleted
		e := &entry{File: f}
		if cat, why, ok := Sensitive(f.Path); ok {
			e.security = cat + ": " + why
		} else if cat, why, ok := sensitiveContent(f.addedText()); ok {
			e.security = cat + ": " + why
		}
		if e.security == "" {
			e.tier, e.reason = tierOf(f, patterns)
		}
		e.adjacent = adjacentTest(f.Path, paths)
		if e.tier == tierExcluded {
			p.excluded = append(p.excluded, e)
			continue
		}
		p.included = append(p.included, e)
	}
	sortEntries(p.included, riskRank, -1)
	return p
}

// sortEntries orders es by group, then by size of change (largest first
// when dir is -1, smallest when 1), then by path.
func sortEntries(es []*entry, group func(*entry) int, dir int) {
	slices.SortStableFunc(es, func(a, b *entry) int {
		if c := cmp.Compare(group(a), group(b)); c != 0 {
			return c
		}
		if c := dir * cmp.Compare(a.Size(), b.Size()); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
}

// riskRank orders files for the prompt: security-sensitive first, then
// code, then tests of the changed code, other tests, and the files shown
// by their first hunk only.
func riskRank(e *entry) int {
	switch {
	case e.security != "":
		return 0
	case e.tier == tierSummary:
		return 4
	case e.adjacent:
		return 2
	case isTest(e.Path):
		return 3
	}
	return 1
}

// dropOrder is the order truncation gives files up in (spec P-06, level
// 1): first-hunk-only files, then other files, then tests of the changed
// code, each smallest change first, ties alphabetical; security-sensitive
// files never (level 1) or last (level 2).
func (p *plan) dropOrder() []*entry {
	out := slices.Clone(p.included)
	group := func(e *entry) int {
		switch {
		case e.security != "":
			return 3
		case e.tier == tierSummary:
			return 0
		case e.adjacent:
			return 2
		}
		return 1
	}
	sortEntries(out, group, 1)
	return out
}

// excludedFiles are the files left out, with why ("path: generated").
func (p *plan) excludedFiles() []string {
	out := make([]string, 0, len(p.excluded))
	for _, e := range p.excluded {
		out = append(out, e.Path+": "+e.reason)
	}
	return out
}

// banner says what the exclusion left out (spec P-13), or "" when nothing.
func (p *plan) banner() string {
	if len(p.excluded) == 0 {
		return ""
	}
	bytes := 0
	for _, e := range p.excluded {
		bytes += len(e.raw)
	}
	return fmt.Sprintf("[Excluded: %s (%s saved)]", p.exclusionCounts(), kb(bytes))
}

// exclusionCounts counts the excluded files by reason: "2 generated, 1
// binary".
func (p *plan) exclusionCounts() string {
	counts := map[string]int{}
	var reasons []string
	for _, e := range p.excluded {
		if counts[e.reason] == 0 {
			reasons = append(reasons, e.reason)
		}
		counts[e.reason]++
	}
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%d %s", counts[r], r)
	}
	return strings.Join(parts, ", ")
}

func kb(n int) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d KB", (n+1023)/1024)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
