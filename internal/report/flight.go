package report

import (
	"strconv"

	"github.com/skbtrace/skbtrace/internal/trace"
)

// AppendWindow appends the line parse prints where a flight recorder's
// window begins: a comment in the text form ("#", as no event line starts),
// a "record" object beside the events' "action" ones in JSON.
func AppendWindow(b []byte, window int, asJSON bool) []byte {
	if asJSON {
		b = append(b, `{"record":"flight_window","window":`...)
		b = strconv.AppendInt(b, int64(window), 10)
		return append(b, "}\n"...)
	}
	b = append(b, "# flight window "...)
	b = strconv.AppendInt(b, int64(window), 10)
	b = append(b, " begins"...)
	if window > 1 {
		b = append(b, ": the time since the previous window was not recorded"...)
	}
	return append(b, '\n')
}

// AppendTrigger appends the line parse prints before the event that fired
// a flight recorder's trigger.
func AppendTrigger(b []byte, t *trace.Trigger, asJSON bool) []byte {
	if asJSON {
		b = append(b, `{"record":"trigger"`...)
		b = jsonString(b, "trigger", t.Expr)
		b = jsonUint(b, "seq", t.Seq)
		b = append(b, `,"time":`...)
		b = appendTime(b, t.TimeNs)
		b = jsonString(b, "event", t.What)
		if t.Suppressed > 0 {
			b = jsonUint(b, "suppressed_before", t.Suppressed)
		}
		return append(b, "}\n"...)
	}
	b = append(b, "# trigger "...)
	b = append(b, t.Expr...)
	b = append(b, " fired on seq "...)
	b = strconv.AppendUint(b, t.Seq, 10)
	b = append(b, " at "...)
	b = appendTime(b, t.TimeNs)
	b = append(b, ": "...)
	b = append(b, t.What...)
	if t.Suppressed > 0 {
		b = append(b, " ("...)
		b = strconv.AppendUint(b, t.Suppressed, 10)
		b = append(b, " firings before it opened no window)"...)
	}
	return append(b, '\n')
}
