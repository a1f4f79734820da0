package caddymodule

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/caddy-rcns/caddy-rcns/internal/plural"
	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/caddy-rcns/caddy-rcns/recipes/openapi"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "rcns",
		Usage: "verify-log <dir>... | import-openapi [flags] <spec>",
		Short: "Tools for the rcns gateway (verify-log checks negotiation record chains; import-openapi writes endpoints from OpenAPI)",
		Long: `Tools for the rcns gateway.

verify-log <dir>... checks every hash chain in each negotiation record
directory (one gateway node's records_dir, or its negotiations folder),
prints how many chains and records it checked and the node (node_id)
whose records they are, and exits non-zero naming the first broken record
(file, line, agent), or when a dir holds no negotiation log. Each node of
a cluster writes its own records_dir, with one chain per agent there
(docs/cluster.md): give one directory per node; each is verified on its
own.

import-openapi [flags] <spec> turns an OpenAPI 3.0 or 3.1 document into
Tier B endpoint documents, one per operation (docs/recipes.md, "Starting
from OpenAPI"); see caddy rcns import-openapi --help.`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.AddCommand(&cobra.Command{
				Use:   "verify-log <dir>...",
				Short: "Verify the hash chains of negotiation record directories (one per gateway node)",
				Args:  cobra.MinimumNArgs(1),
				RunE: func(_ *cobra.Command, args []string) error {
					return verifyLog(os.Stdout, args...)
				},
			})
			cmd.AddCommand(importOpenAPICommand())
		},
	})
}

