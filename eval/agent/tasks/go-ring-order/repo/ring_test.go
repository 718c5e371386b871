package ring

import (
	"reflect"
	"testing"
)

func TestPushBelowCapacity(t *testing.T) {
	r := New[int](3)
	r.Push(1)
	r.Push(2)
	if got, want := r.Items(), []int{1, 2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Items() = %v; want %v", got, want)
	}
	if r.Len() != 2 || r.Cap() != 3 {
		t.Fatalf("Len, Cap = %d, %d; want 2, 3", r.Len(), r.Cap())
	}
}

func TestPushFull(t *testing.T) {
	r := New[string](2)
	r.Push("a")
	r.Push("b")
	if got, want := r.Items(), []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Items() = %v; want %v", got, want)
	}
}
