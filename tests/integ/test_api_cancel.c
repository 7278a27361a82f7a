/*
 * Thread cancellation of the blocking calls, through the stock registry
 * (issue 31; dapl-ofi(7), CANCELLATION).
 *
 * A waiter in dat_evd_wait or dat_cno_wait is cancelled (deferred) while it
 * sleeps, and again in a few hundred rounds that race the cancel with an
 * event posted by dat_evd_post_se.  After each: no stale waiter (a dequeue
 * is not refused, the next wait works and sees a new event), every event is
 * seen exactly once (by the cancelled waiter, or left in the EVD), and at the
 * end dat_evd_free, dat_cno_free and dat_ia_close(GRACEFUL) succeed within
 * a bound.  EVD kinds: software, CNO-attached, a PSP's CR EVD, an EP's
 * connection EVD and its receive DTO EVD (a connected pair on 127.0.0.1),
 * and dat_cno_wait itself; then the MPI finalize sequence of the report
 * (pthread_cancel + pthread_join of a thread in dat_evd_wait(INFINITE) on a
 * CR EVD, dat_evd_free, dat_ia_close(GRACEFUL)).
 *
 * test_exit_*: a thread sits in dat_evd_wait, a signal handler calls
 * exit(), and an atexit handler closes the IA (a consumer's finalize): the
 * process must exit, with the handler's status, within a bound.  Each runs
 * in a forked child.
 *
 * CANCEL_ROUNDS (default 300) sets the rounds of each race.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dat2/udat.h>

#include "dat_test.h"

#define IA_NAME		(getenv("DFI_TEST_IA") ? getenv("DFI_TEST_IA") : "ofi-lo")
#define ASYNC_QLEN	8
#define SEC		(1000u * 1000u)		/* DAT_TIMEOUT is in microseconds */
#define BOUND_MS	5000u			/* any join, free or close */
#define BUF_LEN		4096

/* The exit tests' children exit from a signal handler, IA state and all:
 * LeakSanitizer has nothing to say about that. */
static volatile int lsan_off;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return lsan_off;
}

/* A provider lock left held by a cancelled thread hangs the next call in
 * the main thread itself: the watchdog ends the test program with a line
 * that says so. */
static int watchdog_setup(void **state)
{
	(void)state;
	watchdog("a cancellation test (a lock left held by a cancelled waiter?)", 120);
	return 0;
}

static int watchdog_teardown(void **state)
{
	(void)state;
	alarm(0);
	return 0;
}

/* The exit tests call exit() from a signal handler on purpose (as the
 * psm library's SIGTERM handler does): ThreadSanitizer would report the
 * exit path's malloc and free as signal-unsafe calls. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "report_signal_unsafe=0";
}

static int rounds(void)
{
	const char *s = getenv("CANCEL_ROUNDS");
	int n = s ? atoi(s) : 300;

	return n > 0 ? n : 300;
}

static DAT_RETURN open_ia(DAT_IA_HANDLE *ia, DAT_EVD_HANDLE *async)
{
	char buf[DAT_NAME_MAX_LENGTH];

	snprintf(buf, sizeof(buf), "%s", IA_NAME);
	*ia = DAT_HANDLE_NULL;
	*async = DAT_HANDLE_NULL;
	return dat_ia_open(buf, ASYNC_QLEN, async, ia);
}

static DAT_EVENT sw_event(void *ptr)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = ptr;
	return ev;
}

static void post(DAT_EVD_HANDLE evd, void *ptr)
{
	DAT_EVENT ev = sw_event(ptr);

	assert_ok(dat_evd_post_se(evd, &ev));
}

/* ------------------------------------------------------ bounded calls */

struct call {
	DAT_RETURN (*fn)(struct call *);
	DAT_HANDLE h;
	DAT_CLOSE_FLAGS flags;
	DAT_RETURN rc;
};

static void *call_main(void *arg)
{
	struct call *c = arg;

	c->rc = c->fn(c);
	return NULL;
}

static bool timed_join(pthread_t t, unsigned ms, void **ret)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return pthread_timedjoin_np(t, ret, &ts) == 0;
}

/* Run c->fn in a thread; fail (leaving it) if it does not return in time. */
static DAT_RETURN bounded(const char *what, struct call *c)
{
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, call_main, c), 0);
	if (!timed_join(t, BOUND_MS, NULL))
		fail_msg("%s did not return within %u ms (hangs)", what, BOUND_MS);
	return c->rc;
}

