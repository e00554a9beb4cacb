#!/bin/bash
# Usage: scripts/kernels/busybox.sh ARCH     (ARCH: amd64 or arm64)
#
# Prints the path of a static busybox for ARCH: Debian 12's busybox-static,
# downloaded once with an apt of its own (debian-apt.sh; /etc/apt is never
# touched) and cached as
#   ${SKBTRACE_BUSYBOX_CACHE:-$HOME/.cache/skbtrace/busybox}/<ARCH>/busybox
# Both architectures get the same build, whatever the host has installed, so
# a bare guest (bare.sh) runs the same applets on either.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=debian-apt.sh
. "$here/debian-apt.sh"

arch=${1:-}
case "$arch" in
amd64 | arm64) ;;
*)
	echo "busybox: unknown architecture '$arch' (want amd64 or arm64)" >&2
	exit 2
	;;
esac
dir=${SKBTRACE_BUSYBOX_CACHE:-$HOME/.cache/skbtrace/busybox}/$arch
if [ -x "$dir/busybox" ]; then
	echo "$dir/busybox"
	exit 0
fi

# Tools this needs; installed only when missing (CI starts from a fresh machine).
need=()
command -v apt-get >/dev/null || { echo "busybox: apt-get is required" >&2; exit 1; }
command -v dpkg-deb >/dev/null || need+=(dpkg)
command -v file >/dev/null || need+=(file)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
# shellcheck source-path=SCRIPTDIR source=host-install.sh
. "$here/host-install.sh"
install_missing busybox "${need[@]}"

aptopts=() # set by debian_apt
debian_apt busybox bookworm "$arch"
debian_apt_update || exit 1

tmp=$(mktemp -d /tmp/skbtrace-busybox.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "busybox: downloading busybox-static for $arch" >&2
# apt-get download writes into the current directory, and verifies the
# package's hash against the signed index.
(cd "$tmp" && apt-get "${aptopts[@]}" -qq download "busybox-static:$arch") >&2 || {
	echo "busybox: downloading busybox-static for $arch failed" >&2
	exit 1
}
dpkg-deb -x "$tmp"/busybox-static_*.deb "$tmp/root"
bb=$tmp/root/bin/busybox
# The initramfs has no libraries: refuse anything but a static build of ARCH.
want='x86-64'
[ "$arch" = amd64 ] || want='ARM aarch64'
kind=$(file -L "$bb")
[[ $kind == *"$want"* && $kind == *statically* ]] || {
	echo "busybox: $bb is not a static $arch binary: $kind" >&2
	exit 1
}
mkdir -p "$dir"
cp "$bb" "$dir/busybox.tmp"
chmod 755 "$dir/busybox.tmp"
mv "$dir/busybox.tmp" "$dir/busybox"
echo "$dir/busybox"
