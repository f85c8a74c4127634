/*
 * tests/redis_util.h — a redis-server of the test's own for the redis tests
 * (io_redis: the backend; store_redis: the store over it): started on a unix
 * socket in a temp dir, restarted, stopped, killed; the test's own view of it
 * (commands on a fresh hiredis connection, its command counters, raw values);
 * a log that keeps every line of a case.  Skips (77) where redis-server is not
 * installed, saying so.
 */
#ifndef KVS_TESTS_REDIS_UTIL_H
#define KVS_TESTS_REDIS_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <hiredis/hiredis.h>

#include "store_util.h"

#define RS_SHARD 4096u
#define RS_SPB 4u

/* ---- a redis-server of our own ---- */

struct rs {
	pid_t pid;
	char dir[96];
	char sock[160];
	char password[512];
};

static inline bool rs_installed(void)
{
	const char *path = getenv("PATH");
	char buf[512];

	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		size_t n = strcspn(p, ":");

		snprintf(buf, sizeof(buf), "%.*s/redis-server", (int)n, p);
		if (access(buf, X_OK) == 0)
			return true;
		p += n + (p[n] == ':');
	}
	return false;
}

static inline bool rs_connectable(const char *sock)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (strlen(sock) >= sizeof(un.sun_path))
		return false;
	memcpy(un.sun_path, sock, strlen(sock) + 1);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&un, sizeof(un)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Start (or restart: same dir and socket) the server; wait until it accepts. */
static inline kvs_test_rc rs_run(struct rs *s)
{
	char logf[160];
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);

	snprintf(logf, sizeof(logf), "%s/redis.log", s->dir);
	unlink(s->sock);
	fflush(NULL);
	s->pid = fork();
	if (s->pid == 0) {
		const char *argv[32] = { "redis-server", "--port", "0", "--unixsocket", s->sock,
					 "--unixsocketperm", "700", "--dir", s->dir, "--save", "",
					 "--appendonly", "no", "--daemonize", "no", "--logfile", logf };
		int n = 17;

		if (s->password[0]) {
			argv[n++] = "--requirepass";
			argv[n++] = s->password;
		}
		argv[n] = NULL;
		execvp("redis-server", (char **)argv);
		_exit(127);
	}
	KVS_CHECK(s->pid > 0);
	while (!rs_connectable(s->sock)) {
		int status;

		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			s->pid = 0;
			KVS_FAILF("redis-server exited at start (status 0x%x); see %s", status, logf);
		}
		if (kvs_now_ns() > deadline)
			KVS_FAILF("redis-server did not accept on %s within 10 s", s->sock);
		usleep(5000); /* an external server: wait for its socket, bounded */
	}
	return KVS_TEST_PASS;
}

static inline kvs_test_rc rs_start(struct rs *s, const char *password)
{
	memset(s, 0, sizeof(*s));
	if (!rs_installed())
		KVS_SKIP("redis-server is not installed (Debian: apt-get install redis-server)");
	snprintf(s->dir, sizeof(s->dir), "/tmp/kvs-redis.%s.XXXXXX", KVS_TEST_VARIANT);
	if (!mkdtemp(s->dir))
		KVS_FAILF("mkdtemp: %s", strerror(errno));
	snprintf(s->sock, sizeof(s->sock), "%s/redis.sock", s->dir);
	if (password)
		snprintf(s->password, sizeof(s->password), "%s", password);
	return rs_run(s);
}

/* kill(sig) and reap (SIGKILL: the server dies mid-whatever). */
static inline void rs_kill(struct rs *s, int sig)
{
	if (s->pid <= 0)
		return;
	kill(s->pid, sig);
	kvs_test_reap(s->pid, 10000);
	s->pid = 0;
}

