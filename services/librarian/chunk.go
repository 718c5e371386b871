package librarian

import (
	"crypto/sha256"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Chunk kinds.
const (
	kindFunction = "function"
	kindMethod   = "method"
	kindType     = "type"
	kindConst    = "const"
	kindVar      = "var"
	kindImports  = "imports"
	kindClass    = "class"
	kindSection  = "section"
	kindBlock    = "block"
	kindStub     = "stub"
)

// span is a run of whole lines (1-based, inclusive) that forms one unit of
// a file: a declaration with its doc comment, a heading's section, or a
// block between definitions.
type span struct {
	start, end int
	symbol     string
	kind       string
	// names are the identifiers the span defines, for exact-match boosts.
	names []string
}

// symbolRow is one definition found in a Go file.
type symbolRow struct {
	id, name, kind, path, pkg, signature, doc string
	lineStart, lineEnd                        int
}

// edgeRow is one relation found in a Go file.
type edgeRow struct {
	source, target, kind, path string
	line                       int
	arity                      string // has_method: "<parameters>:<results>"
}

// fileUnits is what the syntax pass found in one file.
type fileUnits struct {
	spans   []span
	symbols []symbolRow
	edges   []edgeRow
}

// chunkID is a chunk's stable id: it depends on the file, the unit's kind
// and symbol, the unit's ordinal among units of the same kind and symbol,
// and the part of a split unit, never on line numbers, so that editing one
// function leaves the ids of the others unchanged.
func chunkID(file, kind, symbol string, ordinal, part int) string {
	h := sha256.New()
	h.Write([]byte(file + "\x00" + kind + "\x00" + symbol + "\x00" + strconv.Itoa(ordinal) + "\x00" + strconv.Itoa(part)))
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// buildChunks turns spans into chunks of at most maxLines lines (longer
// spans are cut into windows of size lines with overlap), with stable ids.
func buildChunks(rel string, lines []string, spans []span, maxLines, size, overlap int) []chunk {
	prefix := pathTokens(rel)
	ordinals := map[string]int{}
	var out []chunk
	for _, sp := range spans {
		if sp.start < 1 || sp.end > len(lines) || sp.start > sp.end {
			continue
		}
		key := sp.kind + "\x00" + sp.symbol
		ord := ordinals[key]
		ordinals[key]++
		body := lines[sp.start-1 : sp.end]
		symTokens := ""
		if sp.symbol != "" {
			symTokens = tokenText(sp.symbol) + " "
		}
		var parts []chunk
		if len(body) <= maxLines {
			content := strings.Join(body, "\n")
			parts = []chunk{{lineStart: sp.start, lineEnd: sp.end, content: content, tokens: tokenText(content)}}
		} else {
			parts = chunkLines(body, size, overlap, "")
			for i := range parts {
				parts[i].lineStart += sp.start - 1
				parts[i].lineEnd += sp.start - 1
			}
		}
		for i, c := range parts {
			c.id = chunkID(rel, sp.kind, sp.symbol, ord, i)
			c.symbol = sp.symbol
			c.kind = sp.kind
			c.names = sp.names
			c.tokens = strings.TrimSpace(symTokens + c.tokens)
			c.pathTokens = prefix
			out = append(out, c)
		}
	}
	return out
}

// goUnits parses a Go file and returns its declarations as spans (each
// with its doc comment and any comments before it), its symbols and its
// import and call edges. pkgPath qualifies symbol ids. ok is false when the
// file does not parse.
func goUnits(rel, src string, nLines int, pkgPath string) (fileUnits, bool) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return fileUnits{}, false
	}
	g := &goFile{fset: fset, f: f, src: src, rel: rel, pkgPath: pkgPath, imports: map[string]string{}}
	g.header()
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			g.funcDecl(d)
		case *ast.GenDecl:
			if d.Tok != token.IMPORT {
				g.genDecl(d)
			}
		}
	}
	g.u.edges = append(g.u.edges, goTypeEdges(f, rel, pkgPath, g.imports, g.line)...)
	g.u.spans = coverGaps(g.u.spans, nLines)
	return g.u, true
}

// goFile is a parsed Go file whose units are being collected.
type goFile struct {
	fset              *token.FileSet
	f                 *ast.File
	src, rel, pkgPath string
	// imports maps an import's name in the file to its path.
	imports map[string]string
	u       fileUnits
}

func (g *goFile) line(p token.Pos) int { return g.fset.Position(p).Line }

