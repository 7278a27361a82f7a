/*
 * The IA's progress thread: libfabric's tcp provider (1.17) moves
 * connections only inside fi_eq_read and data (an RDMA target's side
 * included) only inside CQ calls, and a DAT target may never call the
 * provider while its peer reads or writes its memory (dtest -W spins on a
 * byte).  So one thread per IA epolls the event queue and every DTO EVD's
 * CQ fd:
 *   - EQ ready: CM events become DAT connection and CR events (conn.c),
 *     unless a consumer that polls a CR or connection EVD reads the EQ
 *     itself (dfi_cm_pull): within the lease (below) of its last read, or
 *     of its last connect, accept or disconnect, the EQ is left alone, as
 *     a CQ is (eq_leased);
 *   - CQ ready: dfi_evq_source_notify_irq() - the EVD core wakes its
 *     waiter, or reads completions into free ring slots and notifies the
 *     CNO, or runs the upcalls due right here (kDAT's interrupt context).
 *     Either way reading the CQ drives the provider's progress.
 * CQ fds are one-shot (EPOLLONESHOT), and the thread stays off a CQ that
 * its consumer drives itself - the lease (DAPL_OFI_PROGRESS_LEASE_US, L,
 * default 50 us).  A CQ whose EVD has a waiter (it sleeps on the fd
 * itself), or whose consumer polls it - calls dequeue, wait or a post
 * feeding it at least every 2 us on average (consumer_polls), the last
 * within L, as seen by this thread's looks - on this EVD or on the other
 * DTO EVD of the same EPs, since reading either CQ moves those EPs, or a
 * waiter on that other EVD - gets no pass and stays parked, out of the
 * epoll set (park_cq says why not merely disarmed), looked at again after
 * a backoff: L, doubling up to the 10 ms tick while the consumer stays
 * busy.  A consumer that calls less often (a post and a reap per message,
 * then a spin on memory) does not drive it: the CQ is watched.  After a
 * pass a CQ is parked for L too, when its consumer polls or the passes
 * come closer together than they last (a stream): at most one pass per
 * L, so a consumer held up for a while (descheduled on 2 CPUs, or pinned
 * to this SCHED_FIFO thread's CPU) does not turn this thread into its
 * stream's engine, taking every completion's wake-up and locks.  If the
 * consumer was at work within the tick, L counts from the pass's end and
 * no lease is looked at before the thread has slept L: the consumer gets
 * the CPU back between two passes (a passive target's passes follow one
 * another).
 * Exceptions: an EVD with an enabled CNO or an upcall policy
 * is re-armed after each pass and never parked by its consumer's calls
 * (its consumer relies on this thread's notification); a full ring parks
 * (nothing could be read).  A polling or waiting consumer thus pays for no
 * progress-thread wake-up per completion - on 2 CPUs each one preempted
 * the poller - while a passive RDMA target (dtest -W spins on memory and
 * calls nothing) is driven again within about L of its last call, and one
 * that calls only now and then is driven as its data arrives.  L = 0
 * keeps every CQ watched (a pass per completion: the lowest latency for a
 * target that only spins on memory, at its consumers' expense).
 * The private receive CQ of each SRQ EP (srq.c) is watched too, for the
 * EP's life, and never parked: a pass reads it empty and re-arms it.  One
 * that cannot be armed (its data waits for an SRQ buffer) is retried on
 * the tick, and at once when a buffer is posted (the kick fd).
 * The thread starts with the first listener or connect; an IA that only
 * uses the event core has none.
 * A provider whose wait fds never settle (libfabric 1.17 net: fi_trywait
 * returns 0 without clearing the fds' signals, so an armed fd is readable
 * at once with nothing to read) would keep this thread spinning - 95 % of
 * a CPU at SCHED_FIFO, its consumers starved for up to a second by the
 * kernel's RT throttling.  FUTILE_WAKES batches in a row in which the
 * EQ's armed fd was readable again with no CM event behind it (a CQ's
 * proves nothing: an RDMA target's pass places data and reports no
 * event, and a stream keeps the fd readable) switch the IA to polling
 * for good (poll_step, go_polling): the fds leave the epoll set, the
 * thread passes over the EQ and its unparked CQs after a sleep of an
 * eighth of the time since a step last moved something, 10 us to 1 ms
 * (dfi_poll_sleep_ns), and runs at SCHED_OTHER.  Under steady traffic
 * every batch moves something and that switch never comes: on net (the
 * fabric's `unsettled`) the thread never runs at SCHED_FIFO, or it kept a
 * CPU re-arming fds that were readable at once (30 000 epoll_ctl a
 * second) and starved its consumer (the soak's server stopped answering).
 */
#include "dfi.h"
#include "fabric/fabric.h"
#include "util/param.h"

#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define TICK_MS 10
#define LEASE_MAX_NS	(TICK_MS * UINT64_C(1000000))
#define PARK_MIN_NS	(UINT64_C(1000000))	/* a waiter's or a full ring's, with L = 0 */
#define LEASE_EQ_NS	(50 * UINT64_C(1000))	/* the EQ's first backoff, if it stays readable */
#define POLL_GAP_NS	(UINT64_C(2000))	/* a polling consumer calls at least this often */
#define RATE_MIN_NS	(4 * POLL_GAP_NS)	/* the shortest window a rate is taken over */
#define FUTILE_WAKES	100	/* batches in a row that found an armed fd readable for nothing */

