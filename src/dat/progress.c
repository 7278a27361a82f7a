/*
 * The IA's progress thread: libfabric's tcp provider (1.17) moves
 * connections only inside fi_eq_read and data (an RDMA target's side
 * included) only inside CQ calls, and a DAT target may never call the
 * provider while its peer reads or writes its memory (dtest -W spins on a
 * byte).  So one thread per IA epolls the event queue and every DTO EVD's
 * CQ fd:
 *   - EQ ready: CM events become DAT connection and CR events (conn.c);
 *   - CQ ready: dfi_evq_source_notify() - the EVD core wakes its waiter, or
 *     reads completions into free ring slots and notifies the CNO.  Either
 *     way reading the CQ drives the provider's progress.
 * CQ fds are one-shot (EPOLLONESHOT): a CQ is re-armed after each pass,
 * except that one whose EVD ring is full or has a waiter is parked (the
 * waiter polls the fd itself) and re-armed by the 10 ms tick, so a
 * level-triggered fd cannot spin the thread.
 * The private receive CQ of each SRQ EP (srq.c) is watched too, for the
 * EP's life, and never parked: a pass reads it empty and re-arms it.  One
 * that cannot be armed (its data waits for an SRQ buffer) is retried on
 * the tick, and at once when a buffer is posted (the kick fd).
 * The thread starts with the first listener or connect; an IA that only
 * uses the event core has none.
 */
#include "dfi.h"
#include "fabric/fabric.h"
#include "util/param.h"

#include <sched.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define TICK_MS 10

static int arm_cq(struct dfi_ia *ia, struct dfi_evd *evd, int op)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = evd };

	return epoll_ctl(ia->epfd, op, dfi_cq_fd(evd->cq), &ev) ? -errno : 0;
}

/* The epoll data of an SRQ EP's private CQ: the EP with its low bit set
 * (objects are 8-aligned), unlike an EVD (a plain pointer), the EQ (NULL),
 * the stop fd (ia) and the kick fd (&ia->kick_fd). */
static void *rcq_tag(struct dfi_ep *ep)
{
	return (void *)((uintptr_t)ep | 1u);
}

static struct dfi_ep *rcq_ep(void *tag)
{
	return (uintptr_t)tag & 1u ? (struct dfi_ep *)((uintptr_t)tag & ~(uintptr_t)1u) : NULL;
}

static int arm_rcq(struct dfi_ia *ia, struct dfi_ep *ep, int op)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = rcq_tag(ep) };

	return epoll_ctl(ia->epfd, op, dfi_cq_fd(ep->rcq), &ev) ? -errno : 0;
}

static int arm_eq(struct dfi_ia *ia, int op)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = NULL };

	return epoll_ctl(ia->epfd, op, dfi_eq_fd(ia->eq), &ev) ? -errno : 0;
}

static unsigned rcq_gen(struct dfi_ia *ia)
{
	unsigned g;

	pthread_mutex_lock(&ia->lock);
	g = ia->rcq_gen;
	pthread_mutex_unlock(&ia->lock);
	return g;
}

/* A pass over SRQ EPs' private CQs, inside the batch: all those watched, or
 * only the stalled ones.  An EP is used only while no SRQ EP has left the
 * epoll set since `gen`: one freed by a callback of this very thread (a
 * CNO agent) would not have waited for the batch.  Returns true if one
 * stays stalled or the pass was cut short (retry on the tick). */
static bool poll_rcqs(struct dfi_ia *ia, bool stalled_only)
{
	struct dfi_ep *few[64], **eps = few;
	size_t n = 0, cap = 64;
	unsigned gen;
	bool again = false;

	pthread_mutex_lock(&ia->lock);
	gen = ia->rcq_gen;
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs; o = o->next) {
		struct dfi_ep *ep = (struct dfi_ep *)o;

		if (o->type != DFI_T_EP || !ep->rcq_watched || (stalled_only && !ep->rcq_stalled))
			continue;
		if (n == cap) {
			struct dfi_ep **more = malloc(2 * cap * sizeof(*more));

			if (!more) {
				again = true;	/* the rest on the next tick */
				break;
			}
			memcpy(more, eps, n * sizeof(*more));
			if (eps != few)
				free(eps);
			eps = more;
			cap *= 2;
		}
		eps[n++] = ep;
	}
	pthread_mutex_unlock(&ia->lock);
	for (size_t i = 0; i < n; i++) {
		if (rcq_gen(ia) != gen) {
			again = true;
			break;
		}
		if (dfi_srq_ep_progress(eps[i]))
			again = true;
	}
	if (eps != few)
		free(eps);
	return again;
}

