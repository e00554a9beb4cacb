// Package flame writes flame graphs as one self-contained, interactive HTML
// page (zoom, search, tooltips), for CPU profiles and, in differential mode,
// for comparing a profile with a baseline.
package flame