static int arm_cq(struct dfi_ia *ia, struct dfi_evd *evd, int op)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = evd };

	dfi_cq_watch(evd->cq, true);	/* before the fd is brought up to date */
	if (ia->polling)
		return 0;		/* a step passes over it (poll_step) */
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

	dfi_cq_watch(ep->rcq, true);
	if (ia->polling)
		return 0;		/* each step reads every watched one */
	return epoll_ctl(ia->epfd, op, dfi_cq_fd(ep->rcq), &ev) ? -errno : 0;
}

static int arm_eq(struct dfi_ia *ia, int op)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = NULL };

	if (ia->polling)
		return 0;
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

/* Inside the batch: arm every EVD's CQ that is watched and not parked (a
 * batch whose EVD events were skipped left theirs disarmed). */
static void rearm_cqs(struct dfi_ia *ia)
{
	pthread_mutex_lock(&ia->lock);
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs; o = o->next) {
		struct dfi_evd *evd = (struct dfi_evd *)o;

		if (o->type == DFI_T_EVD && evd->cq && !evd->unwatched && !evd->parked)
			arm_cq(ia, evd, EPOLL_CTL_MOD);
	}
	pthread_mutex_unlock(&ia->lock);
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

/* Whether SRQ EPs' private CQs are watched: then the thread ticks, and
 * each tick reads all of them.  An EP whose message waits for an SRQ
 * buffer is marked stalled only when libfabric keeps its socket readable;
 * when libfabric has already pulled the message in (its prefetch buffer),
 * the try-wait says "armed", nothing will ever fire, and only a read of
 * that CQ delivers the message once a buffer is posted.  The EQ's fd,
 * readable for ever before c1e7ebf, used to hide this: it made the thread
 * read every CQ at every tick. */
static bool rcqs_watched(struct dfi_ia *ia)
{
	bool r;

	pthread_mutex_lock(&ia->lock);
	r = ia->n_rcq_watched > 0;
	pthread_mutex_unlock(&ia->lock);
	return r;
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
	unsigned gen;
	int n = 0;

	pthread_mutex_lock(&ia->lock);
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs && n < 64; o = o->next) {
		struct dfi_evd *evd = (struct dfi_evd *)o;

		/* not one whose CQ is closing: its closer waits for the batch
		 * that was running, not for this one */
		if (o->type == DFI_T_EVD && evd->cq && !evd->unwatched)
			evds[n++] = evd;
	}
	gen = ia->cq_gen;
	pthread_mutex_unlock(&ia->lock);
	for (int i = 0; i < n; i++) {
		bool gone;

		/* a CNO agent run by an earlier pass may have freed it */
		pthread_mutex_lock(&ia->lock);
		gone = ia->cq_gen != gen;
		pthread_mutex_unlock(&ia->lock);
		if (gone)
			break;
		dfi_evq_source_notify_irq(&evds[i]->q);
	}
	poll_rcqs(ia, false);
}

/* The EVD whose reads drive evd's EPs too: its partner, but not for a
 * receive EVD of an IA whose emulated atomics arrive on receive CQs
 * (dfi_progress_atomics): a read of the request CQ moves those EPs and
 * leaves the atomics' completions where nobody takes them. */
static struct dfi_evd *driver_of(const struct dfi_evd *evd)
{
	if (evd->receives &&
	    atomic_load_explicit(&evd->hdr.ia->atomics_on, memory_order_relaxed))
		return NULL;
	return evd->partner;
}

/* Whether evd's consumer polls its CQ (IA lock held): found inside a call
 * on evd or its partner at a look, or, in the last window with calls, a
 * wait or at least one call per POLL_GAP_NS; it stops polling after two
 * slow windows in a row found it outside.  A poller's own reads move its
 * EPs within a few us, and so do a waiter's wake-ups (one that posts, then
 * waits, makes few calls) and a streamer's long calls (each copies data in
 * or out).  A consumer that calls once per message and then spins on memory
 * (MPI one-sided, pscom's eager rings: a post and a reap per round trip)
 * moves nothing while it spins, and an incoming RDMA write would wait for
 * this thread's next look - a lease and its backoff, 50 us to 10 ms - where
 * an IB target's HCA places it at once.  A window without calls keeps the
 * verdict: a poller held up (descheduled, behind a lock) makes none, and a
 * consumer that makes none at all is not seen within the lease anyway.  A
 * window shorter than RATE_MIN_NS keeps it too. */
static void consumer_polls(struct dfi_evd *evd, uint32_t calls, uint64_t now, bool look)
{
	struct dfi_evd *partner = driver_of(evd);
	uint32_t waits = dfi_evq_waits(&evd->q);

	if (partner)
		waits += dfi_evq_waits(&partner->q);
	if (!evd->rate_at || (look && (dfi_evq_inside(&evd->q) ||
				       (partner && dfi_evq_inside(&partner->q))))) {
		/* inside a call at a look: a streamer's calls are few but
		 * long (libfabric copies the data inside them).  Not at an
		 * fd's wake-up: the consumer's own post fires its CQ's fd,
		 * and finds it inside that post. */
		evd->polls = true;
		evd->slow = 0;
	} else if (now - evd->rate_at < RATE_MIN_NS) {
		return;
	} else if (calls != evd->rate_calls) {
		bool fast = waits != evd->rate_waits ||
			    (uint64_t)(calls - evd->rate_calls) * POLL_GAP_NS >= now - evd->rate_at;

		evd->slow = fast ? 0 : evd->slow < 2 ? evd->slow + 1 : 2;
		if (fast || evd->slow == 2)
			evd->polls = fast;
	}
	evd->rate_calls = calls;
	evd->rate_waits = waits;
	evd->rate_at = now;
}