static inline void rs_stop(struct rs *s)
{
	DIR *d;
	struct dirent *e;
	char path[400];

	rs_kill(s, SIGTERM);
	d = s->dir[0] ? opendir(s->dir) : NULL;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", s->dir, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	if (s->dir[0])
		rmdir(s->dir);
	s->dir[0] = '\0';
}

/* A case that needs a server of its own (password NULL: none): start it, run
 * body, stop it whatever body returned. */
static inline kvs_test_rc rs_case(const char *password, kvs_test_rc (*body)(struct rs *s))
{
	struct rs s;
	kvs_test_rc rc;

	KVS_TRY(rs_start(&s, password));
	rc = body(&s);
	rs_stop(&s);
	return rc;
}

/* A command on a fresh hiredis connection (the test's own view of the server). */
static inline redisReply *rs_cmd(const struct rs *s, const char *fmt, ...)
{
	struct timeval tv = { 5, 0 };
	redisContext *c = redisConnectUnixWithTimeout(s->sock, tv);
	redisReply *rep = NULL;
	va_list ap;

	if (!c || c->err) {
		fprintf(stderr, "  rs_cmd: connect %s: %s\n", s->sock, c ? c->errstr : "no memory");
		redisFree(c);
		return NULL;
	}
	if (s->password[0]) {
		rep = redisCommand(c, "AUTH %s", s->password);
		freeReplyObject(rep);
	}
	va_start(ap, fmt);
	rep = redisvCommand(c, fmt, ap);
	va_end(ap);
	redisFree(c);
	return rep;
}

/* calls=N of cmdstat_<name> in INFO commandstats (0 when never called), or -1. */
static inline long long rs_calls(const struct rs *s, const char *name)
{
	redisReply *rep = rs_cmd(s, "INFO commandstats");
	char key[64];
	const char *p;
	long long n = -1;

	if (!rep || rep->type != REDIS_REPLY_STRING) {
		freeReplyObject(rep);
		return -1;
	}
	snprintf(key, sizeof(key), "cmdstat_%s:calls=", name);
	p = strstr(rep->str, key);
	n = p ? strtoll(p + strlen(key), NULL, 10) : 0;
	freeReplyObject(rep);
	return n;
}

/* A command of space-separated words (none contains '%'). */
static inline kvs_test_rc rs_ok(const struct rs *s, const char *cmd)
{
	char fmt[128];
	redisReply *rep;

	snprintf(fmt, sizeof(fmt), "%s", cmd);
	KVS_CHECK(strchr(fmt, '%') == NULL);
	rep = rs_cmd(s, fmt);

	if (!rep || rep->type == REDIS_REPLY_ERROR)
		KVS_FAILF("redis '%s': %s", cmd, rep ? rep->str : "no reply");
	freeReplyObject(rep);
	return KVS_TEST_PASS;
}

/* A store task of every shard of blocks tag/0..nb-1 (store_redis*). */
static inline kvs_test_rc rs_task(struct st_task *t, uint32_t tag, uint32_t nb)
{
	KVS_TRY(st_task_whole(t, nb * RS_SPB, 1, RS_SHARD));
	for (uint32_t i = 0; i < nb * RS_SPB; i++) {
		struct kvs_block_id b = st_block(tag, i / RS_SPB);

		st_task_set(t, i, &b, i % RS_SPB);
	}
	return KVS_TEST_PASS;
}

/* The key of (block, shard) under the default prefix. */
static inline void rs_key(const struct kvs_block_id *b, uint32_t shard, char *out, size_t len)
{
	char hex[33];

	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", b->bytes[i]);
	snprintf(out, len, "kvshare:%s:%u", hex, shard);
}

static char rb_logs[8192]; /* every line of the current case */
static pthread_mutex_t rb_logs_mu = PTHREAD_MUTEX_INITIALIZER; /* lines come from any thread */

