/*
 * dapl-ofi integration test: resource exhaustion (issue 29, item 4).  Each
 * case runs something out - open files, registrable memory, an EVD's
 * queue, an EP's request queue, endpoints - asserts the exact DAT return
 * that names what ran out, then that the IA still works: a fresh EP pair
 * connects and moves a message, checked byte for byte.  Through the stock
 * registry (libdat2) on the build tree's "ofi-lo" (tcp on 127.0.0.1).
 *
 * Time: a few seconds in all, plain and ASan; the EP flood is bounded by
 * lowering the open-file limit first (see test_ep_flood).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <dat2/udat.h>

#include "dat_test.h"

#define IA_NAME		(getenv("DFI_TEST_IA") ? getenv("DFI_TEST_IA") : "ofi-lo")
#define ASYNC_QLEN	8
#define MS		1000u			/* DAT_TIMEOUT is in microseconds */
#define BUF_LEN		(64u * 1024u)
#define MSG_LEN		1000u
#define DTO_QLEN	64

/* ------------------------------------------------------------------ sides */

struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	uint8_t *buf;
};

struct pair {
	struct side s, c;
	struct rlimit nofile, memlock;	/* as they were: teardown puts them back */
};

static void capture_abort(void);
static void hog_abort(void);

static DAT_DTO_COOKIE ck(uint64_t v)
{
	DAT_DTO_COOKIE c;

	memset(&c, 0, sizeof(c));
	c.as_64 = v;
	return c;
}

static DAT_EP_ATTR ep_attr(DAT_COUNT req_dtos, DAT_COUNT recv_dtos)
{
	DAT_EP_ATTR a;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = req_dtos;
	a.max_recv_dtos = recv_dtos;
	a.max_request_iov = 1;
	a.max_recv_iov = 1;
	a.max_rdma_read_iov = 1;
	a.max_rdma_write_iov = 1;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	return a;
}

