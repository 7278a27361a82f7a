/*
 * Unit tests of the CNO core (src/event/cno_core.c) and of EVD -> CNO delivery
 * (evd_core.c) against event.h and evd-contract.md sections 3, 4.3 and 7
 * (scenarios 10, 18-23; defects D9, D10, D11).
 */
#include "evtest.h"
#include "fake_source.h"

#include <sched.h>

#define H(x) ((DAT_EVD_HANDLE)(x))
#define HINT1 ((DAT_EVD_HANDLE)(uintptr_t)0x1110)
#define HINT2 ((DAT_EVD_HANDLE)(uintptr_t)0x2220)
#define HINT3 ((DAT_EVD_HANDLE)(uintptr_t)0x3330)

static const DAT_OS_WAIT_PROXY_AGENT no_agent = { NULL, NULL };

static struct dfi_cno *cno_new(const DAT_OS_WAIT_PROXY_AGENT *agent, bool fd_mode)
{
	struct dfi_cno *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	assert_int_equal(dfi_cno_init(c, (DAT_CNO_HANDLE)c, agent ? agent : &no_agent, fd_mode), 0);
	return c;
}

static void cno_free(struct dfi_cno *c)
{
	assert_int_equal(dfi_cno_free_check(c), DAT_SUCCESS);
	dfi_cno_fini(c);
	free(c);
}

static int cno_waiters(struct dfi_cno *c)
{
	int n;

	pthread_mutex_lock(&c->lock);
	n = c->waiters;
	pthread_mutex_unlock(&c->lock);
	return n;
}

static void cno_wait_for_waiters(struct dfi_cno *c, int n)
{
	uint64_t end = t_now() + 5000 * MS;

	while (cno_waiters(c) < n) {
		if (t_now() > end)
			fail_msg("%d thread(s) did not enter dfi_cno_wait within 5 s", n);
		t_sleep_us(200);
	}
	t_sleep_us(10000);
}

static void expect_cno(struct dfi_cno *c, DAT_EVD_HANDLE hint)
{
	DAT_EVD_HANDLE evd = DFI_ERR_HANDLE;
	DAT_RETURN rc = dfi_cno_wait(c, 0, &evd);

	if (rc != DAT_SUCCESS || evd != hint)
		fail_msg("dfi_cno_wait(0) = %#x evd %p, expected DAT_SUCCESS with %p",
			 (unsigned)rc, (void *)evd, (void *)hint);
}

static void expect_cno_empty(struct dfi_cno *c)
{
	DAT_EVD_HANDLE evd = DFI_ERR_HANDLE;
	DAT_RETURN rc = dfi_cno_wait(c, 0, &evd);

	if (rc != DAT_QUEUE_EMPTY || evd != NULL)
		fail_msg("dfi_cno_wait(0) = %#x evd %p, expected DAT_QUEUE_EMPTY (untriggered) with NULL",
			 (unsigned)rc, (void *)evd);
}

/* EVD q attached to CNO c; detach before freeing. */
static void evq_detach_free(struct dfi_evq *q)
{
	dfi_evq_modify_cno(q, NULL);
	evq_free(q);
}

/* Wait (up to ms) for a CNO notification that came with an event in q: the
 * progress context reads completions into the ring before triggering. */
static bool cno_wait_for_event(struct dfi_cno *c, struct dfi_evq *q, unsigned ms)
{
	uint64_t end = t_now() + (uint64_t)ms * MS;

	while (t_now() < end) {
		DAT_EVD_HANDLE evd = NULL;
		DAT_RETURN rc = dfi_cno_wait(c, 50000, &evd);

		if (rc == DAT_SUCCESS && evd == H(q) && dfi_evq_count(q) > 0)
			return true;
	}
	return false;
}

/* ------------------------------------------------------------ a CNO waiting thread */

struct cnojob {
	struct dfi_cno *c;
	DAT_TIMEOUT timeout;
	DAT_RETURN rc;
	DAT_EVD_HANDLE evd;
	uint64_t t_start, t_end;
	atomic_bool done;
	pthread_t tid;
};

static void *cnojob_main(void *arg)
{
	struct cnojob *j = arg;

	j->t_start = t_now();
	j->rc = dfi_cno_wait(j->c, j->timeout, &j->evd);
	j->t_end = t_now();
	atomic_store(&j->done, true);
	return NULL;
}

static struct cnojob *cnojob_start(struct dfi_cno *c, DAT_TIMEOUT timeout)
{
	struct cnojob *j = calloc(1, sizeof(*j));

	assert_non_null(j);
	j->c = c;
	j->timeout = timeout;
	j->evd = DFI_ERR_HANDLE;
	atomic_init(&j->done, false);
	assert_int_equal(pthread_create(&j->tid, NULL, cnojob_main, j), 0);
	return j;
}

static void cnojob_join(struct cnojob *j, unsigned ms)
{
	if (!join_flag_within(j->tid, &j->done, ms))
		fail_msg("thread still blocked in dfi_cno_wait after %u ms", ms);
}

/* ------------------------------------------------------------ a counting agent */

struct agent_rec {
	struct dfi_cno *c;
	struct dfi_evq *q;		/* dequeue from it when set */
	DAT_OS_WAIT_PROXY_AGENT self;
	atomic_int calls;
	atomic_bool reinstall;
	atomic_bool get_agent_ok;
	DAT_EVD_HANDLE hint[8];
	DAT_RETURN dq_rc[8];
	uint64_t dq_seq[8];
	void *inst[8];
};

