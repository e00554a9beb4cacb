package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"
	validator "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/skbtrace/skbtrace/internal/analyze/pcap"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/report"
)

// schemaDir holds one JSON Schema per JSON output, for users and for this
// test, which keeps them true.
var schemaDir = filepath.Join("..", "..", "docs", "schema")

// structOutputs are the JSON outputs encoded from a Go type: their schemas
// are reflected from it, field comments as descriptions.
var structOutputs = map[string]any{
	"stat":    report.StatView{},
	"pcap":    pcap.Report{},
	"compare": report.CompareJSON{},
	"doctor":  doctor.Report{},
}

func reflectSchema(t *testing.T, v any) *jsonschema.Schema {
	t.Helper()
	r := &jsonschema.Reflector{
		Mapper: func(ty reflect.Type) *jsonschema.Schema {
			switch ty {
			case reflect.TypeFor[netip.AddrPort]():
				return &jsonschema.Schema{Type: "string", Description: "address and port, as 10.0.0.1:5201 or [::1]:5201"}
			case reflect.TypeFor[netip.Addr]():
				return &jsonschema.Schema{Type: "string", Description: "an IPv4 or IPv6 address"}
			case reflect.TypeFor[netip.Prefix]():
				return &jsonschema.Schema{Type: "string", Description: "an address with its prefix length, as 10.0.0.1/24"}
			case reflect.TypeFor[finding.Severity]():
				return &jsonschema.Schema{Type: "string", Enum: []any{"info", "warning", "critical"}}
			case reflect.TypeFor[json.RawMessage]():
				return &jsonschema.Schema{}
			}
			return nil
		},
	}
	if err := r.AddGoComments("github.com/skbtrace/skbtrace", filepath.Join("..", ".."), jsonschema.WithFullComment()); err != nil {
		t.Fatal(err)
	}
	s := r.Reflect(v)
	allowNull(s, reflect.TypeOf(v))
	return s
}

// allowNull lets a pointer field without omitempty be null, as encoding/json
// writes it: the outputs' "not measured".
func allowNull(s *jsonschema.Schema, root reflect.Type) {
	seen := map[reflect.Type]bool{}
	var walk func(ty reflect.Type)
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Array || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		def := s.Definitions[ty.Name()]
		for i := range ty.NumField() {
			f := ty.Field(i)
			walk(f.Type)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if def == nil || f.Type.Kind() != reflect.Pointer || name == "-" || strings.Contains(opts, "omitempty") {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if p, ok := def.Properties.Get(name); ok {
				def.Properties.Set(name, &jsonschema.Schema{AnyOf: []*jsonschema.Schema{p, {Type: "null"}}})
			}
		}
	}
	walk(root)
}

// parseSchema describes parse --json's lines: one object per event, its
// keys by action, from the fixtures that hold every family (a key in
// every line of its action is required).
func parseSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	type keyUse struct {
		kind  string
		lines int
	}
	actions := map[string]map[string]*keyUse{}
	lines := map[string]int{}
	for _, name := range []string{"fixture.jsonl", "catalog.jsonl"} {
		f, err := os.Open(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var obj map[string]any
			if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			action, _ := obj["action"].(string)
			if action == "" {
				continue // a flight window or trigger record
			}
			if actions[action] == nil {
				actions[action] = map[string]*keyUse{}
			}
			lines[action]++
			for k, v := range obj {
				u := actions[action][k]
				if u == nil {
					u = &keyUse{kind: jsonKind(v)}
					actions[action][k] = u
				}
				u.lines++
			}
		}
		f.Close()
	}
	s := &jsonschema.Schema{
		Version:     jsonschema.Version,
		ID:          "https://skbtrace.dev/schema/parse.schema.json",
		Title:       "skbtrace parse --json",
		Description: "one object per line and event; the keys of each action are the text form's (docs/events.md)",
	}
	for _, action := range slices.Sorted(maps.Keys(actions)) {
		one := &jsonschema.Schema{Type: "object", Properties: jsonschema.NewProperties(), AdditionalProperties: jsonschema.FalseSchema}
		for _, k := range slices.Sorted(maps.Keys(actions[action])) {
			u := actions[action][k]
			p := &jsonschema.Schema{Type: u.kind}
			if k == "action" {
				p.Const = action
			}
			one.Properties.Set(k, p)
			if u.lines == lines[action] {
				one.Required = append(one.Required, k)
			}
		}
		s.OneOf = append(s.OneOf, one)
	}
	return s
}

