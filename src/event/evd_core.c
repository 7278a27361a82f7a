/*
 * The EVD core: a FIFO ring of DAT_EVENTs per EVD, its waiter, thresholds,
 * overflow, and notification of the attached CNO.
 *
 * Invariants (all under q->lock):
 *  - A completion is read from the source only into a free ring slot, so
 *    nothing polled is ever dropped; the rest waits in the source.
 *  - A thread sleeps only after "fill, check, try-wait" found nothing: the
 *    try-wait arms the source and looks once more (evd-contract.md 8.2), so a
 *    completion landing between the last read and the arm is either seen by
 *    the re-check or makes the source fd readable.  Software and provider
 *    pushes wake the waiter through wake_fd, decided under the same lock as
 *    the state they test (fixes OFA D1, D9).
 *  - Every deadline is one absolute CLOCK_MONOTONIC instant (D2, D3, D14).
 *  - The CNO is triggered after the EVD lock is dropped, with a hold on it.
 */
#include "util/hot.h"
#include "event.h"
#include "util/daterr.h"
#include "util/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

uint32_t dfi_evq_qlen_round(DAT_COUNT min_qlen)
{
	uint32_t n = 1;

	while (n < (uint32_t)min_qlen)
		n <<= 1;
	return n;
}

int dfi_evq_init(struct dfi_evq *q, DAT_EVD_HANDLE self, DAT_COUNT min_qlen,
		 DAT_EVD_FLAGS flags, struct dfi_evq *async)
{
	pthread_condattr_t ca;

	if (min_qlen < 1 || min_qlen > DFI_EVD_MAX_QLEN)
		return -EINVAL;
	memset(q, 0, sizeof(*q));
	q->qlen = dfi_evq_qlen_round(min_qlen);
	q->mask = q->qlen - 1;
	q->ring = calloc(q->qlen, sizeof(DAT_EVENT));
	q->from_src = calloc(q->qlen, 1);
	if (!q->ring || !q->from_src) {
		free(q->ring);
		free(q->from_src);
		return -ENOMEM;
	}
	pthread_mutex_init(&q->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->waiter_left, &ca);
	pthread_cond_init(&q->up_idle, &ca);
	pthread_cond_init(&q->unheld, &ca);
	pthread_condattr_destroy(&ca);
	q->handle = self;
	q->flags = flags;
	q->state = DFI_EVQ_OPEN;
	q->enabled = true;
	q->waitable = true;
	q->wake_fd = -1;
	q->async = async;
	return 0;
}

void dfi_evq_fini(struct dfi_evq *q)
{
	if (q->cno)
		dfi_cno_detach(q->cno, true);
	q->cno = NULL;
	if (q->wake_fd >= 0)
		close(q->wake_fd);
	free(q->ring);
	free(q->from_src);
	q->ring = NULL;
	q->from_src = NULL;
	pthread_cond_destroy(&q->waiter_left);
	pthread_cond_destroy(&q->up_idle);
	pthread_cond_destroy(&q->unheld);
	pthread_mutex_destroy(&q->lock);
}

void dfi_evq_set_source(struct dfi_evq *q, const struct dfi_evq_source_ops *ops, void *ctx)
{
	pthread_mutex_lock(&q->lock);
	q->src = ops;
	q->src_ctx = ctx;
	q->src_armed = false;
	pthread_mutex_unlock(&q->lock);
}

/* ------------------------------------------------------------ ring helpers */

static bool up_active(const struct dfi_evq *q)
{
	return q->up_policy != DAT_UPCALL_DISABLE && q->state != DFI_EVQ_FREEING;
}

/* Events entered the ring (lock held): under an active policy they are
 * new arrivals, to be delivered by upcall. */
static void up_mark(struct dfi_evq *q)
{
	if (up_active(q))
		q->up_fire = true;
}

/* Lock held: hand q to the dispatcher if it has upcalls to make and no
 * running instance will find them itself (SINGLE_INSTANCE and NOTIFY
 * re-check after each upcall; MANY may run one more in parallel). */
static void up_kick(struct dfi_evq *q)
{
	if (!up_active(q) || !q->up_fire || q->count == 0)
		return;
	if (q->up_running && q->up_policy != DAT_UPCALL_MANY)
		return;
	dfi_disp_enqueue(q->disp, q);
}

static void ring_push(struct dfi_evq *q, const DAT_EVENT *ev)
{
	uint32_t i = (q->head + q->count) & q->mask;
	DAT_EVENT *slot = &q->ring[i];

	*slot = *ev;
	slot->evd_handle = q->handle;
	q->from_src[i] = 0;
	q->count++;
	q->n_posted++;
	up_mark(q);
}

DFI_HOT static void ring_pop(struct dfi_evq *q, DAT_EVENT *ev)
{
	*ev = q->ring[q->head];
	if (q->from_src[q->head] && q->src && q->src->consumed)
		q->src->consumed(q->src_ctx, ev);
	q->head = (q->head + 1) & q->mask;
	q->count--;
	q->overflow_latched = false;	/* a slot is free again: new episode */
}

/* Pull completions from the source into free slots, in batches, until the
 * ring holds `need` events, is full, or the source is empty.  Returns how
 * many.  A consumer that wants one event stops after the batch that brought
 * it: reading on to an empty source would cost a libfabric progress pass
 * (an epoll_wait, on tcp) for nothing; what stays in the CQ is read by the
 * next fill, in order. */
