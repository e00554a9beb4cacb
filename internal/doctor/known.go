package doctor

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// KnownIssue is one entry of the known-issue table (known_issues.json): a
// driver and device with a throughput bug, the kernels it affects, the
// setting that exposes it, and the workaround.
type KnownIssue struct {
	ID      string   `json:"id"`
	Driver  string   `json:"driver"`
	Vendor  string   `json:"vendor"`
	Devices []string `json:"devices"`
	Name    string   `json:"name"`
	// KernelMin and KernelMax bound the affected kernels ("4.15"); empty is open.
	KernelMin string `json:"kernel_min,omitempty"`
	KernelMax string `json:"kernel_max,omitempty"`
	// FeatureOn: only while this offload feature is on; MTUAbove: only above this MTU.
	FeatureOn  string   `json:"feature_on,omitempty"`
	MTUAbove   int      `json:"mtu_above,omitempty"`
	Symptom    string   `json:"symptom"`
	Cause      string   `json:"cause"`
	Workaround []string `json:"workaround"`
	Note       string   `json:"note,omitempty"`
	Source     string   `json:"source"`
}

//go:embed known_issues.json
var knownIssuesJSON []byte

// KnownIssues is the table, parsed once; a malformed table is a build defect
// that the package's tests catch.
var KnownIssues = mustParseKnown(knownIssuesJSON)

func mustParseKnown(b []byte) []KnownIssue {
	var out []KnownIssue
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("known_issues.json: %v", err))
	}
	return out
}

// matches says whether the issue applies to a device on a kernel.
func (k *KnownIssue) matches(d *Device, kernel string) bool {
	if d.Driver != k.Driver || !strings.EqualFold(d.Vendor, k.Vendor) ||
		!slices.ContainsFunc(k.Devices, func(id string) bool { return strings.EqualFold(id, d.DeviceID) }) {
		return false
	}
	v := kernelVersion(kernel)
	if k.KernelMin != "" && v < kernelVersion(k.KernelMin) {
		return false
	}
	if k.KernelMax != "" && v > kernelVersion(k.KernelMax) {
		return false
	}
	if k.FeatureOn != "" && !d.Features[k.FeatureOn] {
		return false
	}
	return k.MTUAbove == 0 || d.MTU > k.MTUAbove
}

// kernelVersion orders "major.minor[.patch][-extra]" releases as one number.
func kernelVersion(release string) int {
	fields := strings.FieldsFunc(release, func(r rune) bool { return r == '.' || r == '-' || r == '+' })
	v := 0
	for i := 0; i < 3; i++ {
		n := 0
		if i < len(fields) {
			n, _ = strconv.Atoi(fields[i])
		}
		v = v*1000 + min(n, 999)
	}
	return v
}