/* Whether the consumer drives evd's CQ itself: it waits on it, or polls it
 * (consumer_polls) and made calls on it (or on the partner EVD, whose CQ
 * reads move the same EPs) that this thread saw move within the last lease,
 * or waits on the partner.  Counting calls keeps clocks off the consumer's
 * path; the window keeps a consumer that is only held up (descheduled, or
 * behind a lock) counted as active.  A waiter on the partner makes no calls
 * while it sleeps, but the partner's CQ fd holds the same EPs' sockets: the
 * traffic that would wake this thread for evd wakes that waiter, whose
 * reads move those EPs (on an RDMA target, a waiter for receives and this
 * thread on the request CQ both woke for every incoming write).  IA lock
 * held. */
static bool consumer_drives(struct dfi_ia *ia, struct dfi_evd *evd, uint64_t now, bool look)
{
	struct dfi_evd *partner = driver_of(evd);
	uint32_t c = dfi_evq_calls(&evd->q);
	bool active;

	if (partner)
		c += dfi_evq_calls(&partner->q);
	if (c != evd->calls_seen) {
		evd->calls_seen = c;
		evd->calls_moved = now;
	}
	consumer_polls(evd, c, now, look);
	active = ia->lease_ns && evd->polls && evd->calls_moved &&
		 now - evd->calls_moved < ia->lease_ns;
	if (!active && ia->lease_ns && partner)
		active = dfi_evq_waited(&partner->q);
	return dfi_evq_consumer_drives(&evd->q, active);
}

/* Consumers' reads of the EQ, and their connects, accepts and disconnects,
 * as this thread last saw them move. */
struct pull_seen {
	unsigned pulls, touches;
	uint64_t pulled, touched;	/* when they last moved (ns; 0: never) */
};

/* Whether a consumer drives the EQ itself: one that polls a CR or
 * connection EVD read it within the last lease (dfi_cm_pull), or, having
 * polled within the tick, made a connect, accept or disconnect within the
 * last lease - it will poll for the outcome (a connect storm would
 * otherwise hand the EQ to this thread between two polls, and the two
 * would contend for cm_lock).  A consumer that waits instead never reads
 * the EQ, and this thread serves it. */
static bool eq_leased(struct dfi_ia *ia, uint64_t now, struct pull_seen *seen)
{
	unsigned p = atomic_load_explicit(&ia->eq_pulls, memory_order_relaxed);
	unsigned t = atomic_load_explicit(&ia->eq_touches, memory_order_relaxed);

	if (p != seen->pulls) {
		seen->pulls = p;
		seen->pulled = now;
	}
	if (t != seen->touches) {
		seen->touches = t;
		seen->touched = now;
	}
	if (!ia->lease_ns || !seen->pulled)
		return false;
	return now - seen->pulled < ia->lease_ns ||
	       (now - seen->pulled < LEASE_MAX_NS && now - seen->touched < ia->lease_ns);
}

/* The next step of a backoff: `first`, then doubling up to the tick. */
static uint64_t backoff(uint64_t step, uint64_t first)
{
	return !step ? first : step >= LEASE_MAX_NS / 2 ? LEASE_MAX_NS : 2 * step;
}

/* Keep evd's CQ fd out of epoll (IA lock held); the backoff doubles while
 * the consumer stays busy.  Returns when to look again.  Out of the set,
 * not only disarmed: the CQ's fd is itself an epoll set of the EP sockets,
 * and while it sits in this thread's set, disarmed or not, every packet
 * for those EPs also runs this set's wake-up callback in the kernel, on
 * the delivery path (64 B ping-pong, polling: 0.5 us one way, 5 %). */
static uint64_t park_cq(struct dfi_ia *ia, struct dfi_evd *evd, uint64_t now)
{
	uint64_t first = ia->lease_ns ? ia->lease_ns : PARK_MIN_NS;

	evd->park_step = backoff(evd->parked ? evd->park_step : 0, first);
	if (!evd->parked) {
		ia->nparked++;
		if (!ia->polling)	/* else it is not in the set */
			epoll_ctl(ia->epfd, EPOLL_CTL_DEL, dfi_cq_fd(evd->cq), NULL);
		dfi_cq_watch(evd->cq, false);
	} else if (evd->park_step >= 4 * first) {
		/* parked a third time in a row: its consumer keeps at it, and
		 * a poll-fd CQ's mirror need not follow its sockets meanwhile
		 * (unless a waiter sleeps on it) */
		dfi_cq_quiet(evd->cq);
	}
	evd->parked = true;
	evd->park_until = now + evd->park_step;
	return evd->park_until;
}

/* A parked CQ's lease is due (IA lock held): park again, or watch the fd
 * again - already readable if completions came meanwhile, so the pass
 * follows at once.  Returns when to look again (0: watched). */