DFI_HOT static int fill_to(struct dfi_evq *q, uint32_t need)
{
	int total = 0;

	if (!q->src)
		return 0;
	while (q->count < need && q->count < q->qlen) {
		uint32_t tail = (q->head + q->count) & q->mask;
		uint32_t room = q->qlen - q->count;
		uint32_t contig = q->qlen - tail;
		int want = (int)(room < contig ? room : contig);
		int n;

		if (want > DFI_EVQ_FILL_BATCH)
			want = DFI_EVQ_FILL_BATCH;
		n = q->src->read(q->src_ctx, &q->ring[tail], want);
		if (n <= 0) {
			if (n < 0)
				dfi_warn(DFI_SS_EVD, "EVD %p: source read failed: %s",
					 (void *)q->handle, strerror(-n));
			break;
		}
		for (int i = 0; i < n; i++) {
			q->ring[tail + (uint32_t)i].evd_handle = q->handle;
			q->from_src[tail + (uint32_t)i] = 1;
		}
		q->count += (uint32_t)n;
		q->n_posted += (uint64_t)n;
		up_mark(q);
		total += n;
		if (n < want)
			break;
	}
	return total;
}

/* Everything the source holds, as far as the ring has room. */
static int fill(struct dfi_evq *q)
{
	return fill_to(q, q->qlen);
}

/* Arm the source (try-wait) so that the next completion fires its fd.
 * Completions found on the way are pulled in (returns how many).  Lock
 * held. */
static int arm_source(struct dfi_evq *q)
{
	int pulled = 0;

	/* Bounded: under a stream completions keep landing, and an unarmed
	 * source's fd stays readable, so whoever watches it comes back. */
	for (int tries = 0; tries < 4 && q->src && !q->src_armed && q->count < q->qlen; tries++) {
		int rc = q->src->trywait(q->src_ctx);

		int n;

		if (rc == 0) {
			q->src_armed = true;
			return pulled;
		}
		if (rc != -EAGAIN) {
			/* tcp 1.17 answers ENOENT once for an endpoint it
			 * disabled while it waited to send (its epoll MOD of a
			 * socket already out of the set): nothing is wrong */
			dfi_log(rc == -ENOENT ? DFI_LOG_DEBUG : DFI_LOG_WARN, DFI_SS_EVD,
				"EVD %p: source try-wait failed: %s", (void *)q->handle,
				strerror(-rc));
			return pulled;
		}
		if ((n = fill(q)) == 0)
			return pulled;	/* pending but unreadable: the fd stays ready */
		pulled += n;
	}
	return pulled;
}

