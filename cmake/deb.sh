#!/usr/bin/env bash
# cmake/deb.sh BUILD_DIR [CMAKE_ARG...] — the Debian packages (cmake/install.cmake says
# what each holds), from a build of their own: BUILD_DIR is configured with the tests
# off (KVS_TESTS=OFF: cpack compiles the library and the CLI only), prefix /usr
# (multiarch LIBDIR, no RUNPATH), one variant (KVS_VARIANT, default kernel) and, when
# dpkg-dev is there, dpkg-buildflags' flags with every hardening feature.  CMAKE_ARGs
# come last and win (e.g. -DKVS_VARIANT=plain -DKVS_CUDA=OFF).  The packages land in
# BUILD_DIR/packages/: libkvshare1, libkvshare-dev and kvshare (.deb), and their
# -dbgsym (.ddeb).  BUILD_DIR is reused: a second run rebuilds only what changed.
# JOBS: build parallelism (default nproc).  `make deb` runs it on build-deb/.
set -euo pipefail
build=${1:?usage: deb.sh BUILD_DIR [CMAKE_ARG...]}
shift
src=$(cd "$(dirname "$0")/.." && pwd)
flags=()
if command -v dpkg-buildflags >/dev/null; then
	export DEB_BUILD_MAINT_OPTIONS=${DEB_BUILD_MAINT_OPTIONS:-hardening=+all}
	ldflags=$(dpkg-buildflags --get LDFLAGS)
	flags=("-DCMAKE_C_FLAGS=$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
		"-DCMAKE_EXE_LINKER_FLAGS=$ldflags" "-DCMAKE_SHARED_LINKER_FLAGS=$ldflags")
fi
cmake -S "$src" -B "$build" -DKVS_TESTS=OFF -DKVS_VARIANT=kernel -DCMAKE_INSTALL_PREFIX=/usr \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo "${flags[@]}" "$@" >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}"
rm -rf "$build/packages"
(cd "$build" && cpack -G DEB -B "$build/packages" >/dev/null)
rm -rf "$build/packages/_CPack_Packages"

# What CPack 3.25 gets wrong, mended in the packages it wrote:
#   libkvshare1: a postinst and postrm calling ldconfig beside the `triggers` file
#     that already does it (lintian: maintscript-calls-ldconfig): removed;
#   *-dbgsym: md5sums listing the staging dir's absolute path, and no doc dir:
#     md5sums rewritten, /usr/share/doc/<package>-dbgsym -> <package> added (as
#     Debian's own dbgsym packages have: the copyright and changelog of the package
#     each depends on at its exact version).
tmp=$(mktemp -d "$build/repack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
repack() { # PACKAGE_FILE CALLBACK: unpacked in $tmp/r, CALLBACK DIR PACKAGE run, built again
	rm -rf "$tmp/r"
	dpkg-deb -R "$1" "$tmp/r"
	"$2" "$tmp/r" "$(dpkg-deb -f "$1" Package)"
	(cd "$tmp/r" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
		xargs -0r md5sum) >"$tmp/md5sums"
	mv "$tmp/md5sums" "$tmp/r/DEBIAN/md5sums"
	dpkg-deb --root-owner-group -Zxz -b "$tmp/r" "$1" >/dev/null
}
no_ldconfig() { rm -f "$1/DEBIAN/postinst" "$1/DEBIAN/postrm"; }
dbgsym_doc() {
	mkdir -p "$1/usr/share/doc"
	ln -s "${2%-dbgsym}" "$1/usr/share/doc/$2"
}
repack "$(ls "$build"/packages/libkvshare1_*.deb)" no_ldconfig
for ddeb in "$build"/packages/*.ddeb; do
	repack "$ddeb" dbgsym_doc
done
ls "$build"/packages/*.deb "$build"/packages/*.ddeb
