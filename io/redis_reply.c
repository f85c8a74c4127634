/*
 * io/redis_reply.c — what a reply means to its command: the reply-object
 * functions of the redis backend's hiredis reader (io/redis_conn.c receives the
 * bytes into it; io/redis.c says what the backend does).
 *
 * Replies are parsed by a hiredis reader (redisReader) with our own reply-object
 * functions: replies arrive in command order, so the reply being parsed belongs
 * to the socket's oldest command, and a GET's bulk string is checked (its value
 * header, in place in the reader's buffer) and its shard bytes copied by
 * createString straight from the reader's buffer into the destination (the
 * slot) — no reply object, no allocation.
 *
 * A GET checks the header when its reply is whole: a value stored with another
 * geometry or layout_tag fails the shard with -KVS_ECONFIG (WARN naming the key
 * and both geometries); one without a valid header (written before headers,
 * planted by hand, torn), of another key (block or shard), or of another length
 * with -EIO (logged with the key): never a partial slot.
 *
 * An error reply fails its own shard only: OOM -ENOSPC, READONLY -EROFS,
 * NOAUTH/WRONGPASS/NOPERM -EACCES, LOADING/BUSY/MASTERDOWN/TRYAGAIN -EBUSY,
 * CLUSTERDOWN -EHOSTDOWN, anything else -EIO; a nil GET is -ENOENT.  In cluster
 * mode MOVED, ASK, CLUSTERDOWN and TRYAGAIN are not ends but redirections
 * (cmd->redirect, io/redis_cluster.c follows them); outside it a MOVED or ASK
 * says the server is a cluster node, and the log line names redis_cluster=1.
 */
#include <errno.h>
#include <string.h>

#include "io/redis_impl.h"

/* Indexed by enum cmd_kind (io/redis_impl.h). */
static const char *const cmd_names[] = { "GET", "SET", "AUTH", "SELECT", "EXISTS", "PING",
					 "INFO" };

/* ------------------------------------------------------- reply functions */

/* The errno of a server error reply, by its first word. */
static int reply_errno(const char *s, size_t n)
{
	static const struct {
		const char *word;
		int err;
	} map[] = {
		{ "OOM", -ENOSPC },	   { "READONLY", -EROFS },  { "NOAUTH", -EACCES },
		{ "WRONGPASS", -EACCES }, { "NOPERM", -EACCES },   { "LOADING", -EBUSY },
		{ "BUSY", -EBUSY },	   { "MASTERDOWN", -EBUSY }, { "TRYAGAIN", -EBUSY },
		{ "CLUSTERDOWN", -EHOSTDOWN },
	};
	size_t w = 0;

	while (w < n && s[w] != ' ')
		w++;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strlen(map[i].word) == w && memcmp(map[i].word, s, w) == 0)
			return map[i].err;
	return -EIO;
}

/*
 * A GET's value, n bytes at s (in the reader's buffer): its header checked
 * against the command's block and shard and this handle's geometry, then bytes
 * [offset, offset + len) of the shard after it copied to the destination.
 */
static void get_value(struct conn *c, struct cmd *cmd, const char *s, size_t n)
{
	const struct redis *r = c->r;
	struct kvs_io_value_hdr h;
	char why[160];
	int rc = kvs_io_value_hdr_decode(s, n, &h, why, sizeof(why));

	if (rc == 0 && (memcmp(&h.block, &cmd->block, sizeof(h.block)) || h.shard != cmd->shard)) {
		char hex[33];

		kvs_io_block_hex(&h.block, hex);
		snprintf(why, sizeof(why), "holds shard %u of block %s (copied from another key)",
			 h.shard, hex);
		rc = -EIO;
	}
	if (rc == 0 && !kvs_io_geom_same(&h.geom, &r->geom)) {
		char stored[KVS_IO_GEOM_DESCRIBE_MAX], ours[KVS_IO_GEOM_DESCRIBE_MAX];

		kvs_io_geom_describe(&h.geom, false, stored, sizeof(stored));
		kvs_io_geom_describe(&r->geom, true, ours, sizeof(ours));
		conn_log(c, KVS_LOG_WARN, "redis %s: GET %.*s: stored with %s; this store has %s",
			 c->ep->name, (int)cmd->key_len, cmd->hdr + cmd->key_off, stored, ours);
		cmd->result = -KVS_ECONFIG;
		return;
	}
	if (rc == 0 && n != KVS_IO_VALUE_HDR + r->shard_bytes) {
		snprintf(why, sizeof(why), "a shard is %llu bytes after a %d-byte header (cut short, "
			 "or extended)", (unsigned long long)r->shard_bytes, KVS_IO_VALUE_HDR);
		rc = -EIO;
	}
	if (rc < 0) {
		conn_log(c, KVS_LOG_ERROR, "redis %s: GET %.*s: value of %zu bytes: %s: read failed",
			 c->ep->name, (int)cmd->key_len, cmd->hdr + cmd->key_off, n, why);
		cmd->result = -EIO;
		return;
	}
	memcpy(cmd->dst, s + KVS_IO_VALUE_HDR + cmd->offset, cmd->len);
	cmd->result = (int64_t)cmd->len;
}

