/*
 * dapl-ofi integration tests: connections and data transfer, through the
 * stock registry (libdat2), over libfabric tcp on 127.0.0.1 (IA ofi-lo).
 *
 * Links -ldat2 only, like test_api.c: the provider is found through
 * DAT_OVERRIDE (build/dat.conf), or <dir of this binary>/../dat.conf.
 *
 * Server and client live in this process: two IAs opened on ofi-lo, the
 * server listening on a PSP whose port dat_psp_create_any chose (the ports
 * of the stock-client runs of the same CI job are avoided).  Where a peer
 * must die, the peer is this binary re-executed (--peer-child PORT MODE):
 * a fresh process, not a fork of one running provider threads.
 *
 * Every wait is bounded (dat_evd_wait with finite timeouts), and an alarm()
 * watchdog turns a provider call that never returns into a failure of the
 * run with the name of the test, not a hung suite.
 *
 * `test_api_conn PATTERN` runs only the tests matching PATTERN (cmocka's
 * filter, '*' and '?' wildcards).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dat2/udat.h>

#include "dat_test.h"

extern char **environ;

#define IA_NAME		"ofi-lo"
#define ASYNC_QLEN	8
#define SEC		(1000u * 1000u)		/* DAT_TIMEOUT is in microseconds */
#define MS		1000u
#define BUF_LEN		(1u << 20)		/* registered buffer of each side */
#define DTO_QLEN	256			/* request and receive EVDs */
#define EP_DTOS		64			/* max_request_dtos / max_recv_dtos */
#define PDATA_MAX	256			/* DFI_PDATA_MAX */

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

static void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)((i * 131u + seed * 29u + (i >> 8)) ^ seed);
}

static const char *ev_name(DAT_EVENT_NUMBER n)
{
	switch (n) {
	case DAT_DTO_COMPLETION_EVENT: return "DAT_DTO_COMPLETION_EVENT";
	case DAT_CONNECTION_REQUEST_EVENT: return "DAT_CONNECTION_REQUEST_EVENT";
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "DAT_CONNECTION_EVENT_ESTABLISHED";
	case DAT_CONNECTION_EVENT_PEER_REJECTED: return "DAT_CONNECTION_EVENT_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return "DAT_CONNECTION_EVENT_NON_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR:
		return "DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DAT_CONNECTION_EVENT_DISCONNECTED";
	case DAT_CONNECTION_EVENT_BROKEN: return "DAT_CONNECTION_EVENT_BROKEN";
	case DAT_CONNECTION_EVENT_TIMED_OUT: return "DAT_CONNECTION_EVENT_TIMED_OUT";
	case DAT_CONNECTION_EVENT_UNREACHABLE: return "DAT_CONNECTION_EVENT_UNREACHABLE";
	case DAT_SOFTWARE_EVENT: return "DAT_SOFTWARE_EVENT";
	default: return "(other event)";
	}
}

static const char *status_name(DAT_DTO_COMPLETION_STATUS s)
{
	switch (s) {
	case DAT_DTO_SUCCESS: return "DAT_DTO_SUCCESS";
	case DAT_DTO_ERR_FLUSHED: return "DAT_DTO_ERR_FLUSHED";
	case DAT_DTO_ERR_LOCAL_LENGTH: return "DAT_DTO_ERR_LOCAL_LENGTH";
	case DAT_DTO_ERR_LOCAL_EP: return "DAT_DTO_ERR_LOCAL_EP";
	case DAT_DTO_ERR_LOCAL_PROTECTION: return "DAT_DTO_ERR_LOCAL_PROTECTION";
	case DAT_DTO_ERR_BAD_RESPONSE: return "DAT_DTO_ERR_BAD_RESPONSE";
	case DAT_DTO_ERR_REMOTE_ACCESS: return "DAT_DTO_ERR_REMOTE_ACCESS";
	case DAT_DTO_ERR_REMOTE_RESPONDER: return "DAT_DTO_ERR_REMOTE_RESPONDER";
	case DAT_DTO_ERR_TRANSPORT: return "DAT_DTO_ERR_TRANSPORT";
	case DAT_DTO_ERR_RECEIVER_NOT_READY: return "DAT_DTO_ERR_RECEIVER_NOT_READY";
	case DAT_DTO_ERR_PARTIAL_PACKET: return "DAT_DTO_ERR_PARTIAL_PACKET";
	default: return "(other status)";
	}
}

static bool is_conn_end(DAT_EVENT_NUMBER n)
{
	return n == DAT_CONNECTION_EVENT_DISCONNECTED || n == DAT_CONNECTION_EVENT_BROKEN;
}

/* ---------------------------------------------------------------- watchdog */

/* A provider call that never returns (a deadlock, a lost wake-up in
 * dat_ep_free or dat_ia_close) must fail the run, not hang it. */
static const char *volatile wd_what = "?";

static void wd_put(const char *s)
{
	ssize_t r = write(2, s, strlen(s));

	(void)r;
}

static void wd_fire(int sig)
{
	(void)sig;
	wd_put("\nnot ok - watchdog: ");
	wd_put(wd_what);
	wd_put(" is stuck: a provider call did not return in time; aborting the run\n");
	_exit(3);
}

static void watchdog(const char *what, unsigned sec)
{
	wd_what = what;
	alarm(sec);
}

/* ------------------------------------------------------------------ sides */

struct side {
	const char *who;		/* "server" / "client", for messages */
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_VADDR reg_addr;		/* registered address of buf */
	DAT_EP_HANDLE ep;
	uint8_t *buf;
};

struct pair {
	struct side s, c;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
};

static DAT_EP_ATTR ep_attr(DAT_COUNT req_dtos, DAT_COUNT recv_dtos)
{
	DAT_EP_ATTR a;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = req_dtos;
	a.max_recv_dtos = recv_dtos;
	a.max_request_iov = 4;
	a.max_recv_iov = 4;
	a.max_rdma_read_iov = 4;
	a.max_rdma_write_iov = 4;
	a.max_rdma_read_in = 4;
	a.max_rdma_read_out = 4;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	return a;
}

static DAT_RETURN side_ep(struct side *x, const DAT_EP_ATTR *a)
{
	return dat_ep_create(x->ia, x->pz, x->rcv, x->req, x->conn, a, &x->ep);
}

static DAT_RETURN side_open(struct side *x, const char *who)
{
	char name[DAT_NAME_MAX_LENGTH];
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN reg_len = 0;
	DAT_EP_ATTR a = ep_attr(EP_DTOS, EP_DTOS);
	DAT_RETURN rc;

	memset(x, 0, sizeof(*x));
	x->who = who;
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
	if ((rc = dat_pz_create(x->ia, &x->pz)) != DAT_SUCCESS)
		return rc;
	memset(&region, 0, sizeof(region));
	region.for_va = x->buf;
	rc = dat_lmr_create(x->ia, DAT_MEM_TYPE_VIRTUAL, region, BUF_LEN, x->pz,
			    DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &x->lmr, &x->lctx, &x->rctx,
			    &reg_len, &x->reg_addr);
	if (rc != DAT_SUCCESS)
		return rc;
	if ((rc = dat_evd_create(x->ia, DTO_QLEN, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->req)) ||
	    (rc = dat_evd_create(x->ia, DTO_QLEN, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->rcv)) ||
	    (rc = dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &x->conn)) ||
	    (rc = dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &x->cr)))
		return rc;
	return side_ep(x, &a);
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

/* dat_psp_create_any on a port no other test of the CI job uses. */
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

/* A TCP port on 127.0.0.1 with no listener (it had one a moment ago). */
static DAT_CONN_QUAL dead_port(struct side *x)
{
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port = 0;

	assert_ok(psp_any(x, &psp, &port));
	assert_ok(dat_psp_free(psp));
	return port;
}

