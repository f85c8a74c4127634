#!/usr/bin/env bash
# tests/install.sh BUILD_DIR SRC_DIR — the install tree, used as a packager and a
# user would (cmake/install.cmake):
#   1. `cmake --install` of each built variant (the default one, then each other by
#      --component) into its own prefix, and once with DESTDIR;
#   2. a C program built against each install twice, through pkg-config
#      (kvshare.pc) and through find_package(kvshare) (kvshare::kvshare), run: it
#      opens a store and says which library variant it got;
#   3. the installed CLI finds its library through RUNPATH $ORIGIN/../lib after the
#      tree is moved;
#   4. `cpack -G DEB`: the package's files, unpacked (dpkg-deb -x), run `kvshare
#      bench` (skipped, saying so, without cpack or dpkg-deb).
# Exit 0 pass, 1 fail (the step named), 77 skip (no C compiler / pkg-config).
set -euo pipefail
build=$(cd "${1:?usage: install.sh BUILD_DIR SRC_DIR}" && pwd)
src=$(cd "${2:?usage: install.sh BUILD_DIR SRC_DIR}" && pwd)
cc=${CC:-cc}
for tool in "$cc" pkg-config cmake; do
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

variants=$(sed -n 's/^KVS_VARIANT:STRING=//p' "$build/CMakeCache.txt")
default=$(sed -n 's/^KVS_INSTALL_VARIANT:STRING=//p' "$build/CMakeCache.txt")
case "$variants" in both) variants="kernel plain" ;; esac

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

	# pkg-config
	flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs kvshare) ||
		fail "$v: pkg-config kvshare"
	# shellcheck disable=SC2086
	"$cc" -o "$tmp/app-pc-$v" "$tmp/app.c" $flags -Wl,-rpath,"$libdir" || fail "$v: cc with kvshare.pc"
	out=$("$tmp/app-pc-$v") || fail "$v: the pkg-config-built program"
	[ "$out" = "kvshare $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion kvshare) $v" ] ||
		fail "$v: the pkg-config-built program said '$out'"
	echo "  $v, pkg-config: $out"

	# find_package
	cmake -S "$tmp" -B "$tmp/cm-$v" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" >/dev/null ||
		fail "$v: find_package(kvshare)"
	cmake --build "$tmp/cm-$v" >/dev/null || fail "$v: building against kvshare::kvshare"
	out=$("$tmp/cm-$v/app") || fail "$v: the find_package-built program"
	[ "${out##* }" = "$v" ] || fail "$v: the find_package-built program said '$out'"
	echo "  $v, find_package: $out"

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

# Debian package
if ! command -v cpack >/dev/null || ! command -v dpkg-deb >/dev/null; then
	echo "SKIP: cpack or dpkg-deb not installed: no Debian package built"
	echo "skip  install/deb (no cpack/dpkg-deb)"
	exit 0
fi
(cd "$build" && cpack -G DEB -B "$tmp/deb" >/dev/null) || fail "cpack -G DEB"
deb=$(ls "$tmp"/deb/kvshare_*.deb)
dpkg-deb -f "$deb" Package Version Depends | sed 's/^/  deb: /'
dpkg-deb -x "$deb" "$tmp/root"
[ -x "$tmp/root/usr/bin/kvshare" ] || fail "deb: no /usr/bin/kvshare"
out=$("$tmp/root/usr/bin/kvshare" bench 2>&1) || fail "deb: kvshare bench: $out"
grep -q "^verified: " <<<"$out" || fail "deb: kvshare bench did not verify: $out"
echo "  deb: unpacked, kvshare bench: $(echo "$out" | grep '^verified: ')"
