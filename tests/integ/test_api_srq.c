/*
 * dapl-ofi integration tests: shared receive queues (dat_srq_*,
 * dat_ep_create_with_srq, dat_ep_recv_query, dat_ep_set_watermark) through
 * the stock registry (libdat2), over libfabric tcp on 127.0.0.1 (IA ofi-lo).
 *
 * Links -ldat2 only, like test_api_conn.c, and uses the same pair: two IAs
 * in this process, the server listening on a PSP whose port
 * dat_psp_create_any chose (the fixed ports of the stock-client runs are
 * avoided).  The server's EPs take their receives from an SRQ; the client's
 * are plain EPs.  Every wait is bounded, and an alarm() watchdog turns a
 * call that never returns into a failure naming the test.
 *
 * `test_api_srq PATTERN` runs only the tests matching PATTERN.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dat2/udat.h>
#include <dat2/udat_redirection.h>	/* struct dat_provider: send with invalidate */

#include "dat_test.h"

#define IA_NAME		(getenv("DFI_TEST_IA") ? getenv("DFI_TEST_IA") : "ofi-lo")
#define ASYNC_QLEN	16
#define SEC		(1000u * 1000u)		/* DAT_TIMEOUT is in microseconds */
#define MS		1000u
#define BUF_LEN		(1u << 20)		/* registered buffer of each side */
#define DTO_QLEN	256			/* request and receive EVDs */
#define EP_DTOS		64			/* max_request_dtos / max_recv_dtos */
#define NEP		2			/* SRQ EPs of the server */
#define SLOT		256			/* bytes per receive buffer */
#define MAX_RECV_PER_SRQ 65536			/* DFI_MAX_RECV_PER_SRQ */

/* ------------------------------------------------------------------ utils */

static unsigned ms_since(uint64_t t0)
{
	return (unsigned)((now_ns() - t0) / 1000000u);
}

static DAT_DTO_COOKIE ck(uint64_t v)
{
	DAT_DTO_COOKIE c;

	memset(&c, 0, sizeof(c));
	c.as_64 = v;
	return c;
}

static const char *ev_name(DAT_EVENT_NUMBER n)
{
	switch (n) {
	case DAT_DTO_COMPLETION_EVENT: return "DAT_DTO_COMPLETION_EVENT";
	case DAT_CONNECTION_REQUEST_EVENT: return "DAT_CONNECTION_REQUEST_EVENT";
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "DAT_CONNECTION_EVENT_ESTABLISHED";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DAT_CONNECTION_EVENT_DISCONNECTED";
	case DAT_CONNECTION_EVENT_BROKEN: return "DAT_CONNECTION_EVENT_BROKEN";
	case DAT_ASYNC_ERROR_EVD_OVERFLOW: return "DAT_ASYNC_ERROR_EVD_OVERFLOW";
	case DAT_ASYNC_ERROR_EP_BROKEN: return "DAT_ASYNC_ERROR_EP_BROKEN";
	case DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR:
		return "DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR";
	default: return "(other event)";
	}
}

/* ------------------------------------------------------------------ sides */

struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;		/* the LMR's, for the peer's RDMA */
	uint8_t *buf;
};

struct pair {
	struct side s, c;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_SRQ_HANDLE srq;		/* the server's */
	DAT_EP_HANDLE sep[NEP];		/* server EPs on the SRQ */
	DAT_EP_HANDLE cep[NEP];		/* client EPs, plain */
};

/* The segments a receive takes: 4, or the IA's max_iov_segments_per_dto
 * where it is less (psm3 takes 1: side_open) */
static DAT_COUNT recv_iov = 4;

static DAT_EP_ATTR ep_attr(DAT_COUNT dtos)
{
	DAT_EP_ATTR a;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = dtos;
	a.max_recv_dtos = dtos;
	a.max_request_iov = 4;
	a.max_recv_iov = recv_iov;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	return a;
}

static DAT_RETURN side_open(struct side *x, DAT_COUNT rcv_qlen)
{
	char name[DAT_NAME_MAX_LENGTH];
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN reg_len = 0;
	DAT_VADDR reg_addr = 0;
	DAT_RMR_CONTEXT rctx;
	DAT_IA_ATTR ia_attr;
	DAT_RETURN rc;

	memset(x, 0, sizeof(*x));
	x->buf = aligned_alloc(4096, BUF_LEN);
	if (!x->buf)
		return ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	memset(x->buf, 0, BUF_LEN);
	snprintf(name, sizeof(name), "%s", IA_NAME);
	rc = dat_ia_open(name, ASYNC_QLEN, &x->async, &x->ia);
	if (rc != DAT_SUCCESS) {
		x->ia = DAT_HANDLE_NULL;
		return rc;
	}
	if ((rc = dat_ia_query(x->ia, NULL, DAT_IA_FIELD_IA_MAX_IOV_SEGMENTS_PER_DTO, &ia_attr, 0,
			       NULL)) != DAT_SUCCESS)
		return rc;
	if (ia_attr.max_iov_segments_per_dto < recv_iov)
		recv_iov = ia_attr.max_iov_segments_per_dto;
	if ((rc = dat_pz_create(x->ia, &x->pz)) != DAT_SUCCESS)
		return rc;
	memset(&region, 0, sizeof(region));
	region.for_va = x->buf;
	rc = dat_lmr_create(x->ia, DAT_MEM_TYPE_VIRTUAL, region, BUF_LEN, x->pz,
			    DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &x->lmr, &x->lctx, &rctx,
			    &reg_len, &reg_addr);
	if (rc != DAT_SUCCESS)
		return rc;
	x->rctx = rctx;
	if ((rc = dat_evd_create(x->ia, DTO_QLEN, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->req)) ||
	    (rc = dat_evd_create(x->ia, rcv_qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->rcv)) ||
	    (rc = dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &x->conn)) ||
	    (rc = dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &x->cr)))
		return rc;
	return DAT_SUCCESS;
}

static DAT_RETURN side_close(struct side *x)
{
	DAT_RETURN rc = DAT_SUCCESS;

	if (x->ia)
		rc = dat_ia_close(x->ia, DAT_CLOSE_ABRUPT_FLAG);
	x->ia = DAT_HANDLE_NULL;
	free(x->buf);
	x->buf = NULL;
	return rc;
}

static bool port_avoided(DAT_CONN_QUAL p)
{
	/* the stock-client runs of the same CI job: side channel, conn_qual,
	 * and dapltest's 62000 and up */
	return p == 15828 || p == 45248 || p >= 62000;
}

static DAT_RETURN psp_any(struct side *x, DAT_PSP_HANDLE *psp, DAT_CONN_QUAL *port)
{
	DAT_PSP_HANDLE held[8];
	int nheld = 0;
	DAT_RETURN rc;

	for (;;) {
		rc = dat_psp_create_any(x->ia, port, x->cr, DAT_PSP_CONSUMER_FLAG, psp);
		if (rc != DAT_SUCCESS || !port_avoided(*port) || nheld == 8)
			break;
		held[nheld++] = *psp;	/* keep it, so the next one differs */
	}
	while (nheld > 0)
		dat_psp_free(held[--nheld]);
	return rc;
}

static int setup_qlen(void **state, DAT_COUNT rcv_qlen)
{
	struct pair *p = calloc(1, sizeof(*p));
	char b[160];
	DAT_RETURN rc;

	if (!p)
		return -1;
	watchdog("pair_setup", 30);
	if ((rc = side_open(&p->s, rcv_qlen)) != DAT_SUCCESS ||
	    (rc = side_open(&p->c, DTO_QLEN)) != DAT_SUCCESS ||
	    (rc = psp_any(&p->s, &p->psp, &p->port)) != DAT_SUCCESS) {
		print_error("setup: opening two '%s' IAs with PZ, LMR, EVDs and a PSP failed: %s"
			    " (DAT_OVERRIDE=%s)\n", IA_NAME, rc_name(rc, b, sizeof(b)),
			    getenv("DAT_OVERRIDE") ? getenv("DAT_OVERRIDE") : "(unset)");
		side_close(&p->c);
		side_close(&p->s);
		free(p);
		alarm(0);
		return -1;
	}
	*state = p;
	alarm(0);
	return 0;
}

static int pair_setup(void **state)
{
	return setup_qlen(state, DTO_QLEN);
}

/* a receive EVD of 4 events: SRQ completions must wait for room */
static int pair_setup_small_rcv(void **state)
{
	return setup_qlen(state, 4);
}

