/*
 * io/redis_cluster.c — the redis backend on a Redis Cluster (redis_cluster=1;
 * io/redis.c says what the backend does, docs/io.md "Redis Cluster" what an
 * operator sees).
 *
 * Keys and slots.  In cluster mode shard s of block b is the key
 * <key_prefix>{<32 hex of b>}:<s>: the braces make the block id the key's hash
 * tag, so every shard of a block is in one slot, CRC16 (XMODEM, the cluster
 * spec's) of the 32 hex characters mod 16384, and on one master: a block's
 * EXISTS names all its keys in one command, and `CLUSTER KEYSLOT <hex>` tells
 * an operator where a block lives.
 *
 * The nodes are the handle's endpoints (struct endpoint, each with its data
 * sockets and its lookup socket as an endpoint of a plain configuration has):
 * first the seeds of redis_endpoints, then every master that the slot map or a
 * redirection names, added as they appear (by address, so a seed that is a
 * master is not added twice) and never removed: a cluster's addresses are its
 * masters and replicas, a failover moves the slots to an address already
 * there.  At most max_nodes of them: CLUSTER_NODES_MAX, fewer with many
 * connections per node (their data sockets fit one wait; an error names the
 * limit).
 *
 * The slot map (slot -> node) is read with CLUSTER SLOTS from the node read
 * last, else from every known node in turn, on a connection of its own
 * (blocking, bounded by the connect and command timeouts, each at most
 * REFRESH_TIMEOUT_MAX_NS: a refresh stalls its caller that long at most).
 * Refreshes are at most one per REFRESH_GAP_NS.  The issuer and the lookup
 * thread both route, so the map and the node table are under map_mu; a node's
 * entry is written before the count that publishes it (release; readers load
 * the count with acquire) and never changes after.
 *
 * Redirections.  A reply -MOVED <slot> <node> updates the map's entry for the
 * slot (no refresh: a reshard moves slots one by one) and the command goes to
 * that node; -ASK <slot> <node> (the slot is migrating and this key is there
 * already) sends ASKING and the command to that node, on one socket, pipelined,
 * without touching the map.  At most REDIRECTS_MAX of those per command: a map
 * that never settles fails the command (-EIO, logged).  -CLUSTERDOWN,
 * -TRYAGAIN (a multi-key EXISTS over a half-migrated block) and a lost socket
 * (a master killed: every command on it) park the command: it is sent again
 * after a backoff (RETRY_MIN_NS doubling to RETRY_MAX_NS), after a map refresh,
 * and only while its deadline -- redis_command_timeout_ms from its submit -- is
 * ahead: at the deadline it completes with the error it last got and an ERROR
 * line naming the slot, so a load in a failover's window fails by its deadline
 * and one after it succeeds.  A retried SET writes the same bytes again; a GET
 * checks its value's header as always: never wrong bytes.
 *
 * Parked data commands belong to the issuer (r->parked); poll sends them when
 * due (cluster_resend) and sleeps no later than the first is due, and the wait
 * descriptor's timer is armed for it too.  A lookup's EXISTS is retried within
 * the lookup's own wait (lookup_locked, io/redis.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "io/redis_impl.h"

#define REDIRECTS_MAX 16
#define RETRY_MIN_NS (20 * KVS_NSEC_PER_MSEC)
#define RETRY_MAX_NS (320 * KVS_NSEC_PER_MSEC)
#define REFRESH_GAP_NS (100 * KVS_NSEC_PER_MSEC)
#define REFRESH_TIMEOUT_MAX_NS KVS_NSEC_PER_SEC

/* An ERROR line of the cluster's routing, at most one per LOG_INTERVAL_NS per
 * handle; the issuer and a lookup thread share the limit, under map_mu. */
#define cluster_log(r, ...)                                                              \
	do {                                                                             \
		pthread_mutex_lock(&(r)->map_mu);                                        \
		kvs_log_limited(&(r)->log, &(r)->cluster_log_limit, LOG_INTERVAL_NS,     \
				KVS_LOG_ERROR, __VA_ARGS__);                             \
		pthread_mutex_unlock(&(r)->map_mu);                                      \
	} while (0)

