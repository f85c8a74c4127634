/*
 * io/redis_impl.h — the redis backend's internal types and the calls between its
 * parts (private to io/redis*.c; nothing else includes it):
 *   io/redis.c        the backend: its ops (submit, poll, wait_fd, lookup,
 *                     open/close), the keys and commands it formats, endpoints,
 *                     the password file
 *   io/redis_conn.c   one socket's life (connect and handshake, writing,
 *                     reading, failing and reconnecting) and the waits over
 *                     several sockets
 *   io/redis_reply.c  what a reply means to its command: the reply-object
 *                     functions of every socket's hiredis reader
 *   io/redis_cluster.c  Redis Cluster: slots, the slot map and its nodes,
 *                     following MOVED/ASK, retrying within a command's deadline
 *
 * Everything here is one handle's process-local state, on the heap, pointers
 * included: nothing is in shared memory (only core/layout.h defines that).  A
 * handle's data sockets, command pool and completions belong to its issuer
 * thread; its lookup sockets are used under redis.lookup_mu.
 */
#ifndef KVS_IO_REDIS_IMPL_H
#define KVS_IO_REDIS_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "io/fifo.h"
#include "io/internal.h"

/* <prefix><32 hex>:<shard up to 65535>, or (cluster) <prefix>{<32 hex>}:<shard> */
#define KEY_MAX (KVS_REDIS_PREFIX_LEN + 2 + 32 + 1 + 5)
/* The ASKING that precedes a command sent after an -ASK redirection. */
#define ASKING_TEXT "*1\r\n$6\r\nASKING\r\n"
#define ASKING_LEN (sizeof(ASKING_TEXT) - 1)
/* [ASKING] the command's framing and key, then (SET) the value header. */
#define HDR_MAX (ASKING_LEN + KEY_MAX + 64 + KVS_IO_VALUE_HDR)
#define TAIL_MAX 128 /* [PX <ttl>] [WAIT <replicas> <ms>] */
#define LOG_INTERVAL_NS KVS_NSEC_PER_SEC
/* Data sockets of a handle, at most (poll's wait watches them all at once). */
#define SOCKETS_MAX (KVS_REDIS_MAX_ENDPOINTS * KVS_REDIS_MAX_CONNECTIONS)
/* Cluster mode: nodes of a handle (seeds and masters seen), at most; and no more
 * than SOCKETS_MAX / connections, so their data sockets fit one wait. */
#define CLUSTER_NODES_MAX 64

enum cmd_kind {
	CMD_GET,    /* a read: the value goes to dst */
	CMD_SET,    /* a write */
	CMD_AUTH,   /* handshake */
	CMD_SELECT, /* handshake */
	CMD_EXISTS, /* lookup: the integer is the result */
	CMD_PING,   /* open: is the endpoint usable with our credentials? */
	CMD_INFO,   /* open (not cluster mode): INFO cluster; result 1: a cluster node */
};

/* What a cluster's reply asked of a command (enum redirect, cmd.redirect). */
enum redirect {
	REDIR_NONE,  /* a final reply (or not cluster mode) */
	REDIR_MOVED, /* -MOVED <slot> <node>: the slot lives there now */
	REDIR_ASK,   /* -ASK <slot> <node>: this key is there for now (a migration) */
	REDIR_RETRY, /* -CLUSTERDOWN, -TRYAGAIN, or the socket lost: try again later */
};
#define TARGET_MAX 64 /* "host:port" of a redirection */

/* A SET followed by WAIT (redis_wait_replicas): which of its two replies is next. */
enum wait_state {
	WAIT_NONE,  /* no WAIT sent */
	WAIT_SET,   /* the SET's own reply, then WAIT's */
	WAIT_WAIT,  /* WAIT's: the replicas that acknowledged the write */
};