static void wake(struct dfi_evq *q)
{
	uint64_t one = 1;

	if (q->wake_fd >= 0 && write(q->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		dfi_err(DFI_SS_EVD, "EVD %p: wake-up write failed: %m", (void *)q->handle);
	q->n_wakeups++;
}

static void drain_wake(struct dfi_evq *q)
{
	uint64_t v;

	if (read(q->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		dfi_err(DFI_SS_EVD, "EVD %p: wake-up read failed: %m", (void *)q->handle);
}

/* Events were added (lock held): wake the waiter whose threshold is met, or
 * return the CNO to trigger once the lock is dropped (held; NULL: none). */
static struct dfi_cno *arrived(struct dfi_evq *q)
{
	if (q->waiter) {
		if (q->count >= (uint32_t)q->threshold)
			wake(q);
		return NULL;	/* a direct waiter preempts the CNO */
	}
	if (up_active(q)) {
		up_kick(q);
		return NULL;	/* so does an upcall policy */
	}
	if (q->enabled && q->cno) {
		dfi_cno_hold(q->cno);
		return q->cno;
	}
	return NULL;
}

static void notify_cno(struct dfi_cno *cno, DAT_EVD_HANDLE evd)
{
	if (cno) {
		dfi_cno_trigger(cno, evd);
		dfi_cno_release(cno);
	}
}

/* --------------------------------------------------------------- producers */

DAT_RETURN dfi_evq_post_se(struct dfi_evq *q, const DAT_EVENT *ev)
{
	struct dfi_cno *cno;

	pthread_mutex_lock(&q->lock);
	if (q->count == q->qlen) {
		pthread_mutex_unlock(&q->lock);
		dfi_dbg(DFI_SS_EVD, "EVD %p full (qlen %u): software event refused",
			(void *)q->handle, q->qlen);
		return DFI_ERR(DAT_QUEUE_FULL, 0);
	}
	ring_push(q, ev);
	cno = arrived(q);
	pthread_mutex_unlock(&q->lock);
	notify_cno(cno, q->handle);
	return DAT_SUCCESS;
}

int dfi_evq_post(struct dfi_evq *q, const DAT_EVENT *ev)
{
	struct dfi_cno *cno;
	bool report;

	pthread_mutex_lock(&q->lock);
	if (q->dead || q->count == q->qlen) {
		report = !q->overflow_latched && !q->dead;
		q->overflow_latched = true;
		q->n_dropped++;
		if (!q->async && report) {
			/* The async EVD itself: catastrophic.  What is queued stays
			 * dequeueable; then dequeue and wait fail. */
			q->dead = true;
			if (q->waiter)
				wake(q);
		}
		pthread_mutex_unlock(&q->lock);
		if (report && q->async) {
			DAT_EVENT o;

			memset(&o, 0, sizeof(o));
			o.event_number = DAT_ASYNC_ERROR_EVD_OVERFLOW;
			o.event_data.asynch_error_event_data.dat_handle = q->handle;
			o.event_data.asynch_error_event_data.reason = DAT_EVD_OVERFLOW_ERROR;
			dfi_warn(DFI_SS_EVD, "EVD %p overflowed (qlen %u): event 0x%x dropped, "
				 "DAT_ASYNC_ERROR_EVD_OVERFLOW posted to the async EVD",
				 (void *)q->handle, q->qlen, (unsigned)ev->event_number);
			dfi_evq_post(q->async, &o);
		} else if (report) {
			dfi_err(DFI_SS_EVD, "async EVD %p overflowed (qlen %u): event 0x%x "
				"dropped; the async EVD is now catastrophic",
				(void *)q->handle, q->qlen, (unsigned)ev->event_number);
		}
		return -ENOSPC;
	}
	ring_push(q, ev);
	cno = arrived(q);
	pthread_mutex_unlock(&q->lock);
	notify_cno(cno, q->handle);
	return 0;
}

/* The source's fd fired (flush false), or an EP feeding it is going away
 * and what it left in the source should enter the ring now (flush true). */
static int source_notify(struct dfi_evq *q, bool run_upcalls, bool flush)
{
	struct dfi_cno *cno = NULL;
	bool run = false;
	int n;

	pthread_mutex_lock(&q->lock);
	if (!flush)
		q->src_armed = false;	/* the arm is one-shot: it fired */
	if (q->waiter) {
		wake(q);		/* the waiter reads the source itself */
		pthread_mutex_unlock(&q->lock);
		return 1;
	}
	n = fill(q);
	/* An EP is going away: all its source holds, not one batch.  A fill
	 * stops at a short read, and one may be short with more behind it
	 * (the CQ's read-ahead's remainder; completions not reported, as a
	 * suppressed send's); what a flush leaves is dropped with the EP's
	 * pool, and a receive's cancellation among it was lost (the soak on
	 * net's RDM endpoints: 8 receives never completed). */
	for (int k; flush && (k = fill(q)) > 0;)
		n += k;
	if (flush && n == 0) {
		/* nothing moved: the arm, if any, still holds (a try-wait
		 * on libfabric 1.17 tcp walks every EP of the CQ, so freeing
		 * N EPs must not cost N of them) */
		pthread_mutex_unlock(&q->lock);
		return 0;
	}
	/* Re-arm before notifying (OFA's rule), CNO or not: the progress
	 * context watches the fd, and a level-triggered wait object (libfabric
	 * CQ signal fds) stays readable until the next try-wait.  An arm that
	 * has not fired still holds: reading does not clear the signal. */
	if (!q->src_armed)
		n += arm_source(q);
	if (up_active(q)) {
		run = run_upcalls && q->up_fire && q->count > 0 &&
		      (!q->up_running || q->up_policy == DAT_UPCALL_MANY);
		if (!run)
			up_kick(q);
	} else if (q->enabled && q->cno && (n > 0 || q->count > 0)) {
		dfi_cno_hold(q->cno);
		cno = q->cno;
	}
	pthread_mutex_unlock(&q->lock);
	notify_cno(cno, q->handle);
	if (run)
		dfi_disp_run_here(q->disp, q);
	return n;
}

int dfi_evq_source_detach(struct dfi_evq *q, bool (*match)(const DAT_EVENT *ev, void *arg),
			  void *arg)
{
	int n = 0;

	pthread_mutex_lock(&q->lock);
	for (uint32_t k = 0; k < q->count; k++) {
		uint32_t i = (q->head + k) & q->mask;

		if (q->from_src[i] && match(&q->ring[i], arg)) {
			q->from_src[i] = 0;
			n++;
		}
	}
	pthread_mutex_unlock(&q->lock);
	return n;
}

void dfi_evq_source_notify(struct dfi_evq *q)
{
	(void)source_notify(q, false, false);
}

void dfi_evq_source_flush(struct dfi_evq *q)
{
	(void)source_notify(q, false, true);
}

int dfi_evq_source_notify_irq(struct dfi_evq *q)
{
	return source_notify(q, true, false);
}

bool dfi_evq_consumer_drives(struct dfi_evq *q, bool active)
{
	bool r;

	/* A busy lock is a consumer at work (in a stream it holds the lock
	 * while libfabric copies a message in): waiting for it would only
	 * cost that consumer a futex wake-up at its unlock. */
	if (pthread_mutex_trylock(&q->lock))
		return true;
	r = q->waiter || q->count == q->qlen ||
	    (active && !(q->enabled && q->cno) && !up_active(q));
	pthread_mutex_unlock(&q->lock);
	return r;
}

bool dfi_evq_inside(struct dfi_evq *q)
{
	return atomic_load_explicit(&q->posting, memory_order_relaxed) || dfi_evq_waited(q);
}

bool dfi_evq_waited(struct dfi_evq *q)
{
	bool r;

	if (pthread_mutex_trylock(&q->lock))
		return true;
	r = q->waiter;
	pthread_mutex_unlock(&q->lock);
	return r;
}

/* A consumer call (lock held; posts may bump it concurrently). */
static void count_call(struct dfi_evq *q)
{
	dfi_evq_touch(q);
}

bool dfi_evq_wants_notify(struct dfi_evq *q)
{
	bool r;

	pthread_mutex_lock(&q->lock);
	r = q->src && q->enabled && q->cno && !q->waiter;
	pthread_mutex_unlock(&q->lock);
	return r;
}

/* --------------------------------------------------------------- consumers */

DFI_HOT DAT_RETURN dfi_evq_dequeue(struct dfi_evq *q, DAT_EVENT *ev)
{
	DAT_RETURN rc;

	pthread_mutex_lock(&q->lock);
	if (q->waiter) {
		pthread_mutex_unlock(&q->lock);
		return DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	}
	count_call(q);
	if (q->count == 0 && q->src) {
		bool notified = (q->enabled && q->cno) || up_active(q);

		if (q->src->read_one && !notified) {
			/* A plain consumer and nothing queued before the
			 * source's next event: that one goes straight into ev,
			 * past the ring (the source reads ahead in batches). */
			int n = q->src->read_one(q->src_ctx, ev);

			if (n == 1) {
				ev->evd_handle = q->handle;
				q->n_posted++;
				pthread_mutex_unlock(&q->lock);
				return DAT_SUCCESS;
			}
			if (n < 0)
				dfi_warn(DFI_SS_EVD, "EVD %p: source read failed: %s",
					 (void *)q->handle, strerror(-n));
		} else {
			fill_to(q, 1);
			/* A CNO or upcall consumer that polls until empty and
			 * then relies on notification must find the source
			 * armed (fixes D9 for dequeuers). */
			if (q->count == 0 && notified)
				arm_source(q);
		}
	}
	if (q->count > 0) {
		ring_pop(q, ev);
		/* The last one out arms too: a consumer that dequeues *npending
		 * events and stops relies on notification from here on. */
		if (q->count == 0 && q->src && up_active(q))
			arm_source(q);
		up_kick(q);	/* what this fill brought beyond ev is new too */
		rc = DAT_SUCCESS;
	} else if (q->dead) {
		rc = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_ASYNC);
	} else {
		rc = DFI_QUEUE_EMPTY;
	}
	pthread_mutex_unlock(&q->lock);
	return rc;
}

static DAT_RETURN wait_precheck(struct dfi_evq *q, DAT_COUNT threshold)
{
	if (threshold < 1 || (uint32_t)threshold > q->qlen) {
		dfi_reject(DFI_SS_API, "EVD %p: threshold %d out of range 1..%u",
			   (void *)q->handle, threshold, q->qlen);
		return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	}
	if (q->state == DFI_EVQ_FREEING)
		return DFI_ERR(DAT_ABORT, 0);
	if (q->waiter) {
		dfi_reject(DFI_SS_API, "EVD %p already has a waiter", (void *)q->handle);
		return DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	}
	if (!q->waitable)
		return DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
	if (up_active(q)) {
		/* The upcall owns delivery; a waiter would race it for each
		 * event.  Dequeue stays allowed (the final poll of the edge rule). */
		dfi_reject(DFI_SS_API, "EVD %p has an active upcall policy (%d): "
			   "dat_evd_wait is refused, use dat_evd_dequeue", (void *)q->handle,
			   q->up_policy);
		return DFI_ERR(DAT_INVALID_STATE, 0);
	}
	if (threshold > 1 && (q->n_solicited || q->n_notify)) {
		dfi_reject(DFI_SS_API, "EVD %p: threshold %d needs the threshold completion "
			   "model, but an EP feeding it uses %s completions", (void *)q->handle,
			   threshold, q->n_solicited ? "solicited-wait" : "unsignalled");
		return DFI_ERR(DAT_INVALID_STATE, q->n_solicited ?
			       DAT_INVALID_STATE_EVD_CONFIG_SOLICITED :
			       DAT_INVALID_STATE_EVD_CONFIG_NOTIFY);
	}
	if (q->wake_fd < 0) {
		q->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (q->wake_fd < 0) {
			int e = errno;

			/* the descriptor a waiter sleeps on is the EVD's */
			dfi_err(DFI_SS_EVD, "EVD %p: eventfd: %s%s", (void *)q->handle, strerror(e),
				e == EMFILE || e == ENFILE ? " (no file descriptor left)" : "");
			return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, e == ENOMEM ? DAT_RESOURCE_MEMORY :
				       DAT_RESOURCE_TEVD);
		}
	}
	return DAT_SUCCESS;
}

/* The waiter leaves (lock held), on every exit of dfi_evq_wait and on its
 * cancellation.  Returns the CNO to trigger once the lock is dropped. */
static struct dfi_cno *waiter_leave(struct dfi_evq *q, bool cancelled)
{
	struct dfi_cno *cno = NULL;

	/* Leave the source armed for the CNO once the waiter is gone (D9). */
	if (q->enabled && q->cno && q->state != DFI_EVQ_FREEING) {
		arm_source(q);
		/* A waiter preempts the CNO (arrived): what it was woken for
		 * and never took goes to the CNO now, as if it arrived after
		 * the waiter left.  One that returns reports it in nmore. */
		if (cancelled && q->count > 0 && !up_active(q)) {
			dfi_cno_hold(q->cno);
			cno = q->cno;
		}
	}
	q->waiter = false;
	if (q->state == DFI_EVQ_WAITED)
		q->state = DFI_EVQ_OPEN;
	pthread_cond_broadcast(&q->waiter_left);
	return cno;
}

/* The waiter was cancelled in its sleep, where it holds no lock: it leaves
 * as every exit does, so the next wait, dat_evd_free and dat_ia_close find
 * the EVD without a waiter. */
static void wait_cancelled(void *arg)
{
	struct dfi_evq *q = arg;
	DAT_EVD_HANDLE self;
	struct dfi_cno *cno;

	pthread_mutex_lock(&q->lock);
	if (q->src && q->src->slept)
		q->src->slept(q->src_ctx);	/* the fd's sleeper count */
	q->src_armed = false;	/* it may have fired: the next sleeper re-arms */
	cno = waiter_leave(q, true);
	self = q->handle;	/* q may be freed once the lock is dropped */
	pthread_mutex_unlock(&q->lock);
	notify_cno(cno, self);	/* held: the CNO outlives q */
}

/* The only point of dfi_evq_wait where cancellation may act: no lock held,
 * the state consistent (wait_cancelled undoes the waiter). */
static int sleep_cancellable(struct dfi_evq *q, const int *fds, int nfds, uint64_t deadline,
			     int cstate)
{
	int r, type;

	pthread_cleanup_push(wait_cancelled, q);
	/* Deferred even for an asynchronous consumer: the cancel then acts
	 * in ppoll, at a call.  Between calls gcc's C personality routine
	 * finds no call site and would unwind past the cleanup. */
	pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &type);
	pthread_setcancelstate(cstate, NULL);
	r = dfi_sleep_fds(fds, nfds, deadline);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_setcanceltype(type, NULL);
	pthread_cleanup_pop(0);
	return r;
}

DFI_HOT DAT_RETURN dfi_evq_wait(struct dfi_evq *q, DAT_TIMEOUT timeout, DAT_COUNT threshold,
				DAT_EVENT *ev, DAT_COUNT *nmore)
{
	uint64_t deadline, found_at = 0;	/* polling: when the source last gave events */
	long slack = -1;		/* the thread's timer slack, while it polls */
	DAT_RETURN rc;
	int cstate;

	if (!ev)
		return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!nmore)
		return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	deadline = dfi_deadline(timeout);

	/* Cancellation is held off for the whole call but the sleep: the
	 * source's reads and try-waits reach cancellation points inside
	 * libfabric (tcp: epoll_wait) with its locks and ours held, and so
	 * do the eventfd reads and the log's writes. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cstate);
	pthread_mutex_lock(&q->lock);
	rc = wait_precheck(q, threshold);
	if (rc != DAT_SUCCESS) {
		pthread_mutex_unlock(&q->lock);
		pthread_setcancelstate(cstate, NULL);
		return rc;
	}
	q->waiter = true;
	q->waiter_tid = pthread_self();
	q->state = DFI_EVQ_WAITED;
	q->threshold = threshold;
	count_call(q);
	atomic_store_explicit(&q->waits, atomic_load_explicit(&q->waits, memory_order_relaxed) + 1,
			      memory_order_relaxed);

	for (;;) {
		int fds[2], r, got;

		got = fill_to(q, (uint32_t)threshold);
		if (q->count >= (uint32_t)threshold) {
			rc = DAT_SUCCESS;
			break;
		}
		if (q->dead) {
			rc = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_ASYNC);
			break;
		}
		if (dfi_remaining(deadline) == 0) {
			rc = DFI_ERR(DAT_TIMEOUT_EXPIRED, 0);
			break;
		}
		if (q->src && !q->src_armed) {
			r = q->src->trywait(q->src_ctx);
			if (r == -EAGAIN)
				continue;	/* something landed: read it */
			if (r < 0) {
				dfi_err(DFI_SS_EVD, "EVD %p: source try-wait failed: %s",
					(void *)q->handle, strerror(-r));
				rc = DFI_ERR(DAT_INTERNAL_ERROR, 0);
				break;
			}
			q->src_armed = true;
		}
		fds[0] = q->wake_fd;
		fds[1] = q->src ? q->src->fd(q->src_ctx) : -1;
		if (q->src && fds[1] < 0) {
			/* a source with no fd to sleep on is polled
			 * (dfi_poll_sleep_ns); with the default 50 us timer
			 * slack a 10 us sleep would take 60 */
			if (slack < 0) {
				slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
				if (slack >= 0)
					prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);
			}
		}
		pthread_mutex_unlock(&q->lock);
		if (q->src && fds[1] < 0) {
			uint64_t now = dfi_now_ns(), at;

			if (got > 0 || !found_at)
				found_at = now;
			at = now + dfi_poll_sleep_ns(now - found_at);
			r = sleep_cancellable(q, fds, 1, at < deadline ? at : deadline, cstate);
		} else {
			r = sleep_cancellable(q, fds, 2, deadline, cstate);
		}
		pthread_mutex_lock(&q->lock);
		if (q->src && q->src->slept && fds[1] >= 0)
			q->src->slept(q->src_ctx);
		if (r > 0 && (r & 1))
			drain_wake(q);	/* not when only the source's fd woke us: a syscall */
		if (r < 0 || (r & 2))
			q->src_armed = false;	/* it fired: re-arm before the next sleep */
		if (q->state == DFI_EVQ_FREEING) {
			rc = DFI_ERR(DAT_ABORT, 0);
			break;
		}
		if (!q->waitable) {
			rc = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
			break;
		}
		if (r == -EINTR) {
			fill_to(q, (uint32_t)threshold);
			if (q->count >= (uint32_t)threshold) {
				rc = DAT_SUCCESS;
				break;
			}
			rc = DFI_ERR(DAT_INTERRUPTED_CALL, 0);
			break;
		}
		if (r < 0) {
			dfi_err(DFI_SS_EVD, "EVD %p: ppoll: %s", (void *)q->handle, strerror(-r));
			rc = DFI_ERR(DAT_INTERNAL_ERROR, 0);
			break;
		}
	}
	if (slack > 0)
		prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
	if (rc == DAT_SUCCESS)
		ring_pop(q, ev);
	(void)waiter_leave(q, false);	/* a returning waiter triggers nothing */
	*nmore = (DAT_COUNT)q->count;
	/* q may be freed from here on (dat_ia_close waits for this) */
	pthread_mutex_unlock(&q->lock);
	pthread_setcancelstate(cstate, NULL);
	return rc;
}

