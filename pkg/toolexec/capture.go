package toolexec

import (
	"fmt"
	"strings"
	"sync"
)

// capture keeps the head and the tail of a stream whose total size is
// unbounded, so that a task's output can be reported within a cap without
// losing its beginning (what ran) or its end (how it ended).
type capture struct {
	mu      sync.Mutex
	headCap int
	tailCap int
	head    []byte
	// tail holds the stream's last bytes: everything after head until it
	// grows past 2*tailCap, then at least its last tailCap bytes.
	tail  []byte
	total int64
}

func newCapture(limit int) *capture {
	return &capture{headCap: limit / 2, tailCap: limit - limit/2}
}

// Write records p; it never fails.
func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if len(c.head) < c.headCap {
		k := min(c.headCap-len(c.head), len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail = append(c.tail, p...)
	if len(c.tail) > 2*c.tailCap {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-c.tailCap:]...)
	}
	return n, nil
}

// truncationMarker replaces the dropped middle of an output.
func truncationMarker(n int64) string {
	return fmt.Sprintf("\n... [%d bytes truncated] ...\n", n)
}

// render returns the output capped at limit bytes (plus the marker) and
// whether anything was dropped; limit must not exceed the capture's limit.
// Invalid UTF-8 (a stream cut inside a character, or binary output) is
// replaced so that the text is a valid protobuf string.
func (c *capture) render(limit int) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit = min(limit, c.headCap+c.tailCap)
	if c.total <= int64(limit) {
		return strings.ToValidUTF8(string(c.head)+string(c.tail), "\uFFFD"), false
	}
	h := min(limit/2, len(c.head))
	t := limit - h
	var b strings.Builder
	b.Write(c.head[:h])
	b.WriteString(truncationMarker(c.total - int64(h) - int64(t)))
	if t <= len(c.tail) {
		b.Write(c.tail[len(c.tail)-t:])
	} else {
		// Only possible while head and tail are still contiguous.
		b.Write(c.head[len(c.head)-(t-len(c.tail)):])
		b.Write(c.tail)
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD"), true
}

// size is the number of bytes written.
func (c *capture) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