/* An EQ still readable after rounds of reading and try-waiting: libfabric
 * 1.17 tcp keeps connecting sockets in the EQ's set, and one that only CQ
 * progress would consume keeps the fd readable.  So a pass over every CQ
 * (inside the batch: no CQ is closed under it).  (The EQ's own signal
 * stays set after fi_eq_read until a try-wait: that, not data, is why the
 * fd once looked readable for ever.) */
static void progress_all_cqs(struct dfi_ia *ia)
{
	struct dfi_evd *evds[64];
	int n = 0;

	pthread_mutex_lock(&ia->lock);
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs && n < 64; o = o->next) {
		struct dfi_evd *evd = (struct dfi_evd *)o;

		/* not one whose CQ is closing: its closer waits for the batch
		 * that was running, not for this one */
		if (o->type == DFI_T_EVD && evd->cq && !evd->unwatched)
			evds[n++] = evd;
	}
	pthread_mutex_unlock(&ia->lock);
	for (int i = 0; i < n; i++)
		dfi_evq_source_notify(&evds[i]->q);
	poll_rcqs(ia, false);
}

/* Tick: give parked CQs back to epoll (IA lock held). */
static void unpark(struct dfi_ia *ia)
{
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs; o = o->next) {
		struct dfi_evd *evd = (struct dfi_evd *)o;

		if (o->type == DFI_T_EVD && evd->parked && evd->cq) {
			evd->parked = false;
			arm_cq(ia, evd, EPOLL_CTL_MOD);
		}
	}
}

static void batch_mark(struct dfi_ia *ia)
{
	pthread_mutex_lock(&ia->lock);
	ia->batch++;
	if (!(ia->batch & 1))
		pthread_cond_broadcast(&ia->batch_done);
	pthread_mutex_unlock(&ia->lock);
}

