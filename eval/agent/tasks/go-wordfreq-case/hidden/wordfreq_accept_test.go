package wordfreq_test

import (
	"reflect"
	"testing"

	"example.com/go-wordfreq-case"
)

func TestAcceptCaseInsensitive(t *testing.T) {
	got := wordfreq.Count("The cat saw the dog. THE END")
	want := map[string]int{"the": 3, "cat": 1, "saw": 1, "dog": 1, "end": 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Count = %v; want %v", got, want)
	}
	top := wordfreq.Top("Go go GO rust Rust zig", 2)
	if want := []wordfreq.WordCount{{Word: "go", Count: 3}, {Word: "rust", Count: 2}}; !reflect.DeepEqual(top, want) {
		t.Fatalf("Top = %v; want %v", top, want)
	}
}
