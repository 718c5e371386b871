package toolexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"sylk.dev/sylk/pkg/taskinit"
)

// The network of task commands (Config.Network, Config.NetworkAllow).
//
// With "none", the default, a command reaches nothing of the host: not the
// stores (PostgreSQL, Redis, NATS), not the services' ports, not the
// metadata address, not a unix socket (PostgreSQL's in /var/run/postgresql,
// say). In namespaces of its own it has a network namespace with only its
// loopback interface; without, Landlock (kernel ABI 4) lets it connect to no
// TCP port but the egress proxy's and bind none but an ephemeral one. In
// both, a seccomp filter keeps it from making unix sockets
// (taskinit.BlockUnixSockets).
//
// What a deployment lets tasks reach (a module proxy, a git host) is
// Config.NetworkAllow, a list of host:port, through the egress proxy: an
// HTTP proxy the executor serves (CONNECT for TLS, plain requests for
// http://) which refuses every other destination, and any address of the
// host or of a private network that a listed name resolves to (only an
// address listed as such is reached there). Commands find it through
// HTTP_PROXY, HTTPS_PROXY and ALL_PROXY: in namespaces, at
// 127.0.0.1:nsProxyPort of their own network namespace, where the init
// program forwards connections to the proxy's unix socket; without, at the
// proxy's own loopback port.

// nsProxyPort is the egress proxy's port in a command's network namespace.
const nsProxyPort = 3128

// egressTimeout bounds the proxy's dial of an allowed destination.
const egressTimeout = 30 * time.Second

// allowRule is one host:port of Config.NetworkAllow; a host "*.example.com"
// is any name below example.com.
type allowRule struct {
	host string // lower case
	port string
	// addr is set for a host that is an IP address: the only address the
	// rule reaches, whatever kind it is.
	addr netip.Addr
}

func parseAllowRule(s string) (allowRule, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(s))
	if err != nil {
		return allowRule{}, fmt.Errorf("%q: want host:port", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return allowRule{}, fmt.Errorf("%q: bad port", s)
	}
	r := allowRule{host: strings.ToLower(strings.TrimSuffix(host, ".")), port: port}
	if a, err := netip.ParseAddr(host); err == nil {
		r.addr = a.Unmap()
		return r, nil
	}
	name := strings.TrimPrefix(r.host, "*.")
	if name == "" || strings.ContainsAny(name, "*/ ") {
		return allowRule{}, fmt.Errorf("%q: bad host", s)
	}
	return r, nil
}

// match reports whether the rule allows host:port (host lower case).
func (r allowRule) match(host, port string) bool {
	if r.port != port {
		return false
	}
	if suffix, ok := strings.CutPrefix(r.host, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	if r.addr.IsValid() {
		a, err := netip.ParseAddr(host)
		return err == nil && a.Unmap() == r.addr
	}
	return r.host == host
}

// publicAddr reports whether a is an address of the internet at large:
// not the host's (loopback, unspecified), not a private, shared, link-local
// (the metadata address) or multicast one.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// nonPublic are further ranges no name of the allow-list may lead to.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // shared address space (carrier NAT)
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 of any IPv4 address
}

// EgressStats counts the egress proxy's decisions.
type EgressStats struct {
	Allowed, Refused uint64
}

// egressProxy is the executor's filtering HTTP proxy.
type egressProxy struct {
	rules    []allowRule
	resolver *net.Resolver
	dialer   net.Dialer
	// sock is the unix socket's path (in dir), tcp the loopback listener's
	// port (0 without).
	dir, sock string
	tcp       uint16
	srv       *http.Server
	transport *http.Transport
	wg        sync.WaitGroup
	allowed   atomic.Uint64
	refused   atomic.Uint64
}

// newEgressProxy serves the proxy of rules on a unix socket in a directory
// of its own and, with tcp, on a loopback port.
func newEgressProxy(rules []string, tcp bool) (*egressProxy, error) {
	p := &egressProxy{resolver: net.DefaultResolver, dialer: net.Dialer{Timeout: egressTimeout}}
	for _, s := range rules {
		r, err := parseAllowRule(s)
		if err != nil {
			return nil, fmt.Errorf("toolexec.network-allow: %w", err)
		}
		p.rules = append(p.rules, r)
	}
	dir, err := os.MkdirTemp("", "sylk-egress-")
	if err != nil {
		return nil, err
	}
	p.dir, p.sock = dir, filepath.Join(dir, "proxy.sock")
	p.transport = &http.Transport{DialContext: p.dial, Proxy: nil, ForceAttemptHTTP2: false,
		MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	var lns []net.Listener
	ln, err := net.Listen("unix", p.sock)
	if err == nil {
		lns = append(lns, ln)
		if tcp {
			if ln, err = net.Listen("tcp", "127.0.0.1:0"); err == nil {
				lns = append(lns, ln)
				p.tcp = uint16(ln.Addr().(*net.TCPAddr).Port)
			}
		}
	}
	if err != nil {
		for _, l := range lns {
			_ = l.Close()
		}
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	for _, l := range lns {
		p.wg.Go(func() { _ = p.srv.Serve(l) })
	}
	return p, nil
}

// close stops the proxy and its connections.
func (p *egressProxy) close() {
	_ = p.srv.Close()
	p.transport.CloseIdleConnections()
	p.wg.Wait()
	_ = os.RemoveAll(p.dir)
}

// open is a descriptor (O_PATH) of the proxy's socket, for a namespace's
// init program to connect to.
func (p *egressProxy) open() (*os.File, error) {
	fd, err := unix.Open(p.sock, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	return os.NewFile(uintptr(fd), p.sock), nil
}

// errRefused is a destination the allow-list does not name.
var errRefused = errors.New("not on the network allow-list (-toolexec.network-allow)")

// dial connects to hostport when the allow-list names it: to the address
// listed, or to the first public address the name resolves to (which is
// the one dialled, so that a second lookup cannot answer otherwise).
func (p *egressProxy) dial(ctx context.Context, network, hostport string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	var rule *allowRule
	for i := range p.rules {
		if p.rules[i].match(host, port) {
			rule = &p.rules[i]
			break
		}
	}
	if rule == nil {
		p.refused.Add(1)
		return nil, fmt.Errorf("%s: %w", hostport, errRefused)
	}
	if rule.addr.IsValid() {
		p.allowed.Add(1)
		return p.dialer.DialContext(ctx, "tcp", net.JoinHostPort(rule.addr.String(), port))
	}
	if _, err := netip.ParseAddr(host); err == nil {
		// An address matched by a name's wildcard only.
		p.refused.Add(1)
		return nil, fmt.Errorf("%s: %w", hostport, errRefused)
	}
	addrs, err := p.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if publicAddr(a) {
			p.allowed.Add(1)
			return p.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), mustPort(port)).String())
		}
	}
	p.refused.Add(1)
	return nil, fmt.Errorf("%s resolves to no public address (only an address listed as such is reached): %w", host, errRefused)
}

