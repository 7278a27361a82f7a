/*
 * fi-raw: the raw-libfabric counterpart of daplofi-perf, for bench/compare.
 *
 * It runs the very same test bodies (tools/perf/perf.c) over libfabric
 * directly, with the settings dapl-ofi uses (src/fabric/fabric.c, cm.c):
 * FI_EP_MSG, FI_MSG|FI_RMA, FI_SOCKADDR_IN, no mode bits, mr_mode hints
 * LOCAL|VIRT_ADDR|ALLOCATED|PROV_KEY and then VIRT_ADDR|PROV_KEY forced into
 * the domain, FI_THREAD_SAFE, queues of 1024 asked for, node + FI_SOURCE,
 * one EQ (FI_WAIT_FD) and a transmit and a receive CQ (FI_CQ_FORMAT_MSG,
 * FI_WAIT_FD, 1024 entries), endpoint queues sized as the DAT EP's.
 *
 * So the difference between the two programs' figures is what dapl-ofi and
 * the DAT registry add: nothing else differs.
 *
 *   fi-raw [-P prov] [-A local_addr] [-M bytes] [-D|-DL burst] [-n port] ...  server
 *   fi-raw [-P prov] [-A local_addr] [-M bytes] [-D|-DL burst] -h host -t ... -m poll|wait
 *                                                                   client
 *   fi-raw -t wake [-m poll|wait]       thread wake-up floor (eventfd)
 *
 * -M bytes makes fi-raw a consumer shaped like a DAT process: a second
 * thread (idle), and for the conn test bytes of its own state allocated
 * and written before each of its endpoints, as a DAT provider's EP objects
 * sit between libfabric's.  Both matter on libfabric 1.17 tcp,
 * whose read of an empty CQ visits every endpoint bound to it and takes
 * each one's mutex: glibc takes a mutex with a locked instruction only
 * once a process has a second thread, and the visits touch more pages when
 * the endpoints lie further apart (bench/RESULTS.md).
 *
 * -D burst runs the conn test in the stock dtestcm's pattern on both sides
 * (conn_up_dtestcm): the raw peer of `dtestcm -c N -b burst` in
 * bench/compare, whose connection rate it times as dtestcm does; -DL burst
 * opens each client endpoint right before its connect, as dapl-ofi did
 * before it opened them at dat_ep_create.
 *
 * Modes: poll = fi_cq_read spinning (FI_WAIT_UNSPEC CQs when
 * DAPL_OFI_CQ_WAIT=pollfd, see cq_open); wait = fi_cq_read, fi_trywait,
 * then poll(2) on the CQ's fd (FI_GETWAIT): the blocking pattern of
 * man fi_poll(3).  Options and output are daplofi-perf's (--help).
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>

#include "../tools/perf/perf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define TOOL		"fi-raw"
#define FIRAW_FI_VERSION FI_VERSION(1, 17)
#define CQ_BATCH	64	/* completions per fi_cq_read: as many as dapl-ofi's EVD reads at once */

static struct perf_opts opts = { .prog = TOOL };
static const char *local_addr = "127.0.0.1";
static bool threaded;		/* -M: a second, idle thread */
static size_t ep_state;		/* -M: bytes of own state per conn endpoint */
static uint32_t dtcm_burst;	/* -D, -DL: conn in the stock dtestcm's pattern */
static bool dtcm_late;		/* -DL: each endpoint opened right before its connect */

static int fi_fail(int rc, const char *call)
{
	fprintf(stderr, "%s: %s: %s (%d)\n", TOOL, call, fi_strerror(rc < 0 ? -rc : rc), rc);
	return PERF_ERR;
}

struct raw_x {
	const char *who;
	int mode;
	struct fi_info *info;		/* fabric_open's, VIRT_ADDR|PROV_KEY forced */
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct fid_ep *ep;
	struct fid_cq *txcq, *rxcq;
	int txfd, rxfd;
	struct fid_mr *mr;
	void *desc;
	size_t inject_size;		/* the provider's, for unsignaled sends */
	uint8_t *buf;			/* rx | rdma | tx */
	size_t region;
	uint64_t peer_addr, peer_key;
	struct fi_context fctx[2];	/* op contexts */
	bool server;
	struct sockaddr_in peer;	/* client: the server */
	/* conn: the endpoints of a phase (bound to txcq and rxcq); a receive
	 * completion of ep that conn_drain met, for x_recv_done */
	struct fid_ep **ceps;
	uint32_t nceps;
	void **cstate;			/* -M: each endpoint's own state */
	/* write_mt: each client endpoint's own transmit CQ, window + 4 deep */
	struct fid_cq **ccqs;
	int *ccqfds;
	struct fi_context *cctx;
	uint32_t cwindow;
	bool held;
	struct fi_cq_msg_entry held_e;
};

/* ------------------------------------------------------------ transport */

/* A post refused with -FI_EAGAIN (queue full) is retried after a progress
 * pass of cq, for at most -T from the first refusal (*until: 0 at first). */
static bool retry(uint64_t *until, struct fid_cq *cq)
{
	if (!*until)
		*until = perf_now() + (uint64_t)opts.timeout_s * 1000000000u;
	return perf_now() <= *until && fi_cq_read(cq, NULL, 0) >= -FI_EAGAIN;
}

/* Unsignaled, a send that fits the inject size goes by fi_inject and
 * completes with no CQ entry, as fi_pingpong sends. */
static int x_post_send(void *p, size_t len, bool signaled)
{
	struct raw_x *x = p;
	uint64_t until = 0;
	ssize_t rc;

	if (!signaled && len <= x->inject_size) {
		do
			rc = fi_inject(x->ep, x->buf + 2 * x->region, len, 0);
		while (rc == -FI_EAGAIN && retry(&until, x->txcq));
		return rc ? fi_fail((int)rc, "fi_inject") : PERF_NOCOMP;
	}
	do
		rc = fi_send(x->ep, x->buf + 2 * x->region, len, x->desc, 0, &x->fctx[0]);
	while (rc == -FI_EAGAIN && retry(&until, x->txcq));
	return rc ? fi_fail((int)rc, "fi_send") : 0;
}

static int x_post_recv(void *p)
{
	struct raw_x *x = p;
	uint64_t until = 0;
	ssize_t rc;

	do
		rc = fi_recv(x->ep, x->buf, x->region, x->desc, 0, &x->fctx[1]);
	while (rc == -FI_EAGAIN && retry(&until, x->rxcq));
	return rc ? fi_fail((int)rc, "fi_recv") : 0;
}

