package librarian

import (
	"path"
	"regexp"
	"strings"
)

// Symbols and edges for languages other than Go, by heuristic: the
// definitions are the spans the per-language patterns cut a file at (with
// their enclosing class found by indentation), imports are read from the
// language's import statements, and calls are kept only where they resolve:
// to a definition of the same file, to a name the file imports, or through
// an imported module's alias. Ids follow the Go scheme "<module>.<Name>" and
// "<module>.<Class>.<Name>", where the module is the dotted module path for
// Python, the package clause for Java and Kotlin, and the path without its
// extension for the others.

var (
	pyImport     = regexp.MustCompile(`^\s*import\s+(.+)$`)
	pyFromImport = regexp.MustCompile(`^\s*from\s+(\.*[\w.]*)\s+import\s+(.+)$`)
	jsImportFrom = regexp.MustCompile(`^\s*(?:import|export)\s+(.*?)\s*from\s*['"]([^'"]+)['"]`)
	jsFromTail   = regexp.MustCompile(`^\s*\}\s*from\s*['"]([^'"]+)['"]`)
	jsImportBare = regexp.MustCompile(`^\s*import\s*['"]([^'"]+)['"]`)
	jsRequire    = regexp.MustCompile(`(?:^|[^\w$.])(?:require|import)\s*\(\s*['"]([^'"]+)['"]\s*\)`)
	jsConstReq   = regexp.MustCompile(`^\s*(?:const|let|var)\s+(\{[^}]*\}|[A-Za-z_$][\w$]*)\s*=\s*require\s*\(\s*['"]([^'"]+)['"]`)
	javaImport   = regexp.MustCompile(`^\s*import\s+(static\s+)?([\w.]+(?:\.\*)?)\s*;?\s*$`)
	javaPackage  = regexp.MustCompile(`^\s*package\s+([\w.]+)\s*;?\s*$`)
	rustUse      = regexp.MustCompile(`^\s*(?:pub(?:\([\w:]+\))?\s+)?use\s+((?:\w+::)*\w+)(?:::\{([^}]*)\})?`)
	rustMod      = regexp.MustCompile(`^\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+(\w+)\s*;`)
	rustCrate    = regexp.MustCompile(`^\s*extern\s+crate\s+(\w+)`)
	cInclude     = regexp.MustCompile(`^\s*#\s*include\s*[<"]([^>"]+)[>"]`)
	callRe       = regexp.MustCompile(`([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)?)\s*\(`)
	stringLit    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	callKeywords = map[string]bool{
		"if": true, "for": true, "while": true, "switch": true, "return": true, "catch": true, "sizeof": true,
		"print": true, "super": true, "this": true, "new": true, "typeof": true, "function": true, "match": true,
		"elif": true, "not": true, "and": true, "or": true, "in": true, "assert": true, "yield": true, "await": true,
		"lambda": true, "def": true, "class": true, "fn": true, "loop": true, "else": true, "with": true, "except": true,
	}
)

// edgeLanguage maps a language onto the family whose import syntax it
// shares, "" for languages without edges.
func edgeLanguage(lang string) string {
	switch lang {
	case "python":
		return "python"
	case "javascript", "typescript", "vue", "svelte":
		return "javascript"
	case "java", "kotlin":
		return "java"
	case "rust":
		return "rust"
	case "c", "cpp", "objective-c":
		return "c"
	}
	return ""
}