static uint64_t lease(struct dfi_ia *ia, struct dfi_evd *evd, uint64_t now)
{
	if (consumer_drives(ia, evd, now, true))
		return park_cq(ia, evd, now);
	evd->parked = false;
	ia->nparked--;
	arm_cq(ia, evd, EPOLL_CTL_ADD);
	return 0;
}

static uint64_t earliest(uint64_t a, uint64_t b)
{
	return !a ? b : !b ? a : a < b ? a : b;
}

/* Leases due by now: look at their consumers again.  Returns the next
 * lease due (0: none parked).  The object list runs newest first, and
 * EVDs are usually created before the EPs that feed them: the walk starts
 * at the oldest and stops once it has met every parked EVD, so a look
 * costs the EVDs, not the thousand idle EPs after them. */
static uint64_t leases_due(struct dfi_ia *ia, uint64_t now)
{
	uint64_t next = 0;
	int left;

	pthread_mutex_lock(&ia->lock);
	left = ia->nparked;
	for (struct dfi_obj *o = ia->objs.prev; o != &ia->objs && left > 0; o = o->prev) {
		struct dfi_evd *evd = (struct dfi_evd *)o;

		if (o->type != DFI_T_EVD || !evd->parked)
			continue;
		left--;
		next = earliest(next, evd->park_until > now ? evd->park_until :
				lease(ia, evd, now));
	}
	pthread_mutex_unlock(&ia->lock);
	return next;
}

static void batch_mark(struct dfi_ia *ia)
{
	pthread_mutex_lock(&ia->lock);
	ia->batch++;
	if (!(ia->batch & 1))
		pthread_cond_broadcast(&ia->batch_done);
	pthread_mutex_unlock(&ia->lock);
}

/* IA lock held: until the thread's batch under way, if any, is over. */
static void batch_wait(struct dfi_ia *ia)
{
	unsigned b = ia->batch;

	if (pthread_equal(pthread_self(), ia->progress))
		return;		/* freed from a callback of the thread itself */
	while ((b & 1) && ia->batch == b)
		pthread_cond_wait(&ia->batch_done, &ia->lock);
}

/* A polled IA's SRQs, inside the batch (dfi_progress_unpull_srq waits for
 * it).  An SRQ's shared endpoint is otherwise read only by the pulls of
 * its EPs' private CQs: with none attached, a message for an ended
 * connection stays unread, and on a provider whose target progress
 * answers the sender (rxd, docs/rdm.md) the sender waits for ever. */
static void pull_srqs(struct dfi_ia *ia)
{
	struct dfi_srx *srx[DFI_MAX_SRQS];
	int n = 0;

	pthread_mutex_lock(&ia->lock);
	if (!ia->n_srq) {
		pthread_mutex_unlock(&ia->lock);
		return;
	}
	ia->batch++;		/* the batch opens (batch_mark), srx[] inside it */
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs && n < DFI_MAX_SRQS; o = o->next)
		if (o->type == DFI_T_SRQ && ((struct dfi_srq *)o)->pulled)
			srx[n++] = ((struct dfi_srq *)o)->srx;
	pthread_mutex_unlock(&ia->lock);
	for (int i = 0; i < n; i++)
		dfi_srx_progress(srx[i]);
	batch_mark(ia);		/* and closes */
}

/* epoll_wait until an event or the deadline `at` (ns, 0: none), with
 * microsecond resolution where the kernel has epoll_pwait2. */
static int wait_events(int epfd, struct epoll_event *evs, int max, uint64_t at, uint64_t now)
{
	static _Atomic int no_pwait2;
	uint64_t left = at > now ? at - now : 0;
	struct timespec ts = { (time_t)(left / 1000000000u), (long)(left % 1000000000u) };
	int n;

	if (!at)
		return epoll_wait(epfd, evs, max, -1);
	if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
		n = epoll_pwait2(epfd, evs, max, &ts, NULL);
		if (n >= 0 || errno != ENOSYS)
			return n;
		atomic_store_explicit(&no_pwait2, 1, memory_order_relaxed);
	}
	return epoll_wait(epfd, evs, max, (int)((left + 999999) / 1000000));
}

/* An fd readable right now (a pass found nothing behind it, and it was
 * armed: a wait object that does not settle, unless data just came). */
static bool readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) > 0;
}

/* Futile wake-ups because the process has no descriptor left: libfabric
 * tcp's listener cannot accept() the connection waiting on it, and its
 * socket stays readable.  That is no provider whose fds never settle
 * (go_polling would poll the IA for good): the thread sleeps a tick per
 * such wake-up, says so once, and takes the connection in when
 * descriptors are back. */
static bool fds_starved(struct dfi_ia *ia, bool *said)
{
	struct timespec ts = { 0, TICK_MS * 1000000L };

	if (!dfi_fds_gone())
		return false;
	if (!*said)
		dfi_err(DFI_SS_CM, "IA '%s': no file descriptor left: connections waiting "
			"to be taken in (and other events) wait until there are",
			ia->prov->info.ia_name);
	*said = true;
	nanosleep(&ts, NULL);
	return true;
}

/* The provider's wait fds never settle: take them out of the epoll set,
 * poll from now on (poll_step), and never at real-time priority. */
