// Package paginate splits lists into pages.
package paginate

// Pages returns how many pages of the given size it takes to hold total
// items.
func Pages(total, size int) int {
	if size <= 0 || total <= 0 {
		return 0
	}
	return total / size
}

// Page returns page n (1-based) of items, or nil when there is no such
// page.
func Page[T any](items []T, n, size int) []T {
	if n < 1 || n > Pages(len(items), size) {
		return nil
	}
	start := (n - 1) * size
	end := min(start+size, len(items))
	return items[start:end]
}