static DAT_RETURN do_ia_close(struct call *c)
{
	return dat_ia_close(c->h, c->flags);
}

static DAT_RETURN do_evd_free(struct call *c)
{
	return dat_evd_free(c->h);
}

static DAT_RETURN do_cno_free(struct call *c)
{
	return dat_cno_free(c->h);
}

static DAT_RETURN do_psp_free(struct call *c)
{
	return dat_psp_free(c->h);
}

static DAT_RETURN do_ep_free(struct call *c)
{
	return dat_ep_free(c->h);
}

#define BOUNDED_OK(func, handle) do {						\
		struct call c_ = { .fn = (func), .h = (handle),			\
				   .flags = DAT_CLOSE_GRACEFUL_FLAG };		\
		assert_rc(bounded(#func, &c_), DAT_SUCCESS);			\
	} while (0)

/* ------------------------------------------------------------ waiters */

struct waiter {
	pthread_t t;
	DAT_HANDLE h;			/* EVD, or CNO when cno */
	bool cno;
	_Atomic int tid;
	_Atomic bool returned;
	DAT_RETURN rc;
	DAT_EVENT ev;
	DAT_EVD_HANDLE hint;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	DAT_COUNT nmore;

	/* deferred cancellation, enabled: the defaults, said out loud */
	pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
	atomic_store(&w->tid, (int)syscall(SYS_gettid));
	if (w->cno)
		w->rc = dat_cno_wait(w->h, DAT_TIMEOUT_INFINITE, &w->hint);
	else
		w->rc = dat_evd_wait(w->h, DAT_TIMEOUT_INFINITE, 1, &w->ev, &nmore);
	atomic_store(&w->returned, true);
	return NULL;
}

static void waiter_start(struct waiter *w, DAT_HANDLE h, bool cno)
{
	memset(w, 0, sizeof(*w));
	w->h = h;
	w->cno = cno;
	assert_int_equal(pthread_create(&w->t, NULL, waiter_main, w), 0);
}

/* Whether thread tid of this process sits in ppoll(2) now. */
static bool in_ppoll(int tid)
{
	char path[64], buf[64];
	FILE *f;
	long nr = -1;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f))
		nr = strtol(buf, NULL, 10);
	fclose(f);
	return nr == SYS_ppoll;
}

/* Until the waiter sleeps in the provider's ppoll (5 s at most). */
static void waiter_asleep(struct waiter *w)
{
	uint64_t end = now_ns() + 5000000000ull;

	while (now_ns() < end) {
		int tid = atomic_load(&w->tid);

		if (atomic_load(&w->returned))
			fail_msg("the waiter returned 0x%x instead of sleeping", (unsigned)w->rc);
		if (tid && in_ppoll(tid))
			return;
		sleep_ms(1);
	}
	fail_msg("the waiter did not fall asleep in ppoll within 5 s");
}

/* pthread_cancel + pthread_join (bounded).  Returns whether it was cancelled
 * (else it returned from the wait on its own). */
static bool waiter_cancel(struct waiter *w)
{
	void *ret = NULL;

	assert_int_equal(pthread_cancel(w->t), 0);
	if (!timed_join(w->t, BOUND_MS, &ret))
		fail_msg("a waiter in dat_%s_wait was not gone %u ms after pthread_cancel",
			 w->cno ? "cno" : "evd", BOUND_MS);
	if (ret == PTHREAD_CANCELED) {
		assert_false(atomic_load(&w->returned));
		return true;
	}
	assert_true(atomic_load(&w->returned));
	return false;
}

/* ---------------------------------------------------------- EVD checks */

/* The EVD has no waiter left and holds nothing: a dequeue says EMPTY
 * (a stale waiter makes it DAT_INVALID_STATE). */
static void no_waiter_empty(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	assert_rc(dat_evd_dequeue(evd, &ev), DAT_QUEUE_EMPTY);
}

