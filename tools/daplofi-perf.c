/*
 * daplofi-perf: a DAT benchmark.  It opens an IA by name through the stock
 * DAT registry (-P), like any DAT program: it includes only the stock DAT
 * headers and links only -ldat2, so it measures any DAT provider, dapl-ofi
 * or another.
 *
 *   server:  daplofi-perf -P ofi-lo
 *   client:  daplofi-perf -P ofi-lo -h 127.0.0.1 -t send_lat,write_bw -S 64:64k
 *   local:   daplofi-perf -t events | wake | cno [-m poll|wait|cno]
 *
 * The test bodies, options and output are shared with bench/fi-raw (raw
 * libfabric) in perf/perf.c; this file is the DAT transport: setup,
 * connection, posts, and completions by polling (dat_evd_dequeue), waiting
 * (dat_evd_wait) or a CNO (dat_cno_wait), plus the local event-core tests.
 */
#include <dat2/udat.h>
#include <netinet/in.h>		/* dat_ib_extensions.h needs sockaddr_in6 */
#include <dat2/dat_ib_extensions.h>

#if defined(__has_include)
#if __has_include(<dat2/dat_ofi_extensions.h>)
#include <dat2/dat_ofi_extensions.h>
#endif
#endif

#include "perf/perf.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <stdatomic.h>

#define TOOL		"daplofi-perf"
#define ASYNC_QLEN	8

/* Upcalls: dapl-ofi's DAT_OFI extension (<dat2/dat_ofi_extensions.h>),
 * through dat_extension_op.  Built without that header, every upcall
 * request answers "not available". */
#ifdef DAT_OFI_EVD_KCREATE_OP
#define HAVE_UPCALLS 1
#endif

/* Mode upcall: each DTO EVD's upcall (SINGLE_INSTANCE: never two at once,
 * so one producer) copies the event into a ring the benchmark thread spins
 * on.  The engine never has more completions pending than RING. */
#define RING 4096
struct up_ring {
	_Atomic uint32_t head;		/* the upcall's */
	_Atomic uint32_t tail;		/* the consumer's */
	_Atomic uint32_t overflow;
	DAT_EVENT ev[RING];
};

static struct perf_opts opts = { .prog = TOOL };

/* A failing DAT call: its name and the error decoded by dat_strerror. */
static int dat_fail(DAT_RETURN rc, const char *call)
{
	const char *major = "?", *minor = "";

	if (dat_strerror(rc, &major, &minor) != DAT_SUCCESS) {
		major = "(unknown DAT error)";
		minor = "";
	}
	fprintf(stderr, "%s: %s: %s%s%s (0x%08x)\n", TOOL, call, major ? major : "?",
		minor && *minor ? " " : "", minor ? minor : "", (unsigned)rc);
	return PERF_ERR;
}

