package snippets

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// How a ```go block in the docs says what it is: by an HTML comment (which
// Markdown does not show) on the line right before the block.
//
//   - no comment: a complete Go file, package clause and imports included,
//     built as it is;
//   - <!-- snippet: body GIVENS -->: statements, built as the body of a
//     function returning error; GIVENS ("rdb *redis.Client; orderID
//     string", separated by ";") declares what the block uses but does not
//     declare itself;
//   - <!-- snippet: decls GIVENS -->: top-level declarations (functions,
//     types), with GIVENS as above;
//   - <!-- snippet: example DIR/FILE_test.go FUNC -->: the body of an
//     Example function, which `go test` of that module compiles and whose
//     // Output: it checks; the block must be that body, word for word.
//
// Body and decls blocks get their imports from the package names they use
// (knownPackages), and an "_ = x" for each variable they declare at their
// top level, so that a snippet that ends by making a client does not fail
// for never using it. Nothing else is added: a block that calls a function
// it does not declare (or list as given) fails.
var marker = regexp.MustCompile(`^<!-- snippet: (body|decls|example)\b(.*?)-->$`)

// knownPackages are the import paths of the package names the docs' body
// and decls blocks may use.
var knownPackages = map[string]string{
	"context":       "context",
	"errors":        "errors",
	"fmt":           "fmt",
	"log":           "log",
	"os":            "os",
	"time":          "time",
	"slog":          "log/slog",
	"sql":           "database/sql",
	"x509":          "crypto/x509",
	"testing":       "testing",
	"redis":         "github.com/redis/go-redis/v9",
	"miniredis":     "github.com/alicebob/miniredis/v2",
	"require":       "github.com/stretchr/testify/require",
	"redislock":     "github.com/redislock/redislock",
	"redislockprom": "github.com/redislock/redislock/redislockprom",
	"redislockotel": "github.com/redislock/redislock/redislockotel",
	"redislocktest": "github.com/redislock/redislock/redislocktest",
	"gocronlock":    "github.com/redislock/redislock/gocronlock",
	"gocron":        "github.com/go-co-op/gocron/v2",
	"prometheus":    "github.com/prometheus/client_golang/prometheus",
	"testutil":      "github.com/prometheus/client_golang/prometheus/testutil",
	"expfmt":        "github.com/prometheus/common/expfmt",
	"otel":          "go.opentelemetry.io/otel",
	"metric":        "go.opentelemetry.io/otel/metric",
	"sdkmetric":     "go.opentelemetry.io/otel/sdk/metric",
}

// block is one ```go block of a Markdown file.
type block struct {
	file   string // relative to the repository root
	line   int    // of the first line of code
	kind   string // "file", "body", "decls" or "example"
	args   string // what follows the kind in the marker
	source string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

const repoRoot = "../.."

// docs returns README.md and every docs/*.md, relative to the root.
func docs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		rel, _ := filepath.Rel(repoRoot, f)
		out = append(out, rel)
	}
	return out
}

// goBlocks returns the ```go blocks of the Markdown file at rel.
func goBlocks(t *testing.T, rel string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []block
		cur     *block
		code    strings.Builder
		prev    string // the last non-empty line outside a block
		fenced  bool   // inside a block of another language
		pending int    // line of a marker not yet followed by a go block
	)
	scanner := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.source = code.String()
			blocks = append(blocks, *cur)
			cur, prev = nil, ""
		case cur != nil:
			code.WriteString(line + "\n")
		case fenced:
			fenced = !strings.HasPrefix(strings.TrimSpace(line), "```")
		case line == "```go":
			cur = &block{file: rel, line: n + 1, kind: "file"}
			code.Reset()
			if m := marker.FindStringSubmatch(prev); m != nil {
				cur.kind, cur.args = m[1], strings.TrimSpace(m[2])
			}
			pending = 0
		case strings.HasPrefix(line, "```"):
			fenced = true
		case strings.TrimSpace(line) != "":
			if pending != 0 {
				t.Errorf("%s:%d: a snippet marker must be right before a ```go block", rel, pending)
				pending = 0
			}
			if strings.HasPrefix(line, "<!-- snippet") {
				if !marker.MatchString(line) {
					t.Errorf("%s:%d: unknown snippet marker %q", rel, n, line)
				}
				pending = n
			}
			prev = line
		}
	}
	if cur != nil {
		t.Errorf("%s:%d: unterminated ```go block", rel, cur.line-1)
	}
	return blocks
}

// TestEveryGoBlockCompiles builds every ```go block of README.md and
// docs/*.md, each as a package of one scratch module inside a workspace
// made of this repository's modules, so that the blocks see the code in
// this tree. Compiler errors point at the Markdown file and line.
func TestEveryGoBlockCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	scratch := t.TempDir()
	var found, built, examples int
	for _, doc := range docs(t) {
		for i, b := range goBlocks(t, doc) {
			found++
			if b.kind == "example" {
				checkExample(t, b)
				examples++
				continue
			}
			src, err := generate(b)
			if err != nil {
				t.Errorf("%v: %v", b, err)
				continue
			}
			dir := filepath.Join(scratch, fmt.Sprintf("%s_%d", strings.NewReplacer("/", "_", ".", "_").Replace(doc), i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "snippet.go"), src, 0o644); err != nil {
				t.Fatal(err)
			}
			built++
		}
	}
	if found == 0 {
		t.Fatal("no ```go block found: is the repository root at " + repoRoot + "?")
	}
	t.Logf("%d blocks built, %d compared with their Example", built, examples)
	writeWorkspace(t, scratch)
	cmd := exec.Command("go", "build", "-o", t.TempDir(), "./...")
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(scratch, "go.work"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go build of the docs' Go blocks failed (%v):\n%s", err, out)
	}
}