/* ------------------------------------------------------------- slots */

/* CRC16/XMODEM (polynomial 0x1021, initial 0), as the cluster spec's keyHashSlot. */
static uint16_t crc16(const char *p, size_t n)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < n; i++) {
		crc ^= (uint16_t)((uint8_t)p[i] << 8);
		for (int k = 0; k < 8; k++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

uint16_t cluster_slot(const struct kvs_block_id *block)
{
	char hex[33];

	kvs_io_block_hex(block, hex);
	return crc16(hex, 32) & (CLUSTER_SLOTS - 1);
}

/* ------------------------------------------------------------- nodes */

/* The index of the node at "host:port" (len bytes of s), added when new.
 * Under map_mu.  Index, or -errno (logged). */
static int node_find_add(struct redis *r, const char *s, size_t len)
{
	struct endpoint tmp;
	uint32_t n = r->nep; /* writers hold map_mu: no other writer */
	struct endpoint *ep;
	int rc;

	memset(&tmp, 0, sizeof(tmp));
	rc = endpoint_parse(r, &tmp, s, len);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++)
		if (r->eps[i].addrlen == tmp.addrlen &&
		    memcmp(&r->eps[i].addr, &tmp.addr, tmp.addrlen) == 0)
			return (int)i;
	if (n == r->max_nodes) {
		kvs_log_error(&r->log, "backend: redis cluster: node %s would be node %u: at most %u "
				       "nodes (seeds and masters seen) per handle with "
				       "redis_connections=%u (%d data sockets in all); name fewer "
				       "seeds, or lower redis_connections", tmp.name, n + 1,
			      r->max_nodes, r->nconn, SOCKETS_MAX);
		return -ENOSPC;
	}
	ep = &r->eps[n];
	memcpy(ep->name, tmp.name, sizeof(ep->name));
	ep->addr = tmp.addr;
	ep->addrlen = tmp.addrlen;
	rc = endpoint_init(r, ep);
	if (rc)
		return rc;
	/* release: the entry above is complete before a reader that loads the count
	 * (acquire, endpoint_count) can index it. */
	__atomic_store_n(&r->nep, n + 1, __ATOMIC_RELEASE);
	return (int)n;
}

/* "ip:port" of a CLUSTER SLOTS entry, brackets around an IPv6 address. */
static size_t node_name(char *out, size_t cap, const char *ip, long long port)
{
	return (size_t)snprintf(out, cap, strchr(ip, ':') ? "[%s]:%lld" : "%s:%lld", ip, port);
}

/* -------------------------------------------------------- the slot map */

/* A blocking connection of our own to ep, with the timeouts capped at
 * REFRESH_TIMEOUT_MAX_NS.  A hiredis context, or NULL and *err. */
static redisContext *node_dial(const struct redis *r, const struct endpoint *ep, int *err)
{
	uint64_t cto = r->connect_timeout_ns < REFRESH_TIMEOUT_MAX_NS ? r->connect_timeout_ns
								     : REFRESH_TIMEOUT_MAX_NS;
	uint64_t rto = r->command_timeout_ns < REFRESH_TIMEOUT_MAX_NS ? r->command_timeout_ns
								     : REFRESH_TIMEOUT_MAX_NS;
	struct timeval tv = { .tv_sec = (time_t)(rto / KVS_NSEC_PER_SEC),
			      .tv_usec = (suseconds_t)(rto % KVS_NSEC_PER_SEC / 1000) };
	struct pollfd pfd = { .events = POLLOUT };
	redisContext *ctx;
	socklen_t len = sizeof(*err);

	pfd.fd = socket(ep->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (pfd.fd < 0) {
		*err = -errno;
		return NULL;
	}
	*err = 0;
	if (connect(pfd.fd, (const struct sockaddr *)&ep->addr, ep->addrlen) < 0) {
		if (errno != EINPROGRESS)
			*err = -errno;
		else if (poll(&pfd, 1, (int)(cto / KVS_NSEC_PER_MSEC) + 1) != 1)
			*err = -ETIMEDOUT;
		else if (getsockopt(pfd.fd, SOL_SOCKET, SO_ERROR, err, &len) < 0 || *err)
			*err = -(*err ? *err : errno);
	}
	if (!*err && fcntl(pfd.fd, F_SETFL, 0) < 0) /* blocking, with the timeouts below */
		*err = -errno;
	if (*err) {
		close(pfd.fd);
		return NULL;
	}
	ctx = redisConnectFd(pfd.fd); /* owns the socket from here */
	if (!ctx || ctx->err || redisSetTimeout(ctx, tv) != REDIS_OK) {
		*err = ctx ? -EIO : -ENOMEM;
		if (ctx)
			redisFree(ctx);
		else
			close(pfd.fd);
		return NULL;
	}
	return ctx;
}

/* CLUSTER SLOTS of ep (after AUTH), or NULL and *err: -EACCES (credentials
 * refused), -EINVAL (not a cluster node), else the connection's error; the
 * first two logged, naming the key to fix. */
static redisReply *slots_fetch(struct redis *r, const struct endpoint *ep, int *err)
{
	redisContext *ctx = node_dial(r, ep, err);
	redisReply *rep = NULL;

	if (!ctx)
		return NULL;
	if (r->auth_cmd)
		redisAppendFormattedCommand(ctx, r->auth_cmd, r->auth_len);
	redisAppendCommand(ctx, "CLUSTER SLOTS");
	for (int i = r->auth_cmd ? 0 : 1; i < 2; i++) {
		freeReplyObject(rep);
		rep = NULL;
		if (redisGetReply(ctx, (void **)&rep) != REDIS_OK || !rep) {
			*err = ctx->err == REDIS_ERR_EOF ? -ECONNRESET : -ETIMEDOUT;
			break;
		}
		if (rep->type != REDIS_REPLY_ERROR)
			continue;
		if (i == 0) {
			kvs_log_error(&r->log, "backend: redis cluster node %s refused AUTH: %s: fix "
					       "redis_user / redis_password / redis_password_file",
				      ep->name, rep->str);
			*err = -EACCES;
		} else if (strncmp(rep->str, "NOAUTH", 6) == 0) {
			kvs_log_error(&r->log, "backend: redis cluster node %s wants a password (%s): "
					       "set redis_password or redis_password_file", ep->name,
				      rep->str);
			*err = -EACCES;
		} else {
			kvs_log_error(&r->log, "backend: redis %s answered CLUSTER SLOTS with '%s': "
					       "redis_cluster=1 wants Redis Cluster nodes in "
					       "redis_endpoints; for a standalone server set "
					       "redis_cluster=0", ep->name, rep->str);
			*err = -EINVAL;
		}
		freeReplyObject(rep);
		rep = NULL;
		break;
	}
	redisFree(ctx);
	return rep;
}

/* The map of a CLUSTER SLOTS reply (read from node `from`) into r->slot_node,
 * adding the masters it names.  Under map_mu.  0 or -EPROTO / -ENOSPC. */
static int slots_apply(struct redis *r, const redisReply *rep, uint32_t from)
{
	uint8_t *map = r->slot_node + CLUSTER_SLOTS; /* the scratch half, under map_mu */

	if (rep->type != REDIS_REPLY_ARRAY)
		return -EPROTO;
	memset(map, NO_NODE, CLUSTER_SLOTS);
	for (size_t i = 0; i < rep->elements; i++) {
		const redisReply *e = rep->element[i], *m;
		char name[TARGET_MAX];
		long long lo, hi;
		int node;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    e->element[2]->type != REDIS_REPLY_ARRAY)
			return -EPROTO;
		lo = e->element[0]->integer;
		hi = e->element[1]->integer;
		m = e->element[2];
		if (lo < 0 || hi < lo || hi >= CLUSTER_SLOTS || m->elements < 2 ||
		    m->element[0]->type != REDIS_REPLY_STRING ||
		    m->element[1]->type != REDIS_REPLY_INTEGER)
			return -EPROTO;
		if (strcmp(m->element[0]->str, "?") == 0)
			continue; /* its address is unknown (yet): the slots stay unserved */
		if (m->element[0]->str[0] == '\0') { /* "": the node asked, at its own port */
			const char *colon = strrchr(r->eps[from].name, ':');

			if (!colon)
				return -EPROTO;
			snprintf(name, sizeof(name), "%.*s:%lld",
				 (int)(colon - r->eps[from].name), r->eps[from].name,
				 m->element[1]->integer);
		} else {
			node_name(name, sizeof(name), m->element[0]->str, m->element[1]->integer);
		}
		node = node_find_add(r, name, strlen(name));
		if (node < 0)
			return node;
		memset(map + lo, node, (size_t)(hi - lo + 1));
	}
	memcpy(r->slot_node, map, CLUSTER_SLOTS);
	r->good_node = from;
	return 0;
}

/* Read the map again, from the node read last and then every other in turn,
 * unless one was read within REFRESH_GAP_NS.  0 or the last node's -errno. */
static int map_refresh(struct redis *r)
{
	uint64_t now = kvs_now_ns();
	uint32_t first, n;
	int err = -EHOSTUNREACH;

	pthread_mutex_lock(&r->map_mu);
	if (now < r->refresh_ns) {
		pthread_mutex_unlock(&r->map_mu);
		return 0;
	}
	r->refresh_ns = now + REFRESH_GAP_NS;
	first = r->good_node;
	n = r->nep;
	pthread_mutex_unlock(&r->map_mu);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t e = (first + k) % n;
		redisReply *rep = slots_fetch(r, &r->eps[e], &err);
		int rc;

		if (!rep)
			continue;
		pthread_mutex_lock(&r->map_mu);
		rc = slots_apply(r, rep, e);
		pthread_mutex_unlock(&r->map_mu);
		freeReplyObject(rep);
		if (rc == 0)
			return 0;
		err = rc;
	}
	return err;
}

