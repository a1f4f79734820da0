package caddymodule

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "rcns",
		Usage: "verify-log <dir>",
		Short: "Tools for the rcns gateway (verify-log checks negotiation record chains)",
		Long: `Tools for the rcns gateway.

verify-log <dir> checks every hash chain in a negotiation record directory
(one gateway's records_dir, or its negotiations folder), prints how many
chains and records it checked, and exits non-zero naming the first broken
record (file, line, agent), or when dir holds no negotiation log.`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.AddCommand(&cobra.Command{
				Use:   "verify-log <dir>",
				Short: "Verify the hash chains of a negotiation record directory",
				Args:  cobra.ExactArgs(1),
				RunE: func(_ *cobra.Command, args []string) error {
					return verifyLog(os.Stdout, args[0])
				},
			})
		},
	})
}

// verifyLog is `caddy rcns verify-log dir`: dir is a records_dir (its
// negotiations folder is checked) or a negotiations folder. A directory
// without any log file is an error, not a success: it is most often the
// wrong one (the parent of the records_dirs, a typo'd name).
func verifyLog(out io.Writer, dir string) error {
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
	fmt.Fprintf(out, "verify-log: %s: %d chains, %d records in %d files: every chain is intact (a removed tail of a chain cannot be detected)\n",
		logDir, st.Chains, st.Records, st.Files)
	return nil
}

// isDir reports whether path is an existing directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
