package embed

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
)

// Hashing is the offline embedder: it hashes code-aware features of a text
// (identifier parts, light stems, whole identifiers and adjacent part pairs)
// into a fixed number of signed buckets with sublinear term weights. It
// needs no model and no network, is deterministic, and is fast enough to
// embed a large repository in seconds.
type Hashing struct {
	dims int
}

// NewHashing returns a feature-hashing embedder of dims dimensions.
func NewHashing(dims int) (*Hashing, error) {
	if dims < 16 {
		return nil, fmt.Errorf("embed: hashing dimensions must be at least 16, got %d", dims)
	}
	return &Hashing{dims: dims}, nil
}

// Dims is the vector length.
func (h *Hashing) Dims() int { return h.dims }

// Name names the model with its dimensions.
func (h *Hashing) Name() string { return fmt.Sprintf("hashing-v1-%d", h.dims) }

// Embed embeds each text.
func (h *Hashing) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = h.Vector(t)
	}
	return out, nil
}

// Feature weights.
const (
	weightPart       = 1.0
	weightStem       = 0.6
	weightIdentifier = 0.8
	weightPair       = 0.5
	// maxFeatureText bounds the text considered, so a huge chunk costs no
	// more than a large one.
	maxFeatureText = 32 << 10
)

// Vector embeds one text.
func (h *Hashing) Vector(text string) []float32 {
	if len(text) > maxFeatureText {
		text = text[:maxFeatureText]
	}
	counts := map[string]float64{}
	var prev string
	Words(text, func(w string) {
		parts := SplitIdentifier(w)
		lowered := make([]string, 0, len(parts))
		for _, p := range parts {
			if len(p) < 2 {
				continue
			}
			lp := strings.ToLower(p)
			if stopWords[lp] {
				continue
			}
			lowered = append(lowered, lp)
		}
		if len(lowered) == 0 {
			prev = ""
			return
		}
		for i, p := range lowered {
			counts["w:"+p] += weightPart
			if s := Stem(p); s != p {
				counts["s:"+s] += weightStem
			}
			if i > 0 {
				counts["p:"+lowered[i-1]+"_"+p] += weightPair
			}
		}
		if len(lowered) > 1 {
			counts["i:"+strings.Join(lowered, "")] += weightIdentifier
		}
		if prev != "" {
			counts["p:"+prev+"_"+lowered[0]] += weightPair / 2
		}
		prev = lowered[len(lowered)-1]
	})
	v := make([]float32, h.dims)
	hf := fnv.New64a()
	for f, c := range counts {
		hf.Reset()
		_, _ = hf.Write([]byte(f))
		sum := hf.Sum64()
		idx := int(sum % uint64(h.dims))
		w := float32(1 + math.Log(c))
		if sum>>63 == 1 {
			w = -w
		}
		v[idx] += w
	}
	Normalize(v)
	return v
}

// Stem strips common English suffixes so "parses", "parsed" and "parsing"
// share a feature with "parse".
func Stem(w string) string {
	for _, suf := range []string{"ing", "ed", "es", "s"} {
		if len(w) > len(suf)+2 && strings.HasSuffix(w, suf) {
			w = strings.TrimSuffix(w, suf)
			break
		}
	}
	return strings.TrimSuffix(w, "e")
}

// Words calls fn for every run of ASCII letters, digits and '_' in s.
func Words(s string, fn func(w string)) {
	start := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			fn(s[start:i])
			start = -1
		}
	}
	if start >= 0 {
		fn(s[start:])
	}
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// SplitIdentifier splits a word on '_', on case changes (camelCase,
// PascalCase and acronyms: "HTTPRequest" is "HTTP" "Request") and between
// letters and digits. Parts keep their case.
func SplitIdentifier(w string) []string {
	var parts []string
	for _, seg := range strings.Split(w, "_") {
		start := 0
		for i := 1; i < len(seg); i++ {
			prev, cur := seg[i-1], seg[i]
			boundary := isLower(prev) && isUpper(cur) ||
				isDigit(prev) != isDigit(cur) ||
				isUpper(prev) && isUpper(cur) && i+1 < len(seg) && isLower(seg[i+1])
			if boundary {
				parts = append(parts, seg[start:i])
				start = i
			}
		}
		if start < len(seg) {
			parts = append(parts, seg[start:])
		}
	}
	return parts
}

// stopWords carry grammar, not meaning; they are left out of features.
var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true,
	"for": true, "from": true, "if": true, "in": true, "into": true, "is": true, "it": true, "its": true,
	"of": true, "on": true, "or": true, "that": true, "the": true, "this": true, "to": true, "was": true,
	"will": true, "with": true, "which": true, "when": true, "where": true, "what": true, "how": true,
	"does": true, "do": true, "can": true, "we": true, "you": true, "not": true, "no": true,
}