int cluster_open(struct redis *r)
{
	uint32_t seeds = r->nep, uncovered = 0, first = 0;
	int rc = -EHOSTUNREACH;

	r->slot_node = malloc(2 * CLUSTER_SLOTS); /* the map, then a scratch copy */
	if (!r->slot_node)
		return -ENOMEM;
	memset(r->slot_node, NO_NODE, CLUSTER_SLOTS);
	r->refresh_ns = kvs_now_ns() + REFRESH_GAP_NS;
	for (uint32_t e = 0; e < seeds; e++) {
		redisReply *rep = slots_fetch(r, &r->eps[e], &rc);

		if (!rep) {
			if (rc == -EACCES || rc == -EINVAL)
				return rc; /* logged: a configuration error */
			kvs_log_warn(&r->log, "backend: redis cluster seed %s unreachable at open "
					      "(%s): asking the other seeds", r->eps[e].name,
				     kvs_strerror(rc));
			continue;
		}
		pthread_mutex_lock(&r->map_mu);
		rc = slots_apply(r, rep, e);
		pthread_mutex_unlock(&r->map_mu);
		freeReplyObject(rep);
		if (rc) {
			kvs_log_error(&r->log, "backend: redis cluster seed %s: its CLUSTER SLOTS "
					       "reply is not a slot map (%s)", r->eps[e].name,
				      kvs_strerror(rc));
			return rc;
		}
		break;
	}
	if (rc) {
		if (!r->start_degraded) {
			kvs_log_error(&r->log, "backend: redis cluster: no seed of redis_endpoints "
					       "answered at open (last: %s): start the cluster, fix "
					       "redis_endpoints, or set redis_start_degraded=1 to open "
					       "anyway (transfers fail until a node answers)",
				      kvs_strerror(rc));
			return rc;
		}
		kvs_log_warn(&r->log, "backend: redis cluster: no seed answered at open (%s), "
				      "opened degraded (redis_start_degraded=1): transfers fail "
				      "until a node answers", kvs_strerror(rc));
		r->refresh_ns = 0;
		return 0;
	}
	for (uint32_t s = CLUSTER_SLOTS; s-- > 0;)
		if (r->slot_node[s] == NO_NODE) {
			uncovered++;
			first = s;
		}
	if (uncovered)
		kvs_log_warn(&r->log, "backend: redis cluster: %u of %d slots are served by no "
				      "master (the first: slot %u): their blocks' transfers fail until "
				      "the cluster covers them (redis-cli --cluster fix <node>)",
			     uncovered, CLUSTER_SLOTS, first);
	kvs_log_info(&r->log, "backend: redis cluster: slot map read from %s: %u nodes known",
		     r->eps[r->good_node].name, endpoint_count(r));
	return 0;
}

