package flame

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Stack is one distinct call stack and its weight.
type Stack struct {
	Frames []string // root first, leaf last (e.g. "entry_SYSCALL_64", "do_syscall_64", "__x64_sys_sendto", ...)
	Value  float64  // weight in this profile (e.g. samples, or ns per packet)
	Base   float64  // weight in the baseline profile; only used when Page.Diff is set
}

// Page describes one flame graph page.
type Page struct {
	Title    string
	Subtitle string // one line under the title (e.g. "2 CPUs, 99 Hz, 12 s, 41,230 samples")
	Unit     string // what Value counts, shown in tooltips: "samples", "ns/packet" ...
	Stacks   []Stack
	Diff     bool // differential: width by Value, colour by Value-Base of each frame (red grew, blue shrank, saturation by relative change); tooltips show both and the change
}

//go:embed flame.css
var style string

//go:embed flame.js
var script string

// rootName labels the synthetic frame all stacks grow from.
const rootName = "all"

// tree is the data the page's script draws: the stacks merged into one call
// tree, nodes in preorder (a parent before its children, siblings sorted by
// name). It is kept small, as large profiles make it megabytes of JSON the
// browser must parse: parallel arrays, a name table, depths instead of parent
// links, and each node's own weight, whose totals the page sums itself.
type tree struct {
	Unit     string    `json:"unit"`
	Diff     bool      `json:"diff"`
	Names    []string  `json:"names"`
	Name     []int32   `json:"name"`               // per node: index into Names
	Depth    []int32   `json:"depth"`              // per node: 0 for the root; the parent is the last node before it one level up
	Self     []float64 `json:"self"`               // per node: the weight of the stacks ending there
	BaseSelf []float64 `json:"baseSelf,omitempty"` // per node, in diff mode: the same in the baseline
}

// WriteHTML writes the page: one HTML file with inline CSS, JS and data (JSON), no external resources, no network access needed to view it.
func WriteHTML(w io.Writer, p Page) error {
	t, err := buildTree(p)
	if err != nil {
		return fmt.Errorf("writing flame graph: %w", err)
	}
	title := p.Title
	if title == "" {
		title = "Flame graph"
	}
	legend := "Width: share of the total."
	if p.Diff {
		legend = "Width: this profile. Colour: change from the baseline, red grew, blue shrank."
	}

	// bufio.Writer keeps the first write error and reports it from Flush.
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"+
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"+
		"<title>%s</title>\n<style>\n%s</style>\n</head>\n<body>\n<header>\n<h1>%s</h1>\n",
		html.EscapeString(title), style, html.EscapeString(title))
	if p.Subtitle != "" {
		fmt.Fprintf(bw, "<p class=\"sub\">%s</p>\n", html.EscapeString(p.Subtitle))
	}
	fmt.Fprintf(bw, "<div class=\"controls\">\n"+
		"<input id=\"search\" type=\"search\" placeholder=\"Search: substring or regex\" aria-label=\"Search frames\" spellcheck=\"false\">\n"+
		"<button id=\"reset\" type=\"button\">Reset zoom</button>\n"+
		"<span id=\"matched\"></span>\n<span class=\"legend\">%s Click a frame to zoom, the root to reset.</span>\n</div>\n</header>\n"+
		"<div id=\"chart\"></div>\n<div id=\"tip\"></div>\n"+
		"<script type=\"application/json\" id=\"flame-data\">", legend)
	// encoding/json escapes <, > and &, so no frame name can end the script element.
	if err := json.NewEncoder(bw).Encode(t); err != nil {
		return fmt.Errorf("writing flame graph: %w", err)
	}
	fmt.Fprintf(bw, "</script>\n<script>\n%s</script>\n</body>\n</html>\n", script)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing flame graph: %w", err)
	}
	return nil
}

func buildTree(p Page) (*tree, error) {
	if len(p.Stacks) == 0 {
		return nil, errors.New("no stacks")
	}
	total, frameCount := 0.0, 0
	for i, s := range p.Stacks {
		if err := checkWeight(s.Value); err != nil {
			return nil, fmt.Errorf("stack %d: value %w", i, err)
		}
		if p.Diff {
			if err := checkWeight(s.Base); err != nil {
				return nil, fmt.Errorf("stack %d: base %w", i, err)
			}
		}
		total += s.Value
		frameCount += len(s.Frames)
	}
	if total == 0 {
		return nil, errors.New("all stacks have a zero value, nothing to draw")
	}

	// Frames become numbers, renumbered below so that numbers sort as the
	// names do.
	ids := map[string]int32{rootName: 0}
	names := []string{rootName}
	all := make([]int32, 0, frameCount)
	stacks := make([][]int32, len(p.Stacks))
	for i, s := range p.Stacks {
		start := len(all)
		for _, f := range s.Frames {
			id, ok := ids[f]
			if !ok {
				id = int32(len(names))
				names = append(names, f)
				ids[f] = id
			}
			all = append(all, id)
		}
		stacks[i] = all[start:len(all):len(all)]
	}
	byName := make([]int32, len(names))
	for i := range byName {
		byName[i] = int32(i)
	}
	slices.SortFunc(byName, func(a, b int32) int { return strings.Compare(names[a], names[b]) })
	rank := make([]int32, len(names))
	sortedNames := make([]string, len(names))
	for r, id := range byName {
		rank[id] = int32(r)
		sortedNames[r] = names[id]
	}
	for i := range all {
		all[i] = rank[all[i]]
	}

	// In stacks sorted frame by frame, a parent comes before its children
	// and siblings come in name order: walking them in that order, each stack
	// adds the nodes past the prefix it shares with the one before, and the
	// nodes come out in the preorder the page wants.
	order := make([]int32, len(stacks))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return slices.Compare(stacks[a], stacks[b]) })

	t := &tree{Unit: p.Unit, Diff: p.Diff, Names: sortedNames}
	addNode := func(name, depth int32) int32 {
		t.Name = append(t.Name, name)
		t.Depth = append(t.Depth, depth)
		t.Self = append(t.Self, 0)
		if p.Diff {
			t.BaseSelf = append(t.BaseSelf, 0)
		}
		return int32(len(t.Name) - 1)
	}
	path := []int32{addNode(rank[0], 0)} // the nodes of the current stack, the root first
	var prev []int32
	for _, i := range order {
		frames := stacks[i]
		shared := 0
		for shared < len(prev) && shared < len(frames) && prev[shared] == frames[shared] {
			shared++
		}
		path = path[:shared+1]
		for d := shared; d < len(frames); d++ {
			path = append(path, addNode(frames[d], int32(d+1)))
		}
		leaf := path[len(frames)]
		t.Self[leaf] += p.Stacks[i].Value
		if p.Diff {
			t.BaseSelf[leaf] += p.Stacks[i].Base
		}
		prev = frames
	}
	return t, nil
}

func checkWeight(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("is %v, want a finite number of at least 0", v)
	}
	return nil
}
