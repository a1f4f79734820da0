// Package httpbody reads HTTP message bodies with a bound: the request
// bodies of every door and the upstream answers of recipes.
package httpbody

import "io"

// ExactReadMax is the largest announced body length (bytes) Read
// reads into a buffer allocated up front: 64 KiB. Longer bodies grow
// their buffer as bytes arrive, so a large Content-Length costs no
// memory before its bytes come.
const ExactReadMax = 64 << 10

// Read reads an HTTP message body of which contentLength bytes were
// announced (-1: unknown), returning at most limit+1 bytes so a caller
// can tell a body longer than limit (bytes). An announced length of at
// most min(limit, ExactReadMax) is read in one pass into a buffer of
// exactly that size: net/http ends such a body at Content-Length and
// reports io.EOF with its last bytes, which releases the connection
// without a second Read. A body shorter than announced returns the
// bytes read and io.ErrUnexpectedEOF (or io.EOF when none came); any
// other read error is returned as is, with the bytes read before it.
func Read(r io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength > 0 && contentLength <= limit && contentLength <= ExactReadMax {
		buf := make([]byte, contentLength)
		n, err := io.ReadFull(r, buf)
		return buf[:n], err
	}
	return io.ReadAll(io.LimitReader(r, limit+1))
}