/* ---------------------------------------------------------- routing */

/* Put ASKING in front of cmd's bytes (on) or take it away (off). */
static void cmd_asking(struct cmd *cmd, bool on)
{
	if (cmd->asking == on)
		return;
	if (on) {
		memmove(cmd->hdr + ASKING_LEN, cmd->hdr, cmd->hdr_len);
		memcpy(cmd->hdr, ASKING_TEXT, ASKING_LEN);
		cmd->hdr_len += ASKING_LEN;
		cmd->key_off += ASKING_LEN;
	} else {
		cmd->hdr_len -= ASKING_LEN;
		cmd->key_off -= ASKING_LEN;
		memmove(cmd->hdr, cmd->hdr + ASKING_LEN, cmd->hdr_len);
	}
	cmd->asking = on;
}

struct endpoint *cluster_route(struct redis *r, struct cmd *cmd, int *err)
{
	uint32_t redirect = cmd->redirect;
	int node;

	cmd_asking(cmd, false);
	cmd->ask_pending = false; /* a socket lost before ASKING's reply: sent anew */
	if (cmd->wait_state != WAIT_NONE)
		cmd->wait_state = WAIT_SET; /* its WAIT is sent again behind it */
	cmd->redirect = REDIR_NONE;
	cmd->result = -EPROTO; /* until a reply says otherwise */
	if (redirect == REDIR_MOVED || redirect == REDIR_ASK) {
		if (++cmd->redirects > REDIRECTS_MAX) {
			cluster_log(r, "redis cluster: slot %u: more than %d redirections (the last "
				       "to %s): the cluster's slot map does not settle; the transfer "
				       "failed", cmd->slot, REDIRECTS_MAX, cmd->target);
			*err = -EIO;
			return NULL;
		}
		pthread_mutex_lock(&r->map_mu);
		node = node_find_add(r, cmd->target, strlen(cmd->target));
		if (node >= 0 && redirect == REDIR_MOVED)
			r->slot_node[cmd->slot] = (uint8_t)node;
		pthread_mutex_unlock(&r->map_mu);
		if (node < 0) {
			*err = node;
			return NULL;
		}
		if (redirect == REDIR_ASK) {
			cmd_asking(cmd, true);
			cmd->ask_pending = true;
		}
		return &r->eps[node];
	}
	if (redirect == REDIR_RETRY)
		map_refresh(r);
	pthread_mutex_lock(&r->map_mu);
	node = r->slot_node[cmd->slot];
	pthread_mutex_unlock(&r->map_mu);
	if (node == NO_NODE) {
		map_refresh(r);
		pthread_mutex_lock(&r->map_mu);
		node = r->slot_node[cmd->slot];
		pthread_mutex_unlock(&r->map_mu);
	}
	if (node == NO_NODE) {
		cluster_log(r, "redis cluster: slot %u is served by no master: the transfers of its "
			       "blocks fail; cover it (redis-cli --cluster fix <node>, or CLUSTER "
			       "ADDSLOTS %u on a master)", cmd->slot, cmd->slot);
		*err = -EHOSTUNREACH;
		return NULL;
	}
	return &r->eps[node];
}

