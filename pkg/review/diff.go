package review

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// File is one file of a unified diff.
type File struct {
	// Path is the file's path after the change (before it, for a deleted
	// file); OldPath its path before a rename.
	Path, OldPath string
	// Status is "added", "deleted", "renamed" or "modified".
	Status string
	// Added and Deleted count the changed lines.
	Added, Deleted int
	// Binary marks a file whose change git shows as binary.
	Binary bool
	Hunks  []Hunk
	// raw is the file's whole diff text; parsed is false when its hunks
	// could not be read (spec P-14: the file's diff is then kept whole).
	raw    string
	parsed bool
}

// Hunk is one "@@" block of a file's diff.
type Hunk struct {
	OldStart, OldLines, NewStart, NewLines int
	// Section is what follows the header's second "@@" (a function name).
	Section string
	// Lines are the hunk's lines with their prefix (' ', '+', '-', '\').
	Lines []string
}

// Size is the number of lines the change adds and deletes.
func (f File) Size() int { return f.Added + f.Deleted }

// Stats is the file's "+N -M".
func (f File) Stats() string { return fmt.Sprintf("+%d -%d", f.Added, f.Deleted) }

// addedText is the lines the change adds, without their prefix.
func (f File) addedText() string {
	var b strings.Builder
	for _, h := range f.Hunks {
		for _, l := range h.Lines {
			if strings.HasPrefix(l, "+") {
				b.WriteString(l[1:])
				b.WriteByte('\n')
			}
		}
	}
	if !f.parsed {
		for _, l := range strings.Split(f.raw, "\n") {
			if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") {
				b.WriteString(l[1:])
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$`)

// Parse reads a unified diff (git's, or a plain one) into its files. A
// file whose hunks cannot be read is kept with its text whole. Text before
// the first file (a commit message) is left out.
func Parse(diff string) []File {
	lines := strings.Split(strings.ReplaceAll(diff, "\r\n", "\n"), "\n")
	var files []File
	var cur []string
	// oldLeft and newLeft are the lines the open hunk still expects;
	// header is set while a git header has not reached its first hunk
	// (its "---" and "+++" lines are its own).
	oldLeft, newLeft, header := 0, 0, false
	flush := func() {
		if f, ok := parseFile(cur); ok {
			files = append(files, f)
		}
		cur = nil
	}
	for i, l := range lines {
		if oldLeft > 0 || newLeft > 0 {
			switch {
			case l == "" || l[0] == ' ':
				oldLeft, newLeft = oldLeft-1, newLeft-1
			case l[0] == '-':
				oldLeft--
			case l[0] == '+':
				newLeft--
			case l[0] != '\\':
				// Not a hunk line: the hunk is cut short (parseFile keeps
				// the file whole).
				oldLeft, newLeft = 0, 0
			}
			cur = append(cur, l)
			continue
		}
		switch {
		case strings.HasPrefix(l, "diff --git "):
			flush()
			header = true
		case !header && strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ "):
			flush()
		case cur == nil:
			continue
		default:
			if m := hunkHeader.FindStringSubmatch(l); m != nil {
				oldLeft, newLeft, header = count(m[2]), count(m[4]), false
			}
		}
		cur = append(cur, l)
	}
	flush()
	return files
}

func count(s string) int {
	if s == "" {
		return 1
	}
	n, _ := strconv.Atoi(s)
	return n
}

// parseFile reads one file's diff.
func parseFile(lines []string) (File, bool) {
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	f := File{Status: "modified", raw: strings.Join(lines, "\n") + "\n", parsed: true}
	var gitA, gitB string
	if len(lines) > 0 && strings.HasPrefix(lines[0], "diff --git ") {
		gitA, gitB = splitGitHeader(strings.TrimPrefix(lines[0], "diff --git "))
	}
	i := 0
	for ; i < len(lines) && !strings.HasPrefix(lines[i], "@@"); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "new file mode"):
			f.Status = "added"
		case strings.HasPrefix(l, "deleted file mode"):
			f.Status = "deleted"
		case strings.HasPrefix(l, "rename from "):
			f.OldPath, f.Status = unquote(strings.TrimPrefix(l, "rename from ")), "renamed"
		case strings.HasPrefix(l, "rename to "):
			f.Path = unquote(strings.TrimPrefix(l, "rename to "))
		case strings.HasPrefix(l, "Binary files "), l == "GIT binary patch":
			f.Binary = true
		case strings.HasPrefix(l, "--- "):
			if p := diffPath(strings.TrimPrefix(l, "--- ")); p != "" {
				gitA = p
			} else {
				f.Status = "added"
			}
		case strings.HasPrefix(l, "+++ "):
			if p := diffPath(strings.TrimPrefix(l, "+++ ")); p != "" {
				gitB = p
			} else {
				f.Status = "deleted"
			}
		}
	}
	if f.Path == "" {
		f.Path = gitB
		if f.Status == "deleted" || f.Path == "" {
			f.Path = gitA
		}
	}
	if f.Path == "" {
		return File{}, false
	}
	if f.Binary {
		return f, true
	}
	hunks, ok := parseHunks(lines[i:])
	if !ok {
		// Kept whole (spec P-14); its lines still count.
		f.parsed = false
		for _, l := range lines[i:] {
			switch {
			case strings.HasPrefix(l, "+"):
				f.Added++
			case strings.HasPrefix(l, "-"):
				f.Deleted++
			}
		}
		return f, true
	}
	f.Hunks = hunks
	for _, h := range hunks {
		for _, l := range h.Lines {
			switch l[0] {
			case '+':
				f.Added++
			case '-':
				f.Deleted++
			}
		}
	}
	return f, true
}

// parseHunks reads a file's hunks, each as long as its header says.
func parseHunks(lines []string) ([]Hunk, bool) {
	var out []Hunk
	for i := 0; i < len(lines); {
		if lines[i] == "" && i == len(lines)-1 {
			break
		}
		m := hunkHeader.FindStringSubmatch(lines[i])
		if m == nil {
			return nil, false
		}
		h := Hunk{OldStart: atoi(m[1]), OldLines: count(m[2]), NewStart: atoi(m[3]), NewLines: count(m[4]), Section: m[5]}
		i++
		oldLeft, newLeft := h.OldLines, h.NewLines
		for i < len(lines) && (oldLeft > 0 || newLeft > 0 || strings.HasPrefix(lines[i], `\`)) {
			l := lines[i]
			switch {
			case l == "" || l[0] == ' ':
				// A context line whose space an editor stripped.
				l = " " + strings.TrimPrefix(l, " ")
				oldLeft--
				newLeft--
			case l[0] == '-':
				oldLeft--
			case l[0] == '+':
				newLeft--
			case l[0] == '\\':
			default:
				return nil, false
			}
			if oldLeft < 0 || newLeft < 0 {
				return nil, false
			}
			h.Lines = append(h.Lines, l)
			i++
		}
		if oldLeft > 0 || newLeft > 0 {
			return nil, false
		}
		out = append(out, h)
	}
	return out, true
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// splitGitHeader reads the two paths of "diff --git a/x b/x".
func splitGitHeader(s string) (a, b string) {
	if strings.HasPrefix(s, `"`) {
		if q, err := strconv.QuotedPrefix(s); err == nil {
			return diffPath(q), diffPath(strings.TrimSpace(s[len(q):]))
		}
	}
	// Unquoted paths have no spaces around " b/" but may hold spaces:
	// the two halves are the same length for an unrenamed file.
	if i := strings.Index(s, " b/"); i >= 0 {
		return diffPath(s[:i]), diffPath(s[i+1:])
	}
	return "", ""
}

// diffPath is the path of a "---"/"+++" line ("" for /dev/null), its
// a/ or b/ prefix and any timestamp dropped.
func diffPath(s string) string {
	s = unquote(strings.TrimSpace(s))
	if t := strings.IndexByte(s, '\t'); t >= 0 {
		s = s[:t]
	}
	if s == "/dev/null" {
		return ""
	}
	if strings.HasPrefix(s, "a/") || strings.HasPrefix(s, "b/") {
		s = s[2:]
	}
	return s
}

func unquote(s string) string {
	if strings.HasPrefix(s, `"`) {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}
