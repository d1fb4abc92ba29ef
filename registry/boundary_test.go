package registry

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestCoreBoundary keeps the index core's boundary (STYLE.md: a core the
// compiler keeps). The Registry holds its index as the named field core,
// so no field of the index is promoted onto Registry; this test checks the
// rest: outside the methods of index (and of indexState, the index as the
// rules read it), the package's code reaches the core only by calling a
// method of index on r.core — never a field (r.core.services), and never
// the core itself as a value (&r.core), which would let a driver file read
// its fields again. Test files are white-box and may look inside.
func TestCoreBoundary(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	methods := map[string]bool{}
	fields := map[string]bool{}
	isCore := func(fd *ast.FuncDecl) bool {
		if fd.Recv == nil || len(fd.Recv.List) != 1 {
			return false
		}
		typ := fd.Recv.List[0].Type
		if st, ok := typ.(*ast.StarExpr); ok {
			typ = st.X
		}
		id, ok := typ.(*ast.Ident)
		return ok && (id.Name == "index" || id.Name == "indexState")
	}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if isCore(d) {
					methods[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					ts, ok := sp.(*ast.TypeSpec)
					if !ok || ts.Name.Name != "index" {
						continue
					}
					for _, fl := range ts.Type.(*ast.StructType).Fields.List {
						for _, n := range fl.Names {
							fields[n.Name] = true
						}
					}
				}
			}
		}
	}
	if len(fields) == 0 || len(methods) == 0 {
		t.Fatal("found no index type or no index methods: the test no longer reads this package")
	}
	checked := 0
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && isCore(fd) {
				continue
			}
			// Every use of a selector .core must be the receiver of a
			// method of index: X.core.m with m a method.
			reached := map[*ast.SelectorExpr]bool{}
			ast.Inspect(d, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if inner, ok := sel.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "core" {
					reached[inner] = true
					checked++
					if !methods[sel.Sel.Name] {
						what := "not a method of index"
						if fields[sel.Sel.Name] {
							what = "a field of the index"
						}
						t.Errorf("%s: .core.%s: %s; reach the core through its methods", fset.Position(sel.Pos()), sel.Sel.Name, what)
					}
				}
				return true
			})
			ast.Inspect(d, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "core" && !reached[sel] {
					t.Errorf("%s: the core used as a value; call its methods instead", fset.Position(sel.Pos()))
				}
				return true
			})
		}
	}
	if checked == 0 {
		t.Fatal("found no call into the core: the test no longer reads this package")
	}
}
