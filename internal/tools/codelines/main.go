// Command codelines measures the size of the root package of
// github.com/redislock/redislock, and how often its engine branches on a
// lock's kind. Run it from the module's root:
//
//	go run ./internal/tools/codelines        # totals (code and comment lines), and the kind branches
//	go run ./internal/tools/codelines -v     # also per file, and each branch
//
// # Code lines
//
// The files counted are the root's Go files that are not tests (*.go but
// *_test.go) and lua/*.lua. A line counts unless, with the spaces at both
// ends trimmed, it is blank, or it is a comment:
//
//   - a line comment: it starts with "//" (Go) or "--" (Lua);
//   - a block comment: a line that starts with "/*" (Go) or "--[[" (Lua),
//     and, unless that line also holds "*/" or "]]", every line after it up
//     to and including the first that holds "*/" or "]]".
//
// A line with code before its comment counts. This is the rule of the
// Python one-liner the figures came from, so the figures compare.
//
// # Kind branches
//
// A kind branch is a place, outside the kinds' own definitions (the files
// given by -kindfiles), where the code decides by which kind of lock it
// holds. The root's Go non-test files are parsed, and a line counts once,
// however many of these it holds:
//
//   - a comparison (== or !=) with a kind value as an operand;
//   - a switch with a tag that is a kind (an expression named kind or Kind,
//     or any tag when a case lists a kind value): its switch line and each
//     of its case lines, default included;
//   - a case line that lists a kind value (in any switch);
//   - a call of a kind predicate: a method of the kind type that returns a
//     bool, wherever it is called;
//   - a read of a kind's trait: a bool field of the type of a kind's
//     behaviour (-rules; keepsTurn, say), wherever it is read, passed on
//     as an argument too.
//
// The kind values are the constants of the kind type (-type; a const group
// whose first constant has that type counts whole, as iota does) and the
// names given by -values (the kind names Inspect reads from the server).
// Handing a kind on (an argument, a field, a table keyed by kind) is not a
// branch: the engine asks the kind, it does not test it.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	dir := flag.String("dir", ".", "the root package's directory")
	verbose := flag.Bool("v", false, "list each file's code lines and each kind branch")
	kindType := flag.String("type", "lockKind", "the kind's Go type")
	rulesType := flag.String("rules", "kindRules", "the Go type of a kind's behaviour, whose bool fields are its traits")
	values := flag.String("values", "kindLock,kindShared,kindSemaphore", "more kind values, comma-separated")
	kindFiles := flag.String("kindfiles", "kind.go", "the kinds' own definitions, comma-separated")
	flag.Parse()
	if err := run(os.Stdout, *dir, *verbose, *kindType, *rulesType, split(*values), split(*kindFiles)); err != nil {
		fmt.Fprintln(os.Stderr, "codelines:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// run prints the report on w.
func run(w io.Writer, dir string, verbose bool, kindType, rulesType string, values, kindFiles []string) error {
	goFiles, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return err
	}
	luaFiles, err := filepath.Glob(filepath.Join(dir, "lua", "*.lua"))
	if err != nil {
		return err
	}
	var goTotal, luaTotal, comments int
	sources := map[string][]byte{}
	for _, f := range append(goFiles, luaFiles...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		n := CodeLines(string(src))
		comments += nonBlank(string(src)) - n
		rel, _ := filepath.Rel(dir, f)
		if strings.HasSuffix(f, ".lua") {
			luaTotal += n
		} else {
			goTotal += n
			sources[rel] = src
		}
		if verbose {
			fmt.Fprintf(w, "%6d %s\n", n, rel)
		}
	}
	fmt.Fprintf(w, "code lines: go %d, lua %d, total %d\n", goTotal, luaTotal, goTotal+luaTotal)
	fmt.Fprintf(w, "comment lines: %d\n", comments)
	branches, err := KindBranches(sources, kindType, rulesType, values, kindFiles)
	if err != nil {
		return err
	}
	perFile := map[string]int{}
	for _, b := range branches {
		perFile[b.File]++
		if verbose {
			fmt.Fprintf(w, "kind branch %s:%d: %s\n", b.File, b.Line, b.Text)
		}
	}
	files := make([]string, 0, len(perFile))
	for f := range perFile {
		files = append(files, f)
	}
	sort.Strings(files)
	var parts []string
	for _, f := range files {
		parts = append(parts, fmt.Sprintf("%s %d", f, perFile[f]))
	}
	fmt.Fprintf(w, "kind branches: %d in %d files (%s)\n", len(branches), len(files), strings.Join(parts, ", "))
	return nil
}

// nonBlank counts src's lines that are not blank: its code lines and its
// comment lines (those CodeLines leaves out), so comment lines are
// nonBlank - CodeLines.
func nonBlank(src string) int {
	n := 0
	for _, l := range strings.Split(src, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

// CodeLines counts src's code lines (see the package doc). One rule serves
// both languages, as in the script the figures came from: Go has no
// line that starts with "--", Lua none that starts with "//" or "/*".
func CodeLines(src string) int {
	n, inBlock := 0, false
	for _, l := range strings.Split(src, "\n") {
		s := strings.TrimSpace(l)
		closes := strings.Contains(s, "*/") || strings.Contains(s, "]]")
		switch {
		case inBlock:
			inBlock = !closes
		case s == "", strings.HasPrefix(s, "//"):
		case strings.HasPrefix(s, "/*"), strings.HasPrefix(s, "--[["):
			inBlock = !closes
		case strings.HasPrefix(s, "--"):
		default:
			n++
		}
	}
	return n
}
