// Package redisx opens the Redis client and names keys under one prefix, so
// that tests and tenants of one Redis never collide.
package redisx

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"

	"sylk.dev/sylk/pkg/meshtls"
)

// Config locates Redis.
type Config struct {
	URL    string
	Prefix string
	// TLS verifies a server whose certificate a private authority signed,
	// and presents a client certificate; a rediss:// URL alone verifies
	// with the system's authorities.
	TLS meshtls.StoreTLS
}

// RegisterFlags registers -redis.url, -redis.prefix and -redis.tls-*.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "redis.url", "redis://127.0.0.1:6379/0", "Redis URL")
	fs.StringVar(&c.Prefix, "redis.prefix", "sylk", "prefix of every Redis key")
	c.TLS.RegisterFlags(fs, "redis", "Redis")
}

// Validate checks the URL parses and the prefix is set.
func (c Config) Validate() error {
	var errs []error
	if _, err := parseURL(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("redis.url: %w", err))
	}
	if c.Prefix == "" || strings.ContainsAny(c.Prefix, " \t\n*") {
		errs = append(errs, errors.New("redis.prefix: must be non-empty without spaces or '*'"))
	}
	return errors.Join(append(errs, c.TLS.Validate("redis"))...)
}

// parseURL is redis.ParseURL with errors that never quote the URL, which
// may hold a password: only what was wrong with it.
func parseURL(raw string) (*redis.Options, error) {
	opts, err := redis.ParseURL(raw)
	var ue *url.Error
	if errors.As(err, &ue) {
		var ee url.EscapeError
		if errors.As(ue.Err, &ee) {
			return nil, errors.New("invalid URL: a bad percent-encoding")
		}
		return nil, fmt.Errorf("invalid URL: %w", ue.Err)
	}
	return opts, err
}

// Client is a Redis client whose keys share one prefix.
type Client struct {
	*redis.Client
	prefix string
}

// Open connects and pings.
func Open(ctx context.Context, cfg Config) (*Client, error) {
	opts, err := parseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	if cfg.TLS.Enabled() {
		host, _, err := net.SplitHostPort(opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("redis address %s: %w", opts.Addr, err)
		}
		if opts.TLSConfig, err = cfg.TLS.ClientConfig(host); err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
	}
	c := redis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connect to redis %s: %w", opts.Addr, err)
	}
	return &Client{Client: c, prefix: cfg.Prefix}, nil
}

// Key joins parts under the prefix: Key("guide", "route", h) is
// "sylk:guide:route:<h>".
func (c *Client) Key(parts ...string) string {
	return c.prefix + ":" + strings.Join(parts, ":")
}

// Prefix returns the key prefix.
func (c *Client) Prefix() string { return c.prefix }