/* The command whose reply is being parsed: the socket's oldest; NULL while
 * the reply is its ASKING's (io/redis_conn.c skips it). */
static struct cmd *parsing(const redisReadTask *t)
{
	const struct conn *c = t->privdata;

	return c->head && !c->head->ask_pending ? c->head : NULL;
}

/* What an error reply (n bytes at s) asks of a cluster client: MOVED, ASK,
 * RETRY (CLUSTERDOWN, TRYAGAIN), or NONE (an error of its own). */
static enum redirect redirect_kind(const char *s, size_t n)
{
	if (n > 6 && memcmp(s, "MOVED ", 6) == 0)
		return REDIR_MOVED;
	if (n > 4 && memcmp(s, "ASK ", 4) == 0)
		return REDIR_ASK;
	if ((n >= 11 && memcmp(s, "CLUSTERDOWN", 11) == 0) ||
	    (n >= 8 && memcmp(s, "TRYAGAIN", 8) == 0))
		return REDIR_RETRY;
	return REDIR_NONE;
}

/*
 * Cluster mode: an error reply (n bytes at s) that redirects cmd -- "MOVED
 * <slot> <host:port>", "ASK <slot> <host:port>", "CLUSTERDOWN ...",
 * "TRYAGAIN ..." -- noted in cmd (its redirect, and target or last_err);
 * false for any other reply.
 */
static bool redirected(struct cmd *cmd, const char *s, size_t n)
{
	enum redirect kind = redirect_kind(s, n);

	if (kind == REDIR_MOVED || kind == REDIR_ASK) {
		size_t word = kind == REDIR_MOVED ? 6 : 4;
		const char *sp = memchr(s + word, ' ', n - word); /* after the slot */
		size_t len = sp ? n - (size_t)(sp + 1 - s) : 0;

		if (len == 0 || len >= TARGET_MAX)
			return false;
		memcpy(cmd->target, sp + 1, len);
		cmd->target[len] = '\0';
	} else if (kind == REDIR_RETRY) {
		cmd->last_err = reply_errno(s, n);
	} else {
		return false;
	}
	cmd->redirect = (uint8_t)kind;
	return true;
}

/* WAIT's reply to a SET (redis_wait_replicas): acknowledged by `acked`
 * replicas, or (err_text) refused.  Fewer than asked fail a SET that the
 * master took: -EIO, logged; a SET that failed or is redirected keeps that. */
static void wait_reply(struct conn *c, struct cmd *cmd, long long acked, const char *err_text,
		       size_t n)
{
	const struct redis *r = c->r;

	if (cmd->result < 0 || cmd->redirect != REDIR_NONE)
		return;
	if (err_text) {
		conn_log(c, KVS_LOG_ERROR, "redis %s: SET %.*s: WAIT failed: %.*s: the write is not "
			 "known durable (redis_wait_replicas=%u)", c->ep->name, (int)cmd->key_len,
			 cmd->hdr + cmd->key_off, (int)(n < 200 ? n : 200), err_text,
			 r->wait_replicas);
		cmd->result = -EIO;
	} else if (acked < (long long)r->wait_replicas) {
		conn_log(c, KVS_LOG_ERROR, "redis %s: SET %.*s: %lld of %u replicas acknowledged it "
			 "within %llu ms (redis_wait_replicas): the write is not known durable; it "
			 "failed", c->ep->name, (int)cmd->key_len, cmd->hdr + cmd->key_off, acked,
			 r->wait_replicas, (unsigned long long)r->wait_ms);
		cmd->result = -EIO;
	}
}

