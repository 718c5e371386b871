package secrets

import (
	"bytes"
	"slices"
)

// The library's detector runs every rule whose keyword occurs anywhere in
// its input over the whole input. On source code, where "key", "token",
// "api" or "s." occur in most files, that is a few hundred regular
// expressions over every file: 0.2 MB/s, too slow to index a repository.
//
// So the detector finds, in one pass of a keyword automaton over the text,
// the lines that hold a rule's keyword, and runs each rule only on the runs
// of consecutive lines holding one of its keywords. Nothing is lost: every
// content rule is keyed (a rule without keywords is a file-name rule), and
// a keyed rule cannot match a line without its keyword, except across
// lines, which only the private-key rule does; a run from a BEGIN marker
// extends to its END line.

// maxBlockLines bounds how far a run that opens a private key block
// reaches for the block's end.
const maxBlockLines = 200

// window is a run of lines, [start, end) in bytes, and the rules (indices
// into Detector.rules) whose keywords it holds.
type window struct {
	start, end int
	rules      []int
}

// hit is one keyword occurrence: its line and its keyword.
type hit struct{ line, keyword int }

// windows returns the runs of consecutive lines of text that hold a rule's
// keyword, with the rules to run on each.
func (d *Detector) windows(text string) []window {
	lower := asciiLower(text)
	lines := lineStarts(text)
	var hits []hit
	d.keywords.Walk(lower, func(end, _, pattern int64) bool {
		hits = append(hits, hit{lineOf(lines, int(end)), int(pattern)})
		return true
	})
	if len(hits) == 0 {
		return nil
	}
	hot := make([]bool, len(lines))
	for _, h := range hits {
		hot[h.line] = true
	}
	var out []window
	seen := make([]int, len(d.rules)) // window number + 1 that last took rule i
	next := 0                         // first hit not yet given to a window
	for i := 0; i < len(lines); i++ {
		if !hot[i] {
			continue
		}
		j := runEnd(lower, lines, hot, i)
		w := window{start: lines[i], end: lineEnd(text, lines, j-1)}
		for ; next < len(hits) && hits[next].line < j; next++ {
			for _, r := range d.kwRules[hits[next].keyword] {
				if seen[r] != len(out)+1 {
					seen[r] = len(out) + 1
					w.rules = append(w.rules, r)
				}
			}
		}
		out = append(out, w)
		i = j
	}
	return out
}

// runEnd is the line after the run of hot lines starting at line i, a
// private key block's lines made hot on the way.
func runEnd(lower []byte, lines []int, hot []bool, i int) int {
	j := i
	for ; j < len(lines) && hot[j]; j++ {
		for k := blockEnd(lower, lines, j); j < k; j++ {
			hot[j+1] = true
		}
	}
	return j
}

// blockEnd is the line that closes a BEGIN marker on line i (within
// maxBlockLines, else the last line looked at), or i when it has none.
func blockEnd(lower []byte, lines []int, i int) int {
	if !bytes.Contains(lower[lines[i]:lineEnd(lower, lines, i)], []byte("-----begin")) {
		return i
	}
	last := min(len(lines)-1, i+maxBlockLines)
	for k := i; k <= last; k++ {
		line := lower[lines[k]:lineEnd(lower, lines, k)]
		if bytes.Contains(line, []byte("-----end")) || k > i && bytes.Contains(line, []byte("key-----")) {
			return k
		}
	}
	return last
}

// lineStarts returns the byte offset of each line of text.
func lineStarts(text string) []int {
	starts := []int{0}
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// lineOf is the line holding byte offset off.
func lineOf(lines []int, off int) int {
	i, found := slices.BinarySearch(lines, off)
	if found {
		return i
	}
	return i - 1
}

// lineEnd is the offset just past line i, before its newline.
func lineEnd[S ~string | ~[]byte](text S, lines []int, i int) int {
	if i+1 < len(lines) {
		return lines[i+1] - 1
	}
	return len(text)
}

// asciiLower lowercases ASCII letters only, so offsets stay those of text
// (the keywords are ASCII).
func asciiLower(text string) []byte {
	b := []byte(text)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}
