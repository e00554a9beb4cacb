// Package record shapes what a recording writes, block by block, between the
// collector's trace.Writer and the files: rotation into files of a bounded
// size, each readable alone, and the flight recorder, which keeps the recent
// past in memory and writes only the windows around its triggers.
package record
