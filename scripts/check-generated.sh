#!/bin/bash
# Fails when regenerating the BPF objects and their Go bindings from the
# committed sources would change a committed file. Regenerates in a copy of
# the tree, so the working tree is never touched.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tmp"
(cd "$tmp/internal/probe" && go generate ./...)
(cd "$tmp/internal/lab" && go generate ./...)

status=0
for f in internal/probe/skbtrace_bpfel.o internal/probe/skbtrace_bpfeb.o \
	internal/probe/skbtrace_bpfel.go internal/probe/skbtrace_bpfeb.go \
	internal/probe/profile_bpfel.o internal/probe/profile_bpfeb.o \
	internal/probe/profile_bpfel.go internal/probe/profile_bpfeb.go \
	internal/lab/outeripid_bpfel.o internal/lab/outeripid_bpfeb.o \
	internal/lab/outeripid_bpfel.go internal/lab/outeripid_bpfeb.go; do
	if ! cmp -s "$f" "$tmp/$f"; then
		echo "check-generated: $f is stale; run 'make generate' and commit the result" >&2
		status=1
	fi
done
[ $status = 0 ] && echo "check-generated: BPF objects and bindings are up to date"
exit $status