// otherUnits finds the symbols and edges of a non-Go file from its spans.
func otherUnits(lang, rel string, lines []string, spans []span) ([]symbolRow, []edgeRow) {
	fam := edgeLanguage(lang)
	if fam == "" {
		return nil, nil
	}
	module := moduleOf(fam, rel, lines)
	sc := &importScan{fam: fam, rel: rel, module: module, lines: lines, imported: map[string]string{}}
	sc.scan()
	syms := definitions(fam, rel, module, languagePatterns(lang), lines, spans)
	local := map[string]string{}
	for _, s := range syms {
		key := s.name
		if s.kind == kindMethod {
			// Members by "<Class>.<name>", for bare calls inside the class.
			key = strings.TrimPrefix(s.id, module+".")
		}
		if _, ok := local[key]; !ok {
			local[key] = s.id
		}
	}
	edges := sc.edges
	for _, s := range syms {
		if s.kind == kindClass || s.kind == kindType {
			continue
		}
		edges = append(edges, callsIn(fam, rel, lines, s, local, sc.imported)...)
	}
	return syms, edges
}

// importScan reads the import statements of a non-Go file.
type importScan struct {
	fam, rel, module string
	lines            []string
	// edges are the file's import edges.
	edges []edgeRow
	// imported maps the names the file imports to qualified targets.
	imported map[string]string
}

// scan reads every line that may hold an import statement.
func (sc *importScan) scan() {
	for i, l := range sc.lines {
		n := i + 1
		if !maybeImport(sc.fam, l) {
			continue
		}
		switch sc.fam {
		case "python":
			sc.python(i, l)
		case "javascript":
			sc.javascript(l, n)
		case "java":
			if m := javaImport.FindStringSubmatch(l); m != nil {
				sc.add(m[2], n)
				if !strings.HasSuffix(m[2], ".*") {
					sc.imported[m[2][strings.LastIndex(m[2], ".")+1:]] = m[2]
				}
			}
		case "rust":
			sc.rust(l, n)
		case "c":
			if m := cInclude.FindStringSubmatch(l); m != nil {
				sc.add(m[1], n)
			}
		}
	}
}

// add records an import of target at line.
func (sc *importScan) add(target string, line int) {
	if target != "" {
		sc.edges = append(sc.edges, edgeRow{source: "file:" + sc.rel, target: target, kind: "imports", path: sc.rel, line: line})
	}
}

// python reads "from m import a, b" (whose parenthesised list may go on
// over the next lines) and "import m as n" at line index i.
func (sc *importScan) python(i int, l string) {
	n := i + 1
	if m := pyFromImport.FindStringSubmatch(l); m != nil {
		mod := resolvePyModule(sc.module, sc.rel, m[1])
		sc.add(mod, n)
		names := m[2]
		if strings.HasPrefix(strings.TrimSpace(names), "(") {
			for k := i + 1; k < len(sc.lines) && k < i+200 && !strings.Contains(names, ")"); k++ {
				names += "," + stripCode(sc.fam, sc.lines[k])
			}
			if end := strings.Index(names, ")"); end >= 0 {
				names = names[:end]
			}
		}
		for _, name := range splitNames(strings.Trim(names, "() \\")) {
			orig, local := asName(name)
			if orig != "*" && orig != "" {
				sc.imported[local] = mod + "." + orig
			}
		}
	} else if m := pyImport.FindStringSubmatch(l); m != nil {
		for _, name := range splitNames(m[1]) {
			orig, local := asName(name)
			sc.add(orig, n)
			sc.imported[local] = orig
		}
	}
}

// javascript reads import and export clauses, bare imports and requires.
func (sc *importScan) javascript(l string, n int) {
	if m := jsImportFrom.FindStringSubmatch(l); m != nil {
		target := resolveJSModule(sc.rel, m[2])
		sc.add(target, n)
		jsBindings(m[1], target, sc.imported)
	} else if m := jsFromTail.FindStringSubmatch(l); m != nil {
		// The end of a multi-line import or export clause.
		sc.add(resolveJSModule(sc.rel, m[1]), n)
	} else if m := jsImportBare.FindStringSubmatch(l); m != nil {
		sc.add(resolveJSModule(sc.rel, m[1]), n)
	} else if m := jsConstReq.FindStringSubmatch(l); m != nil {
		target := resolveJSModule(sc.rel, m[2])
		sc.add(target, n)
		jsBindings(m[1], target, sc.imported)
	} else {
		for _, m := range jsRequire.FindAllStringSubmatch(l, -1) {
			sc.add(resolveJSModule(sc.rel, m[1]), n)
		}
	}
}