static int pair_setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	char b[160];
	DAT_RETURN rc;

	if (!p)
		return -1;
	watchdog("pair_setup", 30);
	if ((rc = side_open(&p->s, "server")) != DAT_SUCCESS ||
	    (rc = side_open(&p->c, "client")) != DAT_SUCCESS ||
	    (rc = psp_any(&p->s, &p->psp, &p->port)) != DAT_SUCCESS) {
		print_error("setup: opening two '%s' IAs with PZ, LMR, EVDs, EP and a PSP failed: %s"
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

static void check_conn(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, DAT_EP_HANDLE ep,
		       unsigned ms, const char *who, DAT_EVENT *out, const char *file, int line)
{
	DAT_EVENT ev;
	char b[160];
	DAT_RETURN rc = wait_ev(evd, ms, &ev);

	if (rc != DAT_SUCCESS) {
		print_error("%s: no event on the connection EVD within %u ms (dat_evd_wait: %s); "
			    "expected %s\n", who, ms, rc_name(rc, b, sizeof(b)), ev_name(want));
		_fail(file, line);
	}
	if (ev.event_number != want) {
		print_error("%s: connection EVD gave %s (0x%x), expected %s\n", who,
			    ev_name(ev.event_number), (unsigned)ev.event_number, ev_name(want));
		_fail(file, line);
	}
	if (ep && ev.event_data.connect_event_data.ep_handle != ep) {
		print_error("%s: %s names EP %p, expected %p\n", who, ev_name(want),
			    (void *)ev.event_data.connect_event_data.ep_handle, (void *)ep);
		_fail(file, line);
	}
	if (out)
		*out = ev;
}

#define expect_conn(evd, want, ep, ms, who, out) \
	check_conn(evd, want, ep, ms, who, out, __FILE__, __LINE__)

static void check_dto(DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep, uint64_t cookie, DAT_DTOS op,
		      DAT_DTO_COMPLETION_STATUS st, DAT_SEG_LENGTH len, unsigned ms,
		      const char *what, const char *file, int line)
{
	DAT_EVENT ev;
	char b[160];
	DAT_RETURN rc = wait_ev(evd, ms, &ev);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

	if (rc != DAT_SUCCESS) {
		print_error("%s: no completion within %u ms (dat_evd_wait: %s)\n", what, ms,
			    rc_name(rc, b, sizeof(b)));
		_fail(file, line);
	}
	if (ev.event_number != DAT_DTO_COMPLETION_EVENT) {
		print_error("%s: got %s (0x%x), expected DAT_DTO_COMPLETION_EVENT\n", what,
			    ev_name(ev.event_number), (unsigned)ev.event_number);
		_fail(file, line);
	}
	if (d->ep_handle != ep || d->user_cookie.as_64 != cookie || d->status != st ||
	    d->operation != op || d->transfered_length != len) {
		print_error("%s: completion {ep %p, cookie 0x%llx, status %s, op %d, length %u}\n"
			    "    expected   {ep %p, cookie 0x%llx, status %s, op %d, length %u}\n",
			    what, (void *)d->ep_handle, (unsigned long long)d->user_cookie.as_64,
			    status_name(d->status), (int)d->operation, (unsigned)d->transfered_length,
			    (void *)ep, (unsigned long long)cookie, status_name(st), (int)op,
			    (unsigned)len);
		_fail(file, line);
	}
}

#define expect_dto(evd, ep, cookie, op, st, len, ms, what) \
	check_dto(evd, ep, cookie, op, st, len, ms, what, __FILE__, __LINE__)

static void expect_empty(DAT_EVD_HANDLE evd, unsigned ms, const char *what)
{
	DAT_EVENT ev;
	DAT_RETURN rc = wait_ev(evd, ms, &ev);

	if (rc == DAT_SUCCESS)
		fail_msg("%s: unexpected %s (cookie 0x%llx, status %s)", what,
			 ev_name(ev.event_number),
			 (unsigned long long)ev.event_data.dto_completion_event_data.user_cookie.as_64,
			 status_name(ev.event_data.dto_completion_event_data.status));
	assert_err(rc, DAT_TIMEOUT_EXPIRED);
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

static DAT_RETURN connect_to(DAT_EP_HANDLE ep, DAT_CONN_QUAL port, void *pd, DAT_COUNT plen)
{
	struct sockaddr_in a = loopback();

	return dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&a, port, 5 * SEC, plen, pd,
			      DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
}

/* Wait for the connection request on the server's CR EVD. */
static DAT_CR_HANDLE wait_cr(struct side *s, DAT_HANDLE sp, DAT_CONN_QUAL port)
{
	DAT_EVENT ev;
	char b[160];
	DAT_RETURN rc = wait_ev(s->cr, 5000, &ev);
	const DAT_CR_ARRIVAL_EVENT_DATA *cr = &ev.event_data.cr_arrival_event_data;

	if (rc != DAT_SUCCESS)
		fail_msg("server: no connection request within 5 s (dat_evd_wait: %s)",
			 rc_name(rc, b, sizeof(b)));
	if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT)
		fail_msg("server: CR EVD gave %s (0x%x), expected DAT_CONNECTION_REQUEST_EVENT",
			 ev_name(ev.event_number), (unsigned)ev.event_number);
	assert_ptr_equal(cr->sp_handle.psp_handle, sp);
	assert_int_equal(cr->conn_qual, port);
	assert_non_null(cr->cr_handle);
	return cr->cr_handle;
}

/* Client connects (no private data), server accepts on its EP; both see
 * ESTABLISHED naming their own EP. */
static void establish(struct pair *p)
{
	DAT_CR_HANDLE cr;

	assert_ok(connect_to(p->c.ep, p->port, NULL, 0));
	cr = wait_cr(&p->s, p->psp, p->port);
	assert_ok(dat_cr_accept(cr, p->s.ep, 0, NULL));
	expect_conn(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->s.ep, 5000, "server", NULL);
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->c.ep, 5000, "client", NULL);
}

static DAT_EP_STATE ep_state(DAT_EP_HANDLE ep)
{
	DAT_EP_STATE st = (DAT_EP_STATE)-1;

	assert_ok(dat_ep_get_status(ep, &st, NULL, NULL));
	return st;
}

/* ------------------------------------------------------------------- DTOs */

static DAT_LMR_TRIPLET seg(const struct side *x, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t;

	memset(&t, 0, sizeof(t));
	t.virtual_address = (DAT_VADDR)(uintptr_t)(x->buf + off);
	t.segment_length = (DAT_SEG_LENGTH)len;
	t.lmr_context = x->lctx;
	return t;
}

static DAT_RMR_TRIPLET rseg(const struct side *x, size_t off, size_t len)
{
	DAT_RMR_TRIPLET t;

	memset(&t, 0, sizeof(t));
	t.virtual_address = x->reg_addr + off;
	t.segment_length = (DAT_SEG_LENGTH)len;
	t.rmr_context = x->rctx;
	return t;
}

static DAT_RETURN post_recv1(const struct side *x, size_t off, size_t len, uint64_t cookie)
{
	DAT_LMR_TRIPLET t = seg(x, off, len);

	return dat_ep_post_recv(x->ep, 1, &t, ck(cookie), DAT_COMPLETION_DEFAULT_FLAG);
}

static DAT_RETURN post_send1(const struct side *x, size_t off, size_t len, uint64_t cookie,
			     DAT_COMPLETION_FLAGS flags)
{
	DAT_LMR_TRIPLET t = seg(x, off, len);

	return dat_ep_post_send(x->ep, 1, &t, ck(cookie), flags);
}

/* A send on a disconnected EP: DAT allows it to be refused with
 * DAT_INVALID_STATE, or accepted and flushed to the request EVD at once.
 * Anything else (a crash, a silent success) is wrong. */
static void check_send_disconnected(const struct side *x, const char *who, const char *file,
				    int line)
{
	DAT_RETURN rc = post_send1(x, 0, 8, 0xd15c, DAT_COMPLETION_DEFAULT_FLAG);
	char b[160];

	if (rc == DAT_SUCCESS) {
		check_dto(x->req, x->ep, 0xd15c, DAT_DTO_SEND, DAT_DTO_ERR_FLUSHED, 8, 1000,
			  "a send accepted on a disconnected EP must be flushed", file, line);
		return;
	}
	if (DAT_GET_TYPE(rc) != DAT_INVALID_STATE) {
		print_error("%s: dat_ep_post_send on a disconnected EP returned %s, expected "
			    "DAT_INVALID_STATE or success and a flushed completion\n", who,
			    rc_name(rc, b, sizeof(b)));
		_fail(file, line);
	}
}

#define expect_send_disconnected(x, who) check_send_disconnected(x, who, __FILE__, __LINE__)

/* ==================================================== 1. connect / accept */

/* 256 bytes of private data each way, exact; ESTABLISHED names the right EP
 * on both sides; cr_query reports 127.0.0.1, the size, a writable copy. */
static void test_connect_accept_pdata(void **state)
{
	struct pair *p = *state;
	uint8_t cpd[PDATA_MAX], spd[PDATA_MAX];
	DAT_CR_HANDLE cr;
	DAT_CR_PARAM crp;
	DAT_EP_PARAM epp;
	DAT_EVENT ev;
	const struct sockaddr_in *ra;

	watchdog(__func__, 60);
	fill(cpd, sizeof(cpd), 1);
	fill(spd, sizeof(spd), 2);
	assert_int_equal(ep_state(p->c.ep), DAT_EP_STATE_UNCONNECTED);
	assert_ok(connect_to(p->c.ep, p->port, cpd, PDATA_MAX));
	memset(cpd, 0, sizeof(cpd));	/* the provider must have copied it */
	cr = wait_cr(&p->s, p->psp, p->port);

	memset(&crp, 0, sizeof(crp));
	assert_ok(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp));
	assert_non_null(crp.remote_ia_address_ptr);
	assert_int_equal(crp.remote_ia_address_ptr->sa_family, AF_INET);
	ra = (const struct sockaddr_in *)crp.remote_ia_address_ptr;
	assert_int_equal(ntohl(ra->sin_addr.s_addr), INADDR_LOOPBACK);
	assert_int_equal(crp.private_data_size, PDATA_MAX);
	assert_non_null(crp.private_data);
	fill(cpd, sizeof(cpd), 1);
	if (memcmp(crp.private_data, cpd, PDATA_MAX) != 0)
		fail_msg("server: dat_cr_query private data differs from the 256 bytes the client "
			 "passed to dat_ep_connect");
	((uint8_t *)crp.private_data)[0] ^= 0xff;	/* writable (dtest edits it) */
	((uint8_t *)crp.private_data)[PDATA_MAX - 1] ^= 0xff;
	assert_ptr_equal(crp.local_ep_handle, DAT_HANDLE_NULL);	/* a PSP, no RSP */

	assert_ok(dat_cr_accept(cr, p->s.ep, PDATA_MAX, spd));
	memset(spd, 0, sizeof(spd));
	expect_conn(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->s.ep, 5000, "server", NULL);
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->c.ep, 5000, "client", &ev);
	fill(spd, sizeof(spd), 2);
	assert_int_equal(ev.event_data.connect_event_data.private_data_size, PDATA_MAX);
	assert_non_null(ev.event_data.connect_event_data.private_data);
	if (memcmp(ev.event_data.connect_event_data.private_data, spd, PDATA_MAX) != 0)
		fail_msg("client: ESTABLISHED private data differs from the 256 bytes the server "
			 "passed to dat_cr_accept");
	assert_int_equal(ep_state(p->c.ep), DAT_EP_STATE_CONNECTED);
	assert_int_equal(ep_state(p->s.ep), DAT_EP_STATE_CONNECTED);
	memset(&epp, 0, sizeof(epp));
	assert_ok(dat_ep_query(p->c.ep, DAT_EP_FIELD_ALL, &epp));
	assert_non_null(epp.remote_ia_address_ptr);
	assert_int_equal(epp.remote_port_qual, p->port);
	/* the CR is gone with the accept */
	assert_err(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp), DAT_INVALID_HANDLE);
	alarm(0);
}

