#!/bin/bash
# Usage: scripts/kernels/run.sh VERSION [-e NAME=VALUE]... [--] COMMAND...
#
# Boots Debian's VERSION kernel (5.10, 6.1 or 6.12; fetched by fetch.sh) in
# QEMU over this machine's own root filesystem and runs COMMAND (joined into
# one bash command line) as root in the current directory. Prints the
# command's stdout and stderr and exits with its exit code.
#
# Guest: host root read-only under a tmpfs overlay (writes vanish), the
# working directory written through to the host, the kernel's own modules at
# /lib/modules/$(uname -r), no network device.
#
# Environment:
#   SKBTRACE_VM_TIMEOUT  seconds before qemu is killed (default 900); exit 124
#   SKBTRACE_VM_ACCEL    tcg (default) or kvm; this machine's kvm hangs Debian kernels
#   SKBTRACE_VM_TCG_THREAD  single (default) or multi: TCG's threads for the vCPUs
#   SKBTRACE_VM_CPUS     vCPUs (default 2)
#   SKBTRACE_VM_MEMORY   memory (default 2G)
#   SKBTRACE_VM_RWDIR    one more host directory the guest may write
#   SKBTRACE_VM_VERBOSE  1: the guest console goes to stderr
#   SKBTRACE_VM_BOOT     vmlinux (default, when fetch.sh extracted one) or bzimage
#   SKBTRACE_VM_BOOT_TRIES  boots tried when the guest dies before the command starts (default 2)
#   SKBTRACE_VM_NIC      a NIC model (e1000e, e1000, virtio-net-pci, vmxnet3, rtl8139): the
#                        guest gets two of them wired to each other, MACs 52:54:00:5b:00:01
#                        and :02, and nothing else on the wire
#   SKBTRACE_VM_NIC_BACKEND  hub (default): QEMU's hub, frames copied whole, no offload
#                        between the NICs; tap: two taps with vnet_hdr on a bridge of
#                        this machine that this script creates and removes (no address,
#                        no other port), so virtio-net can hand large segments across
# Exit codes of its own: 124 timeout, 125 the guest gave no exit status.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ver=${1:-}
[ -n "$ver" ] || {
	echo "usage: $0 VERSION [-e NAME=VALUE]... [--] COMMAND..." >&2
	exit 2
}
shift
envs=()
while [ $# -gt 0 ]; do
	case "$1" in
	-e)
		[[ ${2:-} == [A-Za-z_]*=* ]] || { echo "run: -e wants NAME=VALUE" >&2; exit 2; }
		envs+=("$2")
		shift 2
		;;
	--)
		shift
		break
		;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "run: no command given" >&2; exit 2; }

timeout=${SKBTRACE_VM_TIMEOUT:-900}
accel=${SKBTRACE_VM_ACCEL:-tcg}
workdir=$(pwd -P)
[ "$workdir" != / ] || { echo "run: refusing to share / writable; cd elsewhere" >&2; exit 2; }

# Tools this needs; installed only when missing (CI starts from a fresh machine).
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
# The initramfs has no libraries: busybox must be the static build.
[[ $(file -L /bin/busybox 2>/dev/null) == *statically* ]] || need+=(busybox-static file)
command -v modprobe >/dev/null || need+=(kmod)
command -v cpio >/dev/null || need+=(cpio)
command -v xz >/dev/null || need+=(xz-utils)
command -v zstd >/dev/null || need+=(zstd)
# shellcheck source-path=SCRIPTDIR source=host-install.sh
. "$here/host-install.sh"
install_missing run "${need[@]}"

eval "$("$here/fetch.sh" "$ver")"
# The uncompressed vmlinux boots through PVH, skipping seconds of emulated
# decompression; the kernel itself is the same.
kernel=$KERNEL_IMAGE
[ "${SKBTRACE_VM_BOOT:-vmlinux}" = bzimage ] || [ -z "$KERNEL_VMLINUX" ] || kernel=$KERNEL_VMLINUX