static DAT_RETURN side_open(struct side *x)
{
	char name[DAT_NAME_MAX_LENGTH];
	DAT_REGION_DESCRIPTION region;
	DAT_RMR_CONTEXT rctx;
	DAT_VLEN reg_len;
	DAT_VADDR reg_addr;
	DAT_RETURN rc;

	memset(x, 0, sizeof(*x));
	if (!(x->buf = aligned_alloc(4096, BUF_LEN)))
		return ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	memset(x->buf, 0, BUF_LEN);
	snprintf(name, sizeof(name), "%s", IA_NAME);
	if ((rc = dat_ia_open(name, ASYNC_QLEN, &x->async, &x->ia)) != DAT_SUCCESS) {
		x->ia = DAT_HANDLE_NULL;
		return rc;
	}
	if ((rc = dat_pz_create(x->ia, &x->pz)) != DAT_SUCCESS)
		return rc;
	memset(&region, 0, sizeof(region));
	region.for_va = x->buf;
	if ((rc = dat_lmr_create(x->ia, DAT_MEM_TYPE_VIRTUAL, region, BUF_LEN, x->pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &x->lmr, &x->lctx, &rctx,
				 &reg_len, &reg_addr)) != DAT_SUCCESS)
		return rc;
	if ((rc = dat_evd_create(x->ia, DTO_QLEN, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->req)) ||
	    (rc = dat_evd_create(x->ia, DTO_QLEN, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->rcv)) ||
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

static int pair_setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	char b[160];
	DAT_RETURN rc;

	if (!p)
		return -1;
	getrlimit(RLIMIT_NOFILE, &p->nofile);
	getrlimit(RLIMIT_MEMLOCK, &p->memlock);
	watchdog("pair_setup", 30);
	if ((rc = side_open(&p->s)) != DAT_SUCCESS || (rc = side_open(&p->c)) != DAT_SUCCESS) {
		print_error("setup: opening two '%s' IAs failed: %s (DAT_OVERRIDE=%s)\n", IA_NAME,
			    rc_name(rc, b, sizeof(b)),
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

	/* what a failed test left: stderr captured, descriptors taken,
	 * limits lowered */
	capture_abort();
	hog_abort();
	setrlimit(RLIMIT_NOFILE, &p->nofile);
	setrlimit(RLIMIT_MEMLOCK, &p->memlock);
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

static void check_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, unsigned ms, const char *what,
			DAT_EVENT *out, const char *file, int line)
{
	DAT_EVENT ev;
	char b[160];
	DAT_RETURN rc = wait_ev(evd, ms, &ev);

	if (rc != DAT_SUCCESS) {
		print_error("%s: no event within %u ms (dat_evd_wait: %s); expected 0x%x\n", what,
			    ms, rc_name(rc, b, sizeof(b)), (unsigned)want);
		_fail(file, line);
	}
	if (ev.event_number != want) {
		print_error("%s: got event 0x%x, expected 0x%x\n", what,
			    (unsigned)ev.event_number, (unsigned)want);
		_fail(file, line);
	}
	if (out)
		*out = ev;
}

#define expect_event(evd, want, ms, what, out) \
	check_event(evd, want, ms, what, out, __FILE__, __LINE__)

static void check_dto(DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep, uint64_t cookie,
		      DAT_SEG_LENGTH len, const char *what, const char *file, int line)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

	check_event(evd, DAT_DTO_COMPLETION_EVENT, 5000, what, &ev, file, line);
	if (d->ep_handle != ep || d->user_cookie.as_64 != cookie || d->status != DAT_DTO_SUCCESS ||
	    d->transfered_length != len) {
		print_error("%s: completion {ep %p, cookie %llu, status %d, length %u}, expected "
			    "{ep %p, cookie %llu, success, length %u}\n", what,
			    (void *)d->ep_handle, (unsigned long long)d->user_cookie.as_64,
			    (int)d->status, (unsigned)d->transfered_length, (void *)ep,
			    (unsigned long long)cookie, (unsigned)len);
		_fail(file, line);
	}
}

#define expect_dto(evd, ep, cookie, len, what) \
	check_dto(evd, ep, cookie, len, what, __FILE__, __LINE__)

static void expect_no_event(DAT_EVD_HANDLE evd, const char *what)
{
	DAT_EVENT ev;
	DAT_RETURN rc = dat_evd_dequeue(evd, &ev);

	if (rc == DAT_SUCCESS)
		fail_msg("%s: unexpected event 0x%x", what, (unsigned)ev.event_number);
	assert_rc(rc, DAT_QUEUE_EMPTY);	/* a status, without the error class bit */
}

/* ------------------------------------------------------------ connections */

static DAT_RETURN connect_to(DAT_EP_HANDLE ep, DAT_CONN_QUAL port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&a, port, 5000 * MS, 0, NULL,
			      DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
}

static DAT_CR_HANDLE wait_cr(struct side *s)
{
	DAT_EVENT ev;

	expect_event(s->cr, DAT_CONNECTION_REQUEST_EVENT, 5000, "server CR EVD", &ev);
	assert_non_null(ev.event_data.cr_arrival_event_data.cr_handle);
	return ev.event_data.cr_arrival_event_data.cr_handle;
}

static DAT_LMR_TRIPLET seg(const struct side *x, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t;

	memset(&t, 0, sizeof(t));
	t.virtual_address = (DAT_VADDR)(uintptr_t)(x->buf + off);
	t.segment_length = (DAT_SEG_LENGTH)len;
	t.lmr_context = x->lctx;
	return t;
}

static DAT_RETURN post_send1(const struct side *x, DAT_EP_HANDLE ep, size_t off, uint64_t cookie)
{
	DAT_LMR_TRIPLET t = seg(x, off, MSG_LEN);

	return dat_ep_post_send(ep, 1, &t, ck(cookie), DAT_COMPLETION_DEFAULT_FLAG);
}

static DAT_RETURN post_recv1(const struct side *x, DAT_EP_HANDLE ep, size_t off, uint64_t cookie)
{
	DAT_LMR_TRIPLET t = seg(x, off, MSG_LEN);

	return dat_ep_post_recv(ep, 1, &t, ck(cookie), DAT_COMPLETION_DEFAULT_FLAG);
}

static DAT_CONN_QUAL listen_any(struct side *s, DAT_PSP_HANDLE *psp)
{
	DAT_CONN_QUAL port = 0;

	assert_ok(dat_psp_create_any(s->ia, &port, s->cr, DAT_PSP_CONSUMER_FLAG, psp));
	return port;
}

/* A connected EP pair: server EP *sep, client EP *cep, each with the given
 * queue sizes, through a PSP of its own. */
static void connect_pair(struct pair *p, DAT_COUNT dtos, DAT_EP_HANDLE *sep, DAT_EP_HANDLE *cep)
{
	DAT_EP_ATTR a = ep_attr(dtos, dtos);
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port = listen_any(&p->s, &psp);
	DAT_CR_HANDLE cr;

	assert_ok(dat_ep_create(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, &a, sep));
	assert_ok(dat_ep_create(p->c.ia, p->c.pz, p->c.rcv, p->c.req, p->c.conn, &a, cep));
	assert_ok(connect_to(*cep, port));
	cr = wait_cr(&p->s);
	assert_ok(dat_cr_accept(cr, *sep, 0, NULL));
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, 5000, "server conn EVD", NULL);
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, 5000, "client conn EVD", NULL);
	assert_ok(dat_psp_free(psp));
}