static int x_post_write(void *p, size_t len)
{
	struct raw_x *x = p;
	uint64_t until = 0;
	ssize_t rc;

	do
		rc = fi_write(x->ep, x->buf + 2 * x->region, len, x->desc, 0, x->peer_addr,
			      x->peer_key, &x->fctx[0]);
	while (rc == -FI_EAGAIN && retry(&until, x->txcq));
	return rc ? fi_fail((int)rc, "fi_write") : 0;
}

/* write_imm_lat: libfabric's own RDMA write with remote CQ data.  On tcp
 * 1.17 its target completion takes no posted receive (dapl-ofi's takes
 * one, as IB does, with a second post: docs/ib-extension.md). */
static int x_post_write_imm(void *p, size_t len, uint32_t imm)
{
	struct raw_x *x = p;
	uint64_t until = 0;
	ssize_t rc;

	do
		rc = fi_writedata(x->ep, x->buf + 2 * x->region, len, x->desc, imm, 0,
				  x->peer_addr, x->peer_key, &x->fctx[0]);
	while (rc == -FI_EAGAIN && retry(&until, x->txcq));
	return rc ? fi_fail((int)rc, "fi_writedata") : 0;
}

/* atomic_lat: fi_fetch_atomic, where the provider has FI_ATOMIC (sockets;
 * fabric_open asks for it first). */
static int x_post_atomic(void *p)
{
	struct raw_x *x = p;
	static const uint64_t one = 1;
	uint64_t until = 0;
	ssize_t rc;

	do
		rc = fi_fetch_atomic(x->ep, &one, 1, NULL, x->buf + x->region, x->desc, 0,
				     x->peer_addr, x->peer_key, FI_UINT64, FI_SUM, &x->fctx[0]);
	while (rc == -FI_EAGAIN && retry(&until, x->txcq));
	return rc ? fi_fail((int)rc, "fi_fetch_atomic") : 0;
}

static int x_post_read(void *p, size_t len)
{
	struct raw_x *x = p;
	uint64_t until = 0;
	ssize_t rc;

	do
		rc = fi_read(x->ep, x->buf + x->region, len, x->desc, 0, x->peer_addr,
			     x->peer_key, &x->fctx[0]);
	while (rc == -FI_EAGAIN && retry(&until, x->txcq));
	return rc ? fi_fail((int)rc, "fi_read") : 0;
}

static int cq_error(struct raw_x *x, struct fid_cq *cq, const char *which)
{
	struct fi_cq_err_entry err;
	char buf[256];

	memset(&err, 0, sizeof(err));
	if (fi_cq_readerr(cq, &err, 0) < 0)
		return fi_fail(-FI_EAVAIL, "fi_cq_read");
	fprintf(stderr, "%s: %s: %s completion error: %s (%s)\n", TOOL, x->who, which,
		fi_strerror(err.err), fi_cq_strerror(cq, err.prov_errno, err.err_data, buf,
						      sizeof(buf)));
	return PERF_ERR;
}

/* Up to max completions of cq; deadline 0: no waiting.  Count (0 if none
 * and no deadline), PERF_TIMEDOUT or PERF_ERR. */
static int cq_get(struct raw_x *x, struct fid_cq *cq, int fd, struct fi_cq_msg_entry *e,
		  int max, uint64_t deadline, const char *which)
{
	unsigned spins = 0;

	for (;;) {
		uint64_t t0 = cq == x->rxcq ? perf_call_t0() : 0;
		ssize_t n = fi_cq_read(cq, e, (size_t)max);

		perf_call_done(n > 0 ? PC_HIT : PC_EMPTY, t0);

		if (n > 0)
			return (int)n;
		if (n == -FI_EAVAIL)
			return cq_error(x, cq, which);
		if (n != -FI_EAGAIN)
			return fi_fail((int)n, "fi_cq_read");
		if (!deadline)
			return 0;
		if (x->mode == M_WAIT) {
			struct fid *f = &cq->fid;
			uint64_t t = perf_now();
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			int rc;

			if (t >= deadline)
				return PERF_TIMEDOUT;
			rc = fi_trywait(x->fabric, &f, 1);
			if (rc == -FI_EAGAIN)
				continue;
			if (rc)
				return fi_fail(rc, "fi_trywait");
			rc = poll(&pfd, 1, (int)((deadline - t + 999999) / 1000000));
			if (rc < 0 && errno != EINTR) {
				perror(TOOL ": poll");
				return PERF_ERR;
			}
		} else if (++spins == 4096) {
			spins = 0;
			if (perf_now() > deadline)
				return PERF_TIMEDOUT;
		}
	}
}

static int x_recv_done(void *p, size_t *len, uint64_t deadline)
{
	struct raw_x *x = p;
	struct fi_cq_msg_entry e;
	int n;

	if (x->held) {		/* it came first */
		e = x->held_e;
		x->held = false;
		n = 1;
	} else {
		n = cq_get(x, x->rxcq, x->rxfd, &e, 1, deadline, "receive");
	}
	if (n == 1) {
		*len = e.len;
		return PERF_OK;
	}
	return n == 0 ? PERF_TIMEDOUT : n;
}

/* Request completions of cq, at most max. */
static int reap(struct raw_x *x, struct fid_cq *cq, int fd, int max, uint64_t deadline)
{
	struct fi_cq_msg_entry e[CQ_BATCH];
	int n = cq_get(x, cq, fd, e, max < CQ_BATCH ? max : CQ_BATCH, deadline, "request"), more;

	/* waited for one: take what else is there, up to max, as a DAT
	 * consumer does */
	while (n > 0 && n < max && deadline &&
	       (more = cq_get(x, cq, fd, e, max - n < CQ_BATCH ? max - n : CQ_BATCH, 0,
			      "request")) > 0)
		n += more;
	return n;
}

static int x_req_done(void *p, int max, uint64_t deadline)
{
	struct raw_x *x = p;

	return reap(x, x->txcq, x->txfd, max, deadline);
}

/* ----------------------------------------------------------------- conn */

#define CONN_MAGIC 0x44505243u		/* "DPRC": a conn-test endpoint */

static int cq_open(struct raw_x *x, struct fid_cq **cq, int *fd);

/* The info of an active endpoint, as dapl-ofi's dfi_fep_open makes it: a
 * copy of the fabric's, without a dest_addr (the peer is fi_connect's
 * argument), bound to our address with any port.  NULL: no memory. */
