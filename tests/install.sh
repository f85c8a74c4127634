#!/usr/bin/env bash
# tests/install.sh [--deb] BUILD_DIR SRC_DIR — the install tree and the Debian
# packages, used as a packager and a user would (cmake/install.cmake):
#   1. `cmake --install` of each built variant (the default one, then each other by
#      --component) into its own prefix, and once with DESTDIR;
#   2. a C program built against each install twice, through pkg-config
#      (kvshare.pc) and through find_package(kvshare) (kvshare::kvshare), run: it
#      opens a store and says which library variant it got;
#   3. the installed CLI finds its library through RUNPATH $ORIGIN/../lib after the
#      tree is moved.
# --deb (CTest `deb`) instead: cmake/deb.sh builds the packages of BUILD_DIR's install
# variant into BUILD_DIR/deb/ (a build without tests, reused by the next run); then
#   1. lintian on every package: any error fails;
#   2. names (libkvshare1_<version>_<arch>.deb ...) and contents (dpkg-deb -c, -I):
#      the library and its SONAME link alone in libkvshare1, under the multiarch
#      libdir, stripped, its debug info in libkvshare1-dbgsym under its build-id, a
#      shlibs file and an ldconfig trigger and no maintainer script; the header, the
#      .so link, kvshare.pc and the CMake package in libkvshare-dev; the CLI, without
#      RUNPATH, in kvshare; -dev and kvshare depend on libkvshare1 at its version;
#   3. the packages unpacked together (dpkg-deb -x, the one install possible without
#      root): step 2 above against them (kvshare.pc and the CMake package find their
#      prefix from where they lie), and `kvshare bench` from them.
# Exit 0 pass, 1 fail (the step named), 77 skip (no C compiler / pkg-config; --deb: no
# dpkg-deb, lintian or cpack).
set -euo pipefail
deb=0
if [ "${1:-}" = --deb ]; then
	deb=1
	shift
fi
build=$(cd "${1:?usage: install.sh [--deb] BUILD_DIR SRC_DIR}" && pwd)
src=$(cd "${2:?usage: install.sh [--deb] BUILD_DIR SRC_DIR}" && pwd)
cc=${CC:-cc}
tools="$cc pkg-config cmake"
[ $deb = 0 ] || tools="$tools cpack dpkg-deb lintian"
for tool in $tools; do
	command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
tmp=$(mktemp -d /tmp/kvs-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat >"$tmp/app.c" <<'EOF'
/* A user's program: open a store through the installed library, name it. */
#include <stdio.h>
#include <unistd.h>
#include <kvshare.h>

int main(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	char kv[256], err[256];
	int rc;

	snprintf(kv, sizeof(kv), "unique_id=kvsinst%d,device_id=0,shard_size=64k,"
		 "cache_buffer_capacity_gb=0.01,hugetlb=off,copy_engine=host,backend=none",
		 (int)getpid());
	kvs_store_config_init(&cfg);
	if (kvs_store_config_parse(&cfg, kv, err, sizeof(err))) {
		fprintf(stderr, "parse: %s\n", err);
		return 1;
	}
	rc = kvs_store_open(&cfg, &s);
	if (rc) {
		fprintf(stderr, "kvs_store_open: %s: %s\n", kvs_strerror(rc), kvs_store_last_error());
		return 1;
	}
	kvs_store_close(s);
	printf("kvshare %s %s\n", kvs_version(), kvs_variant());
	return 0;
}
EOF
cat >"$tmp/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.24)
project(kvs_install_user LANGUAGES C)
find_package(kvshare 0.1 REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE kvshare::kvshare)
EOF

# build_and_run LABEL PREFIX LIBDIR VARIANT: the program above built against the
# install at PREFIX (library in LIBDIR) through kvshare.pc and through
# find_package(kvshare), each run and naming VARIANT.
build_and_run() {
	local v=$1 prefix=$2 libdir=$3 want=$4 flags out
	flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs kvshare) ||
		fail "$v: pkg-config kvshare"
	# shellcheck disable=SC2086
	"$cc" -o "$tmp/app-pc-$v" "$tmp/app.c" $flags -Wl,-rpath,"$libdir" || fail "$v: cc with kvshare.pc"
	out=$("$tmp/app-pc-$v") || fail "$v: the pkg-config-built program"
	[ "$out" = "kvshare $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion kvshare) $want" ] ||
		fail "$v: the pkg-config-built program said '$out'"
	echo "  $v, pkg-config: $out"

	cmake -S "$tmp" -B "$tmp/cm-$v" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" >/dev/null ||
		fail "$v: find_package(kvshare)"
	cmake --build "$tmp/cm-$v" >/dev/null || fail "$v: building against kvshare::kvshare"
	out=$("$tmp/cm-$v/app") || fail "$v: the find_package-built program"
	[ "${out##* }" = "$want" ] || fail "$v: the find_package-built program said '$out'"
	echo "  $v, find_package: $out"
}

