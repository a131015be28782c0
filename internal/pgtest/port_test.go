package pgtest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortIsOutsideTheEphemeralRange: the ports FreePort hands out are
// distinct, free, and below the range the kernel takes ports from for
// outgoing connections and for listens on port 0, so none of those can take
// one before the test's server listens on it.
func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	t.Parallel()
	below := ephemeralStart()
	seen := map[int]bool{}
	for range 50 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < lowestPort || p >= below {
			t.Fatalf("FreePort: %d, not in [%d, %d)", p, lowestPort, below)
		}
		if seen[p] {
			t.Fatalf("FreePort handed out %d twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listen on the port FreePort returned: %v", err)
		}
		l.Close()
	}
}

// TestFreePortPassesOverAPortInUse: a port something listens on is not
// handed out.
func TestFreePortPassesOverAPortInUse(t *testing.T) {
	// Not parallel: it sets where FreePort takes its next port from.
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ports.Lock()
	ports.next = p
	ports.Unlock()
	q, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if q == p {
		t.Fatalf("FreePort handed out %d, which is in use", p)
	}
}
