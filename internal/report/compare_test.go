package report

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze/compare"
)

// compare's JSON names its keys as every other output does: snake_case.
func TestCompareJSONKeysAreSnakeCase(t *testing.T) {
	r := &compare.Result{A: &compare.Run{Name: "a.json", Kind: compare.KindReport}, B: &compare.Run{Name: "b.json", Kind: compare.KindReport}, Headline: "x -> y"}
	var b bytes.Buffer
	if err := WriteCompareJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(b.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "kind", "headline", "metrics", "findings"} {
		if _, ok := top[k]; !ok {
			t.Errorf("no %q key: %s", k, b.String())
		}
	}
	if bytes.Contains(b.Bytes(), []byte(`\u003e`)) {
		t.Errorf("the headline's arrow is escaped: %s", b.String())
	}
}
