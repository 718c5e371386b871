// Package publicnet tells the addresses of the public internet from those of
// the service's own networks, for connections a tenant chooses the end of
// (a repository's remote, a model provider's base URL): a tenant could
// otherwise have a service reach the services and stores beside it, or a
// cloud's metadata address.
package publicnet

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// ErrPrivate is the refusal of a connection to an address of the service's
// own networks.
var ErrPrivate = errors.New("an address of the service's own networks")

// sharedAddrSpace is 100.64.0.0/10, the carrier-grade NAT range.
var sharedAddrSpace = netip.MustParsePrefix("100.64.0.0/10")

// Addr reports whether a is public: a global unicast address that is not
// private nor shared (so not loopback, link-local, unspecified or
// multicast either).
func Addr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsGlobalUnicast() && !a.IsPrivate() && !sharedAddrSpace.Contains(a)
}

// Control is a net.Dialer's Control that refuses a connection to an
// address that is not public. It sees the address dialled, after the name
// was looked up, so a name that answers differently the second time cannot
// lead in either.
func Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrPrivate, address)
	}
	if !Addr(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrPrivate, ap.Addr().Unmap())
	}
	return nil
}
