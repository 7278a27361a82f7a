/*
 * The benchmark engine (perf.h): one object linked into daplofi-perf and
 * bench/fi-raw, so the test bodies whose figures the two programs compare
 * are built once, and read and changed in one place.
 */
#include "perf.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define PERF_DEFAULT_PORT	18515
#define PERF_MAX_SIZE		(64u << 20)	/* largest message: 64 MiB */
#define PERF_BW_BYTES_CAP	(1ull << 30)	/* a bandwidth size moves at most 1 GiB */
#define PERF_SYNC_LEN		8		/* barrier messages */
#define PERF_PLAN_MAGIC		0x44505246u	/* "DPRF" */
#define PERF_ACCEPT_MAGIC	0x44505241u	/* "DPRA" */
#define PERF_PLAN_VERSION	1
/* conn: the ping-pong on the main connection while the N extra EPs stay
 * connected and idle.  Fixed, not -I: conn's -S are endpoint counts, and
 * every count must be measured alike to compare them. */
#define PERF_CONN_LAT_SIZE	64u
#define PERF_CONN_LAT_ITERS	2000u
#define PERF_CONN_LAT_WARMUP	200u
#define PERF_MT_MAX		16u		/* write_mt: threads at most */

uint64_t perf_conn_t0;

const struct perf_test_info perf_tests[T_COUNT] = {
	[T_SEND_LAT]  = { "send_lat", "send", "send/recv ping-pong, one-way latency", true, false },
	[T_WRITE_LAT] = { "write_lat", "write", "RDMA write ping-pong, one-way latency", true, false },
	[T_READ_LAT]  = { "read_lat", "read", "RDMA read, round-trip latency", true, false },
	[T_SEND_BW]   = { "send_bw", NULL, "streaming send bandwidth", true, true },
	[T_WRITE_BW]  = { "write_bw", NULL, "streaming RDMA write bandwidth", true, true },
	[T_READ_BW]   = { "read_bw", NULL, "streaming RDMA read bandwidth", true, true },
	[T_REAP]      = { "reap", NULL,
			  "request completions reaped as events, bursts of -W RDMA writes",
			  true, true },
	[T_CONN]      = { "conn", NULL,
			  "connection set-up, memory per connected EP, latency with them idle",
			  true, false },
	[T_WRITE_MT]  = { "write_mt", NULL,
			  "streaming 64 B RDMA writes from -S threads, each on its own EP "
			  "and request queue, one IA", true, true },
	[T_WRITE_IDLE] = { "write_idle", NULL,
			   "streaming RDMA write bandwidth into a target that calls nothing",
			   true, true },
	[T_WRITE_IDLE_LAT] = { "write_idle_lat", NULL,
			       "RDMA write ping-pong, one-way latency, each side spinning on "
			       "memory and calling nothing", true, false },
	[T_WRITE_IMM_LAT] = { "write_imm_lat", "write_imm",
			      "RDMA write with immediate data ping-pong, one-way latency",
			      true, false },
	[T_ATOMIC_LAT] = { "atomic_lat", "atomic",
			   "8-byte remote fetch-and-add, round-trip latency", true, false },
	[T_EVENTS]    = { "events", NULL, "post_se + dequeue pairs, one thread", false, true },
	[T_WAKE]      = { "wake", NULL, "wake-up latency between two threads", false, false },
	[T_CNO]       = { "cno", NULL, "CNO wake-up latency between two threads", false, false },
	[T_UPCALL]    = { "upcall", NULL, "dat_evd_post_se to upcall latency", false, false },
};

const char *const perf_mode_names[M_UPCALL + 1] = {
	[M_POLL] = "poll", [M_WAIT] = "wait", [M_CNO] = "cno", [M_UPCALL] = "upcall",
};

/* --------------------------------------------------------------- --calls */

static const char *const perf_call_names[PC_COUNT] = {
	[PC_HIT] = "receive poll that found it", [PC_EMPTY] = "empty receive poll",
	[PC_POST_RECV] = "post recv", [PC_POST_SEND] = "post send",
	[PC_POST_WRITE] = "post write", [PC_REAP] = "reap",
};

struct perf_calls perf_calls;

/* The measured iterations begin. */
static void perf_calls_begin(void)
{
	if (perf_calls.want) {
		memset(perf_calls.ns, 0, sizeof(perf_calls.ns));
		memset(perf_calls.n, 0, sizeof(perf_calls.n));
		perf_calls.on = true;
	}
}

/* The phase ended: one line on stderr, averages per call and calls per
 * iteration, if this phase timed any. */
static void perf_calls_end(const char *tool, bool server, const char *test,
			   uint32_t size, uint32_t iters)
{
	char line[512];
	const char *sep = "";
	int len;

	if (!perf_calls.on)
		return;
	perf_calls.on = false;
	len = snprintf(line, sizeof(line), "%s: %s: calls, %s %" PRIu32 " B:", tool,
		       server ? "server" : "client", test, size);
	for (int k = 0; k < PC_COUNT && len > 0 && (size_t)len < sizeof(line); k++)
		if (perf_calls.n[k]) {
			len += snprintf(line + len, sizeof(line) - (size_t)len,
					"%s %s %.3f us (%.2f/it)", sep, perf_call_names[k],
					(double)perf_calls.ns[k] / (double)perf_calls.n[k] / 1000.0,
					(double)perf_calls.n[k] / (iters ? iters : 1));
			sep = ";";
		}
	fprintf(stderr, "%s\n", line);
}

/* ------------------------------------------------------------- the plan */

void perf_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

uint32_t perf_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void perf_put64(uint8_t *p, uint64_t v)
{
	perf_put32(p, (uint32_t)(v >> 32));
	perf_put32(p + 4, (uint32_t)v);
}

static uint64_t perf_get64(const uint8_t *p)
{
	return (uint64_t)perf_get32(p) << 32 | perf_get32(p + 4);
}

/* Layout: magic, version, mode, ntests, nsizes, tests[8], iters, warmup,
 * window, (reserved), addr, key, region, sizes[24]: 152 bytes. */
void perf_plan_encode(const struct perf_plan *pl, uint8_t out[PERF_PLAN_LEN])
{
	memset(out, 0, PERF_PLAN_LEN);
	perf_put32(out, PERF_PLAN_MAGIC);
	out[4] = PERF_PLAN_VERSION;
	out[5] = pl->mode;
	out[6] = pl->ntests;
	out[7] = pl->nsizes;
	memcpy(out + 8, pl->tests, PERF_MAX_TESTS);
	perf_put32(out + 16, pl->iters);
	perf_put32(out + 20, pl->warmup);
	perf_put32(out + 24, pl->window);
	perf_put32(out + 28, pl->cq_mod);	/* 0 from a plan of before --cq-mod */
	perf_put64(out + 32, pl->addr);
	perf_put64(out + 40, pl->key);
	perf_put64(out + 48, pl->region);
	for (int i = 0; i < PERF_MAX_SIZES; i++)
		perf_put32(out + 56 + 4 * i, pl->sizes[i]);
}

