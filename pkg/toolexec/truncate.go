package toolexec

import (
	"fmt"
	"regexp"
	"strings"
)

// Truncated is the smart-truncated form of an output (spec C-29).
type Truncated struct {
	Summary    string
	Important  []string
	FirstLines []string
	LastLines  []string
	// FullSize is the output's size in bytes; TotalLines its line count.
	FullSize   int64
	TotalLines int
	Errors     int
	Warnings   int
	// Truncated is set when the output was larger than the cap.
	Truncated bool
}

var (
	importantLine = regexp.MustCompile(`(?i)error|warning|failed|exception|panic|\w+\.\w+:\d+:\d+|^\s+at\s+`)
	errorLine     = regexp.MustCompile(`(?i)error|failed|exception|panic`)
	warningLine   = regexp.MustCompile(`(?i)warning`)
)

// maxImportant bounds the important lines kept.
const maxImportant = 200

// lineStats classifies lines as they stream by.
type lineStats struct {
	lines, errors, warnings int
	important               []string
	importantIdx            []int
}

// mayMatch is a cheap filter before the regular expressions: every line
// they match holds one of these (lower-cased) or a colon.
var hints = []string{"error", "warn", "fail", "exception", "panic", "at"}

func mayMatch(line string) bool {
	if strings.IndexByte(line, ':') >= 0 {
		return true
	}
	l := strings.ToLower(line)
	for _, h := range hints {
		if strings.Contains(l, h) {
			return true
		}
	}
	return false
}

func (s *lineStats) add(line string) {
	idx := s.lines
	s.lines++
	if !mayMatch(line) {
		return
	}
	if errorLine.MatchString(line) {
		s.errors++
	} else if warningLine.MatchString(line) {
		s.warnings++
	}
	if len(s.important) < maxImportant && importantLine.MatchString(line) {
		s.important = append(s.important, line)
		s.importantIdx = append(s.importantIdx, idx)
	}
}

func (s *lineStats) summary() string {
	if s.errors+s.warnings == 0 {
		return fmt.Sprintf("%d lines of output", s.lines)
	}
	return fmt.Sprintf("%d errors, %d warnings in %d lines", s.errors, s.warnings, s.lines)
}

// splitLines splits on newlines, without the empty piece after a final one.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// SmartTruncate keeps the first and last lines of output, the important
// lines between them, and a summary; Truncated is set when output is larger
// than maxSize bytes.
func SmartTruncate(output string, maxSize, firstN, lastN int) Truncated {
	lines := splitLines(output)
	var st lineStats
	for _, l := range lines {
		st.add(l)
	}
	return st.truncated(lines, int64(len(output)), maxSize, firstN, lastN)
}

// truncated builds the result from stats over lines (all of the output, or
// as much of it as was kept).
func (s *lineStats) truncated(lines []string, size int64, maxSize, firstN, lastN int) Truncated {
	t := Truncated{
		Summary:    s.summary(),
		FullSize:   size,
		TotalLines: s.lines,
		Errors:     s.errors,
		Warnings:   s.warnings,
		Truncated:  size > int64(maxSize),
	}
	nFirst := min(firstN, len(lines))
	t.FirstLines = append([]string(nil), lines[:nFirst]...)
	lastStart := len(lines)
	if len(lines) > lastN {
		lastStart = max(nFirst, len(lines)-lastN)
	} else if len(lines) > nFirst {
		lastStart = nFirst
	}
	t.LastLines = append([]string(nil), lines[lastStart:]...)
	// Line indexes are those of the kept lines only when every line was
	// kept; otherwise dedupe by text against the first and last lines.
	complete := len(lines) == s.lines
	kept := map[string]bool{}
	if !complete {
		for _, l := range t.FirstLines {
			kept[l] = true
		}
		for _, l := range t.LastLines {
			kept[l] = true
		}
	}
	for i, l := range s.important {
		if complete {
			if idx := s.importantIdx[i]; idx < nFirst || idx >= lastStart {
				continue
			}
		} else if kept[l] {
			continue
		}
		t.Important = append(t.Important, l)
	}
	return t
}

// ClipMiddle keeps the head and the tail of s within about limit bytes,
// around a marker saying how many bytes were dropped, and reports whether
// it dropped any. Bytes that are not UTF-8 in what it keeps become invalid
// ("" drops them, so that the result is no longer than the parts kept).
func ClipMiddle(s string, limit int, invalid string) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	h := limit / 2
	t := limit - h
	return strings.ToValidUTF8(s[:h], invalid) + fmt.Sprintf("\n... [%d bytes truncated] ...\n", len(s)-limit) +
		strings.ToValidUTF8(s[len(s)-t:], invalid), true
}