static void go_polling(struct dfi_ia *ia)
{
	struct sched_param sp = { .sched_priority = 0 };
	int policy;

	pthread_mutex_lock(&ia->lock);
	ia->polling = true;
	epoll_ctl(ia->epfd, EPOLL_CTL_DEL, dfi_eq_fd(ia->eq), NULL);
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs; o = o->next) {
		struct dfi_evd *evd = (struct dfi_evd *)o;
		struct dfi_ep *ep = (struct dfi_ep *)o;

		/* a parked one is out already, an unwatched one is closing */
		if (o->type == DFI_T_EVD && evd->cq && !evd->unwatched && !evd->parked)
			epoll_ctl(ia->epfd, EPOLL_CTL_DEL, dfi_cq_fd(evd->cq), NULL);
		else if (o->type == DFI_T_EP && ep->rcq_watched)
			epoll_ctl(ia->epfd, EPOLL_CTL_DEL, dfi_cq_fd(ep->rcq), NULL);
	}
	pthread_mutex_unlock(&ia->lock);
	if (!pthread_getschedparam(pthread_self(), &policy, &sp) && policy != SCHED_OTHER) {
		sp.sched_priority = 0;
		pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
	}
	prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);	/* 10 us sleeps, not 60 */
	dfi_warn(DFI_SS_FABRIC, "IA '%s': libfabric '%s' leaves its wait fds readable with "
		 "nothing to read (%d wake-ups in a row): the progress thread polls instead, "
		 "every %u us to %u ms, at SCHED_OTHER", ia->prov->info.ia_name,
		 dfi_fabric_limits(ia->fab)->prov_name, FUTILE_WAKES,
		 (unsigned)(DFI_EVQ_POLL_MIN_NS / 1000), (unsigned)(DFI_EVQ_POLL_MAX_NS / 1000000));
}

/* A polling IA's step: the events its fds would have raised - the EQ's
 * (unless it waits out a backoff: eq_armed false) and every watched,
 * unparked CQ's - into evs[0..max).  More CQs than fit are taken from
 * *cursor on, the next step going on from there (*more set). */
static int poll_step(struct dfi_ia *ia, struct epoll_event *evs, int max, bool eq_armed,
		     int *cursor, bool *more)
{
	int n = 0, k = 0;

	if (eq_armed && n < max)
		evs[n++] = (struct epoll_event){ .events = EPOLLIN, .data.ptr = NULL };
	*more = false;
	pthread_mutex_lock(&ia->lock);
	for (struct dfi_obj *o = ia->objs.prev; o != &ia->objs; o = o->prev) {
		struct dfi_evd *evd = (struct dfi_evd *)o;

		if (o->type != DFI_T_EVD || !evd->cq || evd->unwatched || evd->parked)
			continue;
		if (k++ < *cursor)
			continue;
		if (n == max) {
			*more = true;
			break;
		}
		evs[n++] = (struct epoll_event){ .events = EPOLLIN, .data.ptr = evd };
	}
	*cursor = *more ? k - 1 : 0;
	pthread_mutex_unlock(&ia->lock);
	return n;
}

