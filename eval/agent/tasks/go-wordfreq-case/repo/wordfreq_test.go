package wordfreq

import (
	"reflect"
	"testing"
)

func TestCountPunctuation(t *testing.T) {
	got := Count("dogs, cats; dogs!")
	want := map[string]int{"dogs": 2, "cats": 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Count = %v; want %v", got, want)
	}
}

func TestTop(t *testing.T) {
	got := Top("b a c b a b", 2)
	want := []WordCount{{"b", 3}, {"a", 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Top = %v; want %v", got, want)
	}
}