static int pair_teardown(void **state)
{
	struct pair *p = *state;
	DAT_RETURN rc1, rc2;
	char b[160];

	watchdog("pair_teardown (dat_ia_close ABRUPT of both IAs)", 30);
	rc1 = side_close(&p->c);
	rc2 = side_close(&p->s);
	free(p);
	alarm(0);
	if (rc1 != DAT_SUCCESS || rc2 != DAT_SUCCESS) {
		print_error("teardown: dat_ia_close(ABRUPT) returned %s\n",
			    rc_name(rc1 != DAT_SUCCESS ? rc1 : rc2, b, sizeof(b)));
		return -1;
	}
	return 0;
}

/* --------------------------------------------------------------- events */

static DAT_RETURN wait_ev(DAT_EVD_HANDLE evd, unsigned ms, DAT_EVENT *ev)
{
	DAT_COUNT nmore = 0;

	memset(ev, 0, sizeof(*ev));
	return dat_evd_wait(evd, (DAT_TIMEOUT)ms * MS, 1, ev, &nmore);
}

static void check_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, DAT_HANDLE h, unsigned ms,
			const char *what, DAT_EVENT *out, const char *file, int line)
{
	DAT_EVENT ev;
	DAT_HANDLE got;
	char b[160];
	DAT_RETURN rc = wait_ev(evd, ms, &ev);

	if (rc != DAT_SUCCESS) {
		print_error("%s: no event within %u ms (dat_evd_wait: %s); expected %s\n", what, ms,
			    rc_name(rc, b, sizeof(b)), ev_name(want));
		_fail(file, line);
	}
	if (ev.event_number != want) {
		print_error("%s: got %s (0x%x), expected %s\n", what, ev_name(ev.event_number),
			    (unsigned)ev.event_number, ev_name(want));
		_fail(file, line);
	}
	got = want >= DAT_ASYNC_ERROR_EVD_OVERFLOW && want <= DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR ?
	      ev.event_data.asynch_error_event_data.dat_handle :
	      ev.event_data.connect_event_data.ep_handle;
	if (h && got != h) {
		print_error("%s: %s names %p, expected %p\n", what, ev_name(want), (void *)got,
			    (void *)h);
		_fail(file, line);
	}
	if (out)
		*out = ev;
}

#define expect_event(evd, want, h, ms, what, out) \
	check_event(evd, want, h, ms, what, out, __FILE__, __LINE__)

static void expect_empty(DAT_EVD_HANDLE evd, unsigned ms, const char *what)
{
	DAT_EVENT ev;
	DAT_RETURN rc = wait_ev(evd, ms, &ev);

	if (rc == DAT_SUCCESS)
		fail_msg("%s: unexpected %s (0x%x)", what, ev_name(ev.event_number),
			 (unsigned)ev.event_number);
	assert_err(rc, DAT_TIMEOUT_EXPIRED);
}

/* ------------------------------------------------------------ the SRQ */

static DAT_LMR_TRIPLET seg(const struct side *x, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t;

	memset(&t, 0, sizeof(t));
	t.virtual_address = (DAT_VADDR)(uintptr_t)(x->buf + off);
	t.segment_length = (DAT_SEG_LENGTH)len;
	t.lmr_context = x->lctx;
	return t;
}

static DAT_RETURN make_srq(struct pair *p, DAT_COUNT max, DAT_COUNT iov)
{
	DAT_SRQ_ATTR a;

	memset(&a, 0, sizeof(a));
	a.max_recv_dtos = max;
	a.max_recv_iov = iov;
	a.low_watermark = DAT_SRQ_LW_DEFAULT;
	return dat_srq_create(p->s.ia, p->s.pz, &a, &p->srq);
}

/* Receive buffer `slot` of the server (SLOT bytes), its cookie = slot. */
static DAT_RETURN srq_post(struct pair *p, unsigned slot)
{
	DAT_LMR_TRIPLET t = seg(&p->s, (size_t)slot * SLOT, SLOT);

	return dat_srq_post_recv(p->srq, 1, &t, ck(slot));
}

static DAT_SRQ_PARAM srq_param(DAT_SRQ_HANDLE srq)
{
	DAT_SRQ_PARAM sp;

	memset(&sp, 0xee, sizeof(sp));
	assert_ok(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp));
	return sp;
}

/* Wait (polling dat_srq_query) until the SRQ reports `avail` buffers
 * available: completions are read by the progress thread, asynchronously. */
static void wait_available(DAT_SRQ_HANDLE srq, DAT_COUNT avail, unsigned ms)
{
	uint64_t t0 = now_ns();
	DAT_SRQ_PARAM sp;

	do {
		sp = srq_param(srq);
		if (sp.available_dto_count == avail)
			return;
		sleep_ms(1);
	} while (ms_since(t0) < ms);
	fail_msg("SRQ reports %d buffers available after %u ms, expected %d", sp.available_dto_count,
		 ms, avail);
}

/* ------------------------------------------------------------ connections */

static struct sockaddr_in loopback(void)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* n server EPs on the SRQ, n plain client EPs, pair i connected (the
 * client sends i as private data, as dtestsrq does). */
static void connect_eps(struct pair *p, int n)
{
	DAT_EP_ATTR a = ep_attr(EP_DTOS);
	struct sockaddr_in addr = loopback();

	for (int i = 0; i < n; i++) {
		uint32_t pd = htonl((uint32_t)i);
		DAT_CR_PARAM crp;
		DAT_EVENT ev;
		uint32_t got;

		assert_ok(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn,
						 p->srq, &a, &p->sep[i]));
		assert_ok(dat_ep_create(p->c.ia, p->c.pz, p->c.rcv, p->c.req, p->c.conn, &a,
					&p->cep[i]));
		assert_ok(dat_ep_connect(p->cep[i], (DAT_IA_ADDRESS_PTR)&addr, p->port, 5 * SEC,
					 sizeof(pd), &pd, DAT_QOS_BEST_EFFORT,
					 DAT_CONNECT_DEFAULT_FLAG));
		expect_event(p->s.cr, DAT_CONNECTION_REQUEST_EVENT, NULL, 5000, "server CR", &ev);
		assert_ok(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle,
				       DAT_CR_FIELD_ALL, &crp));
		assert_int_equal(crp.private_data_size, sizeof(pd));
		memcpy(&got, crp.private_data, sizeof(got));
		assert_int_equal(ntohl(got), i);
		assert_ok(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, p->sep[i],
					sizeof(pd), &pd));
		expect_event(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->sep[i], 5000,
			     "server ESTABLISHED", NULL);
		expect_event(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->cep[i], 5000,
			     "client ESTABLISHED", NULL);
	}
}

/* Client EP `ep` sends message (ep, seq): 16 bytes + seq % 100, so the
 * length differs from message to message. */
static size_t msg_len(uint32_t seq)
{
	return 16 + seq % 100;
}

static DAT_RETURN send_msg(struct pair *p, int ep, uint32_t seq, size_t off)
{
	uint32_t w[2] = { htonl((uint32_t)ep), htonl(seq) };
	DAT_LMR_TRIPLET t;

	memcpy(p->c.buf + off, w, sizeof(w));
	memset(p->c.buf + off + sizeof(w), (int)(seq & 0xff), msg_len(seq) - sizeof(w));
	t = seg(&p->c, off, msg_len(seq));
	return dat_ep_post_send(p->cep[ep], 1, &t, ck(((uint64_t)ep << 32) | seq),
				DAT_COMPLETION_DEFAULT_FLAG);
}