#define DAT_CALL(call, ...) \
	do { \
		DAT_RETURN rc_ = call(__VA_ARGS__); \
		if (rc_ != DAT_SUCCESS) \
			return dat_fail(rc_, #call); \
	} while (0)

static DAT_TIMEOUT us_left(uint64_t deadline)
{
	uint64_t t = perf_now();

	if (t >= deadline)
		return 0;
	t = (deadline - t + 999) / 1000;
	return t > 0xfffffffeu ? 0xfffffffeu : (DAT_TIMEOUT)t;
}

static const char *event_name(DAT_EVENT_NUMBER n)
{
	switch (n) {
	case DAT_DTO_COMPLETION_EVENT: return "DAT_DTO_COMPLETION_EVENT";
	case DAT_CONNECTION_REQUEST_EVENT: return "DAT_CONNECTION_REQUEST_EVENT";
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "DAT_CONNECTION_EVENT_ESTABLISHED";
	case DAT_CONNECTION_EVENT_PEER_REJECTED: return "DAT_CONNECTION_EVENT_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED:
		return "DAT_CONNECTION_EVENT_NON_PEER_REJECTED (nobody listening?)";
	case DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR:
		return "DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DAT_CONNECTION_EVENT_DISCONNECTED";
	case DAT_CONNECTION_EVENT_BROKEN: return "DAT_CONNECTION_EVENT_BROKEN";
	case DAT_CONNECTION_EVENT_TIMED_OUT: return "DAT_CONNECTION_EVENT_TIMED_OUT";
	case DAT_CONNECTION_EVENT_UNREACHABLE: return "DAT_CONNECTION_EVENT_UNREACHABLE";
	case DAT_SOFTWARE_EVENT: return "DAT_SOFTWARE_EVENT";
	default: return "(another event)";
	}
}

static const char *dto_status_name(DAT_DTO_COMPLETION_STATUS s)
{
	switch (s) {
	case DAT_DTO_SUCCESS: return "DAT_DTO_SUCCESS";
	case DAT_DTO_ERR_FLUSHED: return "DAT_DTO_ERR_FLUSHED (the connection went down)";
	case DAT_DTO_ERR_LOCAL_LENGTH: return "DAT_DTO_ERR_LOCAL_LENGTH";
	case DAT_DTO_ERR_LOCAL_EP: return "DAT_DTO_ERR_LOCAL_EP";
	case DAT_DTO_ERR_LOCAL_PROTECTION: return "DAT_DTO_ERR_LOCAL_PROTECTION";
	case DAT_DTO_ERR_REMOTE_ACCESS: return "DAT_DTO_ERR_REMOTE_ACCESS";
	case DAT_DTO_ERR_TRANSPORT: return "DAT_DTO_ERR_TRANSPORT";
	default: return "(another DTO error)";
	}
}

/* ------------------------------------------------------------ transport */

struct dat_x {
	const char *who;
	int mode;
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_CNO_HANDLE cno;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_PSP_HANDLE psp;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_VADDR reg;			/* registered address of buf */
	uint8_t *buf;			/* rx | rdma | tx */
	size_t region;
	DAT_VADDR peer_addr;		/* the peer's RDMA region */
	DAT_RMR_CONTEXT peer_rctx;
	DAT_COUNT pdata_max;
	uint64_t seq;			/* cookies */
	struct up_ring *req_ring, *rcv_ring;	/* mode upcall */
	/* conn: the endpoints of a phase and their connection EVD (their
	 * DTO EVDs are req and rcv); a receive completion of ep that
	 * conn_drain met, for x_recv_done */
	DAT_EP_HANDLE *ceps;
	uint32_t nceps;
	DAT_EVD_HANDLE cconn;
	/* write_mt: each client EP's own request EVD, window + 4 deep */
	DAT_EVD_HANDLE *creqs;
	uint32_t cwindow;
	bool held;
	DAT_EVENT held_ev;
	bool server;
};

static DAT_LMR_TRIPLET seg(const struct dat_x *x, const uint8_t *p, size_t len)
{
	DAT_LMR_TRIPLET t;

	memset(&t, 0, sizeof(t));
	t.lmr_context = x->lctx;
	t.virtual_address = (DAT_VADDR)(uintptr_t)p;
	t.segment_length = (DAT_SEG_LENGTH)len;
	return t;
}

/* `len` bytes at `off` in the peer's RDMA region. */
static DAT_RMR_TRIPLET peer_seg(const struct dat_x *x, size_t off, size_t len)
{
	DAT_RMR_TRIPLET r;

	memset(&r, 0, sizeof(r));
	r.rmr_context = x->peer_rctx;
	r.virtual_address = x->peer_addr + off;
	r.segment_length = (DAT_SEG_LENGTH)len;
	return r;
}

static DAT_DTO_COOKIE cookie(struct dat_x *x)
{
	DAT_DTO_COOKIE c;

	c.as_64 = ++x->seq;
	return c;
}

static int x_post_send(void *p, size_t len, bool signaled)
{
	struct dat_x *x = p;
	DAT_LMR_TRIPLET t = seg(x, x->buf + 2 * x->region, len);
	DAT_RETURN rc = dat_ep_post_send(x->ep, len ? 1 : 0, &t, cookie(x),
					 signaled ? DAT_COMPLETION_DEFAULT_FLAG :
						    DAT_COMPLETION_SUPPRESS_FLAG);

	if (rc != DAT_SUCCESS)
		return dat_fail(rc, "dat_ep_post_send");
	return signaled ? 0 : PERF_NOCOMP;	/* a failure still shows as an event */
}

static int x_post_recv(void *p)
{
	struct dat_x *x = p;
	DAT_LMR_TRIPLET t = seg(x, x->buf, x->region);
	DAT_RETURN rc = dat_ep_post_recv(x->ep, 1, &t, cookie(x), DAT_COMPLETION_DEFAULT_FLAG);

	return rc == DAT_SUCCESS ? 0 : dat_fail(rc, "dat_ep_post_recv");
}

static int x_post_rdma(void *p, size_t len, bool write)
{
	struct dat_x *x = p;
	DAT_LMR_TRIPLET t = seg(x, write ? x->buf + 2 * x->region : x->buf + x->region, len);
	DAT_RMR_TRIPLET r = peer_seg(x, 0, len);
	DAT_RETURN rc;

	rc = write ? dat_ep_post_rdma_write(x->ep, 1, &t, cookie(x), &r, DAT_COMPLETION_DEFAULT_FLAG) :
		     dat_ep_post_rdma_read(x->ep, 1, &t, cookie(x), &r, DAT_COMPLETION_DEFAULT_FLAG);
	if (rc == DAT_SUCCESS)
		return 0;
	return dat_fail(rc, write ? "dat_ep_post_rdma_write" : "dat_ep_post_rdma_read");
}

static int x_post_write(void *p, size_t len)
{
	return x_post_rdma(p, len, true);
}

static int x_post_read(void *p, size_t len)
{
	return x_post_rdma(p, len, false);
}

/* dat_ib_post_rdma_write_immed (write_imm_lat): the peer's receive
 * completion, a DAT_IB_DTO_EVENT, says the write landed. */
static int x_post_write_imm(void *p, size_t len, uint32_t imm)
{
	struct dat_x *x = p;
	DAT_LMR_TRIPLET t = seg(x, x->buf + 2 * x->region, len);
	DAT_RMR_TRIPLET r = peer_seg(x, 0, len);
	DAT_RETURN rc = dat_ib_post_rdma_write_immed(x->ep, 1, &t, cookie(x), &r, imm,
						     DAT_COMPLETION_DEFAULT_FLAG);

	return rc == DAT_SUCCESS ? 0 : dat_fail(rc, "dat_ib_post_rdma_write_immed");
}

/* dat_ib_post_fetch_and_add (atomic_lat): native where the IA has
 * FI_ATOMIC (ofi-sock-lo), DAT_NOT_IMPLEMENTED on tcp. */
static int x_post_atomic(void *p)
{
	struct dat_x *x = p;
	DAT_LMR_TRIPLET t = seg(x, x->buf + x->region, 8);
	DAT_RMR_TRIPLET r = peer_seg(x, 0, 8);
	DAT_RETURN rc = dat_ib_post_fetch_and_add(x->ep, 1, &t, cookie(x), &r,
						  DAT_COMPLETION_DEFAULT_FLAG);

	return rc == DAT_SUCCESS ? 0 : dat_fail(rc, "dat_ib_post_fetch_and_add");
}

static int check_dto(const struct dat_x *x, const DAT_EVENT *ev, bool recv)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;

	if (ev->event_number == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT) {
		/* a write with immediate data: the sender's, or the receive it took */
		const DAT_IB_EXTENSION_EVENT_DATA *e =
			(const DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;

		if (d->status != DAT_DTO_SUCCESS ||
		    (recv ? e->type != DAT_IB_RDMA_WRITE_IMMED_DATA :
			    e->type != DAT_IB_RDMA_WRITE_IMMED && e->type != DAT_IB_FETCH_AND_ADD)) {
			fprintf(stderr, "%s: %s: %s EVD gave an IB extension event of type %d, "
				"status %s\n", TOOL, x->who, recv ? "receive" : "request",
				(int)e->type, dto_status_name(d->status));
			return PERF_ERR;
		}
		return 0;
	}
	if (ev->event_number != DAT_DTO_COMPLETION_EVENT) {
		fprintf(stderr, "%s: %s: %s EVD gave %s (0x%x), expected a DTO completion\n",
			TOOL, x->who, recv ? "receive" : "request", event_name(ev->event_number),
			(unsigned)ev->event_number);
		return PERF_ERR;
	}
	if (d->status != DAT_DTO_SUCCESS) {
		fprintf(stderr, "%s: %s: a %s completed with %s (%d)\n", TOOL, x->who,
			recv ? "receive" : d->operation == DAT_DTO_SEND ? "send" :
			d->operation == DAT_DTO_RDMA_WRITE ? "RDMA write" : "RDMA read",
			dto_status_name(d->status), (int)d->status);
		return PERF_ERR;
	}
	if (recv != (d->operation == DAT_DTO_RECEIVE)) {
		fprintf(stderr, "%s: %s: operation %d on the %s EVD\n", TOOL, x->who,
			(int)d->operation, recv ? "receive" : "request");
		return PERF_ERR;
	}
	return 0;
}

/*
 * One event from `evd`, by the run's mode:
 *   poll: dat_evd_dequeue until one is there;
 *   wait: dat_evd_wait (threshold 1);
 *   cno:  dequeue, else dat_cno_wait on the CNO both DTO EVDs feed.
 * deadline 0: one dequeue, no waiting.  1 got one, 0 none, PERF_TIMEDOUT,
 * PERF_ERR.
 */
static int ring_next(struct dat_x *x, struct up_ring *r, DAT_EVENT *ev, uint64_t deadline)
{
	uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	unsigned spins = 0;

	while (atomic_load_explicit(&r->head, memory_order_acquire) == t) {
		if (!deadline)
			return 0;
		if (++spins == 4096) {
			spins = 0;
			if (perf_now() > deadline)
				return PERF_TIMEDOUT;
		}
	}
	if (atomic_load_explicit(&r->overflow, memory_order_relaxed)) {
		fprintf(stderr, "%s: %s: an upcall found its ring full\n", TOOL, x->who);
		return PERF_ERR;
	}
	*ev = r->ev[t % RING];
	atomic_store_explicit(&r->tail, t + 1, memory_order_release);
	return 1;
}

static int next_event(struct dat_x *x, DAT_EVD_HANDLE evd, DAT_EVENT *ev, uint64_t deadline)
{
	DAT_RETURN rc;
	DAT_COUNT nmore;
	unsigned spins = 0;

	if (x->mode == M_UPCALL)
		return ring_next(x, evd == x->req ? x->req_ring : x->rcv_ring, ev, deadline);
	if (!deadline || x->mode != M_WAIT) {
		for (;;) {
			uint64_t t0 = evd == x->rcv ? perf_call_t0() : 0;

			rc = dat_evd_dequeue(evd, ev);
			perf_call_done(rc == DAT_SUCCESS ? PC_HIT : PC_EMPTY, t0);
			if (rc == DAT_SUCCESS)
				return 1;
			if (DAT_GET_TYPE(rc) != DAT_QUEUE_EMPTY)
				return dat_fail(rc, "dat_evd_dequeue");
			if (!deadline)
				return 0;
			if (x->mode == M_CNO) {
				DAT_EVD_HANDLE hint = DAT_HANDLE_NULL;

				rc = dat_cno_wait(x->cno, us_left(deadline), &hint);
				if (DAT_GET_TYPE(rc) == DAT_TIMEOUT_EXPIRED)
					return PERF_TIMEDOUT;
				if (rc != DAT_SUCCESS && DAT_GET_TYPE(rc) != DAT_INTERRUPTED_CALL)
					return dat_fail(rc, "dat_cno_wait");
			} else if (++spins == 4096) {
				spins = 0;
				if (perf_now() > deadline)
					return PERF_TIMEDOUT;
			}
		}
	}
	for (;;) {
		rc = dat_evd_wait(evd, us_left(deadline), 1, ev, &nmore);
		if (rc == DAT_SUCCESS)
			return 1;
		if (DAT_GET_TYPE(rc) == DAT_TIMEOUT_EXPIRED)
			return PERF_TIMEDOUT;
		if (DAT_GET_TYPE(rc) != DAT_INTERRUPTED_CALL)
			return dat_fail(rc, "dat_evd_wait");
	}
}

static int x_recv_done(void *p, size_t *len, uint64_t deadline)
{
	struct dat_x *x = p;
	DAT_EVENT ev;
	int rc;

	if (x->held) {		/* it came first */
		ev = x->held_ev;
		x->held = false;
		rc = 1;
	} else {
		rc = next_event(x, x->rcv, &ev, deadline);
	}
	if (rc == 1) {
		if (check_dto(x, &ev, true))
			return PERF_ERR;
		*len = ev.event_data.dto_completion_event_data.transfered_length;
		return PERF_OK;
	}
	return rc == 0 ? PERF_TIMEDOUT : rc;
}

/* Request completions of evd, waited for by w's mode: wait for the first,
 * then take what else is there, up to max (DAT returns one event per
 * call). */
static int reap(struct dat_x *w, DAT_EVD_HANDLE evd, int max, uint64_t deadline)
{
	DAT_EVENT ev;
	int n = 0, rc = next_event(w, evd, &ev, deadline);

	while (rc == 1) {
		if (check_dto(w, &ev, false))
			return PERF_ERR;
		if (++n >= max)
			break;
		rc = next_event(w, evd, &ev, 0);
	}
	if (rc < 0 && !n)
		return rc;
	return rc == PERF_ERR ? PERF_ERR : n;
}

static int x_req_done(void *p, int max, uint64_t deadline)
{
	struct dat_x *x = p;

	return reap(x, x->req, max, deadline);
}

/* ----------------------------------------------------------------- conn */

#define CONN_MAGIC 0x44505243u		/* "DPRC": a conn-test endpoint */

static uint64_t conn_deadline(void)
{
	return perf_now() + (uint64_t)opts.timeout_s * 1000000000u;
}

/* One event of evd within -T: by a dat_evd_dequeue loop with -m poll (as
 * dtestcm does by default), by dat_evd_wait otherwise. */
static int conn_event(struct dat_x *x, DAT_EVD_HANDLE evd, DAT_EVENT *ev, const char *what)
{
	struct dat_x w = { .who = x->who, .mode = x->mode == M_POLL ? M_POLL : M_WAIT };
	int rc = next_event(&w, evd, ev, conn_deadline());

	if (rc == 1)
		return 0;
	if (rc != PERF_ERR)
		fprintf(stderr, "%s: %s: conn: no %s within %u s (-T)\n", TOOL, x->who, what,
			opts.timeout_s);
	return PERF_ERR;
}

static int conn_expect(struct dat_x *x, const DAT_EVENT *ev, DAT_EVENT_NUMBER want)
{
	if (ev->event_number == want || (want == DAT_CONNECTION_EVENT_DISCONNECTED &&
					 ev->event_number == DAT_CONNECTION_EVENT_BROKEN))
		return 0;
	fprintf(stderr, "%s: %s: conn: got %s (0x%x), expected %s\n", TOOL, x->who,
		event_name(ev->event_number), (unsigned)ev->event_number, event_name(want));
	return PERF_ERR;
}

static int conn_ep(struct dat_x *x, uint32_t i)
{
	DAT_EVD_HANDLE req = x->req;
	DAT_EP_ATTR a;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = 16;	/* DAT's default queue depths */
	a.max_recv_dtos = 16;
	a.max_request_iov = 1;
	a.max_recv_iov = 1;
	a.max_rdma_read_iov = 1;
	a.max_rdma_write_iov = 1;
	a.max_rdma_read_in = 4;
	a.max_rdma_read_out = 4;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	if (x->creqs) {
		/* write_mt's writers: a request EVD each */
		a.max_request_dtos = (DAT_COUNT)x->cwindow + 4;
		DAT_CALL(dat_evd_create, x->ia, a.max_request_dtos + 16, DAT_HANDLE_NULL,
			 DAT_EVD_DTO_FLAG, &x->creqs[i]);
		req = x->creqs[i];
	}
	/* Otherwise the main EP's DTO EVDs: the ping-pong then runs on EVDs
	 * that N idle EPs share (issue 5).  These EPs post nothing, so
	 * nothing of theirs ever lands there - not even flushed receives
	 * when they disconnect - and the EVDs' depth (2 x the main EP's
	 * queue + 16) need not grow with N. */
	DAT_CALL(dat_ep_create, x->ia, x->pz, x->rcv, req, x->cconn, &a, &x->ceps[i]);
	return 0;
}

static struct sockaddr_in conn_peer;	/* the client's server address */

static int x_conn_up(void *p, uint32_t n, uint32_t window)
{
	struct dat_x *x = p;
	uint32_t posted = 0, up = 0;
	uint8_t pd[8];
	DAT_EVENT ev;

	x->ceps = calloc(n, sizeof(*x->ceps));
	if (!x->ceps)
		return PERF_ERR;
	x->nceps = 0;
	DAT_CALL(dat_evd_create, x->ia, 2 * (DAT_COUNT)n + 16, DAT_HANDLE_NULL,
		 DAT_EVD_CONNECTION_FLAG, &x->cconn);
	if (x->server) {
		while (posted < n) {
			DAT_CR_HANDLE cr;
			DAT_CR_PARAM crp;
			DAT_RETURN rc;

			if (conn_event(x, x->cr, &ev, "connection request") ||
			    conn_expect(x, &ev, DAT_CONNECTION_REQUEST_EVENT))
				return PERF_ERR;
			cr = ev.event_data.cr_arrival_event_data.cr_handle;
			memset(&crp, 0, sizeof(crp));
			DAT_CALL(dat_cr_query, cr, DAT_CR_FIELD_ALL, &crp);
			if (crp.private_data_size < 8 ||
			    perf_get32(crp.private_data) != CONN_MAGIC) {
				fprintf(stderr, "%s: server: conn: a request that is not the "
					"client's; rejected\n", TOOL);
				dat_cr_reject(cr, 0, NULL);
				return PERF_ERR;
			}
			if (conn_ep(x, posted))
				return PERF_ERR;
			x->nceps = ++posted;
			rc = dat_cr_accept(cr, x->ceps[posted - 1], 0, NULL);
			if (rc != DAT_SUCCESS)
				return dat_fail(rc, "dat_cr_accept");
		}
	}
	while (up < n) {
		while (!x->server && posted < n && posted - up < window) {
			DAT_RETURN rc;

			if (conn_ep(x, posted))
				return PERF_ERR;
			x->nceps = posted + 1;
			perf_put32(pd, CONN_MAGIC);
			perf_put32(pd + 4, posted);
			rc = dat_ep_connect(x->ceps[posted], (DAT_IA_ADDRESS_PTR)&conn_peer, opts.port,
					    (DAT_TIMEOUT)opts.timeout_s * 1000000u, sizeof(pd), pd,
					    DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
			if (rc != DAT_SUCCESS)
				return dat_fail(rc, "dat_ep_connect");
			posted++;
		}
		if (conn_event(x, x->cconn, &ev, "DAT_CONNECTION_EVENT_ESTABLISHED") ||
		    conn_expect(x, &ev, DAT_CONNECTION_EVENT_ESTABLISHED))
			return PERF_ERR;
		up++;
	}
	return 0;
}

/*
 * Once the conn EPs are freed nothing of theirs can arrive: take from a
 * shared DTO EVD whatever of theirs it holds (nothing, as they post
 * nothing; a DAT provider may think otherwise), so that the next phase
 * starts clean.  The main EP's own events cannot be put back: the engine
 * reaped its requests before conn_down, and the peer sends it at most one
 * message meanwhile - the client's end-of-phase barrier, which can reach
 * the server while it is still here - so one receive is kept for
 * x_recv_done; anything else is a failure.
 */
static int conn_drain(struct dat_x *x, DAT_EVD_HANDLE evd, bool recv)
{
	DAT_EVENT ev;
	int rc;

	while ((rc = next_event(x, evd, &ev, 0)) == 1) {
		if (ev.event_number == DAT_DTO_COMPLETION_EVENT &&
		    ev.event_data.dto_completion_event_data.ep_handle != x->ep)
			continue;		/* a conn EP's */
		if (!recv || x->held) {
			fprintf(stderr, "%s: %s: conn: the %s EVD holds more of the main EP's "
				"events than the plan allows (%s)\n", TOOL, x->who,
				recv ? "receive" : "request", event_name(ev.event_number));
			return PERF_ERR;
		}
		x->held_ev = ev;
		x->held = true;
	}
	return rc;
}

static int x_conn_down(void *p, uint32_t n)
{
	struct dat_x *x = p;
	DAT_EVENT ev;

	if (!x->server)
		for (uint32_t i = 0; i < n; i++)
			DAT_CALL(dat_ep_disconnect, x->ceps[i], DAT_CLOSE_GRACEFUL_FLAG);
	for (uint32_t i = 0; i < n; i++)
		if (conn_event(x, x->cconn, &ev, "DAT_CONNECTION_EVENT_DISCONNECTED") ||
		    conn_expect(x, &ev, DAT_CONNECTION_EVENT_DISCONNECTED))
			return PERF_ERR;
	for (uint32_t i = 0; i < x->nceps; i++)
		DAT_CALL(dat_ep_free, x->ceps[i]);
	if (conn_drain(x, x->req, false) || conn_drain(x, x->rcv, true))
		return PERF_ERR;
	DAT_CALL(dat_evd_free, x->cconn);
	free(x->ceps);
	x->ceps = NULL;
	x->nceps = 0;
	return 0;
}

/* ------------------------------------------------------------- write_mt */

static int x_mt_up(void *p, uint32_t n, uint32_t window)
{
	struct dat_x *x = p;

	if (!x->server) {	/* the server's EPs are passive targets */
		x->creqs = calloc(n, sizeof(*x->creqs));
		if (!x->creqs)
			return PERF_ERR;
		x->cwindow = window;
	}
	return x_conn_up(p, n, window);
}

/* Writer k's slice of the send region to its slice of the peer's. */
static int x_mt_write(void *p, uint32_t k)
{
	struct dat_x *x = p;
	DAT_LMR_TRIPLET t = seg(x, x->buf + 2 * x->region + k * PERF_MT_SIZE, PERF_MT_SIZE);
	DAT_RMR_TRIPLET r = peer_seg(x, k * PERF_MT_SIZE, PERF_MT_SIZE);
	DAT_DTO_COOKIE c = { .as_64 = k };
	DAT_RETURN rc;

	rc = dat_ep_post_rdma_write(x->ceps[k], 1, &t, c, &r, DAT_COMPLETION_DEFAULT_FLAG);
	return rc == DAT_SUCCESS ? 0 : dat_fail(rc, "dat_ep_post_rdma_write");
}

/* As x_req_done, on EP k's own EVD (no CNO, no upcall: -m cno and upcall
 * wait with dat_evd_wait). */
static int x_mt_reap(void *p, uint32_t k, int max, uint64_t deadline)
{
	struct dat_x *x = p;
	struct dat_x w = { .who = x->who, .mode = x->mode == M_POLL ? M_POLL : M_WAIT };

	return reap(&w, x->creqs[k], max, deadline);
}

static int x_mt_down(void *p, uint32_t n)
{
	struct dat_x *x = p;
	int rc = x_conn_down(p, n);

	for (uint32_t i = 0; x->creqs && i < n; i++)
		if (x->creqs[i] && !rc)
			DAT_CALL(dat_evd_free, x->creqs[i]);
	free(x->creqs);
	x->creqs = NULL;
	return rc;
}

static const struct perf_ops dat_ops = {
	.post_send = x_post_send, .post_recv = x_post_recv,
	.post_write = x_post_write, .post_read = x_post_read,
	.post_write_imm = x_post_write_imm, .imm_takes_recv = true,	/* as on IB */
	.post_atomic = x_post_atomic,
	.recv_done = x_recv_done, .req_done = x_req_done,
	.conn_up = x_conn_up, .conn_down = x_conn_down,
	.mt_up = x_mt_up, .mt_write = x_mt_write, .mt_reap = x_mt_reap, .mt_down = x_mt_down,
	.idle_target = true,	/* the provider's progress thread */
};

/* -------------------------------------------------------------- set-up */

static int upcall_unavailable(const DAT_IA_ATTR *a, const char *why)
{
	fprintf(stderr, "upcalls: not available from this provider (%s: %s)\n", opts.name, why);
	(void)a;
	return PERF_EXIT_NA;
}

#ifdef HAVE_UPCALLS
static void ring_upcall(DAT_PVOID data, const DAT_EVENT *ev, DAT_BOOLEAN more_events)
{
	struct up_ring *r = data;
	uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);

	(void)more_events;
	if (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING) {
		atomic_fetch_add_explicit(&r->overflow, 1, memory_order_relaxed);
		return;
	}
	r->ev[h % RING] = *ev;
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

static void noop_upcall(DAT_PVOID data, const DAT_EVENT *ev, DAT_BOOLEAN more_events)
{
	(void)data;
	(void)ev;
	(void)more_events;
}

/* A DTO or software EVD whose every event goes to fn(data). */
static int upcall_evd(struct dat_x *x, DAT_COUNT qlen, DAT_EVD_FLAGS flags,
		      DAT_UPCALL_FUNC fn, void *data, DAT_EVD_HANDLE *evd)
{
	DAT_UPCALL_OBJECT o = { .instance_data = data, .upcall_func = fn };

	DAT_CALL(dat_evd_kcreate, x->ia, qlen, DAT_UPCALL_SINGLE_INSTANCE, &o, flags, evd);
	return 0;
}

static int upcall_evd_free(DAT_EVD_HANDLE evd)
{
	DAT_CALL(dat_evd_modify_upcall, evd, DAT_UPCALL_TEARDOWN, DAT_UPCALL_SAME,
		 DAT_UPCALL_INVOC_NEW);
	DAT_CALL(dat_evd_free, evd);
	return 0;
}
#endif

/* 0: upcalls can be used; PERF_EXIT_NA (told on stderr): they cannot - no
 * extension, or its EVD creation answers DAT_NOT_IMPLEMENTED. */
static int upcall_probe(struct dat_x *x, const DAT_IA_ATTR *a)
{
	if (a->extension_supported == DAT_EXTENSION_NONE)
		return upcall_unavailable(a, "dat_ia_query reports no DAT extension");
#ifdef HAVE_UPCALLS
	{
		DAT_UPCALL_OBJECT o = { .instance_data = NULL, .upcall_func = noop_upcall };
		DAT_EVD_HANDLE evd;
		DAT_RETURN rc;

		if (!dat_ofi_upcall_supported(x->ia, DAT_OFI_EXTENSION_VERSION))
			return upcall_unavailable(a, "it has no dapl-ofi upcall extension "
						  "(provider attribute " DAT_OFI_ATTR_UPCALL ")");
		rc = dat_evd_kcreate(x->ia, 8, DAT_UPCALL_SINGLE_INSTANCE, &o,
				     DAT_EVD_SOFTWARE_FLAG, &evd);
		if (DAT_GET_TYPE(rc) == DAT_NOT_IMPLEMENTED)
			return upcall_unavailable(a, "dat_evd_kcreate returns DAT_NOT_IMPLEMENTED");
		if (rc != DAT_SUCCESS) {
			dat_fail(rc, "dat_evd_kcreate");
			return PERF_EXIT_FAIL;
		}
		if (upcall_evd_free(evd))
			return PERF_EXIT_FAIL;
		return 0;
	}
#else
	(void)x;
	return upcall_unavailable(a, "this daplofi-perf was built without "
				  "<dat2/dat_ofi_extensions.h>");
#endif
}

static int ia_open(struct dat_x *x, DAT_IA_ATTR *ia_attr, DAT_PROVIDER_ATTR *pr_attr)
{
	char name[DAT_NAME_MAX_LENGTH];
	DAT_RETURN rc;

	snprintf(name, sizeof(name), "%s", opts.name);
	x->async = DAT_HANDLE_NULL;
	rc = dat_ia_open(name, ASYNC_QLEN, &x->async, &x->ia);
	if (rc != DAT_SUCCESS) {
		dat_fail(rc, "dat_ia_open");
		fprintf(stderr, "%s: IA '%s' (DAT_OVERRIDE=%s)\n", TOOL, opts.name,
			getenv("DAT_OVERRIDE") ? getenv("DAT_OVERRIDE") : "unset: /etc/dat.conf");
		return PERF_ERR;
	}
	DAT_CALL(dat_ia_query, x->ia, NULL, DAT_IA_ALL, ia_attr, DAT_PROVIDER_FIELD_ALL, pr_attr);
	x->pdata_max = pr_attr->max_private_data_size;
	return 0;
}

/* PZ, CNO, the two DTO EVDs, the buffer and its LMR, the connection EVD and
 * the EP, for the plan `pl` (the server learns it from the request). */
static int resources(struct dat_x *x, const struct perf_plan *pl)
{
	DAT_MEM_PRIV_FLAGS priv = DAT_MEM_PRIV_ALL_FLAG;
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN reg_len = 0;
	DAT_EP_ATTR a;
	DAT_COUNT reqd = perf_req_depth(pl), rcvd = perf_recv_depth(pl);
	DAT_CNO_HANDLE cno = DAT_HANDLE_NULL;

	x->mode = pl->mode;
	DAT_CALL(dat_pz_create, x->ia, &x->pz);
	if (x->mode == M_CNO) {
		DAT_CALL(dat_cno_create, x->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &x->cno);
		cno = x->cno;
	}
	if (x->mode == M_UPCALL) {
#ifdef HAVE_UPCALLS
		x->req_ring = calloc(1, sizeof(*x->req_ring));
		x->rcv_ring = calloc(1, sizeof(*x->rcv_ring));
		if (!x->req_ring || !x->rcv_ring ||
		    upcall_evd(x, 2 * reqd + 16, DAT_EVD_DTO_FLAG, ring_upcall, x->req_ring, &x->req) ||
		    upcall_evd(x, 2 * rcvd + 16, DAT_EVD_DTO_FLAG, ring_upcall, x->rcv_ring, &x->rcv))
			return PERF_ERR;
#else
		return PERF_ERR;	/* refused by upcall_probe before */
#endif
	} else {
		DAT_CALL(dat_evd_create, x->ia, 2 * reqd + 16, cno, DAT_EVD_DTO_FLAG, &x->req);
		DAT_CALL(dat_evd_create, x->ia, 2 * rcvd + 16, cno, DAT_EVD_DTO_FLAG, &x->rcv);
	}
	DAT_CALL(dat_evd_create, x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &x->conn);

	x->region = (perf_max_size(pl) + 4095) & ~(size_t)4095;
	x->buf = aligned_alloc(4096, 3 * x->region);
	if (!x->buf) {
		fprintf(stderr, "%s: no memory for 3 x %zu bytes\n", TOOL, x->region);
		return PERF_ERR;
	}
	memset(x->buf, 0, 3 * x->region);	/* touch every page now */
	memset(&region, 0, sizeof(region));
	region.for_va = x->buf;
	/* remote atomics too for atomic_lat (an emulating IA checks the right),
	 * and only then: on tcp that right has the progress thread read
	 * receive CQs that the consumer's request-CQ reads would leave to it */
	for (unsigned i = 0; i < pl->ntests; i++)
		if (pl->tests[i] == T_ATOMIC_LAT)
			priv |= DAT_IB_MEM_PRIV_REMOTE_ATOMIC;
	DAT_CALL(dat_lmr_create, x->ia, DAT_MEM_TYPE_VIRTUAL, region, 3 * x->region, x->pz,
		 priv, DAT_VA_TYPE_VA, &x->lmr, &x->lctx, &x->rctx, &reg_len, &x->reg);

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = reqd;
	a.max_recv_dtos = rcvd;
	a.max_request_iov = 1;
	a.max_recv_iov = 1;
	a.max_rdma_read_iov = 1;
	a.max_rdma_write_iov = 1;
	a.max_rdma_read_in = PERF_READ_WINDOW;
	a.max_rdma_read_out = PERF_READ_WINDOW;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	DAT_CALL(dat_ep_create, x->ia, x->pz, x->rcv, x->req, x->conn, &a, &x->ep);
	return 0;
}

/* The RDMA region: buf + region, as the peer addresses it. */
static DAT_VADDR rdma_addr(const struct dat_x *x)
{
	return x->reg + x->region;
}

static int wait_conn(struct dat_x *x, DAT_EVENT_NUMBER want, DAT_EVENT *ev)
{
	int rc = next_event(&(struct dat_x){ .who = x->who, .mode = M_WAIT }, x->conn, ev,
			    perf_now() + (uint64_t)opts.timeout_s * 1000000000u);

	if (rc == PERF_TIMEDOUT || rc == 0) {
		fprintf(stderr, "%s: %s: no %s within %u s (-T)\n", TOOL, x->who,
			event_name(want), opts.timeout_s);
		return PERF_ERR;
	}
	if (rc < 0)
		return rc;
	if (ev->event_number != want) {
		fprintf(stderr, "%s: %s: connection EVD gave %s (0x%x), expected %s\n", TOOL,
			x->who, event_name(ev->event_number), (unsigned)ev->event_number,
			event_name(want));
		return PERF_ERR;
	}
	return 0;
}

static int teardown(struct dat_x *x, bool initiator)
{
	DAT_EVENT ev;

	if (initiator)
		DAT_CALL(dat_ep_disconnect, x->ep, DAT_CLOSE_GRACEFUL_FLAG);
	if (wait_conn(x, DAT_CONNECTION_EVENT_DISCONNECTED, &ev))
		return PERF_ERR;
	/* flushed receives land on the receive EVD: drain them */
	while (dat_evd_dequeue(x->rcv, &ev) == DAT_SUCCESS)
		;
	while (dat_evd_dequeue(x->req, &ev) == DAT_SUCCESS)
		;
	if (x->psp)
		DAT_CALL(dat_psp_free, x->psp);
	DAT_CALL(dat_ep_free, x->ep);
	DAT_CALL(dat_lmr_free, x->lmr);
#ifdef HAVE_UPCALLS
	if (x->mode == M_UPCALL) {
		if (upcall_evd_free(x->req) || upcall_evd_free(x->rcv))
			return PERF_ERR;
		x->req = x->rcv = DAT_HANDLE_NULL;
	}
#endif
	if (x->req)
		DAT_CALL(dat_evd_free, x->req);
	if (x->rcv)
		DAT_CALL(dat_evd_free, x->rcv);
	free(x->req_ring);
	free(x->rcv_ring);
	DAT_CALL(dat_evd_free, x->conn);
	if (x->cr)
		DAT_CALL(dat_evd_free, x->cr);
	if (x->cno)
		DAT_CALL(dat_cno_free, x->cno);
	DAT_CALL(dat_pz_free, x->pz);
	DAT_CALL(dat_ia_close, x->ia, DAT_CLOSE_GRACEFUL_FLAG);
	free(x->buf);
	return 0;
}

static int post_recvs(struct perf_run *r, int n)
{
	for (int i = 0; i < n; i++)
		if (r->ops->post_recv(r->x))
			return PERF_ERR;
	return 0;
}

static void run_init(struct perf_run *r, struct dat_x *x, const struct perf_plan *pl,
		     struct perf_out *out, bool server)
{
	perf_run_init(r, &dat_ops, x, TOOL, x->buf, x->region, pl, out, server,
		      opts.timeout_s, opts.quiet);
}

static int server(void)
{
	struct dat_x x = { .who = "server", .server = true };
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;
	DAT_EVENT ev;
	DAT_CR_PARAM crp;
	DAT_CR_HANDLE cr;
	struct perf_plan pl;
	struct perf_run r;
	uint8_t acc[PERF_ACCEPT_LEN];
	const char *why;
	DAT_RETURN drc;
	int rc;

	if (ia_open(&x, &ia_attr, &pr_attr))
		return PERF_EXIT_FAIL;
	/* deep enough for the conn test's window of connection requests */
	drc = dat_evd_create(x.ia, PERF_MAX_WINDOW + 24, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &x.cr);
	if (drc != DAT_SUCCESS) {
		dat_fail(drc, "dat_evd_create");
		return PERF_EXIT_FAIL;
	}
	drc = dat_psp_create(x.ia, opts.port, x.cr, DAT_PSP_CONSUMER_FLAG, &x.psp);
	if (drc != DAT_SUCCESS) {
		dat_fail(drc, "dat_psp_create");
		fprintf(stderr, "%s: server: cannot listen on port %u (-n)\n", TOOL, opts.port);
		return PERF_EXIT_FAIL;
	}
	printf("%s: server listening on port %u (IA %s, %s)\n", TOOL, opts.port, opts.name,
	       ia_attr.adapter_name);
	fflush(stdout);

	rc = next_event(&(struct dat_x){ .who = "server", .mode = M_WAIT }, x.cr, &ev,
			perf_now() + (uint64_t)opts.timeout_s * 1000000000u);
	if (rc != 1) {
		if (rc != PERF_ERR)
			fprintf(stderr, "%s: server: no client within %u s (-T)\n", TOOL,
				opts.timeout_s);
		return PERF_EXIT_FAIL;
	}
	if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT) {
		fprintf(stderr, "%s: server: CR EVD gave %s\n", TOOL, event_name(ev.event_number));
		return PERF_EXIT_FAIL;
	}
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	memset(&crp, 0, sizeof(crp));
	drc = dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp);
	if (drc != DAT_SUCCESS) {
		dat_fail(drc, "dat_cr_query");
		return PERF_EXIT_FAIL;
	}
	why = perf_plan_decode(crp.private_data, (size_t)crp.private_data_size, &pl);
	if (why) {
		fprintf(stderr, "%s: server: rejecting a connection: %s\n", TOOL, why);
		dat_cr_reject(cr, 0, NULL);
		return PERF_EXIT_FAIL;
	}
	if (pl.mode == M_UPCALL && upcall_probe(&x, &ia_attr)) {
		fprintf(stderr, "%s: server: rejecting a client that asks for upcalls\n", TOOL);
		dat_cr_reject(cr, 0, NULL);
		return PERF_EXIT_NA;
	}
	if (resources(&x, &pl))
		return PERF_EXIT_FAIL;
	x.peer_addr = pl.addr;
	x.peer_rctx = (DAT_RMR_CONTEXT)pl.key;
	run_init(&r, &x, &pl, NULL, true);
	/* receives posted before the accept: the client's first barrier
	 * finds one (a few more after ESTABLISHED) */
	if (post_recvs(&r, 2))
		return PERF_EXIT_FAIL;
	perf_accept_encode(rdma_addr(&x), x.rctx, x.region, acc);
	drc = dat_cr_accept(cr, x.ep, PERF_ACCEPT_LEN, acc);
	if (drc != DAT_SUCCESS) {
		dat_fail(drc, "dat_cr_accept");
		return PERF_EXIT_FAIL;
	}
	if (wait_conn(&x, DAT_CONNECTION_EVENT_ESTABLISHED, &ev) ||
	    post_recvs(&r, perf_recv_depth(&pl) - 2))
		return PERF_EXIT_FAIL;
	if (opts.verbose)
		fprintf(stderr, "%s: server: client connected; %d tests x %d sizes, mode %s\n",
			TOOL, pl.ntests, pl.nsizes, perf_mode_names[pl.mode]);
	if (perf_run_plan(&r) || teardown(&x, false))
		return PERF_EXIT_FAIL;
	if (opts.verbose)
		fprintf(stderr, "%s: server: done\n", TOOL);
	return 0;
}

