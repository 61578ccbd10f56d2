package schemas

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
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
// costModel bounds that work before the validator runs: mult[d] is an upper
// bound on the evaluations at one value of depth d (the root is 0), taking
// every member subschema to apply to every member (the worst case).
// Validating an input whose depth d holds n[d] values costs at most about
// Σ n[d]·mult[d] evaluations (each evaluation at an object also visits its
// members once, counted by the members' own depth).

// evalCap is where the estimates saturate.
const evalCap = math.MaxInt64 / 4

// graph is the compiled schema as nodes with their in-place and member
// edges, the nodes in an order where every in-place edge goes forward.
type graph struct {
	nodes  []*jsonschema.Schema
	index  map[*jsonschema.Schema]int
	inPl   [][]int // in-place edges (targets, repeated for multiplicity)
	member [][]int // member edges
}

// buildGraph collects the nodes reachable from root. It refuses more than
// MaxSubschemas nodes and a cycle of in-place edges (a reference that comes
// back to the same value without descending into it: the validator would
// loop on every input).
func buildGraph(root *jsonschema.Schema) (*graph, error) {
	g := &graph{index: map[*jsonschema.Schema]int{}}
	var anchors []*jsonschema.Schema // nodes with a dynamic or recursive anchor
	add := func(s *jsonschema.Schema) (int, error) {
		if i, ok := g.index[s]; ok {
			return i, nil
		}
		if len(g.nodes) >= 2*MaxSubschemas { // the walk of checkRefs counted them; a margin for the compiler's own
			return 0, fmt.Errorf("schemas: schema has more than %d subschemas", MaxSubschemas)
		}
		g.index[s] = len(g.nodes)
		g.nodes = append(g.nodes, s)
		g.inPl = append(g.inPl, nil)
		g.member = append(g.member, nil)
		if s.DynamicAnchor != "" || s.RecursiveAnchor {
			anchors = append(anchors, s)
		}
		return len(g.nodes) - 1, nil
	}
	if _, err := add(root); err != nil {
		return nil, err
	}
	for i := 0; i < len(g.nodes); i++ {
		inPlace, members := children(g.nodes[i])
		for _, c := range inPlace {
			j, err := add(c)
			if err != nil {
				return nil, err
			}
			g.inPl[i] = append(g.inPl[i], j)
		}
		for _, c := range members {
			j, err := add(c)
			if err != nil {
				return nil, err
			}
			g.member[i] = append(g.member[i], j)
		}
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
func children(s *jsonschema.Schema) (inPlace, members []*jsonschema.Schema) {
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
	for _, k := range sortedKeys(s.DependentSchemas) {
		one(&inPlace, s.DependentSchemas[k])
	}
	for _, k := range sortedKeys(s.Dependencies) {
		if c, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			one(&inPlace, c)
		}
	}
	for _, k := range sortedKeys(s.Properties) {
		one(&members, s.Properties[k])
	}
	pats := make([]*jsonschema.Schema, 0, len(s.PatternProperties))
	for _, c := range s.PatternProperties {
		pats = append(pats, c)
	}
	sort.Slice(pats, func(i, j int) bool { return pats[i].Location < pats[j].Location })
	one(&members, pats...)
	for _, x := range []any{s.AdditionalProperties, s.Items, s.AdditionalItems} {
		switch c := x.(type) {
		case *jsonschema.Schema:
			one(&members, c)
		case []*jsonschema.Schema:
			one(&members, c...)
		}
	}
	one(&members, s.PropertyNames, s.Items2020, s.Contains, s.UnevaluatedProperties, s.UnevaluatedItems, s.ContentSchema)
	one(&members, s.PrefixItems...)
	return inPlace, members
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
	nodes := make([]*jsonschema.Schema, n)
	inPl := make([][]int, n)
	member := make([][]int, n)
	for i := range n {
		nodes[pos[i]] = g.nodes[i]
		for _, j := range g.inPl[i] {
			inPl[pos[i]] = append(inPl[pos[i]], pos[j])
		}
		for _, j := range g.member[i] {
			member[pos[i]] = append(member[pos[i]], pos[j])
		}
	}
	g.nodes, g.inPl, g.member = nodes, inPl, member
	for i, s := range nodes {
		g.index[s] = i
	}
	return nil
}

// multipliers returns mult[d] for d = 0..MaxInputDepth (see costModel),
// saturating at evalCap. The root is node 0 after sort only when nothing
// refers to it in place, so it is looked up.
func (g *graph) multipliers(root *jsonschema.Schema) []int64 {
	n := len(g.nodes)
	mult := make([]int64, MaxInputDepth+1)
	v := make([]int64, n) // evaluations started at the current depth, per node
	v[g.index[root]] = 1
	for d := 0; d <= MaxInputDepth; d++ {
		var total int64
		next := make([]int64, n)
		more := false
		for i := range n { // in topological order: v[i] is complete here
			if v[i] == 0 {
				continue
			}
			total = satAdd(total, v[i])
			for _, j := range g.inPl[i] {
				v[j] = satAdd(v[j], v[i])
			}
			for _, j := range g.member[i] {
				next[j] = satAdd(next[j], v[i])
				more = true
			}
		}
		mult[d] = total
		if !more {
			break
		}
		v = next
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

// checks estimates the evaluations of validating an input whose depth d
// holds counts[d] values.
func checks(mult []int64, counts []int) int64 {
	var total int64
	for d, n := range counts {
		if d < len(mult) {
			total = satAdd(total, satMul(int64(n), mult[d]))
		}
	}
	return total
}

// budget is the most checks an input of the given number of values may cost.
func budget(values int) int64 { return EvalBase + EvalFactor*int64(values) }