static void agent_fn(DAT_PVOID inst, DAT_EVD_HANDLE evd)
{
	struct agent_rec *a = inst;
	int n = atomic_fetch_add(&a->calls, 1);

	if (n < 8) {
		a->inst[n] = inst;
		a->hint[n] = evd;
		if (a->q) {
			DAT_EVENT ev;

			/* a provider lock held here would deadlock */
			a->dq_rc[n] = dfi_evq_dequeue((struct dfi_evq *)evd, &ev);
			a->dq_seq[n] = ev_seq(&ev);
		}
	}
	if (a->c) {
		DAT_OS_WAIT_PROXY_AGENT cur;

		dfi_cno_get_agent(a->c, &cur);		/* takes the CNO lock */
		atomic_store(&a->get_agent_ok, true);
		if (atomic_load(&a->reinstall))
			dfi_cno_set_agent(a->c, &a->self);
	}
}

/* ================================================================ CNO basics */

static void test_cno_wait_timeout_plain_queue_empty_null(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	DAT_EVD_HANDLE evd = DFI_ERR_HANDLE;
	uint64_t t0;

	(void)state;
	t0 = t_now();
	assert_int_equal(dfi_cno_wait(c, 20000, &evd), 0x000d0000u);	/* no class bit */
	assert_elapsed_between(t_now() - t0, 20 * MS, 250 * MS);
	assert_null(evd);
	evd = DFI_ERR_HANDLE;
	t0 = t_now();
	assert_int_equal(dfi_cno_wait(c, 0, &evd), 0x000d0000u);
	assert_elapsed_between(t_now() - t0, 0, 50 * MS);
	assert_null(evd);
	evd = DFI_ERR_HANDLE;
	assert_int_equal(dfi_cno_consume(c, &evd), 0x000d0000u);
	assert_null(evd);
	/* sub-millisecond timeout: slept, not truncated to 0 */
	t0 = t_now();
	assert_int_equal(dfi_cno_wait(c, 500, &evd), DAT_QUEUE_EMPTY);
	assert_elapsed_between(t_now() - t0, 500 * US, 50 * MS);
	cno_free(c);
}

static void test_cno_trigger_wait_consume(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	DAT_EVD_HANDLE evd = NULL;

	(void)state;
	dfi_cno_trigger(c, HINT1);
	expect_cno(c, HINT1);
	expect_cno_empty(c);
	dfi_cno_trigger(c, HINT2);
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_SUCCESS);
	assert_ptr_equal(evd, HINT2);
	evd = DFI_ERR_HANDLE;
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_QUEUE_EMPTY);
	assert_null(evd);
	cno_free(c);
}

static void test_cno_coalesces_first_hint(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);

	(void)state;
	dfi_cno_trigger(c, HINT1);
	dfi_cno_trigger(c, HINT2);
	dfi_cno_trigger(c, HINT3);
	expect_cno(c, HINT1);			/* first since the last consume */
	expect_cno_empty(c);
	dfi_cno_trigger(c, HINT3);
	dfi_cno_trigger(c, HINT1);
	expect_cno(c, HINT3);
	expect_cno_empty(c);
	cno_free(c);
}

static void test_cno_waiter_woken_by_trigger(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct cnojob *j;
	uint64_t t0;

	(void)state;
	j = cnojob_start(c, 5000000);
	cno_wait_for_waiters(c, 1);
	t0 = t_now();
	dfi_cno_trigger(c, HINT2);
	cnojob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_ptr_equal(j->evd, HINT2);
	assert_elapsed_between(j->t_end - t0, 0, 1000 * MS);
	free(j);
	expect_cno_empty(c);
	cno_free(c);
}

static void kill_fn(void *arg)
{
	dfi_cno_kill(arg);
}

static void test_cno_kill_releases_waiters_with_null(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct cnojob *j1, *j2;
	struct tjob *t;

	(void)state;
	j1 = cnojob_start(c, DAT_TIMEOUT_INFINITE);
	j2 = cnojob_start(c, DAT_TIMEOUT_INFINITE);
	cno_wait_for_waiters(c, 2);
	t = tjob_start(kill_fn, c);
	tjob_join(t, 5000, "dfi_cno_kill");
	assert_int_equal(cno_waiters(c), 0);		/* kill returns when none is left */
	cnojob_join(j1, 5000);
	cnojob_join(j2, 5000);
	assert_int_equal(j1->rc, DAT_SUCCESS);
	assert_null(j1->evd);
	assert_int_equal(j2->rc, DAT_SUCCESS);
	assert_null(j2->evd);
	free(j1);
	free(j2);
	dfi_cno_fini(c);
	free(c);
}

static void test_cno_last_evd_freed_releases_waiters_with_null(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct cnojob *j;

	(void)state;
	dfi_cno_attach(c);
	dfi_cno_attach(c);
	j = cnojob_start(c, 10000000);
	cno_wait_for_waiters(c, 1);
	dfi_cno_detach(c, true);			/* one EVD left */
	t_sleep_us(100000);
	assert_false(atomic_load(&j->done));
	dfi_cno_detach(c, true);			/* the last one, from evd_free */
	cnojob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_null(j->evd);
	free(j);

	/* a plain detach (modify_cno) of the last EVD releases nobody */
	dfi_cno_attach(c);
	j = cnojob_start(c, 10000000);
	cno_wait_for_waiters(c, 1);
	dfi_cno_detach(c, false);
	t_sleep_us(100000);
	assert_false(atomic_load(&j->done));
	dfi_cno_trigger(c, HINT1);
	cnojob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_ptr_equal(j->evd, HINT1);
	free(j);
	cno_free(c);
}

