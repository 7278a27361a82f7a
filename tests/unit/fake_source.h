/*
 * fake_source.h: a test producer of completions behind an EVD (a stand-in for a
 * libfabric CQ opened with FI_WAIT_FD), implementing struct dfi_evq_source_ops.
 *
 *   - completions are DAT_EVENTs in an internal mutex-protected FIFO;
 *   - fd() is an eventfd that becomes readable when a completion is injected
 *     while the source is *armed*; arming is one-shot (like ibv_req_notify_cq /
 *     fi_trywait): the injection that fires the fd disarms the source;
 *   - trywait() drains stale notifications from the fd, then: completions
 *     pending -> -EAGAIN (not armed); else arm and return 0;
 *   - read() moves up to max completions (nothing at all once the source is
 *     "dead", i.e. its EP was destroyed, scenario 26);
 *   - read_one() moves one, as a source that reads ahead offers it (the
 *     CQ source, dto.c): only when attached by fake_source_attach_read_one;
 *   - hooks: before_arm runs inside trywait before it looks/arms (to inject in the
 *     window between the consumer's empty poll and the arm, scenario 1);
 *     after_arm runs inside trywait right after arming (trywait still returns 0);
 *   - fake_source_spurious() makes the fd readable with no completion (scenario 25);
 *   - fake_source_set_trywait_error() makes trywait fail (D12);
 *   - fake_source_set_read_cap() makes read() short with more behind it, as
 *     the CQ source is when its read-ahead holds a remainder, or when it
 *     reports fewer completions than it read (suppressed ones);
 *   - counters: reads, read_ones, events read, trywaits, arms, fd signals,
 *     spurious.
 *
 * Hooks run without the source lock held, on the thread that called trywait
 * (normally with the EVD lock held by the core: a hook must not call the EVD).
 *
 * A "progress context" helper is included: a thread that polls the source fd and,
 * when it fires, consumes the notification and calls dfi_evq_source_notify().
 *
 * Header-only (static inline) so that each test file can include it.
 */
#ifndef DFI_FAKE_SOURCE_H
#define DFI_FAKE_SOURCE_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "event/event.h"

struct fake_source;
typedef void (*fake_source_hook)(struct fake_source *fs, void *arg);

struct fake_source {
	pthread_mutex_t lock;
	DAT_EVENT *buf;			/* circular, grows */
	size_t cap, head, count;
	int efd;
	bool armed;
	bool dead;
	int trywait_error;		/* != 0: trywait returns it */
	int read_cap;			/* != 0: read() moves at most this many */
	fake_source_hook before_arm, after_arm;
	void *before_arm_arg, *after_arm_arg;

	atomic_uint_fast64_t n_reads;		/* read() calls */
	atomic_uint_fast64_t n_read_ones;	/* read_one() calls */
	atomic_uint_fast64_t n_read_events;	/* completions handed to the core */
	atomic_uint_fast64_t n_trywaits;	/* trywait() calls */
	atomic_uint_fast64_t n_arms;		/* trywait() that armed (returned 0) */
	atomic_uint_fast64_t n_eagain;		/* trywait() that returned -EAGAIN */
	atomic_uint_fast64_t n_signals;		/* fd made readable by an injection */
	atomic_uint_fast64_t n_spurious;	/* fd made readable with no completion */
	atomic_uint_fast64_t n_injected;
	atomic_uint_fast64_t n_max_read;	/* largest max argument seen by read() */
};