// writeWorkspace makes scratch a module in a workspace that uses every
// module of this repository's go.work (with its replacements), by absolute
// path.
func writeWorkspace(t *testing.T, scratch string) {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	repoWork, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	work := "go 1.26.0\n\nuse .\n"
	dir := regexp.MustCompile(`^\s*(\./\S*|\.)\s*$`)
	replace := regexp.MustCompile(`^replace (\S+ \S+) => (\./\S*)$`)
	inUse := false
	for _, line := range strings.Split(string(repoWork), "\n") {
		switch {
		case strings.HasPrefix(line, "use ("):
			inUse = true
		case inUse && strings.TrimSpace(line) == ")":
			inUse = false
		case inUse && dir.MatchString(line):
			work += "use " + filepath.Join(root, strings.TrimSpace(line)) + "\n"
		case replace.MatchString(line):
			m := replace.FindStringSubmatch(line)
			work += "replace " + m[1] + " => " + filepath.Join(root, m[2]) + "\n"
		}
	}
	if err := os.WriteFile(filepath.Join(scratch, "go.work"), []byte(work), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scratch, "go.mod"), []byte("module scratch\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// generate returns the Go file for a block.
func generate(b block) ([]byte, error) {
	lineDirective := fmt.Sprintf("//line %s:%d\n", b.file, b.line)
	switch b.kind {
	case "file":
		if !regexp.MustCompile(`(?m)^package \w+`).MatchString(b.source) {
			return nil, fmt.Errorf("a ```go block without a <!-- snippet: ... --> marker must be a complete file, starting with its package clause")
		}
		return []byte(lineDirective + b.source), nil
	case "body", "decls":
	default:
		return nil, fmt.Errorf("unknown kind %q", b.kind)
	}
	var givens strings.Builder
	for g := range strings.SplitSeq(b.args, ";") {
		if g = strings.TrimSpace(g); g != "" {
			givens.WriteString("\t" + g + "\n")
		}
	}
	src := "package snippet\n\nvar (\n" + givens.String() + ")\n\n"
	if b.kind == "body" {
		src += "func _() error {\n" + lineDirective + b.source + "\n//line generated:1\nreturn nil\n}\n"
	} else {
		src += lineDirective + b.source
	}

	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "snippet.go", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	if b.kind == "body" {
		useLocals(file)
	}
	var imports []string
	for _, id := range file.Unresolved {
		if path, ok := knownPackages[id.Name]; ok && !slices.Contains(imports, path) {
			imports = append(imports, path)
		}
	}
	slices.Sort(imports)
	for _, path := range imports {
		file.Decls = append([]ast.Decl{&ast.GenDecl{Tok: token.IMPORT, Specs: []ast.Spec{
			&ast.ImportSpec{Path: &ast.BasicLit{Kind: token.STRING, Value: fmt.Sprintf("%q", path)}},
		}}}, file.Decls...)
	}
	var out bytes.Buffer
	if err := printer.Fprint(&out, fset, file); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// useLocals adds "_ = x" before the final return of the body function for
// every variable its top level declares.
func useLocals(file *ast.File) {
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok {
			continue
		}
		var names []string
		for _, stmt := range fn.Body.List {
			switch s := stmt.(type) {
			case *ast.AssignStmt:
				if s.Tok == token.DEFINE {
					for _, lhs := range s.Lhs {
						if id, ok := lhs.(*ast.Ident); ok && id.Name != "_" {
							names = append(names, id.Name)
						}
					}
				}
			case *ast.DeclStmt:
				if gen, ok := s.Decl.(*ast.GenDecl); ok && gen.Tok == token.VAR {
					for _, spec := range gen.Specs {
						for _, id := range spec.(*ast.ValueSpec).Names {
							if id.Name != "_" {
								names = append(names, id.Name)
							}
						}
					}
				}
			}
		}
		last := len(fn.Body.List) - 1
		var uses []ast.Stmt
		for _, name := range names {
			uses = append(uses, &ast.AssignStmt{
				Lhs: []ast.Expr{ast.NewIdent("_")}, Tok: token.ASSIGN, Rhs: []ast.Expr{ast.NewIdent(name)},
			})
		}
		fn.Body.List = append(append(fn.Body.List[:last:last], uses...), fn.Body.List[last])
	}
}

// checkExample fails unless the block is, word for word, the body of the
// Example function its marker names.
func checkExample(t *testing.T, b block) {
	t.Helper()
	fields := strings.Fields(b.args)
	if len(fields) != 2 {
		t.Errorf("%v: want <!-- snippet: example DIR/FILE_test.go FUNC -->", b)
		return
	}
	path, name := filepath.Join(repoRoot, fields[0]), fields[1]
	src, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v: %v", b, err)
		return
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Errorf("%v: %v", b, err)
		return
	}
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name {
			continue
		}
		start, end := fset.Position(fn.Body.Lbrace).Offset+1, fset.Position(fn.Body.Rbrace).Offset
		if want := dedent(string(src[start:end])); want != strings.Trim(b.source, "\n") {
			t.Errorf("%v: the block is not the body of %s in %s; it should read:\n%s", b, name, fields[0], want)
		}
		return
	}
	t.Errorf("%v: %s has no function %s", b, fields[0], name)
}

// dedent removes the leading tab of every line and blank lines around.
func dedent(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.Trim(s, "\n"), "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	return strings.Join(lines, "\n")
}