static void test_cno_wait_interrupted_by_signal(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct cnojob *j;
	uint64_t end;

	(void)state;
	j = cnojob_start(c, 5000000);
	cno_wait_for_waiters(c, 1);
	end = t_now() + 3000 * MS;
	while (!atomic_load(&j->done) && t_now() < end) {
		pthread_kill(j->tid, SIGUSR1);
		t_sleep_us(20000);
	}
	cnojob_join(j, 5000);
	if (DAT_GET_TYPE(j->rc) != DAT_INTERRUPTED_CALL)
		fail_msg("dfi_cno_wait returned %#x after SIGUSR1, expected DAT_INTERRUPTED_CALL",
			 (unsigned)j->rc);
	free(j);
	assert_int_equal(cno_waiters(c), 0);
	dfi_cno_trigger(c, HINT1);
	expect_cno(c, HINT1);
	cno_free(c);
}

static void test_cno_agent_one_shot(void **state)
{
	struct agent_rec *a = calloc(1, sizeof(*a));
	struct dfi_cno *c;
	DAT_OS_WAIT_PROXY_AGENT cur;

	(void)state;
	a->self.instance_data = a;
	a->self.proxy_agent_func = agent_fn;
	c = cno_new(&a->self, false);
	a->c = NULL;				/* plain counting agent */
	dfi_cno_get_agent(c, &cur);
	assert_ptr_equal(cur.instance_data, a);
	assert_true(cur.proxy_agent_func == agent_fn);

	dfi_cno_trigger(c, HINT1);
	assert_int_equal(atomic_load(&a->calls), 1);
	assert_ptr_equal(a->hint[0], HINT1);
	assert_ptr_equal(a->inst[0], a);
	dfi_cno_get_agent(c, &cur);			/* cleared after the call */
	assert_true(cur.proxy_agent_func == NULL);
	expect_cno(c, HINT1);				/* the CNO itself was triggered too */

	dfi_cno_trigger(c, HINT2);			/* not re-installed: no call */
	assert_int_equal(atomic_load(&a->calls), 1);
	expect_cno(c, HINT2);

	dfi_cno_set_agent(c, &a->self);
	dfi_cno_get_agent(c, &cur);
	assert_true(cur.proxy_agent_func == agent_fn);
	dfi_cno_trigger(c, HINT3);
	assert_int_equal(atomic_load(&a->calls), 2);
	assert_ptr_equal(a->hint[1], HINT3);
	expect_cno(c, HINT3);

	/* set_agent(NULL agent) detaches */
	dfi_cno_set_agent(c, &a->self);
	dfi_cno_set_agent(c, &no_agent);
	dfi_cno_trigger(c, HINT1);
	assert_int_equal(atomic_load(&a->calls), 2);
	expect_cno(c, HINT1);
	cno_free(c);
	free(a);
}

static void test_cno_free_check_in_use(void **state)
{
	const DAT_RETURN in_use = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct cnojob *j;

	(void)state;
	dfi_evq_modify_cno(q, c);			/* referenced by an EVD */
	assert_int_equal(dfi_cno_free_check(c), in_use);
	dfi_evq_modify_cno(q, NULL);
	j = cnojob_start(c, 10000000);			/* a waiter */
	cno_wait_for_waiters(c, 1);
	assert_int_equal(dfi_cno_free_check(c), in_use);
	dfi_cno_trigger(c, HINT1);
	cnojob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	free(j);
	cno_free(c);
	evq_free(q);
	evq_free(aq);
}

/* ================================================================ scenario 10 */

struct gate {
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool open;
	atomic_bool entered;
	atomic_int calls;
};

static void agent_blocking(DAT_PVOID inst, DAT_EVD_HANDLE evd)
{
	struct gate *g = inst;

	(void)evd;
	atomic_fetch_add(&g->calls, 1);
	atomic_store(&g->entered, true);
	pthread_mutex_lock(&g->m);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->m);
	pthread_mutex_unlock(&g->m);
}

struct trig_arg {
	struct dfi_cno *c;
	DAT_EVD_HANDLE h;
};

static void trigger_fn(void *arg)
{
	struct trig_arg *t = arg;

	dfi_cno_trigger(t->c, t->h);
}

static void test_s10_free_while_agent_runs(void **state)
{
	const DAT_RETURN in_use = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
	struct gate *g = calloc(1, sizeof(*g));
	DAT_OS_WAIT_PROXY_AGENT ag;
	struct dfi_cno *c;
	struct trig_arg ta;
	struct tjob *t;
	uint64_t end;

	(void)state;
	pthread_mutex_init(&g->m, NULL);
	pthread_cond_init(&g->cv, NULL);
	ag.instance_data = g;
	ag.proxy_agent_func = agent_blocking;
	c = cno_new(&ag, false);
	ta.c = c;
	ta.h = HINT1;
	t = tjob_start(trigger_fn, &ta);	/* no EVD attached: only the agent holds it */
	end = t_now() + 5000 * MS;
	while (!atomic_load(&g->entered)) {
		if (t_now() > end)
			fail_msg("agent not called within 5 s");
		t_sleep_us(200);
	}
	assert_int_equal(dfi_cno_free_check(c), in_use);
	t_sleep_us(20000);
	assert_int_equal(dfi_cno_free_check(c), in_use);
	assert_false(atomic_load(&t->done));
	pthread_mutex_lock(&g->m);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->m);
	tjob_join(t, 5000, "trigger with agent");
	assert_int_equal(atomic_load(&g->calls), 1);
	cno_free(c);
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->m);
	free(g);
}

/* ================================================================ scenario 18 */