/* Reject with private data: the client gets PEER_REJECTED (with the data,
 * if it arrives); then dat_ep_reset and a second connect is accepted. */
static void test_reject_then_reset_reconnect(void **state)
{
	struct pair *p = *state;
	uint8_t rpd[64];
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;
	const DAT_CONNECTION_EVENT_DATA *cd = &ev.event_data.connect_event_data;

	watchdog(__func__, 60);
	fill(rpd, sizeof(rpd), 7);
	assert_ok(connect_to(p->c.ep, p->port, NULL, 0));
	cr = wait_cr(&p->s, p->psp, p->port);
	assert_ok(dat_cr_reject(cr, sizeof(rpd), rpd));
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_PEER_REJECTED, p->c.ep, 2000, "client", &ev);
	if (cd->private_data_size > 0) {
		assert_int_equal(cd->private_data_size, sizeof(rpd));
		assert_non_null(cd->private_data);
		if (memcmp(cd->private_data, rpd, sizeof(rpd)) != 0)
			fail_msg("client: PEER_REJECTED private data differs from dat_cr_reject's");
	} else {
		print_message("# note: the reject's 64 bytes of private data did not reach the "
			      "client (PEER_REJECTED carries none)\n");
	}
	expect_empty(p->s.conn, 100, "server connection EVD after a reject");
	assert_int_equal(ep_state(p->c.ep), DAT_EP_STATE_DISCONNECTED);
	assert_ok(dat_ep_reset(p->c.ep));
	assert_int_equal(ep_state(p->c.ep), DAT_EP_STATE_UNCONNECTED);
	establish(p);
	alarm(0);
}

/* No listener: PEER_REJECTED within 2 s; dat_ep_reset; connect again. */
static void test_no_listener_then_reset_reconnect(void **state)
{
	struct pair *p = *state;
	DAT_CONN_QUAL dead = dead_port(&p->s);
	uint64_t t0;

	watchdog(__func__, 60);
	t0 = now_ns();
	assert_ok(connect_to(p->c.ep, dead, NULL, 0));
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_PEER_REJECTED, p->c.ep, 2000, "client", NULL);
	print_message("# PEER_REJECTED after %u ms\n", ms_since(t0));
	assert_int_equal(ep_state(p->c.ep), DAT_EP_STATE_DISCONNECTED);
	assert_ok(dat_ep_reset(p->c.ep));
	assert_int_equal(ep_state(p->c.ep), DAT_EP_STATE_UNCONNECTED);
	/* twice, as dapltest does on a refused connect */
	assert_ok(connect_to(p->c.ep, dead, NULL, 0));
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_PEER_REJECTED, p->c.ep, 2000, "client", NULL);
	assert_ok(dat_ep_reset(p->c.ep));
	establish(p);
	/* and data flows on the reconnected EP */
	fill(p->c.buf, 32, 3);
	assert_ok(post_recv1(&p->s, 0, 64, 11));
	assert_ok(post_send1(&p->c, 0, 32, 12, DAT_COMPLETION_DEFAULT_FLAG));
	expect_dto(p->c.req, p->c.ep, 12, DAT_DTO_SEND, DAT_DTO_SUCCESS, 32, 2000, "client send");
	expect_dto(p->s.rcv, p->s.ep, 11, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 32, 2000,
		   "server receive");
	assert_memory_equal(p->s.buf, p->c.buf, 32);
	alarm(0);
}

/* =========================================================== 2. data */

/* Send/receive with 1..4 segments each way round: exact lengths and cookies
 * in both completions, the bytes scattered in order over the receive
 * segments.  Receives are posted before the connection for the first round. */
static void test_send_recv_segments(void **state)
{
	struct pair *p = *state;
	/* send segment layout (offsets with gaps, odd lengths) */
	static const size_t soff[4] = { 0, 5000, 9000, 20011 };
	static const size_t slen[4] = { 1000, 333, 4097, 7 };
	/* receive segments: different sizes, total larger than any send */
	static const size_t roff[4] = { 100000, 130000, 170000, 190000 };
	static const size_t rlen[4] = { 700, 3000, 2000, 9000 };
	uint8_t *expect = malloc(64 * 1024), *got = malloc(64 * 1024);

	watchdog(__func__, 60);
	assert_non_null(expect);
	assert_non_null(got);
	for (int n = 1; n <= 4; n++) {
		DAT_LMR_TRIPLET siov[4], riov[4];
		size_t total = 0, rtotal = 0, k = 0;

		for (int i = 0; i < n; i++) {
			fill(p->c.buf + soff[i], slen[i], (unsigned)(10 * n + i));
			memcpy(expect + total, p->c.buf + soff[i], slen[i]);
			siov[i] = seg(&p->c, soff[i], slen[i]);
			total += slen[i];
			riov[i] = seg(&p->s, roff[i], rlen[i]);
			memset(p->s.buf + roff[i], 0xee, rlen[i]);
			rtotal += rlen[i];
		}
		if (rtotal < total) {	/* one receive segment of n must take it all */
			riov[n - 1] = seg(&p->s, roff[3], 9000 + total);
			memset(p->s.buf + roff[3], 0xee, 9000 + total);
		}
		assert_ok(dat_ep_post_recv(p->s.ep, n, riov, ck(0x5200 + (uint64_t)n),
					   DAT_COMPLETION_DEFAULT_FLAG));
		if (n == 1)
			establish(p);	/* that receive was posted before the accept */
		assert_ok(dat_ep_post_send(p->c.ep, n, siov, ck(0xc500 + (uint64_t)n),
					   DAT_COMPLETION_DEFAULT_FLAG));
		expect_dto(p->c.req, p->c.ep, 0xc500 + (uint64_t)n, DAT_DTO_SEND, DAT_DTO_SUCCESS,
			   (DAT_SEG_LENGTH)total, 2000, "client send");
		expect_dto(p->s.rcv, p->s.ep, 0x5200 + (uint64_t)n, DAT_DTO_RECEIVE,
			   DAT_DTO_SUCCESS, (DAT_SEG_LENGTH)total, 2000, "server receive");
		/* gather what landed, in receive-segment order */
		for (int i = 0; i < n && k < total; i++) {
			size_t take = riov[i].segment_length < total - k ?
				      riov[i].segment_length : total - k;

			memcpy(got + k, (void *)(uintptr_t)riov[i].virtual_address, take);
			k += take;
		}
		if (memcmp(got, expect, total) != 0)
			fail_msg("%d-segment send of %zu bytes: the received bytes differ", n, total);
	}
	/* and the other way round, 4 segments each, server -> client */
	{
		DAT_LMR_TRIPLET siov[4], riov[4];
		size_t total = 0;

		for (int i = 0; i < 4; i++) {
			fill(p->s.buf + 300000 + 1000 * (size_t)i, 100 + (size_t)i, 90 + (unsigned)i);
			siov[i] = seg(&p->s, 300000 + 1000 * (size_t)i, 100 + (size_t)i);
			memcpy(expect + total, p->s.buf + 300000 + 1000 * (size_t)i, 100 + (size_t)i);
			total += 100 + (size_t)i;
			riov[i] = seg(&p->c, 400000 + 4096 * (size_t)i, 110);
		}
		assert_ok(dat_ep_post_recv(p->c.ep, 4, riov, ck(0xcccc), DAT_COMPLETION_DEFAULT_FLAG));
		assert_ok(dat_ep_post_send(p->s.ep, 4, siov, ck(0x5555), DAT_COMPLETION_DEFAULT_FLAG));
		expect_dto(p->s.req, p->s.ep, 0x5555, DAT_DTO_SEND, DAT_DTO_SUCCESS,
			   (DAT_SEG_LENGTH)total, 2000, "server send");
		expect_dto(p->c.rcv, p->c.ep, 0xcccc, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS,
			   (DAT_SEG_LENGTH)total, 2000, "client receive");
		for (size_t i = 0, k = 0; i < 4 && k < total; i++) {
			size_t take = total - k < 110 ? total - k : 110;

			memcpy(got + k, p->c.buf + 400000 + 4096 * i, take);
			k += take;
		}
		if (memcmp(got, expect, total) != 0)
			fail_msg("4-segment send server->client: the received bytes differ");
	}
	/* a zero-byte send matches a receive with length 0 */
	assert_ok(post_recv1(&p->s, 0, 64, 0x77));
	assert_ok(dat_ep_post_send(p->c.ep, 0, NULL, ck(0x78), DAT_COMPLETION_DEFAULT_FLAG));
	expect_dto(p->c.req, p->c.ep, 0x78, DAT_DTO_SEND, DAT_DTO_SUCCESS, 0, 2000,
		   "client zero-byte send");
	expect_dto(p->s.rcv, p->s.ep, 0x77, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 0, 2000,
		   "server receive of a zero-byte send");
	free(expect);
	free(got);
	alarm(0);
}

/* ThreadSanitizer's runtime API (weak: NULL in other builds). */
void __tsan_ignore_thread_begin(void) __attribute__((weak));
void __tsan_ignore_thread_end(void) __attribute__((weak));

/* Poll (without calling the provider) until the target memory matches:
 * the target never calls the provider while its peer writes (dtest -W).
 * Reading memory that the progress thread is filling is the point here,
 * so ThreadSanitizer does not record these reads. */