// importOpenAPICommand is `caddy rcns import-openapi`: flag parsing
// only; package recipes/openapi does the work.
func importOpenAPICommand() *cobra.Command {
	var (
		o                  openapi.Options
		out, mapFile       string
		dryRun             bool
		methodMap, headers []string
	)
	c := &cobra.Command{
		Use:   "import-openapi [flags] <spec>",
		Short: "Write Tier B endpoint documents from an OpenAPI 3.0 or 3.1 document",
		Long: `Reads an OpenAPI 3.0 or 3.1 document (YAML or JSON, at most 50 MiB, every
$ref inside it) and writes one endpoint document per selected operation
into the --out folder, replacing the folder as a whole (a folder it did not
write is never replaced). The same document and flags always give the same
files. Each file marks its guessed fields "review:" and lists, at the top,
what could not be carried over faithfully. The table printed shows every
operation's upstream call, the AGTP endpoint it becomes and its file, or why
it is skipped. Nothing is written when any operation is refused: a
duplicate operationId, an invalid, external or cyclic $ref, a mapping that
breaks the method catalog, or a path segment equal to a method name whose
proposed rename is not accepted (--accept-renames, or --map).

Method mapping: GET→FETCH, POST→CREATE, PUT→REPLACE, PATCH→MODIFY,
DELETE→REMOVE, changed with --method-map, --query-for-search or --map.
Secrets: security schemes become headers reading ${UPSTREAM_SCHEME}
environment variables (listed after the table), never literal values.
docs/recipes.md "Starting from OpenAPI" has the rules.`,
		Example: `  caddy rcns import-openapi --upstream petstore --dry-run petstore.yaml
  caddy rcns import-openapi --upstream petstore --out endpoints/petstore \
      --tag pet --query-for-search --accept-renames --scope petstore:read petstore.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			var err error
			if o.MethodMap, err = openapi.ParseMethodMap(methodMap); err != nil {
				return err
			}
			if o.Headers, err = openapi.ParseHeaders(headers); err != nil {
				return err
			}
			if mapFile != "" {
				if o.Overrides, err = openapi.LoadOverrides(mapFile); err != nil {
					return err
				}
			}
			return openapi.Run(os.Stdout, args[0], out, dryRun, o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Upstream, "upstream", "", "name of the Caddyfile upstream the endpoints call (required)")
	f.StringVar(&out, "out", "", "folder to write the endpoint documents into, replaced as a whole (required unless --dry-run)")
	f.BoolVar(&dryRun, "dry-run", false, "print the table of what would be imported and write nothing")
	f.StringSliceVar(&o.Tags, "tag", nil, "import only operations with one of these tags (repeatable, comma-separated)")
	f.StringSliceVar(&o.OperationIDs, "operation-id", nil, "import only these operationIds (repeatable, comma-separated)")
	f.StringSliceVar(&o.Paths, "path", nil, "import only operations whose path matches one of these globs; * stays within a segment (repeatable)")
	f.StringSliceVar(&methodMap, "method-map", nil, "HTTP=AGTP method mapping replacing a default, e.g. POST=SUBMIT; HEAD and OPTIONS are imported only when mapped (repeatable)")
	f.BoolVar(&o.QueryForSearch, "query-for-search", false, "map a GET that declares query parameters (a search) to QUERY instead of FETCH")
	f.BoolVar(&o.AcceptRenames, "accept-renames", false, "accept every proposed AGTP path for a path segment equal to a method name (/store/order → /store/orders)")
	f.StringVar(&mapFile, "map", "", "YAML map file setting the AGTP method, path or scopes of single operations (operations: {opId: {method, path, scopes}})")
	f.StringSliceVar(&o.Scopes, "scope", nil, "scope every endpoint requires (required_scopes; repeatable, comma-separated)")
	f.StringVar(&o.ScopesExtension, "scopes-extension", openapi.DefaultScopesExtension, "operation extension listing the operation's required scopes")
	f.BoolVar(&o.ScopesFromSecurity, "scopes-from-security", false, "also require the OAuth2/OpenID Connect scopes of the operation's security requirement (when they are a:b tokens)")
	f.StringArrayVar(&headers, "header", nil, "header every endpoint sends upstream, 'Name: value'; ${NAME} reads an environment variable when the config loads (repeatable)")
	f.Float64Var(&o.TimeoutSeconds, "timeout", 0, "external_service.timeout_seconds of every endpoint, 0.001 to 3600; 0 leaves the upstream's timeout")
	return c
}

// verifyLog is `caddy rcns verify-log dir...`: each dir is a records_dir
// (its negotiations folder is checked) or a negotiations folder, one
// node's; it stops at the first directory that fails. A directory
// without any log file is an error, not a success: it is most often the
// wrong one (the parent of the records_dirs, a typo'd name).
func verifyLog(out io.Writer, dirs ...string) error {
	var seen []os.FileInfo // the log folders verified
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err == nil && fi.IsDir() && isDir(filepath.Join(dir, "negotiations")) {
			fi, err = os.Stat(filepath.Join(dir, "negotiations")) // a records_dir and its negotiations folder are one log
		}
		switch {
		case err != nil:
			return fmt.Errorf("verify-log: %w", err)
		case !fi.IsDir():
			return fmt.Errorf("verify-log: %s is a file, not a directory: give the records_dir it belongs to (or its negotiations folder); a log file alone cannot be verified, its chains begin in the files before it", dir)
		case slices.ContainsFunc(seen, func(s os.FileInfo) bool { return os.SameFile(s, fi) }):
			fmt.Fprintf(out, "verify-log: %s: given before; verified once\n", dir)
			continue
		}
		seen = append(seen, fi)
		if err := verifyLogDir(out, dir); err != nil {
			return err
		}
	}
	return nil
}

// verifyLogDir verifies one node's directory (verifyLog).
func verifyLogDir(out io.Writer, dir string) error {
	logDir := dir
	if sub := filepath.Join(dir, "negotiations"); isDir(sub) {
		logDir = sub
	}
	st, err := records.VerifyDirStats(logDir)
	if err != nil {
		return fmt.Errorf("verify-log: %w", err)
	}
	if st.Files == 0 {
		return fmt.Errorf("verify-log: no record logs found in %s; give the records_dir of one gateway, e.g. %s (or its negotiations folder)",
			dir, filepath.Join(caddy.AppDataDir(), "rcns", "default"))
	}
	node := ""
	switch len(st.Nodes) {
	case 0:
	case 1:
		node = " of node " + st.Nodes[0]
	default:
		node = " of nodes " + strings.Join(st.Nodes, ", ") + " (the node was renamed)"
	}
	if st.Records == 0 {
		// Not "intact", and not a success: a gateway creates a log file
		// with its first record, so a file without one was most likely
		// emptied or cut to nothing (helper-131: `verify-log || alert`).
		hold := plural.Count(st.Files, "file holds", "files hold")
		return fmt.Errorf("verify-log: %s: %s no records: nothing to verify; the gateway creates a log file with its first record, so an empty one was most likely emptied or truncated",
			logDir, hold)
	}
	fmt.Fprintf(out, "verify-log: %s: %s, %s%s in %s: every chain is intact (a removed tail of a chain cannot be detected)\n",
		logDir, plural.Count(st.Chains, "chain", "chains"), plural.Count(st.Records, "record", "records"), node,
		plural.Count(st.Files, "file", "files"))
	return nil
}

// isDir reports whether path is an existing directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
