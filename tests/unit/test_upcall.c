/*
 * Event-core tests of the kDAT upcall policies (dfi_evq_set_upcall,
 * dfi_evq_dispatch, the dispatcher of upcall.c), with software posts and a
 * fake completion source standing in for a libfabric CQ.
 *
 * One test per rule of the upcall contract (evd-contract.md 1.3, 7 cases 1,
 * 8, 9, 10; dat_ofi_extensions.h), each written so that breaking the rule
 * makes it fail, and a stress test (several producers, every policy and
 * invocation flag, final polls, resizes) that counts every event.
 *
 * Upcalls record into a struct rec from dispatcher threads; cmocka asserts
 * run on the main thread only, after the fact.
 */
#include "evtest.h"
#include "fake_source.h"

#define QLEN		64
#define FLAGS		(DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG)
#define MAXSEQ		(1u << 24)	/* UPCALL_STRESS_EVENTS up to 1.5*10^7 */

/* ------------------------------------------------------------ recorder */

struct rec {
	struct dfi_evq *q;
	_Atomic(uint8_t) *seen;		/* per seq: deliveries (upcall or dequeue) */
	atomic_int inflight, max_inflight;
	atomic_uint_fast64_t calls, nulls, more_true, bad_null_more;
	atomic_uint_fast64_t single_overlap;	/* SINGLE/NOTIFY upcall overlapped one it must not */
	struct { bool on; unsigned round; int policy; } run[64];	/* upcalls in their bodies */
	atomic_uint_fast64_t after_mark;	/* upcalls entered after `mark` was set */
	atomic_bool mark;
	atomic_int sleep_us;
	atomic_bool drain_on_notify;	/* NOTIFY upcall dequeues until empty */
	atomic_bool block;		/* upcall spins while set */
	atomic_bool blocked;		/* an upcall is spinning */
	/* delivery order (upcalls only), under lock */
	pthread_mutex_t lock;
	uint64_t *order;
	DAT_BOOLEAN *more;
	size_t norder, cap;
	/* what an upcall did to its own EVD */
	void (*hook)(struct rec *r, const DAT_EVENT *ev);
	DAT_RETURN hook_rc[4];
	void *hook_rc_ptr;		/* the hook's own argument */
};

static struct rec *rec_new(struct dfi_evq *q)
{
	struct rec *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	r->q = q;
	r->seen = calloc(MAXSEQ, 1);
	assert_non_null(r->seen);
	r->cap = 4096;
	r->order = calloc(r->cap, sizeof(uint64_t));
	r->more = calloc(r->cap, sizeof(DAT_BOOLEAN));
	assert_non_null(r->order);
	assert_non_null(r->more);
	pthread_mutex_init(&r->lock, NULL);
	return r;
}

static void rec_free(struct rec *r)
{
	pthread_mutex_destroy(&r->lock);
	free((void *)r->seen);
	free(r->order);
	free(r->more);
	free(r);
}

static void rec_seen(struct rec *r, const DAT_EVENT *ev)
{
	uint64_t s = ev_seq(ev);

	if (s < MAXSEQ)
		atomic_fetch_add(&r->seen[s], 1);
}

/* policy tag of an upcall object: which policy it was armed with, and in
 * which arm (round) */
struct tagged {
	struct rec *r;
	int policy;
	unsigned round;
};

static bool exclusive(int policy)
{
	return policy == DAT_UPCALL_SINGLE_INSTANCE || policy == DAT_UPCALL_NOTIFY;
}

/* Two upcalls in their bodies at once must be allowed: a SINGLE_INSTANCE
 * or NOTIFY upcall may overlap only an upcall of a MANY arm made after its
 * own (that one may legitimately start once MANY is in force, even before
 * the older upcall's body is entered).  Returns the slot taken. */
static int run_enter(struct rec *r, unsigned round, int policy)
{
	int slot = -1;

	pthread_mutex_lock(&r->lock);
	for (int i = 0; i < 64; i++) {
		if (!r->run[i].on) {
			if (slot < 0)
				slot = i;
			continue;
		}
		if ((exclusive(policy) &&
		     !(r->run[i].policy == DAT_UPCALL_MANY && r->run[i].round > round)) ||
		    (exclusive(r->run[i].policy) &&
		     !(policy == DAT_UPCALL_MANY && round > r->run[i].round)))
			atomic_fetch_add(&r->single_overlap, 1);
	}
	if (slot >= 0) {
		r->run[slot].on = true;
		r->run[slot].round = round;
		r->run[slot].policy = policy;
	}
	pthread_mutex_unlock(&r->lock);
	return slot;
}

static void run_leave(struct rec *r, int slot)
{
	pthread_mutex_lock(&r->lock);
	if (slot >= 0)
		r->run[slot].on = false;
	pthread_mutex_unlock(&r->lock);
}

static void up_body(struct rec *r, int policy, unsigned round, const DAT_EVENT *ev,
		    DAT_BOOLEAN more)
{
	int now = atomic_fetch_add(&r->inflight, 1) + 1;
	int m = atomic_load(&r->max_inflight);
	int slot = run_enter(r, round, policy);

	while (now > m && !atomic_compare_exchange_weak(&r->max_inflight, &m, now))
		;
	if (atomic_load(&r->mark))
		atomic_fetch_add(&r->after_mark, 1);
	if (more)
		atomic_fetch_add(&r->more_true, 1);
	if (ev) {
		rec_seen(r, ev);
		pthread_mutex_lock(&r->lock);
		if (r->norder < r->cap) {
			r->order[r->norder] = ev_seq(ev);
			r->more[r->norder] = more;
		}
		r->norder++;
		pthread_mutex_unlock(&r->lock);
	} else {
		atomic_fetch_add(&r->nulls, 1);
		if (!more)
			atomic_fetch_add(&r->bad_null_more, 1);
		if (atomic_load(&r->drain_on_notify)) {
			DAT_EVENT e;

			while (dfi_evq_dequeue(r->q, &e) == DAT_SUCCESS)
				rec_seen(r, &e);
		}
	}
	if (r->hook)
		r->hook(r, ev);
	while (atomic_load(&r->block)) {
		atomic_store(&r->blocked, true);
		t_sleep_us(200);
	}
	if (atomic_load(&r->sleep_us))
		t_sleep_us((unsigned)atomic_load(&r->sleep_us));
	run_leave(r, slot);
	atomic_fetch_sub(&r->inflight, 1);
	atomic_fetch_add(&r->calls, 1);
}

