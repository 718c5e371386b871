// Package ring keeps the most recent values of a stream.
package ring

// Ring holds the last Cap() values pushed; older ones are overwritten.
type Ring[T any] struct {
	buf   []T
	start int // index of the oldest value
	n     int // number of values held
}

// New returns a ring holding up to size values (at least one).
func New[T any](size int) *Ring[T] {
	return &Ring[T]{buf: make([]T, max(size, 1))}
}

// Push adds v, overwriting the oldest value when the ring is full.
func (r *Ring[T]) Push(v T) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = v
		r.n++
		return
	}
	r.buf[r.start] = v
	r.start = (r.start + 1) % len(r.buf)
}

// Len returns the number of values held.
func (r *Ring[T]) Len() int { return r.n }

// Cap returns the most values the ring holds.
func (r *Ring[T]) Cap() int { return len(r.buf) }

// Items returns the values held, oldest first.
func (r *Ring[T]) Items() []T {
	out := make([]T, 0, r.n)
	for i := 0; i < r.n; i++ {
		out = append(out, r.buf[i])
	}
	return out
}
