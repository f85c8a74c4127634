/*
 * tools/trace_gen.c — `kvshare trace gen`: write a synthetic trace in the
 * Mooncake format that `kvshare replay` and `kvshare bench --trace` read
 * (JSON Lines: timestamp in ms, input_length and output_length in tokens,
 * hash_ids: the ids of the prompt's blocks, one per --block-tokens tokens).
 *
 * So the README's examples run from a fresh clone, with no trace from outside
 * the project.  The model is what makes prefix caching matter: DOCS shared
 * prefixes (a system prompt, a document, a conversation so far) of 4..64 blocks,
 * chosen with Zipf(1) popularity; each request takes a random leading part of
 * its prefix (at least a quarter) and appends 1..16 blocks of its own, never
 * seen again.  Arrivals are Poisson (mean gap --gap-ms).  Everything comes from
 * --seed through splitmix64: one seed, one trace, byte for byte.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pattern.h"
#include "tools/cli.h"

#define DOC_BLOCKS_MIN 4
#define DOC_BLOCKS_MAX 64
#define OWN_BLOCKS_MAX 16

static const char *const gen_usage =
	"usage: kvshare trace gen [--requests N] [--docs N] [--block-tokens N] [--gap-ms MS]\n"
	"                         [--seed S] [--out FILE]\n"
	"\n"
	"Write a synthetic Mooncake-format trace (JSON Lines) for kvshare replay and\n"
	"kvshare bench --trace: requests share prefixes drawn from DOCS documents\n"
	"(Zipf popularity, 4..64 blocks each, a random leading part of at least a\n"
	"quarter) and add 1..16 blocks of their own; Poisson arrivals.  The same seed\n"
	"gives the same trace.\n"
	"\n"
	"  --requests N      requests (1 .. 10000000; default 5000)\n"
	"  --docs N          shared prefixes (1 .. 1000000; default 200)\n"
	"  --block-tokens N  tokens per block (1 .. 65536; default 512)\n"
	"  --gap-ms MS       mean time between arrivals (0 .. 60000; default 20)\n"
	"  --seed S          default 1\n"
	"  --out FILE        write FILE instead of stdout\n"
	"\n"
	"Exit: 0 ok, 1 failure (FILE not writable), 2 bad usage.\n";

struct gen_opts {
	uint64_t requests, docs, block_tokens, gap_ms, seed;
	const char *out;
};

static uint64_t next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return kvs_mix64(*s);
}

/* Uniform in [0, 1). */
static double unit(uint64_t *s)
{
	return (double)(next(s) >> 11) / 9007199254740992.0;
}

/* An option's value, lo..hi: 0, or -1 after saying why. */
static int num(const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi) {
		fprintf(stderr, "kvshare trace gen: --%s '%s': want an integer %" PRIu64 " .. %" PRIu64 "\n",
			opt, v, lo, hi);
		return -1;
	}
	*out = x;
	return 0;
}

