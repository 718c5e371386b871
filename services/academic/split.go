package academic

import (
	"strings"
)

// Formats a document can be ingested in.
const (
	FormatMarkdown = "markdown"
	FormatText     = "text"
)

// Formats lists the accepted formats; the first is the default.
var Formats = []string{FormatMarkdown, FormatText}

// headingSeparator joins the headings of a section's path.
const headingSeparator = " > "

// section is one searchable part of a document.
type section struct {
	// Heading is the heading path, for example "Install > Linux"; empty for
	// text documents and for markdown before the first heading.
	Heading string
	// Body is the section's text without its heading line.
	Body string
	// LineStart and LineEnd are 1-based and inclusive; a markdown section
	// starts at its heading line.
	LineStart int
	LineEnd   int
}

// span is a section before trimming and size limits: body lines [from, to)
// as indexes into the document's lines.
type span struct {
	// path holds the headings above the span; they are joined only for
	// the sections built from it.
	path        []string
	headingLine int // 1-based; 0 when the span has no heading line
	from, to    int
}

// heading is the span's heading path, for example "Install > Linux".
func (sp span) heading() string { return strings.Join(sp.path, headingSeparator) }

// splitLines splits content into lines, accepting "\n" and "\r\n" endings.
// A final line ending does not start another line.
func splitLines(content string) []string {
	content = strings.TrimSuffix(content, "\n")
	lines := strings.Split(content, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

func blank(line string) bool { return strings.TrimSpace(line) == "" }

// splitMarkdown splits a markdown document at its ATX headings (# to ######).
// Each section carries the path of headings above it, each heading at most
// MaxHeadingChars; '#' lines inside fenced code blocks are not headings.
// Sections larger than maxBytes are cut at line boundaries into parts with
// the same heading path. At most limit sections are returned.
func splitMarkdown(content string, maxBytes, limit int) []section {
	lines := splitLines(content)
	type level struct {
		depth int
		text  string
	}
	var (
		path  []level
		spans []span
		fence fenceMarker
		cur   = span{from: 0}
	)
	for i, line := range lines {
		if fence.open() {
			if fence.closedBy(line) {
				fence = fenceMarker{}
			}
			continue
		}
		if f, ok := openFence(line); ok {
			fence = f
			continue
		}
		depth, text, ok := atxHeading(line)
		if !ok {
			continue
		}
		cur.to = i
		spans = append(spans, cur)
		for len(path) > 0 && path[len(path)-1].depth >= depth {
			path = path[:len(path)-1]
		}
		path = append(path, level{depth, truncateChars(text, MaxHeadingChars)})
		var names []string
		for _, l := range path {
			if l.text != "" {
				names = append(names, l.text)
			}
		}
		cur = span{path: names, headingLine: i + 1, from: i + 1}
	}
	cur.to = len(lines)
	spans = append(spans, cur)
	return build(lines, spans, maxBytes, limit)
}

// splitText splits plain text into blank-line separated paragraphs grouped
// into sections of up to groupLines lines; a longer paragraph is cut every
// groupLines lines. Sections larger than maxBytes are cut further. At most
// limit sections are returned.
func splitText(content string, groupLines, maxBytes, limit int) []section {
	lines := splitLines(content)
	var spans []span
	group := span{from: -1}
	flush := func() {
		if group.from >= 0 {
			spans = append(spans, group)
		}
		group = span{from: -1}
	}
	for i := 0; i < len(lines); {
		if blank(lines[i]) {
			i++
			continue
		}
		end := i
		for end < len(lines) && !blank(lines[end]) {
			end++
		}
		// Paragraph [i, end).
		switch {
		case end-i > groupLines:
			flush()
			for from := i; from < end; from += groupLines {
				spans = append(spans, span{from: from, to: min(from+groupLines, end)})
			}
		case group.from >= 0 && end-group.from <= groupLines:
			group.to = end
		default:
			flush()
			group = span{from: i, to: end}
		}
		i = end
	}
	flush()
	return build(lines, spans, maxBytes, limit)
}

// build trims blank lines off the spans, cuts those over maxBytes and makes
// sections of them. Spans with a heading but no body are kept only when the
// document has no section with a body at all. It stops at limit sections,
// so that a document over the limit costs no more than one at it.
func build(lines []string, spans []span, maxBytes, limit int) []section {
	var out, headingOnly []section
	for _, sp := range spans {
		if len(out) >= limit {
			break
		}
		from, to := trim(lines, sp.from, sp.to)
		if from == to {
			if sp.headingLine > 0 && len(headingOnly) < limit {
				headingOnly = append(headingOnly, section{Heading: sp.heading(), LineStart: sp.headingLine, LineEnd: sp.headingLine})
			}
			continue
		}
		heading := sp.heading()
		first := true
		emit := func(a, b int) {
			a, b = trim(lines, a, b)
			if a == b || len(out) >= limit {
				return
			}
			s := section{Heading: heading, Body: strings.Join(lines[a:b], "\n"), LineStart: a + 1, LineEnd: b}
			if first && sp.headingLine > 0 {
				s.LineStart = sp.headingLine
			}
			first = false
			out = append(out, s)
		}
		start, size := from, 0
		for i := from; i < to; i++ {
			n := len(lines[i]) + 1
			if i > start && size+n > maxBytes {
				emit(start, i)
				start, size = i, 0
			}
			size += n
		}
		emit(start, to)
	}
	if len(out) == 0 {
		return headingOnly
	}
	return out
}

// trim narrows [from, to) to exclude blank lines at both ends.
func trim(lines []string, from, to int) (int, int) {
	for from < to && blank(lines[from]) {
		from++
	}
	for to > from && blank(lines[to-1]) {
		to--
	}
	return from, to
}

// indentOK strips up to three leading spaces; more make an indented code
// line, which is neither a heading nor a fence.
func indentOK(line string) (string, bool) {
	n := 0
	for n < len(line) && line[n] == ' ' {
		n++
	}
	if n > 3 {
		return "", false
	}
	return line[n:], true
}

// atxHeading parses an ATX heading line: its depth and text, with any
// closing run of '#' removed.
func atxHeading(line string) (int, string, bool) {
	rest, ok := indentOK(line)
	if !ok {
		return 0, "", false
	}
	depth := 0
	for depth < len(rest) && rest[depth] == '#' {
		depth++
	}
	if depth == 0 || depth > 6 {
		return 0, "", false
	}
	rest = rest[depth:]
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return 0, "", false
	}
	text := strings.TrimSpace(rest)
	// A closing sequence is a run of '#' preceded by a space (or the whole text).
	trimmed := strings.TrimRight(text, "#")
	if trimmed == "" {
		text = ""
	} else if len(trimmed) < len(text) && (strings.HasSuffix(trimmed, " ") || strings.HasSuffix(trimmed, "\t")) {
		text = strings.TrimSpace(trimmed)
	}
	return depth, text, true
}

// fenceMarker is an open fenced code block: its character and length.
type fenceMarker struct {
	char byte
	n    int
}

func (f fenceMarker) open() bool { return f.n > 0 }

// openFence reports whether line opens a fenced code block (``` or ~~~).
func openFence(line string) (fenceMarker, bool) {
	rest, ok := indentOK(line)
	if !ok || len(rest) < 3 || (rest[0] != '`' && rest[0] != '~') {
		return fenceMarker{}, false
	}
	c := rest[0]
	n := 0
	for n < len(rest) && rest[n] == c {
		n++
	}
	if n < 3 {
		return fenceMarker{}, false
	}
	// A backtick fence's info string may not contain backticks.
	if c == '`' && strings.Contains(rest[n:], "`") {
		return fenceMarker{}, false
	}
	return fenceMarker{char: c, n: n}, true
}

// closedBy reports whether line closes the fence: the same character, at
// least as many, and nothing after them but spaces.
func (f fenceMarker) closedBy(line string) bool {
	rest, ok := indentOK(line)
	if !ok {
		return false
	}
	n := 0
	for n < len(rest) && rest[n] == f.char {
		n++
	}
	return n >= f.n && strings.TrimSpace(rest[n:]) == ""
}
