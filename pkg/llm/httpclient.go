package llm

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"sylk.dev/sylk/pkg/publicnet"
)

// MaxResponseBytes bounds the body of one provider answer, a stream's
// included: far above any real answer, it keeps an endpoint that never
// stops from filling the memory of the process that called it.
const MaxResponseBytes = 64 << 20

// ErrPrivateAddress is the refusal of a connection, from a client limited
// to public addresses, to an address of the service's own networks.
var ErrPrivateAddress = publicnet.ErrPrivate

// ErrResponseTooLarge ends an answer body longer than MaxResponseBytes.
var ErrResponseTooLarge = fmt.Errorf("provider answer over %d bytes", MaxResponseBytes)

// Client is the client o's calls go through: o.HTTPClient when set,
// else one shared by every provider client alike (limited to public
// addresses with o.PublicOnly), so that their connections are pooled.
func (o ProviderOptions) Client() *http.Client {
	if o.HTTPClient != nil {
		return o.HTTPClient
	}
	if o.PublicOnly {
		return publicClient()
	}
	return anyClient()
}

var (
	anyClient    = sync.OnceValue(func() *http.Client { return NewHTTPClient(false) })
	publicClient = sync.OnceValue(func() *http.Client { return NewHTTPClient(true) })
)

// NewHTTPClient is a client for provider calls. Each answer body is cut at MaxResponseBytes. With publicOnly it
// connects to public addresses only (not loopback, private, link-local,
// shared or unspecified ones): checked on the address dialled, after the
// name was looked up, so that a name that answers differently the second
// time cannot lead in either.
func NewHTTPClient(publicOnly bool) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if publicOnly {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: publicnet.Control}
		t.DialContext = d.DialContext
		t.Proxy = nil // a proxy would dial for us, unchecked
	}
	return &http.Client{Transport: limitedTransport{t}}
}

// limitedTransport cuts each answer body at MaxResponseBytes.
type limitedTransport struct{ rt http.RoundTripper }

func (l limitedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err == nil && resp.Body != nil {
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: MaxResponseBytes}
	}
	return resp, err
}

type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
