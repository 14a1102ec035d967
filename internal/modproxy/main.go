// Command modproxy writes modules of this repository, as they are in the
// work tree, into a directory laid out as a Go module proxy (GOPROXY
// protocol: <module>/@v/list, <version>.info, .mod and .zip, the zip in the
// standard module zip format), so that `go get` and `go install` can fetch
// them from file://DIR as if they had been released. .ci/install-check uses
// it to check that every module installs from a release before one is made.
//
//	go run . -version v0.1.0 -out DIR MODULE_DIR...
//
// A module's files are those git tracks or would track (untracked files
// that .gitignore does not exclude are included, so that a check before a
// commit sees the change), less the files of modules nested in it and the
// workspace files (go.work, go.work.sum), which are never part of a module.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func main() {
	version := flag.String("version", "", "the `version` to publish every module at (e.g. v0.1.0)")
	out := flag.String("out", "", "the proxy `directory` to write")
	flag.Parse()
	if *version == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -version vX.Y.Z -out DIR MODULE_DIR...")
		os.Exit(2)
	}
	if err := run(*version, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(version, out string, dirs []string) error {
	var abs []string
	for _, dir := range dirs {
		a, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		abs = append(abs, a)
	}
	for _, dir := range abs {
		path, err := publish(dir, version, out)
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		fmt.Printf("%s@%s\n", path, version)
	}
	return nil
}

// publish writes the module in dir at version into the proxy at out and
// returns its path.
func publish(dir, version, out string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return "", errors.New("go.mod has no module line")
	}
	mv := module.Version{Path: path, Version: version}
	files, err := moduleFiles(dir)
	if err != nil {
		return "", err
	}
	var zip bytes.Buffer
	if err := modzip.Create(&zip, mv, files); err != nil {
		return "", err
	}

	escaped, err := module.EscapePath(path)
	if err != nil {
		return "", err
	}
	versionDir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(versionDir, 0o755); err != nil {
		return "", err
	}
	commitTime, err := git(dir, "log", "-1", "--format=%cI")
	if err != nil {
		return "", err
	}
	when, err := time.Parse(time.RFC3339, strings.TrimSpace(commitTime))
	if err != nil {
		return "", err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when.UTC()})
	for name, data := range map[string][]byte{
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  zip.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(versionDir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	list, err := os.ReadFile(filepath.Join(versionDir, "list"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	versions := strings.Fields(string(list))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	return path, os.WriteFile(filepath.Join(versionDir, "list"), []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// moduleFiles returns the files of the module rooted at dir.
func moduleFiles(dir string) ([]modzip.File, error) {
	listed, err := git(dir, "ls-files", "--cached", "--others", "--exclude-standard", "-z", ".")
	if err != nil {
		return nil, err
	}
	var names []string
	nested := map[string]bool{} // directories (relative to dir) holding another module
	for name := range strings.SplitSeq(listed, "\x00") {
		if name == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if d, base := filepath.Split(name); base == "go.mod" && d != "" {
			nested[strings.TrimSuffix(d, "/")] = true
		}
		names = append(names, name)
	}
	var files []modzip.File
	for _, name := range names {
		if name == "go.work" || name == "go.work.sum" || inNested(name, nested) {
			continue
		}
		files = append(files, diskFile{root: dir, path: name})
	}
	return files, nil
}

// inNested reports whether name lies in one of the nested modules' dirs.
func inNested(name string, nested map[string]bool) bool {
	for d := filepath.Dir(name); d != "."; d = filepath.Dir(d) {
		if nested[d] {
			return true
		}
	}
	return false
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// diskFile is a file of the work tree, as golang.org/x/mod/zip wants it.
type diskFile struct{ root, path string }

func (f diskFile) Path() string                 { return filepath.ToSlash(f.path) }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(filepath.Join(f.root, f.path)) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(filepath.Join(f.root, f.path)) }