struct post_arg {
	struct dfi_evq *q;
	uint64_t seq;
	unsigned delay_us;
	bool provider;		/* dfi_evq_post (connection event) instead of post_se */
	int rc;
};

static void post_fn(void *arg)
{
	struct post_arg *p = arg;

	if (p->delay_us)
		t_sleep_us(p->delay_us);
	if (p->provider) {
		DAT_EVENT ev = ev_conn(p->seq);

		p->rc = dfi_evq_post(p->q, &ev);
	} else {
		p->rc = (int)evq_post_sw(p->q, p->seq);
	}
}

static void test_s18_cno_basic(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CONNECTION_FLAG, aq);
	struct dfi_evq *qd = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct post_arg pa = { .q = q, .seq = 2, .delay_us = 20000, .provider = true };
	struct tjob *t;
	DAT_EVD_HANDLE evd = NULL;
	DAT_EVENT ev;

	(void)state;
	dfi_evq_modify_cno(q, c);
	expect_cno_empty(c);

	/* post_se then cno_wait */
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	assert_int_equal(dfi_cno_wait(c, 1000000, &evd), DAT_SUCCESS);
	assert_ptr_equal(evd, H(q));
	expect_cno_empty(c);
	evq_expect(q, 1);

	/* cno_wait blocked, provider event from another thread */
	t = tjob_start(post_fn, &pa);
	evd = NULL;
	assert_int_equal(dfi_cno_wait(c, 5000000, &evd), DAT_SUCCESS);
	assert_ptr_equal(evd, H(q));
	tjob_join(t, 5000, "poster");
	assert_int_equal(pa.rc, 0);
	evq_expect(q, 2);
	expect_cno_empty(c);

	/* completions read by the progress context */
	fake_source_attach(fs, qd);
	dfi_evq_modify_cno(qd, c);
	expect_cno_empty(c);
	ev = ev_dto(3);
	fake_source_inject(fs, &ev);
	dfi_evq_source_notify(qd);
	expect_cno(c, H(qd));
	evq_expect(qd, 3);

	evq_detach_free(qd);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
	fake_source_free(fs);
}

/* A direct waiter preempts the CNO, whatever its threshold. */
static void test_s18_evd_waiter_preempts_cno(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct waitjob *j;
	DAT_EVD_HANDLE evd = DFI_ERR_HANDLE;

	(void)state;
	dfi_evq_modify_cno(q, c);
	j = waitjob_start(q, 5000000, 1);
	evq_wait_for_waiter(q, 10000);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	assert_int_equal(dfi_cno_wait(c, 100000, &evd), DAT_QUEUE_EMPTY);
	assert_null(evd);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 1);
	free(j);
	expect_cno_empty(c);

	/* threshold 2: the first arrival does not satisfy the waiter and still
	 * does not reach the CNO */
	j = waitjob_start(q, 5000000, 2);
	evq_wait_for_waiter(q, 10000);
	assert_int_equal(evq_post_sw(q, 2), DAT_SUCCESS);
	evd = DFI_ERR_HANDLE;
	assert_int_equal(dfi_cno_wait(c, 100000, &evd), DAT_QUEUE_EMPTY);
	assert_null(evd);
	assert_false(waitjob_done(j));
	assert_int_equal(evq_post_sw(q, 3), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 2);
	free(j);
	evq_expect(q, 3);
	expect_cno_empty(c);

	/* no waiter again: arrivals trigger */
	assert_int_equal(evq_post_sw(q, 4), DAT_SUCCESS);
	expect_cno(c, H(q));
	evq_expect(q, 4);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
}

/* ================================================================ scenario 19 */

static void test_s19_enable_edge(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_EVD_STATE st;
	DAT_COUNT qlen;

	(void)state;
	dfi_evq_modify_cno(q, c);
	dfi_evq_disable(q);
	dfi_evq_query(q, &qlen, &st, NULL);
	assert_true(st & DAT_EVD_STATE_DISABLED);
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(evq_post_sw(q, i), DAT_SUCCESS);
	expect_cno_empty(c);				/* disabled: no delivery */

	dfi_evq_enable(q);				/* non-empty: one trigger */
	expect_cno(c, H(q));
	expect_cno_empty(c);
	for (uint64_t i = 0; i < 3; i++)		/* enable, then dequeue-until-empty */
		evq_expect(q, i);
	evq_expect_empty(q);
	expect_cno_empty(c);

	assert_int_equal(evq_post_sw(q, 3), DAT_SUCCESS);	/* later arrivals trigger again */
	expect_cno(c, H(q));
	evq_expect(q, 3);

	/* enabling an empty EVD triggers nothing */
	dfi_evq_disable(q);
	dfi_evq_enable(q);
	expect_cno_empty(c);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
}

/* Attaching a CNO to an enabled non-empty EVD triggers it once. */
static void test_modify_cno_attach_nonempty_triggers_once(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct dfi_evq *q2 = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct dfi_evq *q3 = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct dfi_cno *cur;
	DAT_COUNT qlen;
	DAT_EVD_STATE st;

	(void)state;
	assert_int_equal(evq_post_sw(q, 0), DAT_SUCCESS);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	dfi_evq_modify_cno(q, c);
	dfi_evq_query(q, &qlen, &st, &cur);
	assert_ptr_equal(cur, c);
	expect_cno(c, H(q));
	expect_cno_empty(c);

	dfi_evq_modify_cno(q2, c);			/* empty: nothing */
	expect_cno_empty(c);

	assert_int_equal(evq_post_sw(q3, 0), DAT_SUCCESS);
	dfi_evq_disable(q3);
	dfi_evq_modify_cno(q3, c);			/* disabled: nothing */
	expect_cno_empty(c);

	evq_expect(q, 0);
	evq_expect(q, 1);
	evq_expect(q3, 0);
	evq_detach_free(q3);
	evq_detach_free(q2);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
}