static void disconnect_free(struct pair *p, DAT_EP_HANDLE sep, DAT_EP_HANDLE cep)
{
	assert_ok(dat_ep_disconnect(cep, DAT_CLOSE_GRACEFUL_FLAG));
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_DISCONNECTED, 5000, "client disconnect", NULL);
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_DISCONNECTED, 5000, "server disconnect", NULL);
	assert_ok(dat_ep_free(cep));
	assert_ok(dat_ep_free(sep));
}

/* The IA pair still works: a fresh EP pair connects, a message goes from
 * client to server intact, and both EPs go again. */
static void check_usable(struct pair *p, unsigned seed)
{
	DAT_EP_HANDLE sep, cep;

	for (unsigned i = 0; i < MSG_LEN; i++)
		p->c.buf[i] = (uint8_t)(i * 7u + seed);
	memset(p->s.buf, 0, MSG_LEN);
	connect_pair(p, 4, &sep, &cep);
	assert_ok(post_recv1(&p->s, sep, 0, 1));
	assert_ok(post_send1(&p->c, cep, 0, 2));
	expect_dto(p->c.req, cep, 2, MSG_LEN, "usable: client send");
	expect_dto(p->s.rcv, sep, 1, MSG_LEN, "usable: server receive");
	assert_memory_equal(p->s.buf, p->c.buf, MSG_LEN);
	disconnect_free(p, sep, cep);
	expect_no_event(p->s.async, "server async EVD");
	expect_no_event(p->c.async, "client async EVD");
}

/* ========================================= 1. open files run out (EMFILE) */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* the DIR's own */
}

/* Every descriptor up to a lowered soft RLIMIT_NOFILE taken by dups of
 * /dev/null, `leave` of them given back; fds_restore undoes it. */
struct hog {
	struct rlimit old;
	int fds[4096];
	int n;
};

static struct hog *hog_active;

static void fds_exhaust(struct hog *h, int leave)
{
	struct rlimit rl;
	int base = open("/dev/null", O_RDONLY | O_CLOEXEC), top = base;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	assert_true(base >= 0 && d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && atoi(e->d_name) > top)
			top = atoi(e->d_name);
	closedir(d);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &h->old), 0);
	rl = h->old;
	rl.rlim_cur = (rlim_t)top + 256;	/* bounded: the holes below top, and 256 */
	assert_true(rl.rlim_cur <= h->old.rlim_cur);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	h->n = 0;
	h->fds[h->n++] = base;
	hog_active = h;
	while (h->n < (int)(sizeof(h->fds) / sizeof(h->fds[0]))) {
		int fd = dup(base);

		if (fd < 0) {
			assert_int_equal(errno, EMFILE);
			break;
		}
		h->fds[h->n++] = fd;
	}
	assert_true(h->n < (int)(sizeof(h->fds) / sizeof(h->fds[0])));
	while (leave-- > 0 && h->n > 1)
		close(h->fds[--h->n]);
}

static void fds_restore(struct hog *h)
{
	while (h->n > 0)
		close(h->fds[--h->n]);
	hog_active = NULL;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &h->old), 0);
}

static void hog_abort(void)
{
	if (hog_active)
		fds_restore(hog_active);
}

/* stderr (where the library logs) into a file for a while, to read back
 * what it said. */
