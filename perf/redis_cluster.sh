# perf/redis_cluster.sh — sourced (bash) by the scripts that need a Redis
# Cluster of their own on loopback (perf/backend_bench.sh, tests/tools_bench.sh):
#
#   rcl_up DIR MASTERS    start MASTERS redis-servers (no replicas, --save "",
#                         their files and logs in DIR) on free loopback ports,
#                         make them one cluster (redis-cli --cluster create) and
#                         wait until every node says cluster_state:ok (bounded:
#                         10 s each); a server that exits at start, its port
#                         taken, is started again on other ports (5 tries).  Sets RCL_SEEDS ("127.0.0.1:P;..." as
#                         redis_endpoints takes it), RCL_PIDS (space-separated),
#                         RCL_PID_LIST (comma-separated) and RCL_PORT0 (the
#                         first port - 1: free too, for a standalone server
#                         beside them).  Returns non-zero, saying why on stderr,
#                         when a server or the cluster does not come up.
#
# The caller kills $RCL_PIDS (its EXIT trap) and removes DIR.  Needs
# redis-server and redis-cli.

rcl_port_busy() { # PORT: does anyone answer on it, or on its bus port?
	{ exec 3<>/dev/tcp/127.0.0.1/"$1"; } 2>/dev/null && { exec 3>&-; return 0; }
	{ exec 3<>/dev/tcp/127.0.0.1/$(("$1" + 10000)); } 2>/dev/null && { exec 3>&-; return 0; }
	return 1
}

# Ports: base + 1..MASTERS, their cluster bus ports 10000 above, all below the
# kernel's ephemeral range (32768 up by default), where a client connection's
# local port could take a bus port between the probe and the bind.  A server
# that exits anyway (a port taken meanwhile) makes the start try again on the
# next ports, 5 times at most.
rcl_start() { # DIR MASTERS BASE: start the servers; 1 if one did not answer
	local dir=$1 n=$2 base=$3 p i t pid
	RCL_PORT0=$base RCL_SEEDS="" RCL_PIDS="" RCL_PID_LIST=""
	for ((i = 1; i <= n; i++)); do
		p=$((base + i))
		redis-server --port $p --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
			--daemonize no --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
			--logfile "$dir/cluster-$p.log" &
		RCL_PIDS+="${RCL_PIDS:+ }$!"
		RCL_PID_LIST+="${RCL_PID_LIST:+,}$!"
		RCL_SEEDS+="${RCL_SEEDS:+;}127.0.0.1:$p"
	done
	i=0
	for pid in $RCL_PIDS; do
		p=$((base + ++i))
		for ((t = 0; t < 200; t++)); do
			redis-cli -p $p ping >/dev/null 2>&1 && break
			kill -0 "$pid" 2>/dev/null || break # exited: its port was taken
			sleep 0.05
		done
		if ! redis-cli -p $p ping >/dev/null 2>&1; then
			echo "rcl_up: redis-server on port $p did not answer: $(tail -1 "$dir/cluster-$p.log" 2>/dev/null)" >&2
			kill $RCL_PIDS 2>/dev/null
			wait $RCL_PIDS 2>/dev/null
			return 1
		fi
	done
}

rcl_up() {
	local dir=$1 n=$2 base=$((20000 + $$ % 2000)) busy p i attempt
	for ((attempt = 1; ; attempt++)); do
		for (( ; ; base += n + 3)); do
			((base + n < 22700)) || base=20000
			busy=0
			for ((p = base; p <= base + n; p++)); do
				rcl_port_busy $p && busy=1
			done
			[ $busy = 0 ] && break
		done
		rcl_start "$dir" "$n" "$base" && break
		[ $attempt -lt 5 ] || return 1
		base=$((base + n + 3))
	done
	redis-cli --cluster create ${RCL_SEEDS//;/ } --cluster-replicas 0 --cluster-yes \
		>"$dir/create.log" 2>&1 ||
		{ echo "rcl_up: redis-cli --cluster create failed: $(tail -2 "$dir/create.log")" >&2; return 1; }
	for ((p = base + 1; p <= base + n; p++)); do
		for ((i = 0; i < 200; i++)); do
			redis-cli -p $p cluster info 2>/dev/null | grep -q cluster_state:ok && break
			sleep 0.05
		done
		[ $i -lt 200 ] || { echo "rcl_up: node $p not cluster_state:ok after 10 s" >&2; return 1; }
	done
}
