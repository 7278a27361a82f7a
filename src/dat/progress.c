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
 * The thread starts with the first listener or connect; an IA that only
 * uses the event core has none.
 */
#include "dfi.h"
#include "fabric/fabric.h"
#include "util/param.h"

#include <sched.h>

#include <errno.h>
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

static int arm_eq(struct dfi_ia *ia, int op)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = NULL };

	return epoll_ctl(ia->epfd, op, dfi_eq_fd(ia->eq), &ev) ? -errno : 0;
}

/* libfabric 1.17 tcp keeps a connected socket in the EQ's wait set too: the
 * EQ fd turns readable when data arrives, and only CQ progress consumes it.
 * So an EQ wake-up without a CM event gets a progress pass over every CQ
 * (inside the batch: no CQ is closed under it). */
static void progress_all_cqs(struct dfi_ia *ia)
{
	struct dfi_evd *evds[64];
	int n = 0;

	pthread_mutex_lock(&ia->lock);
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs && n < 64; o = o->next)
		if (o->type == DFI_T_EVD && ((struct dfi_evd *)o)->cq)
			evds[n++] = (struct dfi_evd *)o;
	pthread_mutex_unlock(&ia->lock);
	for (int i = 0; i < n; i++)
		dfi_evq_source_notify(&evds[i]->q);
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
	bool ticking = false;

	if (dfi_param_int(DFI_P_PROGRESS_RT)) {
		struct sched_param sp = { .sched_priority = 1 };
		int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);

		if (rc)
			dfi_info(DFI_SS_FABRIC, "progress thread stays SCHED_OTHER: %s "
				 "(set DAPL_OFI_PROGRESS_RT=0 to silence)", strerror(rc));
	}

	for (;;) {
		struct epoll_event evs[32];
		int n = epoll_wait(ia->epfd, evs, 32, ticking ? TICK_MS : -1);

		if (n < 0 && errno != EINTR) {
			dfi_err(DFI_SS_FABRIC, "progress: epoll_wait: %m");
			break;
		}
		if (n <= 0) {
			pthread_mutex_lock(&ia->lock);
			unpark(ia);
			pthread_mutex_unlock(&ia->lock);
			arm_eq(ia, EPOLL_CTL_MOD);
			ticking = false;
			continue;
		}
		/* Between the two marks an EVD's CQ is not closed under us
		 * (dfi_progress_unwatch_cq waits for the batch to end). */
		batch_mark(ia);
		for (int i = 0; i < n; i++) {
			struct dfi_evd *evd = evs[i].data.ptr;
			bool park;

			if (evd == NULL) {
				/* A wake-up with no CM event is data for a CQ; if
				 * that pass moves nothing (a stalled stream), the
				 * EQ sleeps until the tick instead of spinning. */
				if (dfi_cm_handle(ia) > 0) {
					arm_eq(ia, EPOLL_CTL_MOD);
				} else {
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
	if (ia->epfd < 0 || ia->stop_fd < 0) {
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
	ia->epfd = ia->stop_fd = -1;
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
	if (pthread_equal(pthread_self(), ia->progress))
		return;		/* freed from a callback of the thread itself */
	b = ia->batch;
	while ((b & 1) && ia->batch == b)
		pthread_cond_wait(&ia->batch_done, &ia->lock);
}
