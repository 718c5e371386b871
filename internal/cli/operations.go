package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// opPollEvery is how often an operation is read when its watch stream is
// not available.
const opPollEvery = 300 * time.Millisecond

// errNoWatch: the watch stream is not available (a server without it) or
// ended before the operation did; the operation is polled instead.
var errNoWatch = errors.New("operation watch not available")

// followOperation follows an index operation until it is done through its
// watch stream (GET /v1/operations/{id}:watch), polling it when the server
// has no stream, drawing a progress bar on a terminal (a line per phase
// otherwise).
func (e *env) followOperation(ctx context.Context, c *client, op string) error {
	bar := newProgress(e.out, isTerminal(e.out) && !e.opts.json)
	show := func(o *librarianv1.Operation) {
		if !e.opts.json {
			bar.update(o.GetMetadata())
		}
	}
	raw, o, err := c.watchOperation(ctx, op, show)
	if errors.Is(err, errNoWatch) {
		raw, o, err = c.pollOperation(ctx, op, show)
	}
	bar.done()
	if err != nil {
		return err
	}
	return e.operationDone(raw, o)
}

// watchOperation reads the operation's watch stream (newline-delimited
// JSON lines {"result": ...} or {"error": ...}), calling show with each
// state, and returns the last one, done, with its raw JSON.
func (c *client) watchOperation(ctx context.Context, op string, show func(*librarianv1.Operation)) ([]byte, *librarianv1.Operation, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/"+op+":watch", nil)
	if err != nil {
		return nil, nil, usageErrorf("server address %q: %v", c.base, err)
	}
	c.authorize(req)
	resp, err := c.stream.Do(req)
	if err != nil {
		return nil, nil, connError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusNotImplemented {
		// An older server, or an unknown operation: GET says which.
		return nil, nil, errNoWatch
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		return nil, nil, httpError(resp.StatusCode, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 8<<20)
	for sc.Scan() {
		var line struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, nil, fmt.Errorf("operation stream: %w", err)
		}
		if line.Error != nil {
			return nil, nil, httpError(http.StatusInternalServerError, line.Error)
		}
		var r librarianv1.WatchOperationResponse
		if err := unmarshal.Unmarshal(line.Result, &r); err != nil {
			return nil, nil, fmt.Errorf("operation stream: %w", err)
		}
		show(r.GetOperation())
		if r.GetOperation().GetDone() {
			return line.Result, r.GetOperation(), nil
		}
	}
	if ctx.Err() != nil {
		return nil, nil, ctxError(ctx)
	}
	// The stream broke before the operation ended: reading goes on by GET.
	return nil, nil, errNoWatch
}

// pollOperation reads the operation every opPollEvery until it is done.
func (c *client) pollOperation(ctx context.Context, op string, show func(*librarianv1.Operation)) ([]byte, *librarianv1.Operation, error) {
	tick := time.NewTicker(opPollEvery)
	defer tick.Stop()
	for {
		var resp librarianv1.GetOperationResponse
		raw, err := c.call(ctx, http.MethodGet, "/v1/"+op, nil, &resp)
		if err != nil {
			return nil, nil, err
		}
		o := resp.GetOperation()
		show(o)
		if o.GetDone() {
			return raw, o, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctxError(ctx)
		case <-tick.C:
		}
	}
}
