package rebound_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The README's two commands, verbatim: .ci/run runs the second.
var readmeCommands = []string{
	"go run ./cmd/rebound bench",
	"go test -race -p 2 ./... ./sdk/... ./otel/... ./redis/... ./bolt/... ./postgres/... ./mcp/... ./cmd/rebound/...",
}

// maxREADMELines keeps the README an introduction; the manual is docs/.
const maxREADMELines = 300

func TestREADMEFitsAndHoldsTheTwoCommands(t *testing.T) {
	lines := strings.Split(strings.TrimSuffix(readDoc(t, "README.md"), "\n"), "\n")
	if len(lines) > maxREADMELines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a guide in docs/", len(lines), maxREADMELines)
	}
	for _, cmd := range readmeCommands {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.TrimSpace(l) == cmd }) {
			t.Errorf("README.md has no line that is exactly %q", cmd)
		}
	}
	// CI runs the README's test command, with -count=1 so that nothing
	// comes from the cache.
	ci := strings.Split(readDoc(t, filepath.Join(".ci", "run")), "\n")
	if !slices.ContainsFunc(ci, func(l string) bool { return strings.Replace(l, " -count=1", "", 1) == readmeCommands[1] }) {
		t.Errorf(".ci/run does not run the README's test command %q", readmeCommands[1])
	}
}

var (
	fence      = regexp.MustCompile("(?ms)^ {0,3}```.*?^ {0,3}```")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	inlineLink = regexp.MustCompile(`\]\(<?([^()\s>]+)>?(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(\S+)`)
	htmlLink   = regexp.MustCompile(`(?:href|src)="([^"]+)"`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	notInSlug  = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	hasScheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// TestDocLinksResolve follows every relative link in README.md,
// CONTRIBUTING.md and docs/*.md: the file or folder must exist and, for a
// link into a Markdown file with #anchor, the anchor must be one of its
// headings, spelt as GitHub spells it.
func TestDocLinksResolve(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{"README.md", "CONTRIBUTING.md"}, docs...)
	followed := 0
	for _, doc := range docs {
		text := codeSpan.ReplaceAllString(fence.ReplaceAllString(readDoc(t, doc), ""), "")
		var links []string
		for _, re := range []*regexp.Regexp{inlineLink, refLink, htmlLink} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				links = append(links, m[1])
			}
		}
		for _, link := range links {
			if hasScheme.MatchString(link) || strings.HasPrefix(link, "//") {
				continue // not relative
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := doc
			if path != "" {
				p, err := url.PathUnescape(path)
				if err != nil {
					t.Errorf("%s: link %q: %v", doc, link, err)
					continue
				}
				target = filepath.Join(filepath.Dir(doc), filepath.FromSlash(p))
			}
			followed++
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %q: no such file or folder %s", doc, link, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !slices.Contains(anchors(readDoc(t, target)), anchor) {
				t.Errorf("%s: link %q: %s has no heading whose anchor is #%s", doc, link, target, anchor)
			}
		}
	}
	if followed == 0 {
		t.Fatal("found no relative link to follow: the link pattern is wrong")
	}
}

// anchors are the ids GitHub gives the headings of a Markdown text:
// lower case, punctuation dropped, spaces made hyphens, and a repeated id
// numbered -1, -2, ...
func anchors(text string) []string {
	seen := map[string]int{}
	var ids []string
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		id := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[id]; n > 0 {
			ids = append(ids, id+"-"+strconv.Itoa(n))
		} else {
			ids = append(ids, id)
		}
		seen[id]++
	}
	return ids
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