static void up_fn(DAT_PVOID inst, const DAT_EVENT *ev, DAT_BOOLEAN more)
{
	struct tagged *t = inst;

	up_body(t->r, t->policy, t->round, ev, more);
}

static DAT_UPCALL_OBJECT obj_for(struct tagged *t)
{
	return (DAT_UPCALL_OBJECT){ t, up_fn };
}

/* Poll until cond holds or ms pass. */
#define WAIT_UNTIL(cond, ms) do {						\
		uint64_t d_ = t_now() + (uint64_t)(ms) * MS;			\
		while (!(cond) && t_now() < d_)					\
			t_sleep_us(200);					\
	} while (0)

static struct dfi_disp *disp_new(int threads, int budget)
{
	struct dfi_disp *d = calloc(1, sizeof(*d));

	assert_non_null(d);
	assert_int_equal(dfi_disp_start(d, threads, budget), 0);
	return d;
}

static void disp_free(struct dfi_disp *d)
{
	dfi_disp_stop(d);
	free(d);
}

static void post(struct dfi_evq *q, uint64_t seq)
{
	DAT_EVENT e = ev_sw(seq);

	assert_int_equal(dfi_evq_post_se(q, &e), DAT_SUCCESS);
}

static DAT_RETURN arm(struct dfi_evq *q, struct dfi_disp *d, struct tagged *t, int policy,
		      int flag, DAT_COUNT *npending)
{
	DAT_UPCALL_OBJECT o;

	t->policy = policy;
	o = obj_for(t);
	return dfi_evq_set_upcall(q, d, policy, &o, flag, npending);
}

static void expect_seen_once(struct rec *r, uint64_t from, uint64_t to)
{
	for (uint64_t s = from; s <= to; s++)
		if (atomic_load(&r->seen[s]) != 1)
			fail_msg("event %llu delivered %u times (expected exactly once)",
				 (unsigned long long)s, (unsigned)atomic_load(&r->seen[s]));
}

/* ------------------------------------------------------------ the edge rule */

/* Rule 1: events queued when the upcall is enabled raise no upcall; the
 * consumer's final poll finds them; a later event raises one. */
static void test_new_queued_events_raise_no_upcall(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	DAT_COUNT np = -1;
	DAT_EVENT ev;

	(void)state;
	post(q, 1);
	post(q, 2);
	post(q, 3);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, &np),
			 DAT_SUCCESS);
	assert_int_equal(np, 3);
	t_sleep_us(50000);
	assert_int_equal(atomic_load(&r->calls), 0);	/* rule broken: an old event raised one */
	for (uint64_t s = 1; s <= 3; s++) {		/* the final poll */
		assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
		assert_int_equal(ev_seq(&ev), s);
	}
	assert_int_equal(DAT_GET_TYPE(dfi_evq_dequeue(q, &ev)), DAT_QUEUE_EMPTY);
	post(q, 4);
	WAIT_UNTIL(atomic_load(&r->calls) == 1, 2000);
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(r->order[0], 4);
	assert_int_equal(r->more[0], DAT_FALSE);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* Events the consumer has not dequeued yet go first when a new one raises
 * an upcall: delivery follows the queue, exactly once. */
static void test_new_arrival_delivers_queue_in_order(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	DAT_EVENT ev;

	(void)state;
	post(q, 1);
	post(q, 2);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	post(q, 3);
	WAIT_UNTIL(atomic_load(&r->calls) == 3, 2000);
	assert_int_equal(atomic_load(&r->calls), 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(r->order[i], i + 1);
		assert_int_equal(r->more[i], i < 2 ? DAT_TRUE : DAT_FALSE);
	}
	assert_int_equal(DAT_GET_TYPE(dfi_evq_dequeue(q, &ev)), DAT_QUEUE_EMPTY);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* INVOC_ANY is level: queued events are delivered at once; more_events is
 * TRUE exactly while events remain. */
static void test_any_delivers_queued_with_truthful_more(void **state)
{
	struct dfi_disp *d = disp_new(1, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	DAT_COUNT np = -1;

	(void)state;
	for (uint64_t s = 1; s <= 5; s++)
		post(q, s);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_ANY, &np),
			 DAT_SUCCESS);
	assert_int_equal(np, 5);
	WAIT_UNTIL(atomic_load(&r->calls) == 5, 2000);
	assert_int_equal(atomic_load(&r->calls), 5);
	for (size_t i = 0; i < 5; i++) {
		assert_int_equal(r->order[i], i + 1);
		assert_int_equal(r->more[i], i < 4 ? DAT_TRUE : DAT_FALSE);
	}
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* Completions still in the source at the arm count as queued (npending),
 * and raise no upcall; the next completion does, through the progress
 * context (source fd -> dfi_evq_source_notify). */
static void test_arm_reports_source_completions(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct fake_source *fs = fake_source_new();
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	struct fake_progress *p;
	DAT_COUNT np = -1;
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);
	p = fake_progress_start(q, fs);
	ev = ev_dto(1);
	fake_source_inject(fs, &ev);
	ev = ev_dto(2);
	fake_source_inject(fs, &ev);
	post(q, 3);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_MANY, DAT_UPCALL_INVOC_NEW, &np), DAT_SUCCESS);
	assert_int_equal(np, 3);
	t_sleep_us(50000);
	assert_int_equal(atomic_load(&r->calls), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_dequeue(q, &ev)), DAT_QUEUE_EMPTY);
	assert_true(fake_source_armed(fs));	/* notification set up at the arm */
	ev = ev_dto(4);
	fake_source_inject(fs, &ev);
	WAIT_UNTIL(atomic_load(&r->calls) == 1, 2000);
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(r->order[0], 4);
	fake_progress_stop(p);
	evq_free(q);
	fake_source_free(fs);
	disp_free(d);
	rec_free(r);
}