static struct fi_info *active_info(const struct raw_x *x)
{
	struct fi_info *ei = fi_dupinfo(x->info);

	if (!ei)
		return NULL;
	free(ei->dest_addr);
	ei->dest_addr = NULL;
	ei->dest_addrlen = 0;
	if (ei->src_addr)
		((struct sockaddr_in *)ei->src_addr)->sin_port = 0;
	return ei;
}

/* An endpoint as dapl-ofi's dfi_fep_open makes one: from a connection
 * request, or from active_info to connect. */
static int conn_ep(struct raw_x *x, struct fi_info *req, uint32_t i)
{
	struct fi_info *ei = req;
	struct fid_ep **ep = &x->ceps[i];
	struct fid_cq *tx = x->txcq;
	int rc;

	if (!ei && !(ei = active_info(x)))
		return fi_fail(-FI_ENOMEM, "fi_dupinfo");
	ei->tx_attr->size = 16;		/* DAT's default queue depths */
	ei->rx_attr->size = 16;
	if (x->ccqs) {
		/* write_mt's writers: a transmit CQ each, as daplofi-perf's
		 * request EVD each */
		ei->tx_attr->size = x->cwindow + 4;
		if (cq_open(x, &x->ccqs[i], &x->ccqfds[i])) {
			fi_freeinfo(ei);
			return PERF_ERR;
		}
		tx = x->ccqs[i];
	}
	/* Otherwise the main endpoint's CQs, as daplofi-perf's conn EPs
	 * share its DTO EVDs: the ping-pong then runs on CQs that N idle
	 * endpoints share.  They post nothing, so nothing of theirs lands
	 * there, and the CQs' 1024 entries need not grow with N. */
	if (ep_state && x->cstate) {
		x->cstate[i] = malloc(ep_state);
		if (!x->cstate[i]) {
			fi_freeinfo(ei);
			return fi_fail(-FI_ENOMEM, "malloc (-M)");
		}
		memset(x->cstate[i], 0, ep_state);
	}
	rc = fi_endpoint(x->domain, ei, ep, NULL);
	if (!rc && !(rc = fi_ep_bind(*ep, &x->eq->fid, 0)) &&
	    !(rc = fi_ep_bind(*ep, &tx->fid, FI_TRANSMIT)) &&
	    !(rc = fi_ep_bind(*ep, &x->rxcq->fid, FI_RECV)))
		rc = fi_enable(*ep);
	fi_freeinfo(ei);
	return rc ? fi_fail(rc, "conn: opening an endpoint") : 0;
}

/* One EQ event within -T (the CQs are progressed meanwhile: tcp moves a
 * shutdown to the EQ only then; a read of 0 entries takes none, so the
 * main endpoint's completions stay). */
static int conn_event(struct raw_x *x, uint32_t *ev, struct fi_eq_cm_entry *ent, size_t size,
		      size_t *len)
{
	uint64_t deadline = perf_now() + (uint64_t)opts.timeout_s * 1000000000u;
	unsigned spins = 0;

	for (;;) {
		/* -m poll busy-polls the EQ (dtestcm's default, and
		 * daplofi-perf's dat_evd_dequeue loop); otherwise it sleeps */
		ssize_t n = x->mode == M_POLL ? fi_eq_read(x->eq, ev, ent, size, 0) :
			    fi_eq_sread(x->eq, ev, ent, size, 1, 0);

		if (n >= 0) {
			*len = (size_t)n;
			return 0;
		}
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err;

			memset(&err, 0, sizeof(err));
			fi_eq_readerr(x->eq, &err, 0);
			fprintf(stderr, "%s: %s: conn: connection error: %s\n", TOOL, x->who,
				fi_strerror(err.err));
			return PERF_ERR;
		}
		if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT)
			return fi_fail((int)n, x->mode == M_POLL ? "fi_eq_read" : "fi_eq_sread");
		if (x->mode == M_POLL && ++spins % 4096)
			continue;
		fi_cq_read(x->rxcq, NULL, 0);
		if (perf_now() > deadline) {
			fprintf(stderr, "%s: %s: conn: no connection event within %u s (-T)\n",
				TOOL, x->who, opts.timeout_s);
			return PERF_ERR;
		}
	}
}

#define DTCM_PDATA 48		/* dtestcm's private data: 1..48, echoed + 1 */

/* A dtestcm request's or answer's private data: bytes first..first+47. */
static bool dtcm_pdata_ok(const uint8_t *pd, size_t len, uint8_t first)
{
	if (len < DTCM_PDATA)
		return false;
	for (int i = 0; i < DTCM_PDATA; i++)
		if (pd[i] != (uint8_t)(first + i))
			return false;
	return true;
}

/*
 * conn in the stock dtestcm's pattern (-D burst), its raw counterpart for
 * bench/compare: the client opens all n endpoints first (dtestcm creates
 * its EPs before it times), then connects them `burst` at a time, each
 * with 48 bytes of private data, and collects each burst's FI_CONNECTED,
 * checking the answer's data; the server accepts every request first,
 * echoing its data + 1, and collects the FI_CONNECTEDs as they come (DAT
 * buffers them on the connection EVD until dtestcm reads them).  The rate
 * is timed from the first connect (perf_conn_t0), as dtestcm's CPS is.
 * late (-DL) opens each endpoint in its burst, right before its connect,
 * inside the timed part: what a DAT provider does that opens libfabric's
 * endpoint at dat_ep_connect, as dapl-ofi did until 98575c6 (a DAT EP
 * does not know at dat_ep_create whether it will connect or accept, and
 * tcp's accepting endpoint must come from the request; dapl-ofi now opens
 * it ahead and an accept replaces it).  On this machine that costs
 * about 40 % of the rate: an open takes about 68 us, most of it zeroing
 * libfabric's 18 KiB endpoint on fresh pages (bench/RESULTS.md).
 */