/* ------------------------------------------------------------ management */

DAT_RETURN dfi_evq_resize(struct dfi_evq *q, DAT_COUNT min_qlen)
{
	DAT_EVENT *ring, *old;
	uint8_t *from, *old_from;
	uint32_t n;

	if (min_qlen < 1 || min_qlen > DFI_EVD_MAX_QLEN) {
		dfi_reject(DFI_SS_API, "EVD %p: qlen %d out of range 1..%d",
			   (void *)q->handle, min_qlen, DFI_EVD_MAX_QLEN);
		return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	n = dfi_evq_qlen_round(min_qlen);
	ring = calloc(n, sizeof(DAT_EVENT));
	from = calloc(n, 1);
	if (!ring || !from) {
		free(ring);
		free(from);
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}

	pthread_mutex_lock(&q->lock);
	if (q->waiter) {
		pthread_mutex_unlock(&q->lock);
		free(ring);
		free(from);
		return DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	}
	if (q->count > n) {
		uint32_t count = q->count;

		pthread_mutex_unlock(&q->lock);
		free(ring);
		free(from);
		dfi_reject(DFI_SS_API, "EVD %p: %u events queued, more than qlen %u",
			   (void *)q->handle, count, n);
		return DFI_ERR(DAT_INVALID_STATE, 0);
	}
	for (uint32_t i = 0; i < q->count; i++) {
		ring[i] = q->ring[(q->head + i) & q->mask];
		from[i] = q->from_src[(q->head + i) & q->mask];
	}
	old = q->ring;
	old_from = q->from_src;
	q->ring = ring;
	q->from_src = from;
	q->qlen = n;
	q->mask = n - 1;
	q->head = 0;
	if (q->count < n)
		q->overflow_latched = false;
	pthread_mutex_unlock(&q->lock);
	free(old);
	free(old_from);
	return DAT_SUCCESS;
}

void dfi_evq_enable(struct dfi_evq *q)
{
	struct dfi_cno *cno = NULL;

	pthread_mutex_lock(&q->lock);
	if (!q->enabled) {
		q->enabled = true;
		if (q->cno) {
			fill(q);
			arm_source(q);
			/* Level on enable (documented): events already queued
			 * trigger the CNO once. */
			if (q->count > 0 && !q->waiter && !up_active(q)) {
				dfi_cno_hold(q->cno);
				cno = q->cno;
			}
			up_kick(q);
		}
	}
	pthread_mutex_unlock(&q->lock);
	notify_cno(cno, q->handle);
}

void dfi_evq_disable(struct dfi_evq *q)
{
	pthread_mutex_lock(&q->lock);
	q->enabled = false;
	pthread_mutex_unlock(&q->lock);
}

void dfi_evq_set_waitable(struct dfi_evq *q, bool waitable)
{
	pthread_mutex_lock(&q->lock);
	q->waitable = waitable;
	if (!waitable && q->waiter)
		wake(q);
	pthread_mutex_unlock(&q->lock);
}

void dfi_evq_modify_cno(struct dfi_evq *q, struct dfi_cno *cno)
{
	struct dfi_cno *old, *trig = NULL;

	pthread_mutex_lock(&q->lock);
	old = q->cno;
	if (old == cno) {
		pthread_mutex_unlock(&q->lock);
		return;
	}
	if (cno)
		dfi_cno_attach(cno);
	q->cno = cno;
	if (cno && q->enabled) {
		fill(q);
		q->src_armed = false;	/* an arm made for the old owner */
		arm_source(q);
		if (q->count > 0 && !q->waiter && !up_active(q)) {
			dfi_cno_hold(cno);
			trig = cno;
		}
		up_kick(q);
	}
	pthread_mutex_unlock(&q->lock);
	if (old)
		dfi_cno_detach(old, false);
	notify_cno(trig, q->handle);
}

void dfi_evq_query(struct dfi_evq *q, DAT_COUNT *qlen, DAT_EVD_STATE *state,
		   struct dfi_cno **cno)
{
	pthread_mutex_lock(&q->lock);
	if (qlen)
		*qlen = (DAT_COUNT)q->qlen;
	if (state)
		*state = (q->enabled ? DAT_EVD_STATE_ENABLED : DAT_EVD_STATE_DISABLED) |
			 (q->waitable ? DAT_EVD_STATE_WAITABLE : DAT_EVD_STATE_UNWAITABLE) |
			 (q->n_solicited ? DAT_EVD_STATE_CONFIG_SOLICITED :
			  q->n_notify ? DAT_EVD_STATE_CONFIG_NOTIFY :
			  DAT_EVD_STATE_CONFIG_THRESHOLD);
	if (cno)
		*cno = q->cno;
	pthread_mutex_unlock(&q->lock);
}

DAT_COUNT dfi_evq_count(struct dfi_evq *q)
{
	DAT_COUNT n;

	pthread_mutex_lock(&q->lock);
	n = (DAT_COUNT)q->count;
	pthread_mutex_unlock(&q->lock);
	return n;
}

void dfi_evq_ref(struct dfi_evq *q)
{
	pthread_mutex_lock(&q->lock);
	q->refs++;
	pthread_mutex_unlock(&q->lock);
}

void dfi_evq_unref(struct dfi_evq *q)
{
	pthread_mutex_lock(&q->lock);
	q->refs--;
	pthread_mutex_unlock(&q->lock);
}

/* Holds this thread has (on any EVD): a free from inside such a post (a
 * CNO agent it called) would wait for itself. */
static __thread int holds_here;

void dfi_evq_hold(struct dfi_evq *q)
{
	pthread_mutex_lock(&q->lock);
	q->holds++;
	pthread_mutex_unlock(&q->lock);
	holds_here++;
}

void dfi_evq_unhold(struct dfi_evq *q)
{
	holds_here--;
	pthread_mutex_lock(&q->lock);
	if (--q->holds == 0)
		pthread_cond_broadcast(&q->unheld);
	pthread_mutex_unlock(&q->lock);
}

void dfi_evq_notify_model(struct dfi_evq *q, DAT_EVD_STATE kind, int delta)
{
	pthread_mutex_lock(&q->lock);
	if (kind == DAT_EVD_STATE_CONFIG_SOLICITED)
		q->n_solicited += delta;
	else if (kind == DAT_EVD_STATE_CONFIG_NOTIFY)
		q->n_notify += delta;
	pthread_mutex_unlock(&q->lock);
}

/* Stop upcalls for good (FREEING set, lock held): wait until none runs,
 * then, unlocked, make sure no dispatcher thread holds q any more. */
static void up_quiesce(struct dfi_evq *q)
{
	q->up_policy = DAT_UPCALL_DISABLE;
	q->up_fire = false;
	while (q->up_running)
		pthread_cond_wait(&q->up_idle, &q->lock);
	if (q->disp) {
		pthread_mutex_unlock(&q->lock);
		dfi_disp_forget(q->disp, q);
		pthread_mutex_lock(&q->lock);
	}
}

DAT_RETURN dfi_evq_free_begin(struct dfi_evq *q)
{
	DAT_RETURN rc = DAT_SUCCESS;
	uint64_t deadline = 0;
	struct timespec ts;
	int held;

	if (dfi_upcall_current() == q) {
		dfi_reject(DFI_SS_API, "EVD %p: dat_evd_free from inside its own upcall "
			   "would wait for itself", (void *)q->handle);
		return DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
	}
	pthread_mutex_lock(&q->lock);
	/* An event posted by the progress thread for an EP freed just now
	 * (its DISCONNECTED, say) may have reached the consumer, who frees
	 * the EP and then this EVD, before that thread is out of the post:
	 * its hold is no stream feeding the EVD, and ends within a post, so
	 * the free waits for it (OFA's uDAPL frees such an EVD).  Rechecked
	 * after each wake-up: the lock was dropped meanwhile. */
	while (!q->waiter && q->refs == 0 && q->holds > 0 && holds_here == 0) {
		if (!deadline)
			deadline = dfi_deadline(DFI_EVQ_HOLD_WAIT_MS * 1000u);
		if (dfi_remaining(deadline) == 0)
			break;
		ts.tv_sec = (time_t)(deadline / 1000000000u);
		ts.tv_nsec = (long)(deadline % 1000000000u);
		pthread_cond_timedwait(&q->unheld, &q->lock, &ts);
	}
	held = 0;
	if (q->waiter) {
		rc = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	} else if (q->refs > 0 || q->holds > 0) {
		rc = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
		held = q->refs > 0 ? 0 : q->holds;
	} else {
		q->state = DFI_EVQ_FREEING;
		q->enabled = false;
		up_quiesce(q);	/* evd_free implies a teardown */
	}
	pthread_mutex_unlock(&q->lock);
	if (held)
		dfi_warn(DFI_SS_EVD, "EVD %p: free refused: %d events still on their way in, %s",
			 (void *)q->handle, held, holds_here ? "posted by this thread (a CNO "
			 "agent frees the EVD it is called for)" : "after waiting for them");
	return rc;
}

bool dfi_evq_abort(struct dfi_evq *q)
{
	pthread_mutex_lock(&q->lock);
	q->state = DFI_EVQ_FREEING;
	q->enabled = false;
	if (q->waiter && pthread_equal(q->waiter_tid, pthread_self())) {
		/* The waiter is this thread, below us on its stack: a signal
		 * handler interrupted its sleep and closes the IA (or exit()s,
		 * and an atexit handler does).  It cannot leave before we
		 * return: waiting would hang the exit.  The EVD stays (a
		 * handler that returns finds it FREEING: DAT_ABORT). */
		pthread_mutex_unlock(&q->lock);
		return false;
	}
	if (q->waiter)
		wake(q);
	while (q->waiter)
		pthread_cond_wait(&q->waiter_left, &q->lock);
	/* IA close frees the EVDs before it stops the progress thread: a
	 * post of that thread under way (a hold) ends before this one goes.
	 * Unless the holder is this thread (a CNO agent it called closes the
	 * IA): as before, it is not waited for. */
	while (q->holds > 0 && holds_here == 0)
		pthread_cond_wait(&q->unheld, &q->lock);
	up_quiesce(q);
	pthread_mutex_unlock(&q->lock);
	return true;
}

/* ---------------------------------------------------------------- upcalls */

/* The arm / trigger / dispatch / teardown protocol below (with up_kick,
 * up_mark, arm_source and the dequeue's "last one out arms") is modelled in
 * model/upcall.pml under the same names; model/README.md has the table. */

static __thread struct dfi_evq *up_current;

struct dfi_evq *dfi_upcall_current(void)
{
	return up_current;
}

static bool policy_valid(int p)
{
	return p == DAT_UPCALL_DISABLE || p == DAT_UPCALL_SINGLE_INSTANCE ||
	       p == DAT_UPCALL_NOTIFY || p == DAT_UPCALL_MANY || p == DAT_UPCALL_TEARDOWN;
}

DAT_RETURN dfi_evq_set_upcall(struct dfi_evq *q, struct dfi_disp *d, int policy,
			      const DAT_UPCALL_OBJECT *obj, int flag, DAT_COUNT *npending)
{
	DAT_UPCALL_OBJECT up;

	if (!policy_valid(policy)) {
		dfi_reject(DFI_SS_API, "EVD %p: upcall policy %d is not a DAT_UPCALL_POLICY",
			   (void *)q->handle, policy);
		return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	if (flag != DAT_UPCALL_INVOC_NEW && flag != DAT_UPCALL_INVOC_ANY) {
		dfi_reject(DFI_SS_API, "EVD %p: upcall flag %d is neither DAT_UPCALL_INVOC_NEW "
			   "nor DAT_UPCALL_INVOC_ANY", (void *)q->handle, flag);
		return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	}
	if (policy == DAT_UPCALL_TEARDOWN && up_current == q) {
		dfi_reject(DFI_SS_API, "EVD %p: DAT_UPCALL_TEARDOWN from inside its own "
			   "upcall would wait for itself", (void *)q->handle);
		return DFI_ERR(DAT_INVALID_STATE, 0);
	}

	pthread_mutex_lock(&q->lock);
	up = obj ? *obj : q->up;
	if (q->state == DFI_EVQ_FREEING) {
		pthread_mutex_unlock(&q->lock);
		return DFI_ERR(DAT_INVALID_STATE, 0);
	}
	if (policy != DAT_UPCALL_DISABLE && policy != DAT_UPCALL_TEARDOWN) {
		if (!up.upcall_func) {
			pthread_mutex_unlock(&q->lock);
			dfi_reject(DFI_SS_API, "EVD %p: upcall policy %d with no upcall function",
				   (void *)q->handle, policy);
			return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
		}
		if (q->waiter) {
			pthread_mutex_unlock(&q->lock);
			dfi_reject(DFI_SS_API, "EVD %p: a thread is blocked in dat_evd_wait; "
				   "an upcall policy cannot take the EVD from it", (void *)q->handle);
			return DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
		}
		if (!q->disp && !d) {
			pthread_mutex_unlock(&q->lock);
			return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, 0);
		}
		if (!q->disp)
			q->disp = d;
	}
	q->up = up;
	if (policy == DAT_UPCALL_DISABLE || policy == DAT_UPCALL_TEARDOWN) {
		/* Checked under this lock right before every upcall: none
		 * starts after this point. */
		q->up_policy = DAT_UPCALL_DISABLE;
		q->up_fire = false;
		if (policy == DAT_UPCALL_TEARDOWN)
			while (q->up_running)
				pthread_cond_wait(&q->up_idle, &q->lock);
		if (npending)
			*npending = (DAT_COUNT)q->count;
		pthread_mutex_unlock(&q->lock);
		return DAT_SUCCESS;
	}
	/* What the source holds now was there before the arm: read it first,
	 * as old events, then arm.  Everything that enters later is new. */
	if (q->up_policy == DAT_UPCALL_DISABLE)
		fill(q);
	q->up_policy = policy;
	q->up_flag = flag;
	if (flag == DAT_UPCALL_INVOC_ANY && q->count > 0)
		q->up_fire = true;
	if (npending)
		*npending = (DAT_COUNT)q->count;
	/* Notification is set up at the arm (evd-contract 1.3 rule 4): a
	 * completion after this point fires the source's fd. */
	if (q->count == 0)
		arm_source(q);
	up_kick(q);
	pthread_mutex_unlock(&q->lock);
	return DAT_SUCCESS;
}

void dfi_evq_get_upcall(struct dfi_evq *q, int *policy, DAT_UPCALL_OBJECT *obj, int *flag)
{
	pthread_mutex_lock(&q->lock);
	if (policy)
		*policy = q->up_policy;
	if (obj)
		*obj = q->up;
	if (flag)
		*flag = q->up_flag;
	pthread_mutex_unlock(&q->lock);
}

void dfi_evq_dispatch(struct dfi_evq *q, int budget)
{
	pthread_mutex_lock(&q->lock);
	while (budget-- > 0) {
		DAT_UPCALL_OBJECT up;
		DAT_EVENT ev;
		bool notify, more;

		/* The policy check sits right before the call, under the lock
		 * that dfi_evq_set_upcall changes it under. */
		if (!up_active(q) || !q->up_fire)
			break;
		if (q->up_running && q->up_policy != DAT_UPCALL_MANY)
			break;	/* the running instance re-checks when it returns */
		if (q->count == 0)
			fill_to(q, 1);
		if (q->count == 0) {
			q->up_fire = false;	/* drained: the next arrival re-fires */
			break;
		}
		notify = q->up_policy == DAT_UPCALL_NOTIFY;
		if (notify) {
			q->up_fire = false;	/* one doorbell for what is queued */
			more = true;
		} else {
			ring_pop(q, &ev);
			if (q->count == 0)
				fill_to(q, 1);	/* so that more_events is the truth */
			more = q->count > 0;
			if (!more)
				q->up_fire = false;
		}
		up = q->up;
		q->up_running++;
		if (more && q->up_policy == DAT_UPCALL_MANY)
			dfi_disp_enqueue(q->disp, q);	/* another thread may take the next */
		up_current = q;
		pthread_mutex_unlock(&q->lock);

		up.upcall_func(up.instance_data, notify ? NULL : &ev, more ? DAT_TRUE : DAT_FALSE);

		pthread_mutex_lock(&q->lock);
		up_current = NULL;
		q->n_upcalls++;
		if (--q->up_running == 0)
			pthread_cond_broadcast(&q->up_idle);
	}
	if (up_active(q)) {
		if (q->up_fire)
			up_kick(q);	/* budget spent: back of the queue, others go first */
		else if (q->count == 0) {
			arm_source(q);	/* the next completion must raise an arrival */
			up_kick(q);	/* what arm_source read on the way is one */
		}
	}
	pthread_mutex_unlock(&q->lock);
}
