package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// TestPublish builds a proxy from a small repository with a nested module
// and checks what each module's zip holds.
func TestPublish(t *testing.T) {
	repo := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		path := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/root\n\ngo 1.26.0\n")
	write("root.go", "package root\n")
	write("go.work", "go 1.26.0\n\nuse (\n\t.\n\t./nested\n)\n")
	write(".gitignore", "*.out\n")
	write("ignored.out", "build output\n")
	write("sub/sub.go", "package sub\n")
	write("nested/go.mod", "module example.com/root/nested\n\ngo 1.26.0\n\nrequire example.com/root v0.1.0\n")
	write("nested/nested.go", "package nested\n")
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "."},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write("untracked.go", "package root\n") // not committed yet, not ignored: published

	out := t.TempDir()
	if err := run("v0.1.0", out, []string{repo, filepath.Join(repo, "nested")}); err != nil {
		t.Fatal(err)
	}

	for path, want := range map[string][]string{
		"example.com/root":        {".gitignore", "go.mod", "root.go", "sub/sub.go", "untracked.go"},
		"example.com/root/nested": {"go.mod", "nested.go"},
	} {
		dir := filepath.Join(out, filepath.FromSlash(path), "@v")
		zipPath := filepath.Join(dir, "v0.1.0.zip")
		if _, err := modzip.CheckZip(module.Version{Path: path, Version: "v0.1.0"}, zipPath); err != nil {
			t.Errorf("%s: not a valid module zip: %v", path, err)
		}
		r, err := zip.OpenReader(zipPath)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range r.File {
			got = append(got, strings.TrimPrefix(f.Name, path+"@v0.1.0/"))
		}
		r.Close()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: zip holds %v, want %v", path, got, want)
		}
		list, err := os.ReadFile(filepath.Join(dir, "list"))
		if err != nil || string(list) != "v0.1.0\n" {
			t.Errorf("%s: list = %q, %v", path, list, err)
		}
		for _, name := range []string{"v0.1.0.info", "v0.1.0.mod"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Errorf("%s: %v", path, err)
			}
		}
	}
}
