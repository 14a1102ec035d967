package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCodeLines(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"blank and line comments do not count", "\n  \t\n// doc\n  // indented\nx := 1\n", 1},
		{"code before a comment counts", "x := 1 // why\n", 1},
		{"a Go block comment does not count, to its end", "a()\n/* one\ntwo\n*/\nb()\n", 2},
		{"a one-line block comment does not count", "/* one */\nb()\n", 1},
		{"a block comment after code does not open a block", "a() /* why\nb()\n", 2},
		{"Lua line comments do not count", "-- KEYS[1]: the lock\nlocal x = 1\n  -- why\n", 1},
		{"a Lua block comment does not count, to its end", "--[[ a\nb\n]]\nreturn 1\n", 1},
		{"a one-line Lua block comment does not count", "--[[ a ]]\nreturn 1\n", 1},
		{"a last line without a newline counts", "return 1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CodeLines(tc.src); got != tc.want {
				t.Fatalf("CodeLines(%q) = %d, want %d", tc.src, got, tc.want)
			}
		})
	}
}

const kindSrc = `package p

type lockKind uint8

const (
	exclusiveLock lockKind = iota
	sharedHold
)

const other = 3

func (k lockKind) keepsTurn() bool { return k == exclusiveLock }
func (k lockKind) what() string  { return "" }

type kindRules struct {
	call      string
	takesTurn bool
}
`

const engineSrc = `package p

func f(k lockKind, r ref, kind string) {
	if k == sharedHold { // a comparison
	}
	g(exclusiveLock) // handed on: not a branch
	if x := 3; x == other {
	}
	_ = k.keepsTurn() // a predicate
	_ = k.what()
	switch r.kind { // a switch on a kind, and its cases
	case 1:
	default:
	}
	switch x := 2; x {
	case other:
	}
	switch {
	case kind == kindLock && r.n == 1: // a comparison with a listed value
	}
	switch k {
	case exclusiveLock, sharedHold: // a switch by its cases
	}
	_ = rules.call      // not a trait
	enter(rules.takesTurn) // a trait, wherever read
}
`

func TestKindBranches(t *testing.T) {
	got, err := KindBranches(map[string][]byte{"kind.go": []byte(kindSrc), "engine.go": []byte(engineSrc)},
		"lockKind", "kindRules", []string{"kindLock"}, []string{"kind.go"})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{4, 9, 11, 12, 13, 19, 21, 22, 25}
	var lines []int
	for _, b := range got {
		if b.File != "engine.go" {
			t.Errorf("a branch in %s:%d: the kinds' own file is not counted", b.File, b.Line)
		}
		lines = append(lines, b.Line)
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("kind branches on lines %v, want %v (%+v)", lines, want, got)
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kind.go", kindSrc)
	write("engine.go", engineSrc)
	write("engine_test.go", "package p\n\nfunc TestX() { _ = exclusiveLock == sharedHold }\n")
	write("lua/a.lua", "-- KEYS[1]\n\nlocal x = 1\n--[[ a\nblock ]]\nreturn x\n")
	var out bytes.Buffer
	if err := run(&out, dir, false, "lockKind", "kindRules", []string{"kindLock"}, []string{"kind.go"}); err != nil {
		t.Fatal(err)
	}
	want := "code lines: go 38, lua 2, total 40\ncomment lines: 3\nkind branches: 9 in 1 files (engine.go 9)\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
