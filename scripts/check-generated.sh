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
(cd "$tmp/internal/wire" && go generate ./...)
(cd "$tmp/internal/lab" && go generate ./...)

status=0
# Every object and binding the generators write, so that a new program's
# are checked without a list to keep.
for t in "$tmp"/internal/probe/*_bpfe[lb].{o,go} "$tmp"/internal/lab/*_bpfe[lb].{o,go} "$tmp"/internal/wire/wire.go; do
	f=${t#"$tmp"/}
	if ! cmp -s "$f" "$t"; then
		echo "check-generated: $f is stale or missing; run 'make generate' and commit the result" >&2
		status=1
	fi
done
[ $status = 0 ] && echo "check-generated: BPF objects, bindings and wire types are up to date"
exit $status
