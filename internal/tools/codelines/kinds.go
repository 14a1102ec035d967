package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"sort"
	"strings"
)

// A Branch is a line that branches on a lock's kind (see the package doc).
type Branch struct {
	File string
	Line int
	Text string // the line, trimmed
}

// KindBranches finds the kind branches in sources (Go files by name),
// outside kindFiles; kindType is the kind's type, rulesType the type of its
// behaviour (its bool fields are its traits), values more kind values.
func KindBranches(sources map[string][]byte, kindType, rulesType string, values, kindFiles []string) ([]Branch, error) {
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for name, src := range sources {
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files[name] = f
	}
	isValue, isPredicate := map[string]bool{}, map[string]bool{}
	for _, v := range values {
		isValue[v] = true
	}
	for _, f := range files {
		collectKinds(f, kindType, isValue, isPredicate)
		collectTraits(f, rulesType, isPredicate)
	}
	isKind := func(e ast.Expr) bool {
		switch e := ast.Unparen(e).(type) {
		case *ast.Ident:
			return isValue[e.Name]
		case *ast.SelectorExpr:
			return isValue[e.Sel.Name]
		}
		return false
	}
	var branches []Branch
	for name, f := range files {
		if slices.Contains(kindFiles, name) {
			continue
		}
		lines := map[int]bool{}
		mark := func(n ast.Node) { lines[fset.Position(n.Pos()).Line] = true }
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isKind(n.X) || isKind(n.Y)) {
					mark(n)
				}
			case *ast.SelectorExpr:
				if isPredicate[n.Sel.Name] {
					mark(n)
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && (namesKind(n.Tag) || slices.ContainsFunc(n.Body.List, func(c ast.Stmt) bool {
					return slices.ContainsFunc(c.(*ast.CaseClause).List, isKind)
				})) {
					mark(n)
					for _, c := range n.Body.List {
						mark(c)
					}
				}
			case *ast.CaseClause:
				if slices.ContainsFunc(n.List, isKind) {
					mark(n)
				}
			}
			return true
		})
		text := strings.Split(string(sources[name]), "\n")
		for line := range lines {
			branches = append(branches, Branch{File: name, Line: line, Text: strings.TrimSpace(text[line-1])})
		}
	}
	sort.Slice(branches, func(i, j int) bool {
		a, b := branches[i], branches[j]
		return a.File < b.File || a.File == b.File && a.Line < b.Line
	})
	return branches, nil
}

// collectKinds adds f's constants of kindType to isValue, and its methods
// on kindType that return one bool to isPredicate.
func collectKinds(f *ast.File, kindType string, isValue, isPredicate map[string]bool) {
	isType := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		return ok && id.Name == kindType
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			if d.Tok != token.CONST {
				continue
			}
			typed := false // in a group, an untyped spec without values repeats the last (iota)
			for _, s := range d.Specs {
				spec := s.(*ast.ValueSpec)
				if spec.Type != nil || len(spec.Values) > 0 {
					typed = spec.Type != nil && isType(spec.Type)
				}
				if typed {
					for _, n := range spec.Names {
						isValue[n.Name] = true
					}
				}
			}
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) != 1 || !isType(d.Recv.List[0].Type) {
				continue
			}
			res := d.Type.Results
			if res != nil && len(res.List) == 1 && len(res.List[0].Names) <= 1 {
				if id, ok := res.List[0].Type.(*ast.Ident); ok && id.Name == "bool" {
					isPredicate[d.Name.Name] = true
				}
			}
		}
	}
}

// namesKind tells a switch tag that is a kind by its name: kind or Kind.
func namesKind(e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return e.Name == "kind" || e.Name == "Kind"
	case *ast.SelectorExpr:
		return e.Sel.Name == "kind" || e.Sel.Name == "Kind"
	}
	return false
}

// collectTraits adds the bool fields of f's struct type rulesType to
// isPredicate: reading a kind's trait is testing the kind.
func collectTraits(f *ast.File, rulesType string, isPredicate map[string]bool) {
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.TypeSpec)
		if !ok || spec.Name.Name != rulesType {
			return true
		}
		if st, ok := spec.Type.(*ast.StructType); ok {
			for _, field := range st.Fields.List {
				if id, ok := field.Type.(*ast.Ident); ok && id.Name == "bool" {
					for _, name := range field.Names {
						isPredicate[name.Name] = true
					}
				}
			}
		}
		return false
	})
}