static int conn_up_dtestcm(struct raw_x *x, uint32_t n, uint32_t burst, bool late)
{
	_Alignas(struct fi_eq_cm_entry) uint8_t raw[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *ent = (struct fi_eq_cm_entry *)raw;
	uint8_t *pd = raw + sizeof(*ent), mine[DTCM_PDATA];
	uint32_t up = 0, ev;
	size_t len;
	int rc;

	for (int i = 0; i < DTCM_PDATA; i++)
		mine[i] = (uint8_t)(i + 1);
	if (!x->server) {
		for (uint32_t i = 0; !late && i < n; i++) {
			if (conn_ep(x, NULL, i))
				return PERF_ERR;
			x->nceps = i + 1;
		}
		perf_conn_t0 = perf_now();
		for (uint32_t i = 0; i < n; i += burst) {
			uint32_t k = n - i < burst ? n - i : burst;

			for (uint32_t j = 0; late && j < k; j++) {
				if (conn_ep(x, NULL, i + j))
					return PERF_ERR;
				x->nceps = i + j + 1;
			}
			for (uint32_t j = 0; j < k; j++)
				if ((rc = fi_connect(x->ceps[i + j], &x->peer, mine, sizeof(mine))))
					return fi_fail(rc, "fi_connect");
			for (uint32_t j = 0; j < k; j++) {
				if (conn_event(x, &ev, ent, sizeof(raw), &len))
					return PERF_ERR;
				if (ev != FI_CONNECTED || len < sizeof(*ent) ||
				    !dtcm_pdata_ok(pd, len - sizeof(*ent), 2)) {
					fprintf(stderr, "%s: client: conn -D: EQ event %u, or an "
						"answer without dtestcm's private data\n", TOOL, ev);
					return PERF_ERR;
				}
			}
		}
		return 0;
	}
	while (x->nceps < n || up < n) {
		if (conn_event(x, &ev, ent, sizeof(raw), &len))
			return PERF_ERR;
		if (ev == FI_CONNECTED) {
			up++;
			continue;
		}
		if (ev != FI_CONNREQ || x->nceps == n) {
			fprintf(stderr, "%s: server: conn -D: EQ event %u\n", TOOL, ev);
			return PERF_ERR;
		}
		if (len < sizeof(*ent) || !dtcm_pdata_ok(pd, len - sizeof(*ent), 1)) {
			fprintf(stderr, "%s: server: conn -D: a request without dtestcm's "
				"private data\n", TOOL);
			fi_reject(x->pep, ent->info->handle, NULL, 0);
			fi_freeinfo(ent->info);
			return PERF_ERR;
		}
		for (int i = 0; i < DTCM_PDATA; i++)
			pd[i]++;
		if (conn_ep(x, ent->info, x->nceps))
			return PERF_ERR;
		x->nceps++;
		if ((rc = fi_accept(x->ceps[x->nceps - 1], pd, DTCM_PDATA)))
			return fi_fail(rc, "fi_accept");
	}
	return 0;
}

static int x_conn_up(void *p, uint32_t n, uint32_t window)
{
	struct raw_x *x = p;
	_Alignas(struct fi_eq_cm_entry) uint8_t raw[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *ent = (struct fi_eq_cm_entry *)raw;
	uint32_t posted = 0, up = 0, ev;
	uint8_t pd[8];
	size_t len;
	int rc;

	x->ceps = calloc(n, sizeof(*x->ceps));
	if (!x->ceps)
		return PERF_ERR;
	if (ep_state && !(x->cstate = calloc(n, sizeof(*x->cstate))))
		return PERF_ERR;
	x->nceps = 0;
	if (dtcm_burst)
		return conn_up_dtestcm(x, n, dtcm_burst, dtcm_late);
	while (up < n) {
		while (!x->server && posted < n && posted - up < window) {
			if (conn_ep(x, NULL, posted))
				return PERF_ERR;
			x->nceps = posted + 1;
			perf_put32(pd, CONN_MAGIC);
			perf_put32(pd + 4, posted);
			if ((rc = fi_connect(x->ceps[posted], &x->peer, pd, sizeof(pd))))
				return fi_fail(rc, "fi_connect");
			posted++;
		}
		if (conn_event(x, &ev, ent, sizeof(raw), &len))
			return PERF_ERR;
		if (ev == FI_CONNECTED) {
			up++;
			continue;
		}
		if (ev != FI_CONNREQ || !x->server || posted == n) {
			fprintf(stderr, "%s: %s: conn: EQ event %u\n", TOOL, x->who, ev);
			return PERF_ERR;
		}
		if (len < sizeof(*ent) + 8 || perf_get32(raw + sizeof(*ent)) != CONN_MAGIC) {
			fprintf(stderr, "%s: server: conn: a request that is not the client's\n",
				TOOL);
			fi_reject(x->pep, ent->info->handle, NULL, 0);
			fi_freeinfo(ent->info);
			return PERF_ERR;
		}
		if (conn_ep(x, ent->info, posted))
			return PERF_ERR;
		x->nceps = ++posted;
		if ((rc = fi_accept(x->ceps[posted - 1], NULL, 0)))
			return fi_fail(rc, "fi_accept");
	}
	return 0;
}

/* A completion of the main endpoint: its contexts are x->fctx. */
static bool main_ctx(const struct raw_x *x, const void *ctx)
{
	return ctx == &x->fctx[0] || ctx == &x->fctx[1];
}

/*
 * daplofi-perf's conn_drain: once the conn endpoints are closed nothing of
 * theirs can arrive; take whatever of theirs a shared CQ holds (nothing:
 * they post nothing; closing one with posts would cancel them into the CQ
 * as errors).  The main endpoint's requests were reaped before conn_down
 * and its peer sends it at most one message meanwhile (the client's
 * end-of-phase barrier): that receive is kept for x_recv_done; anything
 * else of the main endpoint is a failure.
 */
static int conn_drain(struct raw_x *x, struct fid_cq *cq, bool recv)
{
	for (;;) {
		struct fi_cq_msg_entry e;
		ssize_t n = fi_cq_read(cq, &e, 1);

		if (n == -FI_EAGAIN)
			return 0;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err;

			memset(&err, 0, sizeof(err));
			if (fi_cq_readerr(cq, &err, 0) < 0)
				return fi_fail(-FI_EAVAIL, "fi_cq_read");
			if (main_ctx(x, err.op_context)) {
				fprintf(stderr, "%s: %s: %s completion error: %s\n", TOOL, x->who,
					recv ? "receive" : "request", fi_strerror(err.err));
				return PERF_ERR;
			}
			continue;		/* a conn endpoint's, cancelled */
		}
		if (n < 0)
			return fi_fail((int)n, "fi_cq_read");
		if (!main_ctx(x, e.op_context))
			continue;
		if (!recv || x->held) {
			fprintf(stderr, "%s: %s: conn: the %s CQ holds more of the main endpoint's "
				"completions than the plan allows\n", TOOL, x->who,
				recv ? "receive" : "request");
			return PERF_ERR;
		}
		x->held_e = e;
		x->held = true;
	}
}

static int x_conn_down(void *p, uint32_t n)
{
	struct raw_x *x = p;
	struct fi_eq_cm_entry ent;
	uint32_t ev;
	size_t len;
	int rc;

	if (!x->server)
		for (uint32_t i = 0; i < n; i++)
			if ((rc = fi_shutdown(x->ceps[i], 0)))
				return fi_fail(rc, "fi_shutdown");
	for (uint32_t i = 0; i < n; i++) {
		if (conn_event(x, &ev, &ent, sizeof(ent), &len))
			return PERF_ERR;
		if (ev != FI_SHUTDOWN) {
			fprintf(stderr, "%s: %s: conn: EQ event %u, expected FI_SHUTDOWN\n", TOOL,
				x->who, ev);
			return PERF_ERR;
		}
	}
	for (uint32_t i = 0; i < x->nceps; i++)
		fi_close(&x->ceps[i]->fid);
	if (conn_drain(x, x->txcq, false) || conn_drain(x, x->rxcq, true))
		return PERF_ERR;
	free(x->ceps);
	x->ceps = NULL;
	for (uint32_t i = 0; x->cstate && i < x->nceps; i++)
		free(x->cstate[i]);
	free(x->cstate);
	x->cstate = NULL;
	x->nceps = 0;
	return 0;
}

/* ------------------------------------------------------------- write_mt */

static int x_mt_up(void *p, uint32_t n, uint32_t window)
{
	struct raw_x *x = p;

	if (!x->server) {	/* the server's endpoints are passive targets */
		x->ccqs = calloc(n, sizeof(*x->ccqs));
		x->ccqfds = calloc(n, sizeof(*x->ccqfds));
		x->cctx = calloc(n, sizeof(*x->cctx));
		if (!x->ccqs || !x->ccqfds || !x->cctx)
			return PERF_ERR;
		x->cwindow = window;
	}
	return x_conn_up(p, n, window);
}

static int x_mt_write(void *p, uint32_t k)
{
	struct raw_x *x = p;
	uint64_t until = 0;
	ssize_t rc;

	do
		rc = fi_write(x->ceps[k], x->buf + 2 * x->region + k * PERF_MT_SIZE, PERF_MT_SIZE,
			      x->desc, 0, x->peer_addr + k * PERF_MT_SIZE, x->peer_key,
			      &x->cctx[k]);	/* a slice each */
	while (rc == -FI_EAGAIN && retry(&until, x->ccqs[k]));
	return rc ? fi_fail((int)rc, "fi_write") : 0;
}

static int x_mt_reap(void *p, uint32_t k, int max, uint64_t deadline)
{
	struct raw_x *x = p;
	struct raw_x w = { .who = x->who, .mode = x->mode == M_POLL ? M_POLL : M_WAIT,
			   .fabric = x->fabric };

	return reap(&w, x->ccqs[k], x->ccqfds[k], max, deadline);
}

static int x_mt_down(void *p, uint32_t n)
{
	struct raw_x *x = p;
	int rc = x_conn_down(p, n);	/* closes the endpoints first */

	for (uint32_t i = 0; x->ccqs && i < n; i++)
		if (x->ccqs[i])
			fi_close(&x->ccqs[i]->fid);
	free(x->ccqs);
	free(x->ccqfds);
	free(x->cctx);
	x->ccqs = NULL;
	x->ccqfds = NULL;
	x->cctx = NULL;
	return rc;
}

static const struct perf_ops raw_ops = {
	.post_send = x_post_send, .post_recv = x_post_recv,
	.post_write = x_post_write, .post_read = x_post_read,
	.post_write_imm = x_post_write_imm, .imm_takes_recv = false,
	.post_atomic = x_post_atomic,
	.recv_done = x_recv_done, .req_done = x_req_done,
	.conn_up = x_conn_up, .conn_down = x_conn_down,
	.mt_up = x_mt_up, .mt_write = x_mt_write, .mt_reap = x_mt_reap, .mt_down = x_mt_down,
};

/* -------------------------------------------------------------- set-up */

/* dapl-ofi's dfi_fabric_open, hint for hint. */
static int fabric_open(struct raw_x *x)
{
	struct fi_info *h = fi_allocinfo();
	struct fi_eq_attr eqa = { .size = 4096, .wait_obj = FI_WAIT_FD };
	int rc;

	if (!h)
		return fi_fail(-FI_ENOMEM, "fi_allocinfo");
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG | FI_RMA;
	h->addr_format = FI_SOCKADDR_IN;
	h->mode = 0;		/* as dapl-ofi's hints */
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				  FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->fabric_attr->prov_name = strdup(opts.name);
	/* as dapl-ofi: FI_ATOMIC where the provider has it */
	rc = -FI_ENODATA;
	for (int atomic = 1; atomic >= 0 && rc == -FI_ENODATA; atomic--) {
		h->caps = atomic ? h->caps | FI_ATOMIC : h->caps & ~FI_ATOMIC;
		h->tx_attr->size = 1024;
		h->rx_attr->size = 1024;
		rc = fi_getinfo(FIRAW_FI_VERSION, local_addr, NULL, FI_SOURCE, h, &x->info);
		if (rc == -FI_ENODATA) {
			h->tx_attr->size = 0;
			h->rx_attr->size = 0;
			rc = fi_getinfo(FIRAW_FI_VERSION, local_addr, NULL, FI_SOURCE, h,
					&x->info);
		}
	}
	fi_freeinfo(h);
	if (rc) {
		fprintf(stderr, "%s: no FI_EP_MSG endpoint with FI_MSG|FI_RMA from provider '%s' "
			"on %s\n", TOOL, opts.name, local_addr);
		return fi_fail(rc, "fi_getinfo");
	}
	x->info->domain_attr->mr_mode |= FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	x->inject_size = x->info->tx_attr->inject_size;
	if ((rc = fi_fabric(x->info->fabric_attr, &x->fabric, NULL)))
		return fi_fail(rc, "fi_fabric");
	if ((rc = fi_domain(x->fabric, x->info, &x->domain, NULL)))
		return fi_fail(rc, "fi_domain");
	if ((rc = fi_eq_open(x->fabric, &eqa, &x->eq, NULL)))
		return fi_fail(rc, "fi_eq_open");
	return 0;
}

/* FI_WAIT_FD, as dapl-ofi's CQs.  Polling with DAPL_OFI_CQ_WAIT=pollfd
 * (dapl-ofi's CQs are then FI_WAIT_UNSPEC: tcp keeps a poll-fd list, and
 * an empty pass is a poll(2) rather than an epoll_wait), fi-raw's are
 * FI_WAIT_UNSPEC too, with no fd to wait on, as a raw polling program's
 * would be (fi_pingpong: FI_WAIT_NONE); waiting, they keep the fd. */
static int cq_open(struct raw_x *x, struct fid_cq **cq, int *fd)
{
	const char *w = getenv("DAPL_OFI_CQ_WAIT");
	bool unspec = x->mode == M_POLL && w && !strcmp(w, "pollfd");
	struct fi_cq_attr a = {
		.size = 1024, .format = FI_CQ_FORMAT_MSG,
		.wait_obj = unspec ? FI_WAIT_UNSPEC : FI_WAIT_FD,
	};
	int rc = fi_cq_open(x->domain, &a, cq, NULL);

	if (rc)
		return fi_fail(rc, "fi_cq_open");
	*fd = -1;
	if (unspec)
		return 0;
	rc = fi_control(&(*cq)->fid, FI_GETWAIT, fd);
	return rc ? fi_fail(rc, "fi_control(FI_GETWAIT)") : 0;
}

/* CQs, the buffer and its MR, the endpoint (from a connection request, or
 * to connect: active_info), bound and enabled. */
static int resources(struct raw_x *x, const struct perf_plan *pl, struct fi_info *req)
{
	struct fi_info *ei = req;
	int rc;

	x->mode = pl->mode;
	if (cq_open(x, &x->txcq, &x->txfd) || cq_open(x, &x->rxcq, &x->rxfd))
		return PERF_ERR;
	x->region = (perf_max_size(pl) + 4095) & ~(size_t)4095;
	x->buf = aligned_alloc(4096, 3 * x->region);
	if (!x->buf) {
		fprintf(stderr, "%s: no memory for 3 x %zu bytes\n", TOOL, x->region);
		return PERF_ERR;
	}
	memset(x->buf, 0, 3 * x->region);
	rc = fi_mr_reg(x->domain, x->buf, 3 * x->region, FI_SEND | FI_RECV | FI_READ | FI_WRITE |
		       FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &x->mr, NULL);
	if (rc)
		return fi_fail(rc, "fi_mr_reg");
	x->desc = fi_mr_desc(x->mr);
	if (!ei && !(ei = active_info(x)))
		return fi_fail(-FI_ENOMEM, "fi_dupinfo");
	ei->tx_attr->size = (size_t)perf_req_depth(pl);
	ei->rx_attr->size = (size_t)perf_recv_depth(pl);
	rc = fi_endpoint(x->domain, ei, &x->ep, NULL);
	if (rc)
		return fi_fail(rc, "fi_endpoint");
	if ((rc = fi_ep_bind(x->ep, &x->eq->fid, 0)) ||
	    (rc = fi_ep_bind(x->ep, &x->txcq->fid, FI_TRANSMIT)) ||
	    (rc = fi_ep_bind(x->ep, &x->rxcq->fid, FI_RECV)) || (rc = fi_enable(x->ep)))
		return fi_fail(rc, "binding/enabling the endpoint");
	if (ei != req)
		fi_freeinfo(ei);
	return 0;
}

/* One EQ event within -T.  *len: bytes of entry (the CM data follows the
 * fi_eq_cm_entry).  Events other than `want` are errors. */
static int eq_wait(struct raw_x *x, uint32_t want, uint8_t *entry, size_t size, size_t *len)
{
	uint32_t ev = 0;
	ssize_t n = fi_eq_sread(x->eq, &ev, entry, size, (int)opts.timeout_s * 1000, 0);

	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err;

		memset(&err, 0, sizeof(err));
		fi_eq_readerr(x->eq, &err, 0);
		fprintf(stderr, "%s: %s: connection error: %s%s\n", TOOL, x->who,
			fi_strerror(err.err), err.err == ECONNREFUSED ?
			" (nobody listening? start the server first)" : "");
		return PERF_ERR;
	}
	if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT) {
		fprintf(stderr, "%s: %s: no connection event within %u s (-T)\n", TOOL, x->who,
			opts.timeout_s);
		return PERF_ERR;
	}
	if (n < 0)
		return fi_fail((int)n, "fi_eq_sread");
	if (ev != want) {
		fprintf(stderr, "%s: %s: EQ event %u, expected %u\n", TOOL, x->who, ev, want);
		return PERF_ERR;
	}
	*len = (size_t)n;
	return 0;
}

