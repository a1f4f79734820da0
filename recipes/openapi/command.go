package openapi

import (
	"fmt"
	"io"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
)

// ParseMethodMap parses --method-map entries "HTTP=AGTP" ("POST=SUBMIT",
// upper-cased) into Options.MethodMap. A malformed or repeated entry is
// an error.
func ParseMethodMap(entries []string) (map[string]string, error) {
	m := map[string]string{}
	for _, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		k, v = strings.ToUpper(strings.TrimSpace(k)), strings.ToUpper(strings.TrimSpace(v))
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("--method-map %q: want HTTP=AGTP, like POST=SUBMIT", e)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("--method-map: %s is mapped twice", k)
		}
		m[k] = v
	}
	return m, nil
}

// ParseHeaders parses --header entries "Name: value" into
// Options.Headers. A malformed or repeated name is an error.
func ParseHeaders(entries []string) (map[string]string, error) {
	m := map[string]string{}
	for _, e := range entries {
		k, v, ok := strings.Cut(e, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("--header %q: want 'Name: value'", e)
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("--header %q: the name is not a header name (a token: letters, digits and !#$%%&'*+-.^_`|~)", textcut.Clip(k))
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("--header %s: the value carries a control character (CR, LF, NUL, DEL or another below 0x20 but tab)", k)
		}
		if hasHeader(m, k) {
			return nil, fmt.Errorf("--header: %s is given twice", k)
		}
		m[k] = v
	}
	return m, nil
}

// Run is `caddy rcns import-openapi`: it reads the document at spec,
// imports it with opts (Source defaults to spec), writes the table of
// what it imports to w and, unless dryRun, writes the documents into
// the folder out with WriteDir. Nothing is written when the import
// fails; a dry run returns the error the import would fail with, after
// the table.
func Run(w io.Writer, spec, out string, dryRun bool, opts Options) error {
	if opts.Source == "" {
		opts.Source = spec
	}
	if !dryRun && out == "" {
		return fmt.Errorf("no output folder: give --out DIR, or --dry-run to only see what would be imported")
	}
	data, err := ReadSpec(spec)
	if err != nil {
		return err
	}
	res, err := Import(data, opts)
	if res != nil {
		if terr := res.WriteTable(w); terr != nil {
			return terr
		}
	}
	if err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintln(w, "Dry run: nothing written.")
		return nil
	}
	if err := WriteDir(out, res); err != nil {
		return err
	}
	fmt.Fprintf(w, "Wrote %s to %s. Review each, then load the folder with `endpoints %s` in the rcns block.\n", plural.Count(len(res.Endpoints), "endpoint document", "endpoint documents"), out, out)
	return nil
}
