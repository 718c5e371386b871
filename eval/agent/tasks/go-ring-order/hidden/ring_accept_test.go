package ring_test

import (
	"reflect"
	"testing"

	"example.com/go-ring-order"
)

func TestAcceptItemsAfterWrap(t *testing.T) {
	r := ring.New[int](3)
	for i := 1; i <= 5; i++ {
		r.Push(i)
	}
	if got, want := r.Items(), []int{3, 4, 5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Items() = %v; want %v", got, want)
	}
	for i := 6; i <= 10; i++ {
		r.Push(i)
		if got, want := r.Items(), []int{i - 2, i - 1, i}; !reflect.DeepEqual(got, want) {
			t.Fatalf("after pushing %d Items() = %v; want %v", i, got, want)
		}
	}
	if r.Len() != 3 {
		t.Fatalf("Len() = %d; want 3", r.Len())
	}
}
