package review

import (
	"fmt"
	"strings"

	"sylk.dev/sylk/pkg/secrets"
)

// The prompt binding (spec P-10): the persona is the system prompt; the
// user message starts with Marker and the change's title, then the
// truncation disclaimer and the exclusion banner, the change's figures,
// the reviewed files, the files shown by their first hunk, and the files
// left out. Sizes are counted as they render, so that truncation weighs a
// layout without building it.

// Marker starts the first user message of every review conversation
// ("Review this change: <title>"), so that a scripted model can tell a
// review from other conversations.
const Marker = "Review this change"

// Disclaimers of the truncation levels (spec P-06).
const (
	disclaimerLevel1 = "[Partial Review: %d low-priority files excluded]"
	disclaimerLevel2 = "[Partial Review: patches truncated to changed hunks]"
	disclaimerLevel3 = "[Summary Review: diff content unavailable, reviewing file structure only]"
)

// maxListed bounds the files listed by name (stats only, excluded).
const maxListed = 200

// block is one file of the prompt shown with its hunks.
type block struct {
	e *entry
	// hunks are the file's rendered hunks (context reduced at level 2);
	// keep is how many of them are shown.
	hunks []string
	keep  int
	// annotate adds "[k of m hunks included]" (level 2); summary marks a
	// file shown by its first hunk only.
	annotate, summary bool
	fence             string
	size              int
}

// newBlock renders e's hunks, with n lines of context around each change
// (n < 0 keeps them as they are), its first hunk only for a summary file.
func newBlock(e *entry, n int, annotate bool) *block {
	b := &block{e: e, annotate: annotate, summary: e.tier == tierSummary}
	if !e.parsed {
		b.hunks = []string{secrets.Scrub(rawBody(e.raw))}
	} else {
		for _, h := range e.Hunks {
			parts := []Hunk{h}
			if n >= 0 {
				parts = withContext(h, n)
			}
			for _, p := range parts {
				b.hunks = append(b.hunks, secrets.Scrub(hunkText(p)))
			}
		}
	}
	if b.summary && len(b.hunks) > 1 {
		b.hunks = b.hunks[:1]
	}
	b.keep = len(b.hunks)
	b.fence = fenceFor(b.hunks)
	b.size = b.measure()
	return b
}

// rawBody is a file's diff from its first hunk on (all of it when it has
// none that can be found).
func rawBody(raw string) string {
	if i := strings.Index(raw, "\n@@"); i >= 0 {
		return raw[i+1:]
	}
	return raw
}

func (b *block) heading() string {
	var h strings.Builder
	h.WriteString("### " + b.e.Path + " (" + b.e.Stats())
	switch b.e.Status {
	case "added", "deleted":
		h.WriteString(", " + b.e.Status)
	case "renamed":
		h.WriteString(", renamed from " + b.e.OldPath)
	}
	h.WriteString(")")
	if b.e.security != "" {
		h.WriteString(" [security-sensitive: " + b.e.security + "]")
	}
	total := len(b.hunks)
	if b.summary {
		total = max(len(b.e.Hunks), 1)
	}
	if b.annotate || b.summary && total > 1 {
		fmt.Fprintf(&h, " [%d of %d hunks included]", b.keep, total)
	}
	return h.String()
}

// measure is len(render()).
func (b *block) measure() int {
	n := len(b.heading()) + 1
	if b.keep == 0 {
		return n
	}
	n += 2*len(b.fence) + len("diff\n") + 1
	for _, h := range b.hunks[:b.keep] {
		n += len(h)
	}
	return n
}

func (b *block) render() string {
	var s strings.Builder
	s.WriteString(b.heading() + "\n")
	if b.keep == 0 {
		return s.String()
	}
	s.WriteString(b.fence + "diff\n")
	for _, h := range b.hunks[:b.keep] {
		s.WriteString(h)
	}
	s.WriteString(b.fence + "\n")
	return s.String()
}

// setKeep shows the first k hunks.
func (b *block) setKeep(k int) {
	b.keep = k
	b.size = b.measure()
}

