package broker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Function size limits of this package and its commit component: a function can be read at
// once when it has at most maxLines lines and maxBranches branches (if, for, a case, a select's
// case, && and ||).
const (
	maxLines    = 60
	maxBranches = 15
)

// longFunctions are the functions over the limits that have yet to be cut; none may join them.
var longFunctions = map[string]bool{}

// maxBrokerFields bounds Broker's fields, an embedded struct's fields counted as its own: a
// broker that holds more state than this has taken on a concern that belongs in a component
// (a service, the writers' side, the lease table) with its own type.
const maxBrokerFields = 20

func TestBrokerStaysSmall(t *testing.T) {
	t.Parallel()
	structs := packageStructs(t, ".")
	n := fieldCount(structs, "Broker")
	if n >= maxBrokerFields {
		t.Errorf("Broker has %d fields (embedded structs flattened), not under %d: move state to the component that owns it", n, maxBrokerFields)
	}
}

// sourceFiles parses the non-test Go files of dir, with the file set that positions them.
func sourceFiles(t *testing.T, dir string) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := make(map[string]*ast.File)
	for _, f := range names {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[f] = af
	}
	return fset, files
}

// packageStructs are the struct types declared in dir's non-test files, by name.
func packageStructs(t *testing.T, dir string) map[string]*ast.StructType {
	t.Helper()
	_, files := sourceFiles(t, dir)
	structs := make(map[string]*ast.StructType)
	for _, af := range files {
		ast.Inspect(af, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	return structs
}

// fieldCount counts the fields of the struct type named name, each name of a field list once,
// and an embedded struct of the package as the fields it brings.
func fieldCount(structs map[string]*ast.StructType, name string) int {
	n := 0
	for _, f := range structs[name].Fields.List {
		if len(f.Names) > 0 {
			n += len(f.Names)
			continue
		}
		typ := f.Type
		if s, ok := typ.(*ast.StarExpr); ok {
			typ = s.X
		}
		if id, ok := typ.(*ast.Ident); ok && structs[id.Name] != nil {
			n += fieldCount(structs, id.Name)
			continue
		}
		n++
	}
	return n
}

func TestFunctionsStayShort(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "commit"} {
		fset, files := sourceFiles(t, dir)
		for f, af := range files {
			for _, d := range af.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				name := funcName(fd)
				lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				n := branchCount(fd.Body)
				over := lines > maxLines || n > maxBranches
				switch {
				case over && !longFunctions[name]:
					t.Errorf("%s: %s has %d lines and %d branches, over %d and %d: cut it", f, name, lines, n, maxLines, maxBranches)
				case !over && longFunctions[name] && dir == ".":
					t.Logf("%s is within the limits now: take it off longFunctions", name)
				}
			}
		}
	}
}

// funcName is fd's name, with its receiver's type for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// branchCount counts the branches in body, the function literals in it included.
func branchCount(body ast.Node) int {
	n := 0
	ast.Inspect(body, func(x ast.Node) bool {
		switch x := x.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			n++
		case *ast.CaseClause:
			if x.List != nil {
				n++
			}
		case *ast.CommClause:
			if x.Comm != nil {
				n++
			}
		case *ast.BinaryExpr:
			if x.Op == token.LAND || x.Op == token.LOR {
				n++
			}
		}
		return true
	})
	return n
}
