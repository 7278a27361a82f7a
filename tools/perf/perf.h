/*
 * The benchmark engine shared by daplofi-perf (DAT, through the stock
 * registry) and bench/fi-raw (raw libfabric): options, the plan the client
 * hands the server in the connection's private data, the test bodies, the
 * statistics and the output (table, CSV, JSON), in perf.c.
 *
 * Both programs run the *same* test bodies; only the transport differs (a
 * struct perf_ops of post / completion calls).  That is what makes their
 * figures comparable: same message counts, same window, same order of
 * posts, same clock.
 *
 * No DAT and no libfabric type appears here.
 */
#ifndef PERF_H
#define PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define PERF_MAX_SIZES		24
#define PERF_MAX_TESTS		8
#define PERF_MAX_WINDOW		1000		/* tcp grants 1024 per queue */
#define PERF_READ_WINDOW	16		/* RDMA reads in flight (DAT max_rdma_read_out) */
#define PERF_PLAN_LEN		160		/* fits dapl-ofi's least private data (232 B) */
#define PERF_ACCEPT_LEN		32
/* write_mt: its -S are thread counts, each thread streams writes of this
 * size on an endpoint of its own */
#define PERF_MT_SIZE		64u

/* Exit codes: 0 ok, 1 failure, 2 not available (upcalls), 3 usage. */
#define PERF_EXIT_FAIL		1
#define PERF_EXIT_NA		2
#define PERF_EXIT_USAGE		3

/* Return codes of the transport's completion calls. */
#define PERF_OK			0
#define PERF_ERR		(-1)	/* reported by the transport */
#define PERF_TIMEDOUT		(-2)
#define PERF_NOCOMP		1	/* posted; no completion will come */

/* conn: set by a conn_up that opens its endpoints before it connects any
 * (fi-raw -D, as dtestcm times it): the set-up rate is then timed from
 * here, the first connect (0: from the start of conn_up). */
extern uint64_t perf_conn_t0;

enum perf_test {
	T_NONE = 0,
	T_SEND_LAT, T_WRITE_LAT, T_READ_LAT,
	T_SEND_BW, T_WRITE_BW, T_READ_BW,
	T_REAP,
	T_CONN,
	T_WRITE_MT,
	T_WRITE_IDLE, T_WRITE_IDLE_LAT, T_WRITE_IMM_LAT, T_ATOMIC_LAT,
	T_EVENTS, T_WAKE, T_CNO, T_UPCALL,
	T_COUNT
};

enum perf_mode { M_POLL = 1, M_WAIT, M_CNO, M_UPCALL };

struct perf_test_info {
	const char *name, *alias, *what;
	bool peer;		/* needs a server */
	bool bw;		/* streaming: MB/s; otherwise latency */
};

extern const struct perf_test_info perf_tests[T_COUNT];
extern const char *const perf_mode_names[M_UPCALL + 1];

/* The clock and the --calls timers stay inline: the programs' receive
 * polls call them on every spin, which a call into perf.c would lengthen. */
static inline uint64_t perf_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --calls: where a latency test's time goes, call by call, in the same
 * terms for both programs.  Each timed call costs two clock reads (about
 * 25 ns each here); compare runs that both have --calls. */
enum perf_call { PC_HIT, PC_EMPTY, PC_POST_RECV, PC_POST_SEND, PC_POST_WRITE, PC_REAP,
		 PC_COUNT };

struct perf_calls {
	bool want, on;			/* --calls; inside a measured phase */
	uint64_t ns[PC_COUNT], n[PC_COUNT];
};

extern struct perf_calls perf_calls;

/* The start of a timed call: 0 when not timing. */
static inline uint64_t perf_call_t0(void)
{
	return perf_calls.on ? perf_now() : 0;
}

static inline void perf_call_done(enum perf_call k, uint64_t t0)
{
	if (t0) {
		perf_calls.ns[k] += perf_now() - t0;
		perf_calls.n[k]++;
	}
}

