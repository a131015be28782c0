package prescient_test

import (
	"context"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// freezeProxy is a TCP proxy of the test's own in front of the test
// PostgreSQL. Frozen, it behaves as a primary that hangs (a stuck disk, a
// paused VM, a host partitioned away without a reset): its TCP connections
// stay open, new ones are accepted, and nothing is ever answered.
type freezeProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	frozen   bool
	thaw     chan struct{}
	conns    []net.Conn
}

func startFreezeProxy(t *testing.T, upstream string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, upstream: upstream, thaw: make(chan struct{})}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *freezeProxy) port() string {
	_, port, _ := net.SplitHostPort(p.ln.Addr().String())
	return port
}

func (p *freezeProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *freezeProxy) hold() {
	p.mu.Lock()
	frozen, thaw := p.frozen, p.thaw
	p.mu.Unlock()
	if frozen {
		<-thaw // hung: the bytes read are never passed on
	}
}

func (p *freezeProxy) serve(c net.Conn) {
	p.track(c)
	p.hold() // a hung host accepts (the kernel does) and never answers
	u, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	p.track(u)
	pump := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.hold()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pump(u, c)
	pump(c, u)
}

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *freezeProxy) close() {
	p.mu.Lock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
	conns := p.conns
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

// openHungStore opens a store whose multi-host URL names a freezeProxy first
// (the primary that will hang) and the test database directly second,
// and a harness whose queries go to the database
// directly. The proxy is closed before the store, so that a call still stuck
// on it cannot hold the store's Close (and the test) forever.
func openHungStore(t *testing.T, maxConns int32) (*harness, *postgres.Store, *freezeProxy, string) {
	t.Helper()
	ctx := context.Background()
	base, schema := pgtest.Schema(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startFreezeProxy(t, u.Host)
	multi := *u
	multi.Host = "127.0.0.1:" + proxy.port() + "," + u.Host
	q := multi.Query()
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "2")
	multi.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, multi.String(), &postgres.Opts{Schema: schema, MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	t.Cleanup(proxy.close) // runs before s.Close
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	direct, err := postgres.Open(ctx, base, &postgres.Opts{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	h := newHarness(t, s,
		func(sql string, args ...any) (n int, err error) {
			return n, direct.Pool().QueryRow(ctx, sql, args...).Scan(&n)
		},
		func(sql string, args ...any) error {
			_, err := direct.Pool().Exec(ctx, sql, args...)
			return err
		})
	return h, s, proxy, schema
}

// README, High availability: "During a failover each server reports not
// ready (/readyz 503), keeps running, retries at every heartbeat and tick,
// and is back on the new primary as soon as it accepts writes". docs/ha.md
// adds that on a real network "a crashed host does not refuse connections,
// it stops answering".
//
// Here the primary (the first host of a multi-host URL with
// target_session_attrs=read-write and connect_timeout=2) hangs: its
// connections stay open and nothing answers. The second host is writable
// at once (it is the same database, reached directly). The server's
// heartbeat ran with no deadline on a pool connection to the hung host, so
// it never returned: the server neither reported itself not ready nor
// moved to the writable host (found by a review; in production the wait
// ended only when TCP gave up on the connection, from about 15 minutes to
// never). A heartbeat now gives up after half of ServerTimeout: the server
// reports not ready within a few heartbeats.
func TestHungPrimaryMakesTheServerNotReady(t *testing.T) {
	ctx := context.Background()
	h, s, proxy, schema := openHungStore(t, 8) // the hung primary first, then the new one
	clk := newClock("2026-03-10T10:00:00Z")
	reg := register(t, "unshipped", alertOnce(&calls{}), nil)
	const beat = 100 * time.Millisecond
	c := h.client(clk, reg, func(cfg *prescient.Config) {
		cfg.AutoOwnership = true
		cfg.Heartbeat, cfg.ServerTimeout = beat, time.Second
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.close() // unblock the hung calls so that Stop returns
		_ = c.Stop(ctx)
	})
	if err := c.Ready(); err != nil {
		t.Fatalf("not ready after Start: %v", err)
	}

	// A server that has been running has its pool warm: connections to the
	// primary, idle between uses.
	var held []*pgxpool.Conn
	for range 8 {
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	for _, conn := range held {
		conn.Release()
	}
	for end := time.Now().Add(10 * time.Second); s.Pool().Stat().AcquiredConns() > 0; {
		if time.Now().After(end) {
			t.Fatal("the start-up tick or a heartbeat still holds a connection after 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling: the start-up tick and a heartbeat in flight end
	}
	st := s.Pool().Stat()
	t.Logf("before freeze: total %d idle %d acquired %d", st.TotalConns(), st.IdleConns(), st.AcquiredConns())
	proxy.freeze()
	clk.Set("2026-03-10T10:00:30Z") // a heartbeat written from now on says 10:00:30
	deadline := time.Now().Add(100 * beat)
	for time.Now().Before(deadline) {
		if err := c.Ready(); err != nil {
			t.Logf("reported not ready: %v", err)
			return
		}
		if n := h.count(`SELECT 1 FROM `+schema+`.prescient_servers WHERE name = 's1' AND heartbeat_at = $1`, clk.Now()); n == 1 {
			t.Logf("heartbeat reached the writable host")
			return
		}
		time.Sleep(beat) // polling for a report that must come within a few heartbeats
	}
	buf := make([]byte, 1<<20)
	stuck := strings.Contains(string(buf[:runtime.Stack(buf, true)]), "prescient.(*Client).Heartbeat")
	n := h.count(`SELECT 1 FROM ` + schema + `.prescient_servers WHERE name = 's1' AND heartbeat_at < '2026-03-10T10:00:30Z'`)
	t.Fatalf("primary hung for %v (%d heartbeats): Ready() = %v (still ready), and the server's heartbeat never reached the writable second host (stale row: %d): "+
		"the heartbeat is stuck on a connection to the hung host, with no deadline (a goroutine in Client.Heartbeat: %v)", 100*beat, 100, c.Ready(), n, stuck)
}
