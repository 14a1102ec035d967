package snippets

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestLinksResolve checks every relative link of README.md and docs/*.md:
// the file exists and, for a link to a heading (#anchor) of a Markdown
// file, the heading does, as GitHub names its anchors.
func TestLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range docs(t) {
		data, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(repoRoot, filepath.Dir(doc), path)
				if path == "" {
					file = filepath.Join(repoRoot, doc)
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link to %s: %v", doc, i+1, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(file, ".md") && !hasAnchor(t, file, anchor) {
					t.Errorf("%s:%d: link to %s: no such heading", doc, i+1, target)
				}
			}
		}
	}
}

// hasAnchor reports whether the Markdown file has a heading whose GitHub
// anchor is anchor.
func hasAnchor(t *testing.T, file, anchor string) bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") && slug(strings.TrimLeft(line, "#")) == anchor {
			return true
		}
	}
	return false
}

// slug is GitHub's anchor for a heading: lower case, spaces to hyphens,
// punctuation other than hyphens and underscores dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
