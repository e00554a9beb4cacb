# Sourced by guest.sh and nic-guest.sh inside a guest: the binaries, the
# output directory and step().
#
# The binaries run from the guest's tmpfs: the working directory is 9p with
# cache=none (so the host sees results at once), and every exec of a 32 MB
# skbtrace read it whole across emulated virtio, 3 s before main under TCG.

: "${OUT:?OUT must name the output directory}"
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
bins=$(mktemp -d /tmp/skbtrace-bin.XXXXXX)
cp "${SKBTRACE:-bin/skbtrace}" "$bins/skbtrace"
cp "${E2E:-bin/e2e.test}" "$bins/e2e.test"
SKBTRACE=$bins/skbtrace
E2E=$bins/e2e.test

# The kernel that booted: Debian builds its package's version, the point
# release, into uname -v ("#1 SMP Debian 5.10.262-1 (2026-07-15)").
uname -rv | tee "$OUT/uname.txt" | sed 's/^/guest: kernel /'

failed=()
# step NAME COMMAND...: runs COMMAND, records NAME if it fails.
step() {
	local name=$1 rc=0
	shift
	echo "== $name"
	"$@" || rc=$?
	echo "== $name: exit $rc"
	[ "$rc" = 0 ] || failed+=("$name")
}
