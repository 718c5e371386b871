package toolexec

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	taskv1 "sylk.dev/sylk/gen/go/sylk/task/v1"
)

func TestCaptureRender(t *testing.T) {
	t.Parallel()
	data := []byte("abcdefghijklmnopqrstuvwxyz")
	tests := []struct {
		name      string
		limit     int
		chunk     int
		render    int
		want      string
		truncated bool
	}{
		{"fits", 100, 3, 100, string(data), false},
		{"exact", 26, 5, 26, string(data), false},
		{"head and tail", 10, 4, 10, "abcde" + truncationMarker(16) + "vwxyz", true},
		{"smaller render", 20, 1, 6, "abc" + truncationMarker(20) + "xyz", true},
		{"smaller render, contiguous", 24, 26, 20, "abcdefghij" + truncationMarker(6) + "qrstuvwxyz", true},
		{"render nothing", 10, 7, 0, truncationMarker(26), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCapture(tt.limit)
			for p := data; len(p) > 0; {
				n := min(tt.chunk, len(p))
				_, _ = c.Write(p[:n])
				p = p[n:]
			}
			got, trunc := c.render(tt.render)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.truncated, trunc)
			require.Equal(t, int64(len(data)), c.size())
		})
	}
}

func TestCaptureKeepsUTF8Valid(t *testing.T) {
	t.Parallel()
	c := newCapture(5)
	_, _ = c.Write([]byte("ééééé\xff"))
	got, trunc := c.render(5)
	require.True(t, trunc)
	require.True(t, strings.Contains(got, "\uFFFD"))
	_, err := proto.Marshal(&taskv1.TaskResult{Stdout: got})
	require.NoError(t, err)
}
