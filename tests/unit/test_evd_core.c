/*
 * Unit tests of the EVD core (src/event/evd_core.c, time.c) against event.h and
 * evd-contract.md sections 2, 4.3 (defects D1-D14) and 7 (scenarios).
 *
 * Test names: test_sNN_* = scenario NN of section 7; a _Dxx suffix names the
 * defect of section 4.3 the test would catch.  Timing assertions use generous
 * upper bounds (shared noisy 2-core VM): only lower bounds are tight.
 */
#include "evtest.h"
#include "fake_source.h"

#include <sched.h>
#include <sys/eventfd.h>

#define NO_ERR_EVD(q) ((DAT_EVD_HANDLE)(q))

/* ================================================================ basics */

/* Completions from..to-1 arrive at fs, in order (ev_dto sequence numbers). */
static void inject_dtos(struct fake_source *fs, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i < to; i++) {
		DAT_EVENT ev = ev_dto(i);

		fake_source_inject(fs, &ev);
	}
}

static void test_qlen_round(void **state)
{
	static const DAT_COUNT req[] = { 1, 2, 3, 4, 5, 7, 8, 9, 100, 1000, 1024, 1025,
					 4097, 65535, 65536 };

	(void)state;
	for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		uint32_t r = dfi_evq_qlen_round(req[i]);

		if ((r & (r - 1)) != 0 || r < (uint32_t)req[i] || r / 2 >= (uint32_t)req[i])
			fail_msg("dfi_evq_qlen_round(%d) = %u, expected the smallest power of two >= %d",
				 req[i], r, req[i]);
	}
	assert_int_equal(dfi_evq_qlen_round(5), 8);
	assert_int_equal(dfi_evq_qlen_round(65536), 65536);
}

static void test_init_query_defaults(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(5, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_COUNT qlen = -1;
	DAT_EVD_STATE st = 0;
	struct dfi_cno *cno = (struct dfi_cno *)(uintptr_t)1;

	(void)state;
	dfi_evq_query(q, &qlen, &st, &cno);
	assert_int_equal(qlen, 8);			/* 5 rounded up */
	assert_true(st & DAT_EVD_STATE_ENABLED);
	assert_false(st & DAT_EVD_STATE_DISABLED);
	assert_true(st & DAT_EVD_STATE_WAITABLE);
	assert_false(st & DAT_EVD_STATE_UNWAITABLE);
	assert_null(cno);
	assert_int_equal(dfi_evq_count(q), 0);
	assert_ptr_equal(q->handle, (DAT_EVD_HANDLE)q);

	dfi_evq_disable(q);
	dfi_evq_set_waitable(q, false);
	dfi_evq_query(q, &qlen, &st, &cno);
	assert_true(st & DAT_EVD_STATE_DISABLED);
	assert_false(st & DAT_EVD_STATE_ENABLED);
	assert_true(st & DAT_EVD_STATE_UNWAITABLE);
	assert_false(st & DAT_EVD_STATE_WAITABLE);
	dfi_evq_enable(q);
	dfi_evq_set_waitable(q, true);
	dfi_evq_query(q, &qlen, &st, &cno);
	assert_true(st & DAT_EVD_STATE_ENABLED);
	assert_true(st & DAT_EVD_STATE_WAITABLE);

	evq_free(q);
	evq_free(aq);
}

static void test_dequeue_empty_is_plain_queue_empty(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_EVENT ev;

	(void)state;
	assert_int_equal(dfi_evq_dequeue(q, &ev), 0x000d0000u);	/* no class bit */
	assert_int_equal(dfi_evq_dequeue(aq, &ev), 0x000d0000u);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	evq_expect(q, 1);
	assert_int_equal(dfi_evq_dequeue(q, &ev), 0x000d0000u);
	evq_free(q);
	evq_free(aq);
}

static void test_fifo_and_evd_handle_filled(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(16, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CONNECTION_FLAG, aq);
	DAT_EVENT ev;

	(void)state;
	/* software and provider events interleaved: one FIFO */
	for (uint64_t i = 0; i < 16; i++) {
		if (i % 2) {
			ev = ev_conn(i);
			assert_int_equal(dfi_evq_post(q, &ev), 0);
		} else {
			assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
		}
	}
	assert_int_equal(dfi_evq_count(q), 16);
	for (uint64_t i = 0; i < 16; i++) {
		memset(&ev, 0, sizeof(ev));
		assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
		assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(q));	/* filled by the core */
		assert_int_equal(ev.event_number,
				 i % 2 ? DAT_CONNECTION_EVENT_ESTABLISHED : DAT_SOFTWARE_EVENT);
		assert_int_equal(ev_seq(&ev), i);
	}
	evq_expect_empty(q);
	evq_free(q);
	evq_free(aq);
}

static void test_post_se_copies_event(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_EVENT ev = ev_sw(77), out;

	(void)state;
	for (int i = 0; i < 8; i++)
		ev.event_extension_data[i] = 0x1111111111111111ull * (uint64_t)(i + 1);
	assert_int_equal(dfi_evq_post_se(q, &ev), DAT_SUCCESS);
	assert_ptr_equal(ev.evd_handle, DFI_ERR_HANDLE);	/* caller's event untouched */
	memset(&ev, 0, sizeof(ev));				/* the core holds a copy */
	assert_int_equal(dfi_evq_dequeue(q, &out), DAT_SUCCESS);
	assert_int_equal(out.event_number, DAT_SOFTWARE_EVENT);
	assert_ptr_equal(out.evd_handle, NO_ERR_EVD(q));
	assert_int_equal(ev_seq(&out), 77);
	for (int i = 0; i < 8; i++)
		assert_int_equal(out.event_extension_data[i], 0x1111111111111111ull * (uint64_t)(i + 1));
	evq_free(q);
	evq_free(aq);
}

static void test_ring_wraparound(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_SOFTWARE_FLAG, aq);
	uint64_t seq = 0, next = 0;

	(void)state;
	for (int round = 0; round < 203; round++) {
		int k = round % 4 + 1;

		for (int i = 0; i < k; i++)
			assert_int_equal(evq_post_sw(q, seq++), DAT_SUCCESS);
		assert_int_equal(dfi_evq_count(q), k);
		for (int i = 0; i < k; i++)
			evq_expect(q, next++);
		evq_expect_empty(q);
	}
	/* head is now in the middle of the ring: fill it completely */
	assert_int_equal(evq_post_sw(q, seq++), DAT_SUCCESS);
	evq_expect(q, next++);
	for (int i = 0; i < 4; i++)
		assert_int_equal(evq_post_sw(q, seq++), DAT_SUCCESS);
	assert_int_equal(DAT_GET_TYPE(evq_post_sw(q, 999999)), DAT_QUEUE_FULL);
	for (int i = 0; i < 4; i++)
		evq_expect(q, next++);
	evq_expect_empty(q);
	evq_free(q);
	evq_free(aq);
}

