#!/bin/bash
# Usage: scripts/deb-check.sh [DEB]        (as root)
#
# Proves that a release's Debian package (DEB; default the newest
# dist/skbtrace_*_amd64.deb) installs, works and purges cleanly, in two places:
#   trixie  a Debian 13 root made by debootstrap (minbase with man-db,
#           bash-completion, zsh and fish), a fresh copy each run, entered
#           with chroot;
#   host    this machine, only when dpkg knows no skbtrace package (in any
#           state) and none of the package's files is here unpackaged: a
#           user's install is never touched. The package is purged at the
#           end, also when a check fails or the run is interrupted.
# First lintian, which must report no error (its warnings are shown). In
# each place: dpkg -i needs nothing more (no apt-get install -f) and
# dpkg --verify agrees with its md5sums; skbtrace --version, skbtrace version
# --json, the man pages' headers and the file name carry dpkg's Version; man
# finds every page by its name in the section of its directory and header
# (8 for all of today's) and renders it without warnings, naming the
# command, and every SEE ALSO page exists; whatis knows the pages;
# bash-completion's own loader loads the completion and `skbtrace rec<TAB>`
# completes to record; zsh's compinit maps skbtrace to _skbtrace and fish
# completes `skbtrace rec` (where those shells are installed; elsewhere only
# that the files are where they look); dpkg --purge leaves none of the
# package's files and no file it did not list (a listing of the root before
# the install against one after the purge; on the host, of the trees the
# package writes into). Prints PASS, FAIL or SKIP per check and exits 1 when
# any check failed, 2 when it could not run.
#
# debootstrap takes minutes; its root is kept as a tarball,
# $SKBTRACE_CACHE/debootstrap/trixie-minbase.tar, and the checks on a copy
# of it take seconds. Delete the tarball to rebuild it.
#
# Environment:
#   SKBTRACE_CACHE       cache directory (default ~/.cache/skbtrace)
#   SKBTRACE_DEB_MIRROR  debootstrap's mirror (default: the one that
#                        /etc/apt/sources.list.d/debian.sources names, else
#                        http://deb.debian.org/debian)
#   SKBTRACE_DEB_HOST    0: skip the host's part
set -euo pipefail

die() {
	echo "deb-check: $*" >&2
	exit 2
}
if [ $# -gt 1 ] || [[ ${1:-} == -* ]]; then
	echo "usage: $0 [DEB]" >&2
	exit 2
fi
[ "$(id -u)" = 0 ] || die "needs root: it runs chroot, mount and dpkg -i"

# Every mount is made in a mount namespace of this script's own, so none can
# outlive it, even when it is killed; the trap below still unmounts them
# before it removes anything.
# SKBTRACE_DEB_CHECK_NS: the namespace it was started in (pid 1's may not be
# readable, as in a sandbox).
ns=$(readlink /proc/self/ns/mnt)
if [ -z "${SKBTRACE_DEB_CHECK_NS:-}" ]; then
	exec env SKBTRACE_DEB_CHECK_NS="$ns" unshare --mount --propagation private -- "$(readlink -f "$0")" "$@"
fi
[ "$SKBTRACE_DEB_CHECK_NS" != "$ns" ] || die "unshare gave it no mount namespace of its own"
unset SKBTRACE_DEB_CHECK_NS

here=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 1 ]; then
	deb=$(readlink -f -- "$1")
else
	deb=
	for f in "$here"/dist/skbtrace_*_amd64.deb; do
		[ -e "$f" ] || continue
		if [ -z "$deb" ] || [ "$f" -nt "$deb" ]; then
			deb=$f
		fi
	done
	[ -n "$deb" ] || die "no dist/skbtrace_*_amd64.deb: run make release, or name a .deb"
fi
[ -f "$deb" ] || die "$deb: no such file"
pkg=$(dpkg-deb -f "$deb" Package 2>/dev/null) || die "$deb is not a Debian package"
[ "$pkg" = skbtrace ] || die "$deb is the package $pkg, not skbtrace"
arch=$(dpkg-deb -f "$deb" Architecture)
[ "$arch" = "$(dpkg --print-architecture)" ] ||
	die "$deb is for $arch: this machine runs $(dpkg --print-architecture) binaries"