/* Reap n send completions of the client (any EP). */
static void reap_sends(struct pair *p, int n)
{
	for (int i = 0; i < n; i++) {
		DAT_EVENT ev;
		char b[160];
		DAT_RETURN rc = wait_ev(p->c.req, 5000, &ev);

		if (rc != DAT_SUCCESS)
			fail_msg("client: send completion %d of %d missing: %s", i + 1, n,
				 rc_name(rc, b, sizeof(b)));
		assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
		assert_int_equal(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
	}
}

/* The next receive completion of the server: it must name the EP the
 * message came to (the EP number is in the message) and carry its exact
 * length and the cookie of the buffer that holds it.  Returns the EP
 * number and sets *seq and *slot. */
static int recv_msg(struct pair *p, unsigned ms, uint32_t *seq, unsigned *slot)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	uint32_t w[2];
	char b[160];
	DAT_RETURN rc = wait_ev(p->s.rcv, ms, &ev);
	int ep;

	if (rc != DAT_SUCCESS)
		fail_msg("server: no receive completion within %u ms (dat_evd_wait: %s)", ms,
			 rc_name(rc, b, sizeof(b)));
	assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	assert_int_equal(d->operation, DAT_DTO_RECEIVE);
	if (d->status != DAT_DTO_SUCCESS)
		fail_msg("server: receive (cookie %llu) completed with status %d",
			 (unsigned long long)d->user_cookie.as_64, (int)d->status);
	assert_true(d->user_cookie.as_64 < BUF_LEN / SLOT);
	*slot = (unsigned)d->user_cookie.as_64;
	memcpy(w, p->s.buf + (size_t)*slot * SLOT, sizeof(w));
	ep = (int)ntohl(w[0]);
	*seq = ntohl(w[1]);
	assert_true(ep >= 0 && ep < NEP);
	if (d->ep_handle != p->sep[ep])
		fail_msg("server: message %u sent to EP %d completed naming EP %p, not %p",
			 *seq, ep, (void *)d->ep_handle, (void *)p->sep[ep]);
	if (d->transfered_length != msg_len(*seq))
		fail_msg("server: message %u of %zu bytes completed with length %u", *seq,
			 msg_len(*seq), (unsigned)d->transfered_length);
	for (size_t i = 8; i < msg_len(*seq); i++)
		if (p->s.buf[(size_t)*slot * SLOT + i] != (uint8_t)(*seq & 0xff))
			fail_msg("server: message %u: byte %zu differs", *seq, i);
	return ep;
}

/* ================================================== 1. create, query, free */

static void test_srq_create_query_free(void **state)
{
	struct pair *p = *state;
	DAT_SRQ_PARAM sp;
	DAT_HANDLE_TYPE t;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 8, recv_iov < 2 ? 1 : 2));
	sp = srq_param(p->srq);
	/* the provider's IA: the registry hands the consumer an index instead */
	assert_non_null(sp.ia_handle);
	assert_int_equal(sp.srq_state, DAT_SRQ_STATE_OPERATIONAL);
	assert_ptr_equal(sp.pz_handle, p->s.pz);
	assert_int_equal(sp.max_recv_dtos, 8);
	assert_int_equal(sp.max_recv_iov, recv_iov < 2 ? 1 : 2);
	assert_int_equal(sp.low_watermark, DAT_SRQ_LW_DEFAULT);
	assert_int_equal(sp.available_dto_count, 0);
	assert_int_equal(sp.outstanding_dto_count, 0);
	assert_ok(dat_get_handle_type(p->srq, &t));
	assert_int_equal(t, DAT_HANDLE_TYPE_SRQ);
	/* a PZ with an SRQ in it is in use */
	assert_rc(dat_pz_free(p->s.pz), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE));
	for (unsigned i = 0; i < 3; i++)
		assert_ok(srq_post(p, i));
	{	/* two segments, and a zero-length receive */
		DAT_LMR_TRIPLET iov[2] = { seg(&p->s, 4096, 100), seg(&p->s, 8192, 100) };

		assert_ok(dat_srq_post_recv(p->srq, recv_iov < 2 ? 1 : 2, iov, ck(77)));
		assert_ok(dat_srq_post_recv(p->srq, 0, NULL, ck(78)));
	}
	sp = srq_param(p->srq);
	assert_int_equal(sp.available_dto_count, 5);
	assert_int_equal(sp.outstanding_dto_count, 5);
	/* free with buffers posted and no EP: they are released, nothing
	 * reaches any EVD */
	assert_ok(dat_srq_free(p->srq));
	assert_rc(dat_srq_free(p->srq), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_rc(dat_srq_query(p->srq, DAT_SRQ_FIELD_ALL, &sp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_err(dat_get_handle_type(p->srq, &t), DAT_INVALID_HANDLE);
	expect_empty(p->s.rcv, 50, "server receive EVD after dat_srq_free");
	expect_empty(p->s.async, 0, "server async EVD after dat_srq_free");
	assert_ok(dat_pz_query(p->s.pz, DAT_PZ_FIELD_ALL, &(DAT_PZ_PARAM){ 0 }));
	alarm(0);
}

/* ==================================================== 2. bad arguments */

static void test_srq_bad_args(void **state)
{
	struct pair *p = *state;
	DAT_SRQ_ATTR a;
	DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL, csrq;
	DAT_SRQ_PARAM sp;
	DAT_EP_ATTR ea = ep_attr(8);
	DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
	DAT_PZ_HANDLE pz2;
	DAT_LMR_TRIPLET t = seg(&p->s, 0, 64);
	DAT_COUNT n1, n2;
	DAT_HANDLE wrong = p->s.pz;	/* a live object of another type */

	watchdog(__func__, 30);
	/* dat_srq_create */
	memset(&a, 0, sizeof(a));
	a.max_recv_dtos = 8;
	a.max_recv_iov = 1;
	assert_rc(dat_srq_create(p->s.ia, p->c.pz, &a, &srq),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ));	/* other IA's */
	assert_rc(dat_srq_create(p->s.ia, p->s.lmr, &a, &srq),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ));
	assert_arg(dat_srq_create(p->s.ia, p->s.pz, NULL, &srq), DAT_INVALID_ARG3);
	assert_arg(dat_srq_create(p->s.ia, p->s.pz, &a, NULL), DAT_INVALID_ARG4);
	a.max_recv_dtos = 0;
	assert_arg(dat_srq_create(p->s.ia, p->s.pz, &a, &srq), DAT_INVALID_ARG3);
	a.max_recv_dtos = -1;
	assert_arg(dat_srq_create(p->s.ia, p->s.pz, &a, &srq), DAT_INVALID_ARG3);
	a.max_recv_dtos = MAX_RECV_PER_SRQ + 1;
	assert_arg(dat_srq_create(p->s.ia, p->s.pz, &a, &srq), DAT_INVALID_ARG3);
	a.max_recv_dtos = 8;
	a.max_recv_iov = 0;
	assert_arg(dat_srq_create(p->s.ia, p->s.pz, &a, &srq), DAT_INVALID_ARG3);
	a.max_recv_iov = 5;
	assert_arg(dat_srq_create(p->s.ia, p->s.pz, &a, &srq), DAT_INVALID_ARG3);
	a.max_recv_iov = 1;
	a.low_watermark = 1;	/* must be DAT_SRQ_LW_DEFAULT at creation */
	assert_arg(dat_srq_create(p->s.ia, p->s.pz, &a, &srq), DAT_INVALID_ARG3);
	a.low_watermark = DAT_SRQ_LW_DEFAULT;
	assert_null(srq);
	assert_ok(dat_srq_create(p->s.ia, p->s.pz, &a, &srq));
	p->srq = srq;

	/* the SRQ handle of every call: another object, or NULL (the registry
	 * itself refuses NULL for the calls it dispatches through it) */
	assert_rc(dat_srq_free(wrong), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_rc(dat_srq_post_recv(wrong, 1, &t, ck(1)),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_rc(dat_srq_query(wrong, DAT_SRQ_FIELD_ALL, &sp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_rc(dat_srq_resize(wrong, 16), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_rc(dat_srq_set_lw(wrong, 1), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_err(dat_srq_free(DAT_HANDLE_NULL), DAT_INVALID_HANDLE);
	assert_err(dat_srq_post_recv(DAT_HANDLE_NULL, 1, &t, ck(1)), DAT_INVALID_HANDLE);
	assert_err(dat_srq_query(DAT_HANDLE_NULL, DAT_SRQ_FIELD_ALL, &sp), DAT_INVALID_HANDLE);
	assert_err(dat_srq_resize(DAT_HANDLE_NULL, 16), DAT_INVALID_HANDLE);
	assert_err(dat_srq_set_lw(DAT_HANDLE_NULL, 1), DAT_INVALID_HANDLE);

	/* dat_srq_post_recv */
	assert_arg(dat_srq_post_recv(srq, -1, &t, ck(1)), DAT_INVALID_ARG2);
	assert_arg(dat_srq_post_recv(srq, 2, &t, ck(1)), DAT_INVALID_ARG2);	/* iov 1 */
	assert_arg(dat_srq_post_recv(srq, 1, NULL, ck(1)), DAT_INVALID_ARG3);
	/* dat_srq_query */
	assert_arg(dat_srq_query(srq, 0x100, &sp), DAT_INVALID_ARG2);
	assert_arg(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, NULL), DAT_INVALID_ARG3);
	/* dat_srq_resize */
	assert_arg(dat_srq_resize(srq, 0), DAT_INVALID_ARG2);
	assert_arg(dat_srq_resize(srq, -5), DAT_INVALID_ARG2);
	assert_arg(dat_srq_resize(srq, MAX_RECV_PER_SRQ + 1), DAT_INVALID_ARG2);
	/* dat_srq_set_lw */
	assert_arg(dat_srq_set_lw(srq, -1), DAT_INVALID_ARG2);
	assert_arg(dat_srq_set_lw(srq, 9), DAT_INVALID_ARG2);	/* > max_recv_dtos */

	/* dat_ep_create_with_srq */
	assert_rc(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, wrong,
					 &ea, &ep), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_rc(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn,
					 DAT_HANDLE_NULL, &ea, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	memset(&a, 0, sizeof(a));
	a.max_recv_dtos = 4;
	a.max_recv_iov = 1;
	assert_ok(dat_srq_create(p->c.ia, p->c.pz, &a, &csrq));
	assert_rc(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, csrq,
					 &ea, &ep), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	assert_ok(dat_srq_free(csrq));
	assert_ok(dat_pz_create(p->s.ia, &pz2));
	assert_arg(dat_ep_create_with_srq(p->s.ia, pz2, p->s.rcv, p->s.req, p->s.conn, srq,
					  &ea, &ep), DAT_INVALID_ARG2);	/* not the SRQ's PZ */
	assert_ok(dat_pz_free(pz2));
	assert_rc(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.conn, p->s.req, p->s.conn, srq,
					 &ea, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV));
	assert_arg(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, srq,
					  NULL, &ep), DAT_INVALID_ARG7);
	assert_arg(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, srq,
					  &ea, NULL), DAT_INVALID_ARG8);
	ea.service_type = (DAT_SERVICE_TYPE)99;
	assert_arg(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, srq,
					  &ea, &ep), DAT_INVALID_ARG7);
	ea = ep_attr(8);
	ea.srq_soft_hw = -5;
	assert_arg(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, srq,
					  &ea, &ep), DAT_INVALID_ARG7);
	assert_null(ep);
	ea = ep_attr(8);
	assert_ok(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, srq,
					 &ea, &ep));

	/* an SRQ EP takes no receives of its own */
	assert_arg(dat_ep_post_recv(ep, 1, &t, ck(1), DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_ARG1);
	/* dat_ep_recv_query, dat_ep_set_watermark */
	assert_rc(dat_ep_recv_query(wrong, &n1, &n2), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	assert_rc(dat_ep_recv_query(srq, &n1, &n2), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	assert_err(dat_ep_recv_query(DAT_HANDLE_NULL, &n1, &n2), DAT_INVALID_HANDLE);
	assert_rc(dat_ep_set_watermark(wrong, 1, 1), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	assert_err(dat_ep_set_watermark(DAT_HANDLE_NULL, 1, 1), DAT_INVALID_HANDLE);
	assert_arg(dat_ep_set_watermark(ep, -2, DAT_WATERMARK_INFINITE), DAT_INVALID_ARG2);
	assert_arg(dat_ep_set_watermark(ep, DAT_WATERMARK_INFINITE, -2), DAT_INVALID_ARG3);

	/* nothing changed */
	sp = srq_param(srq);
	assert_int_equal(sp.max_recv_dtos, 8);
	assert_int_equal(sp.max_recv_iov, 1);
	assert_int_equal(sp.low_watermark, 0);
	assert_int_equal(sp.available_dto_count, 0);
	assert_int_equal(sp.outstanding_dto_count, 0);
	expect_empty(p->s.async, 0, "server async EVD after rejected calls");
	assert_ok(dat_ep_free(ep));
	assert_ok(dat_srq_free(srq));
	p->srq = DAT_HANDLE_NULL;
	alarm(0);
}

/* dat_ep_query and dat_ep_get_status of an SRQ EP. */
static void test_srq_ep_query(void **state)
{
	struct pair *p = *state;
	DAT_EP_ATTR ea = ep_attr(8);
	DAT_EP_PARAM ep_p;
	DAT_EP_HANDLE ep;
	DAT_BOOLEAN ri = DAT_FALSE;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 8, 1));
	ea.recv_completion_flags = DAT_COMPLETION_UNSIGNALLED_FLAG;	/* an SRQ EP's default */
	assert_ok(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, p->srq,
					 &ea, &ep));
	assert_ok(dat_ep_query(ep, DAT_EP_FIELD_ALL, &ep_p));
	assert_ptr_equal(ep_p.srq_handle, p->srq);
	assert_ptr_equal(ep_p.recv_evd_handle, p->s.rcv);
	assert_int_equal(ep_p.ep_attr.srq_soft_hw, DAT_HW_DEFAULT);	/* 0: the default */
	assert_int_equal(ep_p.ep_state, DAT_EP_STATE_UNCONNECTED);
	assert_ok(dat_ep_get_status(ep, NULL, &ri, NULL));
	assert_true(ri);
	assert_ok(dat_ep_set_watermark(ep, 5, DAT_WATERMARK_INFINITE));
	assert_ok(dat_ep_query(ep, DAT_EP_FIELD_ALL, &ep_p));
	assert_int_equal(ep_p.ep_attr.srq_soft_hw, 5);
	/* the EP holds the SRQ */
	assert_rc(dat_srq_free(p->srq), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE));
	assert_ok(dat_ep_free(ep));
	assert_ok(dat_srq_free(p->srq));
	alarm(0);
}