static int resolve(const char *host, struct sockaddr_in *sin)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
	int rc;

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
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
	struct dat_x x = { .who = "client" };
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;
	DAT_EVENT ev;
	struct sockaddr_in sin;
	struct perf_run r;
	struct perf_out out = { .tool = TOOL, .name = opts.name, .fmt = opts.fmt,
				.header = opts.header };
	uint8_t pd[PERF_PLAN_LEN];
	uint64_t addr, key, region;
	const DAT_CONNECTION_EVENT_DATA *cd;
	DAT_RETURN rc;
	int prc;

	if (resolve(opts.host, &sin) || ia_open(&x, &ia_attr, &pr_attr))
		return PERF_EXIT_FAIL;
	conn_peer = sin;
	if (pl->mode == M_UPCALL && (prc = upcall_probe(&x, &ia_attr)) != 0) {
		dat_ia_close(x.ia, DAT_CLOSE_ABRUPT_FLAG);
		return prc;
	}
	if (x.pdata_max < PERF_PLAN_LEN) {
		fprintf(stderr, "%s: IA %s carries %d bytes of private data, the plan needs %d\n",
			TOOL, opts.name, x.pdata_max, PERF_PLAN_LEN);
		return PERF_EXIT_FAIL;
	}
	if (resources(&x, pl))
		return PERF_EXIT_FAIL;
	pl->addr = rdma_addr(&x);
	pl->key = x.rctx;
	pl->region = x.region;
	perf_plan_encode(pl, pd);
	rc = dat_ep_connect(x.ep, (DAT_IA_ADDRESS_PTR)&sin, opts.port,
			    (DAT_TIMEOUT)opts.timeout_s * 1000000u, PERF_PLAN_LEN, pd,
			    DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
	if (rc != DAT_SUCCESS) {
		dat_fail(rc, "dat_ep_connect");
		return PERF_EXIT_FAIL;
	}
	if (wait_conn(&x, DAT_CONNECTION_EVENT_ESTABLISHED, &ev)) {
		fprintf(stderr, "%s: client: could not connect to %s port %u: is the server "
			"running (%s -P %s -n %u)?\n", TOOL, opts.host, opts.port, TOOL,
			opts.name, opts.port);
		return PERF_EXIT_FAIL;
	}
	cd = &ev.event_data.connect_event_data;
	if (!perf_accept_decode(cd->private_data, (size_t)cd->private_data_size, &addr, &key,
				&region)) {
		fprintf(stderr, "%s: client: the server's accept carries no region (%d bytes of "
			"private data): is it %s?\n", TOOL, cd->private_data_size, TOOL);
		return PERF_EXIT_FAIL;
	}
	x.peer_addr = addr;
	x.peer_rctx = (DAT_RMR_CONTEXT)key;
	run_init(&r, &x, pl, &out, false);
	if (post_recvs(&r, perf_recv_depth(pl)))
		return PERF_EXIT_FAIL;
	perf_out_begin(&out);
	if (perf_run_plan(&r)) {
		perf_out_end(&out);
		return PERF_EXIT_FAIL;
	}
	perf_out_end(&out);
	return teardown(&x, true) ? PERF_EXIT_FAIL : 0;
}