func mustPort(s string) uint16 {
	n, _ := strconv.Atoi(s)
	return uint16(n)
}

// ServeHTTP handles CONNECT (a tunnel, for https) and plain requests with
// an absolute URL (http).
func (p *egressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "this proxy takes CONNECT and http:// requests", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	if out.URL.Port() == "" {
		out.URL.Host = net.JoinHostPort(out.URL.Hostname(), "80")
	}
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection"} {
		out.Header.Del(h)
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.refuse(w, err)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (p *egressProxy) refuse(w http.ResponseWriter, err error) {
	if errors.Is(err, errRefused) {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, err.Error(), http.StatusBadGateway)
}

func (p *egressProxy) connect(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), egressTimeout)
	up, err := p.dial(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		p.refuse(w, err)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no tunnel", http.StatusInternalServerError)
		return
	}
	c, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// What the client sent after its request, then the rest.
		_, _ = io.Copy(up, buf)
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(c, up)
		closeWrite(c)
		done <- struct{}{}
	}()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// proxyEnv are the variables that send a command's HTTP clients through the
// proxy at addr; local addresses are reached directly (a test's own server).
func proxyEnv(addr string) []string {
	url := "http://" + addr
	return []string{"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "ALL_PROXY=" + url,
		"http_proxy=" + url, "https_proxy=" + url, "all_proxy=" + url,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1"}
}

// Egress reports the egress proxy's decisions so far (zero without a
// proxy).
func (e *Executor) Egress() EgressStats {
	if e.egress == nil {
		return EgressStats{}
	}
	return EgressStats{Allowed: e.egress.allowed.Load(), Refused: e.egress.refused.Load()}
}

// proxyAddr is where commands reach the egress proxy.
func (e *Executor) proxyAddr() string {
	if e.ns != nil {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(nsProxyPort))
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(e.egress.tcp)))
}

// isolate settles who commands run as and what network they reach, or
// says why the executor may not run them: a service running as root (uid
// is then the task user's) without namespaces, unless
// Config.UnsafeRunTasksAsRoot; Config.Network "none" with neither
// namespaces nor Landlock's network rules.
func (e *Executor) isolate(uid, gid int) error {
	_, noNS := e.Namespaced()
	if uid != 0 {
		switch {
		case e.ns != nil:
			e.owners = &owners{uid: uid, gid: gid, held: map[string]int{}}
			for _, d := range slices.Concat(e.boundary.Roots(), e.cfg.ConfineWritable) {
				if err := checkSearchable(d, uid, gid); err != nil {
					return fmt.Errorf("toolexec: %w", err)
				}
			}
			for _, w := range e.cfg.ConfineWritable {
				if err := chownTree(w, uid, gid); err != nil {
					return fmt.Errorf("toolexec.confine-writable: hand %s to the task user: %w", w, err)
				}
			}
		case !e.cfg.UnsafeRunTasksAsRoot:
			return fmt.Errorf("toolexec: the worker runs as root and commands cannot run in namespaces of their own (%v), "+
				"so they would run as root: run the worker as another user, make namespaces available, or accept it with -toolexec.unsafe-run-tasks-as-root", noNS)
		}
	}
	if e.cfg.Network != NetworkNone {
		return nil
	}
	switch {
	case !taskinit.UnixSocketFilter():
		return fmt.Errorf("toolexec.network none: no unix socket filter on %s; accept the host's network with -toolexec.network host (unsafe)", runtime.GOARCH)
	case e.ns != nil:
	case e.Confined() && LandlockABI() >= 4:
		e.landlockNet = true
	default:
		return fmt.Errorf("toolexec.network none: commands would reach every port of the host: they run neither in namespaces of their own (%v) "+
			"nor under Landlock's network rules (kernel ABI %d, 4 needed; toolexec.confine %t); make either available, or accept it with -toolexec.network host (unsafe)",
			noNS, LandlockABI(), e.cfg.Confine)
	}
	if len(e.cfg.NetworkAllow) == 0 {
		return nil
	}
	var err error
	if e.egress, err = newEgressProxy(e.cfg.NetworkAllow, e.ns == nil); err != nil {
		return err
	}
	if e.ns != nil {
		e.ns.proxy, err = e.egress.open()
	}
	return err
}