static void test_wait_pops_one_and_sets_nmore(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;

	(void)state;
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 0);
	assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(q));
	assert_int_equal(nmore, 2);
	assert_int_equal(dfi_evq_wait(q, DAT_TIMEOUT_INFINITE, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 1);
	assert_int_equal(nmore, 1);
	assert_int_equal(dfi_evq_wait(q, 1000, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 2);
	assert_int_equal(nmore, 0);
	nmore = -1;
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 0, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	assert_int_equal(nmore, 0);
	evq_free(q);
	evq_free(aq);
}

static void test_wait_timeout_zero_never_sleeps(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;
	uint64_t t0;

	(void)state;
	t0 = t_now();
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 0, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	assert_elapsed_between(t_now() - t0, 0, 50 * MS);
	assert_int_equal(nmore, 0);

	assert_int_equal(evq_post_sw(q, 0), DAT_SUCCESS);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	nmore = -1;
	t0 = t_now();
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 0, 3, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	assert_elapsed_between(t_now() - t0, 0, 50 * MS);
	assert_int_equal(nmore, 2);			/* snapshot, nothing dequeued */
	assert_int_equal(dfi_evq_count(q), 2);
	evq_expect(q, 0);
	evq_expect(q, 1);
	evq_free(q);
	evq_free(aq);
}

/* D6: every early-validation error path returns without touching the lock or
 * the state: the EVD stays OPEN, unlocked and usable. */
static void test_wait_invalid_args_leave_evd_usable_D6(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_EVENT ev;
	DAT_COUNT nmore;
	struct {
		DAT_COUNT threshold;
		bool null_ev, null_nmore;
		DAT_RETURN expect;
	} cases[] = {
		{ 1, true, false, DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4) },
		{ 1, false, true, DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5) },
		{ 0, false, false, DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3) },
		{ -1, false, false, DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3) },
		{ 9, false, false, DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3) },
		{ 1000000, false, false, DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3) },
	};

	(void)state;
	assert_int_equal(evq_post_sw(q, 5), DAT_SUCCESS);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		DAT_RETURN rc = dfi_evq_wait(q, DAT_TIMEOUT_INFINITE, cases[i].threshold,
					     cases[i].null_ev ? NULL : &ev,
					     cases[i].null_nmore ? NULL : &nmore);

		if (rc != cases[i].expect)
			fail_msg("case %zu: dfi_evq_wait returned %#x, expected %#x",
				 i, (unsigned)rc, (unsigned)cases[i].expect);
		/* lock free, state OPEN, no waiter, nothing consumed */
		assert_int_equal(pthread_mutex_trylock(&q->lock), 0);
		assert_int_equal(q->state, DFI_EVQ_OPEN);
		assert_false(q->waiter);
		pthread_mutex_unlock(&q->lock);
		assert_int_equal(dfi_evq_count(q), 1);
	}
	/* threshold == qlen is valid */
	for (uint64_t i = 6; i < 13; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	assert_int_equal(dfi_evq_wait(q, 0, 8, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 5);
	assert_int_equal(nmore, 7);
	for (uint64_t i = 6; i < 13; i++)
		evq_expect(q, i);
	evq_free(q);
	evq_free(aq);
}

/* ================================================================ scenario 1 */

struct inject_once {
	atomic_int fired;
	uint64_t seq;
};

static void hook_inject_once(struct fake_source *fs, void *arg)
{
	struct inject_once *io = arg;
	int expected = 0;

	if (atomic_compare_exchange_strong(&io->fired, &expected, 1)) {
		DAT_EVENT ev = ev_dto(io->seq);

		fake_source_inject(fs, &ev);
	}
}

/* The completion lands after the waiter's empty poll and before its arm: the
 * try-wait reports it (-EAGAIN) and the waiter must read it, not sleep. */
static void test_s01_lost_wakeup_before_arm(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct inject_once io = { .seq = 4242 };
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;
	DAT_RETURN rc;

	(void)state;
	fake_source_attach(fs, q);
	fake_source_set_hooks(fs, hook_inject_once, &io, NULL, NULL);
	rc = dfi_evq_wait(q, 5000000, 1, &ev, &nmore);		/* "INFINITE", bounded */
	assert_int_equal(atomic_load(&io.fired), 1);		/* the window was exercised */
	assert_int_equal(rc, DAT_SUCCESS);
	assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	assert_int_equal(ev_seq(&ev), 4242);
	assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(q));
	assert_int_equal(nmore, 0);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* The completion lands right after the arm (trywait already said "armed and
 * empty"): the armed fd fires and the sleeping waiter must get it. */
static void test_s01_completion_right_after_arm(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct inject_once io = { .seq = 99 };
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;
	DAT_RETURN rc;

	(void)state;
	fake_source_attach(fs, q);
	fake_source_set_hooks(fs, NULL, NULL, hook_inject_once, &io);
	rc = dfi_evq_wait(q, 5000000, 1, &ev, &nmore);
	assert_int_equal(atomic_load(&io.fired), 1);
	assert_true(atomic_load(&fs->n_signals) >= 1);		/* a channel event happened */
	assert_int_equal(rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 99);
	assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(q));
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* Both windows, many times, plus a plain injection from another thread while
 * the waiter sleeps. */
static void inject_later(void *arg)
{
	struct fake_source *fs = arg;
	DAT_EVENT ev = ev_dto(7);

	t_sleep_us(20000);
	fake_source_inject(fs, &ev);
}

static void test_s01_arm_windows_repeated(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct tjob *t;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	(void)state;
	fake_source_attach(fs, q);
	for (int i = 0; i < 300; i++) {
		struct inject_once io = { .seq = (uint64_t)i };
		DAT_RETURN rc;

		atomic_init(&io.fired, 0);
		if (i % 2)
			fake_source_set_hooks(fs, NULL, NULL, hook_inject_once, &io);
		else
			fake_source_set_hooks(fs, hook_inject_once, &io, NULL, NULL);
		rc = dfi_evq_wait(q, 5000000, 1, &ev, &nmore);
		fake_source_set_hooks(fs, NULL, NULL, NULL, NULL);
		if (rc != DAT_SUCCESS || ev_seq(&ev) != (uint64_t)i || nmore != 0)
			fail_msg("iteration %d (%s arm): rc %#x seq %llu nmore %d", i,
				 i % 2 ? "after" : "before", (unsigned)rc,
				 (unsigned long long)ev_seq(&ev), nmore);
	}
	/* waiter asleep, completion arrives from another thread */
	t = tjob_start(inject_later, fs);
	assert_int_equal(dfi_evq_wait(q, 5000000, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 7);
	tjob_join(t, 5000, "injector");
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* ================================================================ scenario 2 */

/* A software event must wake a waiter of a DTO|SOFTWARE EVD (sleeping on the
 * source fd) with no CNO attached. */
static void test_s02_post_se_wakes_dto_waiter_D1(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct waitjob *j;
	uint64_t t0;

	(void)state;
	fake_source_attach(fs, q);
	j = waitjob_start(q, DAT_TIMEOUT_INFINITE, 1);
	evq_wait_for_waiter(q, 20000);
	t0 = t_now();
	assert_int_equal(evq_post_sw(q, 31), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(j->ev.event_number, DAT_SOFTWARE_EVENT);
	assert_int_equal(ev_seq(&j->ev), 31);
	assert_ptr_equal(j->ev.evd_handle, NO_ERR_EVD(q));
	assert_elapsed_between(j->t_end - t0, 0, 1000 * MS);
	free(j);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

static void test_s02_connection_event_wakes_dto_waiter_D1(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG | DAT_EVD_CONNECTION_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct waitjob *j;
	DAT_EVENT ev = ev_conn(12);

	(void)state;
	fake_source_attach(fs, q);
	j = waitjob_start(q, DAT_TIMEOUT_INFINITE, 1);
	evq_wait_for_waiter(q, 20000);
	assert_int_equal(dfi_evq_post(q, &ev), 0);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(j->ev.event_number, DAT_CONNECTION_EVENT_ESTABLISHED);
	assert_int_equal(ev_seq(&j->ev), 12);
	assert_ptr_equal(j->ev.evd_handle, NO_ERR_EVD(q));
	free(j);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* Plain software EVD: post from another thread wakes the waiter. */
static void test_s02_post_se_wakes_software_waiter(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;

	(void)state;
	j = waitjob_start(q, DAT_TIMEOUT_INFINITE, 1);
	evq_wait_for_waiter(q, 20000);
	assert_int_equal(evq_post_sw(q, 3), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 3);
	assert_int_equal(j->nmore, 0);
	free(j);
	evq_free(q);
	evq_free(aq);
}

/* ================================================================ scenario 3 */

static void s03_body(struct dfi_evq *q)
{
	const DAT_RETURN unwaitable = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
	struct waitjob *j;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_EVD_STATE st;
	DAT_COUNT qlen;
	uint64_t t0;

	j = waitjob_start(q, DAT_TIMEOUT_INFINITE, 1);
	evq_wait_for_waiter(q, 20000);
	t0 = t_now();
	dfi_evq_set_waitable(q, false);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, unwaitable);
	assert_elapsed_between(j->t_end - t0, 0, 1000 * MS);
	free(j);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_true(st & DAT_EVD_STATE_UNWAITABLE);

	/* new waits fail at once, whatever the timeout */
	t0 = t_now();
	assert_int_equal(dfi_evq_wait(q, 3000000, 1, &ev, &nmore), unwaitable);
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), unwaitable);
	assert_elapsed_between(t_now() - t0, 0, 1000 * MS);

	/* events still arrive and are dequeueable */
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	evq_expect(q, 1);

	dfi_evq_set_waitable(q, true);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_true(st & DAT_EVD_STATE_WAITABLE);
	assert_int_equal(evq_post_sw(q, 2), DAT_SUCCESS);
	assert_int_equal(dfi_evq_wait(q, 1000000, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 2);
}

static void test_s03_unwaitable_wakes_waiter(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);

	(void)state;
	s03_body(q);
	evq_free(q);
	evq_free(aq);
}

static void test_s03_unwaitable_wakes_dto_waiter_D1(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG, aq);
	struct fake_source *fs = fake_source_new();

	(void)state;
	fake_source_attach(fs, q);
	s03_body(q);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* ================================================================ scenario 4 */

static void test_s04_second_waiter_and_dequeue_rejected(void **state)
{
	const DAT_RETURN waiter = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	uint64_t t0;

	(void)state;
	j = waitjob_start(q, 10000000, 1);
	evq_wait_for_waiter(q, 20000);
	t0 = t_now();
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), waiter);
	assert_int_equal(dfi_evq_wait(q, 3000000, 1, &ev, &nmore), waiter);
	assert_int_equal(dfi_evq_dequeue(q, &ev), waiter);
	assert_elapsed_between(t_now() - t0, 0, 1000 * MS);
	t_sleep_us(50000);
	assert_false(waitjob_done(j));			/* A unaffected */
	assert_true(evq_has_waiter(q));

	assert_int_equal(evq_post_sw(q, 5), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 5);
	assert_int_equal(j->nmore, 0);
	free(j);

	/* after A returned, B's calls succeed */
	evq_expect_empty(q);
	assert_int_equal(evq_post_sw(q, 6), DAT_SUCCESS);
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 6);
	evq_free(q);
	evq_free(aq);
}

/* ================================================================ scenario 5 */

static void test_s05_threshold(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;
	uint64_t t0;

	(void)state;
	assert_int_equal(evq_post_sw(q, 0), DAT_SUCCESS);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	t0 = t_now();
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 50000, 3, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	assert_elapsed_between(t_now() - t0, 50 * MS, 550 * MS);
	assert_int_equal(nmore, 2);
	assert_int_equal(dfi_evq_count(q), 2);		/* nothing dequeued */

	assert_int_equal(evq_post_sw(q, 2), DAT_SUCCESS);
	nmore = -1;
	assert_int_equal(dfi_evq_wait(q, 50000, 3, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 0);
	assert_int_equal(nmore, 2);
	evq_expect(q, 1);
	evq_expect(q, 2);

	assert_int_equal(dfi_evq_wait(q, 0, 0, &ev, &nmore),
			 DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	assert_int_equal(dfi_evq_wait(q, 0, 9, &ev, &nmore),
			 DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	evq_free(q);
	evq_free(aq);
}

/* A threshold-3 waiter is not released by the first two events. */
static void test_s05_threshold_waiter_released_when_met(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;

	(void)state;
	j = waitjob_start(q, 10000000, 3);
	evq_wait_for_waiter(q, 10000);
	assert_int_equal(evq_post_sw(q, 0), DAT_SUCCESS);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	t_sleep_us(100000);
	assert_false(waitjob_done(j));
	assert_int_equal(evq_post_sw(q, 2), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 0);
	assert_int_equal(j->nmore, 2);
	free(j);
	evq_expect(q, 1);
	evq_expect(q, 2);
	evq_free(q);
	evq_free(aq);
}

/* D13: threshold > 1 while an EP with consumer-controlled notification feeds
 * the EVD is DAT_INVALID_STATE. */
static void test_s05_threshold_with_notify_model_D13(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_RETURN rc;

	(void)state;
	dfi_evq_notify_model(q, DAT_EVD_STATE_CONFIG_NOTIFY, +1);
	assert_int_equal(dfi_evq_wait(q, 0, 2, &ev, &nmore),
			 DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_CONFIG_NOTIFY));
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 0, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	/* also when enough events are queued to satisfy it */
	assert_int_equal(evq_post_sw(q, 0), DAT_SUCCESS);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	assert_int_equal(dfi_evq_wait(q, 0, 2, &ev, &nmore),
			 DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_CONFIG_NOTIFY));
	assert_int_equal(dfi_evq_count(q), 2);
	dfi_evq_notify_model(q, DAT_EVD_STATE_CONFIG_NOTIFY, -1);
	assert_int_equal(dfi_evq_wait(q, 0, 2, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 0);
	evq_expect(q, 1);

	dfi_evq_notify_model(q, DAT_EVD_STATE_CONFIG_SOLICITED, +1);
	assert_int_equal(dfi_evq_wait(q, 0, 2, &ev, &nmore),
			 DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_CONFIG_SOLICITED));
	/* two EPs, one each way: still refused */
	dfi_evq_notify_model(q, DAT_EVD_STATE_CONFIG_NOTIFY, +1);
	rc = dfi_evq_wait(q, 0, 3, &ev, &nmore);
	assert_int_equal(DAT_GET_TYPE(rc), DAT_INVALID_STATE);
	assert_true(DAT_GET_SUBTYPE(rc) == DAT_INVALID_STATE_EVD_CONFIG_NOTIFY ||
		    DAT_GET_SUBTYPE(rc) == DAT_INVALID_STATE_EVD_CONFIG_SOLICITED);
	dfi_evq_notify_model(q, DAT_EVD_STATE_CONFIG_SOLICITED, -1);
	assert_int_equal(dfi_evq_wait(q, 0, 2, &ev, &nmore),
			 DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_CONFIG_NOTIFY));
	dfi_evq_notify_model(q, DAT_EVD_STATE_CONFIG_NOTIFY, -1);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 0, 2, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	evq_free(q);
	evq_free(aq);
}

/* ================================================================ scenario 6 */

struct ticker {
	struct dfi_evq *q;
	struct fake_source *fs;		/* spurious wakeups if set, else post_se */
	unsigned period_us, count;
	atomic_bool stop;
	atomic_uint posted;
};

static void ticker_fn(void *arg)
{
	struct ticker *tk = arg;

	for (unsigned i = 0; i < tk->count && !atomic_load(&tk->stop); i++) {
		t_sleep_us(tk->period_us);
		if (tk->fs)
			fake_source_spurious(tk->fs);
		else if (evq_post_sw(tk->q, i) == DAT_SUCCESS)
			atomic_fetch_add(&tk->posted, 1);
	}
}

static void test_s06_timeout_with_posts_below_threshold(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(16, DAT_EVD_SOFTWARE_FLAG, aq);
	struct ticker *tk = calloc(1, sizeof(*tk));
	struct tjob *t;
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;
	DAT_RETURN rc;
	uint64_t t0, el;

	(void)state;
	tk->q = q;
	tk->period_us = 30000;
	tk->count = 4;
	t = tjob_start(ticker_fn, tk);
	t0 = t_now();
	rc = dfi_evq_wait(q, 200000, 5, &ev, &nmore);
	el = t_now() - t0;
	tjob_join(t, 5000, "poster");
	assert_int_equal(DAT_GET_TYPE(rc), DAT_TIMEOUT_EXPIRED);
	assert_elapsed_between(el, 200 * MS, 2050 * MS);
	assert_in_range(nmore, 0, 4);
	assert_int_equal(dfi_evq_count(q), 4);
	for (uint64_t i = 0; i < 4; i++)
		evq_expect(q, i);
	free(tk);
	evq_free(q);
	evq_free(aq);
}

/* D2: wakeups that do not satisfy the wait must not restart the timeout.  With
 * a wakeup every few ms for 1.5 s, a restarting 100 ms wait lasts >= 1.5 s. */
static void test_s06_timeout_not_restarted_D2(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(256, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct ticker *tk = calloc(1, sizeof(*tk));
	struct tjob *t;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_RETURN rc;
	uint64_t t0, el;

	(void)state;
	/* (a) posts below the threshold, every 7.5 ms */
	tk->q = q;
	tk->period_us = 7500;
	tk->count = 200;
	atomic_init(&tk->stop, false);
	t = tjob_start(ticker_fn, tk);
	t0 = t_now();
	rc = dfi_evq_wait(q, 100000, 256, &ev, &nmore);
	el = t_now() - t0;
	atomic_store(&tk->stop, true);
	tjob_join(t, 5000, "poster");
	assert_int_equal(DAT_GET_TYPE(rc), DAT_TIMEOUT_EXPIRED);
	assert_elapsed_between(el, 100 * MS, 1050 * MS);
	while (dfi_evq_dequeue(q, &ev) == DAT_SUCCESS)
		;

	/* (b) spurious source wakeups every 1 ms */
	fake_source_attach(fs, q);
	memset(tk, 0, sizeof(*tk));
	tk->q = q;
	tk->fs = fs;
	tk->period_us = 1000;
	tk->count = 1500;
	atomic_init(&tk->stop, false);
	t = tjob_start(ticker_fn, tk);
	t_sleep_us(5000);
	t0 = t_now();
	rc = dfi_evq_wait(q, 100000, 1, &ev, &nmore);
	el = t_now() - t0;
	atomic_store(&tk->stop, true);
	tjob_join(t, 5000, "spurious ticker");
	assert_int_equal(DAT_GET_TYPE(rc), DAT_TIMEOUT_EXPIRED);
	assert_int_equal(nmore, 0);
	assert_elapsed_between(el, 100 * MS, 1050 * MS);
	free(tk);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* D3: a sub-millisecond timeout sleeps about that long: not 0 (busy loop, µs->ms
 * truncation), not a whole tick more. */
static void test_s06_submillisecond_timeout_D3(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct dfi_evq *qd = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;
	DAT_COUNT nmore;

	(void)state;
	fake_source_attach(fs, qd);
	for (int i = 0; i < 10; i++) {
		struct dfi_evq *w = i % 2 ? qd : q;
		uint64_t t0 = t_now();

		assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(w, 500, 1, &ev, &nmore)),
				 DAT_TIMEOUT_EXPIRED);
		assert_elapsed_between(t_now() - t0, 500 * US, 50 * MS);
		t0 = t_now();
		assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(w, 1500, 1, &ev, &nmore)),
				 DAT_TIMEOUT_EXPIRED);
		assert_elapsed_between(t_now() - t0, 1500 * US, 50 * MS);
	}
	evq_free(qd);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* D14: 0xFFFFFFFE µs (~71.6 min) must not wrap into an early return. */