/* After switching to another CNO only the new one is used. */
static void test_modify_cno_switch(void **state)
{
	struct dfi_cno *c1 = cno_new(NULL, false);
	struct dfi_cno *c2 = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);

	(void)state;
	dfi_evq_modify_cno(q, c1);
	dfi_evq_modify_cno(q, c2);
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	expect_cno(c2, H(q));
	expect_cno_empty(c1);
	evq_expect(q, 1);
	cno_free(c1);					/* no longer referenced */
	dfi_evq_modify_cno(q, NULL);
	assert_int_equal(evq_post_sw(q, 2), DAT_SUCCESS);
	expect_cno_empty(c2);
	evq_expect(q, 2);
	evq_free(q);
	evq_free(aq);
	cno_free(c2);
}

/* Progress-context reads: delivery only when enabled; nothing read, nothing
 * delivered. */
static void test_source_notify_cno_delivery(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);
	dfi_evq_modify_cno(q, c);
	dfi_evq_source_notify(q);			/* spurious: nothing to read */
	expect_cno_empty(c);

	dfi_evq_disable(q);
	ev = ev_dto(1);
	fake_source_inject(fs, &ev);
	dfi_evq_source_notify(q);
	assert_int_equal(dfi_evq_count(q), 1);		/* read into the ring */
	expect_cno_empty(c);				/* but not delivered */
	dfi_evq_enable(q);
	expect_cno(c, H(q));
	evq_expect(q, 1);

	ev = ev_dto(2);
	fake_source_inject(fs, &ev);
	dfi_evq_source_notify(q);
	expect_cno(c, H(q));
	evq_expect(q, 2);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
	fake_source_free(fs);
}

/* An EVD with an enabled CNO is dequeued through the ring even when its
 * source offers read_one: that path arms the source when the ring runs
 * empty, so the CNO hears of the next completion (scenario 21 and D9 check
 * the notification).  Disabled, the EVD is a plain one and read_one serves
 * it. */
static void test_cno_dequeue_not_past_the_ring(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	DAT_EVENT ev;

	(void)state;
	fake_source_attach_read_one(fs, q);
	dfi_evq_modify_cno(q, c);
	ev = ev_dto(1);
	fake_source_inject(fs, &ev);
	evq_expect(q, 1);
	evq_expect_empty(q);
	assert_int_equal(atomic_load(&fs->n_read_ones), 0);
	assert_true(atomic_load(&fs->n_reads) >= 1);
	ev = ev_dto(2);
	fake_source_inject(fs, &ev);

	dfi_evq_disable(q);
	evq_expect(q, 2);
	assert_int_equal(atomic_load(&fs->n_read_ones), 1);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
	fake_source_free(fs);
}

/* The progress context watches the source fd only for an enabled EVD with a
 * CNO and no waiter (a waiter watches the fd itself). */
