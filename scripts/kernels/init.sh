#!/bin/busybox sh
# shellcheck shell=dash
# /init of the initramfs run.sh builds; runs under busybox as PID 1.
# Loads the 9p/virtio modules (Debian builds them as modules), makes the
# guest root an overlay of the host root (read-only 9p) with a tmpfs upper,
# mounts the writable shares, runs the command chrooted there, writes its
# exit code to the control share and powers off. PID 1 stays in the
# initramfs so it can still report and power off if the command breaks the
# new root.
/bin/busybox mkdir -p /proc /sys /dev /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

fail() {
	echo "skbtrace-vm: $*" >/dev/console
	# Tells run.sh not to retry the boot (once the control share is mounted).
	echo "$*" >/ctl/failed 2>/dev/null
	# panic=-1 and -no-reboot make qemu exit; run.sh reports the missing status.
	poweroff -f
}

# The order file lists modules with their dependencies first.
while read -r m; do
	insmod "/modules/$m" 2>/dev/console || fail "loading module $m failed"
done </modules/order

# 9p over virtio; msize raised from the old 8 KiB default for throughput.
p9=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /ctl /lower /rw /newroot
mount -t 9p -o "$p9,cache=none" ctl /ctl || fail "mounting the control share failed"
. /ctl/vm.conf # SKBVM_MODULES, SKBVM_WORKDIR, SKBVM_RWDIR

# The read-only root can be cached; nothing changes it during a run.
mount -t 9p -o "$p9,ro,cache=loose" hostroot /lower || fail "mounting the host root failed"
mount -t tmpfs -o mode=755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
	fail "mounting the root overlay failed"

r=/newroot
mount -t proc proc $r/proc
mount -t sysfs sysfs $r/sys
mount -t devtmpfs devtmpfs $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $r/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $r/dev/shm
mount -t tmpfs -o mode=1777 tmpfs $r/tmp
mount -t tmpfs -o mode=1777 tmpfs $r/var/tmp
mount -t tmpfs -o mode=755 tmpfs $r/run
mkdir -p $r/run/skbtrace-vm
mount --bind /ctl $r/run/skbtrace-vm
mount -t tracefs tracefs $r/sys/kernel/tracing
mount -t debugfs debugfs $r/sys/kernel/debug
mount -t bpf bpf $r/sys/fs/bpf
mount -t cgroup2 cgroup2 $r/sys/fs/cgroup

# The working directory (and an optional extra directory) written through;
# mkdir for those under the guest's fresh /tmp or /run.
mkdir -p "$r$SKBVM_WORKDIR"
mount -t 9p -o "$p9,cache=none" work "$r$SKBVM_WORKDIR" || fail "mounting the working directory failed"
if [ -n "${SKBVM_RWDIR:-}" ]; then
	mkdir -p "$r$SKBVM_RWDIR"
	mount -t 9p -o "$p9,cache=none" rwdir "$r$SKBVM_RWDIR" || fail "mounting $SKBVM_RWDIR failed"
fi

# The guest kernel's modules, from the cache the host root already shows.
# Resolved inside the chroot: the host's /lib is a relative symlink.
rel=$(uname -r)
chroot $r mkdir -p "/lib/modules/$rel" || fail "creating /lib/modules/$rel failed"
chroot $r mount --bind "$SKBVM_MODULES" "/lib/modules/$rel" || fail "binding the modules of $rel failed"

# Command output goes to the host through named virtio-serial ports.
port() {
	for p in /sys/class/virtio-ports/*; do
		[ "$(cat "$p/name" 2>/dev/null)" = "$1" ] && echo "/dev/${p##*/}" && return
	done
	fail "no virtio-serial port named $1"
}
out=$(port skbtrace.stdout)
err=$(port skbtrace.stderr)

# The kernel loads modules on demand (a veth, a qdisc) by running
# /proc/sys/kernel/modprobe from PID 1's root, the initramfs: send it to
# the guest root's modprobe.
printf '#!/bin/sh\nexec chroot %s /sbin/modprobe "$@"\n' "$r" >/sbin/modprobe-guest
chmod 755 /sbin/modprobe-guest
echo /sbin/modprobe-guest >/proc/sys/kernel/modprobe

hostname skbtrace-vm
chroot $r ip link set lo up || fail "bringing up loopback failed"

echo "skbtrace-vm: running the command" >/dev/console
: >/ctl/started # from here on a failure is the command's, not the boot's
chroot $r /bin/bash /run/skbtrace-vm/cmd.sh </dev/null >"$out" 2>"$err"
rc=$?
echo "$rc" >/ctl/rc.tmp && mv /ctl/rc.tmp /ctl/rc
sync
poweroff -f