// rust reads use declarations (with their braced lists), mod
// declarations and extern crates.
func (sc *importScan) rust(l string, n int) {
	if m := rustUse.FindStringSubmatch(l); m != nil {
		base := strings.TrimSuffix(m[1], "::")
		if m[2] == "" {
			sc.add(base, n)
			sc.imported[base[strings.LastIndex(base, ":")+1:]] = base
			return
		}
		for _, name := range splitNames(m[2]) {
			orig, local := asName(name)
			if orig == "self" {
				sc.add(base, n)
				continue
			}
			sc.add(base+"::"+orig, n)
			sc.imported[local] = base + "::" + orig
		}
	} else if m := rustMod.FindStringSubmatch(l); m != nil {
		sc.add(path.Join(path.Dir(sc.rel), m[1]), n)
	} else if m := rustCrate.FindStringSubmatch(l); m != nil {
		sc.add(m[1], n)
	}
}

// maybeImport is a cheap test that a line may hold an import statement.
func maybeImport(fam, l string) bool {
	switch fam {
	case "python", "java":
		return strings.Contains(l, "import")
	case "javascript":
		return strings.Contains(l, "import") || strings.Contains(l, "require") || strings.Contains(l, "export") || strings.Contains(l, "from")
	case "rust":
		return strings.Contains(l, "use ") || strings.Contains(l, "mod ") || strings.Contains(l, "crate ")
	case "c":
		return strings.Contains(l, "include")
	}
	return false
}

// moduleOf names the module a file's definitions belong to.
func moduleOf(fam, rel string, lines []string) string {
	noExt := strings.TrimSuffix(rel, path.Ext(rel))
	switch fam {
	case "python":
		return strings.ReplaceAll(strings.TrimSuffix(strings.TrimSuffix(noExt, "/__init__"), "__init__"), "/", ".")
	case "java":
		for _, l := range lines[:min(len(lines), 50)] {
			if m := javaPackage.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		}
		return strings.ReplaceAll(path.Dir(rel), "/", ".")
	}
	return noExt
}

// resolvePyModule makes a relative import ("from .x import y") absolute.
func resolvePyModule(module, rel, spec string) string {
	dots := len(spec) - len(strings.TrimLeft(spec, "."))
	if dots == 0 {
		return spec
	}
	pkg := strings.Split(module, ".")
	if path.Base(rel) != "__init__.py" {
		pkg = pkg[:len(pkg)-1] // the module's package
	}
	up := dots - 1
	if up > len(pkg) {
		up = len(pkg)
	}
	parts := pkg[:len(pkg)-up]
	if rest := spec[dots:]; rest != "" {
		parts = append(append([]string(nil), parts...), rest)
	}
	return strings.Join(parts, ".")
}

// resolveJSModule makes a relative specifier a repository path without
// extension; package specifiers stay as written.
func resolveJSModule(rel, spec string) string {
	if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") {
		return spec
	}
	p := path.Join(path.Dir(rel), spec)
	switch ext := path.Ext(p); ext {
	case ".js", ".ts", ".jsx", ".tsx", ".mjs", ".cjs":
		p = strings.TrimSuffix(p, ext)
	}
	return strings.TrimSuffix(p, "/index")
}

// jsBindings records the local names an import clause binds.
func jsBindings(clause, target string, imported map[string]string) {
	clause = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(clause), "type "))
	if i := strings.Index(clause, "{"); i >= 0 {
		j := strings.Index(clause, "}")
		if j > i {
			for _, name := range splitNames(clause[i+1 : j]) {
				orig, local := asName(strings.TrimPrefix(name, "type "))
				imported[local] = target + "." + orig
			}
		}
		clause = clause[:i]
	}
	for _, part := range strings.Split(clause, ",") {
		part = strings.TrimSpace(part)
		if rest, ok := strings.CutPrefix(part, "* as "); ok {
			imported[strings.TrimSpace(rest)] = target
		} else if part != "" && !strings.ContainsAny(part, " {}") {
			imported[part] = target + ".default"
		}
	}
}