func (g *goFile) qualify(parts ...string) string {
	return g.pkgPath + "." + strings.Join(parts, ".")
}

func (g *goFile) addSymbol(name, kind, recv string, start, end int, sig, doc string) {
	parts := []string{name}
	if recv != "" {
		parts = []string{recv, name}
	}
	g.u.symbols = append(g.u.symbols, symbolRow{
		id: g.qualify(parts...), name: name, kind: kind, path: g.rel, pkg: g.pkgPath,
		signature: sig, doc: strings.TrimSpace(doc), lineStart: start, lineEnd: end,
	})
}

// header records the file's imports (and their edges) and its header
// span: the package clause through the last import declaration.
func (g *goFile) header() {
	headerEnd := g.line(g.f.Name.End())
	for _, imp := range g.f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
			continue
		}
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		g.imports[name] = p
		g.u.edges = append(g.u.edges, edgeRow{source: "file:" + g.rel, target: p, kind: "imports", path: g.rel, line: g.line(imp.Pos())})
	}
	for _, d := range g.f.Decls {
		if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.IMPORT {
			headerEnd = max(headerEnd, g.line(gd.End()))
		}
	}
	g.u.spans = append(g.u.spans, span{start: 1, end: headerEnd, symbol: g.f.Name.Name, kind: kindImports})
}

// funcDecl records a function or method: its symbol, its span and the
// calls of its body.
func (g *goFile) funcDecl(d *ast.FuncDecl) {
	start := g.line(d.Pos())
	if d.Doc != nil {
		start = g.line(d.Doc.Pos())
	}
	end := g.line(d.End())
	kind, recv, symbol := kindFunction, "", d.Name.Name
	if d.Recv != nil && len(d.Recv.List) > 0 {
		kind, recv = kindMethod, receiverName(d.Recv.List[0].Type)
		symbol = recv + "." + d.Name.Name
	}
	sigEnd := d.End()
	if d.Body != nil {
		sigEnd = d.Body.Lbrace
	}
	sig := strings.TrimSpace(g.src[g.fset.Position(d.Pos()).Offset:g.fset.Position(sigEnd).Offset])
	g.addSymbol(d.Name.Name, kind, recv, start, end, sig, d.Doc.Text())
	g.u.spans = append(g.u.spans, span{start: start, end: end, symbol: symbol, kind: kind, names: []string{d.Name.Name}})
	if d.Body != nil {
		source := g.qualify(strings.Split(symbol, ".")...)
		g.u.edges = append(g.u.edges, callEdges(d.Body, source, g.rel, g.pkgPath, g.imports, g.line)...)
	}
}

// genDecl records a type, const or var declaration: one span for the
// declaration (one per type of a parenthesised group of types) and a
// symbol per name.
func (g *goFile) genDecl(d *ast.GenDecl) {
	if d.Tok == token.TYPE && d.Lparen.IsValid() {
		g.typeGroup(d)
		return
	}
	start := g.line(d.Pos())
	if d.Doc != nil {
		start = g.line(d.Doc.Pos())
	}
	end := g.line(d.End())
	kind := map[token.Token]string{token.TYPE: kindType, token.CONST: kindConst, token.VAR: kindVar}[d.Tok]
	var names []string
	for _, s := range d.Specs {
		switch s := s.(type) {
		case *ast.TypeSpec:
			names = append(names, s.Name.Name)
			g.addSymbol(s.Name.Name, kindType, "", start, end, "type "+s.Name.Name, d.Doc.Text())
		case *ast.ValueSpec:
			doc := s.Doc
			if doc == nil {
				doc = d.Doc
			}
			for _, n := range s.Names {
				if n.Name == "_" {
					continue
				}
				names = append(names, n.Name)
				g.addSymbol(n.Name, kind, "", g.line(s.Pos()), g.line(s.End()), d.Tok.String()+" "+n.Name, doc.Text())
			}
		}
	}
	symbol := ""
	if len(names) > 0 {
		symbol = names[0]
	}
	g.u.spans = append(g.u.spans, span{start: start, end: end, symbol: symbol, kind: kind, names: names})
}