static void test_wants_notify(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct waitjob *j;

	(void)state;
	fake_source_attach(fs, q);
	assert_false(dfi_evq_wants_notify(q));		/* no CNO */
	dfi_evq_modify_cno(q, c);
	assert_true(dfi_evq_wants_notify(q));
	dfi_evq_disable(q);
	assert_false(dfi_evq_wants_notify(q));
	dfi_evq_enable(q);
	assert_true(dfi_evq_wants_notify(q));
	j = waitjob_start(q, 5000000, 1);
	evq_wait_for_waiter(q, 0);
	assert_false(dfi_evq_wants_notify(q));
	assert_int_equal(evq_post_sw(q, 1), DAT_SUCCESS);
	waitjob_join(j, 5000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	free(j);
	assert_true(dfi_evq_wants_notify(q));
	dfi_evq_modify_cno(q, NULL);
	assert_false(dfi_evq_wants_notify(q));
	evq_free(q);
	evq_free(aq);
	cno_free(c);
	fake_source_free(fs);
}

/* ================================================================ scenario 20 */

#define S20_ITERS 20000
#define S20_BUDGET_MS 12000

struct s20 {
	struct dfi_evq *q;
	pthread_barrier_t b1, b2;
	atomic_bool stop;
	unsigned seed;
};

static void s20_poster(void *arg)
{
	struct s20 *s = arg;

	for (;;) {
		pthread_barrier_wait(&s->b1);
		if (atomic_load(&s->stop))
			return;
		t_sleep_us((unsigned)(rand_r(&s->seed) % 400));
		evq_post_sw(s->q, 1);
		pthread_barrier_wait(&s->b2);
	}
}

/* D11: a trigger racing the timeout of cno_wait is never lost. */
static void test_s20_trigger_vs_timeout_D11(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct s20 *s = calloc(1, sizeof(*s));
	struct tjob *t;
	unsigned in_wait = 0, late = 0, i;
	uint64_t end = t_now() + S20_BUDGET_MS * MS;
	const char *err = NULL;
	DAT_RETURN err_rc = 0;
	DAT_EVD_HANDLE err_evd = NULL;

	(void)state;
	dfi_evq_modify_cno(q, c);
	s->q = q;
	s->seed = 12345;
	pthread_barrier_init(&s->b1, NULL, 2);
	pthread_barrier_init(&s->b2, NULL, 2);
	atomic_init(&s->stop, false);
	t = tjob_start(s20_poster, s);
	for (i = 0; i < S20_ITERS && t_now() < end && !err; i++) {
		DAT_EVD_HANDLE evd = DFI_ERR_HANDLE;
		DAT_RETURN rc;
		DAT_EVENT ev;

		pthread_barrier_wait(&s->b1);
		rc = dfi_cno_wait(c, 200, &evd);
		pthread_barrier_wait(&s->b2);		/* the post (and its trigger) is done */
		if (rc == DAT_SUCCESS) {
			if (evd != H(q))
				err = "cno_wait success with the wrong hint";
			in_wait++;
		} else if (rc == DAT_QUEUE_EMPTY && evd == NULL) {
			late++;
			evd = DFI_ERR_HANDLE;
			rc = dfi_cno_wait(c, 0, &evd);
			if (rc != DAT_SUCCESS || evd != H(q))
				err = "posted, cno_wait timed out, and the trigger is gone (D11)";
		} else {
			err = "cno_wait returned neither DAT_SUCCESS nor DAT_QUEUE_EMPTY/NULL";
		}
		if (err) {
			err_rc = rc;
			err_evd = evd;
			break;
		}
		evd = DFI_ERR_HANDLE;
		rc = dfi_cno_wait(c, 0, &evd);
		if (rc != DAT_QUEUE_EMPTY) {
			err = "one post, two notifications";
			err_rc = rc;
			break;
		}
		if (dfi_evq_dequeue(q, &ev) != DAT_SUCCESS || dfi_evq_dequeue(q, &ev) != DAT_QUEUE_EMPTY) {
			err = "EVD does not hold exactly the one posted event";
			break;
		}
	}
	atomic_store(&s->stop, true);
	pthread_barrier_wait(&s->b1);
	tjob_join(t, 5000, "poster");
	print_message("      %u iterations: %u caught by the timed wait, %u after its timeout\n",
		      i, in_wait, late);
	if (err)
		fail_msg("iteration %u: %s (rc %#x evd %p)", i, err, (unsigned)err_rc, (void *)err_evd);
	assert_true(i >= 1000);
	pthread_barrier_destroy(&s->b1);
	pthread_barrier_destroy(&s->b2);
	free(s);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
}

/* ================================================================ scenario 21 */

struct s21_post {
	struct dfi_evq *q;
	uint64_t seq;
	bool provider;
	int rc;
};

static void s21_post_fn(void *arg)
{
	struct s21_post *p = arg;

	if (p->provider) {
		DAT_EVENT ev = ev_conn(p->seq);

		p->rc = dfi_evq_post(p->q, &ev);
	} else {
		p->rc = (int)evq_post_sw(p->q, p->seq);
	}
}

static void test_s21_agent_dequeues_and_reinstalls(void **state)
{
	struct agent_rec *a = calloc(1, sizeof(*a));
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CONNECTION_FLAG, aq);
	struct dfi_cno *c;
	struct s21_post p = { .q = q };
	struct tjob *t;
	DAT_EVD_HANDLE evd;

	(void)state;
	a->self.instance_data = a;
	a->self.proxy_agent_func = agent_fn;
	a->q = q;
	atomic_init(&a->reinstall, true);
	c = cno_new(&a->self, false);
	a->c = c;
	dfi_evq_modify_cno(q, c);

	/* 1: post_se -> agent dequeues it and re-installs itself */
	p.seq = 1;
	p.provider = false;
	t = tjob_start(s21_post_fn, &p);
	tjob_join(t, 5000, "post_se with an agent that dequeues (deadlock?)");
	assert_int_equal(p.rc, DAT_SUCCESS);
	assert_int_equal(atomic_load(&a->calls), 1);
	assert_true(atomic_load(&a->get_agent_ok));
	assert_ptr_equal(a->hint[0], H(q));
	assert_int_equal(a->dq_rc[0], DAT_SUCCESS);
	assert_int_equal(a->dq_seq[0], 1);
	evq_expect_empty(q);
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_SUCCESS);
	assert_ptr_equal(evd, H(q));

	/* 2: provider event -> agent again; this time it does not re-install */
	atomic_store(&a->reinstall, false);
	p.seq = 2;
	p.provider = true;
	t = tjob_start(s21_post_fn, &p);
	tjob_join(t, 5000, "dfi_evq_post with an agent that dequeues (deadlock?)");
	assert_int_equal(p.rc, 0);
	assert_int_equal(atomic_load(&a->calls), 2);
	assert_int_equal(a->dq_rc[1], DAT_SUCCESS);
	assert_int_equal(a->dq_seq[1], 2);
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_SUCCESS);

	/* 3: agent gone: no call, but the CNO still sees the trigger */
	p.seq = 3;
	p.provider = false;
	t = tjob_start(s21_post_fn, &p);
	tjob_join(t, 5000, "post_se");
	assert_int_equal(p.rc, DAT_SUCCESS);
	assert_int_equal(atomic_load(&a->calls), 2);
	expect_cno(c, H(q));
	evq_expect(q, 3);

	dfi_evq_modify_cno(q, NULL);
	cno_free(c);
	evq_free(q);
	evq_free(aq);
	free(a);
}

/* The agent also runs lock-free when the trigger comes from the progress
 * context (dfi_evq_source_notify). */
static void source_notify_fn(void *arg)
{
	dfi_evq_source_notify(arg);
}