static void *progress_main(void *arg)
{
	struct dfi_ia *ia = arg;
	bool ticking = false;
	uint64_t tick_at = 0;		/* when ticking: the next tick (CLOCK_MONOTONIC ns) */
	uint64_t lease_at = 0;		/* the earliest parked CQ's next look (0: none) */
	uint64_t quiet_at = 0;		/* no look at leases before (see the passes below) */
	uint64_t eq_at = 0, eq_step = 0;	/* the EQ's re-arm, and its backoff (ns) */
	struct pull_seen eq_seen = { 0, 0, 0, 0 };	/* consumers' reads of the EQ */
	int futile = 0;			/* batches in a row that found armed fds readable for nothing */
	bool starved = false;		/* out of descriptors, said so (fds_starved) */
	uint64_t poll_at = 0, moved_at = 0;	/* polling: the next step; the last that moved */
	int poll_cursor = 0;

	if (ia->polling)	/* from the start: 10 us sleeps, not 60, never real-time */
		prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);
	else if (dfi_param_int(DFI_P_PROGRESS_RT) && !dfi_fabric_limits(ia->fab)->unsettled) {
		struct sched_param sp = { .sched_priority = 1 };
		int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);

		if (rc)
			dfi_info(DFI_SS_FABRIC, "progress thread stays SCHED_OTHER: %s "
				 "(set DAPL_OFI_PROGRESS_RT=0 to silence)", strerror(rc));
	}

	for (;;) {
		struct epoll_event evs[32];
		unsigned gen, cgen;	/* rcq_gen and cq_gen before epoll_wait */
		uint64_t now, wake_at, look_at;
		int n, moved = 0, idle = 0;	/* passes that found work, and futile ones */
		bool rescan, stale, polled = false;

		pthread_mutex_lock(&ia->lock);
		gen = ia->rcq_gen;
		cgen = ia->cq_gen;
		pthread_mutex_unlock(&ia->lock);

		/* The tick is a deadline, not a quiet spell: a steady stream of
		 * other events must not starve a stalled EP or a lease. */
		now = dfi_now_ns();
		if (ticking && !tick_at)
			tick_at = now + TICK_MS * UINT64_C(1000000);
		look_at = lease_at && lease_at < quiet_at ? quiet_at : lease_at;
		wake_at = earliest(earliest(ticking ? tick_at : 0, look_at), eq_at);
		if (ia->polling)
			wake_at = earliest(wake_at, poll_at ? poll_at : now);
		n = wait_events(ia->epfd, evs, 32, wake_at, now);
		if (n < 0 && errno != EINTR) {
			dfi_err(DFI_SS_FABRIC, "progress: epoll_wait: %m");
			break;
		}
		now = dfi_now_ns();
		if (look_at && now >= look_at)
			lease_at = leases_due(ia, now);
		if (eq_at && now >= eq_at) {
			arm_eq(ia, EPOLL_CTL_MOD);
			eq_at = 0;
		}
		if (ticking && now >= tick_at) {
			arm_eq(ia, EPOLL_CTL_MOD);
			/* every SRQ EP: one whose data waits for a buffer is
			 * not always seen as stalled (see rcqs_watched) */
			batch_mark(ia);
			ticking = poll_rcqs(ia, false);
			batch_mark(ia);
			ticking = ticking || rcqs_watched(ia);
			if (dfi_connect_timeouts(ia))
				ticking = true;		/* a timed connect pends */
			/* connection ends held back behind accepts (conn.c) */
			if (atomic_load_explicit(&ia->ends_held, memory_order_relaxed)) {
				ticking = true;
				if (!pthread_mutex_trylock(&ia->eq_lock)) {
					dfi_cm_handle(ia);
					pthread_mutex_unlock(&ia->eq_lock);
				}
			}
			tick_at = 0;
		}
		if (ia->polling && now >= poll_at) {
			bool more;

			n = n < 0 ? 0 : n;
			n += poll_step(ia, evs + n, 32 - n, !eq_at, &poll_cursor, &more);
			poll_at = now + (more ? DFI_EVQ_POLL_MIN_NS :
					 dfi_poll_sleep_ns(now - moved_at));
			polled = true;
			pull_srqs(ia);
		}
		if (n <= 0)
			continue;
		/* Between the two marks an EVD's CQ is not closed under us
		 * (dfi_progress_unwatch_cq waits for the batch to end), nor an
		 * SRQ EP's (dfi_progress_unwatch_rcq).  An SRQ EP freed before
		 * the batch began may still have an event in evs[]: then they
		 * are all skipped, and every watched one polled instead.  So
		 * may an EVD, freed between epoll_wait's return and the mark
		 * (no batch ran: it did not wait), or by a callback of this
		 * thread's own passes (it cannot wait): then the EVDs' events
		 * left are skipped, and every watched CQ re-armed, to fire
		 * again if it is still readable. */
		batch_mark(ia);
		rescan = rcq_gen(ia) != gen;
		stale = false;
		for (int i = 0; i < n; i++) {
			struct dfi_evd *evd = evs[i].data.ptr;
			struct dfi_ep *ep = rcq_ep(evs[i].data.ptr);
			bool park;
			int got;

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
				if (poll_rcqs(ia, !atomic_exchange(&ia->rcq_kick_all, false)) ||
				    rcqs_watched(ia))
					ticking = true;
				/* a kick also announces a connect with a timeout,
				 * a connection end held back (conn.c), or a
				 * request failed on a connection (dto.c) */
				dfi_ep_faults(ia);
				if (dfi_connect_timeouts(ia) ||
				    atomic_load_explicit(&ia->ends_held, memory_order_relaxed))
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
				int r, rounds = 0, handled = 0;

				if (eq_leased(ia, now, &eq_seen)) {
					/* a consumer polls for CM events and
					 * reads the EQ itself (dfi_cm_pull): the
					 * EQ's lease, as a CQ's */
					eq_step = backoff(eq_step, ia->lease_ns);
					eq_at = now + eq_step;
					continue;
				}
				if (pthread_mutex_trylock(&ia->eq_lock)) {
					/* a consumer is reading it now (this
					 * thread never waits for one: see
					 * dfi_progress_unwatch_rcq) */
					eq_at = now + LEASE_EQ_NS;
					continue;
				}
				do {
					handled += dfi_cm_handle(ia);
					r = dfi_eq_trywait(ia->eq);
				} while (r == -EAGAIN && ++rounds < 4);
				pthread_mutex_unlock(&ia->eq_lock);
				if (handled)
					moved++;
				if (r == 0) {
					eq_step = 0;
					arm_eq(ia, EPOLL_CTL_MOD);
					if (!handled && !ia->polling && readable(dfi_eq_fd(ia->eq)))
						idle++;
				} else {
					/* still pending (a socket of the EQ's set
					 * that stays readable, or a failing
					 * try-wait): CQ progress may consume it;
					 * the EQ again after a backoff, 50 us
					 * doubling up to the tick */
					progress_all_cqs(ia);
					eq_step = backoff(eq_step, LEASE_EQ_NS);
					eq_at = now + eq_step;
				}
				continue;
			}
			if (evd == (void *)ia) {
				batch_mark(ia);
				return NULL;	/* stop_fd */
			}
			/* A consumer that drives the CQ itself gets no pass
			 * either: under a stream, the pass would race it for
			 * every completion (and for the EVD lock). */
			pthread_mutex_lock(&ia->lock);
			stale = stale || ia->cq_gen != cgen;	/* also freed by a callback of a pass */
			if (stale) {
				pthread_mutex_unlock(&ia->lock);
				continue;	/* evd may be freed */
			}
			park = evd->cq && consumer_drives(ia, evd, now, false);
			if (park)
				lease_at = earliest(lease_at, park_cq(ia, evd, now));
			pthread_mutex_unlock(&ia->lock);
			if (park)
				continue;
			got = dfi_evq_source_notify_irq(&evd->q);
			if (got)
				moved++;
			/* At most one pass per lease (unless a CNO or an
			 * upcall relies on this thread: see the top).  A pass
			 * inside a stream takes longer than a lease (libfabric
			 * reads the data in).  Parked from before the pass,
			 * the CQ was due when the pass ended, and this thread
			 * - SCHED_FIFO, on its consumer's CPU when the process
			 * is pinned, or on a loaded host - went from pass to
			 * look to pass without sleeping: a consumer that had
			 * been polling never ran again to be seen at it, and
			 * the thread kept its stream for good (90 % of a
			 * pinned server's CPU, the consumer throttled to the
			 * rest; the stream at 0.6 of a raw one).  So when the
			 * consumer was seen at work within the tick, the CQ is
			 * parked from the pass's end, and no lease is looked
			 * at before this thread has slept one (quiet_at): the
			 * consumer gets the CPU back.  A consumer not seen for
			 * longer (a passive RDMA target) keeps back-to-back
			 * passes: parked from the end, its stream ran at 0.46
			 * of that.  Only a pass that parks delays the looks:
			 * a CNO's or an upcall EVD's CQ is re-armed after each
			 * pass, and its stream would put them off for as long
			 * as it lasts.  Nor is a short pass parked on the CQ of a
			 * consumer that does not poll it (MPI one-sided: a post
			 * and a reap per message, then a spin on memory): its
			 * next write arrives a round trip later and must not
			 * wait a lease; a stream of passes closer together than
			 * they last parks as above. */
			pthread_mutex_lock(&ia->lock);
			/* The pass may have run user code (a CNO's proxy
			 * agent) that freed this EVD or another: nothing of
			 * theirs is read after it, the rest of the batch is
			 * skipped and every watched CQ re-armed (as above). */
			if (ia->cq_gen != cgen) {
				stale = true;
				pthread_mutex_unlock(&ia->lock);
				continue;
			}
			if (evd->cq) {
				uint64_t end = dfi_now_ns();
				bool dense = evd->pass_end && now - evd->pass_end < end - now;

				evd->pass_end = end;
				/* (polling, the steps space the passes) */
				if (!ia->polling &&
				    dfi_evq_consumer_drives(&evd->q, ia->lease_ns &&
							    (evd->polls || dense))) {
					bool seen = evd->calls_moved &&
						    end - evd->calls_moved < LEASE_MAX_NS;

					lease_at = earliest(lease_at, park_cq(ia, evd, seen ? end : now));
					if (seen)
						quiet_at = end + ia->lease_ns;
				} else {
					/* (a CQ readable again after a pass that
					 * moved no event is no evidence: an RDMA
					 * target's pass places data and reports
					 * none, and a stream keeps the fd
					 * readable; the EQ's futility decides) */
					arm_cq(ia, evd, EPOLL_CTL_MOD);
				}
			}
			pthread_mutex_unlock(&ia->lock);
		}
		if ((rescan || (polled && rcqs_watched(ia))) && poll_rcqs(ia, false))
			ticking = true;
		if (stale)
			rearm_cqs(ia);
		batch_mark(ia);
		if (polled && moved) {
			moved_at = now;
			poll_at = now + DFI_EVQ_POLL_MIN_NS;
		}
		/* the wait objects that never settle (see the top) */
		futile = moved ? 0 : futile + (idle > 0);
		if (futile == 0)
			starved = false;
		if (futile >= FUTILE_WAKES && !ia->polling && fds_starved(ia, &starved)) {
			futile = FUTILE_WAKES - 1;	/* each futile wake looks again */
		} else if (futile >= FUTILE_WAKES && !ia->polling) {
			go_polling(ia);
			poll_at = 0;
		}
	}
	return NULL;
}

