/*
 * dapl-ofi integration tests of the kDAT upcall extension, through the
 * stock registry (libdat2) and <dat2/dat_ofi_extensions.h>, with real
 * libfabric tcp completions on 127.0.0.1 (IA ofi-lo).
 *
 *  - the extension is reported and reachable through dat_extension_op;
 *  - argument checks of kcreate / modify / query name the argument;
 *  - upcalls run in provider threads, never in the caller of post_se;
 *  - connection and CR events raise upcalls like completions do;
 *  - evd_free / ia_close from inside an upcall are refused, not deadlocks;
 *  - the stress: a client streams sequence-numbered sends into a server
 *    whose receive EVD (DTO|SOFTWARE) is kcreate'd, while producer threads
 *    post software events into the same EVD and the consumer flips among
 *    every policy and invocation flag, does its final polls and resizes.
 *    Counted: every event exactly once, no SINGLE_INSTANCE/NOTIFY overlap,
 *    no upcall after TEARDOWN returns.  UPCALL_STRESS_EVENTS sets the total
 *    (default 10^6; at least a tenth are real receive completions).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dat2/udat.h>
#include <dat2/dat_ofi_extensions.h>

#include "dat_test.h"

#define IA_NAME		(getenv("DFI_TEST_IA") ? getenv("DFI_TEST_IA") : "ofi-lo")
#define SEC		(1000u * 1000u)
#define NRECV		64		/* receives kept posted at the server */
#define MSG		64		/* message size */
#define MAXSEQ		(1u << 24)	/* UPCALL_STRESS_EVENTS up to 1.6*10^7 */

static DAT_IA_HANDLE open_ia(DAT_EVD_HANDLE *async)
{
	DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
	char name[DAT_NAME_MAX_LENGTH];

	snprintf(name, sizeof(name), "%s", IA_NAME);
	*async = DAT_HANDLE_NULL;
	assert_ok(dat_ia_open(name, 8, async, &ia));
	return ia;
}

/* ------------------------------------------------------------ recorder */

struct rec {
	DAT_EVD_HANDLE evd;
	_Atomic(uint8_t) *seen;		/* software events, by sequence */
	_Atomic(uint8_t) *rseen;	/* received messages, by sequence */
	atomic_int inflight, max_inflight;
	atomic_uint_fast64_t calls, overlap, after_teardown, bad;
	atomic_bool torn;
	pthread_t caller;		/* a thread upcalls must not run in */
	atomic_uint_fast64_t in_caller;
	/* receive side */
	DAT_EP_HANDLE ep;
	DAT_LMR_CONTEXT lctx;
	uint8_t *buf;
	atomic_uint_fast64_t reposts, repost_err;
	/* what an upcall does to its own EVD / IA */
	DAT_IA_HANDLE ia;
	atomic_bool try_self;
	DAT_RETURN self_free, self_close, self_teardown;
	atomic_bool block, blocked;
	atomic_int last_event;
	_Atomic(DAT_EP_HANDLE) last_ep;
	_Atomic(DAT_CR_HANDLE) last_cr;
};

struct tag {
	struct rec *r;
	int policy;
	unsigned round;
};

static struct rec *rec_new(void)
{
	struct rec *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	r->seen = calloc(MAXSEQ, 1);
	r->rseen = calloc(MAXSEQ, 1);
	assert_non_null(r->seen);
	assert_non_null(r->rseen);
	r->caller = pthread_self();
	return r;
}

static void rec_free(struct rec *r)
{
	free((void *)r->seen);
	free((void *)r->rseen);
	free(r);
}

static DAT_RETURN repost(struct rec *r, uint64_t slot)
{
	DAT_LMR_TRIPLET t;
	DAT_DTO_COOKIE c;

	memset(&t, 0, sizeof(t));
	t.lmr_context = r->lctx;
	t.virtual_address = (DAT_VADDR)(uintptr_t)(r->buf + slot * MSG);
	t.segment_length = MSG;
	c.as_64 = slot;
	return dat_ep_post_recv(r->ep, 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG);
}