/* One command on a socket: bytes hdr[hdr_len] + val[val_len] + tail[tail_len]. */
struct cmd {
	struct cmd *next;
	uint32_t kind;     /* enum cmd_kind */
	uint32_t hdr_len, tail_len;
	uint32_t key_off, key_len; /* the key within hdr (GET, SET): for logs */
	struct kvs_block_id block; /* GET, SET: whose shard */
	uint32_t shard;
	const char *val;   /* SET: the value; AUTH, SELECT, EXISTS: the whole command */
	uint64_t val_len;
	char *dst;         /* GET: where bytes [offset, offset + len) of the value go */
	uint64_t offset, len;
	uint64_t token;
	uint64_t deadline_ns;
	int64_t result;    /* set by the reply functions: bytes, EXISTS count, -errno */
	bool done;         /* EXISTS: its reply arrived (or its socket failed) */
	uint8_t wait_state; /* SET with redis_wait_replicas (enum wait_state) */
	/* Cluster mode (io/redis_cluster.c). */
	uint8_t redirect;  /* enum redirect: what its last reply asked */
	bool asking;       /* hdr starts with ASKING (sent after -ASK) */
	bool ask_pending;  /* ASKING's own reply (+OK) has not arrived yet */
	uint8_t redirects; /* MOVED/ASK followed so far (bounded) */
	uint16_t slot;     /* its key's hash slot */
	uint32_t tries;    /* retries after REDIR_RETRY: the backoff's exponent */
	int last_err;      /* REDIR_RETRY: the error it got; its result at the deadline */
	uint64_t retry_ns; /* parked: sent again at this time */
	char target[TARGET_MAX]; /* MOVED/ASK: the node named */
	char hdr[HDR_MAX];
	char tail[TAIL_MAX];
};

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct endpoint;

/* One socket to an endpoint.  Data sockets belong to the issuer thread; a
 * lookup socket is used under redis.lookup_mu. */
struct conn {
	struct redis *r;
	const struct endpoint *ep;
	int fd;                 /* -1 while DOWN */
	uint32_t state;         /* enum conn_state */
	redisReader *rd;
	struct cmd *head, *tail; /* queued and sent, oldest first: replies come in this order */
	struct cmd *unsent;     /* first command not completely written, NULL: none */
	uint64_t unsent_off;    /* bytes of *unsent written */
	uint32_t inflight;      /* data commands queued */
	uint32_t failures;      /* consecutive failures: the backoff's exponent */
	uint64_t connect_deadline_ns;
	uint64_t retry_ns;      /* DOWN: no connect before this */
	int last_err;           /* DOWN after a failure: what a submit gets until retry_ns */
	bool was_down;          /* a failure was logged: log the recovery */
	struct kvs_log_limit log_limit; /* of its error lines */
	uint32_t watched;       /* data socket: its events in redis.epfd, 0: not in it */
	struct cmd hs[2];       /* AUTH, SELECT */
};

/* A server: an endpoint as configured, or (cluster mode) a seed or a node that
 * the slot map or a redirection named. */
struct endpoint {
	char name[KVS_REDIS_ENDPOINTS_LEN]; /* as configured or named (logs) */
	struct sockaddr_storage addr;
	socklen_t addrlen;
	struct conn *data;      /* connections sockets */
	struct conn lookup;
};

struct redis {
	struct kvs_log log;
	uint64_t shard_bytes;
	uint32_t spb;
	struct kvs_io_geom geom; /* stored in every value's header, checked at every GET */
	uint32_t qd;            /* data commands in flight per handle */
	uint32_t nconn;         /* data sockets per endpoint */
	uint32_t nep;           /* endpoints; cluster mode: nodes, only grows (atomic: a
				   lookup thread may add one while the issuer reads it) */
	uint32_t max_nodes;     /* entries of eps: KVS_REDIS_MAX_ENDPOINTS, or (cluster)
				   CLUSTER_NODES_MAX within SOCKETS_MAX / nconn */
	uint64_t connect_timeout_ns, command_timeout_ns, ttl_ms;
	uint32_t wait_replicas; /* WAIT after every SET for this many replicas, 0: none */
	uint64_t wait_ms;       /* WAIT's timeout: half the command timeout */
	bool start_degraded; /* open even when an endpoint does not answer */
	char prefix[KVS_REDIS_PREFIX_LEN];
	char *auth_cmd;         /* formatted AUTH (holds the password), or NULL */
	size_t auth_len;
	char *select_cmd;       /* formatted SELECT, or NULL (db 0) */
	size_t select_len;
	struct endpoint *eps;
	struct cmd *cmds;       /* qd data commands */
	struct cmd *free_cmds;
	uint32_t inflight;
	struct kvs_io_fifo done; /* completions for poll */
	int epfd;               /* wait descriptor: busy data sockets + timer, -1 until asked */
	struct kvs_io_timer timer; /* nearest deadline, or at once while done holds any */
	pthread_mutex_t lookup_mu;
	/* Cluster mode (io/redis_cluster.c). */
	bool cluster;
	bool closing;           /* close: lost commands end, no retry */
	pthread_mutex_t map_mu; /* slot_node, refresh_ns, good_node, adding nodes */
	uint8_t *slot_node;     /* node index of each of the 16384 slots, NO_NODE: none;
				   then as many bytes of scratch (a map being read) */
	uint64_t refresh_ns;    /* no map refresh before this */
	uint32_t good_node;     /* the node whose map was read last: asked first */
	struct cmd *parked;     /* issuer: data commands waiting to be sent again */
	struct kvs_log_limit cluster_log_limit; /* the routing's error lines, under map_mu */
};