struct capture {
	int saved;
	FILE *f;
};

static struct capture *capture_active;

static void capture_start(struct capture *c)
{
	fflush(stderr);
	c->f = tmpfile();
	assert_non_null(c->f);
	c->saved = dup(2);
	assert_true(c->saved >= 0);
	assert_true(dup2(fileno(c->f), 2) == 2);
	capture_active = c;
}

/* What the last capture held (its first 64 KiB). */
static char captured[64 * 1024];

/* Stop capturing; true when the capture holds `needle`.  What was captured
 * goes to the real stderr too, for the test log. */
static bool capture_stop(struct capture *c, const char *needle)
{
	size_t n;

	fflush(stderr);
	dup2(c->saved, 2);
	close(c->saved);
	capture_active = NULL;
	rewind(c->f);
	n = fread(captured, 1, sizeof(captured) - 1, c->f);
	captured[n] = '\0';
	fclose(c->f);
	fputs(captured, stderr);
	return strstr(captured, needle) != NULL;
}

static void capture_abort(void)
{
	if (capture_active)
		capture_stop(capture_active, "");
}

static void test_fds_run_out(void **state)
{
	struct pair *p = *state;
	DAT_EVD_HANDLE evd, async = DAT_HANDLE_NULL;
	DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
	DAT_EP_HANDLE sep, cep, ep;
	DAT_EP_ATTR a = ep_attr(4, 4);
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	/* static: a failed assertion leaves this frame, and the teardown
	 * puts back what they hold */
	static struct capture cap;
	static struct hog h;
	char name[DAT_NAME_MAX_LENGTH];
	int fds0;

	watchdog(__func__, 60);
	check_usable(p, 1);		/* both IAs' threads and CQs are up */
	fds0 = count_fds();

	/* dat_ia_open: the fabric's descriptors */
	snprintf(name, sizeof(name), "%s", IA_NAME);
	capture_start(&cap);
	fds_exhaust(&h, 0);
	assert_rc(dat_ia_open(name, ASYNC_QLEN, &async, &ia),
		  ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE));
	fds_restore(&h);
	if (!capture_stop(&cap, "no file descriptor left"))
		fail_msg("dat_ia_open with no descriptor left logged no line saying so");
	assert_int_equal(count_fds(), fds0);

	/* dat_evd_create needs no descriptor; its first dat_evd_wait does
	 * (an eventfd to be woken by) */
	capture_start(&cap);
	fds_exhaust(&h, 0);
	assert_ok(dat_evd_create(p->c.ia, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &evd));
	assert_rc(dat_evd_wait(evd, 1000, 1, &ev, &nmore),
		  ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD));
	fds_restore(&h);
	if (!capture_stop(&cap, "no file descriptor left"))
		fail_msg("dat_evd_wait with no descriptor left logged no line saying so");
	assert_err(dat_evd_wait(evd, 1000, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
	assert_ok(dat_evd_free(evd));

	/* a listener's socket */
	capture_start(&cap);
	fds_exhaust(&h, 0);
	psp = DAT_HANDLE_NULL;
	port = 0;
	assert_rc(dat_psp_create_any(p->s.ia, &port, p->s.cr, DAT_PSP_CONSUMER_FLAG, &psp),
		  ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	fds_restore(&h);
	if (!capture_stop(&cap, "no file descriptor left"))
		fail_msg("dat_psp_create_any with no descriptor left logged no line saying so");
	assert_null(psp);

	/* dat_ep_create needs none either (the endpoint it opens ahead is
	 * best effort); its connect does: refused, the EP unconnected, and
	 * the same EP connects once descriptors are back */
	port = listen_any(&p->s, &psp);
	capture_start(&cap);
	fds_exhaust(&h, 0);
	assert_ok(dat_ep_create(p->c.ia, p->c.pz, p->c.rcv, p->c.req, p->c.conn, &a, &cep));
	assert_rc(connect_to(cep, port), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	fds_restore(&h);
	if (!capture_stop(&cap, "no file descriptor left"))
		fail_msg("dat_ep_connect with no descriptor left logged no line saying so");
	{
		DAT_EP_STATE st;

		assert_ok(dat_ep_get_status(cep, &st, NULL, NULL));
		assert_int_equal(st, DAT_EP_STATE_UNCONNECTED);
	}
	expect_no_event(p->c.conn, "client conn EVD after a refused connect");

	/* The listener with none left: the client's connect takes the last
	 * descriptor, so the server cannot take the TCP connection in, and
	 * no request shows; it is not lost, and comes once descriptors are
	 * back.  dat_cr_accept then needs none of its own (the request's
	 * socket is the endpoint's): it is accepted with none left. */
	assert_ok(dat_ep_create(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, &a, &sep));
	capture_start(&cap);
	fds_exhaust(&h, 1);
	assert_ok(connect_to(cep, port));
	{
		DAT_EVENT none;

		assert_err(wait_ev(p->s.cr, 300, &none), DAT_TIMEOUT_EXPIRED);
	}
	fds_restore(&h);
	cr = wait_cr(&p->s);
	/* meanwhile the listening socket stayed readable: the progress thread
	 * said why, and did not take it for a provider whose fds never settle
	 * (which would have switched the IA to polling for good) */
	sleep_ms(50);
	/* (the RDM backend's connection manager says it: a polled IA has
	 * no futile wake-ups to count) */
	if (!capture_stop(&cap, "connections waiting to be taken in") &&
	    !strstr(captured, "descriptor for a new request"))
		fail_msg("a listener with no descriptor left: no line saying so");
	if (strstr(captured, "polls instead"))
		fail_msg("a listener with no descriptor left switched its IA to polling");
	fds_exhaust(&h, 0);
	assert_ok(dat_cr_accept(cr, sep, 0, NULL));
	fds_restore(&h);
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, 5000, "server conn EVD", NULL);
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, 5000, "client conn EVD", NULL);
	assert_ok(dat_psp_free(psp));
	disconnect_free(p, sep, cep);

	/* another EP on the client while none are left: created, and freed */
	fds_exhaust(&h, 0);
	assert_ok(dat_ep_create(p->c.ia, p->c.pz, p->c.rcv, p->c.req, p->c.conn, &a, &ep));
	fds_restore(&h);
	assert_ok(dat_ep_free(ep));

	check_usable(p, 2);
	assert_int_equal(count_fds(), fds0);
	alarm(0);
}

/* ==================================================== 2. registration */

/* libfabric's tcp provider does not pin: a registration is a key in a
 * table, so RLIMIT_MEMLOCK does not bound it (checked here, so that a
 * libfabric that starts pinning is noticed).  What a registration can get
 * wrong here is the range: memory that is not mapped, or a range that
 * runs past the end of the address space.  Both are refused before
 * libfabric sees them (DAT_INVALID_PARAMETER naming the region); on
 * libfabric 1.17 tcp they were registered, and a DTO into them broke
 * the connection later (EFAULT in the provider's recvmsg). */
static void test_lmr_refused(void **state)
{
	struct pair *p = *state;
	const size_t len = 16u << 20;
	DAT_REGION_DESCRIPTION r;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	struct rlimit old, rl;
	uint8_t *m;

	watchdog(__func__, 30);
	/* 16 MiB registered under a memlock limit of one page */
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(m != MAP_FAILED);
	assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &old), 0);
	rl = old;
	rl.rlim_cur = 4096;
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	memset(&r, 0, sizeof(r));
	r.for_va = m;
	assert_ok(dat_lmr_create(p->c.ia, DAT_MEM_TYPE_VIRTUAL, r, len, p->c.pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen,
				 &raddr));
	assert_ok(dat_lmr_free(lmr));
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &old), 0);

	/* a hole in the middle of the range */
	assert_int_equal(munmap(m + len / 2, 4096), 0);
	lmr = DAT_HANDLE_NULL;
	assert_rc(dat_lmr_create(p->c.ia, DAT_MEM_TYPE_VIRTUAL, r, len, p->c.pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen,
				 &raddr), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	assert_null(lmr);
	/* the half before the hole registers */
	assert_ok(dat_lmr_create(p->c.ia, DAT_MEM_TYPE_VIRTUAL, r, len / 2, p->c.pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen,
				 &raddr));
	assert_ok(dat_lmr_free(lmr));
	assert_int_equal(munmap(m, len), 0);

	/* a range that wraps past the end of the address space */
	r.for_va = (DAT_PVOID)(uintptr_t)(UINT64_MAX - 4095);
	assert_rc(dat_lmr_create(p->c.ia, DAT_MEM_TYPE_VIRTUAL, r, 1u << 20, p->c.pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen,
				 &raddr), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	/* and one past max_lmr_virtual_address, in the kernel's half */
	r.for_va = (DAT_PVOID)(uintptr_t)UINT64_C(0x00007ffffffff000);
	assert_rc(dat_lmr_create(p->c.ia, DAT_MEM_TYPE_VIRTUAL, r, 1u << 20, p->c.pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen,
				 &raddr), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	check_usable(p, 3);
	alarm(0);
}

/* ================================================== 3. queues overflow */

/* More completions than the request EVD's qlen: none is lost.  The ring
 * holds qlen events, the rest wait in libfabric's CQ (at least 1024
 * entries) and come in order as the consumer reaps; nothing overflows, so
 * the async EVD stays empty. */
static void test_dto_evd_more_than_qlen(void **state)
{
	struct pair *p = *state;
	const int n = 48, qlen = 4;
	DAT_EVD_HANDLE req;
	DAT_EVD_PARAM ep;
	DAT_EP_ATTR a = ep_attr(n, n);
	DAT_EP_HANDLE sep, cep;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_CR_HANDLE cr;

	watchdog(__func__, 30);
	assert_ok(dat_evd_create(p->c.ia, qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &req));
	assert_ok(dat_evd_query(req, DAT_EVD_FIELD_ALL, &ep));
	assert_int_equal(ep.evd_qlen, qlen);
	port = listen_any(&p->s, &psp);
	assert_ok(dat_ep_create(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, &a, &sep));
	assert_ok(dat_ep_create(p->c.ia, p->c.pz, p->c.rcv, req, p->c.conn, &a, &cep));
	for (int i = 0; i < n; i++)
		assert_ok(post_recv1(&p->s, sep, (size_t)i * MSG_LEN, 1000 + (uint64_t)i));
	assert_ok(connect_to(cep, port));
	cr = wait_cr(&p->s);
	assert_ok(dat_cr_accept(cr, sep, 0, NULL));
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, 5000, "server conn EVD", NULL);
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, 5000, "client conn EVD", NULL);
	assert_ok(dat_psp_free(psp));
	for (int i = 0; i < n; i++)
		assert_ok(post_send1(&p->c, cep, 0, (uint64_t)i));
	for (int i = 0; i < n; i++)
		expect_dto(p->s.rcv, sep, 1000 + (uint64_t)i, MSG_LEN, "server receive");
	sleep_ms(50);	/* every send completion is in, 12 times the qlen */
	for (int i = 0; i < n; i++)
		expect_dto(req, cep, (uint64_t)i, MSG_LEN, "client send past qlen");
	expect_no_event(req, "client request EVD");
	expect_no_event(p->c.async, "client async EVD: no overflow");
	disconnect_free(p, sep, cep);
	assert_ok(dat_evd_free(req));
	check_usable(p, 4);
	alarm(0);
}

