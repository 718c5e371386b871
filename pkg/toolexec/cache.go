package toolexec

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// CachePolicy makes a tool's output reusable (spec C-33): a call is served
// from the cache while the files it reads are unchanged. The key of a call
// is its command, arguments and added environment, the policy, and the
// working directory by its contents: every file under it whose name
// matches InvalidateOn, by relative path and contents. Editing, adding or
// removing a matching file makes the next call run the tool again. Two
// workspaces with the same files share outputs, within one
// Invocation.CacheScope; paths naming the first workspace are rewritten to
// name the second.
type CachePolicy struct {
	// TTL bounds how long an output is reused; 0 means the cache's TTL.
	TTL time.Duration
	// InvalidateOn are globs matched against file names ("*.go",
	// ".eslintrc*"); "*" covers every file.
	InvalidateOn []string
}

// DefaultCachePolicies are the read-only checks whose output depends only
// on the files under their working directory: the spec's eslint, prettier
// and go vet, each with the files it also reads (module and lock files,
// configuration), and the Inspector's other read-only checks.
func DefaultCachePolicies() map[string]CachePolicy {
	goFiles := []string{"*.go", "go.mod", "go.sum", "go.work", "go.work.sum"}
	pyFiles := []string{"*.py", "*.pyi", "pyproject.toml", "setup.cfg", "tox.ini"}
	return map[string]CachePolicy{
		"go vet": {InvalidateOn: goFiles},
		"gofmt":  {InvalidateOn: []string{"*.go"}},
		"eslint": {InvalidateOn: []string{"*.js", "*.jsx", "*.mjs", "*.cjs", "*.ts", "*.tsx", "*.mts", "*.cts",
			".eslintrc*", "eslint.config.*", ".eslintignore", "package.json", "package-lock.json", "pnpm-lock.yaml", "yarn.lock"}},
		"prettier": {InvalidateOn: []string{"*"}},
		"flake8":   {InvalidateOn: slices.Concat(pyFiles, []string{".flake8"})},
		"ruff":     {InvalidateOn: slices.Concat(pyFiles, []string{"ruff.toml", ".ruff.toml"})},
		"black":    {InvalidateOn: pyFiles},
	}
}

// Cache limits (spec C-33).
const (
	defaultCacheEntries = 1000
	defaultCacheBytes   = 100 << 20
	defaultCacheTTL     = 5 * time.Minute
	// Working directories larger than this are not hashed: the call runs.
	maxHashedFiles = 50000
	maxHashedBytes = 512 << 20
)

// cacheSkippedDirs are never hashed: version control data and installed
// dependencies (their versions are in the lock files, which are hashed
// when a policy names them).
var cacheSkippedDirs = map[string]bool{".git": true, ".hg": true, ".svn": true, "node_modules": true}

// CacheStats counts the cache's use.
type CacheStats struct {
	Hits, Misses, Stores, Evictions uint64
	Entries                         int
	Bytes                           int64
}

// outputCache is an LRU of results bounded by entries and bytes.
type outputCache struct {
	maxEntries int
	maxBytes   int64
	ttl        time.Duration

	mu    sync.Mutex
	lru   *list.List // of *cacheEntry, most recently used first
	byKey map[string]*list.Element
	stats CacheStats
}

type cacheEntry struct {
	key     string
	ws      string // the workspace the output was produced in
	res     Result
	size    int64
	expires time.Time
	hits    int
}

func newOutputCache(entries int, bytes int64, ttl time.Duration) *outputCache {
	if entries <= 0 || bytes <= 0 {
		return nil
	}
	return &outputCache{maxEntries: entries, maxBytes: bytes, ttl: ttl, lru: list.New(), byKey: map[string]*list.Element{}}
}

func (c *outputCache) get(key string, now time.Time) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if ok && now.After(el.Value.(*cacheEntry).expires) {
		c.remove(el)
		ok = false
	}
	if !ok {
		c.stats.Misses++
		return cacheEntry{}, false
	}
	e := el.Value.(*cacheEntry)
	e.hits++
	c.stats.Hits++
	c.lru.MoveToFront(el)
	return *e, true
}

func (c *outputCache) put(key, ws string, res Result, ttl time.Duration, now time.Time) {
	size := int64(len(key)+len(ws)+len(res.Stdout)+len(res.Stderr)) + 512
	if res.Truncated != nil {
		for _, l := range slices.Concat(res.Truncated.Important, res.Truncated.FirstLines, res.Truncated.LastLines) {
			size += int64(len(l))
		}
	}
	if size > c.maxBytes {
		return
	}
	if ttl <= 0 {
		ttl = c.ttl
	}
	// The captures are dropped: the cached output is its rendered text.
	res.stdout, res.stderr = nil, nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.remove(el)
	}
	c.byKey[key] = c.lru.PushFront(&cacheEntry{key: key, ws: ws, res: res, size: size, expires: now.Add(ttl)})
	c.stats.Stores++
	c.stats.Entries++
	c.stats.Bytes += size
	for c.stats.Entries > c.maxEntries || c.stats.Bytes > c.maxBytes {
		c.remove(c.lru.Back())
		c.stats.Evictions++
	}
}

func (c *outputCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.byKey, e.key)
	c.stats.Entries--
	c.stats.Bytes -= e.size
}

func (c *outputCache) snapshot() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// CacheStats reports the tool output cache's use; zero when it is off.
func (e *Executor) CacheStats() CacheStats {
	if e.cache == nil {
		return CacheStats{}
	}
	return e.cache.snapshot()
}