static void test_s06_huge_timeout_no_wrap_D14(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;

	(void)state;
	j = waitjob_start(q, 0xFFFFFFFEu, 1);
	evq_wait_for_waiter(q, 0);
	t_sleep_us(300000);
	assert_false(waitjob_done(j));
	assert_int_equal(evq_post_sw(q, 8), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 8);
	free(j);
	evq_free(q);
	evq_free(aq);
}

static void test_s06_infinite_is_infinite(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;

	(void)state;
	j = waitjob_start(q, DAT_TIMEOUT_INFINITE, 1);
	evq_wait_for_waiter(q, 0);
	t_sleep_us(300000);
	assert_false(waitjob_done(j));
	assert_int_equal(evq_post_sw(q, 9), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 9);
	free(j);
	evq_free(q);
	evq_free(aq);
}

/* time.c: one absolute CLOCK_MONOTONIC deadline, µs precision, no 32-bit wrap. */
static void test_time_helpers_D14(void **state)
{
	uint64_t before, after, d;
	int efd;

	(void)state;
	assert_true(dfi_deadline(DAT_TIMEOUT_INFINITE) == UINT64_MAX);
	assert_true(dfi_remaining(UINT64_MAX) == UINT64_MAX);
	assert_true(dfi_remaining(1) == 0);
	assert_true(dfi_remaining(dfi_now_ns() - 1000) == 0);

	before = dfi_now_ns();
	d = dfi_deadline(0xFFFFFFFEu);
	after = dfi_now_ns();
	assert_true(d >= before + 0xFFFFFFFEull * 1000u);
	assert_true(d <= after + 0xFFFFFFFEull * 1000u);
	assert_true(dfi_remaining(d) > 4294000000ull * 1000u);

	before = dfi_now_ns();
	d = dfi_deadline(1);
	assert_true(d >= before + 1000 && d <= dfi_now_ns() + 1000);

	before = t_now();
	assert_int_equal(dfi_sleep_fds(NULL, 0, dfi_deadline(500)), 0);
	assert_elapsed_between(t_now() - before, 500 * US, 50 * MS);

	efd = eventfd(1, EFD_NONBLOCK);
	assert_true(efd >= 0);
	before = t_now();
	assert_true(dfi_sleep_fds(&efd, 1, dfi_deadline(5000000)) > 0);
	assert_elapsed_between(t_now() - before, 0, 1000 * MS);
	close(efd);
}

/* ================================================================ scenario 7 */

static void test_s07_signal_interrupts_wait(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	uint64_t end;

	(void)state;
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	j = waitjob_start(q, 5000000, 2);		/* 1 queued < threshold 2 */
	evq_wait_for_waiter(q, 20000);
	end = t_now() + 3000 * MS;
	/* a signal can land while the waiter is between syscalls: repeat it */
	while (!waitjob_done(j) && t_now() < end) {
		pthread_kill(j->tid, SIGUSR1);
		t_sleep_us(20000);
	}
	waitjob_join(j, 5000);
	if (DAT_GET_TYPE(j->rc) != DAT_INTERRUPTED_CALL)
		fail_msg("wait returned %#x after SIGUSR1, expected DAT_INTERRUPTED_CALL",
			 (unsigned)j->rc);
	assert_int_equal(j->nmore, 1);
	assert_elapsed_between(j->t_end - j->t_start, 0, 2500 * MS);
	free(j);

	/* back to OPEN: dequeue and wait work */
	assert_false(evq_has_waiter(q));
	evq_expect(q, 1);
	assert_int_equal(evq_post_sw(q, 2), DAT_SUCCESS);
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 2);
	evq_free(q);
	evq_free(aq);
}

/* ================================================================ scenarios 11, 12 */

static void abort_fn(void *arg)
{
	dfi_evq_abort(arg);
}

static void test_s11_free_with_blocked_waiter_D8(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;
	struct tjob *t;

	(void)state;
	j = waitjob_start(q, DAT_TIMEOUT_INFINITE, 1);
	evq_wait_for_waiter(q, 20000);
	assert_int_equal(dfi_evq_free_begin(q),
			 DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER));
	t_sleep_us(30000);
	assert_false(waitjob_done(j));			/* A keeps working */
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 1);
	free(j);

	/* IA close: the waiter leaves with DAT_ABORT, abort returns after it left */
	j = waitjob_start(q, DAT_TIMEOUT_INFINITE, 1);
	evq_wait_for_waiter(q, 20000);
	t = tjob_start(abort_fn, q);
	tjob_join(t, 5000, "dfi_evq_abort");
	pthread_mutex_lock(&q->lock);
	assert_false(q->waiter);
	assert_int_equal(q->state, DFI_EVQ_FREEING);
	pthread_mutex_unlock(&q->lock);
	waitjob_join(j, 5000);
	assert_int_equal(DAT_GET_TYPE(j->rc), DAT_ABORT);
	free(j);
	dfi_evq_fini(q);
	free(q);
	evq_free(aq);
}

static void test_s11_abort_without_waiter(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct tjob *t;

	(void)state;
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	t = tjob_start(abort_fn, q);
	tjob_join(t, 5000, "dfi_evq_abort");
	dfi_evq_fini(q);
	free(q);
	evq_kill(aq);
}

