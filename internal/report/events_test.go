package report

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
)

func TestConnCloseNamesTheSocketError(t *testing.T) {
	ev := event.Event{Type: event.TypeTCPConn, Seq: 7, Time: 1_700_000_000_000_000_000}
	ev.Conn.Old, ev.Conn.New, ev.Conn.Err = 4, 7, 104
	ev.Conn.Context = event.ContextSoftirq
	text := string(AppendText(nil, &ev, nil))
	if !strings.Contains(text, "[CLOSE]") || !strings.Contains(text, " err=ECONNRESET") {
		t.Errorf("text form lacks the error: %s", text)
	}
	if js := string(AppendJSON(nil, &ev, nil)); !strings.Contains(js, `"err":"ECONNRESET"`) {
		t.Errorf("JSON form lacks the error: %s", js)
	}
	ev.Conn.Err = 0
	if text := string(AppendText(nil, &ev, nil)); strings.Contains(text, "err=") {
		t.Errorf("a clean close shows an error: %s", text)
	}
}

type resetNames map[uint32]string

func (resetNames) NetnsName(uint32) string       { return "" }
func (resetNames) DropReason(uint32) string      { return "" }
func (n resetNames) ResetReason(v uint32) string { return n[v] }
func (resetNames) Symbol(uint64) string          { return "" }

func TestResetPathPrefersTheKernelsReason(t *testing.T) {
	ev := event.Event{Type: event.TypeTCPReset, Socket: event.Socket{Sock: 0xa,
		Local: netip.MustParseAddrPort("10.0.0.1:80"), Peer: netip.MustParseAddrPort("10.0.0.2:4000")}}
	ev.Reset.Sock, ev.Reset.State = 0xa, 7
	// The recorder saw a linger-0 close; the kernel says unread data was discarded.
	ev.Reset.Dir, ev.Reset.Path, ev.Reset.Reason = event.ResetSent, uint8(event.ResetPathLinger0), 11
	names := resetNames{11: "TCP_ABORT_ON_CLOSE", 14: "TCP_STATE"}
	if text := string(AppendText(nil, &ev, names)); !strings.Contains(text, " path=close reason=TCP_ABORT_ON_CLOSE") {
		t.Errorf("path not taken from the kernel's reason: %s", text)
	}
	// TCP_STATE serves a disconnect and a timer alike: the recorder's path stays.
	ev.Reset.Reason = 14
	if text := string(AppendText(nil, &ev, names)); !strings.Contains(text, " path=linger0 reason=TCP_STATE") {
		t.Errorf("ambiguous reason overrode the recorder's path: %s", text)
	}
	ev.Reset.Dir, ev.Reset.Path = event.ResetReceived, uint8(event.ResetPathPeer)
	if text := string(AppendText(nil, &ev, names)); !strings.Contains(text, "[received]") || !strings.Contains(text, " path=peer") || strings.Contains(text, "reason=") {
		t.Errorf("received reset: %s", text)
	}
}