/* ------------------------------------------------------------------ logs */

/* An error line of socket c, at most one per LOG_INTERVAL_NS (later ones are
 * counted and the count is appended to the next line). */
#define conn_log(c, level, ...) \
	kvs_log_limited(&(c)->r->log, &(c)->log_limit, LOG_INTERVAL_NS, (level), __VA_ARGS__)

/* ------------------------------------------------------------ io/redis.c */

/* "host:port", "[v6]:port" or "/unix/path" into ep (name and address).  0 or
 * -EINVAL / -ENOENT (logged). */
int endpoint_parse(struct redis *r, struct endpoint *ep, const char *s, size_t len);
/* Initialise ep's sockets (DOWN).  0 or -ENOMEM. */
int endpoint_init(struct redis *r, struct endpoint *ep);
/* The endpoints there are now (acquire: pairs with node_find_add's release). */
uint32_t endpoint_count(const struct redis *r);

/* ------------------------------------------------------ io/redis_reply.c */

/* The reply-object functions of every socket's reader (its privdata is the
 * socket): they finish the socket's oldest command. */
extern redisReplyObjectFunctions redis_reply_fns;

/* ------------------------------------------------------- io/redis_conn.c */

/* A socket of ep, DOWN, with nothing queued. */
void conn_init(struct conn *c, struct redis *r, const struct endpoint *ep);
/* Queue cmd on c, behind what is there; conn_flush writes it. */
void conn_push(struct conn *c, struct cmd *cmd);
/* Queue data command cmd on c and write what c can take (a failure fails c). */
void conn_send(struct conn *c, struct cmd *cmd);
/* A data command's end (its socket let go of it): parked for another try
 * (cluster mode), or its completion queued for poll and its memory freed. */
void cmd_finish(struct redis *r, struct cmd *cmd);
/* End every command on c with err, close it, back off (why: for the log; NULL: quiet). */
void conn_fail(struct conn *c, int err, const char *why);
/* An idle UP socket the server closed meanwhile: dropped, for a reconnect now. */
void conn_check_idle(struct conn *c);
/* Write what is unsent as far as the socket takes it.  0 or -errno. */
int conn_flush(struct conn *c);
/* Start a non-blocking connect and queue the handshake.  0 or -errno. */
int conn_connect(struct conn *c);
/* The least loaded live data socket of ep, or NULL and *err. */
struct conn *conn_pick(struct redis *r, const struct endpoint *ep, int *err);
/* POLLIN/POLLOUT that c waits for, 0: nothing (down or idle). */
uint32_t conn_events(const struct conn *c);
/* The deadline of a socket with conn_events(). */
uint64_t conn_due(const struct conn *c);
/* One wait over v[0..n) until an event or deadline, then its I/O. */
void conns_step(struct conn *const *v, uint32_t n, uint64_t deadline);
/* Wait until nothing of v[0..n) is outstanding; at deadline fail the rest. */
void conns_drain(struct conn *const *v, uint32_t n, uint64_t deadline, const char *why);

/* ---------------------------------------------------- io/redis_cluster.c */

#define NO_NODE 0xff
#define CLUSTER_SLOTS 16384

/* The hash slot of block's keys: CRC16 (XMODEM) of its 32 hex, the hash tag. */
uint16_t cluster_slot(const struct kvs_block_id *block);
/* Open in cluster mode: the slot map from the first seed that answers.  0 or
 * -errno (logged, naming the key to fix). */
int cluster_open(struct redis *r);
/* The node cmd goes to next: the slot's (cmd->redirect NONE or RETRY: after a
 * map refresh), the one a MOVED named (the map updated) or an ASK named (cmd
 * then starts with ASKING).  NULL and *err: none (logged). */
struct endpoint *cluster_route(struct redis *r, struct cmd *cmd, int *err);
/* A data command finished on a socket with a redirection or lost: parked for
 * another try (true), or to be completed as it is (false). */
bool cluster_park(struct redis *r, struct cmd *cmd);
/* Send the parked commands that are due, complete those past their deadline. */
void cluster_resend(struct redis *r);
/* When the first parked command is due, 0: none parked. */
uint64_t cluster_parked_due(const struct redis *r);
/* A lookup's EXISTS after its reply: true when it must be asked again (after a
 * backoff for REDIR_RETRY, *wait_ns). */
bool cluster_lookup_again(struct redis *r, struct cmd *cmd, uint64_t deadline, uint64_t *wait_ns);
/* Close: end every parked command with err. */
void cluster_close(struct redis *r, int err);

#endif
