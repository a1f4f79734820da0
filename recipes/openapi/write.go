package openapi

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
)

// MarkerFile is the file WriteDir leaves in the folder it writes. Its
// name starts with "." so the gateway's endpoint loader skips it; a
// non-empty folder without it is never replaced.
const MarkerFile = ".import-openapi"

// WriteDir writes r's endpoint documents into dir, replacing the folder
// as a whole: the documents are written to a new folder next to dir,
// which is then renamed to dir, so an import that fails writes nothing
// and a re-import leaves no file of an operation that is gone. dir must
// not exist, be empty, or have been written by WriteDir (it holds
// MarkerFile); anything else is refused, so hand-written documents are
// never overwritten. The parent of dir must exist.
func WriteDir(dir string, r *Result) (err error) {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		return fmt.Errorf("output folder %s: its parent %s is not a folder", dir, parent)
	}
	exists := false
	switch fi, err := os.Stat(dir); {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("output folder %s is a file", dir)
	case err == nil:
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("output folder %s: %v", dir, unwrapPath(err))
		}
		if len(entries) > 0 {
			if _, err := os.Stat(filepath.Join(dir, MarkerFile)); err != nil {
				return fmt.Errorf("output folder %s is not empty and was not written by import-openapi (no %s in it); give a new or empty folder, so no hand-written document is replaced", dir, MarkerFile)
			}
		}
		exists = true
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("output folder %s: %v", dir, unwrapPath(err))
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".import-*")
	if err != nil {
		return fmt.Errorf("output folder %s: %v", dir, unwrapPath(err))
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("output folder %s: %v", dir, unwrapPath(err))
	}
	for _, e := range r.Endpoints {
		if err := writeFile(filepath.Join(tmp, e.File), e.Data); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(tmp, MarkerFile), r.marker()); err != nil {
		return err
	}
	if !exists {
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("output folder %s: %v", dir, unwrapPath(err))
		}
		return nil
	}
	old := tmp + ".old"
	if err := os.Rename(dir, old); err != nil {
		return fmt.Errorf("output folder %s: cannot move the previous import aside: %v", dir, unwrapPath(err))
	}
	if err := os.Rename(tmp, dir); err != nil {
		if back := os.Rename(old, dir); back != nil {
			return fmt.Errorf("output folder %s: %v; the previous import is in %s", dir, unwrapPath(err), old)
		}
		return fmt.Errorf("output folder %s: %v", dir, unwrapPath(err))
	}
	return os.RemoveAll(old)
}

func writeFile(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %v", filepath.Base(name), unwrapPath(err))
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %v", filepath.Base(name), unwrapPath(err))
	}
	return nil
}

// marker is the content of MarkerFile: what the folder was made from,
// without a time, so a re-import of the same document writes the same
// bytes.
func (r *Result) marker() []byte {
	var b strings.Builder
	b.WriteString("# Written by `caddy rcns import-openapi`: a re-import replaces this folder as a whole.\n")
	fmt.Fprintf(&b, "source: %s\nsha256: %s\nopenapi: %s\nendpoints: %d\nskipped: %d\n", r.Source, r.SHA256, r.Version, len(r.Endpoints), len(r.Skipped))
	return []byte(b.String())
}

// WriteTable writes the dry-run table: one row per selected operation
// (its upstream call, the AGTP endpoint it becomes and the file, or why
// it is skipped), then a summary: counts, the environment variables the
// headers read, and the document's servers.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tUPSTREAM CALL\tAGTP ENDPOINT\tFILE\tNOTES")
	for _, e := range r.Endpoints {
		agtp := e.Method + " " + e.Path
		switch {
		case e.Proposed && e.Accepted:
			agtp += " (renamed)"
		case e.Proposed:
			agtp += " (proposed rename, not accepted)"
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\t%d\n", orDefault(e.OperationID, "-"), e.HTTPMethod, e.HTTPPath, agtp, e.File, len(e.Notes))
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(tw, "%s\t%s %s\tskipped\t%s\t\n", orDefault(s.OperationID, "-"), s.HTTPMethod, s.HTTPPath, s.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s, %d skipped, %d not selected.\n", plural.Count(len(r.Endpoints), "endpoint", "endpoints"), len(r.Skipped), r.NotSelected)
	if len(r.Env) > 0 {
		fmt.Fprintf(w, "The endpoints' headers read these environment variables (set each where the gateway runs): %s\n", strings.Join(r.Env, ", "))
	}
	if len(r.Servers) > 0 {
		fmt.Fprintf(w, "The document's servers: %s (an upstream's base URL carries their path; endpoint paths are relative to it)\n", strings.Join(r.Servers, ", "))
	}
	return nil
}
