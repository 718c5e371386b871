package librarian

import (
	"context"
	"fmt"
	"go/ast"
	"go/token"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Edge kinds. The reverse directions (called by, imported by, implemented
// by, defined in, ...) are the same rows read by target (GetDependents).
const (
	edgeCalls      = "calls"
	edgeImports    = "imports"
	edgeImplements = "implements"
	edgeEmbeds     = "embeds"
	edgeHasField   = "has_field"
	edgeHasMethod  = "has_method"
	edgeDefines    = "defines"
	edgeReturns    = "returns"
	edgeReceives   = "receives"
)

// edgeKinds lists the stored edge kinds.
var edgeKinds = []string{edgeCalls, edgeImports, edgeImplements, edgeEmbeds, edgeHasField, edgeHasMethod,
	edgeDefines, edgeReturns, edgeReceives}

// goTypeNames are the predeclared types, never a type edge's target.
var goTypeNames = map[string]bool{
	"any": true, "bool": true, "byte": true, "comparable": true, "complex64": true, "complex128": true,
	"error": true, "float32": true, "float64": true, "int": true, "int8": true, "int16": true, "int32": true,
	"int64": true, "rune": true, "string": true, "uint": true, "uint8": true, "uint16": true, "uint32": true,
	"uint64": true, "uintptr": true,
}

// goTypeEdges lists the type relations of a parsed Go file: embeds and
// has_field (struct or interface -> named type), has_method (type or
// interface -> "<type>.<method>"), returns and receives (function or method
// -> named result and parameter types). Targets are type ids
// "<package path>.<Name>": same-package names and names reached through
// the file's imports; the caller keeps only those of the repository.
func goTypeEdges(f *ast.File, rel, pkgPath string, imports map[string]string, line func(token.Pos) int) []edgeRow {
	te := &typeEdges{rel: rel, pkgPath: pkgPath, imports: imports, line: line, seen: map[[3]string]bool{}}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			te.funcDecl(d)
		case *ast.GenDecl:
			if d.Tok != token.TYPE {
				continue
			}
			for _, s := range d.Specs {
				ts := s.(*ast.TypeSpec)
				switch t := ts.Type.(type) {
				case *ast.StructType:
					te.structType(ts, t)
				case *ast.InterfaceType:
					te.interfaceType(ts, t)
				}
			}
		}
	}
	return te.out
}

// typeEdges collects the type relations of a Go file, each once.
type typeEdges struct {
	rel, pkgPath string
	imports      map[string]string
	line         func(token.Pos) int
	seen         map[[3]string]bool
	out          []edgeRow
}

// add records an edge not recorded yet, with arity (of a has_method
// edge) when given.
func (te *typeEdges) add(source, target, kind string, pos token.Pos, arity ...string) {
	k := [3]string{source, target, kind}
	if target == "" || te.seen[k] {
		return
	}
	te.seen[k] = true
	e := edgeRow{source: source, target: target, kind: kind, path: te.rel, line: te.line(pos)}
	if len(arity) > 0 {
		e.arity = arity[0]
	}
	te.out = append(te.out, e)
}

// funcDecl records a method's has_method edge and a function's or
// method's receives and returns edges.
func (te *typeEdges) funcDecl(d *ast.FuncDecl) {
	params := typeParamNames(d.Type.TypeParams)
	source := te.pkgPath + "." + d.Name.Name
	if d.Recv != nil && len(d.Recv.List) > 0 {
		recv := receiverName(d.Recv.List[0].Type)
		if recv == "?" {
			return
		}
		source = te.pkgPath + "." + recv + "." + d.Name.Name
		te.add(te.pkgPath+"."+recv, source, edgeHasMethod, d.Name.Pos(), funcArity(d.Type))
		params = receiverTypeParams(d.Recv.List[0].Type, params)
	}
	for _, fld := range fieldList(d.Type.Params) {
		for _, t := range typeRefs(fld.Type, te.pkgPath, te.imports, params) {
			te.add(source, t, edgeReceives, fld.Pos())
		}
	}
	for _, fld := range fieldList(d.Type.Results) {
		for _, t := range typeRefs(fld.Type, te.pkgPath, te.imports, params) {
			te.add(source, t, edgeReturns, fld.Pos())
		}
	}
}