variants=$(sed -n 's/^KVS_VARIANT:STRING=//p' "$build/CMakeCache.txt")
default=$(sed -n 's/^KVS_INSTALL_VARIANT:STRING=//p' "$build/CMakeCache.txt")
case "$variants" in both) variants="kernel plain" ;; esac

# --deb: the Debian packages, from a build of their own (cmake/deb.sh)
if [ $deb = 1 ]; then
	cuda=$(sed -n 's/^KVS_CUDA:STRING=//p' "$build/CMakeCache.txt")
	log=$build/deb.log
	"$src/cmake/deb.sh" "$build/deb" -DKVS_VARIANT="$default" -DKVS_INSTALL_VARIANT="$default" \
		-DKVS_CUDA="${cuda:-auto}" >"$log" 2>&1 || { tail -n 40 "$log"; fail "cmake/deb.sh (log: $log)"; }
	pkgs=$build/deb/packages
	version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")-1
	arch=$(dpkg --print-architecture)
	libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/deb/CMakeCache.txt")
	ma=$("$cc" -print-multiarch 2>/dev/null || true)
	[ -z "$ma" ] || [ "$libdir" = "lib/$ma" ] || fail "deb: libdir $libdir, not the multiarch lib/$ma"
	lib=$pkgs/libkvshare1_${version}_$arch.deb
	dev=$pkgs/libkvshare-dev_${version}_$arch.deb
	cli=$pkgs/kvshare_${version}_$arch.deb
	libdbg=$pkgs/libkvshare1-dbgsym_${version}_$arch.ddeb
	clidbg=$pkgs/kvshare-dbgsym_${version}_$arch.ddeb
	for f in "$lib" "$dev" "$cli" "$libdbg" "$clidbg"; do
		[ -f "$f" ] || fail "deb: no ${f##*/} (built: $(cd "$pkgs" && echo *))"
		dpkg-deb -f "$f" Package Depends | paste -sd ' ' | sed "s|^|  ${f##*/}: |"
	done

	# 1. lintian: errors fail, the rest is shown
	rc=0
	out=$(lintian --fail-on error "$lib" "$dev" "$cli" "$libdbg" "$clidbg" 2>&1) || rc=$?
	out=$(grep -v '^running with root privileges' <<<"$out" || true)
	[ -z "$out" ] || sed 's/^/  lintian: /' <<<"$out"
	[ $rc = 0 ] && ! grep -q '^E: ' <<<"$out" || fail "deb: lintian (exit $rc)"
	echo "  deb: lintian: no errors"

	# 2. names and contents (doc dirs left to lintian)
	listing() {
		dpkg-deb -c "$1" | awk '{ print $6 ($7 == "->" ? " -> " $8 : "") }' | sed 's|^\./||' |
			grep -v -e '^$' -e '/$' -e '^usr/share/doc/' | LC_ALL=C sort || true
	}
	real=$(listing "$lib" | sed -n "s|^usr/$libdir/libkvshare.so.1 -> ||p")
	[ -n "$real" ] || fail "deb: libkvshare1 has no usr/$libdir/libkvshare.so.1 link: $(listing "$lib")"
	want=$(printf '%s\n' "usr/$libdir/$real" "usr/$libdir/libkvshare.so.1 -> $real" | LC_ALL=C sort)
	[ "$(listing "$lib")" = "$want" ] || fail "deb: libkvshare1 holds: $(listing "$lib")"
	want=$(printf '%s\n' usr/include/kvshare.h "usr/$libdir/libkvshare.so -> libkvshare.so.1" \
		"usr/$libdir/pkgconfig/kvshare.pc" "usr/$libdir/cmake/kvshare/kvshareConfig.cmake" \
		"usr/$libdir/cmake/kvshare/kvshareConfigVersion.cmake" | LC_ALL=C sort)
	[ "$(listing "$dev")" = "$want" ] || fail "deb: libkvshare-dev holds: $(listing "$dev")"
	[ "$(listing "$cli")" = usr/bin/kvshare ] || fail "deb: kvshare holds: $(listing "$cli")"
	control() { dpkg-deb --ctrl-tarfile "$1" | tar -xO "./$2" 2>/dev/null || true; }
	[ "$(control "$lib" triggers)" = "activate-noawait ldconfig" ] ||
		fail "deb: libkvshare1's triggers: '$(control "$lib" triggers)'"
	grep -q "^libkvshare 1 libkvshare1 " <<<"$(control "$lib" shlibs)" ||
		fail "deb: libkvshare1's shlibs: '$(control "$lib" shlibs)'"
	scripts=$(dpkg-deb --ctrl-tarfile "$lib" | tar -t | grep -E '(inst|rm)$' || true)
	[ -z "$scripts" ] || fail "deb: libkvshare1 has maintainer scripts: $scripts"
	for f in "$dev" "$cli"; do
		grep -qF "libkvshare1 (= $version)" <<<"$(dpkg-deb -f "$f" Depends)" ||
			fail "deb: ${f##*/} does not depend on libkvshare1 (= $version)"
	done
	root=$tmp/root
	for f in "$lib" "$dev" "$cli"; do dpkg-deb -x "$f" "$root"; done
	for f in "$libdbg" "$clidbg"; do dpkg-deb -x "$f" "$tmp/dbg"; done
	for f in "usr/$libdir/$real" usr/bin/kvshare; do
		# Captured, not piped into grep -q: under pipefail a readelf killed by SIGPIPE
		# would read as no match.
		secs=$(readelf -S "$root/$f")
		! grep -q '\.debug_info' <<<"$secs" || fail "deb: /$f is not stripped"
		id=$(readelf -n "$root/$f" | sed -n 's/.*Build ID: //p')
		secs=$(readelf -S "$tmp/dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" 2>&1 || true)
		grep -q '\.debug_info' <<<"$secs" || fail "deb: no debug info for /$f (build-id $id) in its -dbgsym"
	done
	dyn=$(readelf -d "$root/usr/$libdir/$real")
	grep -q 'SONAME.*\[libkvshare.so.1\]' <<<"$dyn" || fail "deb: /usr/$libdir/$real: SONAME not libkvshare.so.1"
	dyn=$(readelf -d "$root/usr/bin/kvshare")
	! grep -qE 'RPATH|RUNPATH' <<<"$dyn" || fail "deb: /usr/bin/kvshare has a RUNPATH"
	echo "  deb: contents: /usr/$libdir/{$real,libkvshare.so.1} stripped (debug info in" \
		"-dbgsym), triggers, shlibs; -dev: header, .so, .pc, CMake package; kvshare: the CLI"

	# 3. used unpacked
	build_and_run deb "$root/usr" "$root/usr/$libdir" "$default"
	out=$(LD_LIBRARY_PATH="$root/usr/$libdir" "$root/usr/bin/kvshare" bench 2>&1) ||
		fail "deb: kvshare bench: $out"
	grep -q "^verified: " <<<"$out" || fail "deb: kvshare bench did not verify: $out"
	echo "  deb: unpacked, kvshare bench: $(grep '^verified: ' <<<"$out")"
	exit 0