/* ======================================= 3. two EPs, one SRQ: traffic */

/* Both EPs receive from one SRQ; every completion names the EP the message
 * came to, in each EP's order; then all traffic goes to one EP while the
 * other idles, with fewer buffers than messages (reposting each one as it
 * is reaped): nothing may stall, and the idle EP still works after. */
static void test_srq_two_eps_and_skew(void **state)
{
	struct pair *p = *state;
	uint32_t next[NEP] = { 0, 0 }, seq;
	unsigned slot;
	int nsent = 0;
	const int skew = 400, nbuf = 4;
	uint64_t t0;

	watchdog(__func__, 60);
	assert_ok(make_srq(p, 16, 1));
	for (unsigned i = 0; i < 16; i++)
		assert_ok(srq_post(p, i));
	connect_eps(p, NEP);

	/* 8 messages on each EP, interleaved */
	for (uint32_t k = 0; k < 8; k++)
		for (int e = 0; e < NEP; e++)
			assert_ok(send_msg(p, e, k, (size_t)(k * NEP + (uint32_t)e) * SLOT));
	for (int i = 0; i < 16; i++) {
		int e = recv_msg(p, 5000, &seq, &slot);

		if (seq != next[e])
			fail_msg("EP %d: message %u arrived, expected %u (per-EP order)", e, seq,
				 next[e]);
		next[e]++;
	}
	reap_sends(p, 16);
	assert_int_equal(srq_param(p->srq).outstanding_dto_count, 0);

	/* skew: only EP 1, with 4 buffers for 400 messages */
	for (unsigned i = 0; i < (unsigned)nbuf; i++)
		assert_ok(srq_post(p, i));
	t0 = now_ns();
	next[1] = 0;
	for (; nsent < 8; nsent++)	/* a window of 8 sends in flight */
		assert_ok(send_msg(p, 1, (uint32_t)nsent, (size_t)(nsent % 64) * SLOT));
	for (int i = 0; i < skew; i++) {
		int e = recv_msg(p, 5000, &seq, &slot);

		assert_int_equal(e, 1);
		if (seq != next[1])
			fail_msg("EP 1: message %u arrived, expected %u", seq, next[1]);
		next[1]++;
		assert_ok(srq_post(p, slot));		/* the buffer goes back */
		reap_sends(p, 1);
		if (nsent < skew) {
			assert_ok(send_msg(p, 1, (uint32_t)nsent, (size_t)(nsent % 64) * SLOT));
			nsent++;
		}
	}
	/* (how fast a post frees a stalled EP is test_srq_dry's business: the
	 * time of this loop depends on the machine's load) */
	print_message("# %d messages to one EP through %d SRQ buffers in %u ms\n", skew, nbuf,
		      ms_since(t0));
	/* the idle EP still receives */
	assert_ok(send_msg(p, 0, 8, 0));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	assert_int_equal(seq, 8);
	reap_sends(p, 1);
	expect_empty(p->s.async, 0, "server async EVD after the traffic");
	alarm(0);
}