/* A new wait works and sees the event posted now. */
static void new_wait_sees_post(DAT_EVD_HANDLE evd, void *token)
{
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;

	post(evd, token);
	assert_ok(dat_evd_wait(evd, 2 * SEC, 1, &ev, &nmore));
	assert_int_equal(ev.event_number, DAT_SOFTWARE_EVENT);
	assert_ptr_equal(ev.event_data.software_event_data.pointer, token);
	assert_int_equal(nmore, 0);
}

/* Drain software events carrying token; returns how many. */
static int drain_token(DAT_EVD_HANDLE evd, void *token)
{
	DAT_EVENT ev;
	int n = 0;
	DAT_RETURN rc;

	while ((rc = dat_evd_dequeue(evd, &ev)) == DAT_SUCCESS) {
		assert_int_equal(ev.event_number, DAT_SOFTWARE_EVENT);
		assert_ptr_equal(ev.event_data.software_event_data.pointer, token);
		n++;
	}
	assert_rc(rc, DAT_QUEUE_EMPTY);
	return n;
}

/*
 * The waiter cancelled while asleep; then `n` rounds of a waiter racing a
 * post: post then cancel, cancel then post, or post into its sleep and
 * cancel.  Each round the event is seen exactly once, by the waiter (not
 * cancelled then) or in the EVD afterwards.  With a CNO attached, an event
 * left in the EVD must have triggered it (a waiter preempts the CNO; one
 * that is cancelled must hand over what it did not take).
 */
static void cancel_cycle(DAT_EVD_HANDLE evd, DAT_CNO_HANDLE cno, int n)
{
	static char token;
	struct waiter w;
	int cancelled = 0, took = 0;

	waiter_start(&w, evd, false);
	waiter_asleep(&w);
	assert_true(waiter_cancel(&w));
	no_waiter_empty(evd);
	new_wait_sees_post(evd, &token);

	for (int i = 0; i < n; i++) {
		bool was_cancelled;
		int got, left;

		waiter_start(&w, evd, false);
		switch (i % 3) {
		case 0:
			post(evd, &token);
			assert_int_equal(pthread_cancel(w.t), 0);
			break;
		case 1:
			assert_int_equal(pthread_cancel(w.t), 0);
			post(evd, &token);
			break;
		default:
			waiter_asleep(&w);
			post(evd, &token);
			assert_int_equal(pthread_cancel(w.t), 0);
			break;
		}
		was_cancelled = waiter_cancel(&w);	/* cancels again: harmless */
		if (!was_cancelled) {
			assert_rc(w.rc, DAT_SUCCESS);
			assert_int_equal(w.ev.event_number, DAT_SOFTWARE_EVENT);
			assert_ptr_equal(w.ev.event_data.software_event_data.pointer, &token);
		}
		got = was_cancelled ? 0 : 1;
		if (cno && !was_cancelled) {
			DAT_EVD_HANDLE hint;

			(void)dat_cno_wait(cno, 0, &hint);	/* a spurious trigger: allowed */
		}
		if (cno && was_cancelled) {
			DAT_EVD_HANDLE hint = NULL;
			DAT_RETURN rc = dat_cno_wait(cno, 0, &hint);

			if (rc != DAT_SUCCESS || hint != evd)
				fail_msg("round %d: the event stayed in the EVD of a cancelled "
					 "waiter, but the CNO was not triggered (dat_cno_wait: "
					 "0x%x, hint %p)", i, (unsigned)rc, (void *)hint);
		}
		left = drain_token(evd, &token);
		if (got + left != 1)
			fail_msg("round %d (%s): the event was seen %d times (waiter %d, left "
				 "in the EVD %d)", i, was_cancelled ? "cancelled" : "returned",
				 got + left, got, left);
		cancelled += was_cancelled;
		took += got;
	}
	print_message("# %d rounds: %d waiters cancelled, %d returned with the event\n",
		      n, cancelled, took);
	no_waiter_empty(evd);
	new_wait_sees_post(evd, &token);
}

/* ---------------------------------------------------------------- tests */

static void test_cancel_software_evd(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd;

	(void)state;
	assert_ok(open_ia(&ia, &async));
	assert_ok(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd));
	cancel_cycle(evd, DAT_HANDLE_NULL, rounds());
	BOUNDED_OK(do_evd_free, evd);
	BOUNDED_OK(do_ia_close, ia);
}

