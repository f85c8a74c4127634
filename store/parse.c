/*
 * store/parse.c — the "key=value,key=value" parser that inference engines
 * hand us (kvs_store_config_parse), into a struct kvs_store_config that
 * store/config.c then resolves.
 *
 * The parser is one table, one row per key: the key's name, the kind of value
 * it takes (a function that reads and stores that kind: integer, size, time,
 * boolean or flag bit, enum, or one of the list and string kinds), where the
 * value goes (offset and width of the field) and its range in the key's own
 * unit (the range kvshare.h documents for the field, so a bad value is named
 * by its key here rather than by a field name at open).  Adding a key is
 * adding a row.  Everything a value can be is spelled strictly: integers are
 * decimal digits only (no '+', space, base prefix or exponent; a '-' only for
 * the keys where -1 means something) with overflow detected before each digit;
 * sizes are binary and take one suffix, k/K/KiB, m/M/MiB or g/G/GiB (KB, MB, GB
 * are refused, naming the binary spelling: 1000 or 1024 would be a guess),
 * overflow checked;
 * cache_buffer_capacity_gb is a decimal number of GiB converted with integer
 * arithmetic only (a fraction rounds down to a whole byte; at most 9 decimals
 * once trailing zeros are dropped: a 10th would add less than a byte).
 * Spaces (and tabs, newlines) around an item and around its '=' are dropped,
 * none inside a value.  Booleans are 1/0, true/false, on/off, yes/no in any case (Python's str(True)
 * is "True"); keys and enum words are exact, lower case.  Empty items, keys
 * given twice and unknown keys (with the nearest known key suggested) are
 * errors; an empty string is no items at all.  Each error names the key and
 * shows its value (truncated, unprintable bytes as '?') in the log line and in
 * the caller's err buffer.  The first bad item stops the parse, so cfg keeps
 * the items before it; a bad item itself changes nothing (list values are built
 * aside and stored whole).  backend_roots replaces any backend.roots[] the
 * caller set (nroots becomes 0, so resolution splits the string).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "store/store.h"

#define US_PER_HOUR (UINT64_C(3600) * 1000000)
#define MS_PER_HOUR (UINT64_C(3600) * 1000)
#define REDIS_TTL_S_MAX ((UINT64_C(1) << 53) / 1000) /* kvs_backend_redis_config.ttl_ms */
#define REGISTER_DELAY_US_MAX (KVS_COPY_REGISTER_DELAY_MAX_NS / KVS_STORE_NS_PER_US)
#define LAND_DELAY_US_MAX (KVS_COPY_LAND_DELAY_MAX_NS / KVS_STORE_NS_PER_US)
#define VALUE_SHOWN_MAX 48                 /* bytes of a bad value quoted in an error */
#define GIB_DECIMALS_MAX 9

/* A slice of the input: values are not NUL-terminated (they end at ','). */
struct span {
	const char *s;
	size_t n;
};

struct parse {
	struct kvs_store_config *cfg;
	struct kvs_log log;
	char *err;
	size_t errlen;
	const struct kv_key *prev; /* the item before: a list's stray ',' is named */
};

struct kv_key;
/* A kind of value: reads v and stores it into p->cfg, or returns fail()'s -EINVAL. */
typedef int (*kv_kind_fn)(struct parse *p, const struct kv_key *k, struct span v);

struct kv_key {
	const char *name;
	kv_kind_fn kind;
	size_t off;               /* offsetof(struct kvs_store_config, field) */
	size_t width;             /* sizeof the field (integers: 4 or 8) */
	long long lo;             /* range in the key's unit (kv_int: signed) */
	unsigned long long hi;
	uint64_t scale;           /* key unit -> field unit (us -> ns: 1000); 0 = 1 */
	uint32_t bit;             /* kv_bool on a flags word: the bit (0: a 0/1 field) */
	bool invert;              /* kv_bool: true clears the bit */
	bool secret;              /* kv_str: never show the value (a password) */
	const char *const *names; /* kv_enum: names[value], count entries */
	uint32_t count;
};

/* The whole message goes to the log and, truncated, to the caller's buffer. */
__attribute__((format(printf, 2, 3))) static int fail(struct parse *p, const char *fmt, ...)
{
	char line[KVS_LOG_LINE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	kvs_log_error(&p->log, "%s", line);
	if (p->err && p->errlen)
		snprintf(p->err, p->errlen, "%s", line);
	return -EINVAL;
}

/* A value fit to quote, into out[VALUE_SHOWN_MAX + 4]: at most VALUE_SHOWN_MAX
 * bytes ("..." after a cut), bytes outside printable ASCII (and quotes) as '?'. */
static void show(char out[VALUE_SHOWN_MAX + 4], struct span v)
{
	size_t n = v.n < VALUE_SHOWN_MAX ? v.n : VALUE_SHOWN_MAX;

	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v.s[i];
		out[i] = ch >= 0x20 && ch < 0x7f && ch != '\'' ? (char)ch : '?';
	}
	if (n < v.n) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
}