/* An event the provider makes that finds its EVD full is lost, and DAT
 * says so on the async EVD: DAT_ASYNC_ERROR_EVD_OVERFLOW naming the EVD,
 * reason DAT_EVD_OVERFLOW_ERROR.  Here a CR EVD of qlen 1 gets two
 * connection requests: the first is kept and can be accepted, the second
 * is refused on the wire (its client sees a rejection), as OFA does. */
static void test_cr_evd_overflow(void **state)
{
	struct pair *p = *state;
	DAT_EP_ATTR a = ep_attr(4, 4);
	DAT_EVD_HANDLE cr_evd;
	DAT_EP_HANDLE sep, cep[2], kept;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port = 0;
	DAT_EVENT ev;
	DAT_CR_HANDLE cr;

	watchdog(__func__, 30);
	assert_ok(dat_evd_create(p->s.ia, 1, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd));
	assert_ok(dat_psp_create_any(p->s.ia, &port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
	assert_ok(dat_ep_create(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, &a, &sep));
	for (int i = 0; i < 2; i++) {
		assert_ok(dat_ep_create(p->c.ia, p->c.pz, p->c.rcv, p->c.req, p->c.conn, &a,
					&cep[i]));
		assert_ok(connect_to(cep[i], port));
	}
	/* whichever request came second found the EVD full */
	expect_event(p->s.async, DAT_ASYNC_ERROR_EVD_OVERFLOW, 5000, "server async EVD", &ev);
	assert_ptr_equal(ev.event_data.asynch_error_event_data.dat_handle, cr_evd);
	assert_int_equal(ev.event_data.asynch_error_event_data.reason, DAT_EVD_OVERFLOW_ERROR);
	/* its client is refused */
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_PEER_REJECTED, 5000,
		     "client conn EVD: the overflowed request", &ev);
	kept = ev.event_data.connect_event_data.ep_handle == cep[0] ? cep[1] : cep[0];
	assert_true(ev.event_data.connect_event_data.ep_handle == cep[0] ||
		    ev.event_data.connect_event_data.ep_handle == cep[1]);
	/* the one queued is whole, and accepted */
	expect_event(cr_evd, DAT_CONNECTION_REQUEST_EVENT, 1000, "CR EVD", &ev);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	assert_ok(dat_cr_accept(cr, sep, 0, NULL));
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, 5000, "server conn EVD", NULL);
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, 5000, "client conn EVD", &ev);
	assert_ptr_equal(ev.event_data.connect_event_data.ep_handle, kept);
	/* one report per episode: the drained EVD overflows again later */
	expect_no_event(p->s.async, "server async EVD: one overflow, one report");
	assert_ok(dat_psp_free(psp));
	disconnect_free(p, sep, kept);
	assert_ok(dat_ep_free(kept == cep[0] ? cep[1] : cep[0]));
	assert_ok(dat_evd_free(cr_evd));
	check_usable(p, 8);
	alarm(0);
}