static void *progress_main(void *arg)
{
	struct dfi_ia *ia = arg;
	bool ticking = false, rcq_retry = false;
	uint64_t tick_at = 0;		/* when ticking: the next tick (CLOCK_MONOTONIC ns) */

	if (dfi_param_int(DFI_P_PROGRESS_RT)) {
		struct sched_param sp = { .sched_priority = 1 };
		int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);

		if (rc)
			dfi_info(DFI_SS_FABRIC, "progress thread stays SCHED_OTHER: %s "
				 "(set DAPL_OFI_PROGRESS_RT=0 to silence)", strerror(rc));
	}

	for (;;) {
		struct epoll_event evs[32];
		unsigned gen = rcq_gen(ia);
		int n, timeout = -1;
		bool rescan;

		/* The tick is a deadline, not a quiet spell: a steady stream of
		 * other events must not starve a parked CQ or a stalled EP. */
		if (ticking) {
			uint64_t now = dfi_now_ns();

			if (!tick_at)
				tick_at = now + TICK_MS * UINT64_C(1000000);
			timeout = tick_at > now ? (int)((tick_at - now + 999999) / 1000000) : 0;
		}
		n = epoll_wait(ia->epfd, evs, 32, timeout);
		if (n < 0 && errno != EINTR) {
			dfi_err(DFI_SS_FABRIC, "progress: epoll_wait: %m");
			break;
		}
		if (ticking && dfi_now_ns() >= tick_at) {
			pthread_mutex_lock(&ia->lock);
			unpark(ia);
			pthread_mutex_unlock(&ia->lock);
			arm_eq(ia, EPOLL_CTL_MOD);
			/* stalled SRQ EPs (or all, after a cut-short pass) */
			batch_mark(ia);
			ticking = poll_rcqs(ia, !rcq_retry);
			batch_mark(ia);
			rcq_retry = ticking;
			if (dfi_connect_timeouts(ia))
				ticking = true;		/* a timed connect pends */
			tick_at = 0;
		}
		if (n <= 0)
			continue;
		/* Between the two marks an EVD's CQ is not closed under us
		 * (dfi_progress_unwatch_cq waits for the batch to end), nor an
		 * SRQ EP's (dfi_progress_unwatch_rcq).  An SRQ EP freed before
		 * the batch began may still have an event in evs[]: then they
		 * are all skipped, and every watched one polled instead. */
		batch_mark(ia);
		rescan = rcq_gen(ia) != gen;
		for (int i = 0; i < n; i++) {
			struct dfi_evd *evd = evs[i].data.ptr;
			struct dfi_ep *ep = rcq_ep(evs[i].data.ptr);
			bool park;

			if (ep) {
				rescan = rescan || rcq_gen(ia) != gen;
				if (!rescan && dfi_srq_ep_progress(ep))
					ticking = true;
				continue;
			}
			if (evd == (void *)&ia->kick_fd) {
				uint64_t v;

				if (read(ia->kick_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					dfi_err(DFI_SS_FABRIC, "progress: kick read: %m");
				if (poll_rcqs(ia, true))
					ticking = true;
				/* a kick also announces a connect with a timeout */
				if (dfi_connect_timeouts(ia))
					ticking = true;
				continue;
			}

			if (evd == NULL) {
				/* CM events, then a try-wait: libfabric's EQ
				 * signal stays set after fi_eq_read (the fd would
				 * stay readable for ever); a try-wait clears it,
				 * or reports what came meanwhile.  A wake-up with
				 * no event is a step of a connection's set-up
				 * inside libfabric. */
				int r, rounds = 0;

				do {
					dfi_cm_handle(ia);
					r = dfi_eq_trywait(ia->eq);
				} while (r == -EAGAIN && ++rounds < 4);
				if (r == 0) {
					arm_eq(ia, EPOLL_CTL_MOD);
				} else {
					/* still pending (a socket of the EQ's set
					 * that stays readable, or a failing
					 * try-wait): CQ progress may consume it;
					 * the EQ again on the tick */
					progress_all_cqs(ia);
					ticking = true;
				}
				continue;
			}
			if (evd == (void *)ia) {
				batch_mark(ia);
				return NULL;	/* stop_fd */
			}
			dfi_evq_source_notify(&evd->q);
			pthread_mutex_lock(&evd->q.lock);
			park = evd->q.waiter || evd->q.count == evd->q.qlen;
			pthread_mutex_unlock(&evd->q.lock);
			pthread_mutex_lock(&ia->lock);
			if (evd->cq) {
				if (park)
					evd->parked = ticking = true;
				else
					arm_cq(ia, evd, EPOLL_CTL_MOD);
			}
			pthread_mutex_unlock(&ia->lock);
		}
		if (rescan && poll_rcqs(ia, false))
			ticking = rcq_retry = true;
		batch_mark(ia);
	}
	return NULL;
}

int dfi_progress_start(struct dfi_ia *ia)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int rc = 0;

	pthread_mutex_lock(&ia->lock);
	if (ia->progress_on)
		goto out;
	rc = dfi_eq_open(ia->fab, &ia->eq);
	if (rc)
		goto out;
	ia->epfd = epoll_create1(EPOLL_CLOEXEC);
	ia->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ia->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ia->epfd < 0 || ia->stop_fd < 0 || ia->kick_fd < 0) {
		rc = -errno;
		goto err;
	}
	if ((rc = arm_eq(ia, EPOLL_CTL_ADD)))
		goto err;
	ev.data.ptr = ia;
	if (epoll_ctl(ia->epfd, EPOLL_CTL_ADD, ia->stop_fd, &ev)) {
		rc = -errno;
		goto err;
	}
	ev.data.ptr = &ia->kick_fd;
	if (epoll_ctl(ia->epfd, EPOLL_CTL_ADD, ia->kick_fd, &ev)) {
		rc = -errno;
		goto err;
	}
	rc = -pthread_create(&ia->progress, NULL, progress_main, ia);
	if (rc)
		goto err;
	ia->progress_on = true;
	goto out;
err:
	dfi_err(DFI_SS_FABRIC, "IA '%s': cannot start the progress thread: %s",
		ia->prov->info.ia_name, strerror(-rc));
	if (ia->epfd >= 0)
		close(ia->epfd);
	if (ia->stop_fd >= 0)
		close(ia->stop_fd);
	if (ia->kick_fd >= 0)
		close(ia->kick_fd);
	ia->epfd = ia->stop_fd = ia->kick_fd = -1;
	dfi_eq_close(ia->eq);
	ia->eq = NULL;
out:
	pthread_mutex_unlock(&ia->lock);
	return rc;
}

