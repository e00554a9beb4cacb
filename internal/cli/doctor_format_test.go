package cli

import "testing"

func TestDoctorFormatFollowsFlagThenFileName(t *testing.T) {
	for _, c := range []struct{ format, output, want string }{
		{"", "", "text"}, {"", "report.html", "html"}, {"", "r.json", "json"}, {"", "r.txt", "text"},
		{"json", "report.html", "json"}, {"html", "-", "html"},
	} {
		if got, err := doctorFormat(c.format, c.output); err != nil || got != c.want {
			t.Errorf("doctorFormat(%q, %q) = %q, %v; want %q", c.format, c.output, got, err, c.want)
		}
	}
	if _, err := doctorFormat("pdf", "r.pdf"); err == nil {
		t.Error("an unknown format was taken")
	}
}