static bool lands_within(const uint8_t *dst, const uint8_t *src, size_t len, unsigned ms)
{
	uint64_t t0 = now_ns();
	bool same;

	if (__tsan_ignore_thread_begin)
		__tsan_ignore_thread_begin();
	do {
		same = memcmp(dst, src, len) == 0;
		if (!same)
			sleep_ms(1);
	} while (!same && ms_since(t0) < ms);
	if (__tsan_ignore_thread_end)
		__tsan_ignore_thread_end();
	return same;
}

/* RDMA write (3 local segments) and read (2 local segments) with the peer's
 * registered address and rmr_context: the bytes land exactly, nothing
 * around them is touched. */
static void test_rdma_write_read(void **state)
{
	struct pair *p = *state;
	DAT_LMR_TRIPLET iov[3];
	DAT_RMR_TRIPLET r;
	const size_t woff = 65536, wlen = 3 * 40000 + 17;
	uint8_t *expect = malloc(wlen);

	watchdog(__func__, 60);
	assert_non_null(expect);
	establish(p);

	/* write: client segments [0,40000) [50000,90000) [100000,140017) */
	fill(p->c.buf, 40000, 31);
	fill(p->c.buf + 50000, 40000, 32);
	fill(p->c.buf + 100000, 40017, 33);
	iov[0] = seg(&p->c, 0, 40000);
	iov[1] = seg(&p->c, 50000, 40000);
	iov[2] = seg(&p->c, 100000, 40017);
	memcpy(expect, p->c.buf, 40000);
	memcpy(expect + 40000, p->c.buf + 50000, 40000);
	memcpy(expect + 80000, p->c.buf + 100000, 40017);
	memset(p->s.buf, 0xab, 2 * woff + wlen);
	r = rseg(&p->s, woff, wlen);
	assert_ok(dat_ep_post_rdma_write(p->c.ep, 3, iov, ck(0xa1), &r,
					 DAT_COMPLETION_DEFAULT_FLAG));
	expect_dto(p->c.req, p->c.ep, 0xa1, DAT_DTO_RDMA_WRITE, DAT_DTO_SUCCESS,
		   (DAT_SEG_LENGTH)wlen, 2000, "client RDMA write");
	if (!lands_within(p->s.buf + woff, expect, wlen, 2000))
		fail_msg("RDMA write of %zu bytes completed, but the server's memory does not hold "
			 "the data 2 s later (the target's progress does not place it)", wlen);
	for (size_t i = 0; i < woff; i++)
		if (p->s.buf[i] != 0xab || p->s.buf[woff + wlen + i] != 0xab)
			fail_msg("RDMA write touched server memory outside the target range");
	expect_empty(p->s.rcv, 0, "server receive EVD after an RDMA write");
	expect_empty(p->s.req, 0, "server request EVD after an RDMA write");

	/* read: server range [500000, 500000+70001) into two client segments */
	fill(p->s.buf + 500000, 70001, 41);
	memset(p->c.buf + 200000, 0, 200000);
	iov[0] = seg(&p->c, 200000, 30000);
	iov[1] = seg(&p->c, 300000, 40001);
	r = rseg(&p->s, 500000, 70001);
	assert_ok(dat_ep_post_rdma_read(p->c.ep, 2, iov, ck(0xb2), &r,
					DAT_COMPLETION_DEFAULT_FLAG));
	expect_dto(p->c.req, p->c.ep, 0xb2, DAT_DTO_RDMA_READ, DAT_DTO_SUCCESS, 70001, 2000,
		   "client RDMA read");
	if (memcmp(p->c.buf + 200000, p->s.buf + 500000, 30000) != 0 ||
	    memcmp(p->c.buf + 300000, p->s.buf + 530000, 40001) != 0)
		fail_msg("RDMA read completed but the client's segments do not hold the server's "
			 "bytes");
	assert_int_equal(p->c.buf[230000], 0);	/* nothing past the first segment */
	assert_int_equal(p->c.buf[340001], 0);
	free(expect);
	alarm(0);
}

/* An RDMA write followed by a send on the same EP: when the receive
 * completes, the written data is in place (ordering, as dtest relies on). */
static void test_rdma_write_then_send_ordering(void **state)
{
	struct pair *p = *state;
	static const size_t sizes[] = { 1, 4096, 65536, 262144, 524288, 100003, 8, 300000 };

	watchdog(__func__, 60);
	establish(p);
	for (unsigned round = 0; round < sizeof(sizes) / sizeof(sizes[0]); round++) {
		size_t len = sizes[round];
		DAT_LMR_TRIPLET t = seg(&p->c, 0, len);
		DAT_RMR_TRIPLET r = rseg(&p->s, 0, len);

		fill(p->c.buf, len, 100 + round);
		memset(p->s.buf, 0, len);
		assert_ok(post_recv1(&p->s, 900000, 64, 0x1000 + round));
		assert_ok(dat_ep_post_rdma_write(p->c.ep, 1, &t, ck(0x2000 + round), &r,
						 DAT_COMPLETION_DEFAULT_FLAG));
		memcpy(p->c.buf + 800000, &round, sizeof(round));
		assert_ok(post_send1(&p->c, 800000, sizeof(round), 0x3000 + round,
				     DAT_COMPLETION_DEFAULT_FLAG));
		expect_dto(p->s.rcv, p->s.ep, 0x1000 + round, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS,
			   sizeof(round), 5000, "server receive after the write");
		if (memcmp(p->s.buf, p->c.buf, len) != 0)
			fail_msg("round %u: the send that followed a %zu-byte RDMA write on the same EP "
				 "was received before the written data was in place", round, len);
		expect_dto(p->c.req, p->c.ep, 0x2000 + round, DAT_DTO_RDMA_WRITE, DAT_DTO_SUCCESS,
			   (DAT_SEG_LENGTH)len, 2000, "client RDMA write");
		expect_dto(p->c.req, p->c.ep, 0x3000 + round, DAT_DTO_SEND, DAT_DTO_SUCCESS,
			   sizeof(round), 2000, "client send");
	}
	alarm(0);
}

/* DAT_COMPLETION_SUPPRESS_FLAG: a successful send gives no event; the next
 * signalled one does, with its own cookie. */
static void test_suppressed_send(void **state)
{
	struct pair *p = *state;

	watchdog(__func__, 60);
	establish(p);
	assert_ok(post_recv1(&p->s, 0, 64, 1));
	assert_ok(post_recv1(&p->s, 64, 64, 2));
	assert_ok(post_send1(&p->c, 0, 10, 0xdead, DAT_COMPLETION_SUPPRESS_FLAG));
	expect_dto(p->s.rcv, p->s.ep, 1, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 10, 2000,
		   "server receive of the suppressed send");
	expect_empty(p->c.req, 300, "client request EVD after a suppressed send");
	assert_ok(post_send1(&p->c, 0, 20, 0xbeef, DAT_COMPLETION_DEFAULT_FLAG));
	expect_dto(p->c.req, p->c.ep, 0xbeef, DAT_DTO_SEND, DAT_DTO_SUCCESS, 20, 2000,
		   "client signalled send after a suppressed one");
	expect_dto(p->s.rcv, p->s.ep, 2, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 20, 2000,
		   "server receive of the signalled send");
	expect_empty(p->c.req, 100, "client request EVD");
	alarm(0);
}

/* max_request_dtos sends posted and not reaped: one more is refused with
 * DAT_INSUFFICIENT_RESOURCES; reaping frees the queue. */
static void test_request_queue_full(void **state)
{
	struct pair *p = *state;
	const DAT_COUNT max = 8;
	DAT_EP_ATTR a = ep_attr(max, EP_DTOS);
	DAT_EP_PARAM epp;
	DAT_RETURN rc;

	watchdog(__func__, 60);
	assert_ok(dat_ep_free(p->c.ep));
	assert_ok(side_ep(&p->c, &a));
	assert_ok(dat_ep_query(p->c.ep, DAT_EP_FIELD_ALL, &epp));
	assert_int_equal(epp.ep_attr.max_request_dtos, max);
	for (int i = 0; i < 2 * max + 2; i++)
		assert_ok(post_recv1(&p->s, 64 * (size_t)i, 64, 100 + (uint64_t)i));
	establish(p);
	for (int i = 0; i < max; i++)
		assert_ok(post_send1(&p->c, 64 * (size_t)i, 16, (uint64_t)i,
				     DAT_COMPLETION_DEFAULT_FLAG));
	/* Give the sends time to complete on the wire: they are still not
	 * reaped by the consumer, so the queue stays full. */
	sleep_ms(200);
	rc = post_send1(&p->c, 0, 16, 99, DAT_COMPLETION_DEFAULT_FLAG);
	if (rc == DAT_SUCCESS) {
		DAT_BOOLEAN req_idle = DAT_FALSE;
		DAT_COUNT nev = 0;
		DAT_EVD_PARAM ep_evd;

		assert_ok(dat_ep_get_status(p->c.ep, NULL, NULL, &req_idle));
		if (dat_evd_query(p->c.req, DAT_EVD_FIELD_ALL, &ep_evd) == DAT_SUCCESS)
			nev = ep_evd.evd_qlen;
		fail_msg("dat_ep_post_send #%d on an EP with max_request_dtos %d and %d sends "
			 "posted, none of their completions dequeued, returned DAT_SUCCESS "
			 "(expected DAT_INSUFFICIENT_RESOURCES); dat_ep_get_status reports the "
			 "request queue %s (request EVD qlen %d)", max + 1, max, max,
			 req_idle ? "idle" : "busy", nev);
	}
	assert_err(rc, DAT_INSUFFICIENT_RESOURCES);
	for (int i = 0; i < max; i++)
		expect_dto(p->c.req, p->c.ep, (uint64_t)i, DAT_DTO_SEND, DAT_DTO_SUCCESS, 16, 2000,
			   "client send of a full queue");
	expect_empty(p->c.req, 100, "client request EVD: the refused post must leave no event");
	for (int i = 0; i < max; i++)
		assert_ok(post_send1(&p->c, 64 * (size_t)i, 16, 200 + (uint64_t)i,
				     DAT_COMPLETION_DEFAULT_FLAG));
	for (int i = 0; i < max; i++)
		expect_dto(p->c.req, p->c.ep, 200 + (uint64_t)i, DAT_DTO_SEND, DAT_DTO_SUCCESS, 16,
			   2000, "client send after reaping");
	for (int i = 0; i < 2 * max; i++)
		expect_dto(p->s.rcv, p->s.ep, 100 + (uint64_t)i, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS,
			   16, 2000, "server receive");
	alarm(0);
}

