package librarian

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	librarianv1 "sylk.dev/sylk/gen/go/sylk/librarian/v1"
)

// goEdgeFixture is a small Go module with one relation of each kind.
var goEdgeFixture = map[string]string{
	"go.mod": "module example.com/zoo\n\ngo 1.22\n",
	"animal/animal.go": `package animal

import (
	"io"

	"example.com/zoo/food"
)

// Speaker makes a sound.
type Speaker interface {
	Speak() string
	Volume(level int) int
}

// Loud is a Speaker that can shout.
type Loud interface {
	Speaker
	Shout() string
}

// Base holds what every animal has.
type Base struct {
	Name string
}

// Dog is an animal.
type Dog struct {
	Base
	*food.Bowl
	Toys   []Toy
	Meals  map[string]food.Meal
	Out    io.Writer
	Friend *Dog
}

// Toy is a plaything.
type Toy struct{}

// List is a generic list.
type List[T any] struct {
	Items []T
}
`,
	"animal/dog.go": `package animal

import "example.com/zoo/food"

func (d *Dog) Speak() string { return "woof" }

func (d *Dog) Volume(level int) int { return level * 2 }

// Feed gives the dog a meal from a bowl.
func Feed(d *Dog, b food.Bowl, n int) (food.Meal, error) {
	return b.Serve(n), nil
}

// Adopt returns a new dog.
func Adopt[T any](name string, extra T) *Dog { return &Dog{Base: Base{Name: name}} }

func (l *List[T]) Add(v T) Toy { l.Items = append(l.Items, v); return Toy{} }
`,
	"animal/cat.go": `package animal

// Cat has Speaker's method names, but Volume takes no level.
type Cat struct{}

func (Cat) Speak() string { return "meow" }

func (Cat) Volume() int { return 1 }
`,
	"food/food.go": `package food

// Meal is food.
type Meal struct{ Grams int }

// Bowl holds meals.
type Bowl struct{ Meals []Meal }

// Serve takes a meal out.
func (b Bowl) Serve(n int) Meal { return Meal{Grams: n} }
`,
}

func goFixtureEdges(t *testing.T, rel string) []edgeRow {
	t.Helper()
	src := goEdgeFixture[rel]
	w := &walker{modulePath: "example.com/zoo"}
	u, ok := goUnits(rel, src, len(splitLines(src)), w.goPackage(rel))
	require.True(t, ok)
	return w.finishEdges(rel, u.symbols, u.edges)
}

func edgePairs(edges []edgeRow, kind string) []string {
	var out []string
	for _, e := range edges {
		if e.kind == kind {
			out = append(out, fmt.Sprintf("%s -> %s", e.source, e.target))
		}
	}
	sort.Strings(out)
	return out
}

func TestGoTypeEdges(t *testing.T) {
	t.Parallel()
	const a, f = "example.com/zoo/animal", "example.com/zoo/food"
	types := goFixtureEdges(t, "animal/animal.go")
	require.Equal(t, []string{
		a + ".Dog -> " + a + ".Base",
		a + ".Dog -> " + f + ".Bowl",
		a + ".Loud -> " + a + ".Speaker",
	}, edgePairs(types, edgeEmbeds))
	// Predeclared types, type parameters and types outside the repository
	// (io.Writer) are no targets.
	require.Equal(t, []string{
		a + ".Dog -> " + a + ".Dog",
		a + ".Dog -> " + a + ".Toy",
		a + ".Dog -> " + f + ".Meal",
	}, edgePairs(types, edgeHasField))
	require.Equal(t, []string{
		a + ".Loud -> " + a + ".Loud.Shout",
		a + ".Speaker -> " + a + ".Speaker.Speak",
		a + ".Speaker -> " + a + ".Speaker.Volume",
	}, edgePairs(types, edgeHasMethod))
	require.Equal(t, []string{
		"file:animal/animal.go -> " + a + ".Base",
		"file:animal/animal.go -> " + a + ".Dog",
		"file:animal/animal.go -> " + a + ".List",
		"file:animal/animal.go -> " + a + ".Loud",
		"file:animal/animal.go -> " + a + ".Speaker",
		"file:animal/animal.go -> " + a + ".Toy",
	}, edgePairs(types, edgeDefines))

	funcs := goFixtureEdges(t, "animal/dog.go")
	require.Equal(t, []string{
		a + ".Dog -> " + a + ".Dog.Speak",
		a + ".Dog -> " + a + ".Dog.Volume",
		a + ".List -> " + a + ".List.Add",
	}, edgePairs(funcs, edgeHasMethod))
	require.Equal(t, []string{
		a + ".Adopt -> " + a + ".Dog",
		a + ".Feed -> " + f + ".Meal",
		a + ".List.Add -> " + a + ".Toy",
	}, edgePairs(funcs, edgeReturns))
	require.Equal(t, []string{
		a + ".Feed -> " + a + ".Dog",
		a + ".Feed -> " + f + ".Bowl",
	}, edgePairs(funcs, edgeReceives))
	for _, e := range funcs {
		if e.kind == edgeReceives && e.target == a+".Dog" {
			require.Equal(t, 10, e.line)
		}
	}
	require.Len(t, edgePairs(funcs, edgeDefines), 5)
	arity := map[string]string{}
	for _, e := range append(types, funcs...) {
		if e.kind == edgeHasMethod {
			arity[e.target] = e.arity
		}
	}
	require.Equal(t, "0:1", arity[a+".Speaker.Speak"])
	require.Equal(t, "1:1", arity[a+".Speaker.Volume"])
	require.Equal(t, "1:1", arity[a+".Dog.Volume"])
}