// cachePolicy is the policy of inv's tool, if its output may be reused.
// Only a program run directly is: a shell command may redirect or pipe
// its output (a side effect a cached result would skip), and a call that
// reads standard input depends on more than its files. A program named by
// its path ("./node_modules/.bin/eslint") has the policy of its name.
func (e *Executor) cachePolicy(inv Invocation) (CachePolicy, bool) {
	if e.cache == nil || inv.Stdin != nil || inv.NoCache || NeedsShell(inv.Command) {
		return CachePolicy{}, false
	}
	for _, k := range e.keys(inv) {
		if p, ok := e.cfg.CachePolicies[k]; ok {
			return p, true
		}
		first, rest, _ := strings.Cut(k, " ")
		if base := filepath.Base(first); base != first {
			if p, ok := e.cfg.CachePolicies[strings.TrimSpace(base+" "+rest)]; ok {
				return p, true
			}
		}
	}
	return CachePolicy{}, false
}

var (
	errTooLarge   = errors.New("working directory too large to hash")
	errNotRegular = errors.New("not a regular file")
)

// workspaceOf is the workspace of a call in the resolved directory dir:
// inv.Workspace resolved, which must be dir or hold it, or dir when the call
// names none. A working directory that resolves outside its workspace (a
// path in it swapped for a symlink, say) is refused: confinement would
// otherwise grant the command wherever it leads.
func (e *Executor) workspaceOf(inv Invocation, dir string) (string, error) {
	if inv.Workspace == "" {
		return dir, nil
	}
	ws, err := e.boundary.CheckDir(inv.Workspace)
	if err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	if !within(ws, dir) {
		return "", ErrOutsideWorkspace
	}
	return ws, nil
}

// cacheKey hashes what a call's output depends on under pol; ok is false
// when the working directory is too large to hash. Paths to the workspace
// ws (in the environment) are hashed as its place holder, and the working
// directory by its place in ws, so that workspaces with the same files
// share a key.
func cacheKey(inv Invocation, dir, ws string, pol CachePolicy) (string, bool) {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		io.WriteString(h, s)
	}
	field(inv.CacheScope)
	field(inv.Tool)
	rel, _ := filepath.Rel(ws, dir)
	field(rel)
	field(inv.Command)
	for _, a := range inv.Args {
		field(a)
	}
	field("\x00env")
	names := make([]string, 0, len(inv.Env))
	for k := range inv.Env {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		field(k)
		field(strings.ReplaceAll(inv.Env[k], ws, "\x00ws"))
	}
	field("\x00policy")
	for _, g := range pol.InvalidateOn {
		field(g)
	}
	field("\x00files")
	files, size := 0, int64(0)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && cacheSkippedDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !matchesAny(d.Name(), pol.InvalidateOn) {
			return nil
		}
		if files++; files > maxHashedFiles {
			return errTooLarge
		}
		name, _ := filepath.Rel(dir, p)
		field(name)
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			field("\x00link " + target)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		// The files are the task's: one swapped since the listing for a
		// link (to /dev/zero, say) or a pipe is not opened, and no file is
		// read past the bound.
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return errors.Join(err, errNotRegular)
		}
		n, err := io.CopyN(h, f, maxHashedBytes-size+1)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if size += n; size > maxHashedBytes {
			return errTooLarge
		}
		field("\x00end")
		return nil
	})
	if err != nil {
		return "", false
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

func matchesAny(name string, globs []string) bool {
	for _, g := range globs {
		if ok, _ := filepath.Match(g, name); ok {
			return true
		}
	}
	return false
}

// reusable reports whether a result may be cached: the tool ran to its
// end. Findings (a non-zero exit) are output like any other.
func reusable(res Result) bool {
	return !res.Killed && !res.TimedOut && !res.Cancelled && !res.Partial && res.ExitCode >= 0
}

// fromCache turns a cached entry into the result of a call in workspace
// ws: paths naming the workspace the output was produced in name ws
// instead, and the parser runs again on the moved output.
func (e *Executor) fromCache(inv Invocation, ws string, ent cacheEntry) Result {
	res := ent.res
	res.Cached, res.CacheHits, res.PID, res.Duration = true, ent.hits, 0, 0
	if ent.ws != ws {
		mv := func(s string) string { return strings.ReplaceAll(s, ent.ws, ws) }
		res.Stdout, res.Stderr = mv(res.Stdout), mv(res.Stderr)
		if t := res.Truncated; t != nil {
			c := *t
			c.Summary = mv(c.Summary)
			for _, l := range []*[]string{&c.Important, &c.FirstLines, &c.LastLines} {
				moved := make([]string, len(*l))
				for i, s := range *l {
					moved[i] = mv(s)
				}
				*l = moved
			}
			res.Truncated = &c
		}
		if res.Parsed != nil {
			if p := e.parser(inv); p != nil {
				if parsed, ok := p(res.Stdout, res.Stderr, res.ExitCode); ok {
					res.Parsed = parsed
				}
			}
		}
	}
	if inv.StreamTo != nil {
		inv.StreamTo("status", MsgCached)
		for _, l := range splitLines(res.Stdout) {
			inv.StreamTo("stdout", l)
		}
		for _, l := range splitLines(res.Stderr) {
			inv.StreamTo("stderr", l)
		}
	}
	return res
}