/* ================================================= 3. a long stream */

#define STREAM_N	100000u
#define STREAM_MSG	64u
#define STREAM_WIN	32u
#define STREAM_RECVS	64u

/* One receive completion of the stream: the next sequence number, intact,
 * in the buffer posted next; the buffer is reposted. */
static void stream_rx(struct pair *p, const DAT_EVENT *ev, uint32_t *received)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
	uint64_t slot = d->user_cookie.as_64, seq;
	uint8_t want[STREAM_MSG];
	const uint8_t *m;
	DAT_RETURN rc;
	char b[160];

	if (ev->event_number != DAT_DTO_COMPLETION_EVENT || d->status != DAT_DTO_SUCCESS ||
	    d->ep_handle != p->s.ep || slot >= STREAM_RECVS || d->transfered_length != STREAM_MSG)
		fail_msg("stream: receive #%u: %s, cookie %llu, status %s, length %u", *received,
			 ev_name(ev->event_number), (unsigned long long)slot, status_name(d->status),
			 (unsigned)d->transfered_length);
	m = p->s.buf + STREAM_MSG * slot;
	memcpy(&seq, m, sizeof(seq));
	if (seq != *received)
		fail_msg("stream: receive #%u holds sequence number %llu (%s)", *received,
			 (unsigned long long)seq,
			 seq < *received ? "a duplicate or a reordering" : "a loss or a reordering");
	fill(want + 8, STREAM_MSG - 8, (unsigned)seq);
	if (memcmp(m + 8, want + 8, STREAM_MSG - 8) != 0)
		fail_msg("stream: message %llu arrived with a corrupt payload", (unsigned long long)seq);
	if (slot != *received % STREAM_RECVS)
		fail_msg("stream: receive #%u completed buffer %llu, expected %u: receives complete "
			 "out of posting order", *received, (unsigned long long)slot,
			 *received % STREAM_RECVS);
	(*received)++;
	rc = post_recv1(&p->s, STREAM_MSG * slot, STREAM_MSG, slot);
	if (rc != DAT_SUCCESS)
		fail_msg("stream: reposting receive %llu returned %s", (unsigned long long)slot,
			 rc_name(rc, b, sizeof(b)));
}

/* 100000 sends of 64 bytes client -> server, a window of 32 outstanding
 * sends, receives reposted: each sequence number arrives once, in order,
 * with its payload intact, within 20 s. */
static void test_stream_100k_in_order(void **state)
{
	struct pair *p = *state;
	uint32_t sent = 0, sdone = 0, received = 0, outstanding = 0;
	uint64_t t0, deadline;
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	char b[160];

	watchdog(__func__, 120);
	for (uint32_t i = 0; i < STREAM_RECVS; i++)
		assert_ok(post_recv1(&p->s, STREAM_MSG * i, STREAM_MSG, i));
	establish(p);
	t0 = now_ns();
	deadline = t0 + UINT64_C(20) * 1000000000u;
	while (received < STREAM_N) {
		bool moved = false;
		DAT_RETURN rc;

		while (outstanding < STREAM_WIN && sent < STREAM_N) {
			uint32_t slot = sent % STREAM_WIN;
			uint8_t *m = p->c.buf + STREAM_MSG * slot;
			uint64_t seq = sent;

			memcpy(m, &seq, sizeof(seq));
			fill(m + 8, STREAM_MSG - 8, (unsigned)sent);
			rc = post_send1(&p->c, STREAM_MSG * slot, STREAM_MSG, sent,
					DAT_COMPLETION_DEFAULT_FLAG);
			if (rc != DAT_SUCCESS)
				fail_msg("stream: dat_ep_post_send #%u (%u outstanding) returned %s", sent,
					 outstanding, rc_name(rc, b, sizeof(b)));
			sent++;
			outstanding++;
			moved = true;
		}
		while (dat_evd_dequeue(p->c.req, &ev) == DAT_SUCCESS) {
			if (ev.event_number != DAT_DTO_COMPLETION_EVENT || d->status != DAT_DTO_SUCCESS ||
			    d->user_cookie.as_64 != sdone || d->transfered_length != STREAM_MSG ||
			    d->ep_handle != p->c.ep)
				fail_msg("stream: send completion %u: %s, cookie %llu, status %s, "
					 "length %u", sdone, ev_name(ev.event_number),
					 (unsigned long long)d->user_cookie.as_64, status_name(d->status),
					 (unsigned)d->transfered_length);
			sdone++;
			outstanding--;
			moved = true;
		}
		while (dat_evd_dequeue(p->s.rcv, &ev) == DAT_SUCCESS) {
			stream_rx(p, &ev, &received);
			moved = true;
		}
		if (now_ns() > deadline)
			fail_msg("stream: after 20 s only %u of %u messages received (%u sent, %u send "
				 "completions)", received, STREAM_N, sent, sdone);
		if (!moved && wait_ev(p->s.rcv, 10, &ev) == DAT_SUCCESS)
			stream_rx(p, &ev, &received);
	}
	print_message("# %u messages in %u ms\n", STREAM_N, ms_since(t0));
	while (sdone < sent) {
		expect_dto(p->c.req, p->c.ep, sdone, DAT_DTO_SEND, DAT_DTO_SUCCESS, STREAM_MSG, 2000,
			   "stream: final send completions");
		sdone++;
	}
	expect_empty(p->s.rcv, 100, "stream: server receive EVD after the last message");
	alarm(0);
}

/* ====================================================== 4. disconnect */

/* Wait until `n` receive completions came back (any status) on `evd`;
 * each must name `ep`, be a receive, carry a cookie of [base, base+n) once,
 * and have status `st`. */
static void expect_flushed(DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep, uint64_t base, int n,
			   unsigned ms, const char *who)
{
	bool seen[64] = { false };
	uint64_t t0 = now_ns();

	assert_true(n <= 64);
	for (int k = 0; k < n; k++) {
		DAT_EVENT ev;
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		unsigned left = ms > ms_since(t0) ? ms - ms_since(t0) : 0;
		DAT_RETURN rc = wait_ev(evd, left, &ev);
		uint64_t c;
		char b[160];

		if (rc != DAT_SUCCESS)
			fail_msg("%s: %d of %d posted receives came back within %u ms (expected all "
				 "flushed with DAT_DTO_ERR_FLUSHED; dat_evd_wait: %s)", who, k, n, ms,
				 rc_name(rc, b, sizeof(b)));
		c = d->user_cookie.as_64;
		if (ev.event_number != DAT_DTO_COMPLETION_EVENT || d->ep_handle != ep ||
		    d->operation != DAT_DTO_RECEIVE || d->status != DAT_DTO_ERR_FLUSHED ||
		    c < base || c >= base + (uint64_t)n || seen[c - base])
			fail_msg("%s: flushed receive %d: %s, ep %p (expected %p), op %d, cookie 0x%llx, "
				 "status %s (expected DAT_DTO_ERR_FLUSHED)", who, k,
				 ev_name(ev.event_number), (void *)d->ep_handle, (void *)ep,
				 (int)d->operation, (unsigned long long)c, status_name(d->status));
		seen[c - base] = true;
	}
}

/* The client disconnects: both sides get DISCONNECTED naming their EP
 * within 2 s, posted receives on both sides are flushed; the EPs free, and
 * later dequeues on their EVDs are harmless. */
