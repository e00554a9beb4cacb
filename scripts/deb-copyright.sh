#!/bin/bash
# Usage: scripts/deb-copyright.sh BINARY        (scripts/release.sh runs it)
#
# Writes the Debian copyright file (machine-readable format 1.0) of a
# release to standard output: packaging/copyright, the project's own
# paragraphs, then one paragraph for Go's runtime and standard library and
# one for every Go module that `go version -m BINARY` says is compiled into
# BINARY, with the licence file the module ships (and its NOTICE or PATENTS
# file): a static binary carries their code, so it carries their notices.
# A module whose licence it cannot name is an error, not a guess.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
[ $# -eq 1 ] || { echo "usage: $0 BINARY" >&2; exit 2; }
bin=$1

die() {
	echo "deb-copyright: $*" >&2
	exit 1
}

# name FILE: the short names of the licences whose texts FILE holds (some
# modules ship several in one file), in Debian's copyright format.
name() {
	local t names=()
	t=$(tr -s ' \t\n' ' ' <"$1")
	if [[ $t == *"Redistribution and use in source and binary forms"* ]]; then
		if [[ $t == *"Neither the name"* || $t == *"names of its contributors"* ]]; then
			names+=(BSD-3-Clause)
		else
			names+=(BSD-2-Clause)
		fi
	fi
	[[ $t != *"Apache License"*"Version 2.0"* ]] || names+=(Apache-2.0)
	[[ $t != *"Permission is hereby granted, free of charge"* ]] || names+=(Expat)
	[ ${#names[@]} -gt 0 ] || return 1
	local IFS=' '
	sed 's/ / and /g' <<<"${names[*]}"
}

# text FILE: FILE as the continuation lines of a field (blank lines as
# " ."), a full copy of the Apache License in it (some modules carry one
# for part of their code) named by its place on Debian systems instead,
# as Debian policy and lintian want.
text() {
	awk '
		skip && /END OF TERMS AND CONDITIONS/ { skip = 0; print "   [The Apache License, Version 2.0: on Debian systems in"; print "   /usr/share/common-licenses/Apache-2.0]"; next }
		skip { next }
		/^[[:space:]]*Apache License[[:space:]]*$/ { held = $0; next }
		held != "" && /^[[:space:]]*Version 2\.0, January 2004/ { held = ""; skip = 1; next }
		held != "" { print held; held = "" }
		{ print }
	' "$1" | sed -e 's/[[:space:]]*$//' -e 's/^$/./' -e 's/^/ /'
}

# paragraph FILES-GLOB WHAT DIR: the Files paragraph of the code in DIR.
paragraph() {
	local files=$1 what=$2 dir=$3 lic short copyright extra
	lic=$(find "$dir" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'COPYING*' \) | LC_ALL=C sort | head -n 1)
	[ -n "$lic" ] || die "$what has no licence file in $dir"
	short=$(name "$lic") || die "$what: cannot name the licence in $lic: check it by hand"
	copyright=$(grep -E '^[[:space:]>]*Copyright' "$lic" | grep -v '\[yyyy\]' | sed -e 's/^[[:space:]>]*Copyright[[:space:]]*//' -e 's/^([cC])[[:space:]]*//' -e 's/^©[[:space:]]*//' || true)
	[ -n "$copyright" ] || copyright="the authors of $what"
	echo
	echo "Files: $files"
	echo "Copyright: $(sed -n 1p <<<"$copyright")"
	sed -n '2,$s/^/ /p' <<<"$copyright"
	if [ "$short" = Apache-2.0 ]; then
		echo "License: Apache-2.0"
	else
		echo "License: $short"
		text "$lic"
	fi
	echo "Comment: $what, compiled into /usr/bin/skbtrace."
	for extra in NOTICE PATENTS; do
		[ -f "$dir/$extra" ] || continue
		echo " ."
		echo " Its $extra file:"
		echo " ."
		text "$dir/$extra"
	done
}

[ -f "$bin" ] || die "$bin: no such file"
info=$("$GO" version -m "$bin") || die "go version -m $bin failed"
cat packaging/copyright
goversion=$(sed -n '1s/.*: //p' <<<"$info")
paragraph "go/*" "Go's runtime and standard library ($goversion)" "$("$GO" env GOROOT)"
# dep lines: dep PATH VERSION SUM; a replaced module's "=>" line follows it.
while read -r kind path ver _; do
	[ "$kind" = dep ] || continue
	dir=$("$GO" mod download -json "$path@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$dir" ] || die "go mod download $path@$ver gave no directory"
	paragraph "vendor/$path/*" "the Go module $path $ver" "$dir"
done <<<"$info"