static void *on_string(const redisReadTask *t, char *s, size_t n)
{
	struct conn *c = t->privdata;
	struct cmd *cmd = parsing(t);
	const char *what;

	if (!cmd || t->parent)
		return c; /* unsolicited or nested: cmd keeps -EPROTO (or there is none) */
	if (cmd->wait_state == WAIT_WAIT) {
		wait_reply(c, cmd, 0, t->type == REDIS_REPLY_ERROR ? s : "not an integer", n);
		return c;
	}
	what = cmd_names[cmd->kind];
	if (t->type == REDIS_REPLY_ERROR) {
		bool keyed = cmd->kind == CMD_GET || cmd->kind == CMD_SET;

		cmd->result = cmd->kind == CMD_AUTH ? -EACCES : reply_errno(s, n);
		if (c->r->cluster && (keyed || cmd->kind == CMD_EXISTS) && redirected(cmd, s, n))
			return c;
		if (keyed && (redirect_kind(s, n) == REDIR_MOVED || redirect_kind(s, n) == REDIR_ASK))
			conn_log(c, KVS_LOG_ERROR, "redis %s: %s %.*s: server replied: %.*s: it is "
				 "a Redis Cluster node; set redis_cluster=1", c->ep->name, what,
				 (int)cmd->key_len, cmd->hdr + cmd->key_off, (int)(n < 200 ? n : 200), s);
		else if (keyed)
			conn_log(c, KVS_LOG_ERROR, "redis %s: %s %.*s: server replied: %.*s",
				 c->ep->name, what, (int)cmd->key_len, cmd->hdr + cmd->key_off,
				 (int)(n < 200 ? n : 200), s);
		else if (cmd->kind != CMD_INFO) /* INFO may be refused (an ACL): best effort */
			conn_log(c, KVS_LOG_ERROR, "redis %s: %s failed: server replied: %.*s",
				 c->ep->name, what, (int)(n < 200 ? n : 200), s);
	} else if (t->type == REDIS_REPLY_STATUS) {
		cmd->result = cmd->kind == CMD_GET || cmd->kind == CMD_EXISTS ? -EPROTO
										 : (int64_t)cmd->val_len;
	} else if (cmd->kind == CMD_GET && t->type == REDIS_REPLY_STRING) {
		get_value(c, cmd, s, n);
	} else if (cmd->kind == CMD_INFO && t->type == REDIS_REPLY_STRING) {
		cmd->result = memmem(s, n, "cluster_enabled:1", 17) != NULL;
	}
	return c;
}

static void *on_integer(const redisReadTask *t, long long v)
{
	struct cmd *cmd = parsing(t);

	if (cmd && !t->parent && cmd->kind == CMD_EXISTS)
		cmd->result = v;
	else if (cmd && !t->parent && cmd->wait_state == WAIT_WAIT)
		wait_reply(t->privdata, cmd, v, NULL, 0);
	return t->privdata;
}

static void *on_nil(const redisReadTask *t)
{
	struct cmd *cmd = parsing(t);

	if (cmd && !t->parent && cmd->kind == CMD_GET)
		cmd->result = -ENOENT; /* absent (or expired since the lookup) */
	return t->privdata;
}

static void *on_array(const redisReadTask *t, int n)
{
	(void)n;
	return t->privdata; /* no command of ours gets one: cmd keeps -EPROTO */
}

static void on_free(void *obj)
{
	(void)obj; /* replies are the socket pointer itself: nothing allocated */
}

redisReplyObjectFunctions redis_reply_fns = {
	.createString = on_string,
	.createArray = on_array,
	.createInteger = on_integer,
	.createNil = on_nil,
	.freeObject = on_free,
};