/* --------------------------------------------------- parked commands */

/* A data command at its deadline, still redirected or retried: its result is
 * the error it last got (else -ETIMEDOUT), logged naming its key and slot. */
static void cmd_expire(struct redis *r, struct cmd *cmd)
{
	cmd->result = cmd->redirect == REDIR_RETRY && cmd->last_err ? cmd->last_err : -ETIMEDOUT;
	cmd->redirect = REDIR_NONE;
	cluster_log(r, "redis cluster: %s %.*s (slot %u): %s until its deadline "
		       "(redis_command_timeout_ms after submit): the slot's master is down or "
		       "the cluster is failing over; the transfer failed",
		    cmd->kind == CMD_SET ? "SET" : "GET", (int)cmd->key_len,
		    cmd->hdr + cmd->key_off, cmd->slot, kvs_strerror((int)cmd->result));
}

bool cluster_park(struct redis *r, struct cmd *cmd)
{
	uint64_t now = kvs_now_ns(), backoff = 0;

	if (r->closing || cmd->redirect == REDIR_NONE)
		return false;
	if (now >= cmd->deadline_ns) {
		cmd_expire(r, cmd);
		return false;
	}
	if (cmd->redirect == REDIR_RETRY) {
		backoff = cmd->tries < 4 ? RETRY_MIN_NS << cmd->tries : RETRY_MAX_NS;
		cmd->tries++;
	}
	cmd->retry_ns = now + backoff < cmd->deadline_ns ? now + backoff : cmd->deadline_ns;
	cmd->next = r->parked;
	r->parked = cmd;
	return true;
}