/* dat_evd_post_se into a full EVD: DAT_QUEUE_FULL, and not an overflow
 * (the async EVD is not told); dequeue from an empty one: DAT_QUEUE_EMPTY. */
static void test_software_evd_full(void **state)
{
	struct pair *p = *state;
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev;
	int x[4];

	watchdog(__func__, 30);
	assert_ok(dat_evd_create(p->c.ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd));
	for (int i = 0; i < 4; i++) {
		memset(&ev, 0, sizeof(ev));
		ev.event_number = DAT_SOFTWARE_EVENT;
		ev.event_data.software_event_data.pointer = &x[i];
		assert_ok(dat_evd_post_se(evd, &ev));
	}
	assert_rc(dat_evd_post_se(evd, &ev), ERR(DAT_QUEUE_FULL, 0));
	expect_no_event(p->c.async, "client async EVD: a full post_se is no overflow");
	for (int i = 0; i < 4; i++) {
		assert_ok(dat_evd_dequeue(evd, &ev));
		assert_ptr_equal(ev.event_data.software_event_data.pointer, &x[i]);
	}
	assert_rc(dat_evd_dequeue(evd, &ev), DAT_QUEUE_EMPTY);
	ev.event_number = DAT_SOFTWARE_EVENT;
	assert_ok(dat_evd_post_se(evd, &ev));	/* room again */
	assert_ok(dat_evd_free(evd));
	check_usable(p, 5);
	alarm(0);
}

