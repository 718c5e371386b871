package cli

import (
	"fmt"
	"io"
	"strings"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// barWidth is the progress bar's width in characters.
const barWidth = 30

// progress draws an index operation's progress: a bar redrawn in place on
// a terminal, a line at each change of phase elsewhere (a log, a script).
type progress struct {
	w        io.Writer
	terminal bool
	phase    librarianv1.IndexPhase
	drawn    bool
}

func newProgress(w io.Writer, terminal bool) *progress {
	return &progress{w: w, terminal: terminal}
}

func (p *progress) update(m *librarianv1.IndexOperationMetadata) {
	if m == nil {
		return
	}
	if !p.terminal {
		if m.GetPhase() != p.phase {
			p.phase = m.GetPhase()
			fmt.Fprintln(p.w, progressLine(m))
		}
		return
	}
	fmt.Fprintf(p.w, "\r\033[K%s", progressLine(m))
	p.drawn = true
}

// done ends the bar's line.
func (p *progress) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// progressLine is "lexical [#####.....] 120/400 files, 900 chunks".
func progressLine(m *librarianv1.IndexOperationMetadata) string {
	phase := phaseName(m.GetPhase())
	done, total, unit := m.GetFilesDone(), m.GetFilesTotal(), "files"
	if m.GetPhase() == librarianv1.IndexPhase_INDEX_PHASE_SEMANTIC && m.GetChunksTotal() > 0 {
		done, total, unit = m.GetChunksDone(), m.GetChunksTotal(), "chunks embedded"
	}
	s := fmt.Sprintf("%-9s %s", phase, bar(done, total))
	if total > 0 {
		s += fmt.Sprintf(" %d/%d %s", done, total, unit)
	}
	if unit == "files" && m.GetChunksDone() > 0 {
		s += fmt.Sprintf(", %d chunks", m.GetChunksDone())
	}
	if m.GetErrors() > 0 {
		s += fmt.Sprintf(", %d unreadable", m.GetErrors())
	}
	return s
}

// bar is "[#####.....]", full when total is unknown but done is not zero.
func bar(done, total int64) string {
	n := 0
	if total > 0 {
		n = int(min(done, total) * barWidth / total)
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", barWidth-n) + "]"
}

func phaseName(p librarianv1.IndexPhase) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "INDEX_PHASE_"))
}

// operationLine describes an operation in one line.
func operationLine(o *librarianv1.Operation) string {
	switch {
	case o.GetDone() && o.GetError() != nil:
		return fmt.Sprintf("%s failed: %s", o.GetName(), o.GetError().GetMessage())
	case o.GetDone():
		r := o.GetRepository()
		return fmt.Sprintf("%s done: %s indexed, %d files, %d chunks", o.GetName(), r.GetName(), r.GetFileCount(), r.GetChunkCount())
	}
	return fmt.Sprintf("%s running: %s", o.GetName(), progressLine(o.GetMetadata()))
}
