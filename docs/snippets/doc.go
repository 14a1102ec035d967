// Package snippets keeps the Go code in README.md and docs/*.md honest: its
// test extracts every ```go block, builds each one against the modules of
// this repository, and fails when one no longer compiles (see
// snippets_test.go for how a block says what it is), and checks that
// every relative link of those pages leads to a file and heading that exist.
//
// It is a module of its own so that the root module's tests stay free of
// it, and so that it is not part of any module a user downloads.
package snippets