/* Every event, from an upcall or a dequeue, goes through here once. */
static void handle(struct rec *r, const DAT_EVENT *ev)
{
	atomic_store(&r->last_event, (int)ev->event_number);
	switch (ev->event_number) {
	case DAT_SOFTWARE_EVENT: {
		uint64_t s = (uint64_t)(uintptr_t)ev->event_data.software_event_data.pointer;

		if (s < MAXSEQ)
			atomic_fetch_add(&r->seen[s], 1);
		else
			atomic_fetch_add(&r->bad, 1);
		break;
	}
	case DAT_DTO_COMPLETION_EVENT: {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
		uint64_t slot = d->user_cookie.as_64, s;

		if (d->status != DAT_DTO_SUCCESS || d->ep_handle != r->ep || slot >= NRECV ||
		    d->transfered_length != MSG) {
			atomic_fetch_add(&r->bad, 1);
			fprintf(stderr, "bad completion: status %d ep %p (want %p) cookie %llu "
				"length %u op %d\n", (int)d->status, (void *)d->ep_handle,
				(void *)r->ep, (unsigned long long)slot,
				(unsigned)d->transfered_length, (int)d->operation);
			break;
		}
		memcpy(&s, r->buf + slot * MSG, sizeof(s));
		if (s < MAXSEQ)
			atomic_fetch_add(&r->rseen[s], 1);
		else
			atomic_fetch_add(&r->bad, 1);
		{
			DAT_RETURN rc = repost(r, slot);

			if (rc == DAT_SUCCESS) {
				atomic_fetch_add(&r->reposts, 1);
			} else {
				char b[160];

				atomic_fetch_add(&r->repost_err, 1);
				fprintf(stderr, "repost of receive slot %llu failed: %s\n",
					(unsigned long long)slot, rc_name(rc, b, sizeof(b)));
			}
		}
		break;
	}
	case DAT_CONNECTION_EVENT_ESTABLISHED:
		atomic_store(&r->last_ep, ev->event_data.connect_event_data.ep_handle);
		break;
	case DAT_CONNECTION_REQUEST_EVENT:
		atomic_store(&r->last_cr, ev->event_data.cr_arrival_event_data.cr_handle);
		break;
	default:
		break;
	}
}

static void drain(struct rec *r)
{
	DAT_EVENT ev;

	while (dat_evd_dequeue(r->evd, &ev) == DAT_SUCCESS)
		handle(r, &ev);
}

static bool exclusive(int p)
{
	return p == DAT_UPCALL_SINGLE_INSTANCE || p == DAT_UPCALL_NOTIFY;
}

/* round/policy of the upcalls now in their bodies, to judge overlaps: an
 * exclusive upcall may overlap only one of a later MANY arm */
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { bool on; unsigned round; int policy; } run[64];

static void upcall(DAT_PVOID inst, const DAT_EVENT *ev, DAT_BOOLEAN more)
{
	struct tag *t = inst;
	struct rec *r = t->r;
	int now = atomic_fetch_add(&r->inflight, 1) + 1, m = atomic_load(&r->max_inflight);
	int slot = -1;

	(void)more;
	while (now > m && !atomic_compare_exchange_weak(&r->max_inflight, &m, now))
		;
	pthread_mutex_lock(&run_lock);
	for (int i = 0; i < 64; i++) {
		if (!run[i].on) {
			if (slot < 0)
				slot = i;
			continue;
		}
		if ((exclusive(t->policy) &&
		     !(run[i].policy == DAT_UPCALL_MANY && run[i].round > t->round)) ||
		    (exclusive(run[i].policy) &&
		     !(t->policy == DAT_UPCALL_MANY && t->round > run[i].round)))
			atomic_fetch_add(&r->overlap, 1);
	}
	if (slot >= 0) {
		run[slot].on = true;
		run[slot].round = t->round;
		run[slot].policy = t->policy;
	}
	pthread_mutex_unlock(&run_lock);
	if (atomic_load(&r->torn))
		atomic_fetch_add(&r->after_teardown, 1);
	if (pthread_equal(pthread_self(), r->caller))
		atomic_fetch_add(&r->in_caller, 1);
	if (ev)
		handle(r, ev);
	else
		drain(r);	/* NOTIFY: the doorbell; the consumer dequeues */
	if (atomic_exchange(&r->try_self, false)) {
		r->self_teardown = dat_evd_modify_upcall(r->evd, DAT_UPCALL_TEARDOWN,
							 DAT_UPCALL_SAME, DAT_UPCALL_INVOC_NEW);
		r->self_free = dat_evd_free(r->evd);
		r->self_close = dat_ia_close(r->ia, DAT_CLOSE_ABRUPT_FLAG);
	}
	while (atomic_load(&r->block)) {
		atomic_store(&r->blocked, true);
		usleep(200);
	}
	pthread_mutex_lock(&run_lock);
	if (slot >= 0)
		run[slot].on = false;
	pthread_mutex_unlock(&run_lock);
	atomic_fetch_sub(&r->inflight, 1);
	atomic_fetch_add(&r->calls, 1);
}

