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

// The cost model (docs/schemas.md, "The cost model"): the validator caches
// nothing, so references can multiply its work far beyond the sizes of schema
// and input. mult[d] bounds the evaluations at one value of depth d:
//
//	F(s, k) = own(s, k) + Σ F(c, k) over the in-place subschemas c of s
//	own(s, 0) = 1; own(s, k) = max(object part, array part) of the members' F(·, k-1)

// evalCap is where the estimates saturate.
const evalCap = math.MaxInt64 / 4

// The kinds of a node's edges: in place, and how a member subschema
// applies.
const (
	inPlace  = iota // evaluated at the same value (targets repeated for multiplicity)
	oneProp         // properties: a member gets at most one
	restProp        // additionalProperties, unevaluatedProperties: members without a property
	allProp         // patternProperties, propertyNames: possibly every member
	oneItem         // prefixItems, items as a list: an item gets at most one
	restItem        // items, additionalItems: the items past the list
	allItem         // contains, unevaluatedItems
	edgeKinds
)

// graph is the compiled schema as nodes with their edges by kind, and an
// order of the nodes where every in-place edge goes forward.
type graph struct {
	nodes []*jsonschema.Schema
	index map[*jsonschema.Schema]int
	edges [][edgeKinds][]int
	order []int
}

// buildGraph collects the nodes reachable from root, refusing too many and a
// cycle of in-place edges (the validator would loop on every input).
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
		g.edges = append(g.edges, [edgeKinds][]int{})
		if s.DynamicAnchor != "" || s.RecursiveAnchor {
			anchors = append(anchors, s)
		}
		return len(g.nodes) - 1, nil
	}
	if _, err := add(root); err != nil {
		return nil, err
	}
	for i := 0; i < len(g.nodes); i++ {
		for k, list := range children(g.nodes[i]) {
			for _, c := range list {
				j, err := add(c)
				if err != nil {
					return nil, err
				}
				g.edges[i][k] = append(g.edges[i][k], j)
			}
		}
	}
	// A dynamic reference may resolve to any schema with its anchor: an edge to each.
	for i, s := range g.nodes {
		for _, a := range anchors {
			if s.DynamicRef != nil && s.DynamicRef.DynamicAnchor != "" && a.DynamicAnchor == s.DynamicRef.DynamicAnchor && a != s.DynamicRef ||
				s.RecursiveRef != nil && a.RecursiveAnchor && a != s.RecursiveRef {
				g.edges[i][inPlace] = append(g.edges[i][inPlace], g.index[a])
			}
		}
	}
	if err := g.sort(); err != nil {
		return nil, err
	}
	return g, nil
}

// children returns the subschemas of s by edge kind.
func children(s *jsonschema.Schema) (m [edgeKinds][]*jsonschema.Schema) {
	one := func(k int, c ...*jsonschema.Schema) {
		for _, x := range c {
			if x != nil {
				m[k] = append(m[k], x)
			}
		}
	}
	one(inPlace, s.Ref, s.RecursiveRef, s.DynamicRef, s.Not, s.If, s.Then, s.Else)
	one(inPlace, s.AllOf...)
	one(inPlace, s.AnyOf...)
	one(inPlace, s.OneOf...)
	for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
		one(inPlace, s.DependentSchemas[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Dependencies)) {
		if c, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			one(inPlace, c)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		one(oneProp, s.Properties[k])
	}
	if c, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		one(restProp, c)
	}
	one(restProp, s.UnevaluatedProperties)
	pats := slices.SortedFunc(maps.Values(s.PatternProperties), func(a, b *jsonschema.Schema) int { return strings.Compare(a.Location, b.Location) })
	one(allProp, pats...)
	one(allProp, s.PropertyNames)
	switch c := s.Items.(type) {
	case *jsonschema.Schema:
		one(restItem, c)
	case []*jsonschema.Schema:
		one(oneItem, c...)
	}
	one(oneItem, s.PrefixItems...)
	if c, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		one(restItem, c)
	}
	one(restItem, s.Items2020)
	one(allItem, s.Contains, s.UnevaluatedItems, s.ContentSchema)
	return m
}

// sort orders the nodes so that in-place edges go forward (Kahn's
// algorithm); a cycle is an error naming one of its schemas.
func (g *graph) sort() error {
	indeg := make([]int, len(g.nodes))
	for _, es := range g.edges {
		for _, j := range es[inPlace] {
			indeg[j]++
		}
	}
	for i, d := range indeg {
		if d == 0 {
			g.order = append(g.order, i)
		}
	}
	for k := 0; k < len(g.order); k++ {
		for _, j := range g.edges[g.order[k]][inPlace] {
			if indeg[j]--; indeg[j] == 0 {
				g.order = append(g.order, j)
			}
		}
	}
	if len(g.order) == len(g.nodes) {
		return nil
	}
	loc := g.nodes[slices.IndexFunc(indeg, func(d int) bool { return d > 0 })].Location
	if _, frag, ok := strings.Cut(loc, "#"); ok {
		loc = "#" + frag
	}
	return fmt.Errorf("schemas: schema refers back to itself at %s without descending into the input (validation would never end)", loc)
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
		for _, i := range slices.Backward(g.order) { // in-place children come after their parents
			own := int64(1)
			if e := &g.edges[i]; k > 0 {
				obj := satAdd(max(most(prev, e[oneProp]), sum(prev, e[restProp])), sum(prev, e[allProp]))
				arr := satAdd(max(most(prev, e[oneItem]), sum(prev, e[restItem])), sum(prev, e[allItem]))
				own = max(obj, arr)
			}
			cur[i] = satAdd(own, sum(cur, g.edges[i][inPlace]))
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

// checks estimates Σ counts[d]·mult[d]·(1 + d/4): the weight is for the
// location strings the validator builds at each check.
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

// Limits of protocol version 1 section 13: they keep the cost of compiling
// a schema and of validating one input in proportion to their sizes.
const (
	MaxSchemaDepth    = 64   // nesting of objects and arrays in a schema (the top object is 1)
	MaxInputDepth     = 128  // the same for a call's input
	MaxSubschemas     = 1000 // per schema: compiling costs their square
	MaxChecksPerValue = 250  // subschemas one input value may be checked against (cost model)
	EvalBase          = 1_000
	EvalFactor        = 16  // estimated checks per input value, beyond EvalBase
	MaxDetails        = 100 // problems one invalid_input result lists
)

// jsonDepth returns the deepest nesting in valid JSON b, stopping past limit.
func jsonDepth(b []byte, limit int) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if depth++; depth > limit {
				return depth
			}
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// depthError is the message of an input nested deeper than MaxInputDepth;
// it has no package prefix (it is written for the model).
func depthError() error {
	return fmt.Errorf("input nests deeper than %d levels of objects and arrays", MaxInputDepth)
}

// levels counts the values of an instance at each depth (root 0), without
// recursion; ok is false deeper than MaxInputDepth.
func levels(v any) (counts []int, ok bool) {
	type item struct {
		v any
		d int
	}
	stack := []item{{v, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for len(counts) <= it.d {
			counts = append(counts, 0)
		}
		counts[it.d]++
		switch x := it.v.(type) {
		case map[string]any: // a container at d is JSON depth d+1
			if it.d+1 > MaxInputDepth {
				return counts, false
			}
			for _, m := range x {
				stack = append(stack, item{m, it.d + 1})
			}
		case []any:
			if it.d+1 > MaxInputDepth {
				return counts, false
			}
			for _, m := range x {
				stack = append(stack, item{m, it.d + 1})
			}
		}
	}
	return counts, true
}