/* ------------------------------------------ who runs the upcall (latency) */

/* The thread each upcall ran on, by delivery order (hook). */
static pthread_t up_threads[256];
static atomic_int n_up_threads;

static void record_thread(struct rec *r, const DAT_EVENT *ev)
{
	int i = atomic_fetch_add(&n_up_threads, 1);

	(void)r;
	(void)ev;
	if (i < 256)
		up_threads[i] = pthread_self();
}

static int disp_idle(struct dfi_disp *d)
{
	int n;

	pthread_mutex_lock(&d->lock);
	n = d->nidle;
	pthread_mutex_unlock(&d->lock);
	return n;
}

/* New work wakes the dispatcher thread that went idle last, whose CPU and
 * caches are warm (waking the longest sleeper cost 4 to 10 times the
 * wake-up on 2 CPUs): one event at a time, with every thread idle before
 * each post, all upcalls run on one thread. */
static void test_idle_thread_woken_last_in_first_out(void **state)
{
	struct dfi_disp *d = disp_new(4, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };

	(void)state;
	atomic_store(&n_up_threads, 0);
	r->hook = record_thread;
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	for (uint64_t i = 1; i <= 40; i++) {
		WAIT_UNTIL(disp_idle(d) == 4, 2000);
		assert_int_equal(disp_idle(d), 4);
		post(q, i);
		WAIT_UNTIL(atomic_load(&r->calls) == i, 2000);
		assert_int_equal(atomic_load(&r->calls), i);
	}
	for (int i = 1; i < 40; i++)
		assert_true(pthread_equal(up_threads[i], up_threads[0]));
	expect_seen_once(r, 1, 40);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_TEARDOWN, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* A dispatcher that spins before it sleeps (DAPL_OFI_UPCALL_SPIN_US) takes
 * new work without being woken - it is not on the idle stack while it
 * spins - delivers everything once and in order, and stops at once when
 * told to, even in the middle of a long spin (the watchdog catches a hang). */
static void test_spinning_dispatcher(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	int spun = 0;

	(void)state;
	dfi_disp_set_spin(d, 200 * MS);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	for (uint64_t i = 1; i <= 200; i++) {
		post(q, i);
		WAIT_UNTIL(atomic_load(&r->calls) == i, 2000);
		assert_int_equal(atomic_load(&r->calls), i);
		spun += disp_idle(d) < 2;	/* the thread that ran it spins */
	}
	assert_true(spun > 0);
	expect_seen_once(r, 1, 200);
	for (size_t i = 0; i < 200; i++)
		assert_int_equal(r->order[i], i + 1);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_TEARDOWN, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	evq_free(q);
	disp_free(d);			/* while a thread spins: must not wait it out */
	rec_free(r);
}

/* The progress thread's notification (dfi_evq_source_notify_irq) runs the
 * upcalls due in the calling thread - kDAT's interrupt context, one
 * wake-up less than a hand-off - a budgeted turn; what the budget leaves
 * goes to the dispatcher threads.  Every event once, in order. */
static void test_irq_notify_runs_upcalls_here(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct fake_source *fs = fake_source_new();
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	pthread_t me = pthread_self();
	bool others = false;
	DAT_EVENT ev;

	(void)state;
	atomic_store(&n_up_threads, 0);
	r->hook = record_thread;
	fake_source_attach(fs, q);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	for (uint64_t i = 1; i <= 5; i++) {
		ev = ev_dto(i);
		fake_source_inject(fs, &ev);
	}
	dfi_evq_source_notify_irq(q);
	assert_int_equal(atomic_load(&r->calls), 5);	/* done before it returned */
	for (int i = 0; i < 5; i++)
		assert_true(pthread_equal(up_threads[i], me));

	for (uint64_t i = 6; i <= 45; i++) {		/* 40: more than the budget */
		ev = ev_dto(i);
		fake_source_inject(fs, &ev);
	}
	dfi_evq_source_notify_irq(q);
	WAIT_UNTIL(atomic_load(&r->calls) == 45, 2000);
	assert_int_equal(atomic_load(&r->calls), 45);
	for (int i = 5; i < 21; i++)
		assert_true(pthread_equal(up_threads[i], me));	/* one budget here */
	for (int i = 21; i < 45; i++)
		others = others || !pthread_equal(up_threads[i], me);
	assert_true(others);				/* the rest by a dispatcher */
	assert_int_equal(atomic_load(&r->max_inflight), 1);
	expect_seen_once(r, 1, 45);
	for (size_t i = 0; i < 45; i++)
		assert_int_equal(r->order[i], i + 1);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_TEARDOWN, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	evq_free(q);
	fake_source_free(fs);
	disp_free(d);
	rec_free(r);
}

/* SINGLE_INSTANCE holds for the progress thread too: while a dispatcher
 * thread runs an upcall, the notification does not run another; the
 * running instance's re-check delivers the new event. */
static void test_irq_notify_respects_single_instance(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct fake_source *fs = fake_source_new();
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	atomic_store(&r->block, true);
	post(q, 1);
	WAIT_UNTIL(atomic_load(&r->blocked), 2000);
	assert_true(atomic_load(&r->blocked));
	ev = ev_dto(2);
	fake_source_inject(fs, &ev);
	dfi_evq_source_notify_irq(q);		/* must return: no second instance */
	assert_int_equal(atomic_load(&r->calls), 0);
	assert_int_equal(atomic_load(&r->max_inflight), 1);
	atomic_store(&r->block, false);
	WAIT_UNTIL(atomic_load(&r->calls) == 2, 2000);
	assert_int_equal(atomic_load(&r->calls), 2);
	assert_int_equal(atomic_load(&r->max_inflight), 1);
	assert_int_equal(atomic_load(&r->single_overlap), 0);
	assert_int_equal(r->order[0], 1);
	assert_int_equal(r->order[1], 2);
	evq_free(q);
	fake_source_free(fs);
	disp_free(d);
	rec_free(r);
}

/* An EVD under an upcall policy is never left to its consumer's calls: the
 * progress context must keep watching its source (progress.c). */
static void test_policy_keeps_progress_watching(void **state)
{
	struct dfi_disp *d = disp_new(1, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };

	(void)state;
	assert_true(dfi_evq_consumer_drives(q, true));
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_MANY, DAT_UPCALL_INVOC_NEW, NULL), DAT_SUCCESS);
	assert_false(dfi_evq_consumer_drives(q, true));
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_DISABLE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	assert_true(dfi_evq_consumer_drives(q, true));
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* The SMP window (rule 6): a completion lands between the arm's last look
 * and the arm itself, or right after the arm.  Either way it is delivered. */