/* "store config: invalid <key> = '<value>' (<why>)". */
__attribute__((format(printf, 4, 5))) static int bad(struct parse *p, const struct kv_key *k,
						      struct span v, const char *why, ...)
{
	char shown[VALUE_SHOWN_MAX + 4], reason[192];
	va_list ap;

	show(shown, v);
	va_start(ap, why);
	vsnprintf(reason, sizeof(reason), why, ap);
	va_end(ap);
	return fail(p, "store config: invalid %s = '%s' (%s)", k->name, shown, reason);
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/* Decimal digits only, at least one.  -EINVAL for anything else, -ERANGE when
 * the number does not fit 64 bits (checked before each step, never wrapped). */
static int dec_u64(struct span v, uint64_t *out)
{
	uint64_t x = 0;

	if (v.n == 0)
		return -EINVAL;
	for (size_t i = 0; i < v.n; i++)
		if (!is_digit(v.s[i]))
			return -EINVAL;
	for (size_t i = 0; i < v.n; i++) {
		unsigned d = (unsigned)(v.s[i] - '0');

		if (x > (UINT64_MAX - d) / 10)
			return -ERANGE;
		x = x * 10 + d;
	}
	*out = x;
	return 0;
}

/* The binary unit a size ends in: k/K/KiB, m/M/MiB, g/G/GiB (shift), none (0),
 * or -EDOM for a decimal-looking unit (KB, kB, MB, GB, ...: 1000 or 1024?). */
static int size_unit(struct span *v)
{
	static const struct {
		const char *word;
		int shift;
	} units[] = {
		{ "KiB", 10 }, { "MiB", 20 }, { "GiB", 30 }, { "k", 10 }, { "K", 10 },
		{ "m", 20 }, { "M", 20 }, { "g", 30 }, { "G", 30 },
	};
	size_t digits = 0;

	while (digits < v->n && is_digit(v->s[digits]))
		digits++;
	if (digits == 0 || digits == v->n)
		return 0;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (v->n - digits == strlen(units[i].word) &&
		    strncmp(v->s + digits, units[i].word, v->n - digits) == 0) {
			v->n = digits;
			return units[i].shift;
		}
	if (v->n - digits == 2 && strchr("kKmMgG", v->s[digits]) && strchr("bB", v->s[digits + 1]))
		return -EDOM;
	return 0; /* not a unit: dec_u64 refuses the value */
}

/* An integer with an optional binary suffix (size_unit).  -EINVAL, -ERANGE, or
 * -EDOM for KB/MB/GB (the caller says which spelling to use). */
static int size_u64(struct span v, uint64_t *out)
{
	int shift = size_unit(&v);
	uint64_t x;
	int rc;

	if (shift < 0)
		return shift;
	rc = dec_u64(v, &x);
	if (rc)
		return rc;
	if (x > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = x << shift;
	return 0;
}

static int num_error(struct parse *p, const struct kv_key *k, struct span v, int rc,
		     const char *want)
{
	if (rc == -ERANGE)
		return bad(p, k, v, "overflows 64 bits");
	if (rc == -EDOM)
		return bad(p, k, v, "sizes are binary: write 64k or 64KiB (1024 bytes each), "
				    "4m or 4MiB, 1g or 1GiB");
	return bad(p, k, v, "not %s", want);
}

static void put_u64(struct kvs_store_config *cfg, const struct kv_key *k, uint64_t x)
{
	unsigned char *field = (unsigned char *)cfg + k->off;

	if (k->width == sizeof(uint32_t)) {
		uint32_t w = (uint32_t)x; /* the range check made it fit (two's complement for kv_int) */
		memcpy(field, &w, sizeof(w));
	} else {
		memcpy(field, &x, sizeof(x));
	}
}

/* Range check, scale to the field's unit, check the field holds it, store. */
static int put_ranged(struct parse *p, const struct kv_key *k, struct span v, uint64_t x)
{
	uint64_t scaled, field_max = k->width == sizeof(uint32_t) ? UINT32_MAX : UINT64_MAX;

	if (x < (uint64_t)k->lo || x > k->hi)
		return bad(p, k, v, "want %llu..%llu", (unsigned long long)k->lo, k->hi);
	if (__builtin_mul_overflow(x, k->scale ? k->scale : 1, &scaled) || scaled > field_max)
		return bad(p, k, v, "overflows the field");
	put_u64(p->cfg, k, scaled);
	return 0;
}

/* Unsigned decimal integer (times scale: a time in us or ms kept in ns). */
static int kv_uint(struct parse *p, const struct kv_key *k, struct span v)
{
	uint64_t x;
	int rc = dec_u64(v, &x);

	if (rc)
		return num_error(p, k, v, rc, "a decimal integer");
	return put_ranged(p, k, v, x);
}

/* Signed decimal integer: an optional '-' and digits, lo..hi (into 32 bits). */
static int kv_int(struct parse *p, const struct kv_key *k, struct span v)
{
	bool neg = v.n > 0 && v.s[0] == '-';
	struct span digits = { v.s + neg, v.n - neg };
	uint64_t mag;
	long long x;
	int rc = dec_u64(digits, &mag);

	if (rc)
		return num_error(p, k, v, rc, "a decimal integer");
	if (mag > (uint64_t)INT64_MAX)
		return bad(p, k, v, "overflows 64 bits");
	x = neg ? -(long long)mag : (long long)mag;
	if (x < k->lo || x > (long long)k->hi)
		return bad(p, k, v, "want %lld..%llu", k->lo, k->hi);
	put_u64(p->cfg, k, (uint64_t)x);
	return 0;
}

static int kv_size(struct parse *p, const struct kv_key *k, struct span v)
{
	uint64_t x;
	int rc = size_u64(v, &x);

	if (rc)
		return num_error(p, k, v, rc, "a size (bytes, optional k/m/g or KiB/MiB/GiB suffix)");
	return put_ranged(p, k, v, x);
}

static bool span_is(struct span v, const char *word, bool any_case)
{
	size_t n = strlen(word);

	return v.n == n && (any_case ? strncasecmp(v.s, word, n) : strncmp(v.s, word, n)) == 0;
}

/* 1/0, true/false, on/off, yes/no (any case: "True" is what Python's str()
 * gives); into a 0/1 field, or a bit of a flags word (invert: true clears it). */
static int kv_bool(struct parse *p, const struct kv_key *k, struct span v)
{
	static const char *const yes[] = { "1", "true", "on", "yes" };
	static const char *const no[] = { "0", "false", "off", "no" };
	int val = -1;

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]) && val < 0; i++) {
		if (span_is(v, yes[i], true))
			val = 1;
		else if (span_is(v, no[i], true))
			val = 0;
	}
	if (val < 0)
		return bad(p, k, v, "want 1/0, true/false, on/off or yes/no");
	if (k->bit) {
		uint32_t flags;

		memcpy(&flags, (unsigned char *)p->cfg + k->off, sizeof(flags));
		if (val != k->invert)
			flags |= k->bit;
		else
			flags &= ~k->bit;
		memcpy((unsigned char *)p->cfg + k->off, &flags, sizeof(flags));
		return 0;
	}
	put_u64(p->cfg, k, (uint64_t)val);
	return 0;
}