int dfi_progress_start(struct dfi_ia *ia)
{
	struct epoll_event ev = { .events = EPOLLIN };
	long lease_us;
	int rc = 0;

	pthread_mutex_lock(&ia->lock);
	if (ia->progress_on)
		goto out;
	lease_us = dfi_param_int(DFI_P_PROGRESS_LEASE_US);
	if (lease_us < 0 || lease_us > TICK_MS * 1000) {
		dfi_warn(DFI_SS_FABRIC, "DAPL_OFI_PROGRESS_LEASE_US=%ld is outside 0..%d: "
			 "50 is used", lease_us, TICK_MS * 1000);
		lease_us = 50;
	}
	ia->lease_ns = (uint64_t)lease_us * 1000u;
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
	pthread_setname_np(ia->progress, "dfi-progress");	/* for top -H, gdb, tests */
	ia->progress_on = true;
	atomic_store_explicit(&ia->eq_open, true, memory_order_release);
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
	atomic_store_explicit(&ia->eq_open, false, memory_order_release);
	if (write(ia->stop_fd, &one, sizeof(one)) < 0)
		dfi_err(DFI_SS_FABRIC, "progress: stop: %m");
	pthread_join(ia->progress, NULL);
	/* a consumer's read of the EQ (dfi_cm_pull) that began before eq_open
	 * cleared ends before the EQ closes */
	if (!dfi_cm_pulling()) {
		pthread_mutex_lock(&ia->eq_lock);
		pthread_mutex_unlock(&ia->eq_lock);
	}
	close(ia->epfd);
	close(ia->stop_fd);
	close(ia->kick_fd);
	dfi_eq_close(ia->eq);
	ia->eq = NULL;
	dfi_cm_held_free(ia);
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
	/* EPs that paired another EVD with this one are gone (an EVD is freed
	 * once nothing feeds it); a new partner would make it mixed anyway. */
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs; o = o->next) {
		struct dfi_evd *other = (struct dfi_evd *)o;

		if (o->type == DFI_T_EVD && other->partner == evd) {
			other->partner = NULL;
			other->partner_mixed = true;
		}
	}
	if (!ia->progress_on || !evd->cq)
		return;
	epoll_ctl(ia->epfd, EPOLL_CTL_DEL, dfi_cq_fd(evd->cq), NULL);
	dfi_cq_watch(evd->cq, false);
	if (evd->parked)
		ia->nparked--;
	evd->parked = false;
	evd->unwatched = true;		/* no later batch picks it up */
	ia->cq_gen++;			/* nor an event returned before it (progress_main) */
	batch_wait(ia);
}

