package schemas

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// The validator evaluates a schema at an input value by evaluating, at the
// same value, its in-place subschemas ($ref and the dynamic references,
// allOf, anyOf, oneOf, not, if/then/else, dependentSchemas), and, at the
// value's members, its member subschemas (properties, patternProperties,
// additionalProperties, propertyNames, items, prefixItems, additionalItems,
// contains, unevaluated*). It caches nothing: a subschema reached twice is
// evaluated twice, so references can multiply the work (anyOf of two $refs
// to a schema that does the same, nested) far beyond the sizes of the schema
// and the input.
//
// The cost model bounds that work before the validator runs: mult[d] is an
// upper bound on the evaluations at any one value of depth d (the root is 0)
// when the root schema is evaluated once. It is F(root, d) with
//
//	F(s, k) = own(s, k) + Σ F(c, k) over the in-place subschemas c of s
//	own(s, 0) = 1
//	own(s, k) = max(object part, array part), from F(·, k-1) of the member
//	            subschemas: a member gets at most one of properties (or the
//	            additional/unevaluated ones) and every patternProperties and
//	            propertyNames; an item one of prefixItems (or the rest) and
//	            contains and unevaluatedItems
//
// Validating an input whose depth d holds n[d] values costs at most about
// Σ n[d]·mult[d] evaluations (each evaluation at an object also visits its
// members once, counted by the members' own depth), each weighted by its
// depth (see checks).

// evalCap is where the estimates saturate.
const evalCap = math.MaxInt64 / 4

// graph is the compiled schema as nodes with their in-place and member
// edges, the nodes in an order where every in-place edge goes forward.
type graph struct {
	nodes []*jsonschema.Schema
	index map[*jsonschema.Schema]int
	inPl  [][]int // in-place edges (targets, repeated for multiplicity)
	mem   []members[int]
}

// members are the member subschemas of one node, by how they apply: as
// node indexes (members[int]) or as schemas.
type members[T any] struct {
	oneProp  []T // properties: a member gets at most one
	restProp []T // additionalProperties, unevaluatedProperties: members without a property
	allProp  []T // patternProperties, propertyNames: possibly every member
	oneItem  []T // prefixItems, items as a list: an item gets at most one
	restItem []T // items, additionalItems: the items past the list
	allItem  []T // contains, unevaluatedItems
}

func (m *members[T]) edges() []*[]T {
	return []*[]T{&m.oneProp, &m.restProp, &m.allProp, &m.oneItem, &m.restItem, &m.allItem}
}

// buildGraph collects the nodes reachable from root. It refuses more
// nodes than the walk of checkRefs allows for (with a margin) and a cycle of
// in-place edges (a reference that comes back to the same value without
// descending into it: the validator would loop on every input).
func buildGraph(root *jsonschema.Schema) (*graph, error) {
	g := &graph{index: map[*jsonschema.Schema]int{}}
	var anchors []*jsonschema.Schema // nodes with a dynamic or recursive anchor
	add := func(s *jsonschema.Schema) (int, error) {
		if i, ok := g.index[s]; ok {
			return i, nil
		}
		if len(g.nodes) >= 2*MaxSubschemas {
			return 0, fmt.Errorf("schemas: schema has more than %d subschemas", MaxSubschemas)
		}
		g.index[s] = len(g.nodes)
		g.nodes = append(g.nodes, s)
		g.inPl = append(g.inPl, nil)
		g.mem = append(g.mem, members[int]{})
		if s.DynamicAnchor != "" || s.RecursiveAnchor {
			anchors = append(anchors, s)
		}
		return len(g.nodes) - 1, nil
	}
	if _, err := add(root); err != nil {
		return nil, err
	}
	for i := 0; i < len(g.nodes); i++ {
		inPlace, mem := children(g.nodes[i])
		for _, c := range inPlace {
			j, err := add(c)
			if err != nil {
				return nil, err
			}
			g.inPl[i] = append(g.inPl[i], j)
		}
		var idx members[int]
		dst := idx.edges()
		for k, list := range mem.edges() {
			for _, c := range *list {
				j, err := add(c)
				if err != nil {
					return nil, err
				}
				*dst[k] = append(*dst[k], j)
			}
		}
		g.mem[i] = idx
	}
	// A dynamic reference may resolve, at run time, to any schema with the
	// same dynamic anchor (a recursive one to any recursive anchor): an edge
	// to each.
	for i, s := range g.nodes {
		for _, a := range anchors {
			if s.DynamicRef != nil && s.DynamicRef.DynamicAnchor != "" && a.DynamicAnchor == s.DynamicRef.DynamicAnchor && a != s.DynamicRef ||
				s.RecursiveRef != nil && a.RecursiveAnchor && a != s.RecursiveRef {
				g.inPl[i] = append(g.inPl[i], g.index[a])
			}
		}
	}
	if err := g.sort(); err != nil {
		return nil, err
	}
	return g, nil
}