/* Large and small messages alternating on one connection: the SRQ EP's
 * receives complete in the order they were sent, with their lengths.
 * tcp;ofi_rxm completes a message above its eager size (16 KiB) after a
 * small one behind it; over RDM the SRQ puts them back in order by the
 * sender's sequence (fabric/rdm/srx.c). */
#define ORDER_BIG	(48u << 10)
#define ORDER_SLOT	(64u << 10)
#define ORDER_N		8

static void test_srq_order_mixed_sizes(void **state)
{
	struct pair *p = *state;

	watchdog(__func__, 60);
	assert_ok(make_srq(p, ORDER_N, 1));
	for (unsigned i = 0; i < ORDER_N; i++) {
		DAT_LMR_TRIPLET t = seg(&p->s, (size_t)i * ORDER_SLOT, ORDER_SLOT);

		assert_ok(dat_srq_post_recv(p->srq, 1, &t, ck(i)));
	}
	connect_eps(p, 1);
	for (uint32_t k = 0; k < ORDER_N; k++) {
		size_t len = k % 2 ? 16 : ORDER_BIG;
		DAT_LMR_TRIPLET t = seg(&p->c, (size_t)k * ORDER_SLOT, len);
		uint32_t w = htonl(k);

		memcpy(p->c.buf + (size_t)k * ORDER_SLOT, &w, sizeof(w));
		memset(p->c.buf + (size_t)k * ORDER_SLOT + sizeof(w), (int)k, len - sizeof(w));
		assert_ok(dat_ep_post_send(p->cep[0], 1, &t, ck(k), DAT_COMPLETION_DEFAULT_FLAG));
	}
	for (uint32_t k = 0; k < ORDER_N; k++) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d;
		size_t len = k % 2 ? 16 : ORDER_BIG;
		DAT_EVENT ev;
		const uint8_t *b;
		uint32_t w;

		assert_ok(wait_ev(p->s.rcv, 5000, &ev));
		assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
		d = &ev.event_data.dto_completion_event_data;
		assert_int_equal(d->status, DAT_DTO_SUCCESS);
		assert_true(d->ep_handle == p->sep[0]);
		assert_true(d->user_cookie.as_64 < ORDER_N);
		b = p->s.buf + d->user_cookie.as_64 * ORDER_SLOT;
		memcpy(&w, b, sizeof(w));
		if (ntohl(w) != k || d->transfered_length != len)
			fail_msg("receive %u: message %u of %u bytes, expected message %u of %zu",
				 k, ntohl(w), (unsigned)d->transfered_length, k, len);
		for (size_t i = sizeof(w); i < len; i++)
			if (b[i] != (uint8_t)k)
				fail_msg("message %u: byte %zu differs", k, i);
	}
	reap_sends(p, ORDER_N);
	alarm(0);
}

/* As many posts as the SRQ takes: its max_recv_dtos, or fewer where the
 * provider's receive queue is smaller (an RDM IA's SRQ is an endpoint of
 * its own: 1024 on shm).  The first refused post says so with
 * DAT_RESOURCE_SRQ, the SRQ counts exactly what it holds, and it still
 * delivers. */
static void test_srq_post_until_full(void **state)
{
	struct pair *p = *state;
	DAT_LMR_TRIPLET t = seg(&p->s, 0, SLOT);
	uint32_t seq;
	unsigned slot;
	DAT_RETURN rc = DAT_SUCCESS;
	int n = 0;

	watchdog(__func__, 60);
	assert_ok(make_srq(p, MAX_RECV_PER_SRQ, 1));
	while (n < MAX_RECV_PER_SRQ &&
	       (rc = dat_srq_post_recv(p->srq, 1, &t, ck(0))) == DAT_SUCCESS)
		n++;
	print_message("# %d receives posted to one SRQ\n", n);
	assert_true(n >= 512);
	if (n < MAX_RECV_PER_SRQ)
		assert_rc(rc, ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	assert_int_equal(srq_param(p->srq).available_dto_count, n);
	connect_eps(p, 1);
	assert_ok(send_msg(p, 0, 7, 0));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	assert_int_equal(seq, 7);
	reap_sends(p, 1);
	assert_int_equal(srq_param(p->srq).available_dto_count, n - 1);
	alarm(0);
}

/* RDMA to the memory of an SRQ EP's IA, which its peer reaches where the
 * EP receives (over RDM, the SRQ's own endpoint): a write, then a send
 * behind it whose receive finds the written bytes in place, then a read
 * of them back. */
#define RDMA_OFF	(512u << 10)
#define RDMA_LEN	(20u << 10)

static void test_srq_ep_rdma(void **state)
{
	struct pair *p = *state;
	DAT_LMR_TRIPLET t = seg(&p->c, RDMA_OFF, RDMA_LEN);
	DAT_RMR_TRIPLET r;
	DAT_EVENT ev;
	uint32_t seq;
	unsigned slot;

	watchdog(__func__, 60);
	assert_ok(make_srq(p, 4, 1));
	assert_ok(srq_post(p, 0));
	connect_eps(p, 1);
	for (size_t i = 0; i < RDMA_LEN; i++)
		p->c.buf[RDMA_OFF + i] = (uint8_t)(i * 7 + 1);
	memset(&r, 0, sizeof(r));
	r.virtual_address = (DAT_VADDR)(uintptr_t)(p->s.buf + RDMA_OFF);
	r.segment_length = RDMA_LEN;
	r.rmr_context = p->s.rctx;
	assert_ok(dat_ep_post_rdma_write(p->cep[0], 1, &t, ck(1), &r,
					 DAT_COMPLETION_DEFAULT_FLAG));
	assert_ok(send_msg(p, 0, 5, 0));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	assert_int_equal(seq, 5);
	for (size_t i = 0; i < RDMA_LEN; i++)
		if (p->s.buf[RDMA_OFF + i] != (uint8_t)(i * 7 + 1))
			fail_msg("byte %zu of the RDMA write not in place when the send behind "
				 "it was received", i);
	reap_sends(p, 2);
	memset(p->c.buf + RDMA_OFF, 0, RDMA_LEN);
	assert_ok(dat_ep_post_rdma_read(p->cep[0], 1, &t, ck(2), &r,
					DAT_COMPLETION_DEFAULT_FLAG));
	assert_ok(wait_ev(p->c.req, 5000, &ev));
	assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	assert_int_equal(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
	assert_memory_equal(p->c.buf + RDMA_OFF, p->s.buf + RDMA_OFF, RDMA_LEN);
	alarm(0);
}

/* A send with invalidate to an SRQ EP (dat_ep_post_send_with_invalidate,
 * through the provider's table): the SRQ's buffer takes it, the completion
 * names the EP and the RMR, and the server's RMR is unbound by then. */
static void test_srq_send_with_invalidate(void **state)
{
	struct pair *p = *state;
	DAT_PROVIDER *prov = DAT_HANDLE_TO_PROVIDER(p->s.pz);
	DAT_RMR_COOKIE rck = { .as_64 = 9 };
	const DAT_DTO_COMPLETION_EVENT_DATA *d;
	DAT_LMR_TRIPLET t;
	DAT_RMR_HANDLE rmr;
	DAT_RMR_CONTEXT rctx = 0;
	DAT_RMR_PARAM rp;
	DAT_EVENT ev;

	watchdog(__func__, 60);
	SKIP_WITHOUT_CQ_DATA(p->s.ia);
	assert_ok(make_srq(p, 4, 1));
	assert_ok(srq_post(p, 0));
	connect_eps(p, NEP);
	assert_ok(dat_rmr_create(p->s.pz, &rmr));
	t = seg(&p->s, 8 * SLOT, SLOT);
	assert_ok(dat_rmr_bind(rmr, p->s.lmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
			       p->sep[1], rck, DAT_COMPLETION_SUPPRESS_FLAG, &rctx));
	memset(p->c.buf, 0x5a, 40);
	t = seg(&p->c, 0, 40);
	assert_ok(prov->ep_post_send_with_invalidate_func(p->cep[1], 1, &t, ck(1),
							  DAT_COMPLETION_DEFAULT_FLAG, DAT_TRUE,
							  rctx));
	assert_ok(wait_ev(p->s.rcv, 5000, &ev));
	d = &ev.event_data.dto_completion_event_data;
	assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	assert_int_equal(d->operation, DAT_DTO_RECEIVE_WITH_INVALIDATE);
	assert_int_equal(d->status, DAT_DTO_SUCCESS);
	assert_ptr_equal(d->ep_handle, p->sep[1]);
	assert_int_equal(d->rmr_context, rctx);
	assert_int_equal(d->transfered_length, 40);
	assert_int_equal(d->user_cookie.as_64, 0);
	assert_int_equal(p->s.buf[39], 0x5a);
	assert_ok(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &rp));
	assert_int_equal(rp.rmr_context, 0);
	reap_sends(p, 1);
	assert_ok(dat_rmr_free(rmr));
	alarm(0);
}

static int cmp_unsigned(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

	return x < y ? -1 : x > y;
}

/* The SRQ runs dry: a message waits in libfabric for a buffer, and the
 * post of one must get it delivered.  The EP cannot be armed meanwhile; the
 * provider retries it on a 10 ms tick, and at once when a buffer comes.
 * "At once" is checked against the same machine's normal latency (a
 * message to a posted buffer), so that a loaded machine slows both: by
 * the tick alone the median would be about 5 ms more. */
static void test_srq_dry(void **state)
{
	struct pair *p = *state;
	enum { ROUNDS = 30 };
	unsigned dry[ROUNDS], base[ROUNDS], slot;
	uint32_t seq;

	watchdog(__func__, 120);
	assert_ok(make_srq(p, 4, 1));
	connect_eps(p, 1);
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t t0;

		/* normal: the buffer is there before the message */
		assert_ok(srq_post(p, 0));
		t0 = now_ns();
		assert_ok(send_msg(p, 0, (uint32_t)(2 * r), 0));
		assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
		base[r] = (unsigned)((now_ns() - t0) / 1000u);
		reap_sends(p, 1);
		/* dry: the message waits for the buffer */
		assert_ok(send_msg(p, 0, (uint32_t)(2 * r + 1), 0));
		reap_sends(p, 1);
		expect_empty(p->s.rcv, 20, "a message with no SRQ buffer posted");
		t0 = now_ns();
		assert_ok(srq_post(p, 1));
		assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
		assert_int_equal(seq, (uint32_t)(2 * r + 1));
		dry[r] = (unsigned)((now_ns() - t0) / 1000u);
	}
	qsort(dry, ROUNDS, sizeof(dry[0]), cmp_unsigned);
	qsort(base, ROUNDS, sizeof(base[0]), cmp_unsigned);
	print_message("# median latency: to a posted buffer %u us, to a dry SRQ once a buffer "
		      "is posted %u us (worst %u us)\n", base[ROUNDS / 2], dry[ROUNDS / 2],
		      dry[ROUNDS - 1]);
	if (dry[ROUNDS / 2] > base[ROUNDS / 2] + 3000)
		fail_msg("dry SRQ: a post gets the waiting message delivered in %u us (median), "
			 "against %u us for a message to a posted buffer: dat_srq_post_recv does "
			 "not wake the EP (only the 10 ms tick does)", dry[ROUNDS / 2],
			 base[ROUNDS / 2]);
	alarm(0);
}