/* The shutdown reaches the EQ only with CQ progress (tcp 1.17). */
static int wait_shutdown(struct raw_x *x)
{
	uint64_t deadline = perf_now() + (uint64_t)opts.timeout_s * 1000000000u;
	struct fi_cq_msg_entry e;
	struct fi_eq_cm_entry ent;
	uint32_t ev;

	while (perf_now() < deadline) {
		ssize_t n = fi_eq_read(x->eq, &ev, &ent, sizeof(ent), 0);

		if (n >= 0 && ev == FI_SHUTDOWN)
			return 0;
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry err;

			memset(&err, 0, sizeof(err));
			fi_eq_readerr(x->eq, &err, 0);
		}
		while (fi_cq_read(x->rxcq, &e, 1) != -FI_EAGAIN) {
			struct fi_cq_err_entry err;

			memset(&err, 0, sizeof(err));
			if (fi_cq_readerr(x->rxcq, &err, 0) < 0)
				break;
		}
		fi_cq_read(x->txcq, NULL, 0);
		usleep(200);
	}
	fprintf(stderr, "%s: %s: no FI_SHUTDOWN within %u s (-T)\n", TOOL, x->who, opts.timeout_s);
	return PERF_ERR;
}

static void close_all(struct raw_x *x)
{
	if (x->ep)
		fi_close(&x->ep->fid);
	if (x->pep)
		fi_close(&x->pep->fid);
	if (x->mr)
		fi_close(&x->mr->fid);
	if (x->txcq)
		fi_close(&x->txcq->fid);
	if (x->rxcq)
		fi_close(&x->rxcq->fid);
	if (x->eq)
		fi_close(&x->eq->fid);
	if (x->domain)
		fi_close(&x->domain->fid);
	if (x->fabric)
		fi_close(&x->fabric->fid);
	fi_freeinfo(x->info);
	free(x->buf);
}

