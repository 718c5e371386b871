package paginate

import (
	"reflect"
	"testing"
)

func numbers(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestPagesExact(t *testing.T) {
	if got := Pages(20, 10); got != 2 {
		t.Fatalf("Pages(20, 10) = %d; want 2", got)
	}
	if got := Pages(0, 10); got != 0 {
		t.Fatalf("Pages(0, 10) = %d; want 0", got)
	}
}

func TestPage(t *testing.T) {
	items := numbers(20)
	if got, want := Page(items, 2, 10), numbers(20)[10:]; !reflect.DeepEqual(got, want) {
		t.Fatalf("Page 2 = %v; want %v", got, want)
	}
	if got := Page(items, 3, 10); got != nil {
		t.Fatalf("Page 3 = %v; want nil", got)
	}
}
