package toolexec

import (
	"regexp"
	"strings"
)

// noiseLine matches output that does not show progress worth extending a
// timeout for: dots, spinner characters, bare percentages (spec C-26).
var noiseLine = regexp.MustCompile(`^(\.*|[|/\-\\]+|\d+%)$`)

// IsNoise reports whether a line is noise (after trimming blanks).
func IsNoise(line string) bool {
	return noiseLine.MatchString(strings.TrimSpace(line))
}