static void test_s12_free_while_referenced(void **state)
{
	const DAT_RETURN in_use = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, aq);

	(void)state;
	dfi_evq_ref(q);					/* "EP created" */
	assert_int_equal(dfi_evq_free_begin(q), in_use);
	/* nothing changed: still usable */
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	evq_expect(q, 1);
	dfi_evq_ref(q);
	dfi_evq_unref(q);
	assert_int_equal(dfi_evq_free_begin(q), in_use);
	dfi_evq_unref(q);				/* "EP freed" */
	evq_free(q);
	evq_free(aq);
}

/* A post under way into q on a thread of its own (the progress thread's
 * connection event): held, then, after `us`, posted and unheld. */
struct holder {
	struct dfi_evq *q;
	unsigned us;
	atomic_bool held;
};

static void *hold_post_unhold(void *arg)
{
	struct holder *h = arg;
	DAT_EVENT ev = ev_sw(7);

	dfi_evq_hold(h->q);
	atomic_store(&h->held, true);
	t_sleep_us(h->us);
	dfi_evq_post(h->q, &ev);
	dfi_evq_unhold(h->q);
	return NULL;
}

/* The EP that fed q is freed while its last event is still being posted:
 * dat_evd_free waits for the post to end, then succeeds (OFA uDAPL's
 * does); a hold of the freeing thread itself (a CNO agent called by that
 * post) is refused at once, not waited for. */
static void test_s12_free_waits_for_a_post_under_way(void **state)
{
	const DAT_RETURN in_use = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CONNECTION_FLAG, aq);
	struct holder h = { .q = q, .us = 50000 };
	pthread_t t;
	uint64_t t0;

	(void)state;
	dfi_evq_hold(q);				/* this thread's own */
	t0 = t_now();
	assert_int_equal(dfi_evq_free_begin(q), in_use);
	assert_true(t_now() - t0 < 1000 * MS);
	dfi_evq_unhold(q);

	dfi_evq_ref(q);					/* "EP created" */
	assert_int_equal(pthread_create(&t, NULL, hold_post_unhold, &h), 0);
	while (!atomic_load(&h.held))
		t_sleep_us(100);
	dfi_evq_unref(q);				/* "EP freed" */
	t0 = t_now();
	assert_int_equal(dfi_evq_free_begin(q), DAT_SUCCESS);
	assert_true(t_now() - t0 >= 20 * MS);		/* it did wait */
	assert_int_equal(pthread_join(t, NULL), 0);
	dfi_evq_fini(q);
	free(q);
	evq_free(aq);
}

static void test_free_with_queued_events(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);

	(void)state;
	for (uint64_t i = 0; i < 5; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	evq_free(q);					/* queued events are lost */
	assert_int_equal(dfi_evq_count(aq), 0);
	evq_free(aq);
}

/* ============================================================ source detach */

/* A source of n DTO events naming EP a or b in turn, counting the reaps it
 * is told of (consumed) per EP. */
struct tag_source {
	DAT_EVENT ev[8];
	int n, next;
	int reaped_a, reaped_b;
};

#define TAG_EP_A ((DAT_EP_HANDLE)(uintptr_t)0x100)
#define TAG_EP_B ((DAT_EP_HANDLE)(uintptr_t)0x200)

static int tag_read(void *ctx, DAT_EVENT *ev, int max)
{
	struct tag_source *s = ctx;
	int k = 0;

	while (k < max && s->next < s->n)
		ev[k++] = s->ev[s->next++];
	return k;
}

static int tag_trywait(void *ctx)
{
	struct tag_source *s = ctx;

	return s->next < s->n ? -EAGAIN : 0;
}

static int tag_fd(void *ctx)
{
	(void)ctx;
	return -1;
}

static void tag_consumed(void *ctx, const DAT_EVENT *ev)
{
	struct tag_source *s = ctx;
	DAT_EP_HANDLE ep = ev->event_data.dto_completion_event_data.ep_handle;

	if (ep == TAG_EP_A)
		s->reaped_a++;
	else if (ep == TAG_EP_B)
		s->reaped_b++;
}

static const struct dfi_evq_source_ops tag_ops = {
	.read = tag_read, .trywait = tag_trywait, .fd = tag_fd, .consumed = tag_consumed,
};

static bool names_ep(const DAT_EVENT *ev, void *ep)
{
	return ev->event_data.dto_completion_event_data.ep_handle == ep;
}

/* An EP freed with events queued (dto.c, dfi_ep_dto_orphan): its events
 * read from the source stay for the consumer, in order, but their reaps
 * are no longer reported to the source; the other EP's still are, and a
 * software event in between is untouched. */
static void test_source_detach_keeps_events_drops_reaps(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(16, DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG, aq);
	struct tag_source s;

	(void)state;
	memset(&s, 0, sizeof(s));
	for (int i = 0; i < 8; i++) {
		s.ev[i] = ev_dto((uint64_t)i);
		s.ev[i].event_data.dto_completion_event_data.ep_handle = i % 2 ? TAG_EP_B : TAG_EP_A;
	}
	s.n = 4;
	dfi_evq_set_source(q, &tag_ops, &s);
	dfi_evq_source_flush(q);		/* 0..3 into the ring */
	assert_int_equal(evq_post_sw(q, 100), DAT_SUCCESS);
	s.n = 8;
	dfi_evq_source_flush(q);		/* 4..7 after it */
	assert_int_equal(dfi_evq_count(q), 9);
	assert_int_equal(dfi_evq_source_detach(q, names_ep, TAG_EP_A), 4);
	assert_int_equal(dfi_evq_source_detach(q, names_ep, TAG_EP_A), 0);
	for (uint64_t i = 0; i < 4; i++)
		evq_expect(q, i);
	evq_expect(q, 100);
	for (uint64_t i = 4; i < 8; i++)
		evq_expect(q, i);
	evq_expect_empty(q);
	assert_int_equal(s.reaped_a, 0);
	assert_int_equal(s.reaped_b, 4);
	dfi_evq_set_source(q, NULL, NULL);
	evq_free(q);
	evq_free(aq);
}

/* ================================================================ scenarios 13, 14, 16 */

static void expect_overflow_report(struct dfi_evq *aq, struct dfi_evq *q)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	assert_int_equal(dfi_evq_dequeue(aq, &ev), DAT_SUCCESS);
	assert_int_equal(ev.event_number, DAT_ASYNC_ERROR_EVD_OVERFLOW);
	assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(aq));
	assert_ptr_equal(ev.event_data.asynch_error_event_data.dat_handle, (DAT_HANDLE)q);
	assert_int_equal(ev.event_data.asynch_error_event_data.reason, DAT_EVD_OVERFLOW_ERROR);
}

/* D4: the overflow is reported on the async EVD (not in the full EVD, not with
 * the IA handle), the dropped event is the only loss, the EVD stays usable. */
static void test_s13_overflow_reported_on_async_D4(void **state)
{
	struct dfi_evq *aq = evq_new_async(8);
	struct dfi_evq *q = evq_new(4, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CONNECTION_FLAG, aq);
	DAT_EVENT ev;
	DAT_COUNT nmore;

	(void)state;
	for (uint64_t i = 0; i < 4; i++) {
		ev = ev_conn(i);
		assert_int_equal(dfi_evq_post(q, &ev), 0);
	}
	ev = ev_conn(4);
	assert_int_equal(dfi_evq_post(q, &ev), -ENOSPC);
	assert_int_equal(dfi_evq_count(aq), 1);
	expect_overflow_report(aq, q);
	evq_expect_empty(aq);

	assert_int_equal(dfi_evq_count(q), 4);
	for (uint64_t i = 0; i < 4; i++)
		evq_expect(q, i);
	evq_expect_empty(q);

	/* not stuck, not dead */
	assert_false(evq_has_waiter(q));
	ev = ev_conn(5);
	assert_int_equal(dfi_evq_post(q, &ev), 0);
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 5);
	evq_free(q);
	evq_free(aq);
}

static void test_s13_overflow_once_per_episode(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_CONNECTION_FLAG, aq);
	DAT_EVENT ev;

	(void)state;
	for (uint64_t i = 0; i < 4; i++) {
		ev = ev_conn(i);
		assert_int_equal(dfi_evq_post(q, &ev), 0);
	}
	ev = ev_conn(4);
	assert_int_equal(dfi_evq_post(q, &ev), -ENOSPC);
	ev = ev_conn(5);
	assert_int_equal(dfi_evq_post(q, &ev), -ENOSPC);
	ev = ev_conn(6);
	assert_int_equal(dfi_evq_post(q, &ev), -ENOSPC);
	assert_int_equal(dfi_evq_count(aq), 1);		/* one report per episode */

	evq_expect(q, 0);				/* a slot frees: episode over */
	ev = ev_conn(7);
	assert_int_equal(dfi_evq_post(q, &ev), 0);
	ev = ev_conn(8);
	assert_int_equal(dfi_evq_post(q, &ev), -ENOSPC);
	assert_int_equal(dfi_evq_count(aq), 2);		/* a new episode */
	expect_overflow_report(aq, q);
	expect_overflow_report(aq, q);
	evq_expect_empty(aq);
	evq_expect(q, 1);
	evq_expect(q, 2);
	evq_expect(q, 3);
	evq_expect(q, 7);
	evq_expect_empty(q);
	evq_free(q);
	evq_free(aq);
}

/* D5: an overflow while a thread waits must not leave the EVD WAITED nor make
 * the wait return anything but its normal result. */
static void test_s13_overflow_during_wait_not_stuck_D5(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_CONNECTION_FLAG | DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	int rc4;

	(void)state;
	j = waitjob_start(q, 5000000, 4);
	evq_wait_for_waiter(q, 10000);
	for (uint64_t i = 0; i < 4; i++) {
		ev = ev_conn(i);
		assert_int_equal(dfi_evq_post(q, &ev), 0);
	}
	ev = ev_conn(4);
	rc4 = dfi_evq_post(q, &ev);		/* 0 if the waiter already took one */
	assert_true(rc4 == 0 || rc4 == -ENOSPC);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 0);
	assert_in_range(j->nmore, 3, 4);
	free(j);
	assert_false(evq_has_waiter(q));
	evq_expect(q, 1);
	evq_expect(q, 2);
	evq_expect(q, 3);
	if (rc4 == 0) {
		evq_expect(q, 4);
		assert_int_equal(dfi_evq_count(aq), 0);
	} else {
		expect_overflow_report(aq, q);
	}
	evq_expect_empty(q);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 0, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	assert_int_equal(evq_post_sw(q, 10), DAT_SUCCESS);
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 10);
	evq_free(q);
	evq_free(aq);
}

/* D5 / scenario 15 principle: completions are pulled from a source only into
 * free ring slots; a full ring never loses a polled completion, never overflows. */