static int kv_enum(struct parse *p, const struct kv_key *k, struct span v)
{
	char want[128];
	size_t used = 0;

	/* A NULL name is a value not chosen by name (backend: fault, user). */
	for (uint32_t i = 0; i < k->count; i++) {
		if (k->names[i] && span_is(v, k->names[i], false)) {
			put_u64(p->cfg, k, i);
			return 0;
		}
	}
	want[0] = '\0';
	for (uint32_t i = 0; i < k->count && used < sizeof(want); i++)
		if (k->names[i])
			used += (size_t)snprintf(want + used, sizeof(want) - used, "%s%s",
						 used ? "|" : "", k->names[i]);
	return bad(p, k, v, "want %s", want);
}

/* Decimal GiB with an optional fraction, to bytes: digits[.digits], integer
 * arithmetic only; the fraction rounds down to a whole byte. */
static int kv_gib(struct parse *p, const struct kv_key *k, struct span v)
{
	const char *dot = memchr(v.s, '.', v.n);
	struct span ip = { v.s, dot ? (size_t)(dot - v.s) : v.n };
	struct span fp = { dot ? dot + 1 : v.s, dot ? v.n - ip.n - 1 : 0 };
	uint64_t whole, frac = 0, pow10 = 1, bytes;
	int rc;

	rc = dec_u64(ip, &whole);
	if (rc == 0 && dot)
		rc = dec_u64(fp, &frac) == -EINVAL ? -EINVAL : 0; /* digits after the dot */
	if (rc)
		return num_error(p, k, v, rc, "a decimal number of GiB (e.g. 12 or 0.5)");
	if (dot) {
		/* Trailing zeros add nothing; a 10th decimal would be < 1.08 bytes. */
		while (fp.n > 0 && fp.s[fp.n - 1] == '0')
			fp.n--;
		if (fp.n > GIB_DECIMALS_MAX)
			return bad(p, k, v, "more than %d decimals", GIB_DECIMALS_MAX);
		frac = 0;
		if (fp.n && dec_u64(fp, &frac))
			return bad(p, k, v, "bad decimals"); /* not reached: checked above */
		for (size_t i = 0; i < fp.n; i++)
			pow10 *= 10;
	}
	if (whole > (UINT64_MAX >> 30))
		return bad(p, k, v, "overflows 64 bits");
	/* frac < 10^9 < 2^30: frac << 30 < 2^60. */
	if (__builtin_add_overflow(whole << 30, (frac << 30) / pow10, &bytes))
		return bad(p, k, v, "overflows 64 bits");
	if (bytes == 0)
		return bad(p, k, v, "want > 0");
	return put_ranged(p, k, v, bytes);
}