uint64_t cluster_parked_due(const struct redis *r)
{
	uint64_t due = 0;

	for (const struct cmd *cmd = r->parked; cmd; cmd = cmd->next)
		if (due == 0 || cmd->retry_ns < due)
			due = cmd->retry_ns;
	return due;
}

void cluster_resend(struct redis *r)
{
	struct cmd *list = r->parked, *next;
	uint64_t now = kvs_now_ns();

	r->parked = NULL;
	for (struct cmd *cmd = list; cmd; cmd = next) {
		struct endpoint *ep;
		struct conn *c = NULL;
		int err = 0;

		next = cmd->next;
		if (cmd->retry_ns > now) {
			cmd->next = r->parked;
			r->parked = cmd;
			continue;
		}
		if (now >= cmd->deadline_ns) {
			cmd_expire(r, cmd);
			cmd_finish(r, cmd);
			continue;
		}
		ep = cluster_route(r, cmd, &err);
		if (ep)
			c = conn_pick(r, ep, &err);
		if (!c && ep) { /* the node is down (backing off): later, after a refresh */
			cmd->redirect = REDIR_RETRY;
			cmd->last_err = err;
			if (!cluster_park(r, cmd))
				cmd_finish(r, cmd); /* at its deadline: expired */
			continue;
		}
		if (!c) {
			cmd->result = err;
			cmd_finish(r, cmd);
			continue;
		}
		conn_send(c, cmd);
	}
}

bool cluster_lookup_again(struct redis *r, struct cmd *cmd, uint64_t deadline, uint64_t *wait_ns)
{
	uint64_t now = kvs_now_ns();

	if (!r->cluster || cmd->redirect == REDIR_NONE)
		return false;
	if (now >= deadline) {
		if (cmd->redirect == REDIR_RETRY && cmd->last_err)
			cmd->result = cmd->last_err;
		cmd->redirect = REDIR_NONE;
		return false;
	}
	if (cmd->redirect == REDIR_RETRY) {
		uint64_t backoff = cmd->tries < 4 ? RETRY_MIN_NS << cmd->tries : RETRY_MAX_NS;

		cmd->tries++;
		if (*wait_ns < backoff)
			*wait_ns = backoff;
	}
	cmd->done = false;
	return true;
}

void cluster_close(struct redis *r, int err)
{
	while (r->parked) {
		struct cmd *cmd = r->parked;

		r->parked = cmd->next;
		cmd->redirect = REDIR_NONE;
		cmd->result = err;
		cmd_finish(r, cmd);
	}
	free(r->slot_node);
}