static void test_s21_agent_from_source_notify(void **state)
{
	struct agent_rec *a = calloc(1, sizeof(*a));
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct dfi_cno *c;
	struct tjob *t;
	DAT_EVENT ev;

	(void)state;
	a->self.instance_data = a;
	a->self.proxy_agent_func = agent_fn;
	a->q = q;
	atomic_init(&a->reinstall, true);
	c = cno_new(&a->self, false);
	a->c = c;
	fake_source_attach(fs, q);
	dfi_evq_modify_cno(q, c);
	ev = ev_dto(5);
	fake_source_inject(fs, &ev);
	t = tjob_start(source_notify_fn, q);
	tjob_join(t, 5000, "source_notify with an agent that dequeues (deadlock?)");
	assert_int_equal(atomic_load(&a->calls), 1);
	assert_int_equal(a->dq_rc[0], DAT_SUCCESS);
	assert_int_equal(a->dq_seq[0], 5);
	dfi_evq_modify_cno(q, NULL);
	cno_free(c);
	evq_free(q);
	evq_free(aq);
	fake_source_free(fs);
	free(a);
}

/* ================================================================ scenario 22 */

/* D10: a CNO attached after creation is driven by the EVD's own source. */
static void test_s22_attach_after_create_D10(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct fake_progress *p;
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);
	p = fake_progress_start(q, fs);
	dfi_evq_modify_cno(q, c);
	for (uint64_t i = 1; i <= 5; i++) {
		ev = ev_dto(i);
		fake_source_inject(fs, &ev);
		if (!cno_wait_for_event(c, q, 2000))
			fail_msg("completion %llu: CNO not triggered within 2 s (source armed: %d, "
				 "arms %llu)", (unsigned long long)i, fake_source_armed(fs),
				 (unsigned long long)atomic_load(&fs->n_arms));
		evq_expect(q, i);
		evq_expect_empty(q);
	}
	fake_progress_stop(p);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
	fake_source_free(fs);
}

/* D10: an evd_wait started before the attach does not hang. */
static void test_s22_waiter_before_attach_D10(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct fake_progress *p;
	struct waitjob *j;
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs, q);
	p = fake_progress_start(q, fs);
	j = waitjob_start(q, 5000000, 1);
	evq_wait_for_waiter(q, 20000);
	dfi_evq_modify_cno(q, c);
	t_sleep_us(10000);
	ev = ev_dto(1);
	fake_source_inject(fs, &ev);
	waitjob_join(j, 3000);
	assert_int_equal(j->rc, DAT_SUCCESS);
	assert_int_equal(ev_seq(&j->ev), 1);
	free(j);
	/* and the CNO works afterwards */
	t_sleep_us(10000);
	while (dfi_cno_consume(c, &(DAT_EVD_HANDLE){ NULL }) == DAT_SUCCESS)
		;
	ev = ev_dto(2);
	fake_source_inject(fs, &ev);
	if (!cno_wait_for_event(c, q, 2000))
		fail_msg("CNO not triggered after the waiter left");
	evq_expect(q, 2);
	fake_progress_stop(p);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
	fake_source_free(fs);
}

/* D10: after detach, this EVD's waiter does not consume the CNO's other EVDs'
 * notifications, and this EVD no longer triggers the CNO. */
static void test_s22_detach_isolates_evds_D10(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q1 = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct dfi_evq *q2 = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs1 = fake_source_new(), *fs2 = fake_source_new();
	struct fake_progress *p1, *p2;
	struct waitjob *j;
	DAT_EVD_HANDLE evd = DFI_ERR_HANDLE;
	DAT_EVENT ev;

	(void)state;
	fake_source_attach(fs1, q1);
	fake_source_attach(fs2, q2);
	p1 = fake_progress_start(q1, fs1);
	p2 = fake_progress_start(q2, fs2);
	dfi_evq_modify_cno(q1, c);
	dfi_evq_modify_cno(q2, c);
	dfi_evq_modify_cno(q1, NULL);

	j = waitjob_start(q1, 300000, 1);
	evq_wait_for_waiter(q1, 10000);
	ev = ev_dto(7);
	fake_source_inject(fs2, &ev);
	if (!cno_wait_for_event(c, q2, 2000))
		fail_msg("CNO not triggered by the still-attached EVD");
	waitjob_join(j, 5000);
	assert_int_equal(DAT_GET_TYPE(j->rc), DAT_TIMEOUT_EXPIRED);
	assert_int_equal(j->nmore, 0);
	free(j);
	evq_expect(q2, 7);
	evq_expect_empty(q1);

	ev = ev_dto(8);
	fake_source_inject(fs1, &ev);
	assert_int_equal(dfi_cno_wait(c, 100000, &evd), DAT_QUEUE_EMPTY);
	assert_null(evd);
	evq_expect(q1, 8);

	fake_progress_stop(p1);
	fake_progress_stop(p2);
	evq_free(q1);
	evq_detach_free(q2);
	evq_free(aq);
	cno_free(c);
	fake_source_free(fs1);
	fake_source_free(fs2);
}

/* D9: after a satisfied wait on a CNO EVD, later completions still reach the
 * CNO (the source is re-armed, not left disarmed by the waiter). */