static void test_s13_source_never_overflows_ring_D5(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct waitjob *j;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	uint64_t next = 1;

	(void)state;
	fake_source_attach(fs, q);
	inject_dtos(fs, 0, 10);
	j = waitjob_start(q, 5000000, 4);
	waitjob_join(j, 6000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 0);
	assert_int_equal(j->nmore, 3);
	free(j);
	assert_true(atomic_load(&fs->n_max_read) <= 4);
	assert_int_equal(fake_source_pending(fs), 6);	/* still in the source */
	assert_int_equal(dfi_evq_count(aq), 0);		/* no overflow */
	assert_false(evq_has_waiter(q));
	for (int guard = 0; next < 10 && guard < 100; guard++) {
		DAT_RETURN rc = dfi_evq_wait(q, 100000, 1, &ev, &nmore);

		if (rc != DAT_SUCCESS)
			fail_msg("wait returned %#x with completions pending", (unsigned)rc);
		assert_int_equal(ev_seq(&ev), next);
		assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(q));
		next++;
	}
	assert_int_equal(next, 10);
	evq_expect_empty(q);
	assert_int_equal(dfi_evq_count(aq), 0);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* A source that reads ahead itself (read_one, the CQ source) serves a
 * plain dequeue on an empty ring one event at a time, past the ring: the
 * event carries the EVD's handle, the ring stays empty, read() is not
 * called.  What the ring holds goes first (read_one is not called while it
 * holds anything), and dat_evd_wait still fills the ring in batches. */
static void test_dequeue_read_one_past_the_ring(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(256, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;

	(void)state;
	fake_source_attach_read_one(fs, q);
	inject_dtos(fs, 0, 3);
	for (uint64_t i = 0; i < 3; i++) {
		evq_expect(q, i);
		assert_int_equal(dfi_evq_count(q), 0);
	}
	assert_int_equal(atomic_load(&fs->n_read_ones), 3);
	assert_int_equal(atomic_load(&fs->n_reads), 0);
	evq_expect_empty(q);
	assert_int_equal(atomic_load(&fs->n_read_ones), 4);

	/* the ring first: a software event queued before the completion */
	assert_int_equal(evq_post_sw(q, 100), DAT_SUCCESS);
	ev = ev_dto(3);
	fake_source_inject(fs, &ev);
	evq_expect(q, 100);
	assert_int_equal(atomic_load(&fs->n_read_ones), 4);
	evq_expect(q, 3);
	assert_int_equal(atomic_load(&fs->n_read_ones), 5);

	/* a waiter reads a batch into the ring; dequeue then pops the ring */
	inject_dtos(fs, 4, 14);
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 4);
	assert_int_equal(nmore, 9);
	assert_int_equal(atomic_load(&fs->n_reads), 1);
	for (uint64_t i = 5; i < 14; i++)
		evq_expect(q, i);
	assert_int_equal(atomic_load(&fs->n_read_ones), 5);
	assert_int_equal(atomic_load(&fs->n_read_events), 14);
	evq_expect_empty(q);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* A consumer that wants one event reads one batch (64) of the source, not
 * the whole source: every read of a libfabric CQ is a progress pass (an
 * epoll_wait on tcp), so reading on to an empty CQ after a full batch cost
 * the reap test one pass per burst.  What stays in the source comes next,
 * in order; dat_evd_wait reads only the batches its threshold needs, and
 * *nmore counts what the ring holds. */
static void test_dequeue_and_wait_read_the_batches_they_need(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(256, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;

	(void)state;
	fake_source_attach(fs, q);
	inject_dtos(fs, 0, 100);
	assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 0);
	assert_int_equal(atomic_load(&fs->n_reads), 1);
	assert_int_equal(dfi_evq_count(q), 63);
	assert_int_equal(fake_source_pending(fs), 36);
	for (uint64_t i = 1; i < 64; i++)
		evq_expect(q, i);
	assert_int_equal(atomic_load(&fs->n_reads), 1);		/* the ring served them */
	evq_expect(q, 64);					/* empty ring: the rest */
	assert_int_equal(atomic_load(&fs->n_reads), 2);
	assert_int_equal(fake_source_pending(fs), 0);
	for (uint64_t i = 65; i < 100; i++)
		evq_expect(q, i);
	evq_expect_empty(q);

	inject_dtos(fs, 100, 200);
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 100);
	assert_int_equal(nmore, 63);
	assert_int_equal(fake_source_pending(fs), 36);
	assert_int_equal(dfi_evq_wait(q, 0, 70, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 101);
	assert_int_equal(nmore, 98);				/* 63 + 36 - 1 */
	assert_int_equal(fake_source_pending(fs), 0);
	for (uint64_t i = 102; i < 200; i++)
		evq_expect(q, i);
	evq_expect_empty(q);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

static void test_s14_post_se_full_is_not_overflow(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_SOFTWARE_FLAG, aq);

	(void)state;
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	assert_int_equal(DAT_GET_TYPE(evq_post_sw(q, 4)), DAT_QUEUE_FULL);
	assert_int_equal(DAT_GET_TYPE(evq_post_sw(q, 5)), DAT_QUEUE_FULL);
	assert_int_equal(dfi_evq_count(aq), 0);		/* async EVD not told */
	evq_expect_empty(aq);
	assert_int_equal(dfi_evq_count(q), 4);
	for (uint64_t i = 0; i < 4; i++)
		evq_expect(q, i);
	evq_expect_empty(q);
	assert_int_equal(evq_post_sw(q, 6), DAT_SUCCESS);
	evq_expect(q, 6);
	evq_free(q);
	evq_free(aq);
}

static void test_s16_async_overflow_is_catastrophic(void **state)
{
	const DAT_RETURN dead = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_ASYNC);
	struct dfi_evq *aq = evq_new_async(4);
	struct dfi_evq *q = evq_new(4, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CONNECTION_FLAG, aq);
	DAT_EVENT ev;
	DAT_COUNT nmore;
	uint64_t t0;

	(void)state;
	for (uint64_t i = 0; i < 4; i++) {
		ev = ev_async(i);
		assert_int_equal(dfi_evq_post(aq, &ev), 0);
	}
	ev = ev_async(4);
	assert_int_equal(dfi_evq_post(aq, &ev), -ENOSPC);

	/* what was queued can still be taken */
	evq_expect(aq, 0);
	assert_int_equal(dfi_evq_wait(aq, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 1);
	evq_expect(aq, 2);
	/* fewer than threshold queued: a dead EVD fails at once */
	t0 = t_now();
	assert_int_equal(dfi_evq_wait(aq, 5000000, 2, &ev, &nmore), dead);
	assert_elapsed_between(t_now() - t0, 0, 1000 * MS);
	evq_expect(aq, 3);
	assert_int_equal(dfi_evq_dequeue(aq, &ev), dead);
	t0 = t_now();
	assert_int_equal(dfi_evq_wait(aq, 5000000, 1, &ev, &nmore), dead);
	assert_int_equal(dfi_evq_wait(aq, DAT_TIMEOUT_INFINITE, 1, &ev, &nmore), dead);
	assert_elapsed_between(t_now() - t0, 0, 1000 * MS);

	/* other EVDs keep working, including their own overflow */
	assert_int_equal(evq_post_sw(q, 10), DAT_SUCCESS);
	evq_expect(q, 10);
	for (uint64_t i = 0; i < 4; i++) {
		ev = ev_conn(i);
		assert_int_equal(dfi_evq_post(q, &ev), 0);
	}
	ev = ev_conn(4);
	assert_int_equal(dfi_evq_post(q, &ev), -ENOSPC);
	for (uint64_t i = 0; i < 4; i++)
		evq_expect(q, i);
	evq_expect_empty(q);
	assert_int_equal(dfi_evq_dequeue(aq, &ev), dead);
	evq_free(q);
	evq_free(aq);
}

/* The async EVD overflows because of overflow reports from other EVDs. */
static void test_s16_async_overflow_from_reports(void **state)
{
	const DAT_RETURN dead = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_ASYNC);
	struct dfi_evq *aq = evq_new_async(1);
	struct dfi_evq *q1 = evq_new(1, DAT_EVD_CONNECTION_FLAG, aq);
	struct dfi_evq *q2 = evq_new(1, DAT_EVD_CONNECTION_FLAG, aq);
	DAT_EVENT ev;

	(void)state;
	ev = ev_conn(0);
	assert_int_equal(dfi_evq_post(q1, &ev), 0);
	assert_int_equal(dfi_evq_post(q2, &ev), 0);
	ev = ev_conn(1);
	assert_int_equal(dfi_evq_post(q1, &ev), -ENOSPC);	/* report fills aq */
	assert_int_equal(dfi_evq_post(q2, &ev), -ENOSPC);	/* report overflows aq */
	expect_overflow_report(aq, q1);
	assert_int_equal(dfi_evq_dequeue(aq, &ev), dead);
	evq_expect(q1, 0);
	evq_expect(q2, 0);
	ev = ev_conn(2);
	assert_int_equal(dfi_evq_post(q1, &ev), 0);
	evq_expect(q1, 2);
	evq_free(q2);
	evq_free(q1);
	evq_free(aq);
}

/* ================================================================ scenario 17 */

static void test_s17_resize_during_wait(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;
	DAT_COUNT qlen;
	DAT_EVD_STATE st;

	(void)state;
	j = waitjob_start(q, 10000000, 1);
	evq_wait_for_waiter(q, 10000);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_resize(q, 32)), DAT_INVALID_STATE);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_resize(q, 4)), DAT_INVALID_STATE);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_int_equal(qlen, 8);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 1);
	free(j);
	assert_int_equal(dfi_evq_resize(q, 32), DAT_SUCCESS);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_int_equal(qlen, 32);
	evq_free(q);
	evq_free(aq);
}

static void test_s17_resize_below_count_refused(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_COUNT qlen;
	DAT_EVD_STATE st;

	(void)state;
	for (uint64_t i = 0; i < 5; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_resize(q, 3)), DAT_INVALID_STATE);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_resize(q, 4)), DAT_INVALID_STATE);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_int_equal(qlen, 8);
	assert_int_equal(dfi_evq_count(q), 5);
	for (uint64_t i = 0; i < 5; i++)
		evq_expect(q, i);
	evq_expect_empty(q);
	evq_free(q);
	evq_free(aq);
}