fi

for v in $variants; do
	prefix=$tmp/prefix-$v
	if [ "$v" = "$default" ]; then
		cmake --install "$build" --prefix "$prefix" >/dev/null || fail "$v: cmake --install"
	else
		cmake --install "$build" --prefix "$prefix" --component "$v" >/dev/null ||
			fail "$v: cmake --install --component $v"
	fi
	libdir=$(dirname "$(find "$prefix" -name libkvshare.so.1 | head -n 1)")
	[ -f "$libdir/libkvshare.so.1" ] || fail "$v: no libkvshare.so.1 installed"
	[ -f "$prefix/include/kvshare.h" ] || fail "$v: no kvshare.h installed"

	build_and_run "$v" "$prefix" "$libdir" "$v"

	# the CLI, the tree moved: RUNPATH $ORIGIN/../lib
	mv "$prefix" "$prefix.moved"
	runpath=$(readelf -d "$prefix.moved/bin/kvshare" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
	[ "$runpath" = "\$ORIGIN/../${libdir#"$prefix"/}" ] || fail "$v: kvshare RUNPATH '$runpath'"
	# Captured, not piped into grep -q: grep leaves at its first match, ldd can
	# then die of SIGPIPE, and pipefail reports a found library as missing.
	found=$(ldd "$prefix.moved/bin/kvshare")
	grep -q "libkvshare.so.1 => $prefix.moved/" <<<"$found" ||
		fail "$v: the moved CLI does not find its library: $(grep kvshare <<<"$found")"
	"$prefix.moved/bin/kvshare" ls >/dev/null || fail "$v: the installed kvshare ls"
	echo "  $v, CLI: RUNPATH $runpath, found after a move"
done

# DESTDIR
DESTDIR=$tmp/dest cmake --install "$build" --prefix /opt/kvshare >/dev/null || fail "DESTDIR install"
[ -n "$(find "$tmp/dest/opt/kvshare" -name libkvshare.so.1)" ] || fail "DESTDIR: no library under DESTDIR/PREFIX"
echo "  DESTDIR=.../dest --prefix /opt/kvshare: installed under dest/opt/kvshare"