// structType records a struct's has_field and embeds edges.
func (te *typeEdges) structType(ts *ast.TypeSpec, t *ast.StructType) {
	source := te.pkgPath + "." + ts.Name.Name
	params := typeParamNames(ts.TypeParams)
	for _, fld := range fieldList(t.Fields) {
		kind := edgeHasField
		if len(fld.Names) == 0 {
			kind = edgeEmbeds
		}
		for _, target := range typeRefs(fld.Type, te.pkgPath, te.imports, params) {
			te.add(source, target, kind, fld.Pos())
			if kind == edgeEmbeds {
				break // the embedded type, not its type arguments
			}
		}
	}
}

// interfaceType records an interface's has_method edges and the
// interfaces it embeds.
func (te *typeEdges) interfaceType(ts *ast.TypeSpec, t *ast.InterfaceType) {
	source := te.pkgPath + "." + ts.Name.Name
	params := typeParamNames(ts.TypeParams)
	for _, fld := range fieldList(t.Methods) {
		if len(fld.Names) > 0 {
			ft, _ := fld.Type.(*ast.FuncType)
			for _, n := range fld.Names {
				te.add(source, source+"."+n.Name, edgeHasMethod, n.Pos(), funcArity(ft))
			}
			continue
		}
		// An embedded interface or a type-set term.
		switch fld.Type.(type) {
		case *ast.BinaryExpr, *ast.UnaryExpr: // ~T, A | B
			continue
		}
		if refs := typeRefs(fld.Type, te.pkgPath, te.imports, params); len(refs) > 0 {
			te.add(source, refs[0], edgeEmbeds, fld.Pos())
		}
	}
}

// funcArity is "<parameters>:<results>" of a function type.
func funcArity(ft *ast.FuncType) string {
	if ft == nil {
		return ""
	}
	return strconv.Itoa(ft.Params.NumFields()) + ":" + strconv.Itoa(ft.Results.NumFields())
}

func fieldList(l *ast.FieldList) []*ast.Field {
	if l == nil {
		return nil
	}
	return l.List
}

// typeParamNames are the names a type parameter list declares.
func typeParamNames(l *ast.FieldList) map[string]bool {
	out := map[string]bool{}
	for _, f := range fieldList(l) {
		for _, n := range f.Names {
			out[n.Name] = true
		}
	}
	return out
}

// receiverTypeParams adds the type parameters a generic receiver names
// (func (l *List[T]) ...) to params.
func receiverTypeParams(e ast.Expr, params map[string]bool) map[string]bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	var idx []ast.Expr
	switch t := e.(type) {
	case *ast.IndexExpr:
		idx = []ast.Expr{t.Index}
	case *ast.IndexListExpr:
		idx = t.Indices
	}
	for _, x := range idx {
		if id, ok := x.(*ast.Ident); ok {
			params[id.Name] = true
		}
	}
	return params
}

// typeRefs lists the named types a type expression mentions, outermost
// first: "T" as "<pkgPath>.T" and "p.T" through the file's imports.
// Predeclared types and type parameters are left out; function types are
// not entered.
func typeRefs(e ast.Expr, pkgPath string, imports map[string]string, params map[string]bool) []string {
	var out []string
	var walk func(ast.Expr)
	walk = func(e ast.Expr) {
		switch t := e.(type) {
		case *ast.Ident:
			if !goTypeNames[t.Name] && !params[t.Name] && t.Name != "_" {
				out = append(out, pkgPath+"."+t.Name)
			}
		case *ast.SelectorExpr:
			if x, ok := t.X.(*ast.Ident); ok {
				if p, ok := imports[x.Name]; ok {
					out = append(out, p+"."+t.Sel.Name)
				}
			}
		case *ast.StarExpr:
			walk(t.X)
		case *ast.ParenExpr:
			walk(t.X)
		case *ast.ArrayType:
			walk(t.Elt)
		case *ast.MapType:
			walk(t.Key)
			walk(t.Value)
		case *ast.ChanType:
			walk(t.Value)
		case *ast.Ellipsis:
			walk(t.Elt)
		case *ast.IndexExpr:
			walk(t.X)
			walk(t.Index)
		case *ast.IndexListExpr:
			walk(t.X)
			for _, x := range t.Indices {
				walk(x)
			}
		case *ast.UnaryExpr: // ~T in a type set
			walk(t.X)
		case *ast.BinaryExpr: // A | B in a type set
			walk(t.X)
			walk(t.Y)
		}
	}
	walk(e)
	return out
}