/* unique_id: [A-Za-z0-9_.-]{1,64}, not "." or "..". */
static int kv_id(struct parse *p, const struct kv_key *k, struct span v)
{
	char id[KVS_UNIQUE_ID_MAX + 1];

	if (v.n > KVS_UNIQUE_ID_MAX)
		return bad(p, k, v, "longer than %d characters", KVS_UNIQUE_ID_MAX);
	memcpy(id, v.s, v.n);
	id[v.n] = '\0';
	if (!kvs_core_unique_id_valid(id))
		return bad(p, k, v, "want [A-Za-z0-9_.-]{1,64}");
	memset(p->cfg->cache.unique_id, 0, sizeof(p->cfg->cache.unique_id));
	memcpy(p->cfg->cache.unique_id, id, v.n + 1);
	return 0;
}

/* The next ':'-separated entry of *rest (which then moves past it); false at
 * the end. */
static bool next_entry(struct span *rest, struct span *entry, bool *more)
{
	const char *colon;

	if (!*more)
		return false;
	colon = memchr(rest->s, ':', rest->n);
	entry->s = rest->s;
	entry->n = colon ? (size_t)(colon - rest->s) : rest->n;
	*more = colon != NULL;
	if (colon) {
		rest->n -= entry->n + 1;
		rest->s = colon + 1;
	}
	return true;
}

/* tensor_size_list: sizes a:b:..., 1..KVS_MAX_TENSORS entries, each 1..2^40. */
static int kv_sizes(struct parse *p, const struct kv_key *k, struct span v)
{
	uint64_t sizes[KVS_MAX_TENSORS];
	struct span rest = v, e;
	uint32_t n = 0;
	bool more = true;

	while (next_entry(&rest, &e, &more)) {
		uint64_t x;
		int rc;

		if (n == KVS_MAX_TENSORS)
			return bad(p, k, v, "more than %u entries", KVS_MAX_TENSORS);
		rc = size_u64(e, &x);
		if (rc == -ERANGE)
			return bad(p, k, v, "entry %u overflows 64 bits", n + 1);
		if (rc == -EDOM)
			return bad(p, k, v, "entry %u: sizes are binary: write 32k or 32KiB", n + 1);
		if (rc)
			return bad(p, k, v, "entry %u is not a size", n + 1);
		if (x == 0 || x > KVS_MAX_SLOT_BYTES)
			return bad(p, k, v, "entry %u: want 1..2^40", n + 1);
		sizes[n++] = x;
	}
	memset(p->cfg->cache.tensor_bytes, 0, sizeof(p->cfg->cache.tensor_bytes));
	memcpy(p->cfg->cache.tensor_bytes, sizes, n * sizeof(sizes[0]));
	p->cfg->cache.tensor_count = n;
	return 0;
}