static void test_cancel_cno_evd(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd, hint = NULL;
	DAT_CNO_HANDLE cno;
	static char token;

	(void)state;
	assert_ok(open_ia(&ia, &async));
	assert_ok(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
	assert_ok(dat_evd_create(ia, 8, cno, DAT_EVD_SOFTWARE_FLAG, &evd));
	cancel_cycle(evd, cno, rounds());
	/* with no waiter, an arrival triggers the CNO */
	(void)dat_cno_wait(cno, 0, &hint);
	post(evd, &token);
	assert_ok(dat_cno_wait(cno, 2 * SEC, &hint));
	assert_ptr_equal(hint, evd);
	assert_int_equal(drain_token(evd, &token), 1);
	BOUNDED_OK(do_evd_free, evd);
	BOUNDED_OK(do_cno_free, cno);
	BOUNDED_OK(do_ia_close, ia);
}

static void test_cancel_cno_wait(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd, hint;
	DAT_CNO_HANDLE cno;
	struct waiter w;
	static char token;
	int n = rounds(), cancelled = 0;

	(void)state;
	assert_ok(open_ia(&ia, &async));
	assert_ok(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
	assert_ok(dat_evd_create(ia, 8, cno, DAT_EVD_SOFTWARE_FLAG, &evd));

	waiter_start(&w, cno, true);
	waiter_asleep(&w);
	assert_true(waiter_cancel(&w));
	/* untriggered, no waiter left: a zero wait times out at once */
	assert_rc(dat_cno_wait(cno, 0, &hint), DAT_QUEUE_EMPTY);
	post(evd, &token);
	assert_ok(dat_cno_wait(cno, 2 * SEC, &hint));
	assert_ptr_equal(hint, evd);
	assert_int_equal(drain_token(evd, &token), 1);

	/* a trigger is consumed once: by the waiter, or by the next wait */
	for (int i = 0; i < n; i++) {
		bool was_cancelled;
		DAT_RETURN rc;

		waiter_start(&w, cno, true);
		if (i % 2) {
			post(evd, &token);
			assert_int_equal(pthread_cancel(w.t), 0);
		} else {
			waiter_asleep(&w);
			post(evd, &token);
			assert_int_equal(pthread_cancel(w.t), 0);
		}
		was_cancelled = waiter_cancel(&w);
		hint = NULL;
		rc = dat_cno_wait(cno, 0, &hint);
		if (was_cancelled) {
			if (rc != DAT_SUCCESS || hint != evd)
				fail_msg("round %d: the trigger of a cancelled dat_cno_wait was "
					 "lost (next dat_cno_wait: 0x%x, hint %p)", i, (unsigned)rc,
					 (void *)hint);
		} else {
			assert_rc(w.rc, DAT_SUCCESS);
			assert_ptr_equal(w.hint, evd);
			assert_rc(rc, DAT_QUEUE_EMPTY);
		}
		assert_int_equal(drain_token(evd, &token), 1);
		cancelled += was_cancelled;
	}
	print_message("# %d rounds: %d CNO waiters cancelled\n", n, cancelled);
	/* a stale waiter count makes dat_cno_free refuse (CNO_IN_USE) and
	 * dat_ia_close wait for it forever */
	BOUNDED_OK(do_evd_free, evd);
	BOUNDED_OK(do_cno_free, cno);
	BOUNDED_OK(do_ia_close, ia);
}

/* The report: a connection-server thread in dat_evd_wait(INFINITE, 1) on a
 * PSP's CR EVD, stopped at finalize by pthread_cancel + pthread_join; then
 * dat_evd_free and dat_ia_close(GRACEFUL). */
static void test_cancel_mpi_finalize(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, cr_evd;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port = 0;
	struct waiter w;

	(void)state;
	assert_ok(open_ia(&ia, &async));
	assert_ok(dat_evd_create(ia, 16, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd));
	assert_ok(dat_psp_create_any(ia, &port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
	waiter_start(&w, cr_evd, false);
	waiter_asleep(&w);
	assert_true(waiter_cancel(&w));
	BOUNDED_OK(do_psp_free, psp);
	BOUNDED_OK(do_evd_free, cr_evd);
	BOUNDED_OK(do_ia_close, ia);
}

/* -------------------------------------------------- a connected pair */

struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_EP_HANDLE ep;
	char *buf;
};

static void side_open(struct side *x, bool server)
{
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN reg_len = 0;
	DAT_VADDR reg_addr = 0;
	DAT_RMR_CONTEXT rctx;
	DAT_EP_ATTR a;
	const DAT_EVD_FLAGS sw = DAT_EVD_SOFTWARE_FLAG;

	memset(x, 0, sizeof(*x));
	x->buf = aligned_alloc(4096, BUF_LEN);
	assert_non_null(x->buf);
	memset(x->buf, 0, BUF_LEN);
	assert_ok(open_ia(&x->ia, &x->async));
	assert_ok(dat_pz_create(x->ia, &x->pz));
	memset(&region, 0, sizeof(region));
	region.for_va = x->buf;
	assert_ok(dat_lmr_create(x->ia, DAT_MEM_TYPE_VIRTUAL, region, BUF_LEN, x->pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &x->lmr, &x->lctx, &rctx,
				 &reg_len, &reg_addr));
	/* every EVD also takes software events: the races post them */
	assert_ok(dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->req));
	assert_ok(dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG | sw, &x->rcv));
	assert_ok(dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG | sw,
				 &x->conn));
	if (server)
		assert_ok(dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG | sw, &x->cr));
	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = a.max_recv_dtos = 8;
	a.max_request_iov = a.max_recv_iov = 1;
	a.request_completion_flags = a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	assert_ok(dat_ep_create(x->ia, x->pz, x->rcv, x->req, x->conn, &a, &x->ep));
}