static int gen_args(int argc, char **argv, struct gen_opts *o)
{
	static const struct option longopts[] = {
		{ "requests", required_argument, NULL, 'r' },
		{ "docs", required_argument, NULL, 'd' },
		{ "block-tokens", required_argument, NULL, 'b' },
		{ "gap-ms", required_argument, NULL, 'g' },
		{ "seed", required_argument, NULL, 's' },
		{ "out", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;

	*o = (struct gen_opts){ .requests = 5000, .docs = 200, .block_tokens = 512, .gap_ms = 20,
				.seed = 1 };
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		int rc = 0;

		switch (c) {
		case 'r': rc = num("requests", optarg, 1, 10000000, &o->requests); break;
		case 'd': rc = num("docs", optarg, 1, 1000000, &o->docs); break;
		case 'b': rc = num("block-tokens", optarg, 1, 65536, &o->block_tokens); break;
		case 'g': rc = num("gap-ms", optarg, 0, 60000, &o->gap_ms); break;
		case 's': rc = num("seed", optarg, 0, UINT64_MAX, &o->seed); break;
		case 'o': o->out = optarg; break;
		case 'h': fputs(gen_usage, stdout); return -1;
		case ':':
			fprintf(stderr, "kvshare trace gen: %s needs a value\n", argv[optind - 1]);
			return KVS_CLI_USAGE;
		default:
			fprintf(stderr, "kvshare trace gen: unknown option '%s' (kvshare trace gen --help)\n",
				argv[optind - 1]);
			return KVS_CLI_USAGE;
		}
		if (rc)
			return KVS_CLI_USAGE;
	}
	if (optind < argc) {
		fprintf(stderr, "kvshare trace gen: unexpected '%s' (kvshare trace gen --help)\n",
			argv[optind]);
		return KVS_CLI_USAGE;
	}
	return 0;
}

/* Zipf(1) over docs: the inverse of the harmonic CDF, by bisection over a table. */
static uint64_t zipf(const double *cdf, uint64_t n, uint64_t *s)
{
	double u = unit(s) * cdf[n - 1];
	uint64_t lo = 0, hi = n - 1;

	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;

		if (cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int generate(const struct gen_opts *o, FILE *f)
{
	uint64_t *doc_first = malloc(o->docs * sizeof(*doc_first));
	uint32_t *doc_len = malloc(o->docs * sizeof(*doc_len));
	double *cdf = malloc(o->docs * sizeof(*cdf)), t = 0;
	uint64_t s = o->seed, id = 0;

	if (!doc_first || !doc_len || !cdf) {
		free(doc_first);
		free(doc_len);
		free(cdf);
		return -ENOMEM;
	}
	for (uint64_t d = 0; d < o->docs; d++) {
		doc_len[d] = DOC_BLOCKS_MIN + (uint32_t)(next(&s) % (DOC_BLOCKS_MAX - DOC_BLOCKS_MIN + 1));
		doc_first[d] = id;
		id += doc_len[d];
		cdf[d] = (d ? cdf[d - 1] : 0) + 1.0 / (double)(d + 1);
	}
	for (uint64_t r = 0; r < o->requests; r++) {
		uint64_t d = zipf(cdf, o->docs, &s);
		uint32_t shared = (doc_len[d] + 3) / 4 +
				  (uint32_t)(next(&s) % (doc_len[d] - (doc_len[d] + 3) / 4 + 1));
		uint32_t own = 1 + (uint32_t)(next(&s) % OWN_BLOCKS_MAX);
		uint64_t tokens = (uint64_t)(shared + own) * o->block_tokens -
				  next(&s) % o->block_tokens;

		fprintf(f, "{\"timestamp\": %" PRIu64 ", \"input_length\": %" PRIu64
			   ", \"output_length\": %" PRIu64 ", \"hash_ids\": [",
			(uint64_t)t, tokens, 1 + next(&s) % 512);
		for (uint32_t i = 0; i < shared; i++)
			fprintf(f, "%s%" PRIu64, i ? ", " : "", doc_first[d] + i);
		for (uint32_t i = 0; i < own; i++)
			fprintf(f, ", %" PRIu64, id++);
		fputs("]}\n", f);
		t += -log(1.0 - unit(&s)) * (double)o->gap_ms;
	}
	free(doc_first);
	free(doc_len);
	free(cdf);
	return ferror(f) ? -EIO : 0;
}

int kvs_cli_trace(int argc, char **argv)
{
	struct gen_opts o;
	FILE *f = stdout;
	int rc;

	if (argc < 2 || strcmp(argv[1], "gen") != 0) {
		if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			fputs(gen_usage, stdout);
			return KVS_CLI_OK;
		}
		fprintf(stderr, "kvshare trace: want 'kvshare trace gen [options]' (kvshare trace gen "
				"--help)\n");
		return KVS_CLI_USAGE;
	}
	rc = gen_args(argc - 1, argv + 1, &o);
	if (rc)
		return rc < 0 ? KVS_CLI_OK : rc;
	if (o.out && !(f = fopen(o.out, "we"))) {
		fprintf(stderr, "kvshare trace gen: %s: %s\n", o.out, strerror(errno));
		return KVS_CLI_FAIL;
	}
	rc = generate(&o, f);
	if ((f == stdout ? fflush(f) : fclose(f)) != 0 && rc == 0)
		rc = -errno;
	if (rc) {
		fprintf(stderr, "kvshare trace gen: writing %s: %s\n", o.out ? o.out : "stdout",
			strerror(-rc));
		return KVS_CLI_FAIL;
	}
	return KVS_CLI_OK;
}