/* backend_roots: /a:/b, 1..KVS_BACKEND_MAX_ROOTS absolute paths. */
static int kv_roots(struct parse *p, const struct kv_key *k, struct span v)
{
	struct kvs_store_config *cfg = p->cfg;
	struct span rest = v, e;
	uint32_t n = 0;
	bool more = true;

	if (v.n > KVS_STORE_ROOTS_MAX)
		return bad(p, k, v, "longer than %d characters", KVS_STORE_ROOTS_MAX);
	while (next_entry(&rest, &e, &more)) {
		if (++n > KVS_BACKEND_MAX_ROOTS)
			return bad(p, k, v, "more than %d roots", KVS_BACKEND_MAX_ROOTS);
		if (e.n == 0 || e.s[0] != '/')
			return bad(p, k, v, "root %u is not an absolute path", n);
	}
	memset(cfg->backend_roots, 0, sizeof(cfg->backend_roots));
	memcpy(cfg->backend_roots, v.s, v.n);
	/* The string replaces roots the caller set: resolution splits it. */
	cfg->backend.nroots = 0;
	memset(cfg->backend.roots, 0, sizeof(cfg->backend.roots));
	return 0;
}

/* A string into a char[width] field (NUL-terminated; a secret's value is never
 * shown in an error). */
static int kv_str(struct parse *p, const struct kv_key *k, struct span v)
{
	unsigned char *field = (unsigned char *)p->cfg + k->off;

	if (memchr(v.s, '\0', v.n))
		return fail(p, "store config: invalid %s (contains a NUL byte)", k->name);
	if (v.n >= k->width) {
		if (k->secret)
			return fail(p, "store config: invalid %s (longer than %zu characters; the "
				       "value is not shown)", k->name, k->width - 1);
		return bad(p, k, v, "longer than %zu characters", k->width - 1);
	}
	memset(field, 0, k->width);
	memcpy(field, v.s, v.n);
	return 0;
}

/* cpu_affinity_cores: entries n or a-b (a <= b), each < KVS_STORE_MAX_CPUS. */
static int kv_cpus(struct parse *p, const struct kv_key *k, struct span v)
{
	uint64_t mask[KVS_STORE_MAX_CPUS / 64];
	struct span rest = v, e;
	uint32_t n = 0;
	bool more = true;

	memset(mask, 0, sizeof(mask));
	while (next_entry(&rest, &e, &more)) {
		const char *dash = memchr(e.s, '-', e.n);
		struct span a = { e.s, dash ? (size_t)(dash - e.s) : e.n };
		struct span b = dash ? (struct span){ dash + 1, e.n - a.n - 1 } : a;
		uint64_t first, last;

		n++;
		if (dec_u64(a, &first) || dec_u64(b, &last))
			return bad(p, k, v, "entry %u: want a CPU number or a range a-b", n);
		if (first > last)
			return bad(p, k, v, "entry %u: range %llu-%llu is backwards", n,
				   (unsigned long long)first, (unsigned long long)last);
		if (last >= KVS_STORE_MAX_CPUS)
			return bad(p, k, v, "entry %u: CPU %llu (want < %d)", n,
				   (unsigned long long)last, KVS_STORE_MAX_CPUS);
		for (uint64_t c = first; c <= last; c++)
			mask[c / 64] |= UINT64_C(1) << (c % 64);
	}
	memcpy(p->cfg->cpu_affinity, mask, sizeof(mask));
	return 0;
}

#define K(n, k) .name = n, .kind = k
#define FIELD(f) .off = offsetof(struct kvs_store_config, f), \
		 .width = sizeof(((struct kvs_store_config *)0)->f)
#define ENUM(list) .names = list, .count = sizeof(list) / sizeof(list[0]), \
		   .hi = sizeof(list) / sizeof(list[0]) - 1

/* Enum names, indexed by value. */
static const char *const hugetlb_names[] = {
	[KVS_HUGETLB_AUTO] = "auto", [KVS_HUGETLB_REQUIRED] = "required", [KVS_HUGETLB_OFF] = "off",
};
static const char *const numa_names[] = {
	[KVS_NUMA_AUTO] = "auto", [KVS_NUMA_OFF] = "off", [KVS_NUMA_REQUIRED] = "required",
};
static const char *const wait_names[] = {
	[KVS_WAIT_AUTO] = "auto", [KVS_WAIT_FUTEX] = "futex", [KVS_WAIT_SPIN] = "spin",
};
/* fault and user are not chosen by name: fault_* values wrap the backend. */
static const char *const backend_names[] = {
	[KVS_BACKEND_POSIX] = "posix", [KVS_BACKEND_NONE] = "none",
	[KVS_BACKEND_LATENCY] = "latency", [KVS_BACKEND_FAULT] = NULL, [KVS_BACKEND_USER] = NULL,
	[KVS_BACKEND_REDIS] = "redis",
};
static const char *const io_engine_names[] = {
	[KVS_IO_ENGINE_AUTO] = "auto", [KVS_IO_ENGINE_URING] = "uring",
	[KVS_IO_ENGINE_POOL] = "pool",
};
static const char *const copy_engine_names[] = {
	[KVS_COPY_ENGINE_AUTO] = "auto", [KVS_COPY_ENGINE_HOST] = "host",
	[KVS_COPY_ENGINE_CUDA] = "cuda",
};
static const char *const dispatch_names[] = {
	[KVS_DISPATCH_ROTATED] = "rotated", [KVS_DISPATCH_NATURAL] = "natural",
};
static const char *const dump_wait_names[] = {
	[KVS_DUMP_WAIT_DURABLE] = "durable", [KVS_DUMP_WAIT_CACHED] = "cached",
};

