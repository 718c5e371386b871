package review

import (
	"fmt"
	"regexp"
)

// refPattern is what a ref to review may look like: a branch, a tag or a
// commit, with ~ and ^ suffixes; never an option.
var refPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/@{}~^-]{0,199}$`)

// CheckRef says whether ref may name a commit to review.
func CheckRef(ref string) error {
	if !refPattern.MatchString(ref) {
		return fmt.Errorf("%q is not a branch, tag or commit name", ref)
	}
	return nil
}