static void run_init(struct perf_run *r, struct raw_x *x, const struct perf_plan *pl,
		     struct perf_out *out, bool server)
{
	perf_run_init(r, &raw_ops, x, TOOL, x->buf, x->region, pl, out, server,
		      opts.timeout_s, opts.quiet);
}

static int post_recvs(struct perf_run *r, int n)
{
	for (int i = 0; i < n; i++)
		if (r->ops->post_recv(r->x))
			return PERF_ERR;
	return 0;
}

static int server(void)
{
	struct raw_x x = { .who = "server", .server = true };
	_Alignas(struct fi_eq_cm_entry) uint8_t raw[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *ent = (struct fi_eq_cm_entry *)raw;
	struct fi_info *pi;
	struct perf_plan pl;
	struct perf_run r;
	uint8_t acc[PERF_ACCEPT_LEN];
	const char *why;
	size_t n;
	int rc;

	if (fabric_open(&x))
		return PERF_EXIT_FAIL;
	pi = fi_dupinfo(x.info);
	if (!pi || !pi->src_addr)
		return fi_fail(-FI_EINVAL, "fi_dupinfo"), PERF_EXIT_FAIL;
	((struct sockaddr_in *)pi->src_addr)->sin_port = htons((uint16_t)opts.port);
	if ((rc = fi_passive_ep(x.fabric, pi, &x.pep, NULL)) ||
	    (rc = fi_pep_bind(x.pep, &x.eq->fid, 0)) || (rc = fi_listen(x.pep))) {
		fi_fail(rc, "listening (fi_passive_ep/fi_pep_bind/fi_listen)");
		fprintf(stderr, "%s: server: cannot listen on %s port %u (-n)\n", TOOL, local_addr,
			opts.port);
		return PERF_EXIT_FAIL;
	}
	fi_freeinfo(pi);
	printf("%s: server listening on port %u (provider %s, %s)\n", TOOL, opts.port, opts.name,
	       local_addr);
	fflush(stdout);
	if (eq_wait(&x, FI_CONNREQ, raw, sizeof(raw), &n))
		return PERF_EXIT_FAIL;
	why = perf_plan_decode(raw + sizeof(*ent), n - sizeof(*ent), &pl);
	if (!why && pl.mode != M_POLL && pl.mode != M_WAIT)
		why = "the client asks for a mode fi-raw does not have (poll, wait)";
	if (why) {
		fprintf(stderr, "%s: server: rejecting a connection: %s\n", TOOL, why);
		fi_reject(x.pep, ent->info->handle, NULL, 0);
		return PERF_EXIT_FAIL;
	}
	if (resources(&x, &pl, ent->info))
		return PERF_EXIT_FAIL;
	x.peer_addr = pl.addr;
	x.peer_key = pl.key;
	run_init(&r, &x, &pl, NULL, true);
	if (post_recvs(&r, 2))
		return PERF_EXIT_FAIL;
	perf_accept_encode((uint64_t)(uintptr_t)(x.buf + x.region), fi_mr_key(x.mr), x.region, acc);
	if ((rc = fi_accept(x.ep, acc, PERF_ACCEPT_LEN)))
		return fi_fail(rc, "fi_accept"), PERF_EXIT_FAIL;
	fi_freeinfo(ent->info);
	if (eq_wait(&x, FI_CONNECTED, raw, sizeof(raw), &n) ||
	    post_recvs(&r, perf_recv_depth(&pl) - 2))
		return PERF_EXIT_FAIL;
	if (perf_run_plan(&r) || wait_shutdown(&x))
		return PERF_EXIT_FAIL;
	close_all(&x);
	return 0;
}

static int resolve(const char *host, uint16_t port, struct sockaddr_in *sin)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
	int rc;

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1)
		return 0;
	rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc) {
		fprintf(stderr, "%s: cannot resolve '%s': %s\n", TOOL, host, gai_strerror(rc));
		return PERF_ERR;
	}
	sin->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
	freeaddrinfo(res);
	return 0;
}