/* Every key (kvshare.h, kvs_store_config_parse; docs/store.md, "Configuration";
 * README.md, "Configuration").  Ranges are the ones kvshare.h documents for the
 * field, in the key's unit. */
static const struct kv_key keys[] = {
	{ K("unique_id", kv_id) },
	{ K("device_id", kv_int), FIELD(cache.device_id), .lo = -1, .hi = INT32_MAX },
	{ K("local_rank_size", kv_uint), FIELD(cache.local_rank_size), .lo = 1, .hi = KVS_MAX_RANKS },
	{ K("shard_size", kv_size), FIELD(cache.slot_bytes), .lo = 1, .hi = KVS_MAX_SLOT_BYTES },
	{ K("block_size", kv_size), FIELD(block_bytes), .lo = 1, .hi = UINT64_MAX },
	{ K("tensor_size", kv_size), FIELD(tensor_bytes), .lo = 1, .hi = KVS_MAX_SLOT_BYTES },
	{ K("tensor_size_list", kv_sizes) },
	{ K("cache_buffer_capacity_gb", kv_gib), FIELD(capacity_bytes), .lo = 1, .hi = UINT64_MAX },
	{ K("reserved_slots", kv_uint), FIELD(cache.reserved_slots), .hi = UINT32_MAX },
	{ K("share_buffer_enable", kv_bool), FIELD(share_buffer) },
	{ K("persist", kv_bool), FIELD(cache.flags), .bit = KVS_CACHE_PERSIST },
	{ K("hugetlb", kv_enum), FIELD(cache.hugetlb), ENUM(hugetlb_names) },
	{ K("numa", kv_enum), FIELD(cache.numa), ENUM(numa_names) },
	{ K("numa_node", kv_int), FIELD(cache.numa_node), .lo = -1, .hi = KVS_NUMA_MAX_NODES - 1 },
	{ K("wait", kv_enum), FIELD(cache.wait), ENUM(wait_names) },
	{ K("spin_us", kv_uint), FIELD(cache.spin_ns), .hi = UINT32_MAX / KVS_STORE_NS_PER_US,
	  .scale = KVS_STORE_NS_PER_US },
	{ K("backend", kv_enum), FIELD(backend.kind), ENUM(backend_names) },
	{ K("backend_roots", kv_roots) },
	{ K("io_engine", kv_enum), FIELD(backend.io_engine), ENUM(io_engine_names) },
	{ K("io_direct", kv_bool), FIELD(backend.flags), .bit = KVS_BACKEND_F_IO_DIRECT },
	{ K("io_queue_depth", kv_uint), FIELD(backend.queue_depth), .lo = 1, .hi = 4096 },
	{ K("io_threads", kv_uint), FIELD(backend.pool_threads), .lo = 1, .hi = 64 },
	{ K("fsync", kv_bool), FIELD(backend.flags), .bit = KVS_BACKEND_F_NO_FSYNC, .invert = true },
	{ K("latency_us", kv_uint), FIELD(backend.latency_ns), .hi = US_PER_HOUR, .scale = KVS_STORE_NS_PER_US },
	{ K("latency_queue_depth", kv_uint), FIELD(backend.latency_queue_depth), .hi = UINT32_MAX },
	{ K("fault_error_ppm", kv_uint), FIELD(backend.fault_error_ppm), .hi = 1000000 },
	{ K("fault_short_ppm", kv_uint), FIELD(backend.fault_short_ppm), .hi = 1000000 },
	{ K("fault_delay_us", kv_uint), FIELD(backend.fault_delay_ns), .hi = US_PER_HOUR,
	  .scale = KVS_STORE_NS_PER_US },
	{ K("fault_seed", kv_uint), FIELD(backend.fault_seed), .hi = UINT64_MAX },
	{ K("redis_endpoints", kv_str), FIELD(backend.redis.endpoints) },
	{ K("redis_db", kv_uint), FIELD(backend.redis.db), .hi = INT32_MAX },
	{ K("redis_user", kv_str), FIELD(backend.redis.user) },
	{ K("redis_password", kv_str), FIELD(backend.redis.password), .secret = true },
	{ K("redis_password_file", kv_str), FIELD(backend.redis.password_file) },
	{ K("redis_connections", kv_uint), FIELD(backend.redis.connections), .lo = 1,
	  .hi = KVS_REDIS_MAX_CONNECTIONS },
	{ K("redis_connect_timeout_ms", kv_uint), FIELD(backend.redis.connect_timeout_ns), .lo = 1,
	  .hi = MS_PER_HOUR, .scale = KVS_STORE_NS_PER_MS },
	{ K("redis_command_timeout_ms", kv_uint), FIELD(backend.redis.command_timeout_ns), .lo = 1,
	  .hi = MS_PER_HOUR, .scale = KVS_STORE_NS_PER_MS },
	{ K("redis_key_prefix", kv_str), FIELD(backend.redis.key_prefix) },
	{ K("redis_ttl_s", kv_uint), FIELD(backend.redis.ttl_ms), .hi = REDIS_TTL_S_MAX,
	  .scale = 1000 },
	{ K("redis_start_degraded", kv_bool), FIELD(backend.redis.start_degraded) },
	{ K("redis_cluster", kv_bool), FIELD(backend.redis.cluster) },
	{ K("redis_wait_replicas", kv_uint), FIELD(backend.redis.wait_replicas),
	  .hi = KVS_REDIS_MAX_WAIT_REPLICAS },
	{ K("layout_tag", kv_uint), FIELD(backend.layout_tag), .hi = UINT64_MAX },
	{ K("copy_engine", kv_enum), FIELD(copy_engine), ENUM(copy_engine_names) },
	{ K("cache_stream_number", kv_uint), FIELD(cache_stream_number), .lo = 1,
	  .hi = KVS_STORE_STREAMS_MAX },
	{ K("dispatch_order", kv_enum), FIELD(dispatch_order), ENUM(dispatch_names) },
	{ K("dump_wait", kv_enum), FIELD(dump_wait), ENUM(dump_wait_names) },
	{ K("prealloc", kv_bool), FIELD(prealloc) },
	{ K("waiting_queue_depth", kv_uint), FIELD(waiting_queue_depth), .lo = 1,
	  .hi = KVS_STORE_WAITING_QD_MAX },
	{ K("running_queue_depth", kv_uint), FIELD(running_queue_depth), .lo = 1,
	  .hi = KVS_STORE_RUNNING_QD_MAX },
	{ K("timeout_ms", kv_uint), FIELD(timeout_ns), .lo = 1, .hi = KVS_STORE_TIMEOUT_MS_MAX,
	  .scale = KVS_STORE_NS_PER_MS },
	{ K("copy_delay_us", kv_uint), FIELD(copy_delay_ns), .hi = KVS_STORE_COPY_DELAY_US_MAX,
	  .scale = KVS_STORE_NS_PER_US },
	{ K("cpu_affinity_cores", kv_cpus) },
	{ K("prefault_threads", kv_uint), FIELD(cache.prefault_threads),
	  .hi = KVS_CACHE_PREFAULT_THREADS_MAX },
	{ K("register_chunk_size", kv_size), FIELD(register_chunk_bytes),
	  .lo = KVS_STORE_REGISTER_CHUNK_MIN, .hi = KVS_STORE_REGISTER_CHUNK_MAX },
	{ K("register_delay_us", kv_uint), FIELD(register_delay_ns), .hi = REGISTER_DELAY_US_MAX,
	  .scale = KVS_STORE_NS_PER_US },
	{ K("copy_land_delay_us", kv_uint), FIELD(copy_land_delay_ns), .hi = LAND_DELAY_US_MAX,
	  .scale = KVS_STORE_NS_PER_US },
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))
/* Duplicates are found with one bit per key. */
_Static_assert(NKEYS <= 64, "the seen-keys mask is 64 bits");

