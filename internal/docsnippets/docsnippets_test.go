package docsnippets

import (
	"strings"
	"testing"
)

// TestParse: info-string attributes, contents, Find and Files; a bad
// attribute word is refused.
func TestParse(t *testing.T) {
	src := "# t\n\n```yaml file=a/b.yaml\nk: v\n```\n\ntext\n\n```sh run=x\necho hi\n```\n\n```\nplain\n```\n"
	snips, err := Parse([]byte(src))
	if err != nil || len(snips) != 3 {
		t.Fatalf("Parse = %v, %v; want 3 snippets", snips, err)
	}
	if snips[0].Lang != "yaml" || snips[0].Text != "k: v\n" || snips[2].Lang != "" || snips[2].Text != "plain\n" {
		t.Errorf("snippets = %+v", snips)
	}
	if f := Files(snips); len(f) != 1 || f["a/b.yaml"] != "k: v\n" {
		t.Errorf("Files = %v", f)
	}
	if s, err := Find(snips, "run", "x"); err != nil || s.Text != "echo hi\n" {
		t.Errorf("Find(run=x) = %+v, %v", s, err)
	}
	if _, err := Find(snips, "run", "y"); err == nil {
		t.Error("Find of a missing snippet succeeded")
	}
	for _, bad := range []string{"```sh run\nx\n```\n", "```sh run=a run=b\nx\n```\n"} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "docsnippets") {
			t.Errorf("Parse(%q) = %v, want an error", bad, err)
		}
	}
}