static void test_disconnect_flushes(void **state)
{
	struct pair *p = *state;
	DAT_EVENT ev;
	uint64_t t0;

	watchdog(__func__, 60);
	establish(p);
	for (int i = 0; i < 6; i++) {
		assert_ok(post_recv1(&p->s, 64 * (size_t)i, 64, 0x100 + (uint64_t)i));
		assert_ok(post_recv1(&p->c, 64 * (size_t)i, 64, 0x200 + (uint64_t)i));
	}
	/* one message through first: the connection really works */
	assert_ok(post_send1(&p->c, 4096, 8, 0x300, DAT_COMPLETION_DEFAULT_FLAG));
	expect_dto(p->c.req, p->c.ep, 0x300, DAT_DTO_SEND, DAT_DTO_SUCCESS, 8, 2000, "client send");
	expect_dto(p->s.rcv, p->s.ep, 0x100, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 8, 2000,
		   "server receive");

	t0 = now_ns();
	assert_ok(dat_ep_disconnect(p->c.ep, DAT_CLOSE_GRACEFUL_FLAG));
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->c.ep, 2000, "client", NULL);
	expect_conn(p->s.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->s.ep,
		    2000 > ms_since(t0) ? 2000 - ms_since(t0) : 1, "server", NULL);
	print_message("# both DISCONNECTED after %u ms\n", ms_since(t0));
	assert_int_equal(ep_state(p->c.ep), DAT_EP_STATE_DISCONNECTED);
	assert_int_equal(ep_state(p->s.ep), DAT_EP_STATE_DISCONNECTED);
	expect_flushed(p->c.rcv, p->c.ep, 0x200, 6, 2000, "client");
	expect_flushed(p->s.rcv, p->s.ep, 0x101, 5, 2000, "server");
	expect_empty(p->c.conn, 100, "client connection EVD after DISCONNECTED");
	expect_empty(p->s.conn, 0, "server connection EVD after DISCONNECTED");
	/* a second disconnect is harmless; posts are refused */
	assert_ok(dat_ep_disconnect(p->c.ep, DAT_CLOSE_ABRUPT_FLAG));

	assert_ok(dat_ep_free(p->c.ep));
	assert_ok(dat_ep_free(p->s.ep));
	p->c.ep = p->s.ep = DAT_HANDLE_NULL;
	for (int i = 0; i < 2; i++) {
		struct side *x = i ? &p->s : &p->c;

		assert_rc(dat_evd_dequeue(x->rcv, &ev), DAT_QUEUE_EMPTY);
		assert_rc(dat_evd_dequeue(x->req, &ev), DAT_QUEUE_EMPTY);
		assert_rc(dat_evd_dequeue(x->conn, &ev), DAT_QUEUE_EMPTY);
		assert_err(wait_ev(x->rcv, 50, &ev), DAT_TIMEOUT_EXPIRED);
		/* the EP's references are gone: its EVDs can be freed */
		assert_ok(dat_evd_free(x->rcv));
		assert_ok(dat_evd_free(x->req));
		assert_ok(dat_evd_free(x->conn));
	}
	alarm(0);
}

/* ===================================================== 5. peer killed */

/* The peer, in its own process: connect to 127.0.0.1:PORT, then
 *   exit:   send 8 messages (reaped), post 8 more and _exit() at once;
 *   stream: send 64-byte messages with a window of 16 until killed. */
static int peer_child_main(const char *port_s, const char *mode)
{
	struct side c;
	DAT_EVENT ev;
	DAT_RETURN rc;
	char *end;
	unsigned long port = strtoul(port_s, &end, 10);
	uint32_t sent = 0, outstanding = 0;

	memset(&ev, 0, sizeof(ev));
	alarm(30);		/* never outlive the parent's test */
	if (*end || port == 0 || port > 65535)
		return 2;
	rc = side_open(&c, "peer");
	if (rc != DAT_SUCCESS) {
		fprintf(stderr, "peer: setup failed: 0x%08x\n", (unsigned)rc);
		_exit(2);
	}
	rc = connect_to(c.ep, port, NULL, 0);
	if (rc == DAT_SUCCESS)
		rc = wait_ev(c.conn, 5000, &ev);
	if (rc != DAT_SUCCESS || ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED) {
		fprintf(stderr, "peer: connect failed: 0x%08x, event 0x%x\n", (unsigned)rc,
			(unsigned)ev.event_number);
		_exit(3);
	}
	if (strcmp(mode, "exit") == 0) {
		for (uint32_t i = 0; i < 16; i++) {
			uint64_t seq = i;

			memcpy(c.buf + 64 * i, &seq, sizeof(seq));
			if (post_send1(&c, 64 * i, 64, i, DAT_COMPLETION_DEFAULT_FLAG) != DAT_SUCCESS)
				_exit(4);
			if (i == 7)
				for (int k = 0; k < 8; k++)
					if (wait_ev(c.req, 5000, &ev) != DAT_SUCCESS)
						_exit(5);
		}
		_exit(0);	/* mid-stream: 8 sends in flight, nothing closed */
	}
	for (;;) {		/* stream: until SIGKILL (or the alarm) */
		while (outstanding < 16) {
			uint64_t seq = sent;
			uint32_t slot = sent % 16;

			memcpy(c.buf + 64 * slot, &seq, sizeof(seq));
			if (post_send1(&c, 64 * slot, 64, sent, DAT_COMPLETION_DEFAULT_FLAG) !=
			    DAT_SUCCESS)
				_exit(4);
			sent++;
			outstanding++;
		}
		rc = wait_ev(c.req, 5000, &ev);
		if (rc != DAT_SUCCESS) {
			fprintf(stderr, "peer: no send completion in 5 s\n");
			_exit(5);
		}
		if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
			_exit(6);
		outstanding--;
	}
}

static pid_t spawn_peer(DAT_CONN_QUAL port, const char *mode)
{
	char self[PATH_MAX], ports[16];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	pid_t pid;

	assert_true(sl > 0);
	self[sl] = '\0';
	snprintf(ports, sizeof(ports), "%u", (unsigned)port);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *argv[] = { self, (char *)"--peer-child", ports, (char *)mode, NULL };
		int devnull = open("/dev/null", O_WRONLY);

		if (devnull >= 0)
			dup2(devnull, 1);	/* keep the TAP stream clean */
		execve(self, argv, environ);
		_exit(127);
	}
	return pid;
}

/* waitpid with a bound; SIGKILL after it. Returns the status. */
static int reap_within(pid_t pid, unsigned ms)
{
	uint64_t t0 = now_ns();
	int status = 0;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			return status;
		if (r < 0 && errno != EINTR)
			return -1;
		if (ms_since(t0) > ms) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			return -2;
		}
		sleep_ms(5);
	}
}

struct sink {
	int posted;		/* receives outstanding */
	uint32_t ok, flushed, other;
	uint32_t next_seq;
	bool conn_end;
	DAT_EVENT_NUMBER conn_ev;
	DAT_EP_HANDLE conn_ep;
	bool in_order;
};

/* Drain the server's receive and connection EVDs once (non-blocking);
 * repost = keep `posted` receives outstanding. */
static bool sink_poll(struct side *s, struct sink *k, bool repost)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	bool moved = false;

	while (dat_evd_dequeue(s->rcv, &ev) == DAT_SUCCESS) {
		moved = true;
		k->posted--;
		if (ev.event_number != DAT_DTO_COMPLETION_EVENT || d->ep_handle != s->ep) {
			k->other++;
			continue;
		}
		if (d->status == DAT_DTO_SUCCESS) {
			uint64_t seq;

			memcpy(&seq, s->buf + 64 * (d->user_cookie.as_64 % 64), sizeof(seq));
			if (seq != k->next_seq || d->transfered_length != 64)
				k->in_order = false;
			k->next_seq++;
			k->ok++;
			if (repost && post_recv1(s, 64 * (d->user_cookie.as_64 % 64), 64,
						 d->user_cookie.as_64) == DAT_SUCCESS)
				k->posted++;
		} else if (d->status == DAT_DTO_ERR_FLUSHED) {
			k->flushed++;
		} else {
			k->other++;
		}
	}
	while (dat_evd_dequeue(s->conn, &ev) == DAT_SUCCESS) {
		moved = true;
		if (!k->conn_end) {
			k->conn_ev = ev.event_number;
			k->conn_ep = ev.event_data.connect_event_data.ep_handle;
		}
		k->conn_end = true;
	}
	return moved;
}