/* ---------------------------------------------------------- local tests */

/* events: post_se + dequeue pairs on one software EVD, one thread. */
static int test_events(struct dat_x *x, struct perf_out *out)
{
	const struct perf_plan *pl = &opts.plan;
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev, got;
	uint64_t t0, t1;
	uint32_t n = pl->iters;
	struct perf_result res = { .test = T_EVENTS, .mode = M_POLL, .iters = n, .window = 1 };

	DAT_CALL(dat_evd_create, x->ia, 1024, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd);
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	for (uint32_t i = 0; i < pl->warmup; i++) {
		DAT_CALL(dat_evd_post_se, evd, &ev);
		DAT_CALL(dat_evd_dequeue, evd, &got);
	}
	t0 = perf_now();
	for (uint32_t i = 0; i < n; i++) {
		ev.event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)i;
		DAT_CALL(dat_evd_post_se, evd, &ev);
		DAT_CALL(dat_evd_dequeue, evd, &got);
		if (got.event_data.software_event_data.pointer != (DAT_PVOID)(uintptr_t)i) {
			fprintf(stderr, "%s: events: pair %" PRIu32 " dequeued another event\n",
				TOOL, i);
			return PERF_ERR;
		}
	}
	t1 = perf_now();
	res.msg_s = n / ((t1 - t0) / 1e9);
	res.avg_us = (t1 - t0) / 1e3 / n;
	perf_out_row(out, &res);
	DAT_CALL(dat_evd_free, evd);
	return 0;
}

