package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a Redis server that can
// hold the bytes going either way: it keeps reading them (the sender's
// writes succeed, as on a network path that holds bytes) and delivers
// them only when released. It is stopped by t.Cleanup.
type Proxy struct {
	l      net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	toRedis bool // hold client → Redis
	toCli   bool // hold Redis → client
	conns   []net.Conn
	closed  bool
	// accepted counts the connections accepted; those numbered below
	// frozen hold their bytes both ways for good (Freeze).
	accepted, frozen int
}

// StartProxy starts a proxy to target (host:port).
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{l: l, target: target}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Hold holds the bytes going to Redis (toRedis) and coming back from it
// (toClient) until Release.
func (p *Proxy) Hold(toRedis, toClient bool) {
	p.mu.Lock()
	p.toRedis, p.toCli = toRedis, toClient
	p.mu.Unlock()
}

// Release delivers what was held and forwards freely again.
func (p *Proxy) Release() {
	p.mu.Lock()
	p.toRedis, p.toCli = false, false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Freeze holds, for good, the bytes of every connection open now, both
// ways, and leaves them open: a half-open connection, or a network path
// that stopped carrying it. Connections made after it forward freely.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = p.accepted
	p.mu.Unlock()
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.l.Close()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		r, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = r.Close()
			return
		}
		p.conns = append(p.conns, c, r)
		p.accepted++
		n := p.accepted
		p.mu.Unlock()
		go p.pump(r, c, func() bool { return n <= p.frozen || p.toRedis })
		go p.pump(c, r, func() bool { return n <= p.frozen || p.toCli })
	}
}

// pump copies src to dst, waiting while held() before each write.
func (p *Proxy) pump(dst io.WriteCloser, src io.ReadCloser, held func() bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for held() && !p.closed {
				p.cond.Wait()
			}
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