/* What the client asks for; travels in the connect private data. */
struct perf_plan {
	uint8_t mode;
	uint8_t ntests, nsizes;
	uint8_t tests[PERF_MAX_TESTS];
	uint32_t iters, warmup, window;
	uint32_t cq_mod;		/* sends: one in cq_mod signaled (0, 1: all) */
	uint32_t sizes[PERF_MAX_SIZES];
	uint64_t addr, key, region;	/* the sender's RDMA region */
};

/* Big-endian, as the plan travels: the programs' own private data too. */
void perf_put32(uint8_t *p, uint32_t v);
uint32_t perf_get32(const uint8_t *p);

void perf_plan_encode(const struct perf_plan *pl, uint8_t out[PERF_PLAN_LEN]);
/* NULL, or why the bytes are not a plan we can serve. */
const char *perf_plan_decode(const uint8_t *in, size_t len, struct perf_plan *pl);
/* Server's answer in the accept private data: its RDMA region. */
void perf_accept_encode(uint64_t addr, uint64_t key, uint64_t region,
			uint8_t out[PERF_ACCEPT_LEN]);
bool perf_accept_decode(const uint8_t *in, size_t len, uint64_t *addr, uint64_t *key,
			uint64_t *region);
uint32_t perf_max_size(const struct perf_plan *pl);

enum perf_fmt { F_TABLE, F_CSV, F_JSON };

struct perf_opts {
	const char *prog;	/* "daplofi-perf" / "fi-raw" */
	const char *name;	/* -P: IA name (DAT) or libfabric provider (raw) */
	const char *host;	/* -h: client of this server; NULL: server */
	unsigned port;		/* -n */
	struct perf_plan plan;	/* tests, sizes, iterations, mode, window */
	unsigned timeout_s;	/* -T: bound of every single wait */
	enum perf_fmt fmt;
	bool verbose, quiet, header;
	bool iters_set, warmup_set, mode_set, sizes_set;
};

int perf_parse_uint(const char *arg, const char *what, unsigned long min, unsigned long max,
		    uint32_t *out);
/* name_opt: "IA name" (daplofi-perf) or "libfabric provider" (fi-raw).
 * 0: go; PERF_EXIT_USAGE: bad options (printed); -1: --help printed. */
int perf_parse_opts(int argc, char **argv, struct perf_opts *o, const char *name_opt,
		    const char *name_default);

struct perf_result {
	enum perf_test test;
	uint8_t mode;
	uint32_t size, iters, window;
	bool lat;		/* latency figures valid */
	double avg_us, p50_us, p99_us, max_us;
	double mb_s, msg_s;
	double kib_ep;		/* conn: resident memory per endpoint */
	double conn_us;		/* conn: set-up time per connection */
};

struct perf_out {
	const char *tool, *name;
	enum perf_fmt fmt;
	bool header, started;
	int nrows;
	enum perf_test last_test;
};

/* samples: one-way ns per iteration (sorted in place). */
void perf_lat_stats(uint32_t *ns, uint32_t n, uint64_t total_ns, struct perf_result *r);
void perf_out_begin(struct perf_out *o);
void perf_out_row(struct perf_out *o, const struct perf_result *r);
void perf_out_end(struct perf_out *o);

/* Long runs show progress on stderr: a line rewritten in place on a
 * terminal, one line every 5 s otherwise; nothing for phases under 1 s. */
struct perf_progress {
	bool quiet, tty;
	uint64_t start, next;
	bool shown;
	const char *what;
	uint32_t size, total;
};