static void inject_once(struct fake_source *fs, void *arg)
{
	atomic_int *left = arg;

	if (atomic_fetch_sub(left, 1) == 1) {
		DAT_EVENT ev = ev_dto(7);

		fake_source_inject(fs, &ev);
	}
}

static void smp_window(bool before)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct fake_source *fs = fake_source_new();
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	struct fake_progress *p;
	atomic_int left = 1;
	DAT_COUNT np = -1;
	DAT_EVENT ev;

	fake_source_attach(fs, q);
	p = fake_progress_start(q, fs);
	if (before)
		fake_source_set_hooks(fs, inject_once, &left, NULL, NULL);
	else
		fake_source_set_hooks(fs, NULL, NULL, inject_once, &left);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, &np),
			 DAT_SUCCESS);
	assert_int_equal(np, 0);
	assert_true(atomic_load(&left) <= 0);	/* the hook ran inside the arm */
	WAIT_UNTIL(atomic_load(&r->calls) == 1, 2000);
	if (atomic_load(&r->calls) != 1)
		fail_msg("completion injected %s the arm was never delivered (lost wake-up)",
			 before ? "just before" : "just after");
	assert_int_equal(r->order[0], 7);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_dequeue(q, &ev)), DAT_QUEUE_EMPTY);
	fake_source_set_hooks(fs, NULL, NULL, NULL, NULL);
	fake_progress_stop(p);
	evq_free(q);
	fake_source_free(fs);
	disp_free(d);
	rec_free(r);
}

static void test_smp_window_before_arm(void **state)
{
	(void)state;
	smp_window(true);
}

static void test_smp_window_after_arm(void **state)
{
	(void)state;
	smp_window(false);
}

/* A completion read from the source by a dequeue (not by the progress
 * context) is an arrival too: the rest of that read is not stranded. */
static void test_dequeue_read_leaves_no_stranded_event(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct fake_source *fs = fake_source_new();
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);	/* no progress context: only the dequeue reads */
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	for (uint64_t s = 1; s <= 3; s++) {
		ev = ev_dto(s);
		fake_source_inject(fs, &ev);
	}
	assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 1);
	WAIT_UNTIL(atomic_load(&r->calls) == 2, 2000);
	assert_int_equal(atomic_load(&r->calls), 2);
	assert_int_equal(r->order[0], 2);
	assert_int_equal(r->order[1], 3);
	evq_free(q);
	fake_source_free(fs);
	disp_free(d);
	rec_free(r);
}

/* ------------------------------------------------------------ policies */

struct producer {
	struct dfi_evq *q;
	uint64_t first, n;
	atomic_uint_fast64_t *full;
};

static void producer_main(void *arg)
{
	struct producer *p = arg;

	for (uint64_t i = 0; i < p->n; i++) {
		DAT_EVENT e = ev_sw(p->first + i);

		while (dfi_evq_post_se(p->q, &e) != DAT_SUCCESS) {
			if (p->full)
				atomic_fetch_add(p->full, 1);
			sched_yield();
		}
	}
}

/* Case 8: SINGLE_INSTANCE with 4 producers and 4 dispatcher threads: never
 * two upcalls at once, every event once, per-producer order kept, and the
 * last event delivered (no latch lost when an upcall returns as one lands). */