/* Posting past max_request_dtos (and max_recv_dtos): refused with
 * DAT_INSUFFICIENT_RESOURCES / DAT_RESOURCE_TEP, no event for the refused
 * post, and once the completions are reaped the queue takes as many
 * again. */
static void test_request_queue_full(void **state)
{
	struct pair *p = *state;
	const int max = 4;
	DAT_EP_HANDLE sep, cep;
	DAT_EP_PARAM epp;
	DAT_EVENT ev;

	watchdog(__func__, 30);
	connect_pair(p, max, &sep, &cep);
	assert_ok(dat_ep_query(cep, DAT_EP_FIELD_ALL, &epp));
	assert_int_equal(epp.ep_attr.max_request_dtos, max);
	for (int i = 0; i < max; i++)
		assert_ok(post_recv1(&p->s, sep, (size_t)i * MSG_LEN, 100 + (uint64_t)i));
	assert_rc(post_recv1(&p->s, sep, 0, 99), ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < max; i++)
			assert_ok(post_send1(&p->c, cep, 0, (uint64_t)(round * 10 + i)));
		sleep_ms(50);	/* done on the wire, not reaped: the slots stay taken */
		assert_rc(post_send1(&p->c, cep, 0, 99),
			  ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
		for (int i = 0; i < max; i++)
			expect_dto(p->c.req, cep, (uint64_t)(round * 10 + i), MSG_LEN, "client send");
		assert_rc(dat_evd_dequeue(p->c.req, &ev), DAT_QUEUE_EMPTY);
		for (int i = 0; i < max; i++) {
			expect_dto(p->s.rcv, sep, 100 + (uint64_t)(round * 10 + i), MSG_LEN,
				   "server receive");
			if (round == 0)
				assert_ok(post_recv1(&p->s, sep, (size_t)i * MSG_LEN,
						     110 + (uint64_t)i));
		}
	}
	disconnect_free(p, sep, cep);
	check_usable(p, 6);
	alarm(0);
}