/* Wake the thread through its kick fd (the thread runs). */
static void kick_write(struct dfi_ia *ia)
{
	uint64_t one = 1;

	if (write(ia->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		dfi_err(DFI_SS_FABRIC, "progress: kick: %m");
}

/* IA lock held (dfi_srq_ep_open_cq, under cm_lock). */
int dfi_progress_watch_rcq(struct dfi_ia *ia, struct dfi_ep *ep)
{
	int rc;

	if (!ia->progress_on)
		return -ENOTCONN;
	rc = arm_rcq(ia, ep, EPOLL_CTL_ADD);
	if (!rc) {
		ep->rcq_watched = true;
		/* the thread must tick from now on (rcqs_watched): wake it */
		if (ia->n_rcq_watched++ == 0)
			kick_write(ia);
	}
	return rc;
}

/* IA lock held.  Once it returns the thread no longer touches ep. */
void dfi_progress_unwatch_rcq(struct dfi_ia *ia, struct dfi_ep *ep)
{
	if (!ep->rcq_watched)
		return;
	epoll_ctl(ia->epfd, EPOLL_CTL_DEL, dfi_cq_fd(ep->rcq), NULL);
	dfi_cq_watch(ep->rcq, false);
	ep->rcq_watched = false;
	ia->n_rcq_watched--;
	ia->rcq_gen++;
	if (ep->rcq_stalled) {
		ep->rcq_stalled = false;
		pthread_mutex_lock(&ep->srq->lock);
		ep->srq->n_stalled--;
		pthread_mutex_unlock(&ep->srq->lock);
	}
	/* and by a consumer's read of the EQ (dfi_cm_pull); a CNO agent run
	 * from that read waits for the batch only (the thread never waits
	 * for the EQ's reader) */
	while (ia->n_pulling && !dfi_cm_pulling())
		pthread_cond_wait(&ia->batch_done, &ia->lock);
	batch_wait(ia);
}

/* IA lock held.  Once it returns the thread no longer pulls srq's srx. */
void dfi_progress_unpull_srq(struct dfi_ia *ia, struct dfi_srq *srq)
{
	if (!srq->pulled)
		return;
	srq->pulled = false;
	batch_wait(ia);
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

void dfi_progress_kick_all_rcqs(struct dfi_ia *ia)
{
	atomic_store(&ia->rcq_kick_all, true);
	dfi_progress_kick(ia);
}

/* The kick of a CQ reader, which may hold an EVD lock (below the IA
 * lock): eq_open says the thread and its fds exist, and is cleared before
 * they go (a reader racing dat_ia_close is the consumer's error). */
void dfi_progress_kick_cq(struct dfi_ia *ia)
{
	if (atomic_load_explicit(&ia->eq_open, memory_order_acquire))
		kick_write(ia);
}

void dfi_progress_kick(struct dfi_ia *ia)
{
	bool on;

	pthread_mutex_lock(&ia->lock);
	on = ia->progress_on;
	pthread_mutex_unlock(&ia->lock);
	if (on)
		kick_write(ia);
}

/* IA lock held. */
static void pair_one(struct dfi_evd *a, struct dfi_evd *b)
{
	if (a->partner_mixed || a->partner == b)
		return;
	if (a->partner) {
		a->partner = NULL;
		a->partner_mixed = true;
	} else {
		a->partner = b;
	}
}

void dfi_progress_atomics(struct dfi_ia *ia)
{
	if (dfi_fabric_limits(ia->fab)->rx_cq_own &&
	    !atomic_load_explicit(&ia->atomics_on, memory_order_relaxed))
		atomic_store_explicit(&ia->atomics_on, true, memory_order_relaxed);
}

void dfi_progress_pair(struct dfi_evd *req, struct dfi_evd *recv)
{
	struct dfi_ia *ia;

	if (!req || !recv || req == recv)
		return;
	ia = req->hdr.ia;
	pthread_mutex_lock(&ia->lock);
	pair_one(req, recv);
	pair_one(recv, req);
	recv->receives = true;
	pthread_mutex_unlock(&ia->lock);
}