debver=$(dpkg-deb -f "$deb" Version)
# The package's files, as dpkg will name them (directories end in /).
contents=$(dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./|/|')
echo "deb-check: $deb (skbtrace $debver, $arch)" >&2

variant=minbase
# zsh and fish cost seconds of debootstrap; with them the zsh and fish
# completions are tried by the shells themselves.
include=man-db,bash-completion,zsh,fish
cachedir=${SKBTRACE_CACHE:-$HOME/.cache/skbtrace}/debootstrap
tarball=$cachedir/trixie-$variant.tar
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

scratch=$(mktemp -d /tmp/skbtrace-deb-check.XXXXXX)
root=       # the trixie root while it is checked; empty: the host
partial=    # a cache tarball being written
installed=  # set while this script's skbtrace is installed on the host

# mounts_under DIR: the mount points at or below DIR, deepest first.
mounts_under() {
	findmnt -rn -o TARGET | awk -v d="$1" '$0 == d || index($0, d "/") == 1' | sort -r
}
# unmount_under DIR: unmounts everything at or below DIR; fails when any
# mount is still there.
unmount_under() {
	local m
	mounts_under "$1" | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" || true
	done
	[ -z "$(mounts_under "$1")" ]
}
# remove_tree DIR: removes DIR, never through a mount: it unmounts first,
# refuses when that failed, and rm stays on DIR's file system besides.
remove_tree() {
	unmount_under "$1" || die "mounts remain under $1: not removing it"
	rm -rf --one-file-system "$1"
}
cleanup() {
	local rc=$?
	if [ -n "$installed" ]; then
		echo "deb-check: purging skbtrace from this machine" >&2
		dpkg --purge skbtrace >/dev/null 2>&1 ||
			{ echo "deb-check: dpkg --purge skbtrace failed here: purge it by hand" >&2; rc=2; }
	fi
	[ -z "$partial" ] || rm -f "$partial"
	if unmount_under "$scratch"; then
		rm -rf --one-file-system "$scratch"
	else
		echo "deb-check: mounts remain under $scratch: left it in place" >&2
		rc=2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "deb-check: interrupted" >&2; exit 130' INT
trap 'echo "deb-check: terminated" >&2; exit 143' TERM
trap 'echo "deb-check: hung up" >&2; exit 129' HUP

apt_updated=
# apt_install PACKAGE...: for tools missing here (CI starts from a fresh machine).
apt_install() {
	echo "deb-check: installing $* on this machine" >&2
	export DEBIAN_FRONTEND=noninteractive
	if [ -z "$apt_updated" ]; then
		apt-get update -qq >/dev/null || die "apt-get update failed"
		apt_updated=1
	fi
	local out
	out=$(apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "$@" 2>&1) || {
		echo "$out" >&2
		die "installing $* failed"
	}
}

passed=0 failed=0 where=
pass() {
	passed=$((passed + 1))
	echo "PASS $where: $*"
}
fail() {
	failed=$((failed + 1))
	echo "FAIL $where: $*"
}
skip() { echo "SKIP $where: $*"; }
# evidence TEXT: the first lines of TEXT, indented under a FAIL.
evidence() { [ -z "$1" ] || sed -n '1,15s/^/    /p' <<<"$1"; }

# in_place COMMAND...: runs COMMAND where the checks run, in a clean
# environment whose HOME is scratch space (so that the shells, man and
# dpkg write nothing the listings compare).
in_place() {
	local envs=(PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 TERM=dumb MANWIDTH=80)
	if [ -n "$root" ]; then
		chroot "$root" /usr/bin/env -i "${envs[@]}" HOME=/tmp/home "$@"
	else
		env -i "${envs[@]}" HOME="$scratch/home" "$@"
	fi
}

# field NAME: dpkg's NAME field of the installed skbtrace.
field() { in_place dpkg-query -W -f "\${$1}" skbtrace; }

# listing: the paths whose appearance or disappearance the purge is judged
# by. In the trixie root all of it but what dpkg, man-db and logs keep and
# the kernel's and scratch trees; on the host, where others work at the same
# time, the trees the package writes into (/usr/bin, /usr/share/man, ...).
listing() {
	if [ -n "$root" ]; then
		in_place find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path /run \
			-o -path /var/cache -o -path /var/log -o -path /var/lib/dpkg -o -path /var/lib/man-db \) \
			-prune -o -print
	else
		local trees
		# A file's directory, or its first three levels when deeper:
		# /usr/bin, /usr/share/man, /usr/share/zsh, ...
		trees=$(awk '!/\/$/ { n = split($0, c, "/"); if (n > 4) print "/" c[2] "/" c[3] "/" c[4]; else { sub(/\/[^\/]*$/, ""); print } }' <<<"$contents" | sort -u)
		# A tree that does not exist yet (/usr/share/fish without fish) is
		# listed once it does.
		# shellcheck disable=SC2086 # one tree a line, no blanks in them
		find $trees -xdev 2>/dev/null || true
	fi | LC_ALL=C sort
}

# bash_probe: run by bash in the place. Loads bash-completion, lets its
# default (-D) completion load skbtrace's the way bash does on the first
# TAB after an unknown command, then calls the completion function as bash
# would and prints what it offered, one KEY=VALUE a line.
read -r -d '' bash_probe <<'EOF' || true
. /usr/share/bash-completion/bash_completion || { echo "error=sourcing bash_completion failed"; exit 1; }
complete -p skbtrace >/dev/null 2>&1 && echo "early=skbtrace's completion was defined before loading"
loader=$(complete -p -D 2>/dev/null)
loader=${loader##*-F }
loader=${loader%% *}
echo "loader=$loader"
[ -n "$loader" ] || exit 1
"$loader" skbtrace "" skbtrace
echo "loader_rc=$?"
spec=$(complete -p skbtrace 2>/dev/null) || exit 1
echo "spec=$spec"
fn=${spec##*-F }
fn=${fn%% *}
# offer KEY LINE: what TAB with the cursor at the end of LINE offers.
offer() {
	COMP_LINE=$2 COMP_POINT=${#2} COMP_TYPE=9 COMP_KEY=9
	read -ra COMP_WORDS <<<"$2"
	[[ $2 != *" " ]] || COMP_WORDS+=("")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	"$fn" "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
	echo "$1=${COMPREPLY[*]}"
}
offer rec "skbtrace rec"
offer flags "skbtrace record --filter-p"
EOF

# check_place DEB: every check, DEB being the package's path in the place.
check_place() {
	local debin=$1 out before p missing
	# HOME for the shells and man, made before the first listing.
	mkdir -p "$scratch/home"
	[ -z "$root" ] || mkdir -p "$root/tmp/home"
	before=$(listing)

	# Install. dpkg -i fails (and leaves the package unconfigured) when a
	# Depends is not met: success and "ii" mean nothing more was needed.
	# On the host the trap purges from here on, even a half-installed one.
	[ -n "$root" ] || installed=1
	if ! out=$(in_place dpkg -i "$debin" 2>&1); then
		fail "dpkg -i $(basename "$debin") failed"
		evidence "$out"
		purge_check "$before"
		return
	fi
	local status depends
	status=$(field db:Status-Abbrev)
	depends=$(field Depends)
	out=$(in_place dpkg --audit 2>&1)
	if [ "$status" = "ii " ] && [ -z "$out" ]; then
		pass "dpkg -i installs it alone (Depends: ${depends:-none}; Suggests: $(field Suggests))"
	else
		fail "dpkg -i left it in state '$status'"
		evidence "$out"
	fi
	if out=$(in_place dpkg --verify skbtrace 2>&1) && [ -z "$out" ]; then
		pass "dpkg --verify: every installed file matches the package's md5sums"
	else
		fail "dpkg --verify reports changed or missing files"
		evidence "$out"
	fi

	# Where the files are: man and the shells look only there.
	missing=
	for p in /usr/bin/skbtrace /usr/share/man/man8/skbtrace.8.gz /usr/share/man/man8/skbtrace-record.8.gz \
		/usr/share/bash-completion/completions/skbtrace /usr/share/zsh/vendor-completions/_skbtrace \
		/usr/share/fish/vendor_completions.d/skbtrace.fish; do
		[ -f "$root$p" ] || missing+=" $p"
	done
	[ -x "$root/usr/bin/skbtrace" ] || missing+=" (executable /usr/bin/skbtrace)"
	if [ -z "$missing" ]; then
		pass "files where man, bash, zsh and fish look for them"
	else
		fail "missing:$missing"
	fi

	version_check
	man_check
	completion_check

	purge_check "$before"
}

# version_check: release.sh gives dpkg's Version and the binary's version
# string the same value, so each must be dpkg's Version exactly.
version_check() {
	local pv v json jv commit hash bad=
	pv=$(field Version)
	v=$(in_place skbtrace --version 2>&1) || bad+=" skbtrace --version failed: $v;"
	json=$(in_place skbtrace version --json 2>&1) || bad+=" skbtrace version --json failed: $json;"
	jv=$(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' <<<"$json")
	commit=$(sed -n 's/.*"commit": *"\([^"]*\)".*/\1/p' <<<"$json")
	[ "$pv" = "$debver" ] || bad+=" dpkg-query says $pv, the .deb's control $debver;"
	[ "$v" = "skbtrace version $pv" ] || bad+=" skbtrace --version says '$v';"
	[ "$jv" = "$pv" ] || bad+=" version --json says '$jv';"
	[ "$(basename "$deb")" = "skbtrace_${pv}_$arch.deb" ] || bad+=" the file is named $(basename "$deb");"
	# A snapshot's version ends in the commit's short hash (then +dirty).
	if [[ $pv =~ git[0-9]{8}\.([0-9a-f]{7,})(\+dirty)?$ ]]; then
		hash=${BASH_REMATCH[1]}
		[[ $commit == "$hash"* ]] || bad+=" the version names commit $hash, version --json $commit;"
	fi
	if [ -z "$bad" ]; then
		pass "skbtrace --version, version --json and dpkg-query all say $pv${hash:+ (commit $commit)}"
	else
		fail "versions disagree:$bad"
		evidence "$json"
	fi
}

# man_check: each page as a user asks for it, `man NAME`: found under its
# own name in the section its directory and header name, rendered without
# groff warnings, naming the command; and the pages its SEE ALSO names exist.
man_check() {
	local pages page sec name th rendered nameline err bad='' fine=0 see names out
	pages=$(in_place dpkg -L skbtrace | grep '^/usr/share/man/man[^/]*/[^/]*\.gz$' || true)
	# NAME(SECTION) of each page.
	names=$(sed -E 's|.*/man([^/]*)/(.*)\.\1\.gz$|\2(\1)|' <<<"$pages")
	if ! grep -qx 'skbtrace(8)' <<<"$names" || ! grep -qx 'skbtrace-record(8)' <<<"$names"; then
		fail "the package lacks skbtrace.8 or skbtrace-record.8 in /usr/share/man/man8; it has: $(tr '\n' ' ' <<<"$names")"
	fi
	while read -r page; do
		[ -n "$page" ] || continue
		sec=${page#/usr/share/man/man}
		sec=${sec%%/*}
		name=$(basename "$page" ".$sec.gz")
		# The page's own header: .TH "NAME" "SECTION" "DATE" "skbtrace VERSION" ...
		th=$(zcat "$root$page" | sed -n 's/^\.TH "\([^"]*\)" "\([^"]*\)" "[^"]*" "\([^"]*\)".*/\1 \2 \3/p' | head -n 1)
		[ "$th" = "${name^^} $sec skbtrace $debver" ] || bad+=" $page: .TH says '$th';"
		[ "$(in_place man -w "$name" 2>&1)" = "$page" ] || bad+=" $name: man -w finds '$(in_place man -w "$name" 2>&1)';"
		err=$scratch/man.err
		rendered=$(in_place man -P cat "$sec" "$name" 2>"$err") || true
		# NAME's line, its justified blanks squeezed: "name - what it does".
		nameline=$(tr -s ' ' <<<"$rendered" | grep -m1 "^ \?$name - " | sed 's/^ //' || true)
		if [ -n "$nameline" ] && [ ! -s "$err" ]; then
			fine=$((fine + 1))
		else
			bad+=" $name: man renders $(wc -l <<<"$rendered") lines, NAME line '$nameline', stderr '$(head -c 300 "$err")';"
		fi
		for see in $(zcat "$root$page" | grep -o 'skbtrace[a-z-]*([0-9])' | sort -u); do
			grep -qxF -- "$see" <<<"$names" || bad+=" $name: SEE ALSO $see is not in the package;"
		done
		if [ "$name" = skbtrace ] || [ "$name" = skbtrace-record ]; then
			if [ -n "$nameline" ]; then
				pass "man $name renders ($(wc -l <<<"$rendered") lines): $nameline"
			else
				fail "man $name does not render a NAME line"
				evidence "$rendered"
			fi
		fi
	done <<<"$pages"
	if [ -z "$bad" ]; then
		pass "all $fine man pages ($(sed -E 's/.*\((.*)\)$/\1/' <<<"$names" | sort | uniq -c | awk '{printf "%s%s in section %s", s, $1, $2; s = ", "}')): found by name, .TH names it, its section and skbtrace $debver, no groff warnings, SEE ALSO pages present"
	else
		fail "man pages:$bad"
	fi
	# whatis reads man-db's index, which dpkg's trigger for man-db rebuilt.
	if out=$(in_place whatis skbtrace-record 2>&1) && [[ $out == "skbtrace-record (8)"* ]]; then
		pass "whatis skbtrace-record: $out"
	else
		fail "whatis skbtrace-record: $out"
	fi
}

completion_check() {
	local out err=$scratch/completion.err
	if ! in_place test -f /usr/share/bash-completion/bash_completion; then
		fail "bash-completion is not installed here"
	else
		out=$(in_place bash -c "$bash_probe" 2>"$err") || true
		# val KEY: what the probe printed for KEY.
		val() { sed -n "s/^$1=//p" <<<"$out"; }
		if [ -n "$(val early)" ] || [ -z "$(val spec)" ] || [[ $(val spec) != *"-F "* ]]; then
			fail "bash: bash-completion's loader '$(val loader)' gave no completion for skbtrace"
			evidence "$out"$'\n'"$(cat "$err")"
		else
			pass "bash: $(val loader) loads it: $(val spec)"
		fi
		if [ "$(val rec)" = record ]; then
			pass "bash: skbtrace rec<TAB> offers: record"
		else
			fail "bash: skbtrace rec<TAB> offers '$(val rec)', not record"
			evidence "$out"$'\n'"$(cat "$err")"
		fi
		if [[ " $(val flags) " == *" --filter-port "* ]] && [[ " $(val flags) " == *" --filter-pid "* ]]; then
			pass "bash: skbtrace record --filter-p<TAB> offers: $(val flags)"
		else
			fail "bash: skbtrace record --filter-p<TAB> offers '$(val flags)'"
			evidence "$out"$'\n'"$(cat "$err")"
		fi
	fi

	# zsh's compinit reads the #compdef line of every file on $fpath, where
	# Debian's zsh has /usr/share/zsh/vendor-completions.
	if in_place sh -c 'command -v zsh' >/dev/null; then
		# shellcheck disable=SC2016 # zsh expands them
		out=$(in_place zsh -fc 'autoload -Uz compinit && compinit -u -d "$HOME/.zcompdump" && print -r -- "$_comps[skbtrace]"' 2>&1) || true
		if [ "$out" = _skbtrace ]; then
			pass "zsh: compinit completes skbtrace with _skbtrace from /usr/share/zsh/vendor-completions"
		else
			fail "zsh: compinit maps skbtrace to '$out', not _skbtrace"
		fi
	else
		skip "zsh is not installed here: only checked that _skbtrace is in /usr/share/zsh/vendor-completions"
	fi

	# fish loads vendor_completions.d/skbtrace.fish on the first completion
	# of skbtrace; complete -C is that completion.
	if in_place sh -c 'command -v fish' >/dev/null; then
		out=$(in_place fish -c 'complete -C "skbtrace rec"' 2>&1) || true
		if [ "$(cut -f1 <<<"$out")" = record ]; then
			pass "fish: skbtrace rec<TAB> offers: record"
		else
			fail "fish: skbtrace rec<TAB> offers '$(cut -f1 <<<"$out" | tr '\n' ' ')', not record"
			evidence "$out"
		fi
	else
		skip "fish is not installed here: only checked that skbtrace.fish is in /usr/share/fish/vendor_completions.d"
	fi
}

# purge_check BEFORE: purges, then nothing the package listed may remain
# (but directories other packages own too) and the listing must be BEFORE's.
purge_check() {
	local before=$1 list out left='' p owners after added removed stray='' others=''
	list=$(in_place dpkg -L skbtrace 2>/dev/null || true)
	if out=$(in_place dpkg --purge skbtrace 2>&1); then
		installed=
		pass "dpkg --purge skbtrace"
	else
		fail "dpkg --purge skbtrace failed"
		evidence "$out"
	fi
	if out=$(in_place dpkg -s skbtrace 2>&1); then
		fail "dpkg -s still knows skbtrace after the purge"
		evidence "$out"
	else
		pass "dpkg -s: $(head -n 1 <<<"$out")"
	fi
	while read -r p; do
		case "$p" in "" | /.) continue ;; esac
		if [ -d "$root$p" ] && [ ! -L "$root$p" ]; then
			in_place dpkg-query -S "$p" >/dev/null 2>&1 || left+=" $p/"
		elif [ -e "$root$p" ] || [ -L "$root$p" ]; then
			left+=" $p"
		fi
	done <<<"$list"
	if [ -z "$left" ]; then
		pass "none of the $(grep -c . <<<"$list") paths dpkg -L listed remains (but directories other packages own)"
	else
		fail "left behind by the purge:$left"
	fi
	after=$(listing)
	added=$(comm -13 <(echo "$before") <(echo "$after"))
	removed=$(comm -23 <(echo "$before") <(echo "$after"))
	# On the host others may install packages meanwhile: what a package owns
	# is theirs, not a stray.
	while read -r p; do
		[ -n "$p" ] || continue
		if [ -z "$root" ] && owners=$(in_place dpkg-query -S "$p" 2>/dev/null); then
			others+=" $p (${owners%%:*})"
		else
			stray+=" $p"
		fi
	done <<<"$added"
	if [ -z "$stray" ] && [ -z "$removed" ]; then
		pass "after the purge the file listing equals the one before the install ($(grep -c . <<<"$before") paths)${others:+; added meanwhile by other packages:$others}"
	else
		fail "the purge left a different tree: added:${stray:- none}; removed: $(tr '\n' ' ' <<<"${removed:-none}")"
	fi
}

# ---- lintian ---------------------------------------------------------------
# Debian's own judge of a package: no error may remain (--fail-on error);
# its warnings and notes are shown, not failed on.
where=lintian
command -v lintian >/dev/null || apt_install lintian
if out=$(lintian --allow-root --fail-on error "$deb" 2>&1); then
	pass "lintian $(lintian --version | awk '{print $2}'): no error${out:+; it notes:}"
	evidence "$out"
else
	fail "lintian reports errors"
	evidence "$out"
fi

# ---- trixie ----------------------------------------------------------------
where=trixie
start=$SECONDS

# build_root: debootstraps trixie and stores it as the cache tarball,
# written beside it and renamed into place: an interrupted run leaves no
# half cache.
build_root() {
	local b=$scratch/bootstrap log=$scratch/debootstrap.log mirror=${SKBTRACE_DEB_MIRROR:-}
	command -v debootstrap >/dev/null || apt_install debootstrap
	[ -f "$keyring" ] || apt_install debian-archive-keyring
	if [ -z "$mirror" ] && [ -r /etc/apt/sources.list.d/debian.sources ]; then
		# The first URIs of a stanza that is not the security archive's.
		mirror=$(awk '
			function take() { if (!done && uri ~ /^(https?|ftp|file):\/\// && suites !~ /-security/) { print uri; done = 1 } }
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { take(); uri = suites = ""; next }
			tolower($1) == "uris:" { uri = $2 }
			tolower($1) == "suites:" { suites = $0 }
			END { take() }' /etc/apt/sources.list.d/debian.sources)
	fi
	mirror=${mirror:-http://deb.debian.org/debian}
	echo "deb-check: debootstrap --variant=$variant --include=$include trixie from $mirror (minutes; cached afterwards)" >&2
	if ! debootstrap --variant="$variant" --include="$include" --keyring="$keyring" trixie "$b" "$mirror" >"$log" 2>&1; then
		tail -n 20 "$log" >&2
		die "debootstrap failed (its log's end above)"
	fi
	mkdir -p "$cachedir"
	partial=$tarball.partial.$$
	tar --numeric-owner -C "$b" -cf "$partial" .
	mv -f "$partial" "$tarball"
	partial=
	remove_tree "$b"
	echo "deb-check: cached $tarball ($(du -h "$tarball" | cut -f1)) after $((SECONDS - start)) s" >&2
}
# unpack_root: a fresh copy of the cached root; fails when the cache lacks
# a package of $include (it was made with another list).
unpack_root() {
	root=$scratch/trixie
	mkdir "$root"
	tar --numeric-owner -C "$root" -xf "$tarball"
	# shellcheck disable=SC2086 # one package a word
	chroot "$root" dpkg-query -W ${include//,/ } >/dev/null 2>&1
}

[ -f "$tarball" ] || build_root
if ! unpack_root; then
	echo "deb-check: $tarball lacks some of $include: rebuilding it" >&2
	remove_tree "$root"
	build_root
	unpack_root || die "the new root lacks some of $include"
fi
[ -c "$root/dev/null" ] || die "debootstrap made no /dev/null in the root"
# dpkg's maintainer scripts and man expect a /proc; the root's /dev already
# has the device nodes debootstrap made, so the host's /dev is not needed.
mount -t proc proc "$root/proc"
cp "$deb" "$root/tmp/"
check_place "/tmp/$(basename "$deb")"
remove_tree "$root"
root=
echo "deb-check: trixie: $((SECONDS - start)) s" >&2

# ---- host ------------------------------------------------------------------
# shellcheck source=/dev/null
where="host ($(. /etc/os-release && echo "${PRETTY_NAME:-$ID}"))"
start=$SECONDS
unowned=
while read -r p; do
	case "$p" in */ | "") continue ;; esac
	if [ -e "$p" ] && ! dpkg-query -S "$p" >/dev/null 2>&1; then
		unowned+=" $p"
	fi
done <<<"$contents"
if [ "${SKBTRACE_DEB_HOST:-1}" = 0 ]; then
	skip "SKBTRACE_DEB_HOST=0"
elif out=$(dpkg -s skbtrace 2>/dev/null); then
	skip "skbtrace is installed here as a package ($(sed -n 's/^Status: //p; s/^Version: /version /p' <<<"$out" | paste -sd ' ')): not touched"
elif [ -n "$unowned" ]; then
	skip "files of no package are where the package installs (a build of skbtrace?):$unowned: not touched"
else
	# The checks need man and bash-completion; zsh and fish are tried only
	# when the machine already has them.
	command -v man >/dev/null || apt_install man-db
	[ -f /usr/share/bash-completion/bash_completion ] || apt_install bash-completion
	check_place "$deb"
	echo "deb-check: host: $((SECONDS - start)) s" >&2
fi

echo "deb-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