/* =========================================================== 4. EP flood */

/* 65 536 EPs asked for: dat_ep_create succeeds up to dat_ia_query's
 * max_eps and then fails with DAT_INSUFFICIENT_RESOURCES /
 * DAT_RESOURCE_TEP (each EP takes a socket when it connects, so max_eps
 * follows the open-file limit); every EP created is freed, and the IA
 * works.  Cost: the soft open-file limit is lowered to 2112 first, so that
 * max_eps is 2048 whatever the machine's limit (up to 65 536 otherwise);
 * 2048 creates and frees take well under a second, ASan included. */
#define FLOOD_ASK	65536
#define FLOOD_NOFILE	2112

static void test_ep_flood(void **state)
{
	struct pair *p = *state;
	DAT_EP_ATTR a = ep_attr(1, 1);
	DAT_IA_ATTR ia_attr;
	DAT_EP_HANDLE *eps;
	struct rlimit old, rl;
	DAT_RETURN rc = DAT_SUCCESS;
	uint64_t t0;
	int n = 0;

	watchdog(__func__, 60);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	rl = old;
	if (rl.rlim_cur > FLOOD_NOFILE)
		rl.rlim_cur = FLOOD_NOFILE;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_ok(dat_ia_query(p->c.ia, NULL, DAT_IA_FIELD_ALL, &ia_attr, 0, NULL));
	assert_true(ia_attr.max_eps > 2 && ia_attr.max_eps < FLOOD_ASK);
	eps = calloc(FLOOD_ASK, sizeof(*eps));
	assert_non_null(eps);
	t0 = now_ns();
	while (n < FLOOD_ASK && now_ns() - t0 < 20ull * 1000000000u) {
		rc = dat_ep_create(p->c.ia, p->c.pz, p->c.rcv, p->c.req, p->c.conn, &a, &eps[n]);
		if (rc != DAT_SUCCESS)
			break;
		n++;
	}
	print_message("# %d EPs created in %llu ms (max_eps %d)\n", n,
		      (unsigned long long)((now_ns() - t0) / 1000000u), ia_attr.max_eps);
	assert_rc(rc, ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	/* the IA's other EPs count: none here */
	assert_int_equal(n, ia_attr.max_eps);
	for (int i = 0; i < n; i++)
		assert_ok(dat_ep_free(eps[i]));
	free(eps);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	check_usable(p, 7);
	alarm(0);
}

int main(int argc, char **argv)
{
	watchdog_install();
	default_dat_override();
	if (argc == 2)
		cmocka_set_test_filter(argv[1]);	/* run the tests matching a pattern */
	/* the lines test_fds_run_out looks for include warnings */
	setenv("DAPL_OFI_LOG_LEVEL", "warn", 1);
	{
	const struct CMUnitTest tests[] = {
#define TP(f) cmocka_unit_test_setup_teardown(f, pair_setup, pair_teardown)
		TP(test_fds_run_out),
		TP(test_lmr_refused),
		TP(test_dto_evd_more_than_qlen),
		TP(test_cr_evd_overflow),
		TP(test_software_evd_full),
		TP(test_request_queue_full),
		TP(test_ep_flood),
#undef TP
	};

	return cmocka_run_group_tests_name("dapl-ofi resource exhaustion", tests, NULL, NULL);
	}
}
