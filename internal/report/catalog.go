package report

import (
	"strconv"

	"github.com/skbtrace/skbtrace/internal/event"
)

// textFields and jsonFields write the fields a family lists
// (event.EventKind.Fields) in the text and JSON forms.
type textFields struct {
	b     []byte
	names event.Names
}

func (t *textFields) Flag(_, v string) {
	t.b = append(t.b, " ["...)
	t.b = append(t.b, v...)
	t.b = append(t.b, ']')
}

func (t *textFields) key(k string) {
	t.b = append(t.b, ' ')
	t.b = append(t.b, k...)
	t.b = append(t.b, '=')
}

func (t *textFields) Str(k, v string)          { t.key(k); t.b = appendToken(t.b, []byte(v)) }
func (t *textFields) Bytes(k string, v []byte) { t.key(k); t.b = appendToken(t.b, v) }
func (t *textFields) Uint(k string, v uint64)  { t.key(k); t.b = strconv.AppendUint(t.b, v, 10) }
func (t *textFields) Time(k string, ns int64)  { t.key(k); t.b = appendTime(t.b, ns) }

func (t *textFields) Hist(k string, v []uint64) {
	t.key(k)
	for i, n := range v {
		if i > 0 {
			t.b = append(t.b, ',')
		}
		t.b = strconv.AppendUint(t.b, n, 10)
	}
}

func (t *textFields) Socket(s *event.Socket) {
	t.b = appendSocket(t.b, s)
	t.b = appendNetns(t.b, s.Netns, t.names)
	if s.NetnsByAddr {
		t.b = append(t.b, " netns_by=addr"...)
	}
}

type jsonFields struct {
	b     []byte
	names event.Names
}

func (j *jsonFields) Flag(k, v string)         { j.b = jsonString(j.b, k, v) }
func (j *jsonFields) Str(k, v string)          { j.b = jsonString(j.b, k, v) }
func (j *jsonFields) Bytes(k string, v []byte) { j.b = jsonString(j.b, k, string(v)) }
func (j *jsonFields) Uint(k string, v uint64)  { j.b = jsonUint(j.b, k, v) }

func (j *jsonFields) Time(k string, ns int64) {
	j.b = append(j.b, `,"`...)
	j.b = append(j.b, k...)
	j.b = append(j.b, `":`...)
	j.b = appendTime(j.b, ns)
}

func (j *jsonFields) Hist(k string, v []uint64) {
	j.b = append(j.b, `,"`...)
	j.b = append(j.b, k...)
	j.b = append(j.b, `":[`...)
	for i, n := range v {
		if i > 0 {
			j.b = append(j.b, ',')
		}
		j.b = strconv.AppendUint(j.b, n, 10)
	}
	j.b = append(j.b, ']')
}

func (j *jsonFields) Socket(s *event.Socket) { j.b = jsonSocket(j.b, s, j.names) }

func (t *textFields) Netns(inode uint32) { t.b = appendNetns(t.b, inode, t.names) }

func (j *jsonFields) Netns(inode uint32) {
	j.b = jsonUint(j.b, "netns", uint64(inode))
	if j.names != nil {
		if n := j.names.NetnsName(inode); n != "" {
			j.b = jsonString(j.b, "netns_name", n)
		}
	}
}
