package librarian

// defaultIgnore is the built-in ignore list: dependency trees, build
// output, lock files and minified bundles. Build output directories are
// anchored to the root, as a repository's own .gitignore would write them:
// a package named build deep in the tree is source, not output.
// Dependency trees are ignored at any depth.
var defaultIgnore = []string{
	"vendor/", "node_modules/", "/dist/", "/build/", "/target/", "__pycache__/", ".venv/",
	"package-lock.json", "yarn.lock", "pnpm-lock.yaml", "go.sum", "Cargo.lock", "poetry.lock",
	"Gemfile.lock", "composer.lock", "*.min.js", "*.min.css", "*.map", "*.pb.go", "*_pb2.py",
}
