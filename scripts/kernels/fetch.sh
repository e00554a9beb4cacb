#!/bin/bash
# Usage: scripts/kernels/fetch.sh VERSION     (VERSION: 5.10, 6.1 or 6.12)
#
# Downloads the newest Debian linux-image-<VERSION>*-amd64-unsigned package of
# the suite that ships VERSION and unpacks it into the kernel cache:
#   ${SKBTRACE_KERNEL_CACHE:-$HOME/.cache/skbtrace/kernels}/<VERSION>/
# with boot/vmlinuz-<release> and lib/modules/<release>/. apt runs with a
# configuration of its own under the cache, so /etc/apt is never touched.
# A second call only prints the result. On stdout, in shell syntax:
#   KERNEL_VERSION=6.1
#   KERNEL_RELEASE=6.1.0-40-amd64
#   KERNEL_DIR=/root/.cache/skbtrace/kernels/6.1
#   KERNEL_IMAGE=.../boot/vmlinuz-6.1.0-40-amd64
#   KERNEL_MODULES=.../lib/modules/6.1.0-40-amd64
#   KERNEL_VMLINUX=.../boot/vmlinux-6.1.0-40-amd64   (empty if not extracted)
# vmlinux is the uncompressed ELF kernel: QEMU boots it through its PVH entry
# without the bzImage's self-decompression, which takes 8 s of emulated CPU
# for Debian's xz-compressed 5.10 and 6.1 images under TCG.
set -euo pipefail

ver=${1:-}
case "$ver" in
5.10) suite=bullseye ;;
6.1) suite=bookworm ;;
6.12) suite=trixie ;;
*)
	echo "fetch: unknown kernel version '$ver' (want 5.10, 6.1 or 6.12)" >&2
	exit 2
	;;
esac

cache=${SKBTRACE_KERNEL_CACHE:-$HOME/.cache/skbtrace/kernels}
dir=$cache/$ver

# extract_vmlinux REL: decompresses the bzImage's payload into boot/vmlinux-REL
# (like the kernel's scripts/extract-vmlinux), if it has a PVH entry note.
extract_vmlinux() {
	local img=$dir/boot/vmlinuz-$1 out=$dir/boot/vmlinux-$1 magic tool off notes
	for magic in '\xfd7zXZ\x00:xz' '\x28\xb5\x2f\xfd:zstd'; do
		tool=${magic#*:} magic=${magic%:*}
		off=$(LC_ALL=C grep -m1 -obUaP "$magic" "$img" | head -n1 | cut -d: -f1 || true)
		[ -n "$off" ] || continue
		# The payload is followed by other data, which the decompressor rejects.
		{ tail -c "+$((off + 1))" "$img" | "$tool" -qdc 2>/dev/null || true; } >"$out.tmp"
		# ELF note type 0x12 is XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry point.
		notes=$(LC_ALL=C readelf -n "$out.tmp" 2>/dev/null || true)
		if [[ $notes == *'Unknown note type: (0x00000012)'* ]]; then
			mv "$out.tmp" "$out"
			return
		fi
	done
	rm -f "$out.tmp"
	echo "fetch: no PVH-bootable vmlinux in $img; booting the bzImage" >&2
}

report() {
	local rel vmlinux
	rel=$(cat "$dir/release")
	vmlinux=$dir/boot/vmlinux-$rel
	[ -f "$vmlinux" ] || vmlinux=
	echo "KERNEL_VERSION=$ver"
	echo "KERNEL_RELEASE=$rel"
	echo "KERNEL_DIR=$dir"
	echo "KERNEL_IMAGE=$dir/boot/vmlinuz-$rel"
	echo "KERNEL_MODULES=$dir/lib/modules/$rel"
	echo "KERNEL_VMLINUX=$vmlinux"
}

# Tools this needs; installed only when missing (CI starts from a fresh machine).
need=()
command -v apt-get >/dev/null || { echo "fetch: apt-get is required" >&2; exit 1; }
command -v dpkg-deb >/dev/null || need+=(dpkg)
command -v depmod >/dev/null || need+=(kmod)
command -v xz >/dev/null || need+=(xz-utils)
command -v zstd >/dev/null || need+=(zstd)
command -v readelf >/dev/null || need+=(binutils)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -gt 0 ]; then
	echo "fetch: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/dev/null ||
		{ echo "fetch: installing ${need[*]} failed" >&2; exit 1; }
