/*
 * Shared helpers for the event-core unit tests (test_evd_core.c, test_cno_core.c).
 * Header-only: everything is static inline.
 *
 * Rules followed by the tests:
 *  - cmocka asserts only run on the main (test) thread; worker threads record
 *    results in heap objects that the main thread checks after joining.
 *  - Objects a worker thread may still touch when an assertion fails (a hung
 *    waiter) live on the heap and are deliberately leaked on the failure path,
 *    so a longjmp out of the test never leaves a thread pointing at a dead frame.
 *  - State shared between threads is atomic or read under the object's lock.
 */
#ifndef DFI_EVTEST_H
#define DFI_EVTEST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "event/event.h"

/* An error return as the core produces it: class bit | type | subtype. */
#ifndef DFI_ERR
#define DFI_ERR(type, sub) ((DAT_RETURN)(DAT_CLASS_ERROR | (DAT_UINT32)(type) | (DAT_UINT32)(sub)))
#endif
#define DFI_ERR_HANDLE ((DAT_EVD_HANDLE)(uintptr_t)0xdeadbeef)	/* garbage to be overwritten */

#define MS 1000000ull	/* ns per ms */
#define US 1000ull	/* ns per us */

#define assert_elapsed_between(ns, lo_ns, hi_ns) do {				\
	uint64_t e_ = (ns), lo_ = (lo_ns), hi_ = (hi_ns);				\
	if (e_ < lo_ || e_ > hi_)							\
		fail_msg("elapsed %.3f ms, expected within [%.3f, %.3f] ms",		\
			 (double)e_ / 1e6, (double)lo_ / 1e6, (double)hi_ / 1e6);	\
} while (0)

static inline uint64_t t_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void t_sleep_us(unsigned us)
{
	struct timespec ts = { .tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static inline bool fd_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* ------------------------------------------------------------ events */

static inline DAT_EVENT ev_sw(uint64_t seq)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.evd_handle = DFI_ERR_HANDLE;
	ev.event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)seq;
	return ev;
}

static inline DAT_EVENT ev_conn(uint64_t seq)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_CONNECTION_EVENT_ESTABLISHED;
	ev.evd_handle = DFI_ERR_HANDLE;
	ev.event_data.connect_event_data.private_data_size = (DAT_COUNT)seq;
	return ev;
}

static inline DAT_EVENT ev_dto(uint64_t seq)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_DTO_COMPLETION_EVENT;
	ev.evd_handle = DFI_ERR_HANDLE;
	ev.event_data.dto_completion_event_data.user_cookie.as_64 = seq;
	ev.event_data.dto_completion_event_data.status = DAT_DTO_SUCCESS;
	return ev;
}

static inline DAT_EVENT ev_async(uint64_t seq)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_ASYNC_ERROR_EP_BROKEN;
	ev.evd_handle = DFI_ERR_HANDLE;
	ev.event_data.asynch_error_event_data.dat_handle = (DAT_HANDLE)(uintptr_t)(0x1000 + seq);
	ev.event_data.asynch_error_event_data.reason = (DAT_COUNT)seq;
	return ev;
}

/* The sequence number an ev_* constructor put in the event (UINT64_MAX: unknown kind). */
static inline uint64_t ev_seq(const DAT_EVENT *ev)
{
	switch (ev->event_number) {
	case DAT_SOFTWARE_EVENT:
		return (uint64_t)(uintptr_t)ev->event_data.software_event_data.pointer;
	case DAT_CONNECTION_EVENT_ESTABLISHED:
		return (uint64_t)ev->event_data.connect_event_data.private_data_size;
	case DAT_DTO_COMPLETION_EVENT:
		return ev->event_data.dto_completion_event_data.user_cookie.as_64;
	case DAT_ASYNC_ERROR_EP_BROKEN:
		return (uint64_t)ev->event_data.asynch_error_event_data.reason;
	default:
		return UINT64_MAX;
	}
}

