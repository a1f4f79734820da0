package httpsig_test

import (
	"testing"

	"github.com/caddy-rcns/caddy-rcns/policy/httpsig"
)

// FuzzVerify feeds arbitrary Signature-Input, Signature and
// Content-Digest values to Verify: it must never panic, and must either
// succeed or return an *httpsig.Error.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f, httpsig.AlgEd25519)
	seed := newRequest(f)
	if err := fx.signer.Sign(seed, signOpts()); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Header.Get("Signature-Input"), seed.Header.Get("Signature"), seed.Header.Get("Content-Digest"))
	f.Add(`sig1=("@method" "@path");created=1;expires=2;keyid="k"`, `sig1=:AAAA:`, `sha-256=:AAAA:`)
	f.Add(`sig1=("@query-param";name="x" "date";sf "@status");created=-1;expires=999999999999999`, `sig1=?1`, `sha-256=1`)
	f.Add(`sig1=("\\" "@signature-params" "Agent-ID" "");alg=1;keyid=2`, `sig1=(:AA==:)`, ``)
	f.Add(`sig1`, `sig1`, `,`)
	f.Fuzz(func(t *testing.T, input, sig, digest string) {
		req := newRequest(t)
		req.Header["Signature-Input"] = []string{input}
		req.Header["Signature"] = []string{sig}
		req.Header["Content-Digest"] = []string{digest}
		res, err := httpsig.Verify(req, fx.keys, httpsig.VerifyOptions{Now: now, Body: []byte(body)})
		if err != nil {
			if _, ok := err.(*httpsig.Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if res == nil || len(res.Signature) != 64 || res.Expires.Before(now) {
			t.Fatalf("accepted: %+v", res)
		}
	})
}
