package cli

import (
	"strings"
	"testing"
)

func TestDoctorFormatFollowsFlagThenFileName(t *testing.T) {
	for _, c := range []struct{ format, output, want string }{
		{"", "", "text"}, {"", "report.html", "html"}, {"", "r.json", "json"}, {"", "r.txt", "text"},
		{"json", "report.html", "json"}, {"html", "-", "html"}, {"", "report", "text"}, {"", "R.HTML", "html"},
		{"text", "report.pdf", "text"},
	} {
		if got, err := doctorFormat(c.format, c.output); err != nil || got != c.want {
			t.Errorf("doctorFormat(%q, %q) = %q, %v; want %q", c.format, c.output, got, err, c.want)
		}
	}
	if _, err := doctorFormat("pdf", "r.pdf"); err == nil {
		t.Error("an unknown format was taken")
	}
	// An extension the doctor cannot write is refused, not filled with
	// text (issue 43: doctor -o report.pdf wrote text silently).
	if _, err := doctorFormat("", "report.pdf"); err == nil || !strings.Contains(err.Error(), "text, json or html") {
		t.Errorf("-o report.pdf: %v", err)
	}
}
