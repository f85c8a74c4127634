/*
 * tools/cli.h — what the kvshare CLI's files share: one entry point per
 * subcommand (argc/argv start at the subcommand's name, getopt_long style; each
 * handles --help), and the exit codes.
 *
 * The CLI is a user of libkvshare.so.1 like any other: it includes only the
 * public header (plus common/ helpers that are header-only), never core/ or io/
 * internals.
 */
#ifndef KVS_TOOLS_CLI_H
#define KVS_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

/* Exit codes of every subcommand. */
enum kvs_cli_exit {
	KVS_CLI_OK = 0,
	KVS_CLI_FAIL = 1,   /* the operation failed (message on stderr) */
	KVS_CLI_USAGE = 2,  /* bad command line (message on stderr) */
};

/* n bytes for people: "512 B", "1.5 MiB" (into buf, returned). */
const char *kvs_cli_human_bytes(char *buf, size_t len, uint64_t n);

/* What holds cache uid's control file name when kvs_cache_inspect said
 * -KVS_ECORRUPT (no regular file there): "/dev/shm/kvshare.<uid>.ctl is a FIFO,
 * not a regular file: not a kvshare cache" (into buf, returned). */
const char *kvs_cli_not_cache(char *buf, size_t len, const char *uid);

int kvs_cli_bench(int argc, char **argv);
int kvs_cli_stat(int argc, char **argv);
int kvs_cli_ls(int argc, char **argv);
int kvs_cli_clean(int argc, char **argv);
int kvs_cli_replay(int argc, char **argv);
int kvs_cli_trace(int argc, char **argv);

#endif