/* wake / cno: two threads bounce a software event through two EVDs; each
 * waits by the mode (poll: dequeue; wait: dat_evd_wait; cno: each EVD feeds
 * its own CNO and the thread sleeps in dat_cno_wait).  One-way = RTT / 2. */
struct bouncer {
	struct dat_x *x;
	int mode;
	DAT_EVD_HANDLE in, out;
	DAT_CNO_HANDLE cno;
	uint32_t n;
	int rc;
};

static int wake_wait(struct bouncer *b, DAT_EVENT *ev)
{
	struct dat_x w = { .who = "wake", .mode = b->mode, .cno = b->cno };
	int rc = next_event(&w, b->in, ev,
			    perf_now() + (uint64_t)opts.timeout_s * 1000000000u);

	if (rc == 1)
		return 0;
	if (rc != PERF_ERR)
		fprintf(stderr, "%s: wake: no event within %u s (-T)\n", TOOL, opts.timeout_s);
	return PERF_ERR;
}

static void *echo_main(void *arg)
{
	struct bouncer *b = arg;
	DAT_EVENT ev;

	for (uint32_t i = 0; i < b->n; i++) {
		DAT_RETURN rc;

		if (wake_wait(b, &ev)) {
			b->rc = PERF_ERR;
			return NULL;
		}
		rc = dat_evd_post_se(b->out, &ev);
		if (rc != DAT_SUCCESS) {
			b->rc = dat_fail(rc, "dat_evd_post_se");
			return NULL;
		}
	}
	return NULL;
}