// typeGroup records a parenthesised group of types, each a unit of its
// own.
func (g *goFile) typeGroup(d *ast.GenDecl) {
	for _, s := range d.Specs {
		ts := s.(*ast.TypeSpec)
		ss, se := g.line(ts.Pos()), g.line(ts.End())
		doc := ts.Doc
		if doc == nil {
			doc = ts.Comment
		}
		if ts.Doc != nil {
			ss = g.line(ts.Doc.Pos())
		}
		g.addSymbol(ts.Name.Name, kindType, "", ss, se, "type "+ts.Name.Name, doc.Text())
		g.u.spans = append(g.u.spans, span{start: ss, end: se, symbol: ts.Name.Name, kind: kindType, names: []string{ts.Name.Name}})
	}
}

// receiverName is the type name of a method receiver, without pointer or
// type parameters.
func receiverName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return "?"
		}
	}
}

// goBuiltins are never call targets worth an edge.
var goBuiltins = map[string]bool{
	"append": true, "cap": true, "clear": true, "close": true, "complex": true, "copy": true, "delete": true,
	"imag": true, "len": true, "make": true, "max": true, "min": true, "new": true, "panic": true,
	"print": true, "println": true, "real": true, "recover": true, "string": true, "int": true,
	"byte": true, "rune": true, "float64": true, "int64": true, "uint64": true, "uint32": true, "int32": true,
	"uint": true, "uint8": true, "error": true, "bool": true, "float32": true, "uintptr": true,
}

// callEdges lists the distinct calls in body: package functions through
// imports ("net/http.Get"), same-package functions ("<pkg>.helper"), and
// method calls whose receiver type is unknown ("*.Close").
func callEdges(body *ast.BlockStmt, source, rel, pkgPath string, imports map[string]string, line func(token.Pos) int) []edgeRow {
	seen := map[string]bool{}
	var out []edgeRow
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		target := ""
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			if !goBuiltins[fn.Name] {
				target = pkgPath + "." + fn.Name
			}
		case *ast.SelectorExpr:
			if x, ok := fn.X.(*ast.Ident); ok {
				if p, ok := imports[x.Name]; ok {
					target = p + "." + fn.Sel.Name
					break
				}
			}
			target = "*." + fn.Sel.Name
		}
		if target != "" && !seen[target] {
			seen[target] = true
			out = append(out, edgeRow{source: source, target: target, kind: "calls", path: rel, line: line(call.Pos())})
		}
		return true
	})
	return out
}

// coverGaps sorts spans and widens each to start just after the previous
// one, so comments and blank lines between declarations belong to the
// declaration that follows; trailing lines join the last span. Leading
// blank lines of a span are trimmed by the caller's content.
func coverGaps(spans []span, nLines int) []span {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	out := spans[:0]
	prevEnd := 0
	for _, sp := range spans {
		if sp.end <= prevEnd {
			continue // nested or duplicate
		}
		if sp.start > prevEnd+1 {
			sp.start = prevEnd + 1
		} else if sp.start <= prevEnd {
			sp.start = prevEnd + 1
		}
		out = append(out, sp)
		prevEnd = sp.end
	}
	if len(out) > 0 && prevEnd < nLines {
		out[len(out)-1].end = nLines
	}
	return out
}

// heuristic definition patterns per language; group 1 (or the last
// non-empty group) names the symbol.
type defPattern struct {
	re   *regexp.Regexp
	kind string
}