func TestGoTypeEdgesQueries(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	ctx := as(t, "t1")
	root := gitRepo(t, goEdgeFixture)
	repo := create(t, ctx, h.svc, root, true)
	const a = "example.com/zoo/animal"
	targets := func(edges []*librarianv1.Edge, source bool) []string {
		var out []string
		for _, e := range edges {
			if source {
				out = append(out, e.GetSource())
			} else {
				out = append(out, e.GetTarget())
			}
		}
		sort.Strings(out)
		return out
	}

	// Dog's methods cover Speaker (Speak, Volume) but not Loud (Shout); Cat's
	// Volume has another arity.
	impl, err := h.svc.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo.GetName(), Symbol: a + ".Dog", EdgeKind: "implements"})
	require.NoError(t, err)
	require.Equal(t, []string{a + ".Speaker"}, targets(impl.GetEdges(), false))
	require.Equal(t, "animal/animal.go", impl.GetEdges()[0].GetPath())
	implBy, err := h.svc.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: repo.GetName(), Symbol: a + ".Speaker", EdgeKind: "implements"})
	require.NoError(t, err)
	require.Equal(t, []string{a + ".Dog"}, targets(implBy.GetEdges(), true))

	// DefinedIn is the reverse of defines.
	in, err := h.svc.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: repo.GetName(), Symbol: a + ".Feed", EdgeKind: "defines"})
	require.NoError(t, err)
	require.Equal(t, []string{"file:animal/dog.go"}, targets(in.GetEdges(), true))

	// Who receives a food.Bowl, who returns a Dog.
	recv, err := h.svc.GetDependents(ctx, &librarianv1.GetDependentsRequest{Repository: repo.GetName(), Symbol: "example.com/zoo/food.Bowl", EdgeKind: "receives"})
	require.NoError(t, err)
	require.Equal(t, []string{a + ".Feed"}, targets(recv.GetEdges(), true))

	// Without a kind, all of Dog's outgoing edges.
	all, err := h.svc.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo.GetName(), Symbol: a + ".Dog"})
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, e := range all.GetEdges() {
		kinds[e.GetKind()]++
	}
	require.Equal(t, map[string]int{"embeds": 2, "has_field": 3, "has_method": 2, "implements": 1}, kinds)

	_, err = h.svc.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo.GetName(), Symbol: a + ".Dog", EdgeKind: "owns"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	// A delta that drops Volume from Dog drops the implements edge.
	writeFile(t, root, "animal/dog.go", "package animal\n\nfunc (d *Dog) Speak() string { return \"woof\" }\n")
	_, err = h.svc.IndexRepository(ctx, &librarianv1.IndexRepositoryRequest{Name: repo.GetName(), Wait: true})
	require.NoError(t, err)
	impl, err = h.svc.GetDependencies(ctx, &librarianv1.GetDependenciesRequest{Repository: repo.GetName(), Symbol: a + ".Dog", EdgeKind: "implements"})
	require.NoError(t, err)
	require.Empty(t, impl.GetEdges())
}
