#!/bin/bash
# perf/backend_bench.sh [builddir] — posix backend reads vs fio on the same files.
#
# For each shard size, 256 KiB and 1 MiB, writes 1 GiB of block files (64 blocks
# x 16 MiB, the backend's own names and layout) written with that shard size
# under $KVS_BENCH_DIR (default /var/tmp: not tmpfs): a block file's header
# records its geometry and a backend of another shard size refuses it
# (-KVS_ECONFIG; docs/io.md, "Block headers"), so each shard size reads a set of
# its own.  Then for each shard size and queue depths 8 and 32, buffered and
# O_DIRECT, reads its set with: the io_uring and pool engines of the kernel
# build (buffered, io_uring also after a lookup of every block, as the store
# looks a request's blocks up before it loads them: the line ends lookup=1; and
# io_uring told the next blocks ahead, kvs_backend_hint_read, as the store's
# dispatcher tells it the blocks of the misses it defers: hint=1),
# the pool of the plain build, and fio where it is installed
# (ioengine=io_uring, same files, bs = shard size, same iodepth, files read one
# after another like the backend; without fio a "#" line says so).  The page cache is
# dropped before every run (echo 1 > /proc/sys/vm/drop_caches as root, else
# POSIX_FADV_DONTNEED on the bench files; the output says which).  One line per run:
#   backend engine=<uring|pool|fio> shard_kib=<k> qd=<q> gbps=<..> cpu_ms_per_gib=<..> variant=<..> direct=<0|1> mem=<..> [lookup=1|hint=1]
# Buffers are huge pages on both sides (the backend: MAP_HUGETLB, else THP; fio:
# --mem=mmaphuge, else malloc; mem= says which): the store reads into hugetlbfs
# slots, and with 4 KiB pages a virtio disk splits each 1 MiB request.
# CPU: the backend's process time (all threads) over the read phase; fio's
# usr_cpu + sys_cpu of its job process over the job's runtime.  Each line is the
# median of KVS_BENCH_REPEAT (default 3) interleaved runs.
#
# Then the redis backend (engine=redis), when redis-server is installed (skip it
# with KVS_BENCH_REDIS=0): the same block set stored in a redis-server of our own
# on a unix socket in a temp dir (no persistence), read back by the kernel and
# plain builds with 1 GET in flight (no pipelining), 8 and 32 on one socket, and
# 32 over 4 sockets, at 256 KiB and 1 MiB shards as above and at 16 KiB, where a
# round trip per GET shows:
#   backend engine=redis shard_kib=<k> qd=<q> gbps=<..> cpu_ms_per_gib=<..> variant=<..>
#       direct=0 mem=<..> conns=<c> server_cpu_ms_per_gib=<..> sleeps_per_gib=<..>
# (cpu: the client process; server_cpu: the redis-server process, both over the
# read phase; sleeps: the client's waits for the server, about one per GET without
# pipelining).  KVS_BENCH_POSIX=0 skips the posix and fio part.
#
# Then a Redis Cluster (engine=redis-cluster; KVS_BENCH_CLUSTER=0 skips it,
# KVS_BENCH_REDIS=cluster runs it alone of the redis parts; it needs
# redis-cli): 3 masters without replicas on loopback TCP ports against one
# standalone server on another TCP port, the same block set at 256 KiB and 1 MiB
# shards, qd 8 and 32, the kernel build: the cluster with 2 sockets per node (6
# in all), the standalone server with 2 and with 6 (engine=redis conns=2|6, after
# the "a 3-master cluster" line: compare those, not the unix-socket ones; the
# socket count costs by itself, so conns=6 is the like-for-like line);
# server_cpu sums the three masters.  The servers share this machine's cores:
# the point is what routing costs the client, not scaling.
#
# Smoke mode (KVS_PERF_SMOKE=1; the perf.backend_bench CTest entry,
# tests/perf_smoke.sh): every loop and every line as above, on 4 blocks x 4 MiB
# per set, one run per line (KVS_BENCH_REPEAT still wins), and the cache dropped
# with POSIX_FADV_DONTNEED on the bench files even as root (other tests run
# beside it: not the machine's whole page cache).  A few seconds.
set -euo pipefail

build=${1:-build}
kern=$build/kernel/perf/backend_bench
plain=$build/plain/perf/backend_bench
smoke=${KVS_PERF_SMOKE:-0}
if [ "$smoke" = 1 ]; then
	nblocks=4 block_mib=4 repeat=${KVS_BENCH_REPEAT:-1}
else
	nblocks=64 block_mib=16 repeat=${KVS_BENCH_REPEAT:-3}
fi
kibs=(256 1024) # the posix shard sizes: one set of block files each, $root/<kib>k
for b in "$kern" "$plain"; do
	[ -x "$b" ] || { echo "backend_bench: $b not built (cmake --build $build)" >&2; exit 1; }