// children returns the in-place and the member subschemas of s.
func children(s *jsonschema.Schema) (inPlace []*jsonschema.Schema, m members[*jsonschema.Schema]) {
	one := func(list *[]*jsonschema.Schema, c ...*jsonschema.Schema) {
		for _, x := range c {
			if x != nil {
				*list = append(*list, x)
			}
		}
	}
	one(&inPlace, s.Ref, s.RecursiveRef, s.DynamicRef, s.Not, s.If, s.Then, s.Else)
	one(&inPlace, s.AllOf...)
	one(&inPlace, s.AnyOf...)
	one(&inPlace, s.OneOf...)
	for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
		one(&inPlace, s.DependentSchemas[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Dependencies)) {
		if c, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			one(&inPlace, c)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		one(&m.oneProp, s.Properties[k])
	}
	if c, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		one(&m.restProp, c)
	}
	one(&m.restProp, s.UnevaluatedProperties)
	pats := slices.SortedFunc(maps.Values(s.PatternProperties), func(a, b *jsonschema.Schema) int { return strings.Compare(a.Location, b.Location) })
	one(&m.allProp, pats...)
	one(&m.allProp, s.PropertyNames)
	switch c := s.Items.(type) {
	case *jsonschema.Schema:
		one(&m.restItem, c)
	case []*jsonschema.Schema:
		one(&m.oneItem, c...)
	}
	one(&m.oneItem, s.PrefixItems...)
	if c, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		one(&m.restItem, c)
	}
	one(&m.restItem, s.Items2020)
	one(&m.allItem, s.Contains, s.UnevaluatedItems, s.ContentSchema)
	return inPlace, m
}

// sort orders the nodes so that in-place edges go forward (Kahn's
// algorithm); a cycle is an error naming one of its schemas.
func (g *graph) sort() error {
	n := len(g.nodes)
	indeg := make([]int, n)
	for _, es := range g.inPl {
		for _, j := range es {
			indeg[j]++
		}
	}
	order := make([]int, 0, n)
	for i := range n {
		if indeg[i] == 0 {
			order = append(order, i)
		}
	}
	for k := 0; k < len(order); k++ {
		for _, j := range g.inPl[order[k]] {
			if indeg[j]--; indeg[j] == 0 {
				order = append(order, j)
			}
		}
	}
	if len(order) < n {
		for i := range n {
			if indeg[i] > 0 {
				loc := g.nodes[i].Location
				if _, frag, ok := strings.Cut(loc, "#"); ok {
					loc = "#" + frag
				}
				return fmt.Errorf("schemas: schema refers back to itself at %s without descending into the input (validation would never end)", loc)
			}
		}
	}
	pos := make([]int, n)
	for p, i := range order {
		pos[i] = p
	}
	remap := func(es []int) []int {
		out := make([]int, len(es))
		for k, j := range es {
			out[k] = pos[j]
		}
		return out
	}
	nodes := make([]*jsonschema.Schema, n)
	inPl := make([][]int, n)
	mem := make([]members[int], n)
	for i := range n {
		p := pos[i]
		nodes[p] = g.nodes[i]
		inPl[p] = remap(g.inPl[i])
		src, dst := g.mem[i].edges(), mem[p].edges()
		for k := range src {
			*dst[k] = remap(*src[k])
		}
	}
	g.nodes, g.inPl, g.mem = nodes, inPl, mem
	for i, s := range nodes {
		g.index[s] = i
	}
	return nil
}

// multipliers returns mult[d] = F(root, d) for d = 0..MaxInputDepth (see
// the cost model above), saturating at evalCap.
func (g *graph) multipliers(root *jsonschema.Schema) []int64 {
	n := len(g.nodes)
	mult := make([]int64, MaxInputDepth+1)
	prev, cur := make([]int64, n), make([]int64, n)
	sum := func(f []int64, es []int) (s int64) {
		for _, j := range es {
			s = satAdd(s, f[j])
		}
		return s
	}
	most := func(f []int64, es []int) (m int64) {
		for _, j := range es {
			m = max(m, f[j])
		}
		return m
	}
	for k := 0; k <= MaxInputDepth; k++ {
		for i := n - 1; i >= 0; i-- { // in-place children come after their parents
			own := int64(1)
			if k > 0 {
				m := &g.mem[i]
				obj := satAdd(max(most(prev, m.oneProp), sum(prev, m.restProp)), sum(prev, m.allProp))
				arr := satAdd(max(most(prev, m.oneItem), sum(prev, m.restItem)), sum(prev, m.allItem))
				own = max(obj, arr)
			}
			cur[i] = satAdd(own, sum(cur, g.inPl[i]))
		}
		mult[k] = cur[g.index[root]]
		prev, cur = cur, prev
	}
	return mult
}

func satAdd(a, b int64) int64 {
	s, carry := bits.Add64(uint64(a), uint64(b), 0)
	if carry != 0 || s > evalCap {
		return evalCap
	}
	return int64(s)
}

func satMul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > evalCap {
		return evalCap
	}
	return int64(lo)
}

// checks estimates the cost of validating an input whose depth d holds
// counts[d] values: Σ counts[d]·mult[d]·(1 + d/4), the weight standing for
// the location strings, as long as the depth, that the validator builds at
// each check (measured: a failing check at depth 64 costs about 14 times
// one at depth 1).
func checks(mult []int64, counts []int) int64 {
	var total int64
	for d, n := range counts {
		if d < len(mult) {
			total = satAdd(total, satMul(satMul(int64(n), mult[d]), int64(4+d)))
		}
	}
	return total / 4
}

// budget is the most checks an input of the given number of values may cost.
func budget(values int) int64 { return EvalBase + EvalFactor*int64(values) }