struct perf_ops {
	/* post from the send region / into the receive region (whole region) */
	/* signaled false: the send may complete with no completion to reap
	 * (PERF_NOCOMP) */
	int (*post_send)(void *x, size_t len, bool signaled);
	int (*post_recv)(void *x);
	/* the local send region -> the peer's RDMA region; the peer's RDMA
	 * region -> the local RDMA region */
	int (*post_write)(void *x, size_t len);
	int (*post_read)(void *x, size_t len);
	/* post_write with a 32-bit immediate value that completes a receive at
	 * the peer, its completion giving len (NULL: not in this program);
	 * imm_takes_recv: that receive is a posted one (DAT, as IB), so one
	 * is posted again after it; raw libfabric tcp's fi_writedata takes
	 * none */
	int (*post_write_imm)(void *x, size_t len, uint32_t imm);
	bool imm_takes_recv;
	/* fetch-and-add of 1 on the first 8 bytes of the peer's RDMA region,
	 * the old value into the local RDMA region (NULL: not in this
	 * program); 0, or PERF_ERR once the transport has said why */
	int (*post_atomic)(void *x);
	/* One receive completion, waited for by the run's mode until the
	 * deadline: PERF_OK (*len set), PERF_TIMEDOUT or PERF_ERR. */
	int (*recv_done)(void *x, size_t *len, uint64_t deadline);
	/* Request completions, at most max (>= 1: the caller knows how many
	 * it posted, and a read past them would poll an empty queue, which on
	 * libfabric's tcp walks every endpoint of the CQ): deadline 0 reaps
	 * what is there without waiting; otherwise waits for at least one.
	 * Count, PERF_TIMEDOUT or PERF_ERR. */
	int (*req_done)(void *x, int max, uint64_t deadline);
	/* conn: the client opens n more endpoints and connects them, at most
	 * `window` connecting at once; the server accepts n.  They share the
	 * main endpoint's completion queues (DTO EVDs, CQs) and post nothing.
	 * conn_down: the client disconnects them, both sides see every
	 * disconnection, free the endpoints and take from the shared queues
	 * whatever of theirs is left, keeping the main endpoint's own
	 * completions for recv_done (the peer's end-of-phase barrier may
	 * already be there).  0 or PERF_ERR (reported). */
	int (*conn_up)(void *x, uint32_t n, uint32_t window);
	int (*conn_down)(void *x, uint32_t n);
	/* write_mt: as conn_up, but each of the n endpoints gets a request
	 * queue of its own (DTO EVD, CQ), `window` + 4 deep.  mt_write posts
	 * a PERF_MT_SIZE-byte RDMA write on endpoint k (0..n-1), from slice k
	 * of the send region to slice k of the peer's RDMA region (writers do
	 * not overwrite one another); mt_reap reaps endpoint k's
	 * request completions as req_done does.  Thread k alone calls them
	 * for endpoint k, while the other threads do for theirs.  mt_down as
	 * conn_down, and frees the queues. */
	int (*mt_up)(void *x, uint32_t n, uint32_t window);
	int (*mt_write)(void *x, uint32_t k);
	int (*mt_reap)(void *x, uint32_t k, int max, uint64_t deadline);
	int (*mt_down)(void *x, uint32_t n);
	/* write_idle: whether the transport places incoming writes while
	 * its consumer calls nothing (DAT: the provider's progress; raw
	 * libfabric tcp moves data only inside its calls) */
	bool idle_target;
};

/* A thousand connections need more descriptors than a default soft limit
 * of 1024: take the hard limit. */
void perf_raise_nofile(void);

struct perf_run {
	const struct perf_ops *ops;
	void *x;
	const char *tool;
	bool server;
	const struct perf_plan *plan;
	uint8_t *rx, *rdma, *tx;	/* local regions, each `region` bytes */
	size_t region;
	int outstanding;		/* requests posted, completion not reaped */
	uint32_t sends;			/* posted so far (--cq-mod) */
	int req_depth;			/* the EP's request queue */
	uint64_t timeout_ns;
	uint8_t seq;			/* write_lat: value of the polled byte */
	uint32_t *samples;
	struct perf_progress prog;
	struct perf_out *out;
};

/* Queue depths the transports must give the endpoint. */
int perf_req_depth(const struct perf_plan *pl);
int perf_recv_depth(const struct perf_plan *pl);

/* A run over `buf`, three regions of `region` bytes (receive, RDMA target,
 * send), as both daplofi-perf and fi-raw register it. */
void perf_run_init(struct perf_run *r, const struct perf_ops *ops, void *x, const char *tool,
		   uint8_t *buf, size_t region, const struct perf_plan *pl, struct perf_out *out,
		   bool server, unsigned timeout_s, bool quiet);
/* Every test and size of the plan, in order; the client prints rows. */
int perf_run_plan(struct perf_run *r);

#endif
