#!/bin/bash
# Usage: scripts/release.sh        (what `make release` runs)
#
# Builds static skbtrace binaries for linux/amd64 and linux/arm64 and packs
# each into dist/: skbtrace_VERSION_linux_ARCH.tar.gz (binary, man pages,
# bash/zsh/fish completions, README.md, docs/*.md, LICENSE and copyright)
# and skbtrace_VERSION_ARCH.deb, with SHA256SUMS over them. copyright says
# which files carry which licence, the Go modules compiled in included
# (scripts/deb-copyright.sh); the .deb installs it as Debian policy wants,
# and the docs the man pages cite under /usr/share/doc/skbtrace. Every date is the commit's (SOURCE_DATE_EPOCH
# overrides it) and every owner, mode and order is fixed, so two runs on one
# commit write byte-identical files.
#
# VERSION, valid for Debian: a tag vX.Y.Z gives X.Y.Z, commits after it
# X.Y.Z+gitYYYYMMDD.HASH, no tag 0.0~gitYYYYMMDD.HASH; +dirty is added when
# the work tree has uncommitted changes. MAINTAINER overrides the .deb's
# Maintainer (default: the commit's author).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
ARCHES=(amd64 arm64)
MAX_SIZE=25000000 # bytes a binary may have

die() {
	echo "release: $*" >&2
	exit 1
}
need() { # TOOL DEBIAN-PACKAGE
	command -v "$1" >/dev/null || die "$1 is missing: building the release needs it (Debian's package $2 has it)"
}
command -v "$GO" >/dev/null || die "Go ($GO) is not installed"
need git git
need tar tar
need gzip gzip
need sha256sum coreutils
need file file
need dpkg-deb dpkg

