package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// stdin is what verify-record reads for the record "-" (a variable so
// that tests can feed it).
var stdin io.Reader = os.Stdin

// maxVerifyInput bounds what verify-record reads from a key file or
// standard input: a manifest or a call's printed answer, not a stream.
const maxVerifyInput = 16 << 20

// verifyRecord is `rcns-agent verify-record -keys FILE RECORD`: it
// checks the Ed25519 signature of one Attribution-Record (or lifecycle
// event) against a gateway's published record keys and prints what the
// record says. FILE is a JWK set ({"keys": […]}) or a gateway manifest
// (the DISCOVER / body), whose server.record_keys is that set. RECORD is
// the JWS compact form itself (not a file name), or "-" to read
// standard input: the record alone
// or the output of `rcns-agent call` (or `curl -i`), whose
// Attribution-Record line is taken. An unsigned (alg none) record, a kid the set does not hold or a
// signature that does not verify is an error.
func verifyRecord(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify-record", stderr)
	keysFile := fs.String("keys", "", "JWK set or gateway manifest (DISCOVER / body) holding server.record_keys")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *keysFile == "" || fs.NArg() != 1 {
		return usageErr("verify-record needs -keys FILE and one RECORD (or - for standard input)")
	}
	jwks, err := readRecordKeys(*keysFile)
	if err != nil {
		return err
	}
	compact := fs.Arg(0)
	if compact == "-" {
		if compact, err = readRecordInput(stdin); err != nil {
			return err
		}
	}
	if strings.Count(compact, ".") != 2 {
		return fmt.Errorf("verify-record: %q is not a record (a JWS compact form: three base64url parts joined by dots); give the record itself, or - to read it, or an answer carrying an Attribution-Record line, from standard input", clip(compact))
	}
	payload, err := records.Verify(compact, jwks)
	switch {
	case errors.Is(err, records.ErrUnsigned):
		return errors.New("verify-record: the record is unsigned (alg none): nothing proves who wrote it (a gateway without record_keys writes such records; a signed record whose signature was stripped looks the same)")
	case err != nil && strings.Contains(err.Error(), "cryptographic primitive"):
		return errors.New("verify-record: the signature does not match: the record was changed after it was signed, or another key signed it")
	case err != nil:
		return fmt.Errorf("verify-record: the record does not verify: %w", err)
	}
	sum := sha256.Sum256([]byte(compact))
	body, err := json.MarshalIndent(payload, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "verified: EdDSA signature by kid %s\nAudit-ID: %s\n%s\n", recordKid(compact), hex.EncodeToString(sum[:]), body)
	return err
}

// clip is s cut to 60 bytes for a message.
func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// readRecordKeys reads path, a JWK set or a manifest, and returns the
// JWK set.
func readRecordKeys(path string) (map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("verify-record: %w", err)
	}
	defer f.Close()
	var doc map[string]any
	if err := json.NewDecoder(io.LimitReader(f, maxVerifyInput)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("verify-record: %s: not a JSON object: %v", path, err)
	}
	if _, ok := doc["keys"]; ok {
		return doc, nil
	}
	if server, ok := doc["server"].(map[string]any); ok {
		if set, ok := server["record_keys"].(map[string]any); ok {
			return set, nil
		}
	}
	return nil, fmt.Errorf("verify-record: %s holds neither a JWK set (keys) nor a manifest's server.record_keys", path)
}

// readRecordInput returns the record in r: the value of an
// "Attribution-Record:" line when there is one (the output of
// rcns-agent call or curl -i), else the whole input, trimmed.
func readRecordInput(r io.Reader) (string, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxVerifyInput))
	if err != nil {
		return "", fmt.Errorf("verify-record: read standard input: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxVerifyInput)
	for sc.Scan() {
		// Any spelling: curl -i prints HTTP/2 header names in lower case.
		name, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.EqualFold(name, "Attribution-Record") {
			return strings.TrimSpace(v), nil
		}
	}
	rec := strings.TrimSpace(string(data))
	if rec == "" {
		return "", errors.New("verify-record: standard input is empty")
	}
	if strings.HasPrefix(rec, "HTTP/") || strings.HasPrefix(rec, "AGTP/") {
		return "", errors.New("verify-record: the answer on standard input has no Attribution-Record header")
	}
	return rec, nil
}

// recordKid is the kid of the protected header of a record that
// records.Verify accepted.
func recordKid(compact string) string {
	head, _, _ := strings.Cut(compact, ".")
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(raw, &h)
	return h.Kid
}
