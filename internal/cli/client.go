package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eventv1 "sylk.dev/sylk/gen/go/sylk/event/v1"
)

// client speaks the REST gateway with an API key. It never dials gRPC: the
// gateway is the only public edge.
type client struct {
	base string
	key  string
	http *http.Client
	// stream has no overall timeout: an event stream stays open.
	stream *http.Client
}

func newClient(server, key string) *client {
	return &client{
		base:   strings.TrimRight(server, "/"),
		key:    key,
		http:   &http.Client{Timeout: 60 * time.Second},
		stream: &http.Client{},
	}
}

// unmarshal decodes what the gateway sends; fields this client does not
// know yet (a newer server) are skipped.
var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// marshal encodes request bodies the way the gateway reads them.
var marshal = protojson.MarshalOptions{}

// call sends a request and decodes the JSON answer into out (when not nil).
// It returns the raw body too, which --json prints as it came.
func (c *client) call(ctx context.Context, method, path string, body proto.Message, out proto.Message) ([]byte, error) {
	var r io.Reader
	if body != nil {
		b, err := marshal.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, usageErrorf("server address %q: %v", c.base, err)
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, connError(ctx, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, connError(ctx, err)
	}
	if resp.StatusCode/100 != 2 {
		return raw, httpError(resp.StatusCode, raw)
	}
	if out != nil {
		if err := unmarshal.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("%s %s: the server's answer is not understood: %w", method, path, err)
		}
	}
	return raw, nil
}

func (c *client) authorize(req *http.Request) {
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
}

// connError says the server cannot be reached, or that the wait was
// interrupted or timed out.
func connError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	return &Error{Code: ExitError, Err: fmt.Errorf("cannot reach the server: %w (check the address given to sylk login or SYLK_SERVER)", err)}
}

// httpError turns a gateway error answer into an Error with the exit code
// of its status.
func httpError(status int, raw []byte) error {
	var body struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &body)
	msg := body.Message
	if msg == "" {
		msg = strings.TrimSpace(string(raw))
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	code := ExitError
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		code = ExitAuth
		if status == http.StatusUnauthorized {
			msg += " (log in again with sylk login)"
		}
	case http.StatusNotFound:
		code = ExitNotFound
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		code = ExitTimeout
	}
	return &Error{Code: code, Err: fmt.Errorf("%s (HTTP %d)", msg, status)}
}

// streamEvents follows a session's events as server-sent events from after
// on, calling fn with each until fn returns done or an error, or ctx ends.
// A dropped connection is resumed from the last event seen.
func (c *client) streamEvents(ctx context.Context, session string, after uint64, fn func(*eventv1.Event, []byte) (bool, error)) error {
	for attempt := 0; ; attempt++ {
		last, done, err := c.streamOnce(ctx, session, after, fn)
		if done || ctx.Err() != nil {
			if ctx.Err() != nil {
				return ctxError(ctx)
			}
			return err
		}
		var e *Error
		if errors.As(err, &e) || attempt >= 5 {
			return err
		}
		if last > after {
			after, attempt = last, 0
		}
		select {
		case <-ctx.Done():
			return ctxError(ctx)
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
}

// streamOnce reads one connection of the stream. It reports the last
// sequence read and whether fn ended the stream.
func (c *client) streamOnce(ctx context.Context, session string, after uint64, fn func(*eventv1.Event, []byte) (bool, error)) (uint64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/"+session+"/events:stream", nil)
	if err != nil {
		return after, false, err
	}
	c.authorize(req)
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		return after, false, connError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		return after, false, httpError(resp.StatusCode, raw)
	}
	last := after
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 8<<20)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := []byte(strings.TrimPrefix(line, "data: "))
			if event == "error" {
				return last, false, httpError(http.StatusInternalServerError, data)
			}
			ev := &eventv1.Event{}
			if err := unmarshal.Unmarshal(data, ev); err != nil {
				return last, false, fmt.Errorf("event stream: %w", err)
			}
			last = max(last, ev.GetSequence())
			done, err := fn(ev, data)
			if done || err != nil {
				return last, true, err
			}
		case line == "":
			event = ""
		}
	}
	if err := sc.Err(); err != nil {
		return last, false, connError(ctx, err)
	}
	return last, false, errors.New("the event stream ended")
}