static void test_single_instance_exclusion_under_load(void **state)
{
	enum { NP = 4, PER = 20000 };
	struct dfi_disp *d = disp_new(4, 16);
	struct dfi_evq *q = evq_new(1024, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	struct producer pr[NP];
	struct tjob *j[NP];
	uint64_t last[NP] = { 0 };

	(void)state;
	r->cap = NP * PER;
	r->order = realloc(r->order, r->cap * sizeof(uint64_t));
	r->more = realloc(r->more, r->cap * sizeof(DAT_BOOLEAN));
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	for (int i = 0; i < NP; i++) {
		pr[i] = (struct producer){ q, 1 + (uint64_t)i * PER, PER, NULL };
		j[i] = tjob_start(producer_main, &pr[i]);
	}
	for (int i = 0; i < NP; i++)
		tjob_join(j[i], 60000, "producer");
	WAIT_UNTIL(atomic_load(&r->calls) == NP * PER, 30000);
	assert_int_equal(atomic_load(&r->calls), NP * PER);
	assert_int_equal(atomic_load(&r->max_inflight), 1);
	assert_int_equal(atomic_load(&r->single_overlap), 0);
	expect_seen_once(r, 1, NP * PER);
	for (size_t i = 0; i < r->norder; i++) {
		int who = (int)((r->order[i] - 1) / PER);

		if (r->order[i] <= last[who])
			fail_msg("producer %d: event %llu delivered after %llu", who,
				 (unsigned long long)r->order[i], (unsigned long long)last[who]);
		last[who] = r->order[i];
	}
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* A slow SINGLE_INSTANCE upcall: events that land while it runs are
 * delivered after it returns, by the re-check, none lost. */
static void test_single_instance_latch_while_running(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };

	(void)state;
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	atomic_store(&r->block, true);
	post(q, 1);
	WAIT_UNTIL(atomic_load(&r->blocked), 2000);
	assert_true(atomic_load(&r->blocked));
	post(q, 2);		/* both land while upcall 1 runs */
	post(q, 3);
	t_sleep_us(20000);
	assert_int_equal(atomic_load(&r->max_inflight), 1);
	atomic_store(&r->block, false);
	WAIT_UNTIL(atomic_load(&r->calls) == 3, 2000);
	assert_int_equal(atomic_load(&r->calls), 3);
	assert_int_equal(atomic_load(&r->max_inflight), 1);
	assert_int_equal(r->order[1], 2);
	assert_int_equal(r->order[2], 3);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* MANY with several dispatcher threads really runs upcalls of one EVD
 * concurrently, still each event once. */
static void test_many_runs_concurrently(void **state)
{
	struct dfi_disp *d = disp_new(4, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };

	(void)state;
	atomic_store(&r->sleep_us, 5000);
	for (uint64_t s = 1; s <= 32; s++)
		post(q, s);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_MANY, DAT_UPCALL_INVOC_ANY, NULL), DAT_SUCCESS);
	WAIT_UNTIL(atomic_load(&r->calls) == 32, 5000);
	assert_int_equal(atomic_load(&r->calls), 32);
	if (atomic_load(&r->max_inflight) < 2)
		fail_msg("MANY with 4 dispatcher threads never ran two upcalls at once");
	expect_seen_once(r, 1, 32);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* NOTIFY: upcalls carry no event (more_events TRUE), one at a time; the
 * consumer dequeues; every event reaches it once. */
static void test_notify_is_a_doorbell(void **state)
{
	enum { N = 20000 };
	struct dfi_disp *d = disp_new(4, 16);
	struct dfi_evq *q = evq_new(256, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	struct producer pr = { q, 1, N, NULL };
	struct tjob *j;
	DAT_EVENT ev;

	(void)state;
	atomic_store(&r->drain_on_notify, true);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_NOTIFY, DAT_UPCALL_INVOC_NEW, NULL), DAT_SUCCESS);
	j = tjob_start(producer_main, &pr);
	tjob_join(j, 60000, "producer");
	WAIT_UNTIL(atomic_load(&r->seen[N]) == 1, 10000);
	t_sleep_us(20000);
	while (dfi_evq_dequeue(q, &ev) == DAT_SUCCESS)	/* nothing should be left */
		rec_seen(r, &ev);
	expect_seen_once(r, 1, N);
	assert_int_equal(r->norder, 0);			/* no event was passed */
	assert_true(atomic_load(&r->nulls) > 0);
	assert_int_equal(atomic_load(&r->bad_null_more), 0);
	assert_int_equal(atomic_load(&r->single_overlap), 0);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* ------------------------------------------------------------ disable, teardown */

struct storm {
	struct dfi_evq *q;
	atomic_bool stop;
	uint64_t next;
};

static void storm_main(void *arg)
{
	struct storm *s = arg;

	while (!atomic_load(&s->stop)) {
		DAT_EVENT e = ev_sw(s->next);

		if (dfi_evq_post_se(s->q, &e) == DAT_SUCCESS)
			s->next++;
		else
			t_sleep_us(50);
		if (s->next >= MAXSEQ - 1)
			break;
	}
}

/* Case 9: after DISABLE returns no upcall starts (the one in flight may
 * finish); after TEARDOWN returns none runs and none starts. */
static void disable_case(int how, int policy)
{
	struct dfi_disp *d = disp_new(4, 16);
	struct dfi_evq *q = evq_new(1024, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	struct storm st = { .q = q, .next = 1 };
	struct tjob *j;
	int inflight_at_return;
	DAT_EVENT ev;

	atomic_init(&st.stop, false);
	atomic_store(&r->sleep_us, 100);
	assert_int_equal(arm(q, d, &t, policy, DAT_UPCALL_INVOC_NEW, NULL), DAT_SUCCESS);
	j = tjob_start(storm_main, &st);
	WAIT_UNTIL(atomic_load(&r->calls) > 50, 5000);
	assert_true(atomic_load(&r->calls) > 50);
	assert_int_equal(dfi_evq_set_upcall(q, d, how, NULL, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	inflight_at_return = atomic_load(&r->inflight);
	atomic_store(&r->mark, true);
	if (how == DAT_UPCALL_TEARDOWN)
		assert_int_equal(inflight_at_return, 0);
	t_sleep_us(100000);		/* keep the storm going */
	atomic_store(&st.stop, true);
	tjob_join(j, 5000, "storm");
	/* An upcall that passed the policy check before the call returned may
	 * enter the body after `mark`: at most those in flight (DISABLE). */
	if ((int)atomic_load(&r->after_mark) > (how == DAT_UPCALL_TEARDOWN ? 0 : 4))
		fail_msg("%llu upcalls started after %s returned",
			 (unsigned long long)atomic_load(&r->after_mark),
			 how == DAT_UPCALL_TEARDOWN ? "TEARDOWN" : "DISABLE");
	WAIT_UNTIL(atomic_load(&r->inflight) == 0, 2000);
	/* everything not delivered is still queued, nothing lost or doubled */
	while (dfi_evq_dequeue(q, &ev) == DAT_SUCCESS)
		rec_seen(r, &ev);
	expect_seen_once(r, 1, st.next - 1);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

static void test_disable_stops_new_upcalls(void **state)
{
	(void)state;
	disable_case(DAT_UPCALL_DISABLE, DAT_UPCALL_SINGLE_INSTANCE);
	disable_case(DAT_UPCALL_DISABLE, DAT_UPCALL_MANY);
}

static void test_teardown_waits_for_upcalls_in_flight(void **state)
{
	(void)state;
	disable_case(DAT_UPCALL_TEARDOWN, DAT_UPCALL_SINGLE_INSTANCE);
	disable_case(DAT_UPCALL_TEARDOWN, DAT_UPCALL_MANY);
}

/* From inside its own upcall: TEARDOWN and free are refused (not a
 * deadlock); DISABLE and a re-arm work, and the re-armed EVD goes on. */
static void self_ops(struct rec *r, const DAT_EVENT *ev)
{
	DAT_UPCALL_OBJECT same;

	if (!ev || ev_seq(ev) != 1)
		return;
	r->hook_rc[0] = dfi_evq_set_upcall(r->q, NULL, DAT_UPCALL_TEARDOWN, NULL,
					   DAT_UPCALL_INVOC_NEW, NULL);
	r->hook_rc[1] = dfi_evq_free_begin(r->q);
	r->hook_rc[2] = dfi_evq_set_upcall(r->q, NULL, DAT_UPCALL_DISABLE, NULL,
					   DAT_UPCALL_INVOC_NEW, NULL);
	dfi_evq_get_upcall(r->q, NULL, &same, NULL);
	r->hook_rc[3] = dfi_evq_set_upcall(r->q, NULL, DAT_UPCALL_SINGLE_INSTANCE, &same,
					   DAT_UPCALL_INVOC_NEW, NULL);
}

static void test_own_upcall_teardown_refused_rearm_works(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	int pol = -5;

	(void)state;
	r->hook = self_ops;
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	post(q, 1);
	WAIT_UNTIL(atomic_load(&r->calls) == 1, 2000);
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(DAT_GET_TYPE(r->hook_rc[0]), DAT_INVALID_STATE);
	assert_int_equal(DAT_GET_TYPE(r->hook_rc[1]), DAT_INVALID_STATE);
	assert_int_equal(r->hook_rc[2], DAT_SUCCESS);
	assert_int_equal(r->hook_rc[3], DAT_SUCCESS);
	dfi_evq_get_upcall(q, &pol, NULL, NULL);
	assert_int_equal(pol, DAT_UPCALL_SINGLE_INSTANCE);
	post(q, 2);
	WAIT_UNTIL(atomic_load(&r->calls) == 2, 2000);
	assert_int_equal(atomic_load(&r->calls), 2);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* Case 10: free while an upcall runs blocks until it returns, then the
 * EVD can be released (ASan would see a use after free otherwise). */
struct freejob {
	struct dfi_evq *q;
	DAT_RETURN rc;
};

static void free_main(void *arg)
{
	struct freejob *f = arg;

	f->rc = dfi_evq_free_begin(f->q);
}

static void test_free_waits_for_running_upcall(void **state)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	struct freejob f = { q, -1 };
	struct tjob *j;

	(void)state;
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_MANY, DAT_UPCALL_INVOC_NEW, NULL), DAT_SUCCESS);
	atomic_store(&r->block, true);
	post(q, 1);
	post(q, 2);
	WAIT_UNTIL(atomic_load(&r->blocked), 2000);
	j = tjob_start(free_main, &f);
	t_sleep_us(50000);
	if (atomic_load(&j->done))
		fail_msg("dfi_evq_free_begin returned while an upcall was running");
	atomic_store(&r->block, false);
	tjob_join(j, 2000, "free");
	assert_int_equal(f.rc, DAT_SUCCESS);
	assert_int_equal(atomic_load(&r->inflight), 0);
	dfi_evq_fini(q);
	free(q);
	disp_free(d);
	rec_free(r);
}

/* ------------------------------------------------------------ interplay */

static void test_wait_refused_and_waiter_keeps_evd(void **state)
{
	struct dfi_disp *d = disp_new(1, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	struct waitjob *w;
	DAT_COUNT nmore;
	DAT_EVENT ev;

	(void)state;
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 1000, 1, &ev, &nmore)), DAT_INVALID_STATE);
	assert_int_equal(dfi_evq_set_upcall(q, d, DAT_UPCALL_DISABLE, NULL, 0, NULL), DAT_SUCCESS);
	w = waitjob_start(q, 2000000, 1);
	evq_wait_for_waiter(q, 1000);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_MANY, DAT_UPCALL_INVOC_NEW, NULL),
			 DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER));
	post(q, 9);
	waitjob_join(w, 3000);
	assert_int_equal(w->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&w->ev), 9);
	assert_int_equal(atomic_load(&r->calls), 0);
	free(w);
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