done
root=""
rdir=""
rpid=""
cpids="" # the cluster part's servers
# (kill with no pid fails, and under set -e that would end the trap before the rm:
# the block sets would stay behind and the script exit 2)
trap '[ -z "$rpid$cpids" ] || kill $rpid $cpids 2>/dev/null || true
rm -rf ${root:+"$root"} ${rdir:+"$rdir"}' EXIT

# Median of $repeat runs per point (runs of the readers interleaved): this kind of
# machine (shared VM disk) swings +-30 % from run to run.
median() {
	awk '
	function med(k,   n, i, j, t, v) { # of field k over the rows (insertion sort: a few)
		n = 0
		for (i = 1; i <= rows; i++)
			if ((i, k) in f)
				v[++n] = f[i, k] + 0
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && v[j - 1] > v[j]; j--) {
				t = v[j]; v[j] = v[j - 1]; v[j - 1] = t
			}
		return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
	}
	NF {
		rows++
		for (i = 2; i <= NF; i++) {
			split($i, kv, "="); f[rows, kv[1]] = kv[2]
			if (rows == 1)
				key[i] = kv[1] # the first row names the fields and their order
		}
	}
	END {
		if (!rows)
			exit 1
		line = "backend"
		for (i = 2; i in key; i++) {
			k = key[i]; x = f[1, k]
			if (k == "gbps")
				x = sprintf("%.2f", med(k))
			else if (k ~ /^(cpu_ms_per_gib|server_cpu_ms_per_gib|sleeps_per_gib)$/)
				x = sprintf("%.1f", med(k))
			line = line " " k "=" x
		}
		print line
	}'
}

# The posix engines and fio on block files (KVS_BENCH_POSIX=0 skips it); the body
# keeps the script's top-level indentation.
posix_bench() {
root=$(mktemp -d "${KVS_BENCH_DIR:-/var/tmp}/kvs-backend-bench.XXXXXX")
fstype=$(stat -f -c %T "$root")
if [ "$fstype" = tmpfs ]; then
	echo "backend_bench: $root is on tmpfs; set KVS_BENCH_DIR to a disk" >&2
	exit 1
fi

for kib in "${kibs[@]}"; do
	mkdir "$root/${kib}k"
	"$kern" write "$root/${kib}k" $nblocks $block_mib $kib
done
sync

# Page cache only (1, not 3): fio opens every file before its clock starts, the
# backend opens each block file when its first shard is read; with dentries and
# inodes dropped too, those opens would read directories from disk inside our
# timing only.
if [ "$smoke" = 0 ] && (echo 1 >/proc/sys/vm/drop_caches) 2>/dev/null; then
	drop_how="drop_caches=1"
	drop() { sync; echo 1 >/proc/sys/vm/drop_caches; }
else
	drop_how="fadvise_dontneed ($([ "$smoke" = 1 ] && echo smoke mode || echo drop_caches not allowed))"
	drop() { find "$root" -type f -exec dd iflag=nocache count=0 status=none if={} \;; }
fi
echo "# backend_bench: ${#kibs[@]} sets (${kibs[*]} KiB shards) of $((nblocks * block_mib)) MiB in" \
     "$nblocks files on $fstype ($root); cache: $drop_how"
fio=1
if ! command -v fio >/dev/null; then
	fio=0
	echo "# backend_bench: fio not installed: no engine=fio lines"
fi

direct_ok=1
if ! "$kern" read "$root/${kibs[0]}k" 1 $block_mib pool "${kibs[0]}" 1 1 >/dev/null 2>&1; then
	direct_ok=0
	echo "# backend_bench: O_DIRECT not supported on $fstype: buffered runs only"
fi

fio_line() { # shard_kib qd direct
	local out mem=hugetlb
	local args=(--name=kvs --opendir="$root/${1}k" --rw=read --bs="${1}k" --iodepth="$2"
		--ioengine=io_uring --direct="$3" --registerfiles=1 --fixedbufs=1
		--file_service_type=sequential --output-format=json)
	# Same buffer pages as the backend's (hugetlb); plain malloc if the pool is short
	# (not even tried when it has fewer free 2 MiB pages than qd x shard).
	local free
	free=$(awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo)
	if [ "${free:-0}" -lt $(( ($1 * $2 + 2047) / 2048 )) ] ||
	   ! out=$(fio "${args[@]}" --mem=mmaphuge 2>/dev/null); then
		mem=malloc
		out=$(fio "${args[@]}" 2>/dev/null)
	fi
	python3 -c '
import json, sys
s = sys.stdin.read()  # fio prints "opendir added N files" before the JSON
j = json.loads(s[s.index("{"):])["jobs"][0]
r = j["read"]
gib = r["io_bytes"] / 2**30
ms = j["job_runtime"]
cpu_ms = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * ms
print("backend engine=fio shard_kib=%s qd=%s gbps=%.2f cpu_ms_per_gib=%.1f variant=fio direct=%s mem=%s"
      % (sys.argv[1], sys.argv[2], r["io_bytes"] / (ms * 1e6), cpu_ms / gib, sys.argv[3], sys.argv[4]))
' "$1" "$2" "$3" "$mem" <<<"$out"
}

for direct in 0 1; do
	[ $direct = 1 ] && [ $direct_ok = 0 ] && continue
	for kib in "${kibs[@]}"; do
		set=$root/${kib}k
		for qd in 8 32; do
			u=""; l=""; h=""; p=""; q=""; f=""
			for ((r = 0; r < repeat; r++)); do
				drop; u+=$("$kern" read "$set" $nblocks $block_mib uring $kib $qd $direct)$'\n'
				# buffered: the store's lookup-then-load order (a lookup reads
				# the headers; O_DIRECT reads bypass the page cache anyway)
				[ $direct = 1 ] || { drop; l+=$("$kern" read "$set" $nblocks $block_mib uring $kib $qd 0 lookup)$'\n'; }
				drop; h+=$("$kern" read "$set" $nblocks $block_mib uring $kib $qd $direct hint)$'\n'
				drop; p+=$("$kern" read "$set" $nblocks $block_mib pool $kib $qd $direct)$'\n'
				drop; q+=$("$plain" read "$set" $nblocks $block_mib pool $kib $qd $direct)$'\n'
				[ $fio = 0 ] || { drop; f+=$(fio_line $kib $qd $direct)$'\n'; }
			done
			for lines in "$u" ${l:+"$l"} "$h" "$p" "$q" ${f:+"$f"}; do median <<<"$lines"; done
		done
	done
done
}
[ "${KVS_BENCH_POSIX:-1}" = 1 ] && posix_bench

