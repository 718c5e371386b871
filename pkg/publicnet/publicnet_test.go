package publicnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestAddr(t *testing.T) {
	for a, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "::ffff:1.1.1.1": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00::1": false, "100.64.0.1": false,
		"0.0.0.0": false, "::": false, "224.0.0.1": false, "::ffff:127.0.0.1": false,
	} {
		if got := Addr(netip.MustParseAddr(a)); got != want {
			t.Errorf("Addr(%s) = %v, want %v", a, got, want)
		}
	}
}

// A dialer with Control refuses the service's own addresses whatever name
// led there.
func TestControlRefusesDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := net.Dialer{Control: Control}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	for _, host := range []string{"127.0.0.1", "localhost"} {
		c, err := d.DialContext(context.Background(), "tcp", net.JoinHostPort(host, port))
		if err == nil {
			c.Close()
			t.Fatalf("%s: dialled", host)
		}
		if !errors.Is(err, ErrPrivate) {
			t.Fatalf("%s: %v", host, err)
		}
	}
}
