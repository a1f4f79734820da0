package wire

import (
	"bufio"
	"net"
)

// DefaultMaxResponseBody is ClientConn's response body limit when
// MaxBodyBytes is 0: 16 MiB.
const DefaultMaxResponseBody = 16 << 20

// ClientConn is the client end of one AGTP connection: requests are
// sent one after another and each answer is read in order (agtp-09
// §6.4; the bindings draft's TCP/TLS section). It is not safe for
// concurrent use. Pipelining is writing several requests with
// Request.Write on Conn and reading the answers with ReadResponse on
// Reader, in order.
type ClientConn struct {
	// Conn is the connection (net.Conn or *tls.Conn); deadlines are set
	// on it by the caller.
	Conn net.Conn
	// Reader reads Conn; responses are read from it only.
	Reader *bufio.Reader
	// Limits bound each response head; zero means the defaults.
	Limits Limits
	// MaxBodyBytes bounds each response body; 0 means
	// DefaultMaxResponseBody.
	MaxBodyBytes int64
}

// NewClientConn wraps c.
func NewClientConn(c net.Conn) *ClientConn {
	return &ClientConn{Conn: c, Reader: bufio.NewReader(c)}
}

// Do sends req and reads its answer. After an error the connection is
// in an unknown state: close it.
func (c *ClientConn) Do(req *Request) (*Response, error) {
	if err := req.Write(c.Conn); err != nil {
		return nil, err
	}
	return c.Read()
}

// Read reads the next answer (ReadResponse under the connection's
// limits).
func (c *ClientConn) Read() (*Response, error) {
	max := c.MaxBodyBytes
	if max <= 0 {
		max = DefaultMaxResponseBody
	}
	return ReadResponse(c.Reader, c.Limits, max)
}

// Close closes the connection.
func (c *ClientConn) Close() error { return c.Conn.Close() }
