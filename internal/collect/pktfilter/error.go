package pktfilter

import "fmt"

// Error is a filter expression Compile cannot turn into a program: a syntax
// error, a qualifier that does not fit, or a test skbtrace cannot run.
type Error struct {
	Expr  string // the whole expression
	Pos   int    // byte offset in Expr of the part at fault
	Token string // that part as written; empty when the expression ended early
	Msg   string // what is wrong, naming Token
}

// Error gives one line: the expression is quoted, so its newlines are escaped.
func (e *Error) Error() string {
	return fmt.Sprintf("pcap filter %q: %s", e.Expr, e.Msg)
}