// splitNames splits a comma-separated name list.
func splitNames(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// asName splits "x as y" (or "x: y" in a JavaScript destructuring) into
// the original and the local name.
func asName(s string) (string, string) {
	f := strings.Fields(strings.ReplaceAll(s, ":", " as "))
	if len(f) == 3 && f[1] == "as" {
		return f[0], f[2]
	}
	if len(f) == 0 {
		return "", ""
	}
	return f[0], f[0]
}

// definitions turns the file's definition spans into symbols, qualifying
// members with the class, impl or type whose body (by indentation) holds
// them.
func definitions(fam, rel, module string, pats []defPattern, lines []string, spans []span) []symbolRow {
	type open struct {
		indent int
		name   string
		end    int
	}
	var stack []open
	var out []symbolRow
	for _, sp := range spans {
		if sp.symbol == "" || sp.kind == kindBlock || sp.kind == kindSection {
			continue
		}
		defLine := sp.start
		for defLine < sp.end {
			if name, _, ok := matchDef(pats, lines[defLine-1]); ok && name == sp.symbol {
				break
			}
			defLine++
		}
		text := lines[defLine-1]
		indent := len(text) - len(strings.TrimLeft(text, " \t"))
		for len(stack) > 0 && (indent <= stack[len(stack)-1].indent || defLine > stack[len(stack)-1].end) {
			stack = stack[:len(stack)-1]
		}
		end := blockEnd(fam, lines, defLine, sp.end)
		name := lastPart(sp.symbol)
		kind := sp.kind
		id := module + "." + name
		if len(stack) > 0 {
			id = module + "." + stack[len(stack)-1].name + "." + name
			if kind == kindFunction {
				kind = kindMethod
			}
		} else if strings.Contains(sp.symbol, "::") {
			// C++ out-of-class definitions: Class::method.
			id = module + "." + strings.ReplaceAll(sp.symbol, "::", ".")
			if kind == kindFunction {
				kind = kindMethod
			}
		}
		out = append(out, symbolRow{
			id: id, name: name, kind: kind, path: rel, pkg: module,
			signature: truncateRunes(strings.TrimSpace(text), 200), doc: leadDoc(fam, lines, sp.start, defLine, end),
			lineStart: defLine, lineEnd: end,
		})
		if sp.kind == kindClass || sp.kind == kindType {
			stack = append(stack, open{indent: indent, name: name, end: end})
		}
	}
	return out
}

// blockEnd is the last line of the definition at line def: by indentation
// for Python, by braces for the others (falling back to limit, the end of
// the span, when no body opens).
func blockEnd(fam string, lines []string, def, limit int) int {
	if fam == "python" {
		text := lines[def-1]
		indent := len(text) - len(strings.TrimLeft(text, " \t"))
		end := def
		for n := def + 1; n <= len(lines); n++ {
			l := lines[n-1]
			t := strings.TrimSpace(l)
			if t == "" {
				continue
			}
			if len(l)-len(strings.TrimLeft(l, " \t")) <= indent && !strings.HasPrefix(t, ")") {
				break
			}
			end = n
		}
		return end
	}
	depth, opened := 0, false
	for n := def; n <= len(lines); n++ {
		l := stripCode(fam, lines[n-1])
		for _, r := range l {
			switch r {
			case '{':
				depth++
				opened = true
			case '}':
				depth--
			}
		}
		if opened && depth <= 0 {
			return n
		}
		if !opened && (strings.HasSuffix(strings.TrimSpace(l), ";") || n-def >= 5) {
			return max(limit, def)
		}
	}
	return max(limit, def)
}

// stripCode removes string literals and line comments from a line.
func stripCode(fam, l string) string {
	if strings.ContainsAny(l, "\"'`") {
		l = stringLit.ReplaceAllString(l, `""`)
	}
	marker := "//"
	if fam == "python" {
		marker = "#"
	}
	if i := strings.Index(l, marker); i >= 0 {
		l = l[:i]
	}
	return l
}

// leadDoc is a definition's documentation: the comment lines above it, or
// a Python docstring's first line.
func leadDoc(fam string, lines []string, spanStart, def, end int) string {
	var doc []string
	for n := spanStart; n < def; n++ {
		t := strings.TrimSpace(lines[n-1])
		if strings.HasPrefix(t, "@") || strings.HasPrefix(t, "#[") {
			continue
		}
		t = strings.TrimLeft(t, "/*#!")
		t = strings.TrimSpace(strings.TrimSuffix(t, "*/"))
		if t != "" {
			doc = append(doc, t)
		}
	}
	if len(doc) == 0 && fam == "python" && def < end {
		t := strings.TrimSpace(lines[def])
		for _, q := range []string{`"""`, `'''`} {
			if rest, ok := strings.CutPrefix(t, q); ok {
				doc = append(doc, strings.TrimSpace(strings.TrimSuffix(rest, q)))
			}
		}
	}
	return truncateRunes(strings.Join(doc, "\n"), 1000)
}

// callsIn finds the resolvable calls in a definition's body.
func callsIn(fam, rel string, lines []string, s symbolRow, local, imported map[string]string) []edgeRow {
	var out []edgeRow
	seen := map[string]bool{}
	class := ""
	if s.kind == kindMethod {
		rest := strings.TrimSuffix(s.id, "."+s.name)
		class = rest[strings.LastIndex(rest, ".")+1:]
	}
	for n := s.lineStart; n <= s.lineEnd && n <= len(lines); n++ {
		if !strings.Contains(lines[n-1], "(") {
			continue
		}
		l := stripCode(fam, lines[n-1])
		if n == s.lineStart {
			// The definition's own name and parameters are not calls.
			if i := strings.Index(l, s.name); i >= 0 {
				l = l[i+len(s.name):]
				if j := strings.Index(l, "("); j >= 0 {
					l = l[j+1:]
				}
			}
		}
		for _, m := range callRe.FindAllStringSubmatchIndex(l, -1) {
			if m[0] > 0 && strings.ContainsRune(".$:>", rune(l[m[0]-1])) && !strings.HasPrefix(l[m[2]:m[3]], "self.") && !strings.HasPrefix(l[m[2]:m[3]], "this.") {
				// A member of something the pattern did not capture.
				continue
			}
			target := resolveCall(fam, l[m[2]:m[3]], class, s, local, imported)
			if target == "" || target == s.id || seen[target] {
				continue
			}
			seen[target] = true
			out = append(out, edgeRow{source: s.id, target: target, kind: "calls", path: rel, line: n})
		}
	}
	return out
}

// resolveCall resolves a called name ("f" or "x.f") to a symbol id, or "".
func resolveCall(fam, name, class string, s symbolRow, local, imported map[string]string) string {
	recv, fn, qualified := strings.Cut(name, ".")
	if !qualified {
		if callKeywords[name] {
			return ""
		}
		if id, ok := local[class+"."+name]; ok && class != "" && fam != "python" {
			// A bare call of a member from inside its class (Python needs
			// self).
			return id
		}
		if id, ok := local[name]; ok {
			return id
		}
		return imported[name]
	}
	if (recv == "self" || recv == "this") && class != "" {
		return s.pkg + "." + class + "." + fn
	}
	if t, ok := imported[recv]; ok {
		if fam == "rust" {
			return t + "::" + fn
		}
		return t + "." + fn
	}
	return ""
}
