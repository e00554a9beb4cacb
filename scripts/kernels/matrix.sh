#!/bin/bash
# Usage: scripts/kernels/matrix.sh VERSION...   (what `make kernels` runs)
#
# For each kernel: fetches it, boots it with run.sh and runs guest.sh there
# on the prebuilt bin/skbtrace. SKBTRACE_MATRIX_JOBS guests run at once
# (default 1; each is one TCG thread, and the machine has two cores; side
# by side their logs follow when all have ended). Output of each goes to
# out/kernels/<VERSION>/ (guest.log plus what guest.sh writes; kernel.env,
# fetch.sh's report, names the release and the package's version, the
# point release). Prints a summary naming both; fails if any kernel failed.
# SKBTRACE_GUEST_RUN, a go test -run pattern, runs those e2e tests in
# place of each kernel's list (to rerun one that failed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
[ $# -gt 0 ] || { echo "usage: $0 VERSION..." >&2; exit 2; }
[ -x bin/skbtrace ] || { echo "kernels: bin/skbtrace is missing; run make build" >&2; exit 1; }
[ -x bin/e2e.test ] || { echo "kernels: bin/e2e.test is missing; run go test -c -o bin/e2e.test ./test/e2e" >&2; exit 1; }

jobs=${SKBTRACE_MATRIX_JOBS:-1}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "kernels: SKBTRACE_MATRIX_JOBS must be a number of guests, 1 or more, not '$jobs'" >&2; exit 2; }

# guest VERSION: boots it and runs guest.sh, leaving out/kernels/VERSION/
# guest.log and result (the exit status and the seconds it took).
guest() {
	local ver=$1 out=out/kernels/$1 start=$SECONDS rc=0
	rm -rf "$out"
	mkdir -p "$out"
	if ! "$here/fetch.sh" "$ver" >"$out/kernel.env"; then
		echo "fetch $((SECONDS - start))" >"$out/result"
		return
	fi
	# The 5.10 guest ran out of 900 s at its last tests once, with host work beside it.
	if [ "$jobs" = 1 ]; then
		SKBTRACE_VM_TIMEOUT=${SKBTRACE_VM_TIMEOUT:-1800} \
			"$here/run.sh" "$ver" -e SKBTRACE=bin/skbtrace -e E2E=bin/e2e.test -e OUT="$out" -e RUN="${SKBTRACE_GUEST_RUN:-}" -- bash scripts/kernels/guest.sh 2>&1 |
			tee "$out/guest.log" || rc=${PIPESTATUS[0]}
	else
		SKBTRACE_VM_TIMEOUT=${SKBTRACE_VM_TIMEOUT:-1800} \
			"$here/run.sh" "$ver" -e SKBTRACE=bin/skbtrace -e E2E=bin/e2e.test -e OUT="$out" -e RUN="${SKBTRACE_GUEST_RUN:-}" -- bash scripts/kernels/guest.sh \
			>"$out/guest.log" 2>&1 || rc=$?
	fi
	echo "$rc $((SECONDS - start))" >"$out/result"
}

for ver in "$@"; do
	if [ "$jobs" = 1 ]; then
		echo "== kernel $ver" >&2
		guest "$ver"
		continue
	fi
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n || true
	done
	echo "== kernel $ver (its log follows when all have ended)" >&2
	guest "$ver" &
done
wait
if [ "$jobs" != 1 ]; then
	for ver in "$@"; do
		echo "== kernel $ver: guest.log"
		cat "out/kernels/$ver/guest.log" 2>/dev/null || true
	done
fi

summary=() bad=0
for ver in "$@"; do
	out=out/kernels/$ver
	read -r rc secs <"$out/result" || rc=missing
	rel=$(sed -n 's/^KERNEL_RELEASE=//p' "$out/kernel.env" 2>/dev/null)
	debv=$(sed -n 's/^KERNEL_DEB_VERSION=//p' "$out/kernel.env" 2>/dev/null)
	[ -z "$rel" ] || rel="$rel ($debv)"
	case "$rc" in
	0) summary+=("$(printf '%-5s %-36s ok, %ss' "$ver" "$rel" "$secs")") ;;
	fetch) summary+=("$(printf '%-5s %-36s %s' "$ver" - "FAILED (fetch)")") bad=1 ;;
	*) summary+=("$(printf '%-5s %-36s FAILED (exit %s), %ss, see %s' "$ver" "$rel" "$rc" "$secs" "$out/guest.log")") bad=1 ;;
	esac
done

echo "== kernel matrix"
printf '%s\n' "${summary[@]}"

# Family by kernel: the hooks used, or skipped, from each guest's events --json.
echo
printf '| family |'
for ver in "$@"; do printf ' %s |' "$ver"; done
printf '\n|---|'
for ver in "$@"; do printf -- '---|'; done
echo
families=$(sed -n 's/^{"family":"\([a-z_]*\)".*/\1/p' "out/kernels/$1/events.json" 2>/dev/null)
for fam in $families; do
	printf '| `%s` |' "$fam"
	for ver in "$@"; do
		line=$(grep "\"family\":\"$fam\"" "out/kernels/$ver/events.json" 2>/dev/null || true)
		case "$line" in
		*'"runs":true'*)
			hooks=$(echo "$line" | sed 's/.*"hooks":\[\([^]]*\)\].*/\1/; s/"//g; s/,/, /g')
			printf ' %s |' "$hooks" ;;
		'') printf ' ? |' ;;
		*) printf ' skipped: %s |' "$(echo "$line" | sed 's/.*"reason":"\([^"]*\)".*/\1/')" ;;
		esac
	done
	echo
done

# Last, so that a shortened log (CI keeps the end) still names what failed:
# each failed guest's failed steps and tests.
if [ "$bad" != 0 ]; then
	echo
	echo "== what failed"
	printf '%s\n' "${summary[@]}" | grep FAILED || true
	for ver in "$@"; do
		log=out/kernels/$ver/guest.log
		[ -f "$log" ] || continue
		# A failed test's own lines (go test -v prints them between its
		# === RUN and its --- FAIL), its last 30, and the guest's verdicts.
		# A guest that died (run.sh's "ended without an exit status" and the
		# console's last lines) is named with the test it was running.
		awk '/^=== RUN/ { n = 0; running = $0; next }
			/^run: / { print; if (running != "") print "  while: " running; console = 1; next }
			console && /^  console: / { print; next }
			/^[ \t]/ { buf[n++ % 30] = $0; next }
			/^--- FAIL/ { print; for (i = (n > 30 ? n - 30 : 0); i < n; i++) print buf[i % 30]; n = 0; next }
			/^(FAIL|panic:|guest: failed|guest: .* does not run)/ { print }' "$log" | sed "s|^|${log%/guest.log}: |" || true
	done
fi
exit "$bad"