/* A receive EVD of 4 events and 12 messages: the completions beyond the
 * ring wait (no overflow, no async event) and come out in order. */
static void test_srq_small_recv_evd(void **state)
{
	struct pair *p = *state;
	uint32_t seq;
	unsigned slot;
	uint32_t want = 0;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 16, 1));
	for (unsigned i = 0; i < 16; i++)
		assert_ok(srq_post(p, i));
	connect_eps(p, 1);
	for (uint32_t k = 0; k < 12; k++)
		assert_ok(send_msg(p, 0, k, k * SLOT));
	reap_sends(p, 12);
	wait_available(p->srq, 4, 5000);	/* all 12 landed */
	sleep_ms(50);
	for (int i = 0; i < 12; i++) {
		assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
		assert_int_equal(seq, want++);
	}
	expect_empty(p->s.async, 0, "server async EVD (an EVD overflow?)");
	assert_int_equal(srq_param(p->srq).outstanding_dto_count, 4);
	alarm(0);
}

/* ============================================= 4. credits: queue full */

/* A slot is taken from the post until the completion is reaped: a full SRQ
 * refuses one more post, still after the message landed, until the
 * consumer dequeues the completion. */
static void test_srq_queue_full(void **state)
{
	struct pair *p = *state;
	DAT_SRQ_PARAM sp;
	uint32_t seq;
	unsigned slot;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 4, 1));
	for (unsigned i = 0; i < 4; i++)
		assert_ok(srq_post(p, i));
	assert_rc(srq_post(p, 4), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	connect_eps(p, 1);
	assert_ok(send_msg(p, 0, 0, 0));
	reap_sends(p, 1);
	wait_available(p->srq, 3, 5000);
	sp = srq_param(p->srq);
	assert_int_equal(sp.outstanding_dto_count, 4);	/* not reaped yet */
	assert_rc(srq_post(p, 4), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	sp = srq_param(p->srq);
	assert_int_equal(sp.available_dto_count, 3);
	assert_int_equal(sp.outstanding_dto_count, 3);
	assert_ok(srq_post(p, 4));
	assert_rc(srq_post(p, 5), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	alarm(0);
}

/* ============================================ 5. EP_BROKEN at disconnect */

/* Each SRQ EP whose connection ends posts one DAT_ASYNC_ERROR_EP_BROKEN
 * naming it, after its connection event - whichever side disconnects.  A
 * message that landed before the disconnect is on the receive EVD by the
 * time the disconnect is reported; the SRQ's other buffers stay posted. */
static void test_srq_ep_broken(void **state)
{
	struct pair *p = *state;
	DAT_EVENT ev;
	DAT_SRQ_PARAM sp;
	uint32_t seq;
	unsigned slot;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 8, 1));
	for (unsigned i = 0; i < 8; i++)
		assert_ok(srq_post(p, i));
	connect_eps(p, NEP);
	expect_empty(p->s.async, 0, "server async EVD after connecting");

	/* the client sends on EP 0, then disconnects it */
	assert_ok(send_msg(p, 0, 0, 0));
	reap_sends(p, 1);
	assert_ok(dat_ep_disconnect(p->cep[0], DAT_CLOSE_GRACEFUL_FLAG));
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->sep[0], 5000,
		     "server: client disconnected EP 0", NULL);
	/* the receive is there already (dequeue, no wait) */
	memset(&ev, 0, sizeof(ev));
	assert_ok(dat_evd_dequeue(p->s.rcv, &ev));
	assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	assert_ptr_equal(ev.event_data.dto_completion_event_data.ep_handle, p->sep[0]);
	assert_int_equal(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
	expect_event(p->s.async, DAT_ASYNC_ERROR_EP_BROKEN, p->sep[0], 5000,
		     "server async EVD, EP 0", NULL);
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->cep[0], 5000,
		     "client EP 0", NULL);
	expect_empty(p->c.async, 0, "client async EVD (its EPs have no SRQ)");

	/* the server disconnects EP 1 itself */
	assert_ok(dat_ep_disconnect(p->sep[1], DAT_CLOSE_ABRUPT_FLAG));
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->sep[1], 5000,
		     "server: it disconnected EP 1", NULL);
	expect_event(p->s.async, DAT_ASYNC_ERROR_EP_BROKEN, p->sep[1], 5000,
		     "server async EVD, EP 1", &ev);
	assert_int_equal(ev.event_data.asynch_error_event_data.reason, DAT_EP_TRANSFER_TO_ERROR);
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->cep[1], 5000,
		     "client EP 1", NULL);
	/* once each */
	expect_empty(p->s.async, 200, "server async EVD after both EP_BROKEN");
	sp = srq_param(p->srq);
	assert_int_equal(sp.available_dto_count, 7);	/* still posted */
	assert_int_equal(sp.outstanding_dto_count, 7);
	expect_empty(p->s.rcv, 0, "server receive EVD (no buffer flushed)");

	/* reset, reconnect, and a new EP_BROKEN for the new connection */
	assert_ok(dat_ep_reset(p->sep[0]));
	assert_ok(dat_ep_reset(p->cep[0]));
	{
		struct sockaddr_in addr = loopback();

		assert_ok(dat_ep_connect(p->cep[0], (DAT_IA_ADDRESS_PTR)&addr, p->port, 5 * SEC,
					 0, NULL, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
		expect_event(p->s.cr, DAT_CONNECTION_REQUEST_EVENT, NULL, 5000, "server CR", &ev);
		assert_ok(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, p->sep[0],
					0, NULL));
		expect_event(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->sep[0], 5000,
			     "server re-established", NULL);
		expect_event(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->cep[0], 5000,
			     "client re-established", NULL);
	}
	assert_ok(send_msg(p, 0, 5, 0));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	assert_int_equal(seq, 5);
	reap_sends(p, 1);
	assert_ok(dat_ep_disconnect(p->cep[0], DAT_CLOSE_GRACEFUL_FLAG));
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->sep[0], 5000,
		     "server: second disconnect of EP 0", NULL);
	expect_event(p->s.async, DAT_ASYNC_ERROR_EP_BROKEN, p->sep[0], 5000,
		     "server async EVD, EP 0 again", NULL);
	alarm(0);
}