/* ------------------------------------------------------------ EVD helpers */

static inline struct dfi_evq *evq_new(DAT_COUNT qlen, DAT_EVD_FLAGS flags, struct dfi_evq *async)
{
	struct dfi_evq *q = calloc(1, sizeof(*q));

	assert_non_null(q);
	assert_int_equal(dfi_evq_init(q, (DAT_EVD_HANDLE)q, qlen, flags, async), 0);
	return q;
}

static inline struct dfi_evq *evq_new_async(DAT_COUNT qlen)
{
	return evq_new(qlen, DAT_EVD_ASYNC_FLAG, NULL);
}

/* dat_evd_free path: must succeed. */
static inline void evq_free(struct dfi_evq *q)
{
	assert_int_equal(dfi_evq_free_begin(q), DAT_SUCCESS);
	dfi_evq_fini(q);
	free(q);
}

/* IA-close path (works even with a waiter). */
static inline void evq_kill(struct dfi_evq *q)
{
	dfi_evq_abort(q);
	dfi_evq_fini(q);
	free(q);
}

static inline bool evq_has_waiter(struct dfi_evq *q)
{
	bool w;

	pthread_mutex_lock(&q->lock);
	w = q->waiter || q->state == DFI_EVQ_WAITED;
	pthread_mutex_unlock(&q->lock);
	return w;
}

/* Block until a thread is inside dfi_evq_wait on q (fails after 5 s), then
 * give it settle_us to reach its sleep. */
static inline void evq_wait_for_waiter(struct dfi_evq *q, unsigned settle_us)
{
	uint64_t end = t_now() + 5000 * MS;

	while (!evq_has_waiter(q)) {
		if (t_now() > end)
			fail_msg("no thread entered dfi_evq_wait within 5 s");
		t_sleep_us(200);
	}
	if (settle_us)
		t_sleep_us(settle_us);
}

static inline DAT_RETURN evq_post_sw(struct dfi_evq *q, uint64_t seq)
{
	DAT_EVENT ev = ev_sw(seq);

	return dfi_evq_post_se(q, &ev);
}

/* Dequeue one event; assert success, the right handle and the sequence number. */
static inline void evq_expect(struct dfi_evq *q, uint64_t seq)
{
	DAT_EVENT ev;

	memset(&ev, 0xa5, sizeof(ev));
	assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_SUCCESS);
	assert_ptr_equal(ev.evd_handle, (DAT_EVD_HANDLE)q);
	assert_int_equal(ev_seq(&ev), seq);
}

static inline void evq_expect_empty(struct dfi_evq *q)
{
	DAT_EVENT ev;

	assert_int_equal(dfi_evq_dequeue(q, &ev), DAT_QUEUE_EMPTY);
}

/* ------------------------------------------------------------ a waiting thread */

struct waitjob {
	struct dfi_evq *q;
	DAT_TIMEOUT timeout;
	DAT_COUNT threshold;
	DAT_RETURN rc;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	uint64_t t_start, t_end;	/* ns, around the dfi_evq_wait call */
	atomic_bool done;
	pthread_t tid;
};

static inline void *waitjob_main(void *arg)
{
	struct waitjob *j = arg;

	j->t_start = t_now();
	j->rc = dfi_evq_wait(j->q, j->timeout, j->threshold, &j->ev, &j->nmore);
	j->t_end = t_now();
	atomic_store(&j->done, true);
	return NULL;
}

/* Heap-allocated: leaked if the test fails while the thread is still blocked. */
static inline struct waitjob *waitjob_start(struct dfi_evq *q, DAT_TIMEOUT timeout,
					    DAT_COUNT threshold)
{
	struct waitjob *j = calloc(1, sizeof(*j));

	assert_non_null(j);
	j->q = q;
	j->timeout = timeout;
	j->threshold = threshold;
	j->nmore = -12345;
	memset(&j->ev, 0xa5, sizeof(j->ev));
	atomic_init(&j->done, false);
	assert_int_equal(pthread_create(&j->tid, NULL, waitjob_main, j), 0);
	return j;
}