static void *release_later(void *arg)
{
	struct rec *r = arg;

	usleep(100000);
	atomic_store(&r->block, false);
	return NULL;
}

#define WAIT_UNTIL(cond, ms) do {						\
		uint64_t d_ = now_ns() + (uint64_t)(ms) * 1000000u;		\
		while (!(cond) && now_ns() < d_)				\
			usleep(200);						\
	} while (0)

/* ------------------------------------------------------------ tests */

static void test_extension_reported(void **state)
{
	DAT_EVD_HANDLE async;
	DAT_IA_HANDLE ia = open_ia(&async);
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR pa;

	(void)state;
	assert_ok(dat_ia_query(ia, NULL, DAT_IA_FIELD_ALL, &a, DAT_PROVIDER_FIELD_ALL, &pa));
	/* the IA reports the IB extension; this one is found by its
	 * provider-specific attribute, and served beside it */
	assert_int_equal(a.extension_supported, DAT_EXTENSION_IB);
	assert_true(dat_ofi_upcall_supported(ia, DAT_OFI_EXTENSION_VERSION));
	assert_false(dat_ofi_upcall_supported(ia, DAT_OFI_EXTENSION_VERSION + 1));
	/* an op code of neither extension: a clean refusal */
	assert_err(dat_extension_op(ia, 0x4f460fff), DAT_NOT_IMPLEMENTED);
	assert_ok(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
}

static void test_kcreate_query_and_bad_arguments(void **state)
{
	DAT_EVD_HANDLE async, evd = DAT_HANDLE_NULL;
	DAT_IA_HANDLE ia = open_ia(&async);
	struct rec *r = rec_new();
	struct tag t = { r, DAT_UPCALL_SINGLE_INSTANCE, 0 };
	DAT_UPCALL_OBJECT obj = { &t, upcall }, none = { NULL, NULL }, got;
	DAT_UPCALL_POLICY pol;
	DAT_UPCALL_FLAG flag;
	DAT_EVD_PARAM p;
	DAT_COUNT np = -1;
	DAT_EVENT ev;

	(void)state;
	assert_arg(dat_evd_kcreate(ia, 16, DAT_UPCALL_TEARDOWN, &obj, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_ARG3);
	assert_arg(dat_evd_kcreate(ia, 16, DAT_UPCALL_MANY, &none, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_ARG4);
	assert_arg(dat_evd_kcreate(ia, 16, DAT_UPCALL_MANY, NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_ARG4);
	assert_arg(dat_evd_kcreate(ia, 16, DAT_UPCALL_MANY, &obj, DAT_EVD_SOFTWARE_FLAG, NULL),
		   DAT_INVALID_ARG6);
	assert_arg(dat_evd_kcreate(ia, 0, DAT_UPCALL_MANY, &obj, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_ARG2);
	assert_arg(dat_evd_kcreate(ia, 16, (DAT_UPCALL_POLICY)7, &obj, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_ARG3);
	assert_arg(dat_evd_kcreate(ia, 16, DAT_UPCALL_MANY, &obj, (DAT_EVD_FLAGS)0x4000, &evd),
		   DAT_INVALID_ARG5);
	assert_ok(dat_evd_kcreate(ia, 16, DAT_UPCALL_SINGLE_INSTANCE, &obj,
				  DAT_EVD_SOFTWARE_FLAG, &evd));
	r->evd = evd;
	assert_ok(dat_evd_query_upcall(evd, &pol, &got, &flag));
	assert_int_equal(pol, DAT_UPCALL_SINGLE_INSTANCE);
	assert_ptr_equal(got.instance_data, &t);
	assert_true(got.upcall_func == upcall);
	assert_int_equal(flag, DAT_UPCALL_INVOC_NEW);
	assert_ok(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_qlen >= 16);
	assert_arg(dat_evd_modify_upcall(evd, (DAT_UPCALL_POLICY)5, DAT_UPCALL_SAME,
					 DAT_UPCALL_INVOC_NEW), DAT_INVALID_ARG2);
	assert_arg(dat_evd_modify_upcall(evd, DAT_UPCALL_MANY, &none, DAT_UPCALL_INVOC_NEW),
		   DAT_INVALID_ARG3);
	assert_arg(dat_evd_modify_upcall(evd, DAT_UPCALL_MANY, DAT_UPCALL_SAME,
					 (DAT_UPCALL_FLAG)9), DAT_INVALID_ARG4);
	assert_rc(dat_evd_modify_upcall(ia, DAT_UPCALL_MANY, DAT_UPCALL_SAME, DAT_UPCALL_INVOC_NEW),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1));
	/* wait belongs to the upcall while a policy is active */
	{
		DAT_COUNT nmore;

		assert_err(dat_evd_wait(evd, 1000, 1, &ev, &nmore), DAT_INVALID_STATE);
	}
	/* post_se raises the upcall in a provider thread, not in ours */
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)5;
	assert_ok(dat_evd_post_se(evd, &ev));
	WAIT_UNTIL(atomic_load(&r->calls) == 1, 2000);
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(atomic_load(&r->seen[5]), 1);
	assert_int_equal(atomic_load(&r->in_caller), 0);
	/* the race-free arm counts what is queued */
	assert_ok(dat_evd_modify_upcall(evd, DAT_UPCALL_DISABLE, DAT_UPCALL_SAME,
					DAT_UPCALL_INVOC_NEW));
	ev.event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)6;
	assert_ok(dat_evd_post_se(evd, &ev));
	assert_ok(dat_evd_arm_upcall(evd, DAT_UPCALL_MANY, DAT_UPCALL_SAME, DAT_UPCALL_INVOC_NEW,
				     &np));
	assert_int_equal(np, 1);
	usleep(20000);
	assert_int_equal(atomic_load(&r->calls), 1);	/* the edge rule */
	drain(r);
	assert_int_equal(atomic_load(&r->seen[6]), 1);
	assert_ok(dat_evd_free(evd));
	assert_ok(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
	rec_free(r);
}

/* From inside an upcall: TEARDOWN of its own EVD, evd_free of it and
 * ia_close are refused (they would wait for the upcall itself); then
 * evd_free from outside waits for a running upcall to return. */
static void test_self_operations_refused_and_free_waits(void **state)
{
	DAT_EVD_HANDLE async, evd;
	DAT_IA_HANDLE ia = open_ia(&async);
	struct rec *r = rec_new();
	struct tag t = { r, DAT_UPCALL_SINGLE_INSTANCE, 0 };
	DAT_UPCALL_OBJECT obj = { &t, upcall };
	DAT_EVENT ev;
	uint64_t t0;

	(void)state;
	r->ia = ia;
	assert_ok(dat_evd_kcreate(ia, 16, DAT_UPCALL_SINGLE_INSTANCE, &obj,
				  DAT_EVD_SOFTWARE_FLAG, &evd));
	r->evd = evd;
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	atomic_store(&r->try_self, true);
	assert_ok(dat_evd_post_se(evd, &ev));
	WAIT_UNTIL(atomic_load(&r->calls) == 1, 2000);
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_rc(r->self_teardown, ERR(DAT_INVALID_STATE, 0));
	assert_err(r->self_free, DAT_INVALID_STATE);
	assert_err(r->self_close, DAT_INVALID_STATE);
	/* the EVD and IA are intact; a running upcall delays the free */
	atomic_store(&r->block, true);
	assert_ok(dat_evd_post_se(evd, &ev));
	WAIT_UNTIL(atomic_load(&r->blocked), 2000);
	assert_true(atomic_load(&r->blocked));
	{
		pthread_t rt;

		assert_int_equal(pthread_create(&rt, NULL, release_later, r), 0);
		t0 = now_ns();
		assert_ok(dat_evd_free(evd));
		if (now_ns() - t0 < 50000000u)
			fail_msg("dat_evd_free returned after %llu us while an upcall was running",
				 (unsigned long long)((now_ns() - t0) / 1000));
		assert_int_equal(atomic_load(&r->inflight), 0);
		pthread_join(rt, NULL);
	}
	assert_ok(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
	rec_free(r);
}

/* ------------------------------------------------------------ a connected pair */

struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_EP_HANDLE ep;
	uint8_t *buf;
};

struct pair {
	struct side s, c;
	struct rec *r;			/* the server's receive EVD */
	struct rec *rcm;		/* the server's CR and connection EVDs */
	struct tag tr, tcm;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
};

static void side_mem(struct side *x, size_t len)
{
	DAT_REGION_DESCRIPTION region;
	DAT_RMR_CONTEXT rctx;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	x->buf = aligned_alloc(4096, len);
	assert_non_null(x->buf);
	memset(x->buf, 0, len);
	assert_ok(dat_pz_create(x->ia, &x->pz));
	region.for_va = x->buf;
	assert_ok(dat_lmr_create(x->ia, DAT_MEM_TYPE_VIRTUAL, region, len, x->pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &x->lmr, &x->lctx, &rctx,
				 &rlen, &raddr));
}

static DAT_EP_ATTR ep_attr(void)
{
	DAT_EP_ATTR a;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = NRECV;
	a.max_recv_dtos = NRECV;
	a.max_request_iov = 1;
	a.max_recv_iov = 1;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	return a;
}

static bool port_avoided(DAT_CONN_QUAL p)
{
	return p == 15828 || p == 45248 || p >= 62000;	/* the stock programs' */
}

static int pair_setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	DAT_UPCALL_OBJECT o;
	DAT_EP_ATTR a = ep_attr();
	DAT_PSP_HANDLE held[8];
	int nheld = 0;

	assert_non_null(p);
	watchdog(__func__, 30);
	p->r = rec_new();
	p->rcm = rec_new();
	p->tr = (struct tag){ p->r, DAT_UPCALL_SINGLE_INSTANCE, 0 };
	p->tcm = (struct tag){ p->rcm, DAT_UPCALL_SINGLE_INSTANCE, 0 };
	/* server: CR and connection events by upcall, receives by upcall */
	p->s.ia = open_ia(&p->s.async);
	side_mem(&p->s, NRECV * MSG);
	o = (DAT_UPCALL_OBJECT){ &p->tcm, upcall };
	assert_ok(dat_evd_kcreate(p->s.ia, 8, DAT_UPCALL_SINGLE_INSTANCE, &o, DAT_EVD_CR_FLAG,
				  &p->s.cr));
	assert_ok(dat_evd_kcreate(p->s.ia, 8, DAT_UPCALL_SINGLE_INSTANCE, &o,
				  DAT_EVD_CONNECTION_FLAG, &p->s.conn));
	o = (DAT_UPCALL_OBJECT){ &p->tr, upcall };
	assert_ok(dat_evd_kcreate(p->s.ia, 256, DAT_UPCALL_SINGLE_INSTANCE, &o,
				  DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG, &p->s.rcv));
	assert_ok(dat_evd_create(p->s.ia, NRECV, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->s.req));
	assert_ok(dat_ep_create(p->s.ia, p->s.pz, p->s.rcv, p->s.req, p->s.conn, &a, &p->s.ep));
	p->r->evd = p->s.rcv;
	p->r->ep = p->s.ep;
	p->r->lctx = p->s.lctx;
	p->r->buf = p->s.buf;
	p->rcm->evd = p->s.conn;
	for (;;) {
		assert_ok(dat_psp_create_any(p->s.ia, &p->port, p->s.cr, DAT_PSP_CONSUMER_FLAG,
					     &p->psp));
		if (!port_avoided(p->port) || nheld == 8)
			break;
		held[nheld++] = p->psp;
	}
	while (nheld > 0)
		assert_ok(dat_psp_free(held[--nheld]));
	/* client: plain EVDs */
	p->c.ia = open_ia(&p->c.async);
	side_mem(&p->c, NRECV * MSG);
	assert_ok(dat_evd_create(p->c.ia, NRECV, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->c.req));
	assert_ok(dat_evd_create(p->c.ia, NRECV, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->c.rcv));
	assert_ok(dat_evd_create(p->c.ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &p->c.conn));
	assert_ok(dat_ep_create(p->c.ia, p->c.pz, p->c.rcv, p->c.req, p->c.conn, &a, &p->c.ep));
	*state = p;
	alarm(0);
	return 0;
}

static int pair_teardown(void **state)
{
	struct pair *p = *state;

	watchdog(__func__, 30);
	assert_ok(dat_ia_close(p->c.ia, DAT_CLOSE_ABRUPT_FLAG));
	assert_ok(dat_ia_close(p->s.ia, DAT_CLOSE_ABRUPT_FLAG));
	free(p->c.buf);
	free(p->s.buf);
	rec_free(p->r);
	rec_free(p->rcm);
	free(p);
	alarm(0);
	return 0;
}

/* The connection request and ESTABLISHED arrive by upcall (push path). */
static void connect_pair(struct pair *p)
{
	struct sockaddr_in sa;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	for (uint64_t i = 0; i < NRECV; i++)
		assert_ok(repost(p->r, i));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_ok(dat_ep_connect(p->c.ep, (DAT_IA_ADDRESS_PTR)&sa, p->port, 5 * SEC, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
	WAIT_UNTIL(atomic_load(&p->rcm->last_cr) != NULL, 5000);
	if (!atomic_load(&p->rcm->last_cr))
		fail_msg("no connection request reached the CR EVD's upcall within 5 s");
	assert_int_equal(atomic_load(&p->rcm->in_caller), 0);
	assert_ok(dat_cr_accept(atomic_load(&p->rcm->last_cr), p->s.ep, 0, NULL));
	assert_ok(dat_evd_wait(p->c.conn, 5 * SEC, 1, &ev, &nmore));
	assert_int_equal(ev.event_number, DAT_CONNECTION_EVENT_ESTABLISHED);
	WAIT_UNTIL(atomic_load(&p->rcm->last_ep) == p->s.ep, 5000);
	assert_ptr_equal(atomic_load(&p->rcm->last_ep), p->s.ep);
}

struct client {
	struct pair *p;
	uint64_t n;
	atomic_bool done;
	DAT_RETURN rc;
};

/* Streams n sequence-numbered messages, at most NRECV/2 outstanding. */
static void *client_main(void *arg)
{
	struct client *c = arg;
	struct side *x = &c->p->c;
	uint64_t next = 1, out = 0;
	const int win = NRECV / 2;
	int freeslot[NRECV / 2], nfree = win;

	for (int i = 0; i < win; i++)
		freeslot[i] = i;
	while (next <= c->n || out > 0) {
		DAT_EVENT ev;
		DAT_COUNT nmore;

		while (nfree > 0 && next <= c->n) {
			int slot = freeslot[--nfree];
			DAT_LMR_TRIPLET t = {
				.lmr_context = x->lctx,
				.virtual_address = (DAT_VADDR)(uintptr_t)(x->buf + (size_t)slot * MSG),
				.segment_length = MSG,
			};
			DAT_DTO_COOKIE ck;

			memcpy(x->buf + (size_t)slot * MSG, &next, sizeof(next));
			ck.as_64 = (uint64_t)slot;
			c->rc = dat_ep_post_send(x->ep, 1, &t, ck, DAT_COMPLETION_DEFAULT_FLAG);
			if (c->rc != DAT_SUCCESS)
				goto out;
			next++;
			out++;
		}
		c->rc = dat_evd_wait(x->req, 10 * SEC, 1, &ev, &nmore);
		if (c->rc != DAT_SUCCESS)
			goto out;
		if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS) {
			c->rc = ERR(DAT_INTERNAL_ERROR, 0);
			goto out;
		}
		freeslot[nfree++] = (int)ev.event_data.dto_completion_event_data.user_cookie.as_64;
		out--;
	}
out:
	atomic_store(&c->done, true);
	return NULL;
}

struct producer {
	DAT_EVD_HANDLE evd;
	uint64_t first, n;
	atomic_bool done;
};

static void *producer_main(void *arg)
{
	struct producer *pr = arg;

	for (uint64_t i = 0; i < pr->n; i++) {
		DAT_EVENT ev;

		memset(&ev, 0, sizeof(ev));
		ev.event_number = DAT_SOFTWARE_EVENT;
		ev.event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)(pr->first + i);
		while (dat_evd_post_se(pr->evd, &ev) != DAT_SUCCESS)
			sched_yield();
	}
	atomic_store(&pr->done, true);
	return NULL;
}

static void test_stress_real_completions_and_software_events(void **state)
{
	enum { NPROD = 3, MAXROUNDS = 1 << 16 };
	struct pair *p = *state;
	struct rec *r = p->r;
	const char *env = getenv("UPCALL_STRESS_EVENTS");
	uint64_t total = env ? strtoull(env, NULL, 10) : 1000000u, nmsg, nsw;
	static const int pols[] = { DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_MANY, DAT_UPCALL_NOTIFY,
				    DAT_UPCALL_DISABLE, DAT_UPCALL_TEARDOWN };
	struct tag *tags = calloc(MAXROUNDS, sizeof(*tags));
	struct producer pr[NPROD];
	pthread_t pt[NPROD], ct;
	struct client c;
	unsigned seed = 4242, round = 1, teardown_bad = 0;
	uint64_t t0 = now_ns(), lost_sw = 0, lost_msg = 0, dup = 0;

	assert_non_null(tags);
	if (total < 1000)
		total = 1000;
	nmsg = total / 10;
	nsw = total - nmsg;
	watchdog(__func__, 600);
	connect_pair(p);
	memset(&c, 0, sizeof(c));
	c.p = p;
	c.n = nmsg;
	assert_int_equal(pthread_create(&ct, NULL, client_main, &c), 0);
	for (int i = 0; i < NPROD; i++) {
		pr[i].evd = p->s.rcv;
		pr[i].first = 1 + (uint64_t)i * (nsw / NPROD);
		pr[i].n = i == NPROD - 1 ? nsw - (uint64_t)i * (nsw / NPROD) : nsw / NPROD;
		atomic_init(&pr[i].done, false);
		assert_int_equal(pthread_create(&pt[i], NULL, producer_main, &pr[i]), 0);
	}
	/* the consumer flips policies while the traffic runs */
	for (;;) {
		bool done = atomic_load(&c.done);
		int pol = pols[rand_r(&seed) % 5];
		DAT_UPCALL_FLAG flag = (DAT_UPCALL_FLAG)(rand_r(&seed) % 2);
		DAT_COUNT np;

		for (int i = 0; i < NPROD; i++)
			done = done && atomic_load(&pr[i].done);
		if (done)
			break;
		if (round >= MAXROUNDS - 1)
			pol = DAT_UPCALL_DISABLE;
		if (pol == DAT_UPCALL_DISABLE || pol == DAT_UPCALL_TEARDOWN) {
			assert_ok(dat_evd_arm_upcall(p->s.rcv, (DAT_UPCALL_POLICY)pol,
						     DAT_UPCALL_SAME, flag, &np));
			if (pol == DAT_UPCALL_TEARDOWN) {
				atomic_store(&r->torn, true);
				if (atomic_load(&r->inflight))
					teardown_bad++;
			}
			for (int k = 0; k < 256; k++) {		/* the consumer's share */
				DAT_EVENT ev;

				if (dat_evd_dequeue(p->s.rcv, &ev) != DAT_SUCCESS)
					break;
				handle(r, &ev);
			}
		} else {
			struct tag *t = &tags[round];
			DAT_UPCALL_OBJECT o = { t, upcall };

			t->r = r;
			t->policy = pol;
			t->round = round++;
			atomic_store(&r->torn, false);
			assert_ok(dat_evd_arm_upcall(p->s.rcv, (DAT_UPCALL_POLICY)pol, &o, flag,
						     &np));
			drain(r);	/* the final poll of the edge rule */
		}
		if (round % 32 == 0)
			(void)dat_evd_resize(p->s.rcv, (round / 32) % 2 ? 512 : 256);
		usleep(500);
	}
	pthread_join(ct, NULL);
	for (int i = 0; i < NPROD; i++)
		pthread_join(pt[i], NULL);
	if (c.rc != DAT_SUCCESS) {
		char b[160];

		fail_msg("client: %s", rc_name(c.rc, b, sizeof(b)));
	}
	/* stop upcalls; whatever is left is the consumer's */
	assert_ok(dat_evd_modify_upcall(p->s.rcv, DAT_UPCALL_TEARDOWN, DAT_UPCALL_SAME,
					DAT_UPCALL_INVOC_NEW));
	for (int tries = 0; tries < 200; tries++) {
		drain(r);
		usleep(5000);
	}
	for (uint64_t s = 1; s <= nsw; s++) {
		unsigned v = atomic_load(&r->seen[s]);

		lost_sw += v == 0;
		dup += v > 1;
	}
	for (uint64_t s = 1; s <= nmsg; s++) {
		unsigned v = atomic_load(&r->rseen[s]);

		lost_msg += v == 0;
		dup += v > 1;
	}
	print_message("upcall stress: %llu software events + %llu receive completions in %.1f s, "
		      "%llu upcalls, %u arms, max %d concurrent\n", (unsigned long long)nsw,
		      (unsigned long long)nmsg, (double)(now_ns() - t0) / 1e9,
		      (unsigned long long)atomic_load(&r->calls), round,
		      atomic_load(&r->max_inflight));
	if (lost_sw || lost_msg || dup)
		fail_msg("%llu software events and %llu messages never delivered, %llu delivered "
			 "twice", (unsigned long long)lost_sw, (unsigned long long)lost_msg,
			 (unsigned long long)dup);
	assert_int_equal(atomic_load(&r->bad), 0);
	assert_int_equal(atomic_load(&r->repost_err), 0);
	assert_int_equal(atomic_load(&r->overlap), 0);
	assert_int_equal(atomic_load(&r->after_teardown), 0);
	assert_int_equal(teardown_bad, 0);
	assert_int_equal(atomic_load(&r->in_caller), 0);
	free(tags);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_extension_reported),
		cmocka_unit_test(test_kcreate_query_and_bad_arguments),
		cmocka_unit_test(test_self_operations_refused_and_free_waits),
		cmocka_unit_test_setup_teardown(test_stress_real_completions_and_software_events,
						pair_setup, pair_teardown),
	};
	watchdog_install();
	/* three dispatcher threads: MANY really runs upcalls side by side */
	setenv("DAPL_OFI_UPCALL_THREADS", "3", 0);
	default_dat_override();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
