#!/bin/bash
# Usage: scripts/kernels/bare.sh ARCH VERSION
#        (amd64: 5.10, 6.1 or 6.12; arm64: 6.1 or 6.12)
#
# Proves a release binary on a bare host: boots Debian's VERSION kernel for
# ARCH (fetch.sh) in QEMU under TCG on an initramfs that holds nothing but
# Debian's static busybox for ARCH (busybox.sh), the static skbtrace from the
# release tarball and bare-init.sh as /init: no libraries, no iproute2,
# ethtool or tc, no kernel modules, no share of this machine's files. The
# guest runs skbtrace's version, events, record, parse, stat, export and
# doctor as a user would and judges each step itself (bare-init.sh).
# Prints the guest's serial console as it goes; exits 0 only if every step
# passed.
#
# Environment:
#   SKBTRACE_TARBALL     the release tarball (default: the newest
#                        dist/skbtrace_*_linux_ARCH.tar.gz)
#   SKBTRACE_VM_TIMEOUT  seconds before qemu is killed (default 600); exit 124
#   SKBTRACE_VM_CPUS     vCPUs (default 2)
#   SKBTRACE_VM_MEMORY   memory (default 1G)
# Exit codes: 1 a step failed (the guest's last lines say which), 2 usage,
# 124 timeout, 125 the guest ended without a status.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
arch=${1:-} ver=${2:-}
case "$arch/$ver" in
amd64/5.10 | amd64/6.1 | amd64/6.12 | arm64/6.1 | arm64/6.12) ;;
*)
	echo "usage: $0 ARCH VERSION   (amd64: 5.10, 6.1 or 6.12; arm64: 6.1 or 6.12)" >&2
	exit 2
	;;
esac
timeout=${SKBTRACE_VM_TIMEOUT:-600}
[[ $timeout =~ ^[1-9][0-9]*$ ]] || { echo "bare: SKBTRACE_VM_TIMEOUT must be seconds, not '$timeout'" >&2; exit 2; }

# The tarball: given, or the newest of dist/ for ARCH.
tarball=${SKBTRACE_TARBALL:-}
if [ -z "$tarball" ]; then
	tarball=$(find "$here/../../dist" -maxdepth 1 -name "skbtrace_*_linux_$arch.tar.gz" -printf '%T@ %p\n' 2>/dev/null |
		sort -n | tail -n1 | cut -d' ' -f2-)
	[ -n "$tarball" ] || { echo "bare: no dist/skbtrace_*_linux_$arch.tar.gz; run make release or set SKBTRACE_TARBALL" >&2; exit 1; }
fi
[ -f "$tarball" ] || { echo "bare: $tarball does not exist" >&2; exit 1; }

case "$arch" in
amd64) qemu_bin=qemu-system-x86_64 qemu_pkg=qemu-system-x86 elf='x86-64' console=ttyS0 ;;
arm64) qemu_bin=qemu-system-aarch64 qemu_pkg=qemu-system-arm elf='ARM aarch64' console=ttyAMA0 ;;
esac

# Tools this needs; installed only when missing (CI starts from a fresh machine).
need=()
command -v "$qemu_bin" >/dev/null || need+=("$qemu_pkg")
command -v cpio >/dev/null || need+=(cpio)
command -v file >/dev/null || need+=(file)
# shellcheck source-path=SCRIPTDIR source=host-install.sh
. "$here/host-install.sh"
install_missing bare "${need[@]}"

eval "$("$here/fetch.sh" "$ver" "$arch")"
busybox=$("$here/busybox.sh" "$arch")
# The uncompressed kernel boots without seconds of emulated decompression:
# amd64's vmlinux through PVH, arm64's raw Image.
kernel=${KERNEL_VMLINUX:-$KERNEL_IMAGE}