tmp=$(mktemp -d /tmp/skbtrace-vm.XXXXXX)
qpid='' spid='' cats=()
# Kills only what this script started, by PID, on every way out.
cleanup() {
	[ -z "$qpid" ] || kill "$qpid" 2>/dev/null || true
	[ -z "$spid" ] || kill "$spid" 2>/dev/null || true
	[ -z "$qpid" ] || wait "$qpid" 2>/dev/null || true
	# Closing our ends of the fifos lets the relays drain and end.
	exec 3>&- 4>&- 5>&-
	for p in ${cats[@]+"${cats[@]}"}; do
		wait "$p" 2>/dev/null || true
	done
	[ -z "$bridge" ] || ip link del "$bridge" 2>/dev/null || true
	for t in ${taps[@]+"${taps[@]}"}; do
		ip link del "$t" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
bridge='' taps=()
trap cleanup EXIT
trap 'echo "run: interrupted; stopping the guest" >&2; exit 130' INT TERM HUP

# Initramfs: static busybox, init.sh and the modules that mounting the root
# needs, dependencies first (modprobe --show-depends orders them). Rebuilt
# each run: it takes well under a second.
ird=$tmp/initramfs
mkdir -p "$ird/bin" "$ird/modules"
cp /bin/busybox "$ird/bin/busybox"
cp "$here/init.sh" "$ird/init"
chmod 755 "$ird/init"
for m in virtio_pci virtio_console 9pnet_virtio 9p overlay; do
	modprobe -d "$KERNEL_DIR" -S "$KERNEL_RELEASE" --show-depends "$m" ||
		{ echo "run: resolving module $m of $KERNEL_RELEASE failed" >&2; exit 1; }
done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r ko; do
	name=$(basename "$ko")
	case "$ko" in
	*.xz) xz -dc "$ko" >"$ird/modules/${name%.xz}" && name=${name%.xz} ;;
	*.zst) zstd -qdc "$ko" >"$ird/modules/${name%.zst}" && name=${name%.zst} ;;
	*) cp "$ko" "$ird/modules/$name" ;;
	esac
	echo "$name" >>"$ird/modules/order"
done
(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initramfs.gz"
rm -rf "$ird"

# Control share: settings for init.sh, the command, and later its exit code.
{
	printf 'SKBVM_MODULES=%q\n' "$KERNEL_MODULES"
	printf 'SKBVM_WORKDIR=%q\n' "$workdir"
	printf 'SKBVM_RWDIR=%q\n' "${SKBTRACE_VM_RWDIR:+$(cd "$SKBTRACE_VM_RWDIR" && pwd -P)}"
} >"$tmp/vm.conf"
{
	echo 'export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
	echo 'export HOME=/root LANG=C.UTF-8 TERM=dumb'
	# No network in the guest: go must use what is cached, never download.
	echo 'export GOTOOLCHAIN=local GOPROXY=off'
	for e in ${envs[@]+"${envs[@]}"}; do
		printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"
	done
	printf 'cd %q || exit 125\n' "$workdir"
	echo "$*"
} >"$tmp/cmd.sh"

case "$accel" in
# One TCG thread runs all vCPUs in turn. With a thread each, a vCPU could run
# code another had just patched (a BPF trampoline or static key going live,
# text_poke's int3 in place): 6.12 guests oopsed on "int3" in
# handle_softirqs in about one kernel-matrix run in three. On this 2-core
# machine the single thread is no slower (6.12's guest: 328 s against
# 295-365 s).
tcg) accelopts=(-accel "tcg,thread=${SKBTRACE_VM_TCG_THREAD:-single}" -cpu max) ;;
kvm) accelopts=(-accel kvm -cpu host) ;;
*) echo "run: SKBTRACE_VM_ACCEL must be tcg or kvm, not $accel" >&2; exit 2 ;;
esac
qemu=(
	qemu-system-x86_64 -name "skbtrace-$ver" -machine q35 "${accelopts[@]}"
	-smp "${SKBTRACE_VM_CPUS:-2}" -m "${SKBTRACE_VM_MEMORY:-2G}"
	-nodefaults -no-user-config -display none -vga none -monitor none -nic none -no-reboot
	-chardev "file,id=con,path=$tmp/console" -serial chardev:con
	-kernel "$kernel" -initrd "$tmp/initramfs.gz"
	-append "console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init"
	-fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
	-device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
	-fsdev "local,id=work,path=$workdir,security_model=none,multidevs=remap"
	-device virtio-9p-pci,fsdev=work,mount_tag=work
	-fsdev "local,id=ctl,path=$tmp,security_model=none"
	-device virtio-9p-pci,fsdev=ctl,mount_tag=ctl
	-device virtio-serial-pci
	-chardev "file,id=out,path=$tmp/stdout"
	-device virtserialport,chardev=out,name=skbtrace.stdout
	-chardev "file,id=err,path=$tmp/stderr"
	-device virtserialport,chardev=err,name=skbtrace.stderr
)
# The wire: two NICs of one model, each sending only to the other.
if [ -n "${SKBTRACE_VM_NIC:-}" ]; then
	nic=$SKBTRACE_VM_NIC
	case "${SKBTRACE_VM_NIC_BACKEND:-hub}" in
	hub)
		for i in 1 2; do
			qemu+=(-netdev "hubport,id=wire$i,hubid=0" -device "$nic,netdev=wire$i,mac=52:54:00:5b:00:0$i")
		done
		;;
	tap)
		# Names carry our PID, so two runs never share a bridge.
		bridge=skbvmbr$$
		ip link add "$bridge" type bridge || { echo "run: creating bridge $bridge failed" >&2; exit 1; }
		sysctl -qw "net.ipv6.conf.$bridge.disable_ipv6=1" || true
		for i in 1 2; do
			t=skbvmt$$-$i
			ip tuntap add dev "$t" mode tap vnet_hdr || { echo "run: creating tap $t failed" >&2; exit 1; }
			taps+=("$t")
			sysctl -qw "net.ipv6.conf.$t.disable_ipv6=1" || true
			ip link set "$t" master "$bridge" up || { echo "run: adding $t to $bridge failed" >&2; exit 1; }
			qemu+=(-netdev "tap,id=wire$i,ifname=$t,script=no,downscript=no,vnet_hdr=on"
				-device "$nic,netdev=wire$i,mac=52:54:00:5b:00:0$i")
		done
		ip link set "$bridge" up
		;;
	*) echo "run: SKBTRACE_VM_NIC_BACKEND must be hub or tap" >&2; exit 2 ;;
	esac