static void side_close(struct side *x)
{
	if (x->ep)
		BOUNDED_OK(do_ep_free, x->ep);
	assert_ok(dat_lmr_free(x->lmr));
	assert_ok(dat_pz_free(x->pz));
	BOUNDED_OK(do_evd_free, x->req);
	BOUNDED_OK(do_evd_free, x->rcv);
	BOUNDED_OK(do_evd_free, x->conn);
	if (x->cr)
		BOUNDED_OK(do_evd_free, x->cr);
	BOUNDED_OK(do_ia_close, x->ia);
	free(x->buf);
}

static DAT_LMR_TRIPLET seg(const struct side *x, size_t len)
{
	DAT_LMR_TRIPLET t;

	memset(&t, 0, sizeof(t));
	t.virtual_address = (DAT_VADDR)(uintptr_t)x->buf;
	t.segment_length = (DAT_SEG_LENGTH)len;
	t.lmr_context = x->lctx;
	return t;
}

static DAT_EVENT wait_one(DAT_EVD_HANDLE evd, const char *what)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_RETURN rc = dat_evd_wait(evd, 5 * SEC, 1, &ev, &nmore);

	if (rc != DAT_SUCCESS)
		fail_msg("%s: dat_evd_wait = 0x%x", what, (unsigned)rc);
	return ev;
}

/* CR EVD of a PSP, the client's connection EVD and the server's receive
 * DTO EVD (with a receive posted, its completion queue below it): each
 * waiter cancelled, then the next wait sees the real event. */