static inline void rb_log(void *arg, int level, const char *msg)
{
	size_t n;

	(void)arg;
	pthread_mutex_lock(&rb_logs_mu);
	n = strlen(rb_logs);
	snprintf(rb_logs + n, sizeof(rb_logs) - n, "%s\n", msg);
	pthread_mutex_unlock(&rb_logs_mu);
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "  [log %d] %s\n", level, msg);
}


/* The raw value under key (NULL: none), into *out (malloc'd), its length. */
static inline kvs_test_rc rs_get_raw(const struct rs *s, const char *key, unsigned char **out, size_t *len)
{
	redisReply *rep = rs_cmd(s, "GET %s", key);

	*out = NULL;
	*len = 0;
	if (!rep || rep->type != REDIS_REPLY_STRING) {
		freeReplyObject(rep);
		KVS_FAILF("GET %s: no string value", key);
	}
	*out = malloc(rep->len ? rep->len : 1);
	KVS_CHECK(*out != NULL);
	memcpy(*out, rep->str, rep->len);
	*len = rep->len;
	freeReplyObject(rep);
	return KVS_TEST_PASS;
}

static inline kvs_test_rc rs_set_raw(const struct rs *s, const char *key, const void *val, size_t len)
{
	redisReply *rep = rs_cmd(s, "SET %s %b", key, val, len);

	KVS_CHECK(rep && rep->type == REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	return KVS_TEST_PASS;
}

/* ---- backend helpers (io_redis, io_redis_cluster) ---- */

/* A redis backend of RS_SHARD x RS_SPB at endpoints, 64 in flight, logging
 * into rb_logs (emptied). */
static inline void rb_cfg_at(struct kvs_backend_config *cfg, const char *endpoints)
{
	kvs_backend_config_init(cfg);
	cfg->kind = KVS_BACKEND_REDIS;
	cfg->shard_bytes = RS_SHARD;
	cfg->shards_per_block = RS_SPB;
	cfg->queue_depth = 64;
	cfg->log = rb_log;
	snprintf(cfg->redis.endpoints, sizeof(cfg->redis.endpoints), "%s", endpoints);
	rb_logs[0] = '\0';
}

static inline kvs_test_rc rb_open(const struct kvs_backend_config *cfg, struct kvs_backend **b)
{
	int rc = kvs_backend_open(cfg, b);

	if (rc)
		KVS_FAILF("kvs_backend_open: %d (%s); log:\n%s", rc, kvs_strerror(rc), rb_logs);
	return KVS_TEST_PASS;
}

/* Submit io (read or write), retrying -EAGAIN by reaping into res[token]. */
static inline int rb_submit(struct kvs_backend *b, const struct kvs_backend_io *io, bool write,
		     int64_t *res, uint32_t *pending)
{
	for (;;) {
		int rc = write ? kvs_backend_submit_write(b, io) : kvs_backend_submit_read(b, io);
		struct kvs_backend_completion c[64];

		if (rc != -EAGAIN) {
			if (rc == 0)
				(*pending)++;
			return rc;
		}
		int n = kvs_backend_poll(b, c, 64, ST_SEC);

		for (int i = 0; i < n; i++) {
			res[c[i].token] = c[i].result;
			(*pending)--;
		}
	}
}

/* Reap until nothing is pending; fail after ms. */
static inline kvs_test_rc rb_reap(struct kvs_backend *b, int64_t *res, uint32_t *pending, uint64_t ms)
{
	uint64_t deadline = kvs_deadline_after(ms * ST_MS);

	while (*pending) {
		struct kvs_backend_completion c[64];
		int n = kvs_backend_poll(b, c, 64, 100 * ST_MS);

		KVS_CHECK_OK(n);
		for (int i = 0; i < n; i++) {
			res[c[i].token] = c[i].result;
			(*pending)--;
		}
		if (kvs_now_ns() > deadline)
			KVS_FAILF("%u transfers still pending after %llu ms", *pending,
				  (unsigned long long)ms);
	}
	return KVS_TEST_PASS;
}

#endif
