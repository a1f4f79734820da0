package openapi

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSecurity: the first security requirement a header can carry
// becomes headers that read environment variables; never a secret.
func TestSecurity(t *testing.T) {
	schemes := `  securitySchemes:
    queryKey: {type: apiKey, in: query, name: key}
    cookieKey: {type: apiKey, in: cookie, name: sid}
    headerKey: {type: apiKey, in: header, name: X-Key}
    bearer: {type: http, scheme: bearer}
    digest: {type: http, scheme: digest}
    oidc: {type: openIdConnect, openIdConnectUrl: https://id.example.test/.well-known/openid-configuration}
    mtls: {type: mutualTLS}`
	op := func(security string) []byte {
		return doc31(`  /things:
    get:
      operationId: listThings
      security: `+security+`
      responses: {"200": {description: ok}}
`, schemes)
	}
	tests := []struct {
		name     string
		security string
		headers  map[string]string
		note     string
	}{
		{"API key in a header", "[{headerKey: []}]", map[string]string{"X-Key": "${SVC_HEADER_KEY}"}, ""},
		{"API key in a cookie", "[{cookieKey: []}]", map[string]string{"Cookie": "sid=${SVC_COOKIE_KEY}"}, ""},
		{"bearer token", "[{bearer: []}]", map[string]string{"Authorization": "Bearer ${SVC_BEARER}"}, ""},
		{"OpenID Connect token", "[{oidc: []}]", map[string]string{"Authorization": "Bearer ${SVC_OIDC}"}, "it runs no OAuth flow"},
		{"query key skipped for the next alternative", "[{queryKey: []}, {headerKey: []}]", map[string]string{"X-Key": "${SVC_HEADER_KEY}"}, ""},
		{"both schemes of one requirement", "[{headerKey: [], cookieKey: []}]", map[string]string{"X-Key": "${SVC_HEADER_KEY}", "Cookie": "sid=${SVC_COOKIE_KEY}"}, ""},
		{"anonymous allowed first", "[{}, {bearer: []}]", map[string]string{}, ""},
		{"none can be carried", "[{queryKey: []}, {digest: []}, {mtls: []}]", map[string]string{},
			"no security requirement can be met by configured headers (scheme queryKey: an API key in the query cannot be configured (only headers can); scheme digest: HTTP digest authentication cannot be configured; scheme mtls (mutualTLS) cannot be carried by a header)"},
		{"two schemes on Authorization", "[{bearer: [], oidc: []}]", map[string]string{}, "schemes of one requirement both need the header Authorization"},
		{"no requirement", "[]", map[string]string{}, ""},
	}
	secret := regexp.MustCompile(`^(Bearer |Basic |sid=)?\$\{[A-Z0-9_]+\}$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Import(op(tt.security), Options{Upstream: "svc"})
			if err != nil {
				t.Fatal(err)
			}
			_, v := endpoint(t, r, "listThings.yaml")
			got, _ := at(v, "external_service/headers").(map[string]any)
			if len(got) != len(tt.headers) {
				t.Fatalf("headers %v, want %v", got, tt.headers)
			}
			for k, want := range tt.headers {
				if got[k] != want {
					t.Errorf("header %s = %v, want %s", k, got[k], want)
				}
				if !secret.MatchString(want) {
					t.Errorf("header %s carries %q, not a placeholder", k, want)
				}
			}
			notes := r.Endpoints[0].Notes
			if tt.note != "" && !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, tt.note) }) {
				t.Errorf("no note %q in %q", tt.note, notes)
			}
		})
	}
}

// doc31 is doc as OpenAPI 3.1.
func doc31(paths, components string) []byte {
	return []byte(strings.Replace(string(doc(paths, components)), "openapi: 3.0.3", "openapi: 3.1.0", 1))
}

// TestScopesExtension: the operation's extension, else the document's;
// an invalid scope token is refused with its pointer.
func TestScopesExtension(t *testing.T) {
	spec := []byte(`openapi: 3.1.0
info: {title: t, version: "1"}
x-scopes: [svc:read]
paths:
  /a:
    get:
      operationId: a
      responses: {"200": {description: ok}}
  /b:
    get:
      operationId: b
      x-scopes: [svc:admin, svc:read]
      responses: {"200": {description: ok}}
`)
	r, err := Import(spec, Options{Upstream: "svc", ScopesExtension: "x-scopes", Scopes: []string{"svc:all"}})
	if err != nil {
		t.Fatal(err)
	}
	_, a := endpoint(t, r, "a.yaml")
	_, b := endpoint(t, r, "b.yaml")
	if jsonOf(at(a, "required_scopes")) != `["svc:all","svc:read"]` || jsonOf(at(b, "required_scopes")) != `["svc:admin","svc:all","svc:read"]` {
		t.Errorf("scopes a %v b %v", at(a, "required_scopes"), at(b, "required_scopes"))
	}
	bad := []byte(strings.Replace(string(spec), "[svc:admin, svc:read]", "[svc:admin, Read]", 1))
	_, err = Import(bad, Options{Upstream: "svc", ScopesExtension: "x-scopes"})
	if err == nil || !strings.Contains(err.Error(), `operation b (GET /b): at /paths/~1b/get/x-scopes/1: scope "Read"`) {
		t.Errorf("bad scope: %v", err)
	}
}

// TestIDReferences: OpenAPI 3.1 schemas referenced by $id and $anchor
// (the Swagger Petstore 3.1 does both) resolve inside the document.
func TestIDReferences(t *testing.T) {
	r := importCorpus(t, corpora(t)[1])
	_, v := endpoint(t, r, "getPetById.yaml")
	details := at(v, "output_schema/properties/petDetails/properties/id")
	anchored := at(v, "output_schema/properties/petDetailsId/allOf/0")
	if jsonOf(details) != `{"examples":["10"],"format":"int64","type":"integer"}` || jsonOf(anchored) != jsonOf(details) {
		t.Errorf("petDetails.id %s, petDetailsId %s", jsonOf(details), jsonOf(anchored))
	}
}

// FuzzImport: no document panics the import or makes it write a
// document the endpoint loader refuses.
func FuzzImport(f *testing.F) {
	for _, name := range []string{"petstore-3.1.yaml", "hotel-3.0.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(doc(listPets, `  schemas:
    Pets: {$ref: '#/components/schemas/Pets'}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		r, err := Import(data, Options{Upstream: "up", AcceptRenames: true, QueryForSearch: true})
		if err != nil {
			return
		}
		for _, e := range r.Endpoints {
			if len(e.Data) == 0 || e.File == "" {
				t.Fatalf("empty endpoint %+v", e)
			}
		}
	})
}

// TestCookieParameter: a required cookie parameter skips the operation
// unless --header sets that cookie.
func TestCookieParameter(t *testing.T) {
	spec := doc(`  /cart:
    get:
      operationId: getCart
      parameters: [{name: sid, in: cookie, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
`, "")
	r, err := Import(spec, Options{Upstream: "shop"})
	if err != nil || len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0].Reason, `required cookie parameter "sid"`) {
		t.Fatalf("without the cookie: %v %+v", err, r)
	}
	r, err = Import(spec, Options{Upstream: "shop", Headers: map[string]string{"Cookie": "lang=en; sid=${SHOP_SID}"}})
	if err != nil || len(r.Endpoints) != 1 {
		t.Fatalf("with the cookie: %v %+v", err, r)
	}
	_, v := endpoint(t, r, "getCart.yaml")
	if at(v, "external_service/headers/Cookie") != "lang=en; sid=${SHOP_SID}" {
		t.Errorf("headers %v", at(v, "external_service/headers"))
	}
}
