// Package wordfreq counts words in text.
package wordfreq

import (
	"sort"
	"strings"
	"unicode"
)

// WordCount is a word and how often it occurs.
type WordCount struct {
	Word  string
	Count int
}

// Count counts the words of text. Words are compared without regard to
// case and the punctuation around them is ignored, so "The" and "the,"
// are the same word. Words are reported in lower case.
func Count(text string) map[string]int {
	counts := map[string]int{}
	for _, field := range strings.Fields(text) {
		word := strings.TrimFunc(field, func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r)
		})
		if word == "" {
			continue
		}
		counts[word]++
	}
	return counts
}

// Top returns the n most frequent words of text, the most frequent first
// and ties in alphabetical order.
func Top(text string, n int) []WordCount {
	var all []WordCount
	for w, c := range Count(text) {
		all = append(all, WordCount{w, c})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Count != all[j].Count {
			return all[i].Count > all[j].Count
		}
		return all[i].Word < all[j].Word
	})
	if len(all) > n {
		all = all[:n]
	}
	return all
}
