// The fixture tasks are data, not code of sylk.dev/sylk: this file makes the
// directory a module of its own, so that the tasks' Go sources (the hidden
// tests especially, which have no go.mod beside them) stay out of the main
// module's builds, vet and tests. Each task's repo/ has its own go.mod.
module example.com/evaltasks

go 1.22
