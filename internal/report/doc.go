// Package report renders decoded events and summaries for people (the seed's
// line format) and machines (JSON lines). Renderers append to a caller's
// buffer so printing millions of events allocates nothing per event.
package report