static void peer_dies(struct pair *p, const char *mode)
{
	struct sink k = { .in_order = true };
	uint64_t t0, tdead;
	pid_t pid;
	DAT_CR_HANDLE cr;
	int status;

	for (int i = 0; i < 32; i++)
		assert_ok(post_recv1(&p->s, 64 * (size_t)i, 64, (uint64_t)i));
	k.posted = 32;
	pid = spawn_peer(p->port, mode);
	cr = wait_cr(&p->s, p->psp, p->port);
	assert_ok(dat_cr_accept(cr, p->s.ep, 0, NULL));
	expect_conn(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->s.ep, 5000, "server", NULL);
	t0 = now_ns();
	if (strcmp(mode, "exit") == 0) {
		status = reap_within(pid, 10000);
		if (status < 0)
			fail_msg("peer did not exit within 10 s");
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("peer failed before it could exit mid-stream (status 0x%x)", status);
	} else {
		/* receive a good part of the stream, then kill the sender */
		while (k.ok < 2000 && !k.conn_end && ms_since(t0) < 10000)
			if (!sink_poll(&p->s, &k, true))
				sleep_ms(1);
		if (k.ok < 2000)
			fail_msg("stream from the peer: only %u messages in 10 s%s", k.ok,
				 k.conn_end ? " (the connection ended early)" : "");
		kill(pid, SIGKILL);
		status = reap_within(pid, 5000);
		assert_true(status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	}
	tdead = now_ns();
	/* the connection event, then every posted receive back */
	while (!k.conn_end && ms_since(tdead) < 5000)
		if (!sink_poll(&p->s, &k, false))
			sleep_ms(1);
	if (!k.conn_end)
		fail_msg("peer %s: no DISCONNECTED or BROKEN on the server's connection EVD within "
			 "5 s (%u received, %d receives still posted, EP state %d)",
			 strcmp(mode, "exit") == 0 ? "exited" : "SIGKILLed", k.ok, k.posted,
			 (int)ep_state(p->s.ep));
	print_message("# peer %s: %s after %u ms, %u messages received\n", mode,
		      ev_name(k.conn_ev), ms_since(tdead), k.ok);
	if (!is_conn_end(k.conn_ev))
		fail_msg("peer died: the server got %s, expected DISCONNECTED or BROKEN",
			 ev_name(k.conn_ev));
	assert_ptr_equal(k.conn_ep, p->s.ep);
	while (k.posted > 0 && ms_since(tdead) < 10000)
		if (!sink_poll(&p->s, &k, false))
			sleep_ms(1);
	if (k.posted > 0)
		fail_msg("peer died: %d posted receives never came back (%u ok, %u flushed) within "
			 "5 s of %s", k.posted, k.ok, k.flushed, ev_name(k.conn_ev));
	if (k.other)
		fail_msg("peer died: %u receive completions with a status other than SUCCESS or "
			 "FLUSHED (or a wrong EP)", k.other);
	assert_true(k.in_order);
	assert_true(k.flushed > 0);
	if (strcmp(mode, "exit") == 0)
		assert_true(k.ok >= 8 && k.ok <= 16);
	assert_int_equal(ep_state(p->s.ep), DAT_EP_STATE_DISCONNECTED);
}

static void test_peer_exits_mid_stream(void **state)
{
	watchdog(__func__, 60);
	peer_dies(*state, "exit");
	alarm(0);
}

static void test_peer_sigkilled_mid_stream(void **state)
{
	watchdog(__func__, 60);
	peer_dies(*state, "stream");
	alarm(0);
}

/* ================================= 6. EP freed with completions pending */

static void test_ep_free_with_completions_pending(void **state)
{
	struct pair *p = *state;
	DAT_EP_HANDLE old;
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	int nrcv = 0, nreq = 0;
	bool seen[16] = { false };
	uint64_t t0;

	watchdog(__func__, 60);
	for (int i = 0; i < 8; i++)
		assert_ok(post_recv1(&p->s, 64 * (size_t)i, 64, 100 + (uint64_t)i));
	for (int i = 0; i < 4; i++)
		assert_ok(post_recv1(&p->c, 64 * (size_t)i, 64, 200 + (uint64_t)i));
	establish(p);
	for (int i = 0; i < 4; i++)
		assert_ok(post_send1(&p->c, 1024 + 64 * (size_t)i, 32, (uint64_t)i,
				     DAT_COMPLETION_DEFAULT_FLAG));
	for (int i = 0; i < 4; i++)
		expect_dto(p->c.req, p->c.ep, (uint64_t)i, DAT_DTO_SEND, DAT_DTO_SUCCESS, 32, 2000,
			   "client send");
	for (int i = 0; i < 2; i++)	/* and two sends from the server */
		assert_ok(post_send1(&p->s, 2048, 16, 300 + (uint64_t)i, DAT_COMPLETION_DEFAULT_FLAG));
	for (int i = 0; i < 2; i++)
		expect_dto(p->c.rcv, p->c.ep, 200 + (uint64_t)i, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 16,
			   2000, "client receive");
	sleep_ms(100);		/* the server's completions are in its CQ or EVD now */

	old = p->s.ep;
	assert_ok(dat_ep_free(p->s.ep));
	p->s.ep = DAT_HANDLE_NULL;
	assert_err(dat_ep_get_status(old, NULL, NULL, NULL), DAT_INVALID_HANDLE);

	/* whatever comes back must be well-formed: the server's own cookies,
	 * each once, receives with SUCCESS (32 bytes) or FLUSHED */
	t0 = now_ns();
	while (ms_since(t0) < 1000) {
		DAT_RETURN rc = dat_evd_dequeue(p->s.rcv, &ev);

		if (rc != DAT_SUCCESS) {
			assert_rc(rc, DAT_QUEUE_EMPTY);
			sleep_ms(5);
			continue;
		}
		if (ev.event_number != DAT_DTO_COMPLETION_EVENT || d->operation != DAT_DTO_RECEIVE ||
		    d->user_cookie.as_64 < 100 || d->user_cookie.as_64 >= 108 ||
		    seen[d->user_cookie.as_64 - 100] ||
		    (d->ep_handle != old && d->ep_handle != DAT_HANDLE_NULL))
			fail_msg("receive EVD of a freed EP: %s, op %d, cookie %llu, ep %p (freed %p)",
				 ev_name(ev.event_number), (int)d->operation,
				 (unsigned long long)d->user_cookie.as_64, (void *)d->ep_handle,
				 (void *)old);
		if (d->status == DAT_DTO_SUCCESS)
			assert_int_equal(d->transfered_length, 32);
		else if (d->status != DAT_DTO_ERR_FLUSHED)
			fail_msg("receive %llu of a freed EP came back with %s",
				 (unsigned long long)d->user_cookie.as_64, status_name(d->status));
		seen[d->user_cookie.as_64 - 100] = true;
		nrcv++;
	}
	while (dat_evd_dequeue(p->s.req, &ev) == DAT_SUCCESS) {
		if (ev.event_number != DAT_DTO_COMPLETION_EVENT || d->operation != DAT_DTO_SEND ||
		    d->user_cookie.as_64 < 300 || d->user_cookie.as_64 >= 302)
			fail_msg("request EVD of a freed EP: %s, op %d, cookie %llu",
				 ev_name(ev.event_number), (int)d->operation,
				 (unsigned long long)d->user_cookie.as_64);
		nreq++;
	}
	print_message("# after dat_ep_free: %d receive and %d send events naming the freed EP\n",
		      nrcv, nreq);
	assert_true(nrcv <= 8 && nreq <= 2);
	assert_rc(dat_evd_dequeue(p->s.rcv, &ev), DAT_QUEUE_EMPTY);
	/* the peer learns that the connection is gone */
	t0 = now_ns();
	{
		char b[160];
		DAT_RETURN rc = wait_ev(p->c.conn, 5000, &ev);

		if (rc != DAT_SUCCESS)
			fail_msg("client: its peer EP was freed while connected, but no DISCONNECTED or "
				 "BROKEN arrived within 5 s (dat_evd_wait: %s)", rc_name(rc, b, sizeof(b)));
		if (!is_conn_end(ev.event_number) ||
		    ev.event_data.connect_event_data.ep_handle != p->c.ep)
			fail_msg("client: peer EP freed: got %s naming %p, expected DISCONNECTED or "
				 "BROKEN naming %p", ev_name(ev.event_number),
				 (void *)ev.event_data.connect_event_data.ep_handle, (void *)p->c.ep);
		print_message("# client: %s %u ms after the peer's dat_ep_free\n",
			      ev_name(ev.event_number), ms_since(t0));
	}
	/* the server's EVDs are free of the EP */
	assert_ok(dat_evd_free(p->s.rcv));
	assert_ok(dat_evd_free(p->s.req));
	alarm(0);
}

/* ==================================== sends on a disconnected endpoint */

/* After a disconnect (own or the peer's), a send is refused with
 * DAT_INVALID_STATE or flushed at once; a receive is flushed or refused. */
static void test_send_after_disconnect(void **state)
{
	struct pair *p = *state;

	watchdog(__func__, 60);
	establish(p);
	assert_ok(dat_ep_disconnect(p->c.ep, DAT_CLOSE_GRACEFUL_FLAG));
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->c.ep, 2000, "client", NULL);
	expect_conn(p->s.conn, DAT_CONNECTION_EVENT_DISCONNECTED, p->s.ep, 2000, "server", NULL);
	expect_send_disconnected(&p->c, "client after its own disconnect");
	expect_send_disconnected(&p->s, "server after the peer's disconnect");
	alarm(0);
}

/* After PEER_REJECTED (no listener), the same; then reset and connect. */
static void test_send_after_peer_rejected(void **state)
{
	struct pair *p = *state;
	DAT_CONN_QUAL dead = dead_port(&p->s);

	watchdog(__func__, 60);
	assert_ok(connect_to(p->c.ep, dead, NULL, 0));
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_PEER_REJECTED, p->c.ep, 2000, "client", NULL);
	expect_send_disconnected(&p->c, "client after PEER_REJECTED");
	assert_ok(dat_ep_reset(p->c.ep));
	establish(p);
	alarm(0);
}

/* ================================================================ 7. RSP */

static void test_rsp_accept_with_null_ep(void **state)
{
	struct pair *p = *state;
	DAT_CONN_QUAL port;
	DAT_RSP_HANDLE rsp;
	DAT_RSP_PARAM rp;
	DAT_CR_HANDLE cr;
	DAT_CR_PARAM crp;

	watchdog(__func__, 60);
	assert_ok(dat_psp_free(p->psp));	/* the RSP takes its port */
	p->psp = DAT_HANDLE_NULL;
	port = p->port;
	assert_ok(dat_rsp_create(p->s.ia, port, p->s.ep, p->s.cr, &rsp));
	assert_int_equal(ep_state(p->s.ep), DAT_EP_STATE_RESERVED);
	memset(&rp, 0, sizeof(rp));
	assert_ok(dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, &rp));
	assert_int_equal(rp.conn_qual, port);
	assert_ptr_equal(rp.ep_handle, p->s.ep);
	assert_ptr_equal(rp.evd_handle, p->s.cr);

	assert_ok(post_recv1(&p->s, 0, 64, 0x51));
	assert_ok(connect_to(p->c.ep, port, NULL, 0));
	cr = wait_cr(&p->s, rsp, port);
	memset(&crp, 0, sizeof(crp));
	assert_ok(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp));
	assert_ptr_equal(crp.local_ep_handle, p->s.ep);
	assert_ok(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL));
	expect_conn(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->s.ep, 5000, "server", NULL);
	expect_conn(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, p->c.ep, 5000, "client", NULL);
	assert_int_equal(ep_state(p->s.ep), DAT_EP_STATE_CONNECTED);
	fill(p->c.buf, 48, 5);
	assert_ok(post_send1(&p->c, 0, 48, 0x52, DAT_COMPLETION_DEFAULT_FLAG));
	expect_dto(p->s.rcv, p->s.ep, 0x51, DAT_DTO_RECEIVE, DAT_DTO_SUCCESS, 48, 2000,
		   "server receive on the RSP's EP");
	expect_dto(p->c.req, p->c.ep, 0x52, DAT_DTO_SEND, DAT_DTO_SUCCESS, 48, 2000,
		   "client send");
	assert_memory_equal(p->s.buf, p->c.buf, 48);
	assert_ok(dat_rsp_free(rsp));
	assert_int_equal(ep_state(p->s.ep), DAT_EP_STATE_CONNECTED);	/* unaffected */
	alarm(0);
}