static inline bool waitjob_done(struct waitjob *j)
{
	return atomic_load(&j->done);
}

/* Join the thread if it finishes within ms; false (thread left running) if not. */
static inline bool join_flag_within(pthread_t tid, atomic_bool *done, unsigned ms)
{
	uint64_t end = t_now() + (uint64_t)ms * MS;

	while (!atomic_load(done)) {
		if (t_now() > end)
			return false;
		t_sleep_us(500);
	}
	pthread_join(tid, NULL);
	return true;
}

static inline void waitjob_join(struct waitjob *j, unsigned ms)
{
	if (!join_flag_within(j->tid, &j->done, ms))
		fail_msg("waiting thread still blocked in dfi_evq_wait after %u ms (lost wakeup?)", ms);
}

static inline double waitjob_ms(const struct waitjob *j)
{
	return (double)(j->t_end - j->t_start) / 1e6;
}

/* ------------------------------------------------------------ generic thread with a done flag */

struct tjob {
	pthread_t tid;
	atomic_bool done;
	void (*fn)(void *);
	void *arg;
};

static inline void *tjob_main(void *a)
{
	struct tjob *t = a;

	t->fn(t->arg);
	atomic_store(&t->done, true);
	return NULL;
}

static inline struct tjob *tjob_start(void (*fn)(void *), void *arg)
{
	struct tjob *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	t->fn = fn;
	t->arg = arg;
	atomic_init(&t->done, false);
	assert_int_equal(pthread_create(&t->tid, NULL, tjob_main, t), 0);
	return t;
}

static inline void tjob_join(struct tjob *t, unsigned ms, const char *what)
{
	if (!join_flag_within(t->tid, &t->done, ms))
		fail_msg("%s did not finish within %u ms (deadlock or lost wakeup)", what, ms);
	free(t);
}

/* ------------------------------------------------------------ per-test watchdog */

/* A deadlocked core would hang the whole binary: if one test runs longer than
 * EVTEST_WATCHDOG_S, print a message (cmocka already printed "[ RUN ] name")
 * and exit with status 2. */
#ifndef EVTEST_WATCHDOG_S
#define EVTEST_WATCHDOG_S 90
#endif

static atomic_uint_fast64_t evtest_test_start;

static inline void *evtest_watchdog_main(void *arg)
{
	(void)arg;
	for (;;) {
		uint64_t s;

		sleep(1);
		s = atomic_load(&evtest_test_start);
		if (s && t_now() - s > (uint64_t)EVTEST_WATCHDOG_S * 1000 * MS) {
			fprintf(stderr, "watchdog: the running test is still going after %d s "
				"(deadlock or lost wakeup in the core?); exiting\n", EVTEST_WATCHDOG_S);
			fflush(stderr);
			_exit(2);
		}
	}
	return NULL;
}

static inline void evtest_watchdog_start(void)
{
	pthread_t t;

	if (pthread_create(&t, NULL, evtest_watchdog_main, NULL) == 0)
		pthread_detach(t);
}

static inline int evtest_setup(void **state)
{
	(void)state;
	atomic_store(&evtest_test_start, t_now());
	return 0;
}

static inline int evtest_teardown(void **state)
{
	(void)state;
	atomic_store(&evtest_test_start, 0);
	return 0;
}

/* A test entry guarded by the watchdog. */
#define evtest(f) cmocka_unit_test_setup_teardown(f, evtest_setup, evtest_teardown)

/* ------------------------------------------------------------ signals */

static volatile sig_atomic_t evtest_sig_count;

static inline void evtest_sig_handler(int sig)
{
	(void)sig;
	evtest_sig_count++;
}

/* SIGUSR1 handled, without SA_RESTART. */
static inline void evtest_install_sigusr1(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = evtest_sig_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;
	sigaction(SIGUSR1, &sa, NULL);
}

#endif