static void test_bad_arguments(void **state)
{
	struct dfi_disp *d = disp_new(1, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	DAT_UPCALL_OBJECT none = { NULL, NULL };
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	int pol = -5;

	(void)state;
	assert_int_equal(dfi_evq_set_upcall(q, d, 7, NULL, 0, NULL),
			 DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	assert_int_equal(dfi_evq_set_upcall(q, d, DAT_UPCALL_MANY, &none, 0, NULL),
			 DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	assert_int_equal(dfi_evq_set_upcall(q, d, DAT_UPCALL_MANY, NULL, 0, NULL),
			 DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));	/* SAME of nothing */
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_MANY, 2, NULL),
			 DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	dfi_evq_get_upcall(q, &pol, NULL, NULL);
	assert_int_equal(pol, DAT_UPCALL_DISABLE);	/* nothing changed */
	evq_free(q);
	disp_free(d);
	rec_free(r);
}

/* An active policy preempts the CNO, as a direct waiter does. */
static void test_policy_preempts_cno(void **state)
{
	struct dfi_disp *d = disp_new(1, 16);
	struct dfi_evq *q = evq_new(QLEN, FLAGS, NULL);
	struct dfi_cno *c = calloc(1, sizeof(*c));
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	DAT_EVD_HANDLE hint;
	DAT_EVENT ev;

	(void)state;
	assert_non_null(c);
	assert_int_equal(dfi_cno_init(c, (DAT_CNO_HANDLE)c, NULL, false), 0);
	dfi_evq_modify_cno(q, c);
	assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	post(q, 1);
	WAIT_UNTIL(atomic_load(&r->calls) == 1, 2000);
	assert_int_equal(atomic_load(&r->calls), 1);
	assert_int_equal(DAT_GET_TYPE(dfi_cno_consume(c, &hint)), DAT_QUEUE_EMPTY);
	assert_int_equal(dfi_evq_set_upcall(q, d, DAT_UPCALL_TEARDOWN, NULL, 0, NULL), DAT_SUCCESS);
	post(q, 2);
	assert_int_equal(dfi_cno_consume(c, &hint), DAT_SUCCESS);	/* CNO again */
	assert_ptr_equal(hint, q);
	assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 2);
	evq_free(q);
	dfi_cno_fini(c);
	free(c);
	disp_free(d);
	rec_free(r);
}