commit=$(git rev-parse HEAD)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
builddate=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
snapshot=git$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d).$(git rev-parse --short=7 HEAD)
if tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null); then
	version=${tag#v}
elif tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null); then
	version=${tag#v}+$snapshot
else
	version=0.0~$snapshot
fi
# Untracked files count: a new source file would be built in.
if [ -n "$(git status --porcelain)" ]; then
	version+=+dirty
	echo "release: the work tree has uncommitted changes; the version is $version" >&2
fi
[[ $version =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "version $version is not a valid Debian version (tags look like v1.2.3)"
maintainer=${MAINTAINER:-$(git log -1 --format='%an <%ae>')}

[ -f LICENSE ] || die "there is no LICENSE: a release without one may not be redistributed"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Built in the work directory and moved to dist/ at the end: a failed run
# leaves an earlier release as it was.
out=$work/dist
mkdir -p "$out"

pkg=github.com/skbtrace/skbtrace/internal/version
ldflags="-s -w -buildid= -X $pkg.Version=$version -X $pkg.Commit=$commit -X $pkg.Date=$builddate"
# -buildvcs=false and the pinned GOAMD64/GOARM64: the environment's settings
# would otherwise end up in the binary. The BPF objects are embedded.
build() { # GOARCH OUTPUT
	CGO_ENABLED=0 GOOS=linux GOARCH=$1 GOAMD64=v1 GOARM64=v8.0 \
		"$GO" build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$2" ./cmd/skbtrace
}

# The man pages and completions come from a binary that runs here; they do
# not depend on the architecture.
build "$("$GO" env GOHOSTARCH)" "$work/host/skbtrace"
"$work/host/skbtrace" gendocs --man "$work/man" --completions "$work/completions"

# fix DIR BINARY: the modes and times that the files in DIR get, whatever
# the umask and the checkout's times.
fix() {
	find "$1" -type d -exec chmod 0755 {} +
	find "$1" -type f -exec chmod 0644 {} +
	chmod 0755 "$2"
	find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

# Go's names of these architectures are Debian's too.
for arch in "${ARCHES[@]}"; do
	bin=$work/$arch/skbtrace
	build "$arch" "$bin"
	kind=$(file -b "$bin")
	[[ $kind == *"statically linked"* ]] || die "linux/$arch binary is not statically linked: $kind"
	size=$(stat -c %s "$bin")
	[ "$size" -lt $MAX_SIZE ] || die "linux/$arch binary is $size bytes, over $MAX_SIZE"
	echo "release: linux/$arch: $size bytes, $kind" >&2

	name=skbtrace_${version}_linux_$arch
	t=$work/tar/$name
	mkdir -p "$t/man" "$t/completions" "$t/docs"
	cp "$bin" README.md LICENSE "$t/"
	scripts/deb-copyright.sh "$bin" >"$t/copyright"
	cp "$work"/man/*.8 "$t/man/"
	cp "$work"/completions/* "$t/completions/"
	cp docs/*.md "$t/docs/"
	fix "$work/tar" "$t/skbtrace"
	tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --format=gnu \
		-C "$work/tar" -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
	rm -rf "$work/tar"

	d=$work/deb
	doc=$d/usr/share/doc/skbtrace
	mkdir -p "$d/DEBIAN" "$d/usr/bin" "$d/usr/share/man/man8" "$doc" \
		"$d/usr/share/bash-completion/completions" "$d/usr/share/zsh/vendor-completions" \
		"$d/usr/share/fish/vendor_completions.d"
	cp "$bin" "$d/usr/bin/"
	for page in "$work"/man/*.8; do
		gzip -n -9 <"$page" >"$d/usr/share/man/man8/$(basename "$page").gz"
	done
	cp "$work/completions/skbtrace.bash" "$d/usr/share/bash-completion/completions/skbtrace"
	cp "$work/completions/_skbtrace" "$d/usr/share/zsh/vendor-completions/_skbtrace"
	cp "$work/completions/skbtrace.fish" "$d/usr/share/fish/vendor_completions.d/skbtrace.fish"
	# Debian compresses documentation over 4 kB; the man pages cite the
	# docs by these paths (gendocs).
	for f in README.md docs/*.md; do
		gzip -n -9 <"$f" >"$doc/$(basename "$f").gz"
	done
	scripts/deb-copyright.sh "$bin" >"$doc/copyright"
	# Debian policy 12.7: a native package's changelog; dated with the
	# commit, so it stays reproducible. Lines within 80 columns (lintian).
	{
		echo "skbtrace ($version) unstable; urgency=medium"
		echo
		echo "  * Release $version,"
		echo "    built from commit $commit."
		echo
		echo " -- $maintainer  $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
	} | gzip -n -9 >"$doc/changelog.gz"
	# Static on purpose: one binary for every host.
	mkdir -p "$d/usr/share/lintian/overrides"
	echo "skbtrace: statically-linked-binary [usr/bin/skbtrace]" >"$d/usr/share/lintian/overrides/skbtrace"
	(cd "$d" && find usr -type f | LC_ALL=C sort | xargs md5sum) >"$d/DEBIAN/md5sums"
	# Installed-Size as dpkg counts it: KiB per file, rounded up.
	installed=$(find "$d/usr" -type f -printf '%s\n' | awk '{k += int(($1 + 1023) / 1024)} END {print k}')
	# Recommends: bash-completion, which the bash script's functions come
	# from (without it the script completes nothing but says nothing).
	# Suggests: what `skbtrace lab` runs (ip, tc, ss, ethtool, nft, iperf3,
	# python3, ping; sysctl, taskset, sh and cat are on every Debian); the rest of skbtrace
	# runs no program but the user's.
	cat >"$d/DEBIAN/control" <<-EOF
		Package: skbtrace
		Version: $version
		Architecture: $arch
		Maintainer: $maintainer
		Installed-Size: $installed
		Recommends: bash-completion
		Suggests: iproute2, ethtool, iperf3, nftables, python3, iputils-ping
		Section: net
		Priority: optional
		Description: trace why the network stack moves fewer bytes than the link allows
		 skbtrace traces the Linux network stack with eBPF, the way blktrace traces
		 block I/O: record writes a compact binary trace of what the kernel decided,
		 parse and stat read it, and doctor ranks what limits a workload's
		 throughput. It runs on unmodified kernels with BTF from 5.10 on.
	EOF
	fix "$d" "$d/usr/bin/skbtrace"
	# One xz thread whatever the CPUs: its multi-threaded output is not its
	# single-threaded one.
	DPKG_DEB_THREADS_MAX=1 dpkg-deb --root-owner-group -Zxz --build "$d" "$out/skbtrace_${version}_$arch.deb" >/dev/null
	rm -rf "$d"
done

(cd "$out" && LC_ALL=C sha256sum -- *.tar.gz *.deb >SHA256SUMS)
rm -rf dist
mv "$out" dist
echo "release: skbtrace $version in dist/:" >&2
ls -l dist >&2