static int test_wake(struct dat_x *x, struct perf_out *out, enum perf_test t)
{
	const struct perf_plan *pl = &opts.plan;
	int mode = t == T_CNO ? M_CNO : pl->mode;
	uint32_t n = pl->iters, warm = pl->warmup;
	struct bouncer me = { .x = x, .mode = mode, .n = n + warm };
	struct bouncer peer = { .x = x, .mode = mode, .n = n + warm };
	struct perf_result res = { .test = t, .mode = (uint8_t)mode, .iters = n, .window = 1 };
	uint32_t *ns = calloc(n, sizeof(*ns));
	uint64_t sum = 0;
	pthread_t thr;
	DAT_EVENT ev;
	int rc = 0;

	if (!ns)
		return PERF_ERR;
	if (mode == M_CNO) {
		DAT_CALL(dat_cno_create, x->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &me.cno);
		DAT_CALL(dat_cno_create, x->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &peer.cno);
	}
	DAT_CALL(dat_evd_create, x->ia, 16, me.cno, DAT_EVD_SOFTWARE_FLAG, &me.in);
	DAT_CALL(dat_evd_create, x->ia, 16, peer.cno, DAT_EVD_SOFTWARE_FLAG, &peer.in);
	me.out = peer.in;
	peer.out = me.in;
	if (pthread_create(&thr, NULL, echo_main, &peer)) {
		fprintf(stderr, "%s: wake: pthread_create failed\n", TOOL);
		return PERF_ERR;
	}
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	for (uint32_t i = 0; i < n + warm && !rc; i++) {
		uint64_t t0 = perf_now();

		if (dat_evd_post_se(me.out, &ev) != DAT_SUCCESS || wake_wait(&me, &ev)) {
			rc = PERF_ERR;
			break;
		}
		if (i >= warm) {
			ns[i - warm] = (uint32_t)((perf_now() - t0) / 2);
			sum += ns[i - warm];
		}
	}
	if (rc) {
		/* the echo thread gives up at its own timeout */
		pthread_join(thr, NULL);
		free(ns);
		return PERF_ERR;
	}
	pthread_join(thr, NULL);
	if (peer.rc) {
		free(ns);
		return PERF_ERR;
	}
	perf_lat_stats(ns, n, sum, &res);
	res.msg_s = res.avg_us > 0 ? 1e6 / res.avg_us : 0;
	perf_out_row(out, &res);
	free(ns);
	DAT_CALL(dat_evd_free, me.in);
	DAT_CALL(dat_evd_free, peer.in);
	if (me.cno) {
		DAT_CALL(dat_cno_free, me.cno);
		DAT_CALL(dat_cno_free, peer.cno);
	}
	return 0;
}