fi
if [ -n "${SKBTRACE_VM_RWDIR:-}" ]; then
	qemu+=(-fsdev "local,id=rwdir,path=$(cd "$SKBTRACE_VM_RWDIR" && pwd -P),security_model=none,multidevs=remap"
		-device virtio-9p-pci,fsdev=rwdir,mount_tag=rwdir)
fi

# boot: one run of the guest; returns 0 once the guest left an exit status,
# 124 on timeout, 125 without a status. Guest output reaches our stdout and
# stderr through fifos and cat, which writes to the very descriptors we were
# given: qemu reopening /proc/self/fd/1 would get a file offset of its own
# and clobber, or be clobbered by, a caller's redirection.
boot() {
	rm -f "$tmp/stdout" "$tmp/stderr" "$tmp/console" "$tmp/console.log" "$tmp/started" "$tmp/failed" "$tmp/rc"
	mkfifo "$tmp/stdout" "$tmp/stderr" "$tmp/console"
	cats=()
	cat "$tmp/stdout" &
	cats+=($!)
	cat "$tmp/stderr" >&2 &
	cats+=($!)
	if [ "${SKBTRACE_VM_VERBOSE:-0}" = 1 ]; then
		tee "$tmp/console.log" <"$tmp/console" >&2 &
	else
		cat "$tmp/console" >"$tmp/console.log" &
	fi
	cats+=($!)
	# Held open (read-write never blocks on a fifo) so the relays start now
	# and end, at the latest, when these close, even if qemu never opened the
	# fifos. Children must not inherit them, or the relays would never end.
	exec 3<>"$tmp/stdout" 4<>"$tmp/stderr" 5<>"$tmp/console"

	"${qemu[@]}" </dev/null 3>&- 4>&- 5>&- &
	qpid=$!
	sleep "$((deadline - SECONDS))" 3>&- 4>&- 5>&- &
	spid=$!
	wait -n "$qpid" "$spid" || true
	if kill -0 "$qpid" 2>/dev/null; then
		echo "run: the $ver guest ($KERNEL_RELEASE) did not finish within ${timeout}s; killed it (SKBTRACE_VM_TIMEOUT)" >&2
		return 124
	fi
	qrc=0
	wait "$qpid" || qrc=$?
	qpid=''
	kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	spid=''
	exec 3>&- 4>&- 5>&-
	for p in "${cats[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	[ ! -f "$tmp/rc" ] || return 0
	echo "run: the $ver guest ($KERNEL_RELEASE) ended without an exit status (qemu exit $qrc, $((SECONDS - start))s); last console lines:" >&2
	[ -s "$tmp/console.log" ] || echo "(none)" >"$tmp/console.log"
	tail -n 30 "$tmp/console.log" | sed 's/^/  console: /' >&2 || true
	return 125
}

# A boot that dies before the command starts, without init.sh reporting a
# failure of its own, is retried: with a TCG thread per vCPU a kernel could
# oops early (seen once in ~30 boots: int3 while patching code).
start=$SECONDS deadline=$((SECONDS + timeout)) tries=${SKBTRACE_VM_BOOT_TRIES:-2} st=0
for ((try = 1; ; try++)); do
	boot || st=$?
	[ "$st" = 125 ] && [ ! -f "$tmp/started" ] && [ ! -f "$tmp/failed" ] && [ "$try" -lt "$tries" ] || break
	echo "run: the $ver guest failed to boot; retrying ($((try + 1))/$tries)" >&2
	st=0
done
[ "$st" = 0 ] || exit "$st"
exit "$(cat "$tmp/rc")"