static void test_s17_resize_grow_keeps_order(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_COUNT qlen;
	DAT_EVD_STATE st;

	(void)state;
	/* wrapped content: 6, 7 at the end of the ring, 8, 9, 10 at the start */
	for (uint64_t i = 0; i < 8; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	for (uint64_t i = 0; i < 6; i++)
		evq_expect(q, i);
	for (uint64_t i = 8; i < 11; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	assert_int_equal(dfi_evq_resize(q, 16), DAT_SUCCESS);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_int_equal(qlen, 16);
	assert_int_equal(dfi_evq_count(q), 5);
	for (uint64_t i = 6; i < 11; i++)
		evq_expect(q, i);
	evq_expect_empty(q);
	for (uint64_t i = 100; i < 116; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	assert_int_equal(DAT_GET_TYPE(evq_post_sw(q, 116)), DAT_QUEUE_FULL);
	for (uint64_t i = 100; i < 116; i++)
		evq_expect(q, i);
	evq_free(q);
	evq_free(aq);
}

/* Scenario 17 as written: queue 5, resize(16), all 5 in order, then 16 more fit. */
static void test_s17_resize_5_to_16(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);

	(void)state;
	for (uint64_t i = 0; i < 5; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	assert_int_equal(dfi_evq_resize(q, 16), DAT_SUCCESS);
	for (uint64_t i = 0; i < 5; i++)
		evq_expect(q, i);
	for (uint64_t i = 0; i < 16; i++)
		assert_int_equal(evq_post_sw(q, 20 + i), DAT_SUCCESS);
	assert_int_equal(DAT_GET_TYPE(evq_post_sw(q, 99)), DAT_QUEUE_FULL);
	for (uint64_t i = 0; i < 16; i++)
		evq_expect(q, 20 + i);
	evq_free(q);
	evq_free(aq);
}

static void test_s17_resize_shrink_keeps_order(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(16, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_COUNT qlen;
	DAT_EVD_STATE st;

	(void)state;
	for (uint64_t i = 0; i < 16; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	for (uint64_t i = 0; i < 14; i++)
		evq_expect(q, i);
	assert_int_equal(evq_post_sw(q, 16), DAT_SUCCESS);	/* wrapped: 14, 15 | 16 */
	assert_int_equal(dfi_evq_resize(q, 3), DAT_SUCCESS);	/* rounds to 4 >= 3 */
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_int_equal(qlen, 4);
	assert_int_equal(evq_post_sw(q, 17), DAT_SUCCESS);
	assert_int_equal(DAT_GET_TYPE(evq_post_sw(q, 18)), DAT_QUEUE_FULL);
	for (uint64_t i = 14; i < 18; i++)
		evq_expect(q, i);
	evq_expect_empty(q);
	evq_free(q);
	evq_free(aq);
}

static void test_s17_resize_bad_length(void **state)
{
	const DAT_RETURN bad = DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_COUNT qlen;
	DAT_EVD_STATE st;

	(void)state;
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	assert_int_equal(dfi_evq_resize(q, 0), bad);
	assert_int_equal(dfi_evq_resize(q, -1), bad);
	assert_int_equal(dfi_evq_resize(q, DFI_EVD_MAX_QLEN + 1), bad);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_int_equal(qlen, 8);
	assert_int_equal(dfi_evq_resize(q, DFI_EVD_MAX_QLEN), DAT_SUCCESS);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_int_equal(qlen, DFI_EVD_MAX_QLEN);
	assert_int_equal(dfi_evq_resize(q, 8), DAT_SUCCESS);
	assert_int_equal(dfi_evq_resize(q, 8), DAT_SUCCESS);	/* same length: no-op */
	evq_expect(q, 1);
	evq_free(q);
	evq_free(aq);
}

/* D7: resize a DTO EVD while a source streams completions and a consumer takes
 * them: no deadlock, nothing lost or duplicated, order kept. */
#define S17_N 20000

struct s17 {
	struct dfi_evq *q;
	struct fake_source *fs;
	atomic_bool stop;
	/* consumer results */
	atomic_uint_fast64_t next;
	uint64_t bad_seq;
	DAT_RETURN bad_rc;
	int bad;
};

static void s17_producer(void *arg)
{
	struct s17 *s = arg;

	for (uint64_t i = 0; i < S17_N && !atomic_load(&s->stop); i++) {
		DAT_EVENT ev = ev_dto(i);

		while (fake_source_pending(s->fs) > 200 && !atomic_load(&s->stop))
			t_sleep_us(50);
		fake_source_inject(s->fs, &ev);
	}
}

static void s17_consumer(void *arg)
{
	struct s17 *s = arg;
	uint64_t it = 0;

	while (atomic_load(&s->next) < S17_N && !atomic_load(&s->stop)) {
		DAT_EVENT ev;
		DAT_COUNT nmore;
		DAT_RETURN rc = (it++ % 3 == 0) ? dfi_evq_dequeue(s->q, &ev)
						: dfi_evq_wait(s->q, 20000, 1, &ev, &nmore);

		if (rc == DAT_SUCCESS) {
			if (ev_seq(&ev) != atomic_load(&s->next) ||
			    ev.evd_handle != (DAT_EVD_HANDLE)s->q) {
				s->bad = 1;
				s->bad_seq = ev_seq(&ev);
				return;
			}
			atomic_fetch_add(&s->next, 1);
		} else if (rc != DAT_QUEUE_EMPTY && DAT_GET_TYPE(rc) != DAT_TIMEOUT_EXPIRED) {
			s->bad = 2;
			s->bad_rc = rc;
			return;
		}
	}
}

static void test_s17_resize_with_streaming_source_D7(void **state)
{
	static const DAT_COUNT sizes[] = { 8, 32, 16, 64, 4, 128, 2 };
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(16, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct s17 *s = calloc(1, sizeof(*s));
	struct tjob *prod, *cons;
	unsigned ok = 0, busy = 0, k = 0;
	DAT_RETURN other = DAT_SUCCESS;
	uint64_t end;

	(void)state;
	fake_source_attach(fs, q);
	dfi_evq_ref(q);					/* the EP */
	s->q = q;
	s->fs = fs;
	atomic_init(&s->stop, false);
	prod = tjob_start(s17_producer, s);
	cons = tjob_start(s17_consumer, s);
	end = t_now() + 30000 * MS;
	while (!atomic_load(&cons->done) && t_now() < end) {
		DAT_RETURN rc = dfi_evq_resize(q, sizes[k++ % (sizeof(sizes) / sizeof(sizes[0]))]);

		if (rc == DAT_SUCCESS)
			ok++;
		else if (DAT_GET_TYPE(rc) == DAT_INVALID_STATE)
			busy++;
		else
			other = rc;
		t_sleep_us(200);
	}
	if (!atomic_load(&cons->done)) {
		atomic_store(&s->stop, true);
		fail_msg("consumer stuck at seq %llu/%d after 30 s (deadlock or lost completion; "
			 "source pending %zu)", (unsigned long long)atomic_load(&s->next), S17_N,
			 fake_source_pending(fs));
	}
	tjob_join(cons, 5000, "consumer");
	tjob_join(prod, 5000, "producer");
	if (s->bad == 1)
		fail_msg("completion out of order/duplicated/lost: expected %llu got %llu",
			 (unsigned long long)atomic_load(&s->next), (unsigned long long)s->bad_seq);
	if (s->bad == 2)
		fail_msg("consumer got unexpected %#x", (unsigned)s->bad_rc);
	assert_int_equal(atomic_load(&s->next), S17_N);
	if (other != DAT_SUCCESS)
		fail_msg("resize returned %#x", (unsigned)other);
	assert_true(ok > 0);
	print_message("      resize: %u succeeded, %u refused (waiter/too many queued)\n", ok, busy);
	evq_expect_empty(q);
	assert_int_equal(dfi_evq_count(aq), 0);
	dfi_evq_unref(q);
	free(s);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* ================================================================ scenario 24 */

#define S24_N 200000
#define S24_THREADS 4

struct s24 {
	struct dfi_evq *q;
	unsigned n;
	atomic_uint consumed;
	atomic_bool poster_done;
	atomic_int errors;
	bool use_lock;
	pthread_mutex_t order_lock;
	uint32_t *global;	/* under order_lock */
	unsigned nglobal;
};

struct s24_consumer {
	struct s24 *s;
	uint32_t *seen;
	unsigned n;
	DAT_RETURN bad_rc;
};

static void s24_poster(void *arg)
{
	struct s24 *s = arg;

	for (unsigned i = 0; i < s->n; i++) {
		for (;;) {
			DAT_RETURN rc = evq_post_sw(s->q, i);

			if (rc == DAT_SUCCESS)
				break;
			if (DAT_GET_TYPE(rc) != DAT_QUEUE_FULL) {
				atomic_fetch_add(&s->errors, 1);
				atomic_store(&s->poster_done, true);
				return;
			}
			sched_yield();
		}
	}
	atomic_store(&s->poster_done, true);
}

static void s24_consume(void *arg)
{
	struct s24_consumer *c = arg;
	struct s24 *s = c->s;
	uint64_t idle_since = 0;

	while (atomic_load(&s->consumed) < s->n) {
		DAT_EVENT ev;
		DAT_RETURN rc;

		if (s->use_lock)
			pthread_mutex_lock(&s->order_lock);
		rc = dfi_evq_dequeue(s->q, &ev);
		if (rc == DAT_SUCCESS && s->use_lock)
			s->global[s->nglobal++] = (uint32_t)ev_seq(&ev);
		if (s->use_lock)
			pthread_mutex_unlock(&s->order_lock);
		if (rc == DAT_SUCCESS) {
			c->seen[c->n++] = (uint32_t)ev_seq(&ev);
			atomic_fetch_add(&s->consumed, 1);
			idle_since = 0;
		} else if (rc == DAT_QUEUE_EMPTY) {
			if (atomic_load(&s->poster_done)) {
				if (!idle_since)
					idle_since = t_now();
				else if (t_now() - idle_since > 2000 * MS)
					return;		/* events lost */
			}
			sched_yield();
		} else {
			c->bad_rc = rc;
			atomic_fetch_add(&s->errors, 1);
			return;
		}
	}
}

static void s24_run(bool use_lock, unsigned n)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(1024, DAT_EVD_SOFTWARE_FLAG, aq);
	struct s24 *s = calloc(1, sizeof(*s));
	struct s24_consumer *c = calloc(S24_THREADS, sizeof(*c));
	struct tjob *tc[S24_THREADS], *tp;
	uint8_t *hits = calloc(n, 1);
	unsigned total = 0;

	assert_non_null(s);
	assert_non_null(c);
	assert_non_null(hits);
	s->q = q;
	s->n = n;
	s->use_lock = use_lock;
	pthread_mutex_init(&s->order_lock, NULL);
	if (use_lock)
		s->global = calloc(n, sizeof(uint32_t));
	for (int i = 0; i < S24_THREADS; i++) {
		c[i].s = s;
		c[i].seen = calloc(n, sizeof(uint32_t));
		assert_non_null(c[i].seen);
		tc[i] = tjob_start(s24_consume, &c[i]);
	}
	tp = tjob_start(s24_poster, s);
	tjob_join(tp, 60000, "poster");
	for (int i = 0; i < S24_THREADS; i++)
		tjob_join(tc[i], 60000, "dequeuer");
	for (int i = 0; i < S24_THREADS; i++)
		if (c[i].bad_rc)
			fail_msg("dequeuer %d got %#x", i, (unsigned)c[i].bad_rc);
	assert_int_equal(atomic_load(&s->errors), 0);

	for (int i = 0; i < S24_THREADS; i++) {
		for (unsigned k = 0; k < c[i].n; k++) {
			uint32_t v = c[i].seen[k];

			if (v >= n)
				fail_msg("dequeuer %d: bogus sequence %u", i, v);
			if (k && v <= c[i].seen[k - 1])
				fail_msg("dequeuer %d: %u after %u (per-thread order broken)",
					 i, v, c[i].seen[k - 1]);
			if (hits[v]++)
				fail_msg("event %u delivered twice", v);
		}
		total += c[i].n;
	}
	if (total != n)
		fail_msg("%u of %u events delivered", total, n);
	if (use_lock) {
		assert_int_equal(s->nglobal, n);
		for (unsigned k = 0; k < n; k++)
			if (s->global[k] != k)
				fail_msg("global order broken at %u: got %u", k, s->global[k]);
	}
	evq_expect_empty(q);
	for (int i = 0; i < S24_THREADS; i++)
		free(c[i].seen);
	free(c);
	free(s->global);
	pthread_mutex_destroy(&s->order_lock);
	free(s);
	free(hits);
	evq_free(q);
	evq_free(aq);
}

static void test_s24_concurrent_dequeuers_exactly_once(void **state)
{
	(void)state;
	s24_run(false, S24_N);
}

static void test_s24_consumer_lock_keeps_global_order(void **state)
{
	(void)state;
	s24_run(true, S24_N / 4);
}

/* Concurrent provider posters: nothing lost, per-stream order kept. */
#define CP_PRODUCERS 4
#define CP_PER 5000

struct cp {
	struct dfi_evq *q;
	atomic_int errors;
	atomic_uint done_producers;
};

struct cp_prod {
	struct cp *cp;
	unsigned id;
};

static void cp_producer(void *arg)
{
	struct cp_prod *p = arg;

	for (uint64_t i = 0; i < CP_PER; i++) {
		DAT_EVENT ev = ev_dto(((uint64_t)p->id << 32) | i);

		if (dfi_evq_post(p->cp->q, &ev) != 0)
			atomic_fetch_add(&p->cp->errors, 1);
	}
	atomic_fetch_add(&p->cp->done_producers, 1);
}

static void test_concurrent_provider_posters(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(CP_PRODUCERS * CP_PER, DAT_EVD_DTO_FLAG, aq);
	struct cp *cp = calloc(1, sizeof(*cp));
	struct cp_prod pp[CP_PRODUCERS];
	struct tjob *t[CP_PRODUCERS];
	uint64_t next[CP_PRODUCERS] = { 0 };
	unsigned got = 0;
	uint64_t end = t_now() + 30000 * MS;

	(void)state;
	cp->q = q;
	for (unsigned i = 0; i < CP_PRODUCERS; i++) {
		pp[i].cp = cp;
		pp[i].id = i;
		t[i] = tjob_start(cp_producer, &pp[i]);
	}
	while (got < CP_PRODUCERS * CP_PER && t_now() < end) {
		DAT_EVENT ev;
		DAT_RETURN rc = dfi_evq_dequeue(q, &ev);

		if (rc == DAT_QUEUE_EMPTY) {
			sched_yield();
			continue;
		}
		assert_int_equal(rc, DAT_SUCCESS);
		uint64_t seq = ev_seq(&ev);
		unsigned id = (unsigned)(seq >> 32);

		assert_in_range(id, 0, CP_PRODUCERS - 1);
		if ((seq & 0xffffffffu) != next[id])
			fail_msg("producer %u: got %llu expected %llu", id,
				 (unsigned long long)(seq & 0xffffffffu), (unsigned long long)next[id]);
		next[id]++;
		got++;
	}
	for (unsigned i = 0; i < CP_PRODUCERS; i++)
		tjob_join(t[i], 5000, "producer");
	assert_int_equal(atomic_load(&cp->errors), 0);
	assert_int_equal(got, CP_PRODUCERS * CP_PER);
	assert_int_equal(dfi_evq_count(aq), 0);
	free(cp);
	evq_free(q);
	evq_free(aq);
}

/* ================================================================ sources */

/* Completions read from a source get the EVD handle; dequeue polls the source. */
static void test_dequeue_polls_source(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);
	evq_expect_empty(q);
	inject_dtos(fs, 0, 10);
	for (uint64_t i = 0; i < 10; i++) {
		memset(&ev, 0, sizeof(ev));
		assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
		assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
		assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(q));
		assert_int_equal(ev_seq(&ev), i);
		assert_true(dfi_evq_count(q) <= 4);
	}
	evq_expect_empty(q);
	assert_true(atomic_load(&fs->n_max_read) <= 4);
	assert_int_equal(atomic_load(&fs->n_arms), 0);		/* dequeue never arms */
	assert_int_equal(dfi_evq_count(aq), 0);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* ---------------------------------------------- the progress lease's inputs */

/* Consumer calls are counted for the progress context (progress.c stays
 * off a CQ whose consumer drives it): dequeue, wait, and posts that touch
 * the EVD; a producer's post or a notify pass is not a consumer call. */
static void test_consumer_calls_counted(void **state)
{
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, NULL);
	DAT_EVENT ev;
	DAT_COUNT nmore;
	uint32_t c0;

	(void)state;
	c0 = dfi_evq_calls(q);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_dequeue(q, &ev)), DAT_QUEUE_EMPTY);
	assert_int_equal(dfi_evq_calls(q), c0 + 1);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	dfi_evq_source_notify(q);
	assert_int_equal(dfi_evq_calls(q), c0 + 1);	/* producers are not consumers */
	assert_int_equal(dfi_evq_wait(q, 0, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(dfi_evq_calls(q), c0 + 2);
	dfi_evq_touch(q);
	assert_int_equal(dfi_evq_calls(q), c0 + 3);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 0, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	assert_int_equal(dfi_evq_calls(q), c0 + 4);
	evq_free(q);
}

/* Whether the consumer drives the source: activity (the caller's reading of
 * the counter), a waiter, or a full ring say yes; an enabled CNO says no to
 * activity alone (its consumer relies on the progress context). */
static void test_consumer_drives_rules(void **state)
{
	struct dfi_evq *q = evq_new(4, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, NULL);
	struct dfi_cno cno;
	struct waitjob *j;

	(void)state;
	assert_false(dfi_evq_consumer_drives(q, false));
	assert_true(dfi_evq_consumer_drives(q, true));

	assert_int_equal(dfi_cno_init(&cno, (DAT_CNO_HANDLE)&cno, NULL, false), 0);
	dfi_evq_modify_cno(q, &cno);
	dfi_evq_enable(q);
	assert_false(dfi_evq_consumer_drives(q, true));
	dfi_evq_disable(q);
	assert_true(dfi_evq_consumer_drives(q, true));
	dfi_evq_modify_cno(q, NULL);

	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	assert_true(dfi_evq_consumer_drives(q, false));	/* full: nothing to read */
	for (uint64_t i = 0; i < 4; i++)
		evq_expect(q, i);
	assert_false(dfi_evq_consumer_drives(q, false));

	j = waitjob_start(q, DAT_TIMEOUT_INFINITE, 1);
	evq_wait_for_waiter(q, 0);
	assert_true(dfi_evq_consumer_drives(q, false));	/* it sleeps on the fd */
	assert_int_equal(evq_post_sw(q, 9), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	free(j);
	assert_false(dfi_evq_consumer_drives(q, false));
	dfi_cno_fini(&cno);
	evq_free(q);
}

/* dfi_evq_source_notify with no waiter reads into free slots only. */
static void test_source_notify_fills_free_slots_only(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(4, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;
	uint64_t next = 0;

	(void)state;
	fake_source_attach(fs, q);
	inject_dtos(fs, 0, 10);
	dfi_evq_source_notify(q);
	assert_int_equal(dfi_evq_count(q) + (DAT_COUNT)fake_source_pending(fs), 10);
	assert_true(dfi_evq_count(q) <= 4);
	assert_int_equal(dfi_evq_count(aq), 0);
	dfi_evq_source_notify(q);			/* full: nothing lost */
	assert_int_equal(dfi_evq_count(q) + (DAT_COUNT)fake_source_pending(fs), 10);
	for (int guard = 0; next < 10 && guard < 50; guard++) {
		while (dfi_evq_dequeue(q, &ev) == DAT_SUCCESS) {
			assert_int_equal(ev_seq(&ev), next);
			assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(q));
			next++;
		}
		dfi_evq_source_notify(q);
	}
	assert_int_equal(next, 10);
	assert_int_equal(dfi_evq_count(aq), 0);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* dfi_evq_source_flush takes all the source holds, as far as the ring has
 * room, even when each read is short with more behind it: what a flush
 * leaves is dropped with the freed EP's pool (the soak on net's RDM
 * endpoints lost the cancellations of an ended connection's 8 receives
 * behind a short read of the CQ's read-ahead). */
static void test_source_flush_takes_all_behind_short_reads(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(16, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);
	fake_source_set_read_cap(fs, 3);
	inject_dtos(fs, 0, 8);
	dfi_evq_source_flush(q);
	assert_int_equal(dfi_evq_count(q), 8);
	assert_int_equal(fake_source_pending(fs), 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
		assert_int_equal(ev.event_data.dto_completion_event_data.user_cookie.as_64, i);
	}

	/* no further than the ring's room: the rest stays in the source */
	inject_dtos(fs, 8, 28);
	dfi_evq_source_flush(q);
	assert_int_equal(dfi_evq_count(q), 16);
	assert_int_equal(fake_source_pending(fs), 4);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* dfi_evq_source_flush (an EP feeding the EVD is freed): an empty source
 * is left as it was, with no try-wait (on libfabric 1.17 tcp one walks
 * every EP of the CQ); what the source holds enters the ring, and an arm
 * that has not fired is kept, so a later completion still fires the fd. */
static void test_source_flush_no_trywait_when_empty(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	uint64_t tw;
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);
	dfi_evq_source_notify(q);			/* arms the empty source */
	assert_true(fake_source_armed(fs));
	tw = atomic_load(&fs->n_trywaits);
	dfi_evq_source_flush(q);
	assert_int_equal(atomic_load(&fs->n_trywaits), tw);
	assert_true(fake_source_armed(fs));
	assert_int_equal(dfi_evq_count(q), 0);

	/* two completions left by the EP: they fire the arm, and the flush
	 * moves them into the ring without a try-wait; the fired fd stays
	 * readable for whoever watches it, whose notify re-arms */
	inject_dtos(fs, 0, 2);
	tw = atomic_load(&fs->n_trywaits);
	dfi_evq_source_flush(q);
	assert_int_equal(dfi_evq_count(q), 2);
	assert_int_equal(fake_source_pending(fs), 0);
	assert_int_equal(atomic_load(&fs->n_trywaits), tw);
	assert_true(fake_source_fd_readable(fs));
	assert_true(fake_source_consume_notification(fs));	/* the watcher */
	dfi_evq_source_notify(q);
	assert_true(fake_source_armed(fs));
	ev = ev_dto(2);
	fake_source_inject(fs, &ev);			/* the next one fires the fd */
	assert_true(fake_source_fd_readable(fs));
	for (uint64_t i = 0; i < 2; i++) {
		assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
		assert_int_equal(ev_seq(&ev), i);
	}
	assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 2);
	assert_int_equal(dfi_evq_count(aq), 0);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* ================================================================ scenario 25 */

static void test_s25_spurious_wakeups_honour_timeout(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct ticker *tk = calloc(1, sizeof(*tk));
	struct tjob *t;
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;
	DAT_RETURN rc;
	uint64_t t0, el, trywaits0, reads0;

	(void)state;
	fake_source_attach(fs, q);
	tk->fs = fs;
	tk->q = q;
	tk->period_us = 5000;
	tk->count = 400;
	atomic_init(&tk->stop, false);
	trywaits0 = atomic_load(&fs->n_trywaits);
	reads0 = atomic_load(&fs->n_reads);
	t = tjob_start(ticker_fn, tk);
	t0 = t_now();
	rc = dfi_evq_wait(q, 200000, 1, &ev, &nmore);
	el = t_now() - t0;
	atomic_store(&tk->stop, true);
	tjob_join(t, 5000, "spurious ticker");
	assert_int_equal(DAT_GET_TYPE(rc), DAT_TIMEOUT_EXPIRED);
	assert_int_equal(nmore, 0);
	assert_elapsed_between(el, 200 * MS, 2050 * MS);
	/* each spurious wakeup made the waiter re-arm (no busy loop on a stale fd) */
	assert_true(atomic_load(&fs->n_spurious) >= 5);
	assert_true(atomic_load(&fs->n_trywaits) - trywaits0 >= 2);
	if (atomic_load(&fs->n_reads) - reads0 > 20000)
		fail_msg("%llu source reads in a 200 ms wait: busy loop",
			 (unsigned long long)(atomic_load(&fs->n_reads) - reads0));
	free(tk);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

static void spurious_then_completion(void *arg)
{
	struct fake_source *fs = arg;
	DAT_EVENT ev = ev_dto(55);

	for (int i = 0; i < 10; i++) {
		t_sleep_us(3000);
		fake_source_spurious(fs);
	}
	t_sleep_us(3000);
	fake_source_inject(fs, &ev);
}

static void test_s25_spurious_then_completion(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct tjob *t;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	(void)state;
	fake_source_attach(fs, q);
	t = tjob_start(spurious_then_completion, fs);
	assert_int_equal(dfi_evq_wait(q, 5000000, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 55);
	assert_ptr_equal(ev.evd_handle, NO_ERR_EVD(q));
	tjob_join(t, 5000, "injector");
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* ================================================================ scenario 26 */

/* EP destroyed with completions pending: what the core already copied stays
 * valid and in order, the rest is gone, nothing hangs or breaks afterwards. */
static void test_s26_ep_destroyed_with_pending_completions(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	int *ep = malloc(sizeof(int));
	DAT_EVENT ev;
	DAT_COUNT nmore = -1;
	uint64_t next = 1;

	(void)state;
	assert_non_null(ep);
	fake_source_attach(fs, q);
	dfi_evq_ref(q);
	for (uint64_t i = 0; i < 3; i++) {
		ev = ev_dto(i);
		ev.event_data.dto_completion_event_data.ep_handle = (DAT_EP_HANDLE)ep;
		fake_source_inject(fs, &ev);
	}
	evq_expect(q, 0);
	/* EP destroyed */
	fake_source_kill(fs);
	free(ep);
	dfi_evq_unref(q);
	while (dfi_evq_dequeue(q, &ev) == DAT_SUCCESS) {
		assert_int_equal(ev_seq(&ev), next);	/* copies, in order, no dup */
		next++;
	}
	assert_true(next <= 3);
	evq_expect_empty(q);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 20000, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	assert_int_equal(nmore, 0);
	assert_int_equal(evq_post_sw(q, 9), DAT_SUCCESS);
	assert_int_equal(dfi_evq_wait(q, 20000, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 9);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* The OFA fix: flush the EP's completions through the EVD before destroying it;
 * they then survive the EP. */
static void test_s26_flush_before_destroy_keeps_completions(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;
	DAT_COUNT nmore;

	(void)state;
	fake_source_attach(fs, q);
	dfi_evq_ref(q);
	inject_dtos(fs, 0, 3);
	dfi_evq_source_notify(q);			/* flush */
	assert_int_equal(fake_source_pending(fs), 0);
	assert_int_equal(dfi_evq_count(q), 3);
	fake_source_kill(fs);
	dfi_evq_unref(q);
	for (uint64_t i = 0; i < 3; i++)
		evq_expect(q, i);
	evq_expect_empty(q);
	assert_int_equal(DAT_GET_TYPE(dfi_evq_wait(q, 10000, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* ================================================================ D12 */

/* A failing arm is reported as an error (not asserted, not a hang) and the EVD
 * stays usable. */
static void test_d12_trywait_failure_reported(void **state)
{
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_RETURN rc;
	uint64_t t0;

	(void)state;
	fake_source_attach(fs, q);
	fake_source_set_trywait_error(fs, -EIO);
	t0 = t_now();
	rc = dfi_evq_wait(q, 3000000, 1, &ev, &nmore);
	assert_elapsed_between(t_now() - t0, 0, 1000 * MS);
	if (!(rc & DAT_CLASS_ERROR) || DAT_GET_TYPE(rc) == DAT_TIMEOUT_EXPIRED)
		fail_msg("wait with a failing arm returned %#x, expected an error", (unsigned)rc);
	assert_false(evq_has_waiter(q));
	fake_source_set_trywait_error(fs, 0);
	ev = ev_dto(3);
	fake_source_inject(fs, &ev);
	assert_int_equal(dfi_evq_wait(q, 1000000, 1, &ev, &nmore), DAT_SUCCESS);
	assert_int_equal(ev_seq(&ev), 3);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
}

/* ================================================================ main */

static int group_setup(void **state)
{
	(void)state;
	evtest_install_sigusr1();
	evtest_watchdog_start();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		evtest(test_qlen_round),
		evtest(test_init_query_defaults),
		evtest(test_dequeue_empty_is_plain_queue_empty),
		evtest(test_fifo_and_evd_handle_filled),
		evtest(test_post_se_copies_event),
		evtest(test_ring_wraparound),
		evtest(test_wait_pops_one_and_sets_nmore),
		evtest(test_wait_timeout_zero_never_sleeps),
		evtest(test_wait_invalid_args_leave_evd_usable_D6),
		evtest(test_s01_lost_wakeup_before_arm),
		evtest(test_s01_completion_right_after_arm),
		evtest(test_s01_arm_windows_repeated),
		evtest(test_s02_post_se_wakes_dto_waiter_D1),
		evtest(test_s02_connection_event_wakes_dto_waiter_D1),
		evtest(test_s02_post_se_wakes_software_waiter),
		evtest(test_s03_unwaitable_wakes_waiter),
		evtest(test_s03_unwaitable_wakes_dto_waiter_D1),
		evtest(test_s04_second_waiter_and_dequeue_rejected),
		evtest(test_s05_threshold),
		evtest(test_s05_threshold_waiter_released_when_met),
		evtest(test_s05_threshold_with_notify_model_D13),
		evtest(test_s06_timeout_with_posts_below_threshold),
		evtest(test_s06_timeout_not_restarted_D2),
		evtest(test_s06_submillisecond_timeout_D3),
		evtest(test_s06_huge_timeout_no_wrap_D14),
		evtest(test_s06_infinite_is_infinite),
		evtest(test_time_helpers_D14),
		evtest(test_s07_signal_interrupts_wait),
		evtest(test_s11_free_with_blocked_waiter_D8),
		evtest(test_s11_abort_without_waiter),
		evtest(test_s12_free_while_referenced),
		evtest(test_s12_free_waits_for_a_post_under_way),
		evtest(test_free_with_queued_events),
		evtest(test_s13_overflow_reported_on_async_D4),
		evtest(test_s13_overflow_once_per_episode),
		evtest(test_s13_overflow_during_wait_not_stuck_D5),
		evtest(test_s13_source_never_overflows_ring_D5),
		evtest(test_dequeue_and_wait_read_the_batches_they_need),
		evtest(test_dequeue_read_one_past_the_ring),
		evtest(test_source_detach_keeps_events_drops_reaps),
		evtest(test_s14_post_se_full_is_not_overflow),
		evtest(test_s16_async_overflow_is_catastrophic),
		evtest(test_s16_async_overflow_from_reports),
		evtest(test_s17_resize_during_wait),
		evtest(test_s17_resize_below_count_refused),
		evtest(test_s17_resize_grow_keeps_order),
		evtest(test_s17_resize_5_to_16),
		evtest(test_s17_resize_shrink_keeps_order),
		evtest(test_s17_resize_bad_length),
		evtest(test_s17_resize_with_streaming_source_D7),
		evtest(test_s24_concurrent_dequeuers_exactly_once),
		evtest(test_s24_consumer_lock_keeps_global_order),
		evtest(test_concurrent_provider_posters),
		evtest(test_dequeue_polls_source),
		evtest(test_source_notify_fills_free_slots_only),
		evtest(test_source_flush_no_trywait_when_empty),
		evtest(test_source_flush_takes_all_behind_short_reads),
		evtest(test_consumer_calls_counted),
		evtest(test_consumer_drives_rules),
		evtest(test_s25_spurious_wakeups_honour_timeout),
		evtest(test_s25_spurious_then_completion),
		evtest(test_s26_ep_destroyed_with_pending_completions),
		evtest(test_s26_flush_before_destroy_keeps_completions),
		evtest(test_d12_trywait_failure_reported),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