/* upcall: the time from dat_evd_post_se to the start of the upcall that
 * delivers the event (a dispatcher thread of the provider), while this
 * thread spins on the upcall's stamp. */
struct up_stamp {
	_Atomic uint64_t t;
	_Atomic uint32_t n;
};

#ifdef HAVE_UPCALLS
static void stamp_upcall(DAT_PVOID data, const DAT_EVENT *ev, DAT_BOOLEAN more_events)
{
	struct up_stamp *s = data;

	(void)ev;
	(void)more_events;
	atomic_store_explicit(&s->t, perf_now(), memory_order_relaxed);
	atomic_fetch_add_explicit(&s->n, 1, memory_order_release);
}
#endif

static int test_upcall(struct dat_x *x, struct perf_out *out)
{
#ifdef HAVE_UPCALLS
	const struct perf_plan *pl = &opts.plan;
	uint32_t n = pl->iters, warm = pl->warmup;
	struct perf_result res = { .test = T_UPCALL, .mode = M_UPCALL, .iters = n, .window = 1 };
	struct up_stamp st = { 0 };
	uint32_t *ns = calloc(n, sizeof(*ns));
	uint64_t sum = 0;
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev;
	int rc = 0;

	if (!ns || upcall_evd(x, 16, DAT_EVD_SOFTWARE_FLAG, stamp_upcall, &st, &evd)) {
		free(ns);
		return PERF_ERR;
	}
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	for (uint32_t i = 0; i < n + warm && !rc; i++) {
		uint64_t t0 = perf_now(), deadline = t0 + (uint64_t)opts.timeout_s * 1000000000u;
		DAT_RETURN drc = dat_evd_post_se(evd, &ev);
		unsigned spins = 0;

		if (drc != DAT_SUCCESS) {
			rc = dat_fail(drc, "dat_evd_post_se");
			break;
		}
		while (atomic_load_explicit(&st.n, memory_order_acquire) != i + 1)
			if (++spins == 4096) {
				spins = 0;
				if (perf_now() > deadline) {
					fprintf(stderr, "%s: upcall: event %" PRIu32 " raised no upcall "
						"within %u s (-T)\n", TOOL, i, opts.timeout_s);
					rc = PERF_ERR;
					break;
				}
			}
		if (!rc && i >= warm) {
			ns[i - warm] = (uint32_t)(atomic_load_explicit(&st.t, memory_order_relaxed) - t0);
			sum += ns[i - warm];
		}
	}
	if (upcall_evd_free(evd))
		rc = PERF_ERR;
	if (!rc) {
		perf_lat_stats(ns, n, sum, &res);
		res.msg_s = res.avg_us > 0 ? 1e6 / res.avg_us : 0;
		perf_out_row(out, &res);
	}
	free(ns);
	return rc;
#else
	(void)x;
	(void)out;
	return PERF_ERR;	/* refused by upcall_probe before */
#endif
}