static int client(struct perf_plan *pl)
{
	struct raw_x x = { .who = "client" };
	_Alignas(struct fi_eq_cm_entry) uint8_t raw[sizeof(struct fi_eq_cm_entry) + 256];
	struct perf_out out = { .tool = TOOL, .name = opts.name, .fmt = opts.fmt,
				.header = opts.header };
	struct sockaddr_in sin;
	struct perf_run r;
	uint8_t pd[PERF_PLAN_LEN];
	uint64_t region;
	size_t n;
	int rc;

	if (resolve(opts.host, (uint16_t)opts.port, &sin) || fabric_open(&x) ||
	    resources(&x, pl, NULL))
		return PERF_EXIT_FAIL;
	x.peer = sin;
	pl->addr = (uint64_t)(uintptr_t)(x.buf + x.region);
	pl->key = fi_mr_key(x.mr);
	pl->region = x.region;
	perf_plan_encode(pl, pd);
	if ((rc = fi_connect(x.ep, &sin, pd, PERF_PLAN_LEN)))
		return fi_fail(rc, "fi_connect"), PERF_EXIT_FAIL;
	if (eq_wait(&x, FI_CONNECTED, raw, sizeof(raw), &n))
		return PERF_EXIT_FAIL;
	if (!perf_accept_decode(raw + sizeof(struct fi_eq_cm_entry),
				n - sizeof(struct fi_eq_cm_entry), &x.peer_addr, &x.peer_key,
				&region)) {
		fprintf(stderr, "%s: client: the server's accept carries no region: is it %s?\n",
			TOOL, TOOL);
		return PERF_EXIT_FAIL;
	}
	run_init(&r, &x, pl, &out, false);
	if (post_recvs(&r, perf_recv_depth(pl)))
		return PERF_EXIT_FAIL;
	perf_out_begin(&out);
	rc = perf_run_plan(&r);
	perf_out_end(&out);
	if (rc)
		return PERF_EXIT_FAIL;
	if ((rc = fi_shutdown(x.ep, 0)))
		return fi_fail(rc, "fi_shutdown"), PERF_EXIT_FAIL;
	if (wait_shutdown(&x))
		return PERF_EXIT_FAIL;
	close_all(&x);
	return 0;
}

/* ------------------------------------------------- wake: the kernel floor */

/* Two threads bounce a token: poll mode spins on a shared counter, wait
 * mode sleeps in poll(2) on an eventfd each (what a CQ fd wake costs, minus
 * libfabric).  One-way = RTT / 2. */
struct bouncer {
	int mode;
	int in, out;			/* eventfds */
	atomic_uint *flag;
	uint32_t n;
	int rc;
};