/* NULL, or why the bytes are not a plan we can serve. */
const char *perf_plan_decode(const uint8_t *in, size_t len, struct perf_plan *pl)
{
	memset(pl, 0, sizeof(*pl));
	if (len < 152 || perf_get32(in) != PERF_PLAN_MAGIC)
		return "the client is not daplofi-perf or fi-raw (no plan in the private data)";
	if (in[4] != PERF_PLAN_VERSION)
		return "the client speaks another plan version";
	pl->mode = in[5];
	pl->ntests = in[6];
	pl->nsizes = in[7];
	memcpy(pl->tests, in + 8, PERF_MAX_TESTS);
	pl->iters = perf_get32(in + 16);
	pl->warmup = perf_get32(in + 20);
	pl->window = perf_get32(in + 24);
	pl->cq_mod = perf_get32(in + 28);
	pl->addr = perf_get64(in + 32);
	pl->key = perf_get64(in + 40);
	pl->region = perf_get64(in + 48);
	for (int i = 0; i < PERF_MAX_SIZES; i++)
		pl->sizes[i] = perf_get32(in + 56 + 4 * i);
	if (pl->mode < M_POLL || pl->mode > M_UPCALL)
		return "bad mode in the plan";
	if (!pl->ntests || pl->ntests > PERF_MAX_TESTS || !pl->nsizes ||
	    pl->nsizes > PERF_MAX_SIZES)
		return "bad test or size count in the plan";
	for (int i = 0; i < pl->ntests; i++)
		if (pl->tests[i] < T_SEND_LAT || pl->tests[i] > T_ATOMIC_LAT)
			return "the plan names a test this server does not know";
	for (int i = 0; i < pl->nsizes; i++)
		if (!pl->sizes[i] || pl->sizes[i] > PERF_MAX_SIZE || pl->sizes[i] > pl->region ||
		    (pl->tests[0] == T_WRITE_MT && pl->sizes[i] > PERF_MT_MAX))
			return "bad size in the plan";
	if (!pl->iters || pl->window < 1 || pl->window > PERF_MAX_WINDOW)
		return "bad iteration count or window in the plan";
	if (pl->cq_mod > PERF_MAX_WINDOW)
		return "bad --cq-mod in the plan";
	return NULL;
}

/* Server's answer in the accept private data: its RDMA region. */
void perf_accept_encode(uint64_t addr, uint64_t key, uint64_t region,
			uint8_t out[PERF_ACCEPT_LEN])
{
	memset(out, 0, PERF_ACCEPT_LEN);
	perf_put32(out, PERF_ACCEPT_MAGIC);
	out[4] = PERF_PLAN_VERSION;
	perf_put64(out + 8, addr);
	perf_put64(out + 16, key);
	perf_put64(out + 24, region);
}

bool perf_accept_decode(const uint8_t *in, size_t len, uint64_t *addr,
			uint64_t *key, uint64_t *region)
{
	if (len < PERF_ACCEPT_LEN || perf_get32(in) != PERF_ACCEPT_MAGIC ||
	    in[4] != PERF_PLAN_VERSION)
		return false;
	*addr = perf_get64(in + 8);
	*key = perf_get64(in + 16);
	*region = perf_get64(in + 24);
	return true;
}

uint32_t perf_max_size(const struct perf_plan *pl)
{
	uint32_t m = PERF_SYNC_LEN;

	for (int i = 0; i < pl->nsizes; i++)
		if (pl->sizes[i] > m)
			m = pl->sizes[i];
	return m;
}

/* Iterations of one size: bandwidth sizes move at most PERF_BW_BYTES_CAP. */
static uint32_t perf_iters(const struct perf_plan *pl, enum perf_test t, uint32_t size)
{
	uint64_t n = pl->iters;

	if (t == T_CONN)
		return size;		/* conn: "sizes" are endpoint counts */
	if (t == T_WRITE_MT)
		return (uint32_t)n;	/* write_mt: thread counts; n, all threads together */
	if (perf_tests[t].bw && (uint64_t)size * n > PERF_BW_BYTES_CAP) {
		n = PERF_BW_BYTES_CAP / size;
		if (n < 100)
			n = 100 < pl->iters ? 100 : pl->iters;
	}
	return (uint32_t)n;
}

static uint32_t perf_warmup(const struct perf_plan *pl, enum perf_test t, uint32_t size)
{
	uint32_t n = perf_iters(pl, t, size);

	if (t == T_CONN)
		return 0;
	return pl->warmup < n ? pl->warmup : n;
}

/* -------------------------------------------------------------- options */

static enum perf_test perf_test_by_name(const char *s, size_t len)
{
	for (int t = T_SEND_LAT; t < T_COUNT; t++) {
		const struct perf_test_info *i = &perf_tests[t];

		if ((strlen(i->name) == len && !strncmp(s, i->name, len)) ||
		    (i->alias && strlen(i->alias) == len && !strncmp(s, i->alias, len)))
			return (enum perf_test)t;
	}
	return T_NONE;
}

/* "64", "4k", "1m", "1g" */
static int perf_parse_size(const char *s, char **end, uint64_t *out)
{
	unsigned long long v;

	errno = 0;
	v = strtoull(s, end, 10);
	if (errno || *end == s)
		return -1;
	switch (**end) {
	case 'k': case 'K': v <<= 10; (*end)++; break;
	case 'm': case 'M': v <<= 20; (*end)++; break;
	case 'g': case 'G': v <<= 30; (*end)++; break;
	default: break;
	}
	*out = v;
	return 0;
}

static int perf_add_size(struct perf_plan *pl, uint64_t v, const char *arg)
{
	if (v < 1 || v > PERF_MAX_SIZE) {
		fprintf(stderr, "sizes: %llu in '%s' is out of range (1 to 64m)\n",
			(unsigned long long)v, arg);
		return -1;
	}
	for (int i = 0; i < pl->nsizes; i++)
		if (pl->sizes[i] == v)
			return 0;
	if (pl->nsizes == PERF_MAX_SIZES) {
		fprintf(stderr, "sizes: '%s' gives more than %d sizes\n", arg, PERF_MAX_SIZES);
		return -1;
	}
	pl->sizes[pl->nsizes++] = (uint32_t)v;
	return 0;
}

/* "64,4k,64k", "64:1m" (powers of two from 64 to 1 MiB), "all" (1:1m),
 * or a mix: "1,64:4k,1m". */
static int perf_parse_sizes(const char *arg, struct perf_plan *pl)
{
	const char *s = arg;

	pl->nsizes = 0;
	if (!strcmp(arg, "all"))
		s = "1:1m";
	while (*s) {
		uint64_t a, b;
		char *end;

		if (perf_parse_size(s, &end, &a))
			goto bad;
		if (*end == ':') {
			if (perf_parse_size(end + 1, &end, &b) || b < a || !a)
				goto bad;
			for (uint64_t v = a; v <= b; v *= 2)
				if (perf_add_size(pl, v, arg))
					return -1;
		} else if (perf_add_size(pl, a, arg)) {
			return -1;
		}
		if (*end == ',')
			end++;
		else if (*end)
			goto bad;
		s = end;
	}
	if (!pl->nsizes)
		goto bad;
	/* ascending, as users read tables */
	for (int i = 1; i < pl->nsizes; i++)
		for (int j = i; j > 0 && pl->sizes[j - 1] > pl->sizes[j]; j--) {
			uint32_t t = pl->sizes[j];

			pl->sizes[j] = pl->sizes[j - 1];
			pl->sizes[j - 1] = t;
		}
	return 0;
bad:
	fprintf(stderr, "sizes: cannot parse '%s' (examples: 64  64,4k,64k  64:1m  all)\n", arg);
	return -1;
}

static int perf_parse_tests(const char *arg, struct perf_plan *pl)
{
	const char *s = arg;

	pl->ntests = 0;
	while (*s) {
		size_t len = strcspn(s, ",");
		enum perf_test t = perf_test_by_name(s, len);

		if (t == T_NONE) {
			fprintf(stderr, "tests: unknown test '%.*s' (known:", (int)len, s);
			for (int i = T_SEND_LAT; i < T_COUNT; i++)
				fprintf(stderr, " %s", perf_tests[i].name);
			fprintf(stderr, ")\n");
			return -1;
		}
		if (pl->ntests == PERF_MAX_TESTS) {
			fprintf(stderr, "tests: at most %d tests per run\n", PERF_MAX_TESTS);
			return -1;
		}
		pl->tests[pl->ntests++] = (uint8_t)t;
		s += len;
		if (*s == ',')
			s++;
	}
	return pl->ntests ? 0 : -1;
}