/* ================================================= 8. wrong rmr_context */

static void test_rdma_write_bad_rmr_context(void **state)
{
	struct pair *p = *state;
	DAT_LMR_TRIPLET t;
	DAT_RMR_TRIPLET r;
	bool c_done = false, s_done = false;
	char c_seen[256] = "", s_seen[256] = "";
	uint64_t t0;

	watchdog(__func__, 60);
	establish(p);
	for (int i = 0; i < 2; i++)
		assert_ok(post_recv1(&p->s, 8192 + 64 * (size_t)i, 64, 0x70 + (uint64_t)i));
	memset(p->s.buf, 0x11, 8192);
	fill(p->c.buf, 4096, 9);
	t = seg(&p->c, 0, 4096);
	r = rseg(&p->s, 0, 4096);
	r.rmr_context ^= 0x5a5a0000u;
	if (r.rmr_context == p->s.rctx || r.rmr_context == p->c.rctx)
		r.rmr_context = ~p->s.rctx;
	assert_ok(dat_ep_post_rdma_write(p->c.ep, 1, &t, ck(0xbad), &r,
					 DAT_COMPLETION_DEFAULT_FLAG));
	t0 = now_ns();
	while ((!c_done || !s_done) && ms_since(t0) < 5000) {
		DAT_EVENT ev;
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		bool moved = false;

		if (dat_evd_dequeue(p->c.req, &ev) == DAT_SUCCESS) {
			moved = true;
			snprintf(c_seen + strlen(c_seen), sizeof(c_seen) - strlen(c_seen),
				 " write:%s", status_name(d->status));
			assert_int_equal(d->user_cookie.as_64, 0xbad);
			if (d->status != DAT_DTO_SUCCESS)
				c_done = true;
			else
				print_message("# note: the RDMA write with a wrong rmr_context (0x%x, the "
					      "LMR's is 0x%x) completed with DAT_DTO_SUCCESS\n",
					      (unsigned)r.rmr_context, (unsigned)p->s.rctx);
		}
		if (dat_evd_dequeue(p->c.conn, &ev) == DAT_SUCCESS) {
			moved = true;
			snprintf(c_seen + strlen(c_seen), sizeof(c_seen) - strlen(c_seen), " %s",
				 ev_name(ev.event_number));
			if (is_conn_end(ev.event_number))
				c_done = true;
		}
		if (dat_evd_dequeue(p->s.rcv, &ev) == DAT_SUCCESS) {
			moved = true;
			snprintf(s_seen + strlen(s_seen), sizeof(s_seen) - strlen(s_seen),
				 " recv:%s", status_name(d->status));
			if (d->status != DAT_DTO_SUCCESS)
				s_done = true;
		}
		if (dat_evd_dequeue(p->s.conn, &ev) == DAT_SUCCESS) {
			moved = true;
			snprintf(s_seen + strlen(s_seen), sizeof(s_seen) - strlen(s_seen), " %s",
				 ev_name(ev.event_number));
			if (is_conn_end(ev.event_number))
				s_done = true;
		}
		if (!moved)
			sleep_ms(2);
	}
	print_message("# bad rmr_context after %u ms: client saw [%s ], server saw [%s ]\n",
		      ms_since(t0), c_seen, s_seen);
	if (!c_done || !s_done)
		fail_msg("RDMA write with a wrong rmr_context: within 5 s the %s%s%s saw neither a DTO "
			 "error nor a BROKEN/DISCONNECTED connection event (client saw [%s ], server "
			 "saw [%s ]); the provider does not detect that libfabric tcp dropped the "
			 "connection", !c_done ? "client" : "", !c_done && !s_done ? " and the " : "",
			 !s_done ? "server" : "", c_seen, s_seen);
	for (size_t i = 0; i < 8192; i++)
		if (p->s.buf[i] != 0x11)
			fail_msg("the write with a wrong rmr_context modified the server's memory");
	alarm(0);
}

/* RMRs are emulated with a registration per bind: the bind completes on
 * the EP's request EVD with the cookie, the peer's RDMA write through the
 * returned rmr_context lands in exactly the bound range, a range outside
 * the LMR is refused, and an unbind completes too. */
static void test_rmr_bind_emulated(void **state)
{
	struct pair *p = *state;
	DAT_RMR_HANDLE rmr;
	DAT_RMR_CONTEXT rctx = 0;
	DAT_RMR_COOKIE cookie;
	DAT_LMR_TRIPLET t, iov;
	DAT_RMR_TRIPLET r;
	DAT_RMR_PARAM rp;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	watchdog(__func__, 60);
	establish(p);
	memset(&cookie, 0, sizeof(cookie));
	cookie.as_64 = 0x77;
	assert_ok(dat_rmr_create(p->s.pz, &rmr));
	t = seg(&p->s, 4096, 8192);
	assert_ok(dat_rmr_bind(rmr, p->s.lmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
			       p->s.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, &rctx));
	assert_ok(dat_evd_wait(p->s.req, 2 * SEC, 1, &ev, &nmore));
	assert_int_equal(ev.event_number, DAT_RMR_BIND_COMPLETION_EVENT);
	assert_ptr_equal(ev.event_data.rmr_completion_event_data.rmr_handle, rmr);
	assert_int_equal(ev.event_data.rmr_completion_event_data.user_cookie.as_64, 0x77);
	assert_int_equal(ev.event_data.rmr_completion_event_data.status, DAT_RMR_BIND_SUCCESS);
	assert_ok(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &rp));
	assert_int_equal(rp.rmr_context, rctx);
	assert_int_equal(rp.lmr_triplet.virtual_address, t.virtual_address);
	assert_int_equal(rp.lmr_triplet.segment_length, 8192);

	/* the client writes through the RMR */
	memset(p->s.buf, 0xab, 3 * 4096 + 8192);
	fill(p->c.buf, 8192, 51);
	iov = seg(&p->c, 0, 8192);
	r.rmr_context = rctx;
	r.virtual_address = t.virtual_address;
	r.segment_length = 8192;
	assert_ok(dat_ep_post_rdma_write(p->c.ep, 1, &iov, ck(0xc3), &r,
					 DAT_COMPLETION_DEFAULT_FLAG));
	expect_dto(p->c.req, p->c.ep, 0xc3, DAT_DTO_RDMA_WRITE, DAT_DTO_SUCCESS, 8192, 2000,
		   "client RDMA write through an RMR");
	if (!lands_within(p->s.buf + 4096, p->c.buf, 8192, 2000))
		fail_msg("RDMA write through the RMR's context did not land in the bound range");
	assert_int_equal(p->s.buf[4095], 0xab);
	assert_int_equal(p->s.buf[4096 + 8192], 0xab);

	/* outside the LMR: refused, nothing posted */
	t = seg(&p->s, 0, 8192);
	t.virtual_address -= 4096;
	assert_err(dat_rmr_bind(rmr, p->s.lmr, &t, DAT_MEM_PRIV_REMOTE_WRITE_FLAG,
				DAT_VA_TYPE_VA, p->s.ep, cookie, DAT_COMPLETION_DEFAULT_FLAG, &rctx),
		   DAT_LENGTH_ERROR);
	/* unbind */
	assert_ok(dat_rmr_bind(rmr, DAT_HANDLE_NULL, NULL, 0, DAT_VA_TYPE_VA, p->s.ep, cookie,
			       DAT_COMPLETION_DEFAULT_FLAG, &rctx));
	assert_ok(dat_evd_wait(p->s.req, 2 * SEC, 1, &ev, &nmore));
	assert_int_equal(ev.event_number, DAT_RMR_BIND_COMPLETION_EVENT);
	assert_ok(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &rp));
	assert_int_equal(rp.lmr_triplet.segment_length, 0);
	assert_ok(dat_rmr_free(rmr));
	assert_err(dat_rmr_free(rmr), DAT_INVALID_HANDLE);
	alarm(0);
}

/* ================================================================= main */

#define TP(name) cmocka_unit_test_setup_teardown(name, pair_setup, pair_teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		/* 1. connect, accept, reject, reset */
		TP(test_connect_accept_pdata),
		TP(test_reject_then_reset_reconnect),
		TP(test_no_listener_then_reset_reconnect),
		/* 2. data */
		TP(test_send_recv_segments),
		TP(test_rdma_write_read),
		TP(test_rdma_write_then_send_ordering),
		TP(test_suppressed_send),
		TP(test_request_queue_full),
		/* 3. stream */
		TP(test_stream_100k_in_order),
		/* 4. disconnect */
		TP(test_disconnect_flushes),
		/* 5. peer death */
		TP(test_peer_exits_mid_stream),
		TP(test_peer_sigkilled_mid_stream),
		/* 6. EP freed with completions due */
		TP(test_ep_free_with_completions_pending),
		/* 7. RSP */
		TP(test_rsp_accept_with_null_ep),
		/* RMR (emulated) */
		TP(test_rmr_bind_emulated),
		/* 8. bad rmr_context */
		TP(test_rdma_write_bad_rmr_context),
		/* sends on a disconnected EP (last: a crash there takes the run) */
		TP(test_send_after_disconnect),
		TP(test_send_after_peer_rejected),
	};
	struct sigaction sa;

	if (argc == 4 && strcmp(argv[1], "--peer-child") == 0)
		return peer_child_main(argv[2], argv[3]);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = wd_fire;
	sigaction(SIGALRM, &sa, NULL);
	default_dat_override();
	if (argc == 2)
		cmocka_set_test_filter(argv[1]);	/* run the tests matching a pattern */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
