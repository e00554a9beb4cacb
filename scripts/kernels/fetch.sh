#!/bin/bash
# Usage: scripts/kernels/fetch.sh VERSION [ARCH]
#        (VERSION: 5.10, 6.1 or 6.12; ARCH: amd64, the default, or arm64)
#
# Downloads the newest Debian linux-image-<VERSION>*-<ARCH>-unsigned package
# of the suite that ships VERSION and unpacks it into the kernel cache:
#   ${SKBTRACE_KERNEL_CACHE:-$HOME/.cache/skbtrace/kernels}/<VERSION>/
# (arm64's under arm64-<VERSION>/) with boot/vmlinuz-<release> and
# lib/modules/<release>/. apt runs with a configuration of its own under the
# cache (debian-apt.sh), so /etc/apt is never touched.
# A second call only prints the result. On stdout, in shell syntax:
#   KERNEL_VERSION=6.1
#   KERNEL_RELEASE=6.1.0-40-amd64
#   KERNEL_DIR=/root/.cache/skbtrace/kernels/6.1
#   KERNEL_IMAGE=.../boot/vmlinuz-6.1.0-40-amd64
#   KERNEL_MODULES=.../lib/modules/6.1.0-40-amd64
#   KERNEL_VMLINUX=.../boot/vmlinux-6.1.0-40-amd64   (empty if not extracted)
#   KERNEL_DEB_VERSION=6.1.153-1   (the package's version: the point release)
# The release names Debian's ABI, which spans point releases (5.10.0-46 was
# 5.10.262-1 once and another point release before it): the package's
# version says which one ran.
# vmlinux is the uncompressed ELF kernel: QEMU boots it through its PVH entry
# without the bzImage's self-decompression, which takes 8 s of emulated CPU
# for Debian's xz-compressed 5.10 and 6.1 images under TCG.
# For arm64 a line KERNEL_ARCH=arm64 comes first, and KERNEL_VMLINUX is
# boot/Image-<release>, the raw arm64 Image that qemu-system-aarch64's
# -kernel loads without firmware (Debian's vmlinuz is a compressed Image, or
# an EFI zboot image that only EFI firmware would unpack).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=debian-apt.sh
. "$here/debian-apt.sh"

ver=${1:-} arch=${2:-amd64}
case "$arch" in
amd64 | arm64) ;;
*)
	echo "fetch: unknown architecture '$arch' (want amd64 or arm64)" >&2
	exit 2
	;;
esac
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
[ "$arch" = amd64 ] || dir=$cache/$arch-$ver

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

# extract_image REL: unpacks the arm64 vmlinuz into boot/Image-REL, the raw
# Image (magic "ARM\x64" at byte 56). vmlinuz is either the Image gzipped
# (bookworm) or an EFI zboot image: a PE header with "zimg" at byte 4, the
# payload's offset and size (little-endian) at 8 and 12, and the name of its
# compression at 24.
extract_image() {
	local img=$dir/boot/vmlinuz-$1 out=$dir/boot/Image-$1 off size comp
	if [ "$(od -An -tx1 -N2 "$img" | tr -d ' ')" = 1f8b ]; then
		gzip -dc "$img" >"$out.tmp"
	elif [ "$(dd if="$img" bs=1 skip=4 count=4 2>/dev/null)" = zimg ]; then
		off=$(od -An -tu4 -j8 -N4 "$img" | tr -d ' ')
		size=$(od -An -tu4 -j12 -N4 "$img" | tr -d ' ')
		comp=$(dd if="$img" bs=1 skip=24 count=16 2>/dev/null | tr -d '\0')
		case "$comp" in
		gzip | zstd | xz) ;;
		lzma) comp=xz ;;
		*)
			echo "fetch: $img is a zboot image compressed with '$comp', which this cannot unpack" >&2
			exit 1
			;;
		esac
		tail -c "+$((off + 1))" "$img" | head -c "$size" | "$comp" -dc >"$out.tmp"
	else
		# Already raw: a hard link costs no space.
		ln -f "$img" "$out.tmp" 2>/dev/null || cp "$img" "$out.tmp"
	fi
	if [ "$(dd if="$out.tmp" bs=1 skip=56 count=4 2>/dev/null | od -An -tx1 | tr -d ' ')" != 41524d64 ]; then
		rm -f "$out.tmp"
		echo "fetch: no arm64 Image in $img" >&2
		exit 1
	fi
	mv "$out.tmp" "$out"
}

# extract REL: the uncompressed kernel QEMU boots fastest.
extract() {
	case "$arch" in
	amd64) extract_vmlinux "$1" ;;
	arm64) extract_image "$1" ;;
	esac
}

# uncompressed REL: where extract leaves the kernel.
uncompressed() {
	case "$arch" in
	amd64) echo "$dir/boot/vmlinux-$1" ;;
	arm64) echo "$dir/boot/Image-$1" ;;
	esac
}

# deb_version: the version of the package unpacked into $dir, kept in
# $dir/deb-version when unpacked; a cache unpacked before that file was
# kept gets it from the package's own changelog, whose first entry is the
# version it was built as.
deb_version() {
	if [ ! -f "$dir/deb-version" ]; then
		local log
		log=$(ls "$dir"/usr/share/doc/linux-image-*/changelog.Debian.gz 2>/dev/null | head -n1)
		[ -n "$log" ] || { echo "fetch: $dir has no deb-version and no changelog to read it from" >&2; exit 1; }
		zcat "$log" | sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' >"$dir/deb-version.tmp.$$"
		[ -s "$dir/deb-version.tmp.$$" ] || { echo "fetch: no version in the first line of $log" >&2; exit 1; }
		mv "$dir/deb-version.tmp.$$" "$dir/deb-version"
	fi
	cat "$dir/deb-version"
}

report() {
	local rel vmlinux debv
	rel=$(cat "$dir/release")
	debv=$(deb_version)
	vmlinux=$(uncompressed "$rel")
	[ -f "$vmlinux" ] || vmlinux=
	[ "$arch" = amd64 ] || echo "KERNEL_ARCH=$arch"
	echo "KERNEL_VERSION=$ver"
	echo "KERNEL_RELEASE=$rel"
	echo "KERNEL_DIR=$dir"
	echo "KERNEL_IMAGE=$dir/boot/vmlinuz-$rel"
	echo "KERNEL_MODULES=$dir/lib/modules/$rel"
	echo "KERNEL_VMLINUX=$vmlinux"
	echo "KERNEL_DEB_VERSION=$debv"
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
# shellcheck source-path=SCRIPTDIR source=host-install.sh
. "$here/host-install.sh"
install_missing fetch "${need[@]}"

# The release file is written last, so its presence means a complete unpack.
if [ -f "$dir/release" ]; then
	[ -f "$(uncompressed "$(cat "$dir/release")")" ] || extract "$(cat "$dir/release")"
	report
	exit 0
fi

aptopts=() # set by debian_apt
debian_apt fetch "$suite" "$arch"
mkdir -p "$cache/debs"
debian_apt_update || exit 1

# Plain flavour only (not -rt-, -cloud- or arm64's -16k), newest version wins.
re="^linux-image-${ver//./\\.}[.+-][^a-z]*(\+deb[0-9]+)?-$arch-unsigned\$"
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
echo "$bestv" >"$tmp/deb-version"
echo "$rel" >"$tmp/release"
rm -rf "$dir"
mv "$tmp" "$dir"
rm -f "$deb" # the unpacked tree is the cache
extract "$rel"
report