int perf_parse_uint(const char *arg, const char *what, unsigned long min,
		    unsigned long max, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max) {
		fprintf(stderr, "%s: '%s' is not a number from %lu to %lu\n", what, arg, min, max);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int perf_parse_mode(const char *arg, uint8_t *mode)
{
	for (int m = M_POLL; m <= M_UPCALL; m++)
		if (!strcmp(arg, perf_mode_names[m])) {
			*mode = (uint8_t)m;
			return 0;
		}
	fprintf(stderr, "mode: '%s' is not poll, wait, cno or upcall\n", arg);
	return -1;
}

/* name_opt: "IA name" (daplofi-perf) or "libfabric provider" (fi-raw). */
static void perf_usage(FILE *f, const char *prog, const char *name_opt,
		       const char *name_default)
{
	fprintf(f,
"usage: %s [options]                 server (waits for one client)\n"
"       %s [options] -h host         client: runs the tests against the server\n"
"       %s -t events|wake|cno        local tests, no server\n"
"options:\n"
"  -P name      %s (default %s)\n"
"  -s           server (the default)\n"
"  -h host      client: connect to this server (IPv4 address or name)\n"
"  -n port      port / connection qualifier (default %u)\n"
"  -t tests     comma list (default send_lat): send_lat write_lat read_lat\n"
"               send_bw write_bw read_bw reap conn write_mt write_idle\n"
"               write_idle_lat write_imm_lat atomic_lat events wake cno\n"
"               upcall\n"
"               (send, write, read: the latency tests; conn runs alone:\n"
"               its -S are endpoint counts, default 1,16,256,1024, and it\n"
"               times a 64 B ping-pong beside each count of idle EPs)\n"
"               write_mt: 64 B RDMA writes from -S threads (default 1,2,4;\n"
"               at most 16), each on an EP of its own; -I writes in all\n"
"               write_idle: write_bw into a target that calls nothing until\n"
"               the last write's byte shows (dtest -W's case): the\n"
"               provider's own progress must place the data\n"
"               write_idle_lat: write_lat where each side spins on memory\n"
"               and calls nothing (MPI one-sided, pscom): against\n"
"               write_lat -m poll, what a passive target costs\n"
"               write_imm_lat: RDMA writes with immediate data, each side\n"
"               waiting for the peer's by its receive completion\n"
"               atomic_lat: 8-byte fetch-and-adds on the server's region\n"
"               (-S ignored), each waited for: round trip\n"
"  -S sizes     64  |  64,4k,64k  |  64:1m (powers of two)  |  all (1:1m)\n"
"               (default 64,4k,64k)\n"
"  -I iters     iterations per size (default 10000; a bandwidth size moves\n"
"               at most 1 GiB)\n"
"  -w warmup    warm-up iterations per size, not measured (default iters/10,\n"
"               at most 1000)\n"
"  -W window    operations in flight in bandwidth tests (default 64, 1..%u;\n"
"               reads at most %u)\n"
"  -m mode      completion wait: poll | wait | cno | upcall (default poll;\n"
"               wake: wait)\n"
"  -p           same as -m poll;  -c  same as -m cno (dtest's letters)\n"
"  -T seconds   bound of every single wait (default 30)\n"
"  --csv        CSV rows;  --json  one JSON document;  --no-header  no CSV header\n"
"  --calls      send_lat, write_lat: time each poll, post and reap, print the\n"
"               averages on stderr (on each side that is given --calls)\n"
"  --cq-mod N   sends: one in N signaled and reaped, the others suppressed\n"
"               (perftest's --cq-mod; default 1: all signaled)\n"
"  -q           no progress lines;  -v  verbose\n"
"  --help       this text\n"
"The client sends the plan (tests, sizes, iterations, window, mode) to the\n"
"server in the connection's private data: give them to the client only.\n",
		prog, prog, prog, name_opt, name_default, PERF_DEFAULT_PORT,
		PERF_MAX_WINDOW, PERF_READ_WINDOW);
}

/* 0: go; PERF_EXIT_USAGE: bad options (printed); -1: --help printed. */
int perf_parse_opts(int argc, char **argv, struct perf_opts *o,
		    const char *name_opt, const char *name_default)
{
	static const struct option lopts[] = {
		{ "csv", no_argument, NULL, 1 },
		{ "json", no_argument, NULL, 2 },
		{ "no-header", no_argument, NULL, 3 },
		{ "help", no_argument, NULL, 4 },
		{ "calls", no_argument, NULL, 5 },
		{ "cq-mod", required_argument, NULL, 6 },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t v;
	int c;

	o->name = name_default;
	o->port = PERF_DEFAULT_PORT;
	o->timeout_s = 30;
	o->header = true;
	o->plan.mode = M_POLL;
	o->plan.iters = 10000;
	o->plan.window = 64;
	o->plan.ntests = 1;
	o->plan.tests[0] = T_SEND_LAT;
	o->plan.nsizes = 3;
	o->plan.sizes[0] = 64;
	o->plan.sizes[1] = 4096;
	o->plan.sizes[2] = 65536;
	while ((c = getopt_long(argc, argv, "P:sh:n:t:S:I:w:W:m:pcT:qv", lopts, NULL)) != -1) {
		switch (c) {
		case 'P': o->name = optarg; break;
		case 's': o->host = NULL; break;
		case 'h': o->host = optarg; break;
		case 'n':
			if (perf_parse_uint(optarg, "-n port", 1, 65535, &v))
				return PERF_EXIT_USAGE;
			o->port = v;
			break;
		case 't':
			if (perf_parse_tests(optarg, &o->plan))
				return PERF_EXIT_USAGE;
			break;
		case 'S':
			if (perf_parse_sizes(optarg, &o->plan))
				return PERF_EXIT_USAGE;
			o->sizes_set = true;
			break;
		case 'I':
			if (perf_parse_uint(optarg, "-I iterations", 1, 100000000, &o->plan.iters))
				return PERF_EXIT_USAGE;
			o->iters_set = true;
			break;
		case 'w':
			if (perf_parse_uint(optarg, "-w warm-up", 0, 100000000, &o->plan.warmup))
				return PERF_EXIT_USAGE;
			o->warmup_set = true;
			break;
		case 'W':
			if (perf_parse_uint(optarg, "-W window", 1, PERF_MAX_WINDOW, &o->plan.window))
				return PERF_EXIT_USAGE;
			break;
		case 'm':
			if (perf_parse_mode(optarg, &o->plan.mode))
				return PERF_EXIT_USAGE;
			o->mode_set = true;
			break;
		case 'p': o->plan.mode = M_POLL; o->mode_set = true; break;
		case 'c': o->plan.mode = M_CNO; o->mode_set = true; break;
		case 'T':
			if (perf_parse_uint(optarg, "-T seconds", 1, 4000, &v))
				return PERF_EXIT_USAGE;
			o->timeout_s = v;
			break;
		case 'q': o->quiet = true; break;
		case 'v': o->verbose = true; break;
		case 1: o->fmt = F_CSV; break;
		case 2: o->fmt = F_JSON; break;
		case 3: o->header = false; break;
		case 4:
			perf_usage(stdout, o->prog, name_opt, name_default);
			return -1;
		case 5: perf_calls.want = true; break;	/* --calls */
		case 6:
			if (perf_parse_uint(optarg, "--cq-mod", 1, PERF_MAX_WINDOW,
					    &o->plan.cq_mod))
				return PERF_EXIT_USAGE;
			break;
		default:
			perf_usage(stderr, o->prog, name_opt, name_default);
			return PERF_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s' (the server is -h host)\n",
			o->prog, argv[optind]);
		return PERF_EXIT_USAGE;
	}
	for (int k = 0; k < o->plan.ntests; k++)
		if ((o->plan.tests[k] == T_CONN || o->plan.tests[k] == T_WRITE_MT) &&
		    o->plan.ntests > 1) {
			fprintf(stderr, "%s: %s runs alone (its -S are %s counts)\n", o->prog,
				perf_tests[o->plan.tests[k]].name,
				o->plan.tests[k] == T_CONN ? "endpoint" : "thread");
			return PERF_EXIT_USAGE;
		}
	if (o->plan.ntests == 1 && o->plan.tests[0] == T_WRITE_MT) {
		if (!o->sizes_set) {
			o->plan.nsizes = 3;
			o->plan.sizes[0] = 1;
			o->plan.sizes[1] = 2;
			o->plan.sizes[2] = 4;
		}
		for (int i = 0; i < o->plan.nsizes; i++)
			if (o->plan.sizes[i] > PERF_MT_MAX) {
				fprintf(stderr, "%s: write_mt: at most %u threads (-S %" PRIu32 ")\n",
					o->prog, PERF_MT_MAX, o->plan.sizes[i]);
				return PERF_EXIT_USAGE;
			}
	}
	if (o->plan.ntests == 1 && o->plan.tests[0] == T_CONN && !o->sizes_set) {
		o->plan.nsizes = 4;
		o->plan.sizes[0] = 1;
		o->plan.sizes[1] = 16;
		o->plan.sizes[2] = 256;
		o->plan.sizes[3] = 1024;
	}
	/* the wake-up tests are about sleeping: they wait unless told */
	if (!o->mode_set && o->plan.ntests == 1 && o->plan.tests[0] == T_WAKE)
		o->plan.mode = M_WAIT;
	if (!o->warmup_set) {
		o->plan.warmup = o->plan.iters / 10;
		if (o->plan.warmup > 1000)
			o->plan.warmup = 1000;
	}
	return 0;
}

/* ------------------------------------------------------------- results */

static int perf_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* samples: one-way ns per iteration (sorted in place). */
void perf_lat_stats(uint32_t *ns, uint32_t n, uint64_t total_ns,
		    struct perf_result *r)
{
	size_t i99;

	qsort(ns, n, sizeof(*ns), perf_cmp_u32);
	r->lat = true;
	r->avg_us = n ? (double)total_ns / n / 1e3 : 0;
	r->p50_us = n ? ns[n / 2] / 1e3 : 0;
	i99 = n ? ((size_t)n * 99 + 99) / 100 - 1 : 0;
	r->p99_us = n ? ns[i99 < n ? i99 : n - 1] / 1e3 : 0;
	r->max_us = n ? ns[n - 1] / 1e3 : 0;
}

void perf_out_begin(struct perf_out *o)
{
	if (o->fmt == F_CSV && o->header)
		printf("tool,test,mode,bytes,iters,window,avg_us,p50_us,p99_us,max_us,mb_s,msg_s,"
		       "kib_per_ep\n");
	else if (o->fmt == F_JSON)
		printf("{\"tool\": \"%s\", \"name\": \"%s\", \"results\": [", o->tool, o->name);
	o->started = true;
	fflush(stdout);
}

void perf_out_row(struct perf_out *o, const struct perf_result *r)
{
	const char *tn = perf_tests[r->test].name, *mn = perf_mode_names[r->mode];

	if (o->fmt == F_CSV) {
		printf("%s,%s,%s,%" PRIu32 ",%" PRIu32 ",%" PRIu32 ",", o->tool, tn, mn, r->size,
		       r->iters, r->window);
		/* conn: the latency of its ping-pong with the N EPs idle; its
		 * set-up rate is msg_s (connects/s) */
		if (r->lat)
			printf("%.3f,%.3f,%.3f,%.3f,", r->avg_us, r->p50_us, r->p99_us, r->max_us);
		else
			printf(",,,,");
		printf("%.2f,%.0f,", r->mb_s, r->msg_s);
		if (r->test == T_CONN)
			printf("%.2f", r->kib_ep);
		printf("\n");
	} else if (o->fmt == F_JSON) {
		printf("%s\n  {\"test\": \"%s\", \"mode\": \"%s\", \"bytes\": %" PRIu32
		       ", \"iters\": %" PRIu32 ", \"window\": %" PRIu32, o->nrows ? "," : "", tn, mn,
		       r->size, r->iters, r->window);
		if (r->lat)
			printf(", \"avg_us\": %.3f, \"p50_us\": %.3f, \"p99_us\": %.3f, "
			       "\"max_us\": %.3f", r->avg_us, r->p50_us, r->p99_us, r->max_us);
		if (r->test == T_CONN)
			printf(", \"us_per_conn\": %.3f, \"kib_per_ep\": %.2f", r->conn_us,
			       r->kib_ep);
		printf(", \"mb_s\": %.2f, \"msg_s\": %.0f}", r->mb_s, r->msg_s);
	} else {
		if (o->last_test != r->test) {
			const char *unit = r->test == T_READ_LAT ? "round-trip" :
					   r->test == T_EVENTS ? "per pair" : "one-way";

			printf("%s%s: %s, %s, mode %s (%s)\n", o->nrows ? "\n" : "", o->tool,
			       tn, o->name, mn, perf_tests[r->test].what);
			if (r->test == T_EVENTS)
				printf("%10s %9s %10s %12s\n", "pairs", "", "ns/pair", "M pairs/s");
			else if (r->test == T_REAP)
				printf("%10s %9s %7s %10s %12s\n", "bytes", "reaped", "burst",
				       "ns/event", "M events/s");
			else if (r->test == T_CONN)
				printf("%10s %7s %12s %10s %12s %9s %9s %9s %9s   (client side; "
				       "%u B ping-pong with the EPs idle, one-way us)\n", "endpoints",
				       "window", "connects/s", "us/conn", "RSS KiB/EP", "avg", "p50",
				       "p99", "max", PERF_CONN_LAT_SIZE);
			else if (perf_tests[r->test].bw)
				printf("%10s %9s %7s %10s %12s %9s\n",
				       r->test == T_WRITE_MT ? "threads" : "bytes", "iters", "window",
				       "MB/s", "msg/s", "us/msg");
			else
				printf("%10s %9s %9s %9s %9s %9s %10s %10s   (latency %s, us)\n",
				       "bytes", "iters", "avg", "p50", "p99", "max", "MB/s", "msg/s",
				       unit);
			o->last_test = r->test;
		}
		if (r->test == T_EVENTS)
			printf("%10" PRIu32 " %9s %10.1f %12.2f\n", r->iters, "",
			       r->msg_s > 0 ? 1e9 / r->msg_s : 0, r->msg_s / 1e6);
		else if (r->test == T_REAP)
			printf("%10" PRIu32 " %9" PRIu32 " %7" PRIu32 " %10.1f %12.2f\n", r->size,
			       r->iters, r->window, r->msg_s > 0 ? 1e9 / r->msg_s : 0,
			       r->msg_s / 1e6);
		else if (r->test == T_CONN)
			printf("%10" PRIu32 " %7" PRIu32 " %12.0f %10.1f %12.1f %9.2f %9.2f %9.2f"
			       " %9.2f\n", r->size, r->window, r->msg_s, r->conn_us, r->kib_ep, r->avg_us,
			       r->p50_us, r->p99_us, r->max_us);
		else if (!r->lat)
			printf("%10" PRIu32 " %9" PRIu32 " %7" PRIu32 " %10.1f %12.0f %9.2f\n",
			       r->size, r->iters, r->window, r->mb_s, r->msg_s,
			       r->msg_s > 0 ? 1e6 / r->msg_s : 0);
		else
			printf("%10" PRIu32 " %9" PRIu32 " %9.2f %9.2f %9.2f %9.2f %10.1f %10.0f\n",
			       r->size, r->iters, r->avg_us, r->p50_us, r->p99_us, r->max_us,
			       r->mb_s, r->msg_s);
	}
	o->nrows++;
	fflush(stdout);
}

void perf_out_end(struct perf_out *o)
{
	if (o->fmt == F_JSON && o->started)
		printf("\n]}\n");
	fflush(stdout);
}

/* ------------------------------------------------------------- progress */

static void perf_progress_start(struct perf_progress *p, const char *what, uint32_t size,
				uint32_t total)
{
	p->what = what;
	p->size = size;
	p->total = total;
	p->start = perf_now();
	p->next = p->start + 1000000000ull;
	p->shown = false;
}

static void perf_progress_tick(struct perf_progress *p, uint32_t done)
{
	uint64_t t;

	if (p->quiet || (done & 255))
		return;
	t = perf_now();
	if (t < p->next)
		return;
	p->next = t + (p->tty ? 500000000ull : 5000000000ull);
	fprintf(stderr, "%s%s %" PRIu32 " B: %" PRIu32 "/%" PRIu32 " (%.0f%%, %.1f s)%s",
		p->tty ? "\r" : "", p->what, p->size, done, p->total,
		100.0 * done / (p->total ? p->total : 1), (t - p->start) / 1e9, p->tty ? "" : "\n");
	p->shown = true;
}

static void perf_progress_end(struct perf_progress *p)
{
	if (p->shown && p->tty)
		fprintf(stderr, "\r%60s\r", "");
	p->shown = false;
}

/* ------------------------------------------------------------ transport */

/* A thousand connections need more descriptors than a default soft limit
 * of 1024: take the hard limit. */
void perf_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* Resident memory of this process, KiB (/proc/self/statm). */
static long perf_rss_kib(void)
{
	long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return 0;
	if (fscanf(f, "%ld %ld", &size, &res) != 2)
		res = 0;
	fclose(f);
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Queue depths the transports must give the endpoint. */
int perf_req_depth(const struct perf_plan *pl)
{
	return (int)pl->window + 4;
}

int perf_recv_depth(const struct perf_plan *pl)
{
	return (int)pl->window + 4;
}

/* A run over `buf`, three regions of `region` bytes (receive, RDMA target,
 * send), as both daplofi-perf and fi-raw register it. */
void perf_run_init(struct perf_run *r, const struct perf_ops *ops, void *x,
		   const char *tool, uint8_t *buf, size_t region,
		   const struct perf_plan *pl, struct perf_out *out, bool server,
		   unsigned timeout_s, bool quiet)
{
	memset(r, 0, sizeof(*r));
	r->ops = ops;
	r->x = x;
	r->tool = tool;
	r->server = server;
	r->plan = pl;
	r->rx = buf;
	r->rdma = buf + region;
	r->tx = buf + 2 * region;
	r->region = region;
	r->req_depth = perf_req_depth(pl);
	r->timeout_ns = (uint64_t)timeout_s * 1000000000u;
	r->prog.quiet = quiet || server;
	r->prog.tty = isatty(2);
	r->out = out;
}

static uint64_t perf_deadline(const struct perf_run *r)
{
	return perf_now() + r->timeout_ns;
}

static int perf_fail(const struct perf_run *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int perf_fail(const struct perf_run *r, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: %s: ", r->tool, r->server ? "server" : "client");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return PERF_ERR;
}

static int perf_timeout(const struct perf_run *r, const char *what)
{
	return perf_fail(r, "%s: nothing within %.0f s (-T): is the peer alive?", what,
			 r->timeout_ns / 1e9);
}

/* Reap request completions; block until `outstanding` <= target. */
static int perf_reap_to(struct perf_run *r, int target, const char *what)
{
	while (r->outstanding > target) {
		int n = r->ops->req_done(r->x, r->outstanding, perf_deadline(r));

		if (n == PERF_TIMEDOUT)
			return perf_timeout(r, what);
		if (n < 0)
			return PERF_ERR;
		r->outstanding -= n;
	}
	return PERF_OK;
}

/* Reap whatever request completions are there, without waiting. */
static int perf_reap_some(struct perf_run *r)
{
	int n;

	if (!r->outstanding)
		return PERF_OK;
	uint64_t t0 = perf_call_t0();

	n = r->ops->req_done(r->x, r->outstanding, 0);
	perf_call_done(PC_REAP, t0);
	if (n < 0)
		return PERF_ERR;
	r->outstanding -= n;
	return PERF_OK;
}

enum perf_op { OP_SEND, OP_WRITE, OP_READ, OP_WRITE_IMM, OP_ATOMIC };

/* Post one request, keeping at most `limit` in flight. */
static int perf_post(struct perf_run *r, enum perf_op op, size_t len, int limit)
{
	int rc;

	if (limit > r->req_depth)
		limit = r->req_depth;
	if (r->outstanding >= limit &&
	    perf_reap_to(r, limit - 1, "waiting for a request completion"))
		return PERF_ERR;
	uint64_t t0 = perf_call_t0();

	/* --cq-mod N: every Nth send signaled, the others suppressed
	 * (perftest's cq_mod) */
	bool sig = r->plan->cq_mod <= 1 || ++r->sends % r->plan->cq_mod == 0;

	rc = op == OP_SEND ? r->ops->post_send(r->x, len, sig) :
	     op == OP_WRITE ? r->ops->post_write(r->x, len) :
	     op == OP_WRITE_IMM ? r->ops->post_write_imm(r->x, len, r->seq) :
	     op == OP_ATOMIC ? r->ops->post_atomic(r->x) : r->ops->post_read(r->x, len);
	if (op != OP_READ && op != OP_ATOMIC)
		perf_call_done(op == OP_SEND ? PC_POST_SEND : PC_POST_WRITE, t0);
	if (rc == PERF_NOCOMP)
		return PERF_OK;
	if (rc)
		return PERF_ERR;
	r->outstanding++;
	return PERF_OK;
}

/* Wait (at most `mult` times -T) for one receive of `len` bytes and post a
 * new receive. */
static int perf_recv_long(struct perf_run *r, size_t len, const char *what,
			  unsigned mult)
{
	size_t got = 0;
	int rc = r->ops->recv_done(r->x, &got, perf_now() + r->timeout_ns * mult);

	if (rc == PERF_TIMEDOUT)
		return perf_timeout(r, what);
	if (rc)
		return PERF_ERR;
	if (got != len)
		return perf_fail(r, "%s: received %zu bytes, expected %zu", what, got, len);
	uint64_t t0 = perf_call_t0();

	rc = r->ops->post_recv(r->x);
	perf_call_done(PC_POST_RECV, t0);
	return rc ? PERF_ERR : PERF_OK;
}

static int perf_recv(struct perf_run *r, size_t len, const char *what)
{
	return perf_recv_long(r, len, what, 1);
}

/* The receive completion of the peer's RDMA write with immediate data:
 * its length, and a receive posted again where it took one. */
static int perf_recv_imm(struct perf_run *r, size_t len, const char *what)
{
	size_t got = 0;
	int rc;

	if (r->ops->imm_takes_recv)
		return perf_recv(r, len, what);
	/* the length is not checked: libfabric tcp 1.17 reports 0 for a
	 * remote write's completion */
	(void)len;
	rc = r->ops->recv_done(r->x, &got, perf_now() + r->timeout_ns);
	if (rc == PERF_TIMEDOUT)
		return perf_timeout(r, what);
	return rc ? PERF_ERR : PERF_OK;
}

/* Barrier: the client sends, the server answers.  Between two barriers the
 * message counts of both sides are fixed by the plan.  A server waiting for
 * the end of a phase it takes no part in (RDMA target) waits `mult` times
 * longer than -T. */
static int perf_barrier(struct perf_run *r, const char *what, unsigned mult)
{
	if (r->server) {
		if (perf_recv_long(r, PERF_SYNC_LEN, what, mult) ||
		    perf_post(r, OP_SEND, PERF_SYNC_LEN, r->req_depth))
			return PERF_ERR;
	} else {
		if (perf_post(r, OP_SEND, PERF_SYNC_LEN, r->req_depth) ||
		    perf_recv(r, PERF_SYNC_LEN, what))
			return PERF_ERR;
	}
	return perf_reap_some(r);
}

static uint8_t perf_next_seq(struct perf_run *r)
{
	r->seq = (uint8_t)(r->seq % 255 + 1);	/* 1..255: never the reset value */
	return r->seq;
}

/* Spin until the last byte of an incoming RDMA write carries v.  call:
 * reaping request completions meanwhile (dat_evd_dequeue / fi_cq_read,
 * which also drives the provider's progress: write_lat); otherwise calling
 * nothing of the transport, as MPI one-sided and pscom's eager rings poll
 * memory (write_idle_lat): only the provider, on its own, can place the
 * peer's write. */
static int perf_poll_byte(struct perf_run *r, size_t size, uint8_t v, bool call)
{
	const uint8_t *p = r->rdma + size - 1;
	uint64_t deadline = 0;
	unsigned spins = 0;

	while (__atomic_load_n(p, __ATOMIC_ACQUIRE) != v) {
		if (call) {
			/* a raw libfabric target has no other progress */
			int n = r->ops->req_done(r->x, r->outstanding > 0 ? r->outstanding : 1, 0);

			if (n < 0)
				return PERF_ERR;
			r->outstanding -= n;
		}
		if (++spins == 4096) {
			uint64_t t = perf_now();

			spins = 0;
			if (!deadline)
				deadline = t + r->timeout_ns;
			else if (t > deadline)
				return perf_timeout(r, call ? "write_lat: polling for the peer's RDMA "
							      "write" :
							      "write_idle_lat: spinning, calling "
							      "nothing, for the peer's RDMA write");
		}
	}
	return PERF_OK;
}

/* write_idle's target: look at the last byte of the RDMA region every
 * 50 us, sleeping in between, until it carries v, and call nothing of the
 * transport meanwhile: whatever lands, its provider placed on its own.
 * The sleep leaves the CPU to the provider, as a target busy with other
 * work would (dtest -W spins instead). */
static int perf_idle_until(struct perf_run *r, size_t size, uint8_t v, uint64_t deadline)
{
	const struct timespec look = { .tv_sec = 0, .tv_nsec = 50000 };

	while (__atomic_load_n(r->rdma + size - 1, __ATOMIC_ACQUIRE) != v) {
		if (perf_now() > deadline)
			return perf_timeout(r, "write_idle: waiting, calling nothing, for the last "
					    "RDMA write to land");
		nanosleep(&look, NULL);
	}
	return PERF_OK;
}

/* ----------------------------------------------------------- test bodies */

/* The send/recv ping-pong of send_lat, `total` iterations of which the
 * first `warm` are not measured: the client sends and waits for the pong,
 * the server waits for the ping and answers.  The client keeps the one-way
 * time (round trip / 2) of each measured iteration in r->samples; *t0 (if
 * t0) is the start of the measured ones.  ping, pong: what the waits say
 * when nothing comes. */
static int perf_pingpong(struct perf_run *r, uint32_t size, uint32_t warm,
			 uint32_t total, const char *ping, const char *pong, uint64_t *t0)
{
	for (uint32_t i = 0; i < total; i++) {
		uint64_t it0;

		if (i == warm) {
			if (t0)
				*t0 = perf_now();
			perf_calls_begin();
		}
		it0 = perf_now();
		if (r->server) {
			if (perf_recv(r, size, ping) || perf_post(r, OP_SEND, size, r->req_depth))
				return PERF_ERR;
		} else {
			if (perf_post(r, OP_SEND, size, r->req_depth) || perf_recv(r, size, pong))
				return PERF_ERR;
			if (i >= warm)
				r->samples[i - warm] = (uint32_t)((perf_now() - it0) / 2);
		}
		if (perf_reap_some(r))
			return PERF_ERR;
		perf_progress_tick(&r->prog, i);
	}
	return PERF_OK;
}

/* write_mt: one thread's share of the writes, on its own endpoint.  All
 * threads post their warm-up, reap it and meet at `start` (the clock starts
 * there), then stream their share with at most `window` in flight each. */
struct perf_mt {
	struct perf_run *r;
	uint32_t k, warm, n;
	int window;
	pthread_barrier_t *start;
	int rc;
};

static int perf_mt_reap(struct perf_mt *m, int *outstanding, int target)
{
	while (*outstanding > target) {
		int got = m->r->ops->mt_reap(m->r->x, m->k, *outstanding, perf_deadline(m->r));

		if (got == PERF_TIMEDOUT)
			return perf_timeout(m->r, "write_mt: waiting for a write's completion");
		if (got < 0)
			return PERF_ERR;
		*outstanding -= got;
	}
	return PERF_OK;
}

static int perf_mt_stream(struct perf_mt *m, uint32_t count, int *outstanding)
{
	for (uint32_t i = 0; i < count; i++) {
		if (*outstanding >= m->window &&
		    perf_mt_reap(m, outstanding, m->window - 1))
			return PERF_ERR;
		if (m->r->ops->mt_write(m->r->x, m->k))
			return PERF_ERR;
		(*outstanding)++;
	}
	return perf_mt_reap(m, outstanding, 0);
}

static void *perf_mt_main(void *arg)
{
	struct perf_mt *m = arg;
	int outstanding = 0;

	m->rc = perf_mt_stream(m, m->warm, &outstanding);
	pthread_barrier_wait(m->start);		/* even after a failure: others wait */
	if (m->rc == PERF_OK)
		m->rc = perf_mt_stream(m, m->n, &outstanding);
	return NULL;
}

/* The client's part of write_mt: `nt` threads, n writes in all; the time
 * from the start barrier to the last thread's last completion. */
static int perf_mt_run(struct perf_run *r, uint32_t nt, uint32_t warm, uint32_t n,
		       int window, uint64_t *elapsed)
{
	struct perf_mt m[PERF_MT_MAX];
	pthread_t tid[PERF_MT_MAX];
	pthread_barrier_t start;
	uint32_t started = 0;
	uint64_t t0;
	int rc = PERF_OK;

	if (pthread_barrier_init(&start, NULL, nt + 1))
		return perf_fail(r, "write_mt: pthread_barrier_init failed");
	for (uint32_t k = 0; k < nt; k++) {
		m[k] = (struct perf_mt){ .r = r, .k = k, .warm = warm / nt,
					 .n = n / nt + (k < n % nt), .window = window,
					 .start = &start };
		if (pthread_create(&tid[k], NULL, perf_mt_main, &m[k]))
			break;
		started++;
	}
	if (started < nt) {
		/* the barrier counts nt + 1: those started would wait forever */
		fprintf(stderr, "%s: client: write_mt: could not start thread %u\n", r->tool,
			started);
		exit(PERF_EXIT_FAIL);
	}
	pthread_barrier_wait(&start);
	t0 = perf_now();
	for (uint32_t k = 0; k < nt; k++) {
		pthread_join(tid[k], NULL);
		if (m[k].rc != PERF_OK)
			rc = PERF_ERR;
	}
	*elapsed = perf_now() - t0;
	pthread_barrier_destroy(&start);
	return rc;
}

/* One size of one peer test; the client fills res. */
static int perf_phase(struct perf_run *r, enum perf_test t, uint32_t size,
		      struct perf_result *res)
{
	const struct perf_plan *pl = r->plan;
	uint32_t n = perf_iters(pl, t, size), warm = perf_warmup(pl, t, size);
	uint32_t total = warm + n;
	int window = (int)pl->window;
	bool poll = pl->mode == M_POLL;
	bool passive = t == T_READ_LAT || t == T_WRITE_BW || t == T_READ_BW || t == T_REAP ||
		       t == T_WRITE_IDLE || t == T_ATOMIC_LAT;
	uint64_t t0 = 0, t1, it0, t_up = 0;
	long rss0 = 0, rss1 = 0;
	const char *tn = perf_tests[t].name;

	if (t == T_READ_BW && window > PERF_READ_WINDOW)
		window = PERF_READ_WINDOW;
	memset(res, 0, sizeof(*res));
	res->test = t;
	res->mode = pl->mode;
	res->size = size;
	res->iters = n;
	res->window = perf_tests[t].bw ? (uint32_t)window : 1;
	r->seq = 0;
	if (t != T_CONN && t != T_WRITE_MT) {	/* whose -S are counts */
		r->rdma[size - 1] = 0;
		r->tx[size - 1] = 0;
	}
	if ((t == T_WRITE_IMM_LAT && !r->ops->post_write_imm) ||
	    (t == T_ATOMIC_LAT && !r->ops->post_atomic))
		return perf_fail(r, "%s: not in this program", tn);
	if ((t == T_WRITE_IDLE || t == T_WRITE_IDLE_LAT) && !r->ops->idle_target)
		return perf_fail(r, "%s: not in this program: raw libfabric tcp moves "
				 "data only inside its calls, a target that calls nothing is "
				 "never written", tn);
	if (perf_barrier(r, "start of a test phase", 1))
		return PERF_ERR;
	perf_progress_start(&r->prog, tn, size, total);

	switch (t) {
	case T_SEND_LAT:
		if (perf_pingpong(r, size, warm, total, "send_lat: waiting for the ping",
				  "send_lat: waiting for the pong", &t0))
			return PERF_ERR;
		break;

	case T_WRITE_LAT:
		/* poll: spin on the last byte of the RDMA region (perftest,
		 * dtest -W).  wait/cno: there is no event for an incoming
		 * write in DAT, so each write is followed by a 0-byte send
		 * whose receive wakes the peer (ordering: send after write). */
		for (uint32_t i = 0; i < total; i++) {
			uint8_t v = perf_next_seq(r);

			if (i == warm) {
				t0 = perf_now();
				perf_calls_begin();
			}
			it0 = perf_now();
			if (r->server) {
				if (poll ? perf_poll_byte(r, size, v, true) :
					   perf_recv(r, 0, "write_lat: waiting for the notification"))
					return PERF_ERR;
				if (r->rdma[size - 1] != v)
					return perf_fail(r, "write_lat: notified, but the RDMA "
							 "write has not landed (byte %u, expected %u)",
							 r->rdma[size - 1], v);
				r->tx[size - 1] = v;
				if (perf_post(r, OP_WRITE, size, r->req_depth) ||
				    (!poll && perf_post(r, OP_SEND, 0, r->req_depth)))
					return PERF_ERR;
			} else {
				r->tx[size - 1] = v;
				if (perf_post(r, OP_WRITE, size, r->req_depth) ||
				    (!poll && perf_post(r, OP_SEND, 0, r->req_depth)))
					return PERF_ERR;
				if (poll ? perf_poll_byte(r, size, v, true) :
					   perf_recv(r, 0, "write_lat: waiting for the notification"))
					return PERF_ERR;
				if (i >= warm)
					r->samples[i - warm] = (uint32_t)((perf_now() - it0) / 2);
				if (r->rdma[size - 1] != v)
					return perf_fail(r, "write_lat: notified, but the RDMA "
							 "write has not landed (byte %u, expected %u)",
							 r->rdma[size - 1], v);
			}
			if (perf_reap_some(r))
				return PERF_ERR;
			perf_progress_tick(&r->prog, i);
		}
		break;

	case T_WRITE_IMM_LAT:
		/* write_lat, each write carrying its sequence number as
		 * immediate data, whose receive completion (taken by the run's
		 * mode) says it landed: no 0-byte send after it, no spin */
		for (uint32_t i = 0; i < total; i++) {
			uint8_t v = perf_next_seq(r);

			if (i == warm) {
				t0 = perf_now();
				perf_calls_begin();
			}
			it0 = perf_now();
			if (r->server) {
				if (perf_recv_imm(r, size, "write_imm_lat: waiting for the ping"))
					return PERF_ERR;
				if (r->rdma[size - 1] != v)
					return perf_fail(r, "write_imm_lat: its receive completed, "
							 "but the write has not landed (byte %u, "
							 "expected %u)", r->rdma[size - 1], v);
				r->tx[size - 1] = v;
				if (perf_post(r, OP_WRITE_IMM, size, r->req_depth))
					return PERF_ERR;
			} else {
				r->tx[size - 1] = v;
				if (perf_post(r, OP_WRITE_IMM, size, r->req_depth) ||
				    perf_recv_imm(r, size, "write_imm_lat: waiting for the pong"))
					return PERF_ERR;
				if (i >= warm)
					r->samples[i - warm] = (uint32_t)((perf_now() - it0) / 2);
				if (r->rdma[size - 1] != v)
					return perf_fail(r, "write_imm_lat: its receive completed, "
							 "but the write has not landed (byte %u, "
							 "expected %u)", r->rdma[size - 1], v);
			}
			if (perf_reap_some(r))
				return PERF_ERR;
			perf_progress_tick(&r->prog, i);
		}
		break;

	case T_WRITE_IDLE_LAT:
		/* write_lat's poll form, but the spin calls nothing: each side
		 * posts its write, reaps what has completed without waiting,
		 * and spins on memory.  Against write_lat -m poll (whose spin
		 * reads the CQ) it shows what a passive target costs. */
		for (uint32_t i = 0; i < total; i++) {
			uint8_t v = perf_next_seq(r);

			if (i == warm)
				t0 = perf_now();
			it0 = perf_now();
			if (r->server && perf_poll_byte(r, size, v, false))
				return PERF_ERR;
			r->tx[size - 1] = v;
			if (perf_post(r, OP_WRITE, size, r->req_depth) || perf_reap_some(r))
				return PERF_ERR;
			if (!r->server) {
				if (perf_poll_byte(r, size, v, false))
					return PERF_ERR;
				if (i >= warm)
					r->samples[i - warm] = (uint32_t)((perf_now() - it0) / 2);
			}
			perf_progress_tick(&r->prog, i);
		}
		break;

	case T_ATOMIC_LAT:
		/* read_lat's loop: the server is the passive target, and its
		 * first 8 bytes end at warm + n */
		if (r->server)
			break;
		if (perf_reap_to(r, 0, "atomic_lat: draining"))
			return PERF_ERR;
		for (uint32_t i = 0; i < total; i++) {
			if (i == warm)
				t0 = perf_now();
			it0 = perf_now();
			if (perf_post(r, OP_ATOMIC, 8, 1) ||
			    perf_reap_to(r, 0, "atomic_lat: waiting for the fetch-and-add"))
				return PERF_ERR;
			if (i >= warm)
				r->samples[i - warm] = (uint32_t)(perf_now() - it0);
			perf_progress_tick(&r->prog, i);
		}
		break;

	case T_READ_LAT:
		if (r->server)
			break;		/* passive target */
		if (perf_reap_to(r, 0, "read_lat: draining"))
			return PERF_ERR;
		for (uint32_t i = 0; i < total; i++) {
			if (i == warm)
				t0 = perf_now();
			it0 = perf_now();
			if (perf_post(r, OP_READ, size, 1) ||
			    perf_reap_to(r, 0, "read_lat: waiting for the read"))
				return PERF_ERR;
			if (i >= warm)
				r->samples[i - warm] = (uint32_t)(perf_now() - it0);
			perf_progress_tick(&r->prog, i);
		}
		break;

	case T_SEND_BW:
		if (r->server) {
			for (uint32_t i = 0; i < total; i++) {
				if (perf_recv(r, size, "send_bw: waiting for data"))
					return PERF_ERR;
				perf_progress_tick(&r->prog, i);
			}
			break;
		}
		/* fallthrough */
	case T_WRITE_BW:
	case T_READ_BW:
	case T_WRITE_IDLE: {
		/* write_idle: write_bw into a target that calls nothing (dtest
		 * -W's): the target waits for the last write's byte, `mark`;
		 * the writer drains its completions before that write (tcp
		 * completes one once its data left the buffer), so no earlier
		 * write carries the byte.  The clock stops at the end barrier,
		 * as write_bw's: the barrier's message follows the writes on
		 * the connection. */
		uint8_t mark = t == T_WRITE_IDLE ? perf_next_seq(r) : 0;

		if (r->server) {	/* RDMA: passive target */
			if (mark && perf_idle_until(r, size, mark, perf_now() + 20 * r->timeout_ns))
				return PERF_ERR;
			break;
		}
		for (uint32_t i = 0; i < total; i++) {
			if (i == warm) {
				if (perf_reap_to(r, 0, "draining the warm-up"))
					return PERF_ERR;
				t0 = perf_now();
			}
			if (mark && i + 1 == total) {
				if (perf_reap_to(r, 0, "write_idle: draining before the last write"))
					return PERF_ERR;
				r->tx[size - 1] = mark;
			}
			if (perf_post(r, t == T_SEND_BW ? OP_SEND : t == T_READ_BW ? OP_READ : OP_WRITE,
				      size, window))
				return PERF_ERR;
			perf_progress_tick(&r->prog, i);
		}
		if (perf_reap_to(r, 0, "waiting for the last completions"))
			return PERF_ERR;
		break;
	}
	case T_REAP:
		/* The cost of turning request completions into events, apart
		 * from posting and the wire: a burst of `window` RDMA writes,
		 * then only the reaping of their completions is timed.  tcp
		 * completes a small write inside the post (it goes straight to
		 * the socket), so the completions wait in the CQ and the timed
		 * part is the read of the CQ (fi_cq_read, libfabric's
		 * progress included) plus, on the DAT side, the conversion to
		 * DAT_EVENTs and one dat_evd_dequeue per event. */
		if (r->server)
			break;		/* passive target */
		if (perf_reap_to(r, 0, "reap: draining"))
			return PERF_ERR;
		if (window > r->req_depth)
			window = r->req_depth;
		res->window = (uint32_t)window;
		n = n / (uint32_t)window * (uint32_t)window;
		if (!n)
			n = (uint32_t)window;
		res->iters = n;
		total = warm + n;
		for (uint32_t i = 0; i < total; i += (uint32_t)window) {
			uint64_t ts;

			for (int k = 0; k < window; k++)
				if (perf_post(r, OP_WRITE, size, window))
					return PERF_ERR;
			ts = perf_now();
			if (perf_reap_to(r, 0, "reap: waiting for the burst's completions"))
				return PERF_ERR;
			if (i >= warm)
				t_up += perf_now() - ts;
			perf_progress_tick(&r->prog, i);
		}
		break;
	case T_CONN:
		if (!r->ops->conn_up)
			return perf_fail(r, "conn: not in this program");
		if (r->region < PERF_CONN_LAT_SIZE)
			return perf_fail(r, "conn: a %zu-byte region has no room for the "
					 "%u-byte ping-pong", r->region, PERF_CONN_LAT_SIZE);
		rss0 = perf_rss_kib();
		perf_conn_t0 = 0;
		t0 = perf_now();
		if (r->ops->conn_up(r->x, size, (uint32_t)window))
			return PERF_ERR;
		if (perf_conn_t0)	/* the EPs came first, untimed */
			t0 = perf_conn_t0;
		t_up = perf_now();
		rss1 = perf_rss_kib();
		/* Then the ping-pong on the main connection, the N EPs
		 * connected, idle and sharing its completion queues: the
		 * progress cost per event must not grow with them (issue 5).
		 * The barrier starts it with both sides done connecting. */
		if (perf_barrier(r, "conn: after the connections", 1))
			return PERF_ERR;
		perf_progress_end(&r->prog);
		perf_progress_start(&r->prog, "conn ping-pong", PERF_CONN_LAT_SIZE,
				    PERF_CONN_LAT_WARMUP + PERF_CONN_LAT_ITERS);
		if (perf_pingpong(r, PERF_CONN_LAT_SIZE, PERF_CONN_LAT_WARMUP,
				  PERF_CONN_LAT_WARMUP + PERF_CONN_LAT_ITERS,
				  "conn: waiting for the ping", "conn: waiting for the pong", NULL))
			return PERF_ERR;
		/* conn_down takes what the N EPs left on the shared queues:
		 * none of the main EP's request completions may be there */
		if (perf_reap_to(r, 0, "conn: the last ping-pong sends") ||
		    r->ops->conn_down(r->x, size))
			return PERF_ERR;
		break;
	case T_WRITE_MT:
		/* posts from several threads at once, each on its own EP with
		 * its own request queue: what they share is the IA (DAT) or
		 * the domain (libfabric), and the progress engine */
		if (!r->ops->mt_up)
			return perf_fail(r, "write_mt: not in this program");
		if (r->region < (size_t)size * PERF_MT_SIZE)
			return perf_fail(r, "write_mt: a %zu-byte region has no room for %u "
					 "writers' %u bytes", r->region, size, PERF_MT_SIZE);
		if (r->ops->mt_up(r->x, size, (uint32_t)window) ||
		    perf_barrier(r, "write_mt: after the connections", 1))
			return PERF_ERR;
		if (!r->server && perf_mt_run(r, size, warm, n, window, &t_up))
			return PERF_ERR;
		/* the server is a passive target until the client is done */
		if (perf_barrier(r, "write_mt: after the writes", 20) ||
		    r->ops->mt_down(r->x, size))
			return PERF_ERR;
		break;
	default:
		return perf_fail(r, "%s is not a peer test", tn);
	}
	if (t == T_SEND_LAT || t == T_WRITE_LAT || t == T_WRITE_IMM_LAT)
		perf_calls_end(r->tool, r->server, tn, size, n);
	else if (t == T_CONN)	/* its ping-pong, beside the N idle EPs */
		perf_calls_end(r->tool, r->server, "conn ping-pong", PERF_CONN_LAT_SIZE,
			       PERF_CONN_LAT_ITERS);

	/* the end barrier: for streams, the receiver has everything */
	if (perf_barrier(r, "end of a test phase", passive ? 20 : 1))
		return PERF_ERR;
	t1 = perf_now();
	perf_progress_end(&r->prog);
	if (r->server)
		return PERF_OK;
	if (t == T_CONN) {
		double sec = (t_up - t0) / 1e9;
		uint64_t sum = 0;

		/* the latency fields are the ping-pong's; the set-up rate
		 * is msg_s */
		for (uint32_t i = 0; i < PERF_CONN_LAT_ITERS; i++)
			sum += r->samples[i];
		perf_lat_stats(r->samples, PERF_CONN_LAT_ITERS, sum, res);
		res->iters = PERF_CONN_LAT_ITERS;
		res->window = (uint32_t)window;
		res->msg_s = size / sec;
		res->conn_us = sec * 1e6 / size;
		res->kib_ep = (double)(rss1 - rss0) / size;
	} else if (t == T_REAP) {
		res->msg_s = t_up ? n / (t_up / 1e9) : 0;
		res->mb_s = res->msg_s * size / 1e6;
	} else if (t == T_WRITE_MT) {
		res->msg_s = t_up ? n / (t_up / 1e9) : 0;
		res->mb_s = res->msg_s * PERF_MT_SIZE / 1e6;
	} else if (perf_tests[t].bw) {
		double sec = (t1 - t0) / 1e9;

		res->msg_s = n / sec;
		res->mb_s = (double)size * n / sec / 1e6;
	} else {
		uint64_t sum = 0;

		for (uint32_t i = 0; i < n; i++)
			sum += r->samples[i];
		perf_lat_stats(r->samples, n, sum, res);
		res->msg_s = res->avg_us > 0 ? 1e6 / res->avg_us : 0;
		res->mb_s = res->msg_s * size / 1e6;
	}
	return PERF_OK;
}

/* Every test and size of the plan, in order; the client prints rows. */
int perf_run_plan(struct perf_run *r)
{
	const struct perf_plan *pl = r->plan;
	uint32_t most = 0;

	for (int k = 0; k < pl->ntests; k++)
		for (int j = 0; j < pl->nsizes; j++) {
			enum perf_test t = (enum perf_test)pl->tests[k];
			/* conn's "iterations" are endpoints; its samples are
			 * those of its ping-pong */
			uint32_t n = t == T_CONN ? PERF_CONN_LAT_ITERS :
				     perf_iters(pl, t, pl->sizes[j]);

			most = n > most ? n : most;
		}
	r->samples = r->server ? NULL : calloc(most ? most : 1, sizeof(*r->samples));
	if (!r->server && !r->samples)
		return perf_fail(r, "no memory for %" PRIu32 " latency samples", most);
	for (int k = 0; k < pl->ntests; k++)
		for (int j = 0; j < pl->nsizes; j++) {
			struct perf_result res;

			if (perf_phase(r, (enum perf_test)pl->tests[k], pl->sizes[j], &res)) {
				free(r->samples);
				return PERF_ERR;
			}
			if (!r->server)
				perf_out_row(r->out, &res);
		}
	free(r->samples);
	r->samples = NULL;
	return perf_reap_to(r, 0, "final completions");
}