static void test_d09_rearm_after_satisfied_wait(void **state)
{
	struct dfi_cno *c = cno_new(NULL, false);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_DTO_FLAG, aq);
	struct fake_source *fs = fake_source_new();
	struct fake_progress *p;

	(void)state;
	fake_source_attach(fs, q);
	p = fake_progress_start(q, fs);
	dfi_evq_modify_cno(q, c);
	for (uint64_t i = 0; i < 20; i++) {
		struct waitjob *j = waitjob_start(q, 5000000, 1);
		DAT_EVENT ev = ev_dto(2 * i);

		evq_wait_for_waiter(q, 2000);
		fake_source_inject(fs, &ev);
		waitjob_join(j, 5000);
		if (j->rc != DAT_SUCCESS || ev_seq(&j->ev) != 2 * i)
			fail_msg("round %llu: wait returned %#x seq %llu", (unsigned long long)i,
				 (unsigned)j->rc, (unsigned long long)ev_seq(&j->ev));
		free(j);
		t_sleep_us(5000);
		while (dfi_cno_consume(c, &(DAT_EVD_HANDLE){ NULL }) == DAT_SUCCESS)
			;
		ev = ev_dto(2 * i + 1);
		fake_source_inject(fs, &ev);
		if (!cno_wait_for_event(c, q, 2000))
			fail_msg("round %llu: completion after a satisfied wait never reached the "
				 "CNO (source armed: %d)", (unsigned long long)i, fake_source_armed(fs));
		evq_expect(q, 2 * i + 1);
	}
	fake_progress_stop(p);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
	fake_source_free(fs);
}

/* ================================================================ scenario 23 */

static void test_s23_cno_fd(void **state)
{
	struct dfi_cno *c = cno_new(NULL, true);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q1 = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct dfi_evq *q2 = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	DAT_EVD_HANDLE evd;

	(void)state;
	assert_true(c->fd >= 0);
	dfi_evq_modify_cno(q1, c);
	dfi_evq_modify_cno(q2, c);
	assert_false(fd_readable(c->fd));

	assert_int_equal(evq_post_sw(q1, 1), DAT_SUCCESS);
	assert_true(fd_readable(c->fd));
	assert_true(fd_readable(c->fd));		/* level: polling does not clear it */
	evd = NULL;
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_SUCCESS);
	assert_ptr_equal(evd, H(q1));
	assert_false(fd_readable(c->fd));
	evd = DFI_ERR_HANDLE;
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_QUEUE_EMPTY);
	assert_null(evd);
	evq_expect(q1, 1);

	/* two posts before consume: one readiness, first hint, both events there */
	assert_int_equal(evq_post_sw(q1, 2), DAT_SUCCESS);
	assert_int_equal(evq_post_sw(q2, 3), DAT_SUCCESS);
	assert_true(fd_readable(c->fd));
	evd = NULL;
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_SUCCESS);
	assert_ptr_equal(evd, H(q1));
	assert_false(fd_readable(c->fd));
	evd = DFI_ERR_HANDLE;
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_QUEUE_EMPTY);
	assert_null(evd);
	evq_expect(q1, 2);
	evq_expect(q2, 3);

	/* cno_wait consumes too */
	assert_int_equal(evq_post_sw(q2, 4), DAT_SUCCESS);
	assert_true(fd_readable(c->fd));
	expect_cno(c, H(q2));
	assert_false(fd_readable(c->fd));
	evq_expect(q2, 4);

	/* disabled EVD: no readiness */
	dfi_evq_disable(q1);
	assert_int_equal(evq_post_sw(q1, 5), DAT_SUCCESS);
	assert_false(fd_readable(c->fd));
	evq_expect(q1, 5);

	evq_detach_free(q2);
	evq_detach_free(q1);
	evq_free(aq);
	cno_free(c);
}

/* A thread blocked in poll() on the CNO fd wakes on a post. */
static void test_s23_cno_fd_wakes_poll(void **state)
{
	struct dfi_cno *c = cno_new(NULL, true);
	struct dfi_evq *aq = evq_new_async(16);
	struct dfi_evq *q = evq_new(8, DAT_EVD_SOFTWARE_FLAG, aq);
	struct post_arg pa = { .q = q, .seq = 6, .delay_us = 30000 };
	struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
	struct tjob *t;
	DAT_EVD_HANDLE evd = NULL;

	(void)state;
	dfi_evq_modify_cno(q, c);
	t = tjob_start(post_fn, &pa);
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	tjob_join(t, 5000, "poster");
	assert_int_equal(dfi_cno_consume(c, &evd), DAT_SUCCESS);
	assert_ptr_equal(evd, H(q));
	evq_expect(q, 6);
	evq_detach_free(q);
	evq_free(aq);
	cno_free(c);
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
		evtest(test_cno_wait_timeout_plain_queue_empty_null),
		evtest(test_cno_trigger_wait_consume),
		evtest(test_cno_coalesces_first_hint),
		evtest(test_cno_waiter_woken_by_trigger),
		evtest(test_cno_kill_releases_waiters_with_null),
		evtest(test_cno_last_evd_freed_releases_waiters_with_null),
		evtest(test_cno_wait_interrupted_by_signal),
		evtest(test_cno_agent_one_shot),
		evtest(test_cno_free_check_in_use),
		evtest(test_s10_free_while_agent_runs),
		evtest(test_s18_cno_basic),
		evtest(test_s18_evd_waiter_preempts_cno),
		evtest(test_s19_enable_edge),
		evtest(test_modify_cno_attach_nonempty_triggers_once),
		evtest(test_modify_cno_switch),
		evtest(test_source_notify_cno_delivery),
		evtest(test_wants_notify),
		evtest(test_cno_dequeue_not_past_the_ring),
		evtest(test_s20_trigger_vs_timeout_D11),
		evtest(test_s21_agent_dequeues_and_reinstalls),
		evtest(test_s21_agent_from_source_notify),
		evtest(test_s22_attach_after_create_D10),
		evtest(test_s22_waiter_before_attach_D10),
		evtest(test_s22_detach_isolates_evds_D10),
		evtest(test_d09_rearm_after_satisfied_wait),
		evtest(test_s23_cno_fd),
		evtest(test_s23_cno_fd_wakes_poll),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