// fenceFor is a code fence longer than any run of backticks in hunks.
func fenceFor(hunks []string) string {
	longest := 0
	for _, h := range hunks {
		run := 0
		for i := 0; i < len(h); i++ {
			if h[i] == '`' {
				run++
				longest = max(longest, run)
			} else {
				run = 0
			}
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}

// hunkText renders a hunk with its header.
func hunkText(h Hunk) string {
	var s strings.Builder
	fmt.Fprintf(&s, "@@ -%s +%s @@", span(h.OldStart, h.OldLines), span(h.NewStart, h.NewLines))
	if h.Section != "" {
		s.WriteString(" " + h.Section)
	}
	s.WriteByte('\n')
	for _, l := range h.Lines {
		s.WriteString(l)
		s.WriteByte('\n')
	}
	return s.String()
}

func span(start, lines int) string {
	if lines == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, lines)
}

// layout is one way of fitting the change into a prompt: a truncation
// level and what it shows.
type layout struct {
	p     *plan
	level int
	// blocks are the files shown with hunks, in risk order (reviewed
	// files, then summary files); dropped are the files level 1 left out;
	// statsOnly is set at level 3, where every file is a line.
	blocks    []*block
	dropped   []*entry
	statsOnly bool
}

func (l *layout) disclaimer() string {
	switch l.level {
	case 1:
		return fmt.Sprintf(disclaimerLevel1, len(l.dropped))
	case 2:
		return disclaimerLevel2
	case 3:
		return disclaimerLevel3
	}
	return ""
}

// head is the prompt up to the files.
func (l *layout) head() string {
	var s strings.Builder
	title := l.p.title
	if title == "" {
		title = "the diff below"
	}
	s.WriteString(Marker + ": " + title + "\n\n")
	d, b := l.disclaimer(), l.p.banner()
	for _, line := range []string{d, b} {
		if line != "" {
			s.WriteString(line + "\n")
		}
	}
	if d != "" || b != "" {
		s.WriteString("\n")
	}
	security := 0
	for _, e := range l.p.included {
		if e.security != "" {
			security++
		}
	}
	reviewed := len(l.p.included) - len(l.dropped)
	fmt.Fprintf(&s, "## Change\n%s changed (+%d -%d): %s reviewed (%d security-sensitive), %d excluded.\n",
		plural(len(l.p.included)+len(l.p.excluded), "file", "files"), l.p.added, l.p.deleted, plural(reviewed, "file", "files"), security,
		len(l.p.excluded)+len(l.dropped))
	return s.String()
}

// Section titles.
const (
	sectionReviewed = "\n## Changed files (reviewed)\n"
	sectionSummary  = "\n## Summary-only files (first hunk)\n"
	sectionStats    = "\n## Changed files (stats only)\n"
	sectionExcluded = "\n## Excluded files\n"
)

// size is len(render()).
func (l *layout) size() int {
	n := len(l.head())
	for _, part := range l.sections() {
		n += part.size
	}
	return n
}

func (l *layout) render() string {
	var s strings.Builder
	s.WriteString(l.head())
	for _, part := range l.sections() {
		s.WriteString(part.text())
	}
	return s.String()
}

// section is a part of the prompt after its head: a title, then items.
type section struct {
	title string
	size  int
	text  func() string
}

func (l *layout) sections() []section {
	var out []section
	var reviewed, summary []*block
	for _, b := range l.blocks {
		if b.summary {
			summary = append(summary, b)
		} else {
			reviewed = append(reviewed, b)
		}
	}
	for _, group := range []struct {
		title  string
		blocks []*block
	}{{sectionReviewed, reviewed}, {sectionSummary, summary}} {
		if len(group.blocks) == 0 {
			continue
		}
		sec := section{title: group.title, size: len(group.title)}
		for _, b := range group.blocks {
			sec.size += 1 + b.size
		}
		blocks := group.blocks
		sec.text = func() string {
			var s strings.Builder
			s.WriteString(sec.title)
			for _, b := range blocks {
				s.WriteString("\n" + b.render())
			}
			return s.String()
		}
		out = append(out, sec)
	}
	if l.statsOnly {
		out = append(out, listSection(sectionStats, l.p.included, statsLine))
	}
	if gone := append(copied(l.p.excluded), l.dropped...); len(gone) > 0 {
		out = append(out, listSection(sectionExcluded, gone, excludedLine))
	}
	return out
}

// copied copies es, so that appending to it leaves the plan as it is.
func copied(es []*entry) []*entry { return append([]*entry(nil), es...) }

// listSection lists files a line each, at most maxListed of them.
func listSection(title string, es []*entry, line func(*entry) string) section {
	var s strings.Builder
	s.WriteString(title)
	for i, e := range es {
		if i == maxListed {
			fmt.Fprintf(&s, "- ... and %d more\n", len(es)-i)
			break
		}
		s.WriteString(line(e))
	}
	text := s.String()
	return section{title: title, size: len(text), text: func() string { return text }}
}

func statsLine(e *entry) string {
	line := "- " + e.Path + ": " + e.Stats()
	if e.security != "" {
		line += " [security-sensitive: " + e.security + "]"
	}
	return line + "\n"
}

func excludedLine(e *entry) string {
	reason := e.reason
	if reason == "" {
		reason = "left out at truncation level 1"
	}
	return "- " + e.Path + " (" + e.Stats() + "): " + reason + "\n"
}