void dfi_progress_stop(struct dfi_ia *ia)
{
	uint64_t one = 1;

	if (!ia->progress_on)
		return;
	if (write(ia->stop_fd, &one, sizeof(one)) < 0)
		dfi_err(DFI_SS_FABRIC, "progress: stop: %m");
	pthread_join(ia->progress, NULL);
	close(ia->epfd);
	close(ia->stop_fd);
	close(ia->kick_fd);
	dfi_eq_close(ia->eq);
	ia->eq = NULL;
	ia->progress_on = false;
}

/* IA lock held (called from dfi_evd_cq). */
int dfi_progress_watch_cq(struct dfi_ia *ia, struct dfi_evd *evd)
{
	return ia->progress_on ? arm_cq(ia, evd, EPOLL_CTL_ADD) : -ENOTCONN;
}

/* IA lock held.  Once it returns the thread no longer touches evd. */
void dfi_progress_unwatch_cq(struct dfi_ia *ia, struct dfi_evd *evd)
{
	unsigned b;

	if (!ia->progress_on || !evd->cq)
		return;
	epoll_ctl(ia->epfd, EPOLL_CTL_DEL, dfi_cq_fd(evd->cq), NULL);
	evd->parked = false;
	evd->unwatched = true;		/* no later batch picks it up */
	if (pthread_equal(pthread_self(), ia->progress))
		return;		/* freed from a callback of the thread itself */
	b = ia->batch;
	while ((b & 1) && ia->batch == b)
		pthread_cond_wait(&ia->batch_done, &ia->lock);
}

/* IA lock held (dfi_srq_ep_open_cq, under cm_lock). */
int dfi_progress_watch_rcq(struct dfi_ia *ia, struct dfi_ep *ep)
{
	int rc;

	if (!ia->progress_on)
		return -ENOTCONN;
	rc = arm_rcq(ia, ep, EPOLL_CTL_ADD);
	if (!rc)
		ep->rcq_watched = true;
	return rc;
}

/* IA lock held.  Once it returns the thread no longer touches ep. */
void dfi_progress_unwatch_rcq(struct dfi_ia *ia, struct dfi_ep *ep)
{
	unsigned b;

	if (!ep->rcq_watched)
		return;
	epoll_ctl(ia->epfd, EPOLL_CTL_DEL, dfi_cq_fd(ep->rcq), NULL);
	ep->rcq_watched = false;
	ia->rcq_gen++;
	if (ep->rcq_stalled) {
		ep->rcq_stalled = false;
		pthread_mutex_lock(&ep->srq->lock);
		ep->srq->n_stalled--;
		pthread_mutex_unlock(&ep->srq->lock);
	}
	if (pthread_equal(pthread_self(), ia->progress))
		return;		/* freed from a callback of the thread itself */
	b = ia->batch;
	while ((b & 1) && ia->batch == b)
		pthread_cond_wait(&ia->batch_done, &ia->lock);
}

/* IA lock held. */
static void set_stalled(struct dfi_ep *ep, bool stalled)
{
	if (ep->rcq_watched && ep->rcq_stalled != stalled) {
		ep->rcq_stalled = stalled;
		pthread_mutex_lock(&ep->srq->lock);
		ep->srq->n_stalled += stalled ? 1 : -1;
		pthread_mutex_unlock(&ep->srq->lock);
	}
}

void dfi_progress_mark_stalled(struct dfi_ep *ep, bool stalled)
{
	struct dfi_ia *ia = ep->hdr.ia;

	pthread_mutex_lock(&ia->lock);
	set_stalled(ep, stalled);
	pthread_mutex_unlock(&ia->lock);
}

/* Progress thread, after a pass over ep's private CQ (srq.c), before
 * anything that may run user code. */
void dfi_progress_rearm_rcq(struct dfi_ep *ep, bool stalled)
{
	struct dfi_ia *ia = ep->hdr.ia;

	pthread_mutex_lock(&ia->lock);
	set_stalled(ep, stalled);
	if (ep->rcq_watched)
		arm_rcq(ia, ep, EPOLL_CTL_MOD);
	pthread_mutex_unlock(&ia->lock);
}

void dfi_progress_kick(struct dfi_ia *ia)
{
	uint64_t one = 1;
	bool on;

	pthread_mutex_lock(&ia->lock);
	on = ia->progress_on;
	pthread_mutex_unlock(&ia->lock);
	if (on && write(ia->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		dfi_err(DFI_SS_FABRIC, "progress: kick: %m");
}