static void test_cancel_cm_and_dto_evds(void **state)
{
	struct side s, c;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port = 0;
	struct sockaddr_in addr;
	DAT_LMR_TRIPLET t;
	DAT_DTO_COOKIE ck;
	DAT_EVENT ev;
	int n = rounds() / 3 + 1;

	(void)state;
	side_open(&s, true);
	side_open(&c, false);
	assert_ok(dat_psp_create_any(s.ia, &port, s.cr, DAT_PSP_CONSUMER_FLAG, &psp));

	cancel_cycle(s.cr, DAT_HANDLE_NULL, n);		/* CR EVD */
	cancel_cycle(c.conn, DAT_HANDLE_NULL, n);	/* connection EVD */

	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_ok(dat_ep_connect(c.ep, (DAT_IA_ADDRESS_PTR)&addr, port, 5 * SEC, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
	ev = wait_one(s.cr, "server CR EVD after its cancelled waiters");
	assert_int_equal(ev.event_number, DAT_CONNECTION_REQUEST_EVENT);
	assert_ok(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s.ep, 0, NULL));
	ev = wait_one(s.conn, "server connection EVD");
	assert_int_equal(ev.event_number, DAT_CONNECTION_EVENT_ESTABLISHED);
	ev = wait_one(c.conn, "client connection EVD after its cancelled waiters");
	assert_int_equal(ev.event_number, DAT_CONNECTION_EVENT_ESTABLISHED);

	/* a receive posted: its waiter sleeps on the CQ too */
	t = seg(&s, BUF_LEN);
	ck.as_64 = 0x5ec7;
	assert_ok(dat_ep_post_recv(s.ep, 1, &t, ck, DAT_COMPLETION_DEFAULT_FLAG));
	cancel_cycle(s.rcv, DAT_HANDLE_NULL, n);	/* DTO EVD */

	memcpy(c.buf, "cancel!", 8);
	t = seg(&c, 8);
	ck.as_64 = 0xc1;
	assert_ok(dat_ep_post_send(c.ep, 1, &t, ck, DAT_COMPLETION_DEFAULT_FLAG));
	ev = wait_one(s.rcv, "server receive EVD after its cancelled waiters");
	assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	assert_int_equal(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
	assert_int_equal(ev.event_data.dto_completion_event_data.transfered_length, 8);
	assert_int_equal(ev.event_data.dto_completion_event_data.user_cookie.as_64, 0x5ec7);
	assert_string_equal(s.buf, "cancel!");
	ev = wait_one(c.req, "client request EVD");
	assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);

	BOUNDED_OK(do_psp_free, psp);
	side_close(&c);
	side_close(&s);
}

/* ------------------------------------------- exit() from a signal handler */

static DAT_IA_HANDLE child_ia;

static void child_atexit(void)
{
	/* a consumer's finalize: closes the IA while a thread is (or was,
	 * under the handler) in dat_evd_wait */
	dat_ia_close(child_ia, DAT_CLOSE_ABRUPT_FLAG);
}

static void child_on_term(int sig)
{
	(void)sig;
	exit(42);
}

/* how: 0 = the main thread raises the signal, 1 = it is sent to the
 * waiter thread itself.  Returns only on failure. */
static void exit_child(int how, bool cno)
{
	DAT_EVD_HANDLE async, evd;
	DAT_CNO_HANDLE c = DAT_HANDLE_NULL;
	struct waiter w;

	lsan_off = 1;
	signal(SIGALRM, SIG_DFL);
	alarm(20);		/* a hang ends as SIGALRM, not exit 42 */
	if (open_ia(&child_ia, &async) != DAT_SUCCESS)
		_exit(2);
	if (cno && dat_cno_create(child_ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &c) != DAT_SUCCESS)
		_exit(3);
	if (dat_evd_create(child_ia, 8, c, DAT_EVD_SOFTWARE_FLAG, &evd) != DAT_SUCCESS)
		_exit(4);
	atexit(child_atexit);
	signal(SIGTERM, child_on_term);
	waiter_start(&w, cno ? (DAT_HANDLE)c : (DAT_HANDLE)evd, cno);
	pthread_detach(w.t);	/* no one joins it: the process exits */
	waiter_asleep(&w);
	if (how == 0)
		raise(SIGTERM);
	else
		pthread_kill(w.t, SIGTERM);
	for (;;)
		pause();
}

static void run_exit_case(int how, bool cno)
{
	pid_t pid;
	int status = 0;
	uint64_t end;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		exit_child(how, cno);
	end = now_ns() + 25000000000ull;
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_ns() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("the child did not exit within 25 s");
		}
		sleep_ms(5);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 42)
		fail_msg("the child ended with %s %d, expected exit status 42 (from its "
			 "SIGTERM handler)", WIFEXITED(status) ? "exit status" : "signal",
			 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static void test_exit_signal_main_thread(void **state)
{
	(void)state;
	run_exit_case(0, false);
}

static void test_exit_signal_waiter_thread(void **state)
{
	(void)state;
	run_exit_case(1, false);
}

static void test_exit_signal_cno_waiter_thread(void **state)
{
	(void)state;
	run_exit_case(1, true);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, watchdog_setup, watchdog_teardown)
		T(test_cancel_software_evd),
		T(test_cancel_cno_evd),
		T(test_cancel_cno_wait),
		T(test_cancel_mpi_finalize),
		T(test_cancel_cm_and_dto_evds),
		T(test_exit_signal_main_thread),
		T(test_exit_signal_waiter_thread),
		T(test_exit_signal_cno_waiter_thread),
#undef T
	};

	default_dat_override();
	watchdog_install();
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