static int bounce_wait(struct bouncer *b, unsigned want)
{
	uint64_t deadline = perf_now() + (uint64_t)opts.timeout_s * 1000000000u;

	if (b->mode == M_POLL) {
		unsigned spins = 0;

		while (atomic_load_explicit(b->flag, memory_order_acquire) != want)
			if (++spins == 4096) {
				spins = 0;
				if (perf_now() > deadline)
					return PERF_TIMEDOUT;
			}
		return 0;
	}
	for (;;) {
		struct pollfd pfd = { .fd = b->in, .events = POLLIN };
		uint64_t v, t = perf_now();
		int rc;

		if (t >= deadline)
			return PERF_TIMEDOUT;
		rc = poll(&pfd, 1, (int)((deadline - t + 999999) / 1000000));
		if (rc < 0 && errno != EINTR)
			return PERF_ERR;
		if (rc > 0 && read(b->in, &v, sizeof(v)) == sizeof(v))
			return 0;
	}
}

static void bounce_post(struct bouncer *b, unsigned v)
{
	uint64_t one = 1;

	if (b->mode == M_POLL)
		atomic_store_explicit(b->flag, v, memory_order_release);
	else if (write(b->out, &one, sizeof(one)) != sizeof(one))
		b->rc = PERF_ERR;
}

static void *echo_main(void *arg)
{
	struct bouncer *b = arg;

	for (uint32_t i = 0; i < b->n; i++) {
		if (bounce_wait(b, 2 * i + 1)) {
			b->rc = PERF_ERR;
			return NULL;
		}
		bounce_post(b, 2 * i + 2);
	}
	return NULL;
}

static int test_wake(void)
{
	const struct perf_plan *pl = &opts.plan;
	uint32_t n = pl->iters, warm = pl->warmup;
	atomic_uint flag = 0;
	int a = eventfd(0, EFD_CLOEXEC), b = eventfd(0, EFD_CLOEXEC);
	struct bouncer me = { .mode = pl->mode, .in = a, .out = b, .flag = &flag, .n = n + warm };
	struct bouncer peer = { .mode = pl->mode, .in = b, .out = a, .flag = &flag, .n = n + warm };
	struct perf_out out = { .tool = TOOL, .name = "kernel", .fmt = opts.fmt,
				.header = opts.header };
	struct perf_result res = { .test = T_WAKE, .mode = pl->mode, .iters = n, .window = 1 };
	uint32_t *ns = calloc(n, sizeof(*ns));
	uint64_t sum = 0;
	pthread_t thr;

	if (a < 0 || b < 0 || !ns || pthread_create(&thr, NULL, echo_main, &peer)) {
		perror(TOOL ": wake set-up");
		return PERF_EXIT_FAIL;
	}
	for (uint32_t i = 0; i < n + warm; i++) {
		uint64_t t0 = perf_now();

		bounce_post(&me, 2 * i + 1);
		if (bounce_wait(&me, 2 * i + 2)) {
			fprintf(stderr, "%s: wake: the echo thread did not answer\n", TOOL);
			return PERF_EXIT_FAIL;	/* the echo thread times out too */
		}
		if (i >= warm) {
			ns[i - warm] = (uint32_t)((perf_now() - t0) / 2);
			sum += ns[i - warm];
		}
	}
	pthread_join(thr, NULL);
	if (peer.rc || me.rc)
		return PERF_EXIT_FAIL;
	perf_lat_stats(ns, n, sum, &res);
	res.msg_s = res.avg_us > 0 ? 1e6 / res.avg_us : 0;
	perf_out_begin(&out);
	perf_out_row(&out, &res);
	perf_out_end(&out);
	free(ns);
	close(a);
	close(b);
	return 0;
}

/* -M's second thread: it only has to exist */
static void *idle_thread(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	struct perf_plan *pl = &opts.plan;
	uint32_t v;
	int rc;

	/* -A local_addr and -M bytes are fi-raw's own: the DAT IA gets its
	 * address from dat.conf, and is a threaded process with EP objects */
	for (int i = 1; i + 1 < argc;) {
		if (!strcmp(argv[i], "-A")) {
			local_addr = argv[i + 1];
		} else if (!strcmp(argv[i], "-M")) {
			if (perf_parse_uint(argv[i + 1], "-M bytes", 0, 1u << 24, &v))
				return PERF_EXIT_USAGE;
			ep_state = v;
			threaded = true;
		} else if (!strcmp(argv[i], "-D") || !strcmp(argv[i], "-DL")) {
			if (perf_parse_uint(argv[i + 1], "-D burst", 1, PERF_MAX_WINDOW, &v))
				return PERF_EXIT_USAGE;
			dtcm_burst = v;
			dtcm_late = argv[i][2] == 'L';
		} else {
			i++;
			continue;
		}
		memmove(&argv[i], &argv[i + 2], (size_t)(argc - i - 2) * sizeof(*argv));
		argc -= 2;
		argv[argc] = NULL;
	}
	rc = perf_parse_opts(argc, argv, &opts, "libfabric provider (-A sets the local "
			     "address, default 127.0.0.1; -M bytes: an idle second thread "
			     "and bytes of own state per conn endpoint; -D burst: conn in the stock "
			     "dtestcm's pattern, both sides; -DL burst: the same, each endpoint "
			     "opened right before its connect)", "tcp");
	if (rc)
		return rc < 0 ? 0 : rc;
	if (pl->mode == M_CNO || pl->mode == M_UPCALL) {
		fprintf(stderr, "%s: mode %s has no raw libfabric counterpart (poll, wait)\n", TOOL,
			perf_mode_names[pl->mode]);
		return PERF_EXIT_USAGE;
	}
	for (int k = 0; k < pl->ntests; k++) {
		enum perf_test t = (enum perf_test)pl->tests[k];

		if (t == T_WAKE && pl->ntests == 1)
			return test_wake();
		if (!perf_tests[t].peer) {
			fprintf(stderr, "%s: test %s has no raw libfabric counterpart (wake runs "
				"alone)\n", TOOL, perf_tests[t].name);
			return PERF_EXIT_USAGE;
		}
	}
	if (threaded) {
		pthread_t t;

		if ((rc = pthread_create(&t, NULL, idle_thread, NULL))) {
			fprintf(stderr, "%s: -M: pthread_create: %s\n", TOOL, strerror(rc));
			return PERF_EXIT_USAGE;
		}
		pthread_detach(t);
	}
	signal(SIGPIPE, SIG_IGN);
	perf_raise_nofile();
	return opts.host ? client(pl) : server();
}