static int local_tests(void)
{
	struct dat_x x = { .who = "local" };
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;
	struct perf_out out = { .tool = TOOL, .name = opts.name, .fmt = opts.fmt,
				.header = opts.header };
	const struct perf_plan *pl = &opts.plan;
	int rc = 0;

	if (ia_open(&x, &ia_attr, &pr_attr))
		return PERF_EXIT_FAIL;
	for (int k = 0; k < pl->ntests; k++)
		if (pl->tests[k] == T_UPCALL && (rc = upcall_probe(&x, &ia_attr)) != 0) {
			dat_ia_close(x.ia, DAT_CLOSE_ABRUPT_FLAG);
			return rc;
		}
	perf_out_begin(&out);
	for (int k = 0; k < pl->ntests && !rc; k++) {
		enum perf_test t = (enum perf_test)pl->tests[k];

		rc = t == T_EVENTS ? test_events(&x, &out) :
		     t == T_UPCALL ? test_upcall(&x, &out) : test_wake(&x, &out, t);
	}
	perf_out_end(&out);
	if (rc)
		return PERF_EXIT_FAIL;
	if (dat_ia_close(x.ia, DAT_CLOSE_GRACEFUL_FLAG) != DAT_SUCCESS)
		return PERF_EXIT_FAIL;
	return 0;
}

int main(int argc, char **argv)
{
	struct perf_plan *pl = &opts.plan;
	int rc, local = 0, peer = 0;

	rc = perf_parse_opts(argc, argv, &opts, "IA name, as in dat.conf", "ofi-lo");
	if (rc)
		return rc < 0 ? 0 : rc;
	for (int k = 0; k < pl->ntests; k++) {
		if (perf_tests[pl->tests[k]].peer)
			peer++;
		else
			local++;
	}
	if (local && peer) {
		fprintf(stderr, "%s: local tests (events, wake, cno, upcall) and peer tests do "
			"not mix in one run\n", TOOL);
		return PERF_EXIT_USAGE;
	}
	if (local && pl->mode == M_UPCALL &&
	    (pl->ntests != 1 || pl->tests[0] != T_UPCALL)) {
		fprintf(stderr, "%s: -m upcall applies to the peer tests; the local test of "
			"upcalls is -t upcall\n", TOOL);
		return PERF_EXIT_USAGE;
	}
	signal(SIGPIPE, SIG_IGN);
	perf_raise_nofile();
	if (local)
		return local_tests();
	if (!opts.host)
		return server();
	return client(pl);
}
