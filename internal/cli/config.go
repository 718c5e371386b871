package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Config is what sylk login stores: where the server is, the API key, and
// the session the conversation commands continue.
type Config struct {
	Server  string `json:"server"`
	Key     string `json:"key"`
	Session string `json:"session,omitempty"`
}

// configPath is $XDG_CONFIG_HOME/sylk/config.json (or the platform's user
// configuration directory); SYLK_CONFIG names another file.
func configPath(lookup func(string) (string, bool)) (string, error) {
	if p, ok := lookup("SYLK_CONFIG"); ok && p != "" {
		return p, nil
	}
	dir := ""
	if d, ok := lookup("XDG_CONFIG_HOME"); ok && filepath.IsAbs(d) {
		dir = d
	} else {
		d, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("no configuration directory: %w (set XDG_CONFIG_HOME or SYLK_CONFIG)", err)
		}
		dir = d
	}
	return filepath.Join(dir, "sylk", "config.json"), nil
}

// loadConfig reads the file at path; a missing file is an empty Config.
func loadConfig(path string) (Config, error) {
	var c Config
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("%s: %w (run sylk login again)", path, err)
	}
	return c, nil
}

// saveConfig writes c to path, readable by its owner only: it holds a key.
// The file is written beside the old one and renamed over it, so a crash
// never leaves half a file.
func saveConfig(path string, c Config) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(raw, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// resolve fills server and key: flags first, then SYLK_SERVER and
// SYLK_API_KEY, then the stored configuration.
func (c Config) resolve(server string, lookup func(string) (string, bool)) Config {
	if v, ok := lookup("SYLK_SERVER"); ok && v != "" {
		c.Server = v
	}
	if server != "" {
		c.Server = server
	}
	if v, ok := lookup("SYLK_API_KEY"); ok && v != "" {
		c.Key = v
	}
	return c
}
