package review

// Progressive truncation (spec P-05, P-06): the prompt must fit 95% of the
// model's input budget, its tokens estimated as the llm package estimates
// them (ceil(len/4)). When the whole change does not fit, each level in
// turn is weighed and the first that fits is taken:
//
//  1. drop files: security-sensitive files stay; first-hunk-only files go
//     first, then the others, tests of the changed code last, each
//     smallest change first;
//  2. cut every file's hunks to 3, then 1, then 0 lines of context, then
//     drop hunks, the lowest-priority files' first, each file's last hunk
//     first (security-sensitive files' last of all);
//  3. list the files with their stats only.
//
// A level that would show nothing of the change does not count as fitting.

// Shares of the model's input budget the prompt may fill: at first, and on
// the one retry after the provider rejected it as too long (spec P-07).
const (
	budgetShare = 0.95
	retryShare  = 0.85
)

// fitter weighs layouts against a budget.
type fitter struct {
	p *plan
	// overhead is the request's tokens besides the user message (system
	// prompt, tool schema, message framing); budget the tokens the whole
	// request may take.
	overhead, budget int
}

func (f *fitter) tokens(size int) int { return f.overhead + (size+3)/4 }

func (f *fitter) fits(l *layout) bool { return f.tokens(l.size()) <= f.budget }

// fit returns the first layout, from level from on, that fits.
func (f *fitter) fit(from int) (*layout, bool) {
	for level := from; level <= 3; level++ {
		var l *layout
		ok := false
		switch level {
		case 0:
			l = f.full(-1)
			ok = f.fits(l)
		case 1:
			l, ok = f.level1()
		case 2:
			l, ok = f.level2()
		case 3:
			l = &layout{p: f.p, level: 3, statsOnly: true}
			ok = f.fits(l)
		}
		if ok {
			return l, true
		}
	}
	return nil, false
}

// full shows every included file, with n lines of context (-1: as in the
// diff).
func (f *fitter) full(n int) *layout {
	l := &layout{p: f.p}
	for _, e := range f.p.included {
		l.blocks = append(l.blocks, newBlock(e, n, n >= 0))
	}
	return l
}

func (f *fitter) level1() (*layout, bool) {
	l := f.full(-1)
	l.level = 1
	for _, e := range f.p.dropOrder() {
		if e.security != "" || len(l.blocks) <= 1 {
			break
		}
		for i, b := range l.blocks {
			if b.e == e {
				l.blocks = append(l.blocks[:i], l.blocks[i+1:]...)
				break
			}
		}
		l.dropped = append(l.dropped, e)
		if f.fits(l) {
			return l, true
		}
	}
	return nil, false
}

func (f *fitter) level2() (*layout, bool) {
	for _, n := range []int{3, 1, 0} {
		l := f.full(n)
		l.level = 2
		size := l.size()
		if f.tokens(size) <= f.budget {
			return l, true
		}
		if n > 0 {
			continue
		}
		blockOf := make(map[*entry]*block, len(l.blocks))
		shown := 0
		for _, b := range l.blocks {
			blockOf[b.e] = b
			shown += b.keep
		}
		// Only the dropping block's size changes: the rest of the layout
		// is weighed once.
		for _, e := range f.p.dropOrder() {
			b := blockOf[e]
			for b.keep > 0 {
				before := b.size
				b.setKeep(b.keep - 1)
				shown--
				size += b.size - before
				if f.tokens(size) <= f.budget {
					return l, shown > 0
				}
			}
		}
	}
	return nil, false
}

// withContext is h with at most n lines of context around its changes, as
// one hunk or several with their own headers.
func withContext(h Hunk, n int) []Hunk {
	keep := make([]bool, len(h.Lines))
	for i, l := range h.Lines {
		if l[0] != '+' && l[0] != '-' {
			continue
		}
		for j := max(0, i-n); j <= min(len(h.Lines)-1, i+n); j++ {
			keep[j] = true
		}
	}
	for i, l := range h.Lines {
		// "\ No newline at end of file" goes with the line before it.
		if l[0] == '\\' {
			keep[i] = i > 0 && keep[i-1]
		}
	}
	oldPos, newPos := h.OldStart, h.NewStart
	if h.OldLines == 0 {
		oldPos++
	}
	if h.NewLines == 0 {
		newPos++
	}
	var out []Hunk
	var cur *Hunk
	done := func() {
		if cur == nil {
			return
		}
		if cur.OldLines == 0 {
			cur.OldStart--
		}
		if cur.NewLines == 0 {
			cur.NewStart--
		}
		out = append(out, *cur)
		cur = nil
	}
	for i, l := range h.Lines {
		if !keep[i] {
			done()
		} else {
			if cur == nil {
				cur = &Hunk{OldStart: oldPos, NewStart: newPos, Section: h.Section}
			}
			cur.Lines = append(cur.Lines, l)
			cur.OldLines += btoi(l[0] != '+' && l[0] != '\\')
			cur.NewLines += btoi(l[0] != '-' && l[0] != '\\')
		}
		oldPos += btoi(l[0] != '+' && l[0] != '\\')
		newPos += btoi(l[0] != '-' && l[0] != '\\')
	}
	done()
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