tmp=$(mktemp -d /tmp/skbtrace-bare.XXXXXX)
qpid='' spid='' rpid=''
# Kills only what this script started, by PID, on every way out.
cleanup() {
	[ -z "$qpid" ] || kill "$qpid" 2>/dev/null || true
	[ -z "$spid" ] || kill "$spid" 2>/dev/null || true
	[ -z "$qpid" ] || wait "$qpid" 2>/dev/null || true
	# The console relay ends by itself within a second of qemu's end.
	[ -z "$rpid" ] || wait "$rpid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "bare: interrupted; stopping the guest" >&2; exit 130' INT TERM HUP

# The binary out of the tarball, refused unless static and of ARCH: a
# dynamic one would not even start in the guest, with a less clear error.
mkdir -p "$tmp/x" "$tmp/root/bin"
tar -xzf "$tarball" -C "$tmp/x" --wildcards --no-anchored 'skbtrace' ||
	{ echo "bare: no skbtrace binary in $tarball" >&2; exit 1; }
bin=$(find "$tmp/x" -type f -name skbtrace | head -n1)
kind=$(file -L "$bin")
[[ $kind == *"$elf"* && $kind == *statically* ]] || { echo "bare: $bin from $tarball is not a static $arch binary: $kind" >&2; exit 1; }

# Initramfs: these three files and the directories holding them, nothing
# else. Uncompressed: the guest copies it instead of inflating 23 MB with
# an emulated CPU.
cp "$busybox" "$tmp/root/bin/busybox"
cp "$bin" "$tmp/root/bin/skbtrace"
cp "$here/bare-init.sh" "$tmp/root/init"
chmod 755 "$tmp/root/bin/busybox" "$tmp/root/bin/skbtrace" "$tmp/root/init"
(cd "$tmp/root" && find . | cpio -o -H newc -R 0:0 --quiet) >"$tmp/initramfs.cpio"
rm -rf "$tmp/x" "$tmp/root"

append="console=$console panic=-1 quiet loglevel=4 rdinit=/init"
common=(
	-name "skbtrace-bare-$arch-$ver" -accel "tcg,thread=single"
	-smp "${SKBTRACE_VM_CPUS:-2}" -m "${SKBTRACE_VM_MEMORY:-1G}"
	-nodefaults -no-user-config -display none -monitor none -nic none -no-reboot
	-chardev "file,id=con,path=$tmp/console" -serial chardev:con
	-kernel "$kernel" -initrd "$tmp/initramfs.cpio" -append "$append"
)
case "$arch" in
amd64) qemu=(qemu-system-x86_64 -machine q35 -cpu max -vga none "${common[@]}") ;;
# pauth-impdef: QEMU's own pointer-authentication hash instead of QARMA,
# whose emulation costs every function entry and return of the kernel.
arm64) qemu=(qemu-system-aarch64 -machine virt -cpu "max,pauth-impdef=on" "${common[@]}") ;;
esac

echo "bare: $arch $KERNEL_RELEASE ($KERNEL_DEB_VERSION), $(basename "$tarball"), $(LC_ALL=C grep -a -o -m1 'BusyBox v[0-9.]*' "$busybox" || echo busybox)" >&2
start=$SECONDS
: >"$tmp/console"
"${qemu[@]}" </dev/null &
qpid=$!
# The console as it comes, without the serial line's carriage returns; the
# relay follows the file until qemu has ended.
{ tail -n +1 -s 0.2 -f --pid="$qpid" "$tmp/console" | tr -d '\r'; } &
rpid=$!
sleep "$timeout" &
spid=$!
wait -n "$qpid" "$spid" || true
if kill -0 "$qpid" 2>/dev/null; then
	kill "$qpid" 2>/dev/null || true
	wait "$qpid" 2>/dev/null || true
	qpid=''
	wait "$rpid" 2>/dev/null || true
	rpid=''
	echo "bare: the $arch $ver guest ($KERNEL_RELEASE, $KERNEL_DEB_VERSION) did not finish within ${timeout}s; killed it (SKBTRACE_VM_TIMEOUT)" >&2
	exit 124
fi
qrc=0
wait "$qpid" || qrc=$?
qpid=''
kill "$spid" 2>/dev/null || true
wait "$spid" 2>/dev/null || true
spid=''
wait "$rpid" 2>/dev/null || true
rpid=''
secs=$((SECONDS - start))

status=$(tr -d '\r' <"$tmp/console" | sed -n 's/^skbtrace-bare-status=\([0-9][0-9]*\)$/\1/p' | tail -n1)
if [ -z "$status" ]; then
	echo "bare: the $arch $ver guest ($KERNEL_RELEASE, $KERNEL_DEB_VERSION) ended without a status (qemu exit $qrc, ${secs}s)" >&2
	exit 125
fi
if [ "$status" != 0 ]; then
	echo "bare: $arch $ver ($KERNEL_RELEASE, $KERNEL_DEB_VERSION): $status step(s) failed, ${secs}s" >&2
	exit 1
fi
echo "bare: $arch $ver ($KERNEL_RELEASE, $KERNEL_DEB_VERSION): every step passed, ${secs}s" >&2
