#!/bin/bash
# Usage: scripts/kernels/matrix.sh VERSION...   (what `make kernels` runs)
#
# For each kernel: fetches it, boots it with run.sh and runs guest.sh there
# on the prebuilt bin/skbtrace, one guest at a time (the machine has two
# cores). Output of each goes to out/kernels/<VERSION>/ (guest.log plus
# what guest.sh writes). Prints a summary; fails if any kernel failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
[ $# -gt 0 ] || { echo "usage: $0 VERSION..." >&2; exit 2; }
[ -x bin/skbtrace ] || { echo "kernels: bin/skbtrace is missing; run make build" >&2; exit 1; }
[ -x bin/e2e.test ] || { echo "kernels: bin/e2e.test is missing; run go test -c -o bin/e2e.test ./test/e2e" >&2; exit 1; }

summary=() bad=0
for ver in "$@"; do
	out=out/kernels/$ver
	rm -rf "$out"
	mkdir -p "$out"
	echo "== kernel $ver" >&2
	start=$SECONDS rc=0
	if ! "$here/fetch.sh" "$ver" >"$out/kernel.env"; then
		summary+=("$(printf '%-5s %-22s %s' "$ver" - "FAILED (fetch)")")
		bad=1
		continue
	fi
	# The 5.10 guest ran out of 900 s at its last tests once, with host work beside it.
	SKBTRACE_VM_TIMEOUT=${SKBTRACE_VM_TIMEOUT:-1800} \
		"$here/run.sh" "$ver" -e SKBTRACE=bin/skbtrace -e E2E=bin/e2e.test -e OUT="$out" -- bash scripts/kernels/guest.sh 2>&1 |
		tee "$out/guest.log" || rc=${PIPESTATUS[0]}
	rel=$(sed -n 's/^KERNEL_RELEASE=//p' "$out/kernel.env")
	if [ "$rc" = 0 ]; then
		summary+=("$(printf '%-5s %-22s ok, %ss' "$ver" "$rel" $((SECONDS - start)))")
	else
		summary+=("$(printf '%-5s %-22s FAILED (exit %s), %ss, see %s' "$ver" "$rel" "$rc" $((SECONDS - start)) "$out/guest.log")")
		bad=1
	fi
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
		awk '/^=== RUN/ { n = 0; next }
			/^[ \t]/ { buf[n++ % 30] = $0; next }
			/^--- FAIL/ { print; for (i = (n > 30 ? n - 30 : 0); i < n; i++) print buf[i % 30]; n = 0; next }
			/^(FAIL|panic:|guest: )/ { print }' "$log" | sed "s|^|${log%/guest.log}: |" || true
	done
fi
exit "$bad"