/* One busy EVD cannot starve another: with one dispatcher thread and a
 * budget of 4, EVD B's upcall runs long before A's backlog is done. */
static void test_budget_fairness(void **state)
{
	struct dfi_disp *d = disp_new(1, 4);
	struct dfi_evq *a = evq_new(1024, FLAGS, NULL), *b = evq_new(QLEN, FLAGS, NULL);
	struct rec *ra = rec_new(a), *rb = rec_new(b);
	struct tagged ta = { ra, 0, 0 }, tb = { rb, 0, 0 };
	uint64_t a_calls_when_b;

	(void)state;
	atomic_store(&ra->sleep_us, 1000);
	for (uint64_t s = 1; s <= 500; s++)
		post(a, s);
	assert_int_equal(arm(b, d, &tb, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW, NULL),
			 DAT_SUCCESS);
	assert_int_equal(arm(a, d, &ta, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_ANY, NULL),
			 DAT_SUCCESS);
	t_sleep_us(5000);
	post(b, 1);
	WAIT_UNTIL(atomic_load(&rb->calls) == 1, 5000);
	a_calls_when_b = atomic_load(&ra->calls);
	assert_int_equal(atomic_load(&rb->calls), 1);
	if (a_calls_when_b > 100)
		fail_msg("EVD B waited for %llu upcalls of EVD A (budget 4)",
			 (unsigned long long)a_calls_when_b);
	assert_int_equal(dfi_evq_set_upcall(a, d, DAT_UPCALL_TEARDOWN, NULL, 0, NULL), DAT_SUCCESS);
	evq_free(a);
	evq_free(b);
	disp_free(d);
	rec_free(ra);
	rec_free(rb);
}

/* Found by the model (model/upcall.pml), three ways to leave the source
 * unarmed with a completion that then never raises an upcall:
 *   1. the dispatcher's last look (arm_source at the end of a turn) reads a
 *      completion that landed during the upcall, and nobody kicks it;
 *   2. the same, reached with a one-slot ring that was full when the
 *      progress context looked;
 *   3. a consumer of dat_evd_arm_upcall dequeues exactly *npending events
 *      and stops: the last one out must arm. */
static void inject_during_upcall(struct rec *r, const DAT_EVENT *ev)
{
	struct fake_source *fs = (struct fake_source *)r->hook_rc_ptr;

	if (ev && ev_seq(ev) == 1) {
		DAT_EVENT c = ev_dto(100);

		fake_source_inject(fs, &c);	/* the source is not armed now */
	}
}

static void lost_wakeup_case(int which)
{
	struct dfi_disp *d = disp_new(2, 16);
	struct dfi_evq *q = evq_new(which == 2 ? 1 : 16, FLAGS, NULL);
	struct fake_source *fs = fake_source_new();
	struct rec *r = rec_new(q);
	struct tagged t = { r, 0, 0 };
	struct fake_progress *p;
	DAT_COUNT np = -1;
	DAT_EVENT ev;

	fake_source_attach(fs, q);
	p = fake_progress_start(q, fs);
	r->hook_rc_ptr = fs;
	if (which == 1) {
		r->hook = inject_during_upcall;
		post(q, 1);
		assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_ANY,
				     &np), DAT_SUCCESS);
	} else if (which == 2) {
		r->hook = inject_during_upcall;
		assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW,
				     &np), DAT_SUCCESS);
		ev = ev_dto(1);
		fake_source_inject(fs, &ev);
	} else {
		post(q, 1);
		assert_int_equal(arm(q, d, &t, DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_INVOC_NEW,
				     &np), DAT_SUCCESS);
		assert_int_equal(np, 1);
		ev = ev_dto(100);
		fake_source_inject(fs, &ev);	/* new, after the arm */
		assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);	/* *npending of them */
	}
	WAIT_UNTIL(atomic_load(&r->seen[100]) == 1, 2000);
	if (atomic_load(&r->seen[100]) != 1)
		fail_msg("case %d: completion 100 was never delivered (lost wake-up): %zu left "
			 "in the source, which is %sarmed", which, fake_source_pending(fs),
			 fake_source_armed(fs) ? "" : "not ");
	fake_progress_stop(p);
	evq_free(q);
	fake_source_free(fs);
	disp_free(d);
	rec_free(r);
}

static void test_model_dispatch_tail_kicks(void **state)
{
	(void)state;
	lost_wakeup_case(1);
	lost_wakeup_case(2);
}

static void test_model_last_dequeue_arms(void **state)
{
	(void)state;
	lost_wakeup_case(3);
}

/* ------------------------------------------------------------ stress */

