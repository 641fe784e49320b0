package chaos

import (
	"net"
	"sync"
	"testing"
)

// partitionProxy forwards TCP connections to one upstream address until it is told to
// blackhole them: from then on no byte goes either way, on the connections open and on new
// ones (which it still accepts, as a network that drops packets lets a connect hang rather than
// fail), until it heals, when what was held back flows again, as it does once a network
// partition ends and TCP retransmits.
type partitionProxy struct {
	lis      net.Listener
	upstream string

	mu    sync.Mutex
	cut   bool
	heal  chan struct{} // closed when a cut heals
	conns []net.Conn
}

// newPartitionProxy listens on a loopback port for connections to upstream, and stops at cleanup.
func newPartitionProxy(t *testing.T, upstream string) *partitionProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{lis: lis, upstream: upstream, heal: make(chan struct{})}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is where the proxy listens.
func (p *partitionProxy) Addr() string { return p.lis.Addr().String() }

// Blackhole stops every byte until Heal.
func (p *partitionProxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut, p.heal = true, make(chan struct{})
	}
}

// Heal lets the bytes flow again.
func (p *partitionProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.heal)
	}
}

// gate waits while the proxy is cut.
func (p *partitionProxy) gate() {
	p.mu.Lock()
	cut, heal := p.cut, p.heal
	p.mu.Unlock()
	if cut {
		<-heal
	}
}

func (p *partitionProxy) serve() {
	for {
		down, err := p.lis.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		go p.pipe(up, down)
		go p.pipe(down, up)
	}
}

// pipe copies from src to dst, holding each chunk back while the proxy is cut.
func (p *partitionProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *partitionProxy) close() {
	_ = p.lis.Close()
	p.Heal()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