fi

# The release file is written last, so its presence means a complete unpack.
if [ -f "$dir/release" ]; then
	[ -f "$dir/boot/vmlinux-$(cat "$dir/release")" ] || extract_vmlinux "$(cat "$dir/release")"
	report
	exit 0
fi

# Same mirror as the system's sources, if it names one.
mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
mirror=${mirror:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# apt's own tree: sources, lists, cache and an empty dpkg status, per suite.
apt=$cache/apt/$suite
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc/preferences.d" "$apt/etc/trusted.gpg.d" "$cache/debs"
touch "$apt/status"
cat >"$apt/sources.list" <<EOF
deb [signed-by=$keyring] $mirror $suite main
deb [signed-by=$keyring] $mirror $suite-updates main
deb [signed-by=$keyring] ${mirror}-security $suite-security main
EOF
aptopts=(
	-o Dir::Etc::sourcelist="$apt/sources.list"
	-o Dir::Etc::sourceparts=-
	-o Dir::Etc::preferences="$apt/etc/preferences"
	-o Dir::Etc::preferencesparts="$apt/etc/preferences.d"
	-o Dir::Etc::trusted="$apt/etc/trusted.gpg"
	-o Dir::Etc::trustedparts="$apt/etc/trusted.gpg.d"
	-o Dir::State="$apt"
	-o Dir::State::lists="$apt/lists"
	-o Dir::State::status="$apt/status"
	-o Dir::Cache="$apt"
	-o Dir::Cache::archives="$apt/archives"
	-o APT::Architecture=amd64
	-o APT::Architectures=amd64
	-o Acquire::Languages=none
	# the cache lives under $HOME, which apt's _apt user cannot enter
	-o APT::Sandbox::User=root
)

echo "fetch: updating the $suite package index" >&2
apt-get "${aptopts[@]}" -qq update >&2 || {
	echo "fetch: apt-get update of $suite failed" >&2
	exit 1
}

# Plain amd64 flavour only (not -rt- or -cloud-), newest version wins.
re="^linux-image-${ver//./\\.}[.+-][^a-z]*(\+deb[0-9]+)?-amd64-unsigned\$"
best='' bestv=''
for p in $(apt-cache "${aptopts[@]}" pkgnames linux-image- | grep -E "$re" || true); do
	v=$(apt-cache "${aptopts[@]}" show --no-all-versions "$p" | sed -n 's/^Version: //p' | head -n1)
	if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$bestv"; then
		best=$p bestv=$v
	fi
done
if [ -z "$best" ]; then
	echo "fetch: no package matching $re in $suite" >&2
	exit 1
fi
echo "fetch: downloading $best $bestv" >&2

# apt-get download writes into the current directory, and verifies the
# package's hash against the signed index.
(cd "$cache/debs" && apt-get "${aptopts[@]}" -qq download "$best=$bestv") >&2 || {
	echo "fetch: downloading $best failed" >&2
	exit 1
}
deb=$(ls -t "$cache/debs/${best}_"*.deb | head -n1)

echo "fetch: unpacking $deb" >&2
tmp=$dir.tmp.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"
dpkg-deb -x "$deb" "$tmp"
# trixie ships modules under usr/lib (merged /usr); keep one layout.
if [ -d "$tmp/usr/lib/modules" ] && [ ! -d "$tmp/lib/modules" ]; then
	mkdir -p "$tmp/lib"
	mv "$tmp/usr/lib/modules" "$tmp/lib/modules"
fi
rel=$(ls "$tmp/lib/modules" | head -n1)
[ -f "$tmp/boot/vmlinuz-$rel" ] || {
	echo "fetch: $deb has no boot/vmlinuz-$rel" >&2
	exit 1
}
# The package ships no modules.dep (the maintainer script makes it).
depmod -b "$tmp" "$rel"
echo "$rel" >"$tmp/release"
rm -rf "$dir"
mv "$tmp" "$dir"
rm -f "$deb" # the unpacked tree is the cache
extract_vmlinux "$rel"
report