func jsonKind(v any) string {
	switch v.(type) {
	case float64:
		return "number"
	case string:
		return "string"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

func allSchemas(t *testing.T) map[string]*jsonschema.Schema {
	out := map[string]*jsonschema.Schema{"parse": parseSchema(t)}
	for name, v := range structOutputs {
		s := reflectSchema(t, v)
		s.ID = jsonschema.ID("https://skbtrace.dev/schema/" + name + ".schema.json")
		s.Title = "skbtrace " + name + " --json"
		out[name] = s
	}
	return out
}

// The schemas in docs/schema are the outputs' types as they are now, and
// every key a type defines is snake_case (map keys are data: sysctl and
// counter names keep the kernel's spelling).
func TestJSONSchemasAreCurrent(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for name, s := range allSchemas(t) {
		var keys func(s *jsonschema.Schema)
		keys = func(s *jsonschema.Schema) {
			if s == nil {
				return
			}
			for p := s.Properties.Oldest(); p != nil; p = p.Next() {
				if !snake.MatchString(p.Key) {
					t.Errorf("%s: key %q is not snake_case", name, p.Key)
				}
				keys(p.Value)
			}
			for _, sub := range append(append(s.AnyOf, s.OneOf...), s.Items, s.AdditionalProperties) {
				keys(sub)
			}
			for _, d := range s.Definitions {
				keys(d)
			}
		}
		keys(s)
		want, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		path := filepath.Join(schemaDir, name+".schema.json")
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
			t.Errorf("%s is not the %s output's type: go test ./internal/cli -run TestJSONSchemasAreCurrent -update", path, name)
		}
	}
}

// jsonOutputs runs every JSON output on the tree's fixtures: name ->
// documents.
func jsonOutputs(t *testing.T) map[string][][]byte {
	t.Helper()
	out := map[string][][]byte{}
	run := func(name string, args ...string) {
		var stdout, stderr bytes.Buffer
		if code := Main(args, bytes.NewReader(nil), &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		if name == "parse" {
			for _, l := range bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n")) {
				if !bytes.Contains(l, []byte(`"record":`)) {
					out[name] = append(out[name], l)
				}
			}
			return
		}
		out[name] = append(out[name], stdout.Bytes())
	}
	traces, _ := filepath.Glob(filepath.Join("testdata", "*-le.trace"))
	traces = append(traces, filepath.Join("..", "report", "parquet", "testdata", "sndbuf-limited.trace"))
	for _, tr := range traces {
		run("parse", "parse", "--json", tr)
		run("stat", "stat", "--json", tr)
	}
	run("compare", "compare", "--json", traces[0], traces[len(traces)-1])
	captures, _ := filepath.Glob(filepath.Join("..", "analyze", "pcap", "testdata", "*.pcap.gz"))
	for _, c := range captures {
		run("pcap", "pcap", "--json", c)
	}
	profiles, _ := filepath.Glob(filepath.Join("..", "analyze", "compare", "testdata", "*.pb.gz"))
	for i := 0; i+1 < len(profiles); i += 2 {
		run("compare", "compare", "--json", profiles[i], profiles[i+1])
	}
	evidence, _ := filepath.Glob(filepath.Join("..", "doctor", "testdata", "*", "*.json"))
	dir := t.TempDir()
	var reports []string
	for _, p := range evidence {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var ev doctor.Evidence
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var buf bytes.Buffer
		if err := doctor.Diagnose(&ev).WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		out["doctor"] = append(out["doctor"], buf.Bytes())
		rep := filepath.Join(dir, fmt.Sprintf("%d.json", len(reports)))
		if err := os.WriteFile(rep, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		reports = append(reports, rep)
	}
	for i := 0; i+1 < len(reports) && i < 10; i += 2 {
		run("compare", "compare", "--json", reports[i], reports[i+1])
	}
	return out
}

// Every output on every fixture is what its schema says: no key the schema
// does not list, none missing that it requires, each of its type; and a key
// is one kind of value across all outputs.
func TestJSONOutputsFollowTheirSchemas(t *testing.T) {
	compiler := validator.NewCompiler()
	schemas := map[string]*validator.Schema{}
	for name := range allSchemas(t) {
		path, err := filepath.Abs(filepath.Join(schemaDir, name+".schema.json"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := compiler.Compile(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		schemas[name] = s
	}
	kinds := map[string]map[string]string{} // key -> kind -> output
	for name, docs := range jsonOutputs(t) {
		for i, doc := range docs {
			v, err := validator.UnmarshalJSON(bytes.NewReader(doc))
			if err != nil {
				t.Fatalf("%s output %d: %v", name, i, err)
			}
			if err := schemas[name].Validate(v); err != nil {
				t.Errorf("%s output %d does not follow docs/schema/%s.schema.json: %v", name, i, name, err)
			}
			var plain any
			if err := json.Unmarshal(doc, &plain); err != nil {
				t.Fatalf("%s output %d: %v", name, i, err)
			}
			walkJSON(plain, func(key string, val any) {
				if _, isMap := val.(map[string]any); isMap || val == nil {
					return
				}
				if kinds[key] == nil {
					kinds[key] = map[string]string{}
				}
				kinds[key][jsonKind(val)] = name
			})
		}
	}
	// Keys that name two things, each in its own object.
	twoMeanings := map[string]string{
		"drops": "stat's drop sites (a list), a qdisc's drop count (in its object)",
		"a":     "compare's first input (its name), a metric's value in it",
		"b":     "compare's second input (its name), a metric's value in it",
	}
	for key, byKind := range kinds {
		if len(byKind) > 1 && twoMeanings[key] == "" {
			t.Errorf("key %q holds different kinds of value: %v (kind: output)", key, byKind)
		}
	}
}