#define KEY_NAME_MAX 32 /* longer than any key: no suggestion is computed for longer names */

/* Levenshtein distance of two short strings (both <= KEY_NAME_MAX). */
static size_t edit_distance(struct span a, const char *b)
{
	size_t nb = strlen(b), row[KEY_NAME_MAX + 1];

	for (size_t j = 0; j <= nb; j++)
		row[j] = j;
	for (size_t i = 1; i <= a.n; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= nb; j++) {
			size_t up = row[j];
			size_t best = diag + (a.s[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[nb];
}

/* The known key closest to an unknown one: within edit distance 2, else one
 * that starts with it (3 characters at least) or that it starts with. */
static const char *suggest(struct span key)
{
	const char *best = NULL;
	size_t best_d = 3;

	if (key.n > KEY_NAME_MAX)
		return NULL;
	for (size_t i = 0; i < NKEYS; i++) {
		size_t d = edit_distance(key, keys[i].name);

		if (d < best_d) {
			best_d = d;
			best = keys[i].name;
		}
	}
	for (size_t i = 0; i < NKEYS && !best; i++) {
		size_t n = strlen(keys[i].name);

		if ((key.n >= 3 && key.n < n && strncmp(keys[i].name, key.s, key.n) == 0) ||
		    (n < key.n && strncmp(keys[i].name, key.s, n) == 0))
			best = keys[i].name;
	}
	return best;
}

static const struct kv_key *find_key(struct span key)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (span_is(key, keys[i].name, false))
			return &keys[i];
	return NULL;
}

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* v without the spaces at either end. */
static struct span trim(struct span v)
{
	while (v.n && is_space(v.s[0])) {
		v.s++;
		v.n--;
	}
	while (v.n && is_space(v.s[v.n - 1]))
		v.n--;
	return v;
}

/* Keys whose value is a list (entries separated by ':', or ';' for Redis). */
static bool is_list(const struct kv_key *k)
{
	return k && (k->kind == kv_sizes || k->kind == kv_roots || k->kind == kv_cpus ||
		     strcmp(k->name, "redis_endpoints") == 0);
}

/* One "key=value" item (not empty, trimmed); spaces around '=' are dropped. */
static int parse_item(struct parse *p, struct span item, uint64_t *seen)
{
	const char *eq = memchr(item.s, '=', item.n);
	struct span key = trim((struct span){ item.s, eq ? (size_t)(eq - item.s) : item.n });
	struct span val = trim((struct span){ eq ? eq + 1 : item.s + item.n,
					       eq ? item.n - (size_t)(eq - item.s) - 1 : 0 });
	const struct kv_key *k;
	char shown[VALUE_SHOWN_MAX + 4];
	uint64_t bit;

	if (key.n == 0) {
		show(shown, item);
		return fail(p, "store config: item '%s' has no key (want key=value)", shown);
	}
	k = find_key(key);
	if (!k && !eq && is_list(p->prev)) {
		show(shown, item);
		return fail(p, "store config: item '%s' has no '=': if it is one more entry of "
			       "%s, entries are separated by '%s' (%s=a%sb); ',' separates items",
			    shown, p->prev->name,
			    strcmp(p->prev->name, "redis_endpoints") == 0 ? ";" : ":",
			    p->prev->name,
			    strcmp(p->prev->name, "redis_endpoints") == 0 ? ";" : ":");
	}
	if (!k) {
		const char *near = suggest(key);

		show(shown, key);
		if (near)
			return fail(p, "store config: unknown key '%s' (did you mean '%s'?)", shown,
				    near);
		return fail(p, "store config: unknown key '%s'", shown);
	}
	bit = UINT64_C(1) << (k - keys);
	if (*seen & bit)
		return fail(p, "store config: duplicate key %s (each key at most once)", k->name);
	*seen |= bit;
	if (!eq)
		return fail(p, "store config: invalid %s (no '=': want %s=value)", k->name, k->name);
	if (val.n == 0)
		return bad(p, k, val, "empty value");
	p->prev = k;
	return k->kind(p, k, val);
}

KVS_API int kvs_store_config_parse(struct kvs_store_config *cfg, const char *kv, char *err,
				   size_t errlen)
{
	struct parse p = { .cfg = cfg, .err = err, .errlen = errlen };
	uint64_t seen = 0;
	const char *s;

	if (err && errlen)
		err[0] = '\0';
	if (!cfg)
		return fail(&p, "store config: cfg is NULL");
	p.log.fn = cfg->log;
	p.log.arg = cfg->log_arg;
	if (!kv)
		return fail(&p, "store config: the key=value string is NULL");
	if (!*kv)
		return 0; /* no items */
	for (s = kv;; s++) {
		struct span raw = { s, strcspn(s, ",") }, item = trim(raw);
		int rc;

		if (item.n == 0)
			return fail(&p, "store config: empty item at byte %zu of the string "
					"(a leading, trailing or doubled ',')",
				    (size_t)(s - kv));
		rc = parse_item(&p, item, &seen);
		if (rc)
			return rc;
		s += raw.n;
		if (!*s)
			return 0;
	}
}