// typeEdgeInRepo reports whether a type edge's target is a type of the
// repository: the same package, or a package under the module path (for
// the standard library, any import path whose first element has no dot).
func typeEdgeInRepo(target, pkgPath, modulePath string) bool {
	i := strings.LastIndex(target, ".")
	if i < 0 {
		return false
	}
	pkg := target[:i]
	switch {
	case pkg == pkgPath:
		return true
	case modulePath == "" || modulePath == "std":
		first, _, _ := strings.Cut(pkg, "/")
		return !strings.Contains(first, ".")
	}
	return pkg == modulePath || strings.HasPrefix(pkg, modulePath+"/")
}

// refreshImplements recomputes a repository's implements edges (type ->
// interface) from its has_method edges: a type implements an interface of
// the repository when its own methods cover the interface's own methods by
// name and arity (number of parameters and of results, from the syntax).
// It is an approximation without type checking: parameter and result
// types are not compared, methods promoted through embedding are not counted, and an
// interface's embedded interfaces do not add to its method set. Interface
// methods are the has_method targets that are not method symbols. The edge
// is stored with the type's definition (file and line).
func refreshImplements(ctx context.Context, tx pgx.Tx, tenant, repoID string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM edges WHERE tenant_id = $1 AND repository_id = $2 AND kind = 'implements'`,
		tenant, uuidParam(repoID)); err != nil {
		return fmt.Errorf("clear implements edges: %w", err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO edges (tenant_id, repository_id, path, source, target, kind, line)
		WITH hm AS (
			SELECT e.source AS owner, substr(e.target, length(e.source) + 2) || '/' || e.arity AS name,
				EXISTS (SELECT 1 FROM symbols s WHERE s.tenant_id = e.tenant_id AND s.repository_id = e.repository_id
					AND s.id = e.target AND s.kind = 'method') AS concrete
			FROM edges e WHERE e.tenant_id = $1 AND e.repository_id = $2 AND e.kind = 'has_method'),
		iface AS (SELECT DISTINCT owner, name FROM hm WHERE NOT concrete),
		isize AS (SELECT owner, count(*) AS n FROM iface GROUP BY owner),
		typ AS (SELECT DISTINCT owner, name FROM hm WHERE concrete),
		covered AS (
			SELECT t.owner AS typ, i.owner AS iface, count(*) AS n
			FROM typ t JOIN iface i ON i.name = t.name AND i.owner <> t.owner
			GROUP BY t.owner, i.owner)
		SELECT $1, $2, d.path, c.typ, c.iface, 'implements', d.line_start
		FROM covered c JOIN isize z ON z.owner = c.iface AND z.n = c.n
		CROSS JOIN LATERAL (SELECT path, line_start FROM symbols
			WHERE tenant_id = $1 AND repository_id = $2 AND id = c.typ AND kind = 'type'
			ORDER BY path, line_start LIMIT 1) d`, tenant, uuidParam(repoID))
	if err != nil {
		return fmt.Errorf("compute implements edges: %w", err)
	}
	return nil
}

// touchesTypes reports whether any of paths holds method or implements
// edges, so that rewriting or removing them can change which types
// implement which interfaces. A delta that touches none of them keeps the
// implements edges as they are (new methods are caught when their rows are
// written).
func touchesTypes(ctx context.Context, tx pgx.Tx, tenant, repoID string, paths []string) (bool, error) {
	var touched bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM edges WHERE tenant_id = $1 AND repository_id = $2
		AND path = ANY($3) AND kind IN ('has_method', 'implements'))`, tenant, uuidParam(repoID), paths).Scan(&touched)
	if err != nil {
		return false, fmt.Errorf("check method edges: %w", err)
	}
	return touched, nil
}
