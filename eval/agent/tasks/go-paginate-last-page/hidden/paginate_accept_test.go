package paginate_test

import (
	"reflect"
	"testing"

	"example.com/go-paginate-last-page"
)

func TestAcceptPartialLastPage(t *testing.T) {
	for _, tc := range []struct{ total, size, want int }{
		{21, 10, 3}, {1, 10, 1}, {10, 10, 1}, {11, 5, 3}, {0, 5, 0},
	} {
		if got := paginate.Pages(tc.total, tc.size); got != tc.want {
			t.Errorf("Pages(%d, %d) = %d; want %d", tc.total, tc.size, got, tc.want)
		}
	}
	items := make([]string, 21)
	for i := range items {
		items[i] = string(rune('a' + i))
	}
	if got, want := paginate.Page(items, 3, 10), []string{"u"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Page 3 = %v; want %v", got, want)
	}
	if got := paginate.Page(items, 4, 10); len(got) != 0 {
		t.Fatalf("Page 4 = %v; want nothing", got)
	}
}