var (
	pyDefs = []defPattern{
		{regexp.MustCompile(`^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)`), kindFunction},
		{regexp.MustCompile(`^\s*class\s+([A-Za-z_]\w*)`), kindClass},
	}
	jsDefs = []defPattern{
		{regexp.MustCompile(`^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)`), kindFunction},
		{regexp.MustCompile(`^\s*(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+([A-Za-z_$][\w$]*)`), kindClass},
		{regexp.MustCompile(`^(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*(?::[^=]+)?=\s*(?:async\s*)?(?:\([^)]*\)|[A-Za-z_$][\w$]*)\s*=>`), kindFunction},
		{regexp.MustCompile(`^(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=\s*(?:async\s+)?function`), kindFunction},
		{regexp.MustCompile(`^\s*(?:export\s+)?(?:declare\s+)?(?:interface|type|enum)\s+([A-Za-z_$][\w$]*)`), kindType},
	}
	javaDefs = []defPattern{
		{regexp.MustCompile(`^\s*(?:(?:public|private|protected|internal|static|final|abstract|sealed|open|data|partial)\s+)*(?:class|interface|enum|record|object|struct)\s+([A-Za-z_]\w*)`), kindClass},
		{regexp.MustCompile(`^\s*(?:(?:public|private|protected|internal|static|final|abstract|synchronized|override|suspend|async|virtual|native)\s+)+(?:fun\s+)?[\w<>\[\],.?\s]*?\b([A-Za-z_]\w*)\s*\([^;]*$`), kindFunction},
		{regexp.MustCompile(`^\s*fun\s+(?:<[^>]*>\s*)?(?:[\w.]+\.)?([A-Za-z_]\w*)\s*\(`), kindFunction},
	}
	rustDefs = []defPattern{
		{regexp.MustCompile(`^\s*(?:pub(?:\([\w:]+\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"\w+"\s+)?fn\s+([A-Za-z_]\w*)`), kindFunction},
		{regexp.MustCompile(`^\s*(?:pub(?:\([\w:]+\))?\s+)?(?:struct|enum|trait|union|type)\s+([A-Za-z_]\w*)`), kindType},
		{regexp.MustCompile(`^\s*impl\b(?:<[^>]*>)?\s+(?:[\w:<>, ]+\s+for\s+)?([A-Za-z_]\w*)`), kindClass},
		{regexp.MustCompile(`^\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+([A-Za-z_]\w*)\s*\{`), kindBlock},
	}
	cDefs = []defPattern{
		{regexp.MustCompile(`^(?:(?:struct|class|enum|union|namespace)\s+)([A-Za-z_]\w*)[^;]*$`), kindType},
		{regexp.MustCompile(`^(?:template\s*<[^>]*>\s*)?(?:[A-Za-z_][\w:<>,*&\s]*?[\s*&])?((?:[A-Za-z_]\w*::)*~?[A-Za-z_]\w*)\s*\([^;]*$`), kindFunction},
	}
	shDefs = []defPattern{
		{regexp.MustCompile(`^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{?`), kindFunction},
	}
	mdDefs = []defPattern{
		{regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`), kindSection},
	}
	cKeywords = map[string]bool{"if": true, "for": true, "while": true, "switch": true, "return": true, "else": true, "do": true, "case": true, "sizeof": true}
)

// languagePatterns picks the definition patterns of a language.
func languagePatterns(lang string) []defPattern {
	switch lang {
	case "python":
		return pyDefs
	case "javascript", "typescript", "vue", "svelte":
		return jsDefs
	case "java", "kotlin", "scala", "csharp", "dart", "swift":
		return javaDefs
	case "rust":
		return rustDefs
	case "c", "cpp", "objective-c":
		return cDefs
	case "shell":
		return shDefs
	case "markdown":
		return mdDefs
	}
	return nil
}

// isLeadComment reports whether a line is a comment, decorator or
// attribute that belongs to the definition below it.
func isLeadComment(l string) bool {
	t := strings.TrimSpace(l)
	for _, p := range []string{"//", "#", "/*", "*", "@", "--", ";;", `"""`, "'''"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// heuristicUnits splits a non-Go file at the lines that start a definition
// (by language pattern), moving each cut up over the comments, decorators
// and attributes above the definition. Files of unknown structure become
// one span, cut into windows by the caller when long.
func heuristicUnits(lang string, lines []string) []span {
	pats := languagePatterns(lang)
	if len(lines) == 0 {
		return nil
	}
	var spans []span
	cur := span{start: 1, kind: kindBlock}
	inFence := false
	for i, l := range lines {
		if lang == "markdown" && strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		if pats == nil || inFence {
			continue
		}
		sym, kind, ok := matchDef(pats, l)
		if !ok {
			continue
		}
		cut := i + 1
		for cut-1 >= cur.start+1 && cut-2 >= 0 && isLeadComment(lines[cut-2]) && lang != "markdown" {
			cut--
		}
		if cut > cur.start {
			cur.end = cut - 1
			spans = append(spans, cur)
		}
		cur = span{start: cut, symbol: sym, kind: kind, names: []string{lastPart(sym)}}
	}
	cur.end = len(lines)
	spans = append(spans, cur)
	return spans
}

func matchDef(pats []defPattern, l string) (string, string, bool) {
	for _, p := range pats {
		m := p.re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := ""
		for j := len(m) - 1; j >= 1; j-- {
			if m[j] != "" {
				name = m[j]
				break
			}
		}
		if name == "" || cKeywords[lastPart(name)] {
			continue
		}
		if len(name) > 120 {
			name = name[:120]
		}
		return name, p.kind, true
	}
	return "", "", false
}

func lastPart(s string) string {
	if i := strings.LastIndex(s, "::"); i >= 0 {
		return s[i+2:]
	}
	return s
}