/* ================================== 6. dat_srq_free with EPs attached */

static void test_srq_free_with_eps(void **state)
{
	struct pair *p = *state;
	uint32_t seq;
	unsigned slot;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 8, 1));
	for (unsigned i = 0; i < 8; i++)
		assert_ok(srq_post(p, i));
	connect_eps(p, NEP);
	assert_rc(dat_srq_free(p->srq), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE));
	/* still working */
	assert_ok(send_msg(p, 1, 0, 0));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 1);
	reap_sends(p, 1);
	/* a completion not reaped when its EP is freed gives its slot back */
	assert_ok(send_msg(p, 0, 1, 0));
	reap_sends(p, 1);
	wait_available(p->srq, 6, 5000);
	assert_int_equal(srq_param(p->srq).outstanding_dto_count, 7);
	assert_ok(dat_ep_free(p->sep[0]));
	assert_int_equal(srq_param(p->srq).outstanding_dto_count, 6);
	assert_rc(dat_srq_free(p->srq), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE));
	assert_ok(dat_ep_free(p->sep[1]));
	/* the freed EP's completion may still be dequeued (it names a freed EP) */
	assert_ok(dat_srq_free(p->srq));
	assert_err(dat_srq_query(p->srq, DAT_SRQ_FIELD_ALL, &(DAT_SRQ_PARAM){ 0 }),
		   DAT_INVALID_HANDLE);
	alarm(0);
}

/* The quarantine of freed handles off (DAPL_OFI_QUARANTINE, read when
 * libdat2 loads the provider, at the pair's first dat_ia_open): a freed
 * EP's memory is the next EP's. */
static int pair_setup_no_quarantine(void **state)
{
	setenv("DAPL_OFI_QUARANTINE", "0", 1);
	return pair_setup(state);
}

static int pair_teardown_no_quarantine(void **state)
{
	int rc = pair_teardown(state);

	unsetenv("DAPL_OFI_QUARANTINE");
	return rc;
}

/* An SRQ EP freed with receive completions queued on its recv EVD, and a
 * plain EP made at once in its memory on the same EVDs: reaping the freed
 * EP's events gives no receive slot to the new EP (its count would wrap:
 * "receive queue full" for good), and the SRQ's counts stay right. */
static void test_srq_ep_free_reused_memory(void **state)
{
	struct pair *p = *state;
	DAT_EP_ATTR a = ep_attr(EP_DTOS);
	DAT_EP_HANDLE old, ep;
	DAT_BOOLEAN rcv_idle = DAT_FALSE;
	DAT_EVENT ev;
	DAT_COUNT nmore = 0;
	int stale = 0;
	uint64_t t0;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 8, 1));
	for (unsigned i = 0; i < 4; i++)
		assert_ok(srq_post(p, i));
	connect_eps(p, 1);
	for (uint32_t i = 0; i < 3; i++)
		assert_ok(send_msg(p, 0, i, 256 * (size_t)i));
	reap_sends(p, 3);
	/* one reaped, two left in the ring */
	assert_ok(dat_evd_wait(p->s.rcv, 5 * SEC, 3, &ev, &nmore));
	assert_int_equal(nmore, 2);

	old = p->sep[0];
	assert_ok(dat_ep_free(old));
	assert_ok(dat_ep_create(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, &a, &ep));
	if (ep != old)
		fail_msg("the new EP %p is not in the freed EP's memory %p: DAPL_OFI_QUARANTINE=0 "
			 "was not in force, the test proves nothing", (void *)ep, (void *)old);
	t0 = now_ns();
	while (ms_since(t0) < 300) {
		DAT_RETURN rc = dat_evd_dequeue(p->s.rcv, &ev);

		if (rc != DAT_SUCCESS) {
			assert_rc(rc, DAT_QUEUE_EMPTY);
			sleep_ms(5);
			continue;
		}
		assert_int_equal(ev.event_data.dto_completion_event_data.operation,
				 DAT_DTO_RECEIVE);
		assert_true(ev.event_data.dto_completion_event_data.ep_handle == old ||
			    ev.event_data.dto_completion_event_data.ep_handle == DAT_HANDLE_NULL);
		stale++;
	}
	print_message("# reaped %d receive events of the freed SRQ EP\n", stale);
	assert_int_equal(stale, 2);
	assert_ok(dat_ep_get_status(ep, NULL, &rcv_idle, NULL));
	if (!rcv_idle)
		fail_msg("a new EP reports its receive queue busy with nothing posted: the freed "
			 "SRQ EP's events gave their slots to it");
	for (int i = 0; i < EP_DTOS; i++) {	/* its full depth, before a connect */
		DAT_LMR_TRIPLET t = seg(&p->s, 4096 + 64 * (size_t)i, 64);

		assert_ok(dat_ep_post_recv(ep, 1, &t, ck(1000 + (uint64_t)i),
					   DAT_COMPLETION_DEFAULT_FLAG));
	}
	/* the SRQ: one buffer still posted, the three that completed free */
	for (unsigned i = 4; i < 11; i++)
		assert_ok(srq_post(p, i));
	assert_rc(srq_post(p, 11), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	assert_ok(dat_ep_free(ep));
	alarm(0);
}

/* ====================================================== 7. resize */

static void test_srq_resize(void **state)
{
	struct pair *p = *state;
	DAT_SRQ_PARAM sp;
	uint32_t seq;
	unsigned slot;
	uint32_t want = 0;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 8, 1));
	for (unsigned i = 0; i < 6; i++)
		assert_ok(srq_post(p, i));
	/* below what is outstanding: refused, unchanged */
	assert_rc(dat_srq_resize(p->srq, 5), ERR(DAT_INVALID_STATE, 0));
	assert_int_equal(srq_param(p->srq).max_recv_dtos, 8);
	/* down to exactly what is outstanding */
	assert_ok(dat_srq_resize(p->srq, 6));
	assert_int_equal(srq_param(p->srq).max_recv_dtos, 6);
	assert_rc(srq_post(p, 6), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	/* up, past the first allocation */
	assert_ok(dat_srq_resize(p->srq, 40));
	for (unsigned i = 6; i < 40; i++)
		assert_ok(srq_post(p, i));
	assert_rc(srq_post(p, 40), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ));
	sp = srq_param(p->srq);
	assert_int_equal(sp.max_recv_dtos, 40);
	assert_int_equal(sp.available_dto_count, 40);
	/* all 40 buffers work */
	connect_eps(p, 1);
	for (uint32_t k = 0; k < 40; k++)
		assert_ok(send_msg(p, 0, k, (size_t)k * SLOT));
	for (int i = 0; i < 40; i++) {
		assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
		assert_int_equal(seq, want++);
	}
	reap_sends(p, 40);
	/* not below the low watermark */
	assert_ok(dat_srq_set_lw(p->srq, 10));
	expect_event(p->s.async, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, p->srq, 1000,
		     "low watermark on an empty SRQ", NULL);
	assert_rc(dat_srq_resize(p->srq, 9), ERR(DAT_INVALID_STATE, 0));
	assert_ok(dat_srq_resize(p->srq, 10));
	assert_int_equal(srq_param(p->srq).max_recv_dtos, 10);
	alarm(0);
}

/* ================================================= 8. low watermark */