static void test_stress_policy_flips(void **state)
{
	enum { NP = 4 };
	uint64_t per = 250000;	/* 10^6 events in all */
	const char *env = getenv("UPCALL_STRESS_EVENTS");
	struct dfi_disp *d = disp_new(3, 16);
	struct dfi_evq *q = evq_new(256, FLAGS, NULL);
	struct fake_source *fs = fake_source_new();
	struct rec *r = rec_new(q);
	static const int pols[] = { DAT_UPCALL_SINGLE_INSTANCE, DAT_UPCALL_MANY,
				    DAT_UPCALL_NOTIFY, DAT_UPCALL_DISABLE, DAT_UPCALL_TEARDOWN };
	/* one tag per arm, never reused: an upcall reads its tag's policy when
	 * it runs, which may be long after the arm on a loaded machine */
	enum { MAXROUNDS = 1 << 16 };
	struct tagged *tags = calloc(MAXROUNDS, sizeof(*tags));
	struct producer pr[NP];
	struct tjob *j[NP];
	struct fake_progress *p;
	atomic_uint_fast64_t full;
	unsigned seed = 12345, round = 0, torn_violations = 0;
	uint64_t total, src_n, src_next;
	DAT_EVENT ev;

	(void)state;
	assert_non_null(tags);
	if (env && atoll(env) >= NP)
		per = (uint64_t)atoll(env) / NP;
	total = per * NP;
	src_n = total / 10;		/* plus completions through the source */
	src_next = total + 1;
	assert_true(total + src_n < MAXSEQ);
	atomic_init(&full, 0);
	atomic_store(&r->drain_on_notify, true);
	fake_source_attach(fs, q);
	p = fake_progress_start(q, fs);
	for (int i = 0; i < NP; i++) {
		pr[i] = (struct producer){ q, 1 + (uint64_t)i * per, per, &full };
		j[i] = tjob_start(producer_main, &pr[i]);
	}
	for (;;) {
		bool done = true;
		int pol = pols[rand_r(&seed) % 5];
		int flag = (int)(rand_r(&seed) % 2);
		struct tagged *t = &tags[round < MAXROUNDS - 1 ? round : MAXROUNDS - 1];
		DAT_COUNT np = 0;

		for (int i = 0; i < NP; i++)
			done = done && atomic_load(&j[i]->done);
		if (done && src_next > total + src_n)
			break;
		if (++round >= MAXROUNDS - 1)
			pol = DAT_UPCALL_DISABLE;	/* out of tags: drain by dequeue */
		/* some completions come through the source (the CQ path) */
		for (int k = 0; k < 50 && src_next <= total + src_n; k++) {
			ev = ev_dto(src_next++);
			fake_source_inject(fs, &ev);
		}
		if (pol == DAT_UPCALL_DISABLE || pol == DAT_UPCALL_TEARDOWN) {
			assert_int_equal(dfi_evq_set_upcall(q, d, pol, NULL, flag, &np), DAT_SUCCESS);
			if (pol == DAT_UPCALL_TEARDOWN) {
				atomic_store(&r->mark, true);	/* no upcall may start now */
				if (atomic_load(&r->inflight) != 0)
					torn_violations++;
			}
			/* the consumer's share: dequeue a while */
			for (int k = 0; k < 200 && dfi_evq_dequeue(q, &ev) == DAT_SUCCESS; k++)
				rec_seen(r, &ev);
		} else {
			t->r = r;
			t->policy = pol;
			t->round = round;
			if (atomic_exchange(&r->mark, false) && atomic_load(&r->after_mark))
				torn_violations++;
			atomic_store(&r->after_mark, 0);
			{
				DAT_UPCALL_OBJECT o = obj_for(t);

				assert_int_equal(dfi_evq_set_upcall(q, d, pol, &o, flag, &np),
						 DAT_SUCCESS);
			}
			/* the correct consumer: final poll after the arm */
			while (dfi_evq_dequeue(q, &ev) == DAT_SUCCESS)
				rec_seen(r, &ev);
		}
		if (round % 16 == 0)
			dfi_evq_resize(q, (round / 16) % 2 ? 1024 : 256);	/* may refuse: fine */
		t_sleep_us(200);
	}
	for (int i = 0; i < NP; i++)
		tjob_join(j[i], 1000, "producer");
	/* end: stop upcalls, then the consumer takes whatever is left */
	assert_int_equal(dfi_evq_set_upcall(q, d, DAT_UPCALL_TEARDOWN, NULL, 0, NULL), DAT_SUCCESS);
	WAIT_UNTIL(fake_source_pending(fs) == 0 || dfi_evq_count(q) < 256, 100);
	for (int tries = 0; tries < 50; tries++) {
		while (dfi_evq_dequeue(q, &ev) == DAT_SUCCESS)
			rec_seen(r, &ev);
		if (fake_source_pending(fs) == 0)
			break;
		t_sleep_us(1000);
	}
	fake_progress_stop(p);
	while (dfi_evq_dequeue(q, &ev) == DAT_SUCCESS)
		rec_seen(r, &ev);
	expect_seen_once(r, 1, total + src_n);
	assert_int_equal(atomic_load(&r->single_overlap), 0);
	assert_int_equal(torn_violations, 0);
	print_message("stress: %llu events (%llu through the source), %llu upcalls, %u arms, "
		      "max %d concurrent\n", (unsigned long long)(total + src_n),
		      (unsigned long long)src_n, (unsigned long long)atomic_load(&r->calls),
		      round, atomic_load(&r->max_inflight));
	evq_free(q);
	fake_source_free(fs);
	disp_free(d);
	rec_free(r);
	free(tags);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		evtest(test_new_queued_events_raise_no_upcall),
		evtest(test_new_arrival_delivers_queue_in_order),
		evtest(test_any_delivers_queued_with_truthful_more),
		evtest(test_arm_reports_source_completions),
		evtest(test_idle_thread_woken_last_in_first_out),
		evtest(test_spinning_dispatcher),
		evtest(test_irq_notify_runs_upcalls_here),
		evtest(test_irq_notify_respects_single_instance),
		evtest(test_policy_keeps_progress_watching),
		evtest(test_smp_window_before_arm),
		evtest(test_smp_window_after_arm),
		evtest(test_dequeue_read_leaves_no_stranded_event),
		evtest(test_single_instance_exclusion_under_load),
		evtest(test_single_instance_latch_while_running),
		evtest(test_many_runs_concurrently),
		evtest(test_notify_is_a_doorbell),
		evtest(test_disable_stops_new_upcalls),
		evtest(test_teardown_waits_for_upcalls_in_flight),
		evtest(test_own_upcall_teardown_refused_rearm_works),
		evtest(test_free_waits_for_running_upcall),
		evtest(test_wait_refused_and_waiter_keeps_evd),
		evtest(test_bad_arguments),
		evtest(test_policy_preempts_cno),
		evtest(test_budget_fairness),
		evtest(test_model_dispatch_tail_kicks),
		evtest(test_model_last_dequeue_arms),
		evtest(test_stress_policy_flips),
	};

	evtest_watchdog_start();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