static inline void fake_source__efd_signal(struct fake_source *fs)
{
	uint64_t one = 1;

	if (write(fs->efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		abort();
}

static inline bool fake_source__efd_drain(struct fake_source *fs)
{
	uint64_t v;

	return read(fs->efd, &v, sizeof(v)) == (ssize_t)sizeof(v);
}

/* Up to max completions out of the FIFO (none once dead). */
static inline int fake_source__take(struct fake_source *fs, DAT_EVENT *ev, int max)
{
	int n = 0;

	pthread_mutex_lock(&fs->lock);
	if (!fs->dead) {
		while (n < max && fs->count > 0) {
			ev[n++] = fs->buf[fs->head];
			fs->head = (fs->head + 1) % fs->cap;
			fs->count--;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	atomic_fetch_add(&fs->n_read_events, (uint64_t)n);
	return n;
}

static inline int fake_source_read(void *ctx, DAT_EVENT *ev, int max)
{
	struct fake_source *fs = ctx;

	atomic_fetch_add(&fs->n_reads, 1);
	if (max > 0 && (uint64_t)max > atomic_load(&fs->n_max_read))
		atomic_store(&fs->n_max_read, (uint64_t)max);
	if (fs->read_cap && max > fs->read_cap)
		max = fs->read_cap;
	return fake_source__take(fs, ev, max);
}

/* Counted apart from read(): both hand out events (n_read_events). */
static inline int fake_source_read_one(void *ctx, DAT_EVENT *ev)
{
	struct fake_source *fs = ctx;

	atomic_fetch_add(&fs->n_read_ones, 1);
	return fake_source__take(fs, ev, 1);
}

static inline int fake_source_trywait(void *ctx)
{
	struct fake_source *fs = ctx;
	fake_source_hook hook;
	void *arg;
	int err;

	atomic_fetch_add(&fs->n_trywaits, 1);
	pthread_mutex_lock(&fs->lock);
	hook = fs->before_arm;
	arg = fs->before_arm_arg;
	err = fs->trywait_error;
	pthread_mutex_unlock(&fs->lock);
	if (hook)
		hook(fs, arg);
	if (err)
		return err;

	pthread_mutex_lock(&fs->lock);
	fake_source__efd_drain(fs);		/* stale notifications are consumed */
	if (fs->count > 0 && !fs->dead) {
		pthread_mutex_unlock(&fs->lock);
		atomic_fetch_add(&fs->n_eagain, 1);
		return -EAGAIN;
	}
	fs->armed = true;
	hook = fs->after_arm;
	arg = fs->after_arm_arg;
	pthread_mutex_unlock(&fs->lock);
	atomic_fetch_add(&fs->n_arms, 1);
	if (hook)
		hook(fs, arg);
	return 0;
}

static inline int fake_source_fd(void *ctx)
{
	struct fake_source *fs = ctx;

	return fs->efd;
}

static const struct dfi_evq_source_ops fake_source_ops = {
	.read = fake_source_read,
	.trywait = fake_source_trywait,
	.fd = fake_source_fd,
};

static const struct dfi_evq_source_ops fake_source_ops_read_one = {
	.read = fake_source_read,
	.trywait = fake_source_trywait,
	.fd = fake_source_fd,
	.read_one = fake_source_read_one,
};

static inline struct fake_source *fake_source_new(void)
{
	struct fake_source *fs = calloc(1, sizeof(*fs));

	if (!fs)
		abort();
	pthread_mutex_init(&fs->lock, NULL);
	fs->cap = 64;
	fs->buf = calloc(fs->cap, sizeof(DAT_EVENT));
	fs->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!fs->buf || fs->efd < 0)
		abort();
	return fs;
}

static inline void fake_source_free(struct fake_source *fs)
{
	if (!fs)
		return;
	close(fs->efd);
	free(fs->buf);
	pthread_mutex_destroy(&fs->lock);
	free(fs);
}

/* Attach to an EVD (the core reads it from now on). */
static inline void fake_source_attach(struct fake_source *fs, struct dfi_evq *q)
{
	dfi_evq_set_source(q, &fake_source_ops, fs);
}

/* The same, offering read_one as well (a source that reads ahead). */
static inline void fake_source_attach_read_one(struct fake_source *fs, struct dfi_evq *q)
{
	dfi_evq_set_source(q, &fake_source_ops_read_one, fs);
}

/* A completion arrives. */
static inline void fake_source_inject(struct fake_source *fs, const DAT_EVENT *ev)
{
	pthread_mutex_lock(&fs->lock);
	if (fs->count == fs->cap) {
		size_t ncap = fs->cap * 2;
		DAT_EVENT *nb = calloc(ncap, sizeof(DAT_EVENT));

		if (!nb)
			abort();
		for (size_t i = 0; i < fs->count; i++)
			nb[i] = fs->buf[(fs->head + i) % fs->cap];
		free(fs->buf);
		fs->buf = nb;
		fs->cap = ncap;
		fs->head = 0;
	}
	fs->buf[(fs->head + fs->count) % fs->cap] = *ev;
	fs->count++;
	atomic_fetch_add(&fs->n_injected, 1);
	if (fs->armed) {
		fs->armed = false;		/* one-shot */
		fake_source__efd_signal(fs);
		atomic_fetch_add(&fs->n_signals, 1);
	}
	pthread_mutex_unlock(&fs->lock);
}

/* The fd becomes readable with no completion behind it. */
static inline void fake_source_spurious(struct fake_source *fs)
{
	pthread_mutex_lock(&fs->lock);
	fake_source__efd_signal(fs);
	pthread_mutex_unlock(&fs->lock);
	atomic_fetch_add(&fs->n_spurious, 1);
}

/* The EP behind the source is destroyed: pending completions are gone and read()
 * returns nothing from now on. */
static inline void fake_source_kill(struct fake_source *fs)
{
	pthread_mutex_lock(&fs->lock);
	fs->dead = true;
	fs->count = 0;
	fs->head = 0;
	pthread_mutex_unlock(&fs->lock);
}

static inline void fake_source_set_hooks(struct fake_source *fs,
					 fake_source_hook before_arm, void *before_arg,
					 fake_source_hook after_arm, void *after_arg)
{
	pthread_mutex_lock(&fs->lock);
	fs->before_arm = before_arm;
	fs->before_arm_arg = before_arg;
	fs->after_arm = after_arm;
	fs->after_arm_arg = after_arg;
	pthread_mutex_unlock(&fs->lock);
}

static inline void fake_source_set_read_cap(struct fake_source *fs, int cap)
{
	fs->read_cap = cap;
}

static inline void fake_source_set_trywait_error(struct fake_source *fs, int err)
{
	pthread_mutex_lock(&fs->lock);
	fs->trywait_error = err;
	pthread_mutex_unlock(&fs->lock);
}

static inline size_t fake_source_pending(struct fake_source *fs)
{
	size_t n;

	pthread_mutex_lock(&fs->lock);
	n = fs->count;
	pthread_mutex_unlock(&fs->lock);
	return n;
}

static inline bool fake_source_armed(struct fake_source *fs)
{
	bool a;

	pthread_mutex_lock(&fs->lock);
	a = fs->armed;
	pthread_mutex_unlock(&fs->lock);
	return a;
}

static inline bool fake_source_fd_readable(struct fake_source *fs)
{
	struct pollfd p = { .fd = fs->efd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Consume a notification (like ibv_get_cq_event): true if there was one. */
static inline bool fake_source_consume_notification(struct fake_source *fs)
{
	bool r;

	pthread_mutex_lock(&fs->lock);
	r = fake_source__efd_drain(fs);
	pthread_mutex_unlock(&fs->lock);
	return r;
}

/* ------------------------------------------------------------ progress context */

/* A thread that polls the source fd; when it fires it consumes the notification
 * (one-shot, the source must be re-armed through trywait to fire again) and
 * calls dfi_evq_source_notify(q). */
struct fake_progress {
	pthread_t tid;
	struct dfi_evq *q;
	struct fake_source *fs;
	atomic_bool stop;
	atomic_uint_fast64_t n_notify;
};

static inline void *fake_progress_main(void *arg)
{
	struct fake_progress *p = arg;

	while (!atomic_load(&p->stop)) {
		struct pollfd pfd = { .fd = p->fs->efd, .events = POLLIN };

		if (poll(&pfd, 1, 5) == 1 && (pfd.revents & POLLIN)) {
			fake_source_consume_notification(p->fs);
			dfi_evq_source_notify(p->q);
			atomic_fetch_add(&p->n_notify, 1);
		}
	}
	return NULL;
}

static inline struct fake_progress *fake_progress_start(struct dfi_evq *q, struct fake_source *fs)
{
	struct fake_progress *p = calloc(1, sizeof(*p));

	if (!p)
		abort();
	p->q = q;
	p->fs = fs;
	atomic_init(&p->stop, false);
	if (pthread_create(&p->tid, NULL, fake_progress_main, p) != 0)
		abort();
	return p;
}

static inline void fake_progress_stop(struct fake_progress *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, true);
	pthread_join(p->tid, NULL);
	free(p);
}

#endif
