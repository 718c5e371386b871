// Package embed turns text into vectors for semantic search: an offline,
// code-aware feature-hashing embedder (the default, no model needed) and a
// client for OpenAI-compatible /v1/embeddings endpoints.
package embed

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
)

// Embedder turns texts into vectors of Dims() float32s, in order, one per
// text. Vectors are L2-normalised, so cosine similarity is a dot product.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Dims() int
	// Name identifies the model: vectors of different names never mix.
	Name() string
}

// Encode packs v as little-endian float32s.
func Encode(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
	}
	return out
}

// Decode unpacks what Encode packed.
func Decode(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, errors.New("embedding bytes are not a whole number of float32s")
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// Normalize scales v to unit length in place (a zero vector stays zero).
func Normalize(v []float32) {
	var sum float64
	for _, f := range v {
		sum += float64(f) * float64(f)
	}
	if sum == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(sum))
	for i := range v {
		v[i] *= inv
	}
}

// Dot is the dot product of two vectors of equal length.
func Dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