static void test_srq_low_watermark(void **state)
{
	struct pair *p = *state;
	DAT_EVENT ev;
	uint32_t seq;
	unsigned slot;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 8, 1));
	for (unsigned i = 0; i < 4; i++)
		assert_ok(srq_post(p, i));
	connect_eps(p, 1);
	assert_ok(dat_srq_set_lw(p->srq, 3));
	assert_int_equal(srq_param(p->srq).low_watermark, 3);
	expect_empty(p->s.async, 50, "4 buffers, low watermark 3");
	/* 4 -> 3: not below */
	assert_ok(send_msg(p, 0, 0, 0));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	expect_empty(p->s.async, 50, "3 buffers, low watermark 3");
	/* 3 -> 2: below, one event naming the SRQ */
	assert_ok(send_msg(p, 0, 1, SLOT));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	expect_event(p->s.async, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, p->srq, 5000,
		     "low watermark", &ev);
	assert_int_equal(ev.event_data.asynch_error_event_data.reason,
			 DAT_SRQ_LOW_WATERMARK_EVENT);
	/* 2 -> 1: disarmed until set again */
	assert_ok(send_msg(p, 0, 2, 2 * SLOT));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	expect_empty(p->s.async, 100, "low watermark after it fired once");
	/* setting it above what is available fires at once */
	assert_ok(dat_srq_set_lw(p->srq, 2));
	expect_event(p->s.async, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, p->srq, 1000,
		     "low watermark set above the buffers available", NULL);
	/* 0 never fires */
	assert_ok(dat_srq_set_lw(p->srq, 0));
	assert_ok(send_msg(p, 0, 3, 3 * SLOT));
	assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	expect_empty(p->s.async, 100, "low watermark 0");
	reap_sends(p, 4);
	alarm(0);
}

/* =========================================== 9. EP high watermarks */

/* Soft: one async event (reason DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT) when the
 * EP holds more unreaped SRQ buffers than the mark; hard: the connection
 * is broken. */
static void test_srq_ep_watermarks(void **state)
{
	struct pair *p = *state;
	DAT_EVENT ev;
	uint32_t seq;
	unsigned slot;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 16, 1));
	for (unsigned i = 0; i < 16; i++)
		assert_ok(srq_post(p, i));
	connect_eps(p, 1);
	assert_ok(dat_ep_set_watermark(p->sep[0], 2, DAT_WATERMARK_INFINITE));
	for (uint32_t k = 0; k < 2; k++)
		assert_ok(send_msg(p, 0, k, k * SLOT));
	reap_sends(p, 2);
	wait_available(p->srq, 14, 5000);
	expect_empty(p->s.async, 50, "2 buffers held, soft watermark 2");
	assert_ok(send_msg(p, 0, 2, 2 * SLOT));
	reap_sends(p, 1);
	expect_event(p->s.async, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, p->sep[0], 5000,
		     "soft high watermark", &ev);
	assert_int_equal(ev.event_data.asynch_error_event_data.reason,
			 DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
	assert_ok(send_msg(p, 0, 3, 3 * SLOT));
	reap_sends(p, 1);
	wait_available(p->srq, 12, 5000);
	expect_empty(p->s.async, 50, "soft watermark after it fired once");
	/* reaping lowers the count the marks look at */
	for (int i = 0; i < 4; i++)
		assert_int_equal(recv_msg(p, 5000, &seq, &slot), 0);
	/* hard 1: the second unreaped buffer breaks the connection */
	assert_ok(dat_ep_set_watermark(p->sep[0], DAT_WATERMARK_INFINITE, 1));
	assert_ok(send_msg(p, 0, 4, 4 * SLOT));
	reap_sends(p, 1);
	expect_empty(p->s.conn, 100, "1 buffer held, hard watermark 1");
	assert_ok(send_msg(p, 0, 5, 5 * SLOT));
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_BROKEN, p->sep[0], 5000,
		     "server: hard high watermark", NULL);
	expect_event(p->s.async, DAT_ASYNC_ERROR_EP_BROKEN, p->sep[0], 5000,
		     "server async EVD after the hard watermark", NULL);
	{
		DAT_RETURN rc = wait_ev(p->c.conn, 5000, &ev);

		assert_ok(rc);
		assert_true(ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED ||
			    ev.event_number == DAT_CONNECTION_EVENT_BROKEN);
	}
	alarm(0);
}

/* ============================================== 10. dat_ep_recv_query */

static void test_ep_recv_query(void **state)
{
	struct pair *p = *state;
	DAT_COUNT nb = -7, span = -7;
	DAT_LMR_TRIPLET t = seg(&p->c, 0, 64);

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 8, 1));
	assert_ok(srq_post(p, 0));
	{	/* an SRQ EP not connected holds no buffer */
		DAT_EP_ATTR ea = ep_attr(8);

		assert_ok(dat_ep_create_with_srq(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn,
						 p->srq, &ea, &p->sep[1]));
		assert_ok(dat_ep_recv_query(p->sep[1], &nb, &span));
		assert_int_equal(nb, 0);
		assert_int_equal(span, 0);
	}
	connect_eps(p, 1);
	/* connected: libfabric does not say when a buffer starts to fill */
	assert_ok(dat_ep_recv_query(p->sep[0], &nb, &span));
	assert_int_equal(nb, DAT_VALUE_UNKNOWN);
	assert_int_equal(span, DAT_VALUE_UNKNOWN);
	assert_ok(dat_ep_recv_query(p->sep[0], NULL, NULL));	/* both optional */
	/* a plain EP: its posted, uncompleted receives, filled in order */
	assert_ok(dat_ep_post_recv(p->cep[0], 1, &t, ck(1), DAT_COMPLETION_DEFAULT_FLAG));
	assert_ok(dat_ep_post_recv(p->cep[0], 1, &t, ck(2), DAT_COMPLETION_DEFAULT_FLAG));
	assert_ok(dat_ep_post_recv(p->cep[0], 1, &t, ck(3), DAT_COMPLETION_DEFAULT_FLAG));
	assert_ok(dat_ep_recv_query(p->cep[0], &nb, &span));
	assert_int_equal(nb, 3);
	assert_int_equal(span, 3);
	assert_ok(dat_ep_recv_query(p->cep[0], &nb, NULL));
	assert_int_equal(nb, 3);
	alarm(0);
}

/* ==================================== 11. dat_ia_close with an SRQ open */

/* ABRUPT close of an IA with an SRQ, its EPs connected, buffers posted and
 * completions not reaped: everything goes (ASan checks the memory). */
static void test_ia_close_with_srq(void **state)
{
	struct pair *p = *state;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 16, 1));
	for (unsigned i = 0; i < 16; i++)
		assert_ok(srq_post(p, i));
	connect_eps(p, NEP);
	for (uint32_t k = 0; k < 3; k++)
		assert_ok(send_msg(p, (int)(k % NEP), k, k * SLOT));
	reap_sends(p, 3);
	wait_available(p->srq, 13, 5000);
	/* graceful close refuses while objects exist */
	assert_rc(dat_ia_close(p->s.ia, DAT_CLOSE_GRACEFUL_FLAG),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE));
	assert_ok(dat_ia_close(p->s.ia, DAT_CLOSE_ABRUPT_FLAG));
	p->s.ia = DAT_HANDLE_NULL;	/* the teardown closes the client */
	alarm(0);
}

/* An SRQ left alone (no EP) is freed by the IA close too. */
static void test_ia_close_with_bare_srq(void **state)
{
	struct pair *p = *state;

	watchdog(__func__, 30);
	assert_ok(make_srq(p, 4, 1));
	assert_ok(srq_post(p, 0));
	assert_ok(dat_ia_close(p->s.ia, DAT_CLOSE_ABRUPT_FLAG));
	p->s.ia = DAT_HANDLE_NULL;
	alarm(0);
}

/* ================================================================= main */

#define TP(name) cmocka_unit_test_setup_teardown(name, pair_setup, pair_teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		TP(test_srq_create_query_free),
		TP(test_srq_bad_args),
		TP(test_srq_ep_query),
		TP(test_srq_two_eps_and_skew),
		TP(test_srq_order_mixed_sizes),
		TP(test_srq_post_until_full),
		TP(test_srq_ep_rdma),
		TP(test_srq_send_with_invalidate),
		TP(test_srq_dry),
		cmocka_unit_test_setup_teardown(test_srq_small_recv_evd, pair_setup_small_rcv,
						pair_teardown),
		TP(test_srq_queue_full),
		TP(test_srq_ep_broken),
		TP(test_srq_free_with_eps),
		cmocka_unit_test_setup_teardown(test_srq_ep_free_reused_memory,
						pair_setup_no_quarantine,
						pair_teardown_no_quarantine),
		TP(test_srq_resize),
		TP(test_srq_low_watermark),
		TP(test_srq_ep_watermarks),
		TP(test_ep_recv_query),
		TP(test_ia_close_with_srq),
		TP(test_ia_close_with_bare_srq),
	};
	default_dat_override();		/* may re-execute this program */
	watchdog_install();
	if (argc == 2)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