[ "${KVS_BENCH_REDIS:-1}" != 0 ] || exit 0
if ! command -v redis-server >/dev/null; then
	echo "# backend_bench: redis-server not installed: no engine=redis lines"
	exit 0
fi
rdir=$(mktemp -d /tmp/kvs-backend-bench-redis.XXXXXX)
sock=$rdir/redis.sock
redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --dir "$rdir" --save "" \
	--appendonly no --daemonize no --logfile "$rdir/redis.log" &
rpid=$!
for ((i = 0; i < 200; i++)); do
	redis-cli -s "$sock" ping >/dev/null 2>&1 && break
	sleep 0.05
done
echo "# backend_bench: redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on $sock (pid $rpid)"
[ "${KVS_BENCH_REDIS:-1}" = cluster ] && kibs_unix=() || kibs_unix=(16 256 1024)
for kib in "${kibs_unix[@]}"; do
	redis-cli -s "$sock" flushall >/dev/null
	"$kern" redis-write "$sock" $nblocks $block_mib $kib
	for point in "1 1" "8 1" "32 1" "32 4"; do
		read -r qd conns <<<"$point"
		k=""; p=""
		for ((r = 0; r < repeat; r++)); do
			k+=$("$kern" redis-read "$sock" $nblocks $block_mib $kib $qd $conns $rpid)$'\n'
			p+=$("$plain" redis-read "$sock" $nblocks $block_mib $kib $qd $conns $rpid)$'\n'
		done
		for lines in "$k" "$p"; do median <<<"$lines"; done
	done
done

[ "${KVS_BENCH_CLUSTER:-1}" = 1 ] || exit 0
if ! command -v redis-cli >/dev/null; then
	echo "# backend_bench: redis-cli not installed: no engine=redis-cluster lines"
	exit 0
fi
. "$(dirname "$0")/redis_cluster.sh"
rcl_up "$rdir" 3 || exit 1
cpids=$RCL_PIDS
base=$RCL_PORT0 # free: the standalone server's
redis-server --port $base --bind 127.0.0.1 --dir "$rdir" --save "" --appendonly no \
	--daemonize no --logfile "$rdir/standalone.log" &
spid=$!
cpids+=" $spid"
mpids=$RCL_PID_LIST
seeds=$RCL_SEEDS
for ((i = 0; i < 200; i++)); do
	redis-cli -p $base ping >/dev/null 2>&1 && break
	sleep 0.05
done
echo "# backend_bench: a 3-master cluster on 127.0.0.1:$((base + 1))-$((base + 3)), standalone on 127.0.0.1:$base"
for kib in 256 1024; do
	for p in $base $((base + 1)) $((base + 2)) $((base + 3)); do
		redis-cli -p $p flushall >/dev/null
	done
	"$kern" redis-write 127.0.0.1:$base $nblocks $block_mib $kib
	"$kern" redis-write "cluster:$seeds" $nblocks $block_mib $kib
	for qd in 8 32; do
		s2=""; s6=""; c=""
		for ((r = 0; r < repeat; r++)); do
			s2+=$("$kern" redis-read 127.0.0.1:$base $nblocks $block_mib $kib $qd 2 $spid)$'\n'
			s6+=$("$kern" redis-read 127.0.0.1:$base $nblocks $block_mib $kib $qd 6 $spid)$'\n'
			c+=$("$kern" redis-read "cluster:$seeds" $nblocks $block_mib $kib $qd 2 "$mpids")$'\n'
		done
		for lines in "$s2" "$s6" "$c"; do median <<<"$lines"; done
	done
done
