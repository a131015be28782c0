package pgtest

import (
	"math/rand/v2"
	"net"
	"os"
	oexec "os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
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

// TestFreePortWhileForking: a port FreePort hands out can be listened on at
// once while other goroutines of the process run commands (as a test
// starting PostgreSQL beside it does; CI failed
// TestFreePortIsOutsideTheEphemeralRange so, beside TestInstanceRestart): a
// child forked during FreePort's check held the checked port until its exec.
func TestFreePortWhileForking(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := oexec.Command("true").Run(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	taken := 0
	const n = 1000
	for range n {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			taken++
			continue
		}
		l.Close()
	}
	if taken > 0 {
		t.Fatalf("%d of %d ports FreePort handed out were in use at once", taken, n)
	}
}

// TestFreePortPassesOverAPortInUse: a port something listens on is not
// handed out.
func TestFreePortPassesOverAPortInUse(t *testing.T) {
	// Not parallel: it sets how FreePort draws its ports.
	below := ephemeralStart()
	var (
		l   net.Listener
		p   int
		err error
	)
	for { // a port in the range that this test listens on itself
		p = lowestPort + rand.IntN(below-lowestPort-1)
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			break
		}
	}
	defer l.Close()
	// The next draws: p (in use), then p again, then the port after it.
	drawPorts(t, p, p, p+1)
	q, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if q == p {
		t.Fatalf("FreePort handed out %d, which is in use", p)
	}
}

// TestFreePortReservedAcrossProcesses: a port another test process holds
// the lock file of is not handed out, even while nothing listens on it yet
// (that process is about to).
func TestFreePortReservedAcrossProcesses(t *testing.T) {
	// Not parallel: it sets how FreePort draws its ports.
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Another process: a lock this process's FreePort does not hold, on a
	// port nothing listens on.
	q := p + 1
	for ; ; q++ { // the first port after p no test process holds
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "prescient-test-ports", strconv.Itoa(q)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			defer f.Close()
			break
		}
		f.Close()
	}
	drawPorts(t, q, q+1)
	r, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if r == q {
		t.Fatalf("FreePort handed out %d, which another process reserved", q)
	}
}

// drawPorts makes FreePort draw ports, in turn, the last again and again,
// until the test ends.
func drawPorts(t *testing.T, ps ...int) {
	ports.Lock()
	ports.pick = func(n int) int {
		p := ps[0]
		if len(ps) > 1 {
			ps = ps[1:]
		}
		return (p - lowestPort) % n
	}
	ports.Unlock()
	t.Cleanup(func() {
		ports.Lock()
		ports.pick = nil
		ports.Unlock()
	})
}
