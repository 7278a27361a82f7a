/*
 * dapl-ofi event core: the EVD ring, waiting, thresholds, overflow and the CNO.
 *
 * This layer knows DAT_EVENT and DAT_RETURN, pthreads and libc, and nothing of
 * libfabric.  Completions from a transport reach it in one of two ways:
 *
 *   push:  dfi_evq_post() from any thread (software, CM, async events, or
 *          completions a progress thread has already read);
 *   pull:  a *source* attached with dfi_evq_set_source(): the core reads it
 *          under the EVD lock, only into free ring slots (a completion that
 *          has no slot stays in the source: nothing polled is ever dropped),
 *          and, before any thread sleeps, asks it to *try-wait*: arm its
 *          notification and look once more (evd-contract.md 8.2; fi_trywait).
 *
 * Lock order (the only one in the library):  IA -> EVD -> CNO.
 * No lock is held across a user callback (CNO proxy agent) or a blocking call.
 */
#ifndef DFI_EVENT_H
#define DFI_EVENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include <dat2/udat.h>
#include <dat2/dat_ofi_extensions.h>

#define DFI_EVD_MAX_QLEN	65536	/* reported as max_evd_qlen */
/* How long dat_evd_free waits for the posts under way into the EVD
 * (dfi_evq_hold): a post takes microseconds, unless a CNO proxy agent it
 * calls (consumer code) takes longer; then the free is refused as in use. */
#define DFI_EVQ_HOLD_WAIT_MS	2000
/* Events a fill asks its source for at once.  A CQ source must read as many
 * in one libfabric call (dto.c checks DFI_CQ_BATCH against it): each call is
 * a progress pass. */
#define DFI_EVQ_FILL_BATCH	64
/* The sleeps of a poll that stands in for a wait object (a source
 * without an fd, below; the progress thread of an IA whose fds never
 * settle): an eighth of the time since the poll last found something,
 * from DFI_EVQ_POLL_MIN_NS to DFI_EVQ_POLL_MAX_NS.  Work that comes in
 * pieces (a 64 KiB message read in over several passes) is not slowed
 * by sleeps that doubled meanwhile; the added latency is at most an
 * eighth of the quiet spell, and an idle poll wakes 1000 times a second. */
#define DFI_EVQ_POLL_MIN_NS	(10 * UINT64_C(1000))
#define DFI_EVQ_POLL_MAX_NS	(1000 * UINT64_C(1000))

static inline uint64_t dfi_poll_sleep_ns(uint64_t since_found)
{
	uint64_t ns = since_found / 8;

	return ns < DFI_EVQ_POLL_MIN_NS ? DFI_EVQ_POLL_MIN_NS :
	       ns > DFI_EVQ_POLL_MAX_NS ? DFI_EVQ_POLL_MAX_NS : ns;
}

struct dfi_cno;
struct dfi_disp;

/* A pull source of completions below an EVD (a libfabric CQ, or a test producer). */
struct dfi_evq_source_ops {
	/* Move up to max completions into ev[] (evd_handle is filled by the core).
	 * Returns the number moved (>= 0) or -errno.  Never blocks. */
	int (*read)(void *ctx, DAT_EVENT *ev, int max);
	/* Arm notification, then look once more.  0: armed and empty, fd() will
	 * become readable when a completion arrives; -EAGAIN: completions are
	 * pending, read them; other -errno: failure. */
	int (*trywait)(void *ctx);
	/* Descriptor that becomes readable after a successful trywait when a
	 * completion arrives (may also be readable spuriously).  Called before
	 * each sleep on it.  -1: none (a libfabric wait object that never
	 * settles, progress.c): a waiter polls the source (dfi_poll_sleep_ns). */
	int (*fd)(void *ctx);
	/* Optional: the sleep that fd() was called for has ended. */
	void (*slept)(void *ctx);
	/* Optional: an event read from this source left the EVD (dequeue or
	 * wait handed it out), under the EVD lock.  Lets the source count its
	 * work queue slots until the consumer has reaped the completion. */
	void (*consumed)(void *ctx, const DAT_EVENT *ev);
	/* Optional, for a source that reads ahead in batches (a dequeue that
	 * calls it reads one event): the next event, for a consumer that
	 * takes it at once - a plain dequeue (no enabled CNO, no upcall
	 * policy) with nothing queued in the ring.  read(ctx, ev, 1) followed
	 * by consumed(ctx, ev), in one step.  1, 0 (none) or -errno. */
	int (*read_one)(void *ctx, DAT_EVENT *ev);
};

enum dfi_evq_state {
	DFI_EVQ_OPEN,		/* no waiter */
	DFI_EVQ_WAITED,		/* one thread inside dfi_evq_wait owns the EVD */
	DFI_EVQ_FREEING,	/* being destroyed (IA close): waiters leave with DAT_ABORT */
};

struct dfi_evq {
	pthread_mutex_t lock;
	pthread_cond_t waiter_left;	/* signalled when a waiter leaves */
	DAT_EVD_HANDLE handle;		/* what events and CNO hints carry */
	DAT_EVD_FLAGS flags;

	/* ring: capacity qlen (a power of two), count events from head;
	 * from_src[i]: slot i was filled from the source */
	DAT_EVENT *ring;
	uint8_t *from_src;
	uint32_t qlen, mask, head, count;

	enum dfi_evq_state state;
	bool enabled;			/* CNO delivery (no effect on waiters) */
	bool waitable;
	bool dead;			/* async EVD that overflowed: catastrophic */
	bool overflow_latched;		/* one overflow report per episode */
	bool waiter;			/* a thread is inside dfi_evq_wait */
	pthread_t waiter_tid;		/* which (valid while waiter) */
	bool src_armed;			/* source try-wait succeeded, not yet fired */
	DAT_COUNT threshold;		/* the waiter's */
	int wake_fd;			/* eventfd, created on the first sleep */

	/* consumer-controlled notification by feeding EPs (completion flags) */
	int n_notify, n_solicited;

	struct dfi_cno *cno;
	struct dfi_evq *async;		/* where overflow is reported (NULL: this is async) */
	int refs;			/* streams feeding it (EPs, service points) */
	int holds;			/* events on their way in (dfi_evq_hold) */
	pthread_cond_t unheld;		/* signalled when holds falls to 0 */

	const struct dfi_evq_source_ops *src;
	void *src_ctx;

	/* kDAT upcalls (dfi_evq_set_upcall, dfi_evq_dispatch; model/upcall.pml) */
	struct dfi_disp *disp;		/* runs this EVD's upcalls (set on first use) */
	int up_policy;			/* DAT_UPCALL_POLICY in force; never TEARDOWN */
	int up_flag;			/* DAT_UPCALL_FLAG of the last arm */
	DAT_UPCALL_OBJECT up;
	bool up_fire;			/* events entered since the arm: deliver */
	int up_running;			/* upcalls executing now */
	pthread_cond_t up_idle;		/* up_running fell to 0 */
	/* run-queue state, under the dispatcher's lock */
	bool up_queued;
	int up_claims;			/* dispatcher threads holding this EVD */
	struct dfi_evq *up_next;

	/* Consumer calls (dequeue, wait, and posts feeding this EVD: see
	 * dfi_evq_touch), read without the lock by the progress context
	 * (dfi_evq_calls): a moving count means a busy consumer, who reads
	 * the EVD, and so its source, itself. */
	_Atomic uint32_t calls;
	_Atomic uint32_t waits;		/* of which dat_evd_wait calls (the same way) */
	_Atomic int posting;		/* a post feeding q is under way (dfi_evq_posting) */

	/* statistics, read by tests and the info tool */
	uint64_t n_posted, n_dropped, n_wakeups, n_upcalls;
};

/* Round a requested minimum queue length up to the ring capacity used. */
uint32_t dfi_evq_qlen_round(DAT_COUNT min_qlen);

/* 0 or -errno.  async: the async EVD's core (NULL for the async EVD itself). */
int dfi_evq_init(struct dfi_evq *q, DAT_EVD_HANDLE self, DAT_COUNT min_qlen,
		 DAT_EVD_FLAGS flags, struct dfi_evq *async);
/* Releases resources; the EVD must have no waiter (see dfi_evq_free_begin).
 * Detaches the CNO itself (as a free: see dfi_cno_detach); callers must not. */
void dfi_evq_fini(struct dfi_evq *q);

void dfi_evq_set_source(struct dfi_evq *q, const struct dfi_evq_source_ops *ops, void *ctx);

/* Software event (dat_evd_post_se): DAT_QUEUE_FULL when full, async EVD not told. */
DAT_RETURN dfi_evq_post_se(struct dfi_evq *q, const DAT_EVENT *ev);

/* Provider event (CR, connection, async, DTO read by a progress thread).
 * 0, or -ENOSPC when the ring was full: the event was not queued and an
 * overflow was reported on the async EVD (once per episode); for the async
 * EVD itself it becomes dead (catastrophic).  The caller of a CR event
 * rejects the connection on -ENOSPC. */
int dfi_evq_post(struct dfi_evq *q, const DAT_EVENT *ev);

/* Never arms the source, except that an EVD with an enabled CNO is left
 * armed when it runs empty, so the CNO hears of the next completion. */
DAT_RETURN dfi_evq_dequeue(struct dfi_evq *q, DAT_EVENT *ev);
DAT_RETURN dfi_evq_wait(struct dfi_evq *q, DAT_TIMEOUT timeout, DAT_COUNT threshold,
			DAT_EVENT *ev, DAT_COUNT *nmore);
DAT_RETURN dfi_evq_resize(struct dfi_evq *q, DAT_COUNT min_qlen);
void dfi_evq_enable(struct dfi_evq *q);
void dfi_evq_disable(struct dfi_evq *q);
void dfi_evq_set_waitable(struct dfi_evq *q, bool waitable);
/* Attach (cno) or detach (NULL); takes/drops the CNO attachment. */
void dfi_evq_modify_cno(struct dfi_evq *q, struct dfi_cno *cno);
/* qlen, DAT_EVD_STATE bits, cno */
void dfi_evq_query(struct dfi_evq *q, DAT_COUNT *qlen, DAT_EVD_STATE *state,
		   struct dfi_cno **cno);
/* Number of events queued now (a snapshot). */
DAT_COUNT dfi_evq_count(struct dfi_evq *q);

/* Feeding streams (an EP or service point names this EVD). */
void dfi_evq_ref(struct dfi_evq *q);
void dfi_evq_unref(struct dfi_evq *q);
/* An event on its way into q, to be posted once the caller's locks are
 * dropped (a connection event the progress thread read, while the EP that
 * feeds q may be freed meanwhile): q stays allocated until the same thread
 * calls dfi_evq_unhold.  Not a feeding stream: dat_evd_free waits for the
 * post to end (dfi_evq_free_begin) instead of refusing. */
void dfi_evq_hold(struct dfi_evq *q);
void dfi_evq_unhold(struct dfi_evq *q);
/* An EP feeding this EVD uses consumer-controlled notification:
 * kind DAT_EVD_STATE_CONFIG_NOTIFY (unsignalled) or _SOLICITED; delta +1/-1. */
void dfi_evq_notify_model(struct dfi_evq *q, DAT_EVD_STATE kind, int delta);

/* An object whose events the source made is going away (an EP freed with
 * completions not reaped): the queued events read from the source that
 * match(ev, arg) stay for the consumer, but their reaping is no longer
 * reported to the source (consumed): the object it would name may be
 * another by then.  Under q's lock, as every read and every reap, so no
 * reap of one of them is under way.  Returns how many. */
int dfi_evq_source_detach(struct dfi_evq *q, bool (*match)(const DAT_EVENT *ev, void *arg),
			  void *arg);

/* The source's notification fired (called from the progress context). */
void dfi_evq_source_notify(struct dfi_evq *q);
/* An EP feeding q goes away: what it left in the source enters the ring
 * now, notified as dfi_evq_source_notify would; if nothing did, the source
 * is left as it was (no try-wait). */
void dfi_evq_source_flush(struct dfi_evq *q);
/* The same, from the provider's progress thread itself (its "interrupt"
 * context): upcalls due run here, a budgeted turn (dfi_disp_run_here),
 * instead of waking a dispatcher thread - one wake-up less from a
 * completion to its upcall.  The EVD must stay valid meanwhile.
 * Returns the events it moved into the ring, or 1 if a waiter was woken
 * to read them: 0 is a wake-up that found nothing (progress.c counts
 * those, to tell a wait object that never settles). */
int dfi_evq_source_notify_irq(struct dfi_evq *q);
/* Whether the progress context must watch the source's fd for this EVD
 * (it has a CNO and is enabled; a waiter watches the fd itself). */
bool dfi_evq_wants_notify(struct dfi_evq *q);

/* Consumer calls so far (dequeue and wait), without the lock. */
static inline uint32_t dfi_evq_calls(struct dfi_evq *q)
{
	return atomic_load_explicit(&q->calls, memory_order_relaxed);
}

/* dat_evd_wait calls so far, without the lock: a consumer that waits is
 * served by its own wake-ups, whatever its call rate. */
static inline uint32_t dfi_evq_waits(struct dfi_evq *q)
{
	return atomic_load_explicit(&q->waits, memory_order_relaxed);
}

/* A post feeding q begins (true) or ends (false): a long one (libfabric
 * tcp sends the data inside fi_write) is the consumer at work, as a
 * dequeue holding q's lock is.  Plain stores: the reader only samples. */
static inline void dfi_evq_posting(struct dfi_evq *q, bool on)
{
	atomic_store_explicit(&q->posting, on, memory_order_relaxed);
}

/* Progress context: whether the consumer is inside a call on q right now:
 * a post feeding it, or a dequeue or wait (its lock held, or a waiter). */
bool dfi_evq_inside(struct dfi_evq *q);

/* A call that counts as the consumer's activity on q without entering it
 * (a post whose completion q will get): no lock needed.  A plain load and
 * store, not a locked add: it runs on every post and dequeue, and all the
 * reader needs is to see the count move.  Two racing callers may bump it
 * once between them; it still moves. */
static inline void dfi_evq_touch(struct dfi_evq *q)
{
	atomic_store_explicit(&q->calls, atomic_load_explicit(&q->calls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* Progress context: whether it may stay off the source's fd because the
 * consumer drives the source itself: a waiter sleeps on the fd, or
 * `active` (the caller saw consumer calls recently, dfi_evq_calls) and no
 * CNO or upcall relies on the progress context; or the ring is full
 * (nothing could be read); or the EVD's lock is busy (it never waits). */
bool dfi_evq_consumer_drives(struct dfi_evq *q, bool active);
/* Progress context: whether a consumer sleeps in dat_evd_wait on q (or
 * holds its lock: busy, never waited for). */
bool dfi_evq_waited(struct dfi_evq *q);

/* dat_evd_free: DAT_SUCCESS (the EVD is now FREEING; call dfi_evq_fini), or
 * DAT_INVALID_STATE with EVD_IN_USE or EVD_WAITER and nothing changed.
 * Posts under way (holds) are waited for, up to DFI_EVQ_HOLD_WAIT_MS. */
DAT_RETURN dfi_evq_free_begin(struct dfi_evq *q);
/* IA close: mark FREEING, wake the waiter (it returns DAT_ABORT) and wait
 * until it has left.  Then dfi_evq_fini may run.  false: the waiter is the
 * calling thread itself (a signal handler on top of its wait): nothing was
 * waited for, and the EVD must be left allocated. */
bool dfi_evq_abort(struct dfi_evq *q);

/* ------------------------------------------------------- upcalls (kDAT) */

/*
 * An EVD with an active upcall policy (SINGLE_INSTANCE, NOTIFY or MANY)
 * hands its events to the consumer's upcall, run by a dispatcher thread
 * (the provider's "interrupt" context), with no provider lock held.
 *
 *   arrival:  an event that enters the ring while a policy is active (a post,
 *             or a completion read from the source by anyone) sets up_fire
 *             and puts the EVD on the dispatcher's run queue;
 *   dispatch: under the EVD lock, right before each call, the policy is
 *             checked (evd-contract 1.3 rule 3); SINGLE_INSTANCE and NOTIFY
 *             run one upcall at a time - an arrival during it is found by the
 *             same thread's re-check after the upcall returns (the latch is
 *             up_fire + count, never a separate flag that could be lost);
 *             MANY lets several threads each take one event;
 *   delivery: events leave in ring order, each exactly once, to an upcall
 *             or to a dequeue - whichever pops it under the lock;
 *   edge:     INVOC_NEW arms without up_fire, so events queued at the arm
 *             raise nothing until a new one arrives; INVOC_ANY sets up_fire
 *             when events are queued.  *npending reports the queue at the arm.
 * Checked by the Promela model model/upcall.pml (names correspond).
 */
struct dfi_disp;

/* A dispatcher thread; an idle one sleeps on its own condition variable. */
struct dfi_disp_thread {
	struct dfi_disp *d;
	pthread_t tid;
	pthread_cond_t wake;		/* work for this thread, or stop */
	bool idle;			/* on the idle stack */
};

struct dfi_disp {
	pthread_mutex_t lock;		/* after every EVD lock (IA -> EVD -> disp) */
	pthread_cond_t released;	/* an EVD claim was dropped */
	struct dfi_evq *head, *tail;	/* run queue of EVDs with work */
	struct dfi_disp_thread *threads;
	/* Idle threads, the most recent on top: new work wakes the thread
	 * that slept last (its CPU and caches are the warmest; waking the
	 * oldest sleeper cost 4 to 10 times the wake-up on 2 CPUs). */
	struct dfi_disp_thread **idle;
	int nidle;
	int nthreads;
	/* how long a thread that ran out of work spins on the run queue
	 * before it sleeps (ns; 0: it sleeps at once) */
	_Atomic uint64_t spin_ns;
	_Atomic uint64_t enqueued;	/* enqueues so far: what a spinner watches */
	atomic_bool spinner;		/* a thread spins (one at most): no wake-up */
	int budget;			/* upcalls per EVD per turn (fairness) */
	bool stop;
	uint64_t n_turns;
};

/* Start nthreads dispatcher threads.  0 or -errno. */
int dfi_disp_start(struct dfi_disp *d, int nthreads, int budget);
/* Dispatcher threads that run out of work spin for ns before they sleep:
 * an upcall then starts within a cache miss, not a wake-up, at the price of
 * a CPU kept busy that long (DAPL_OFI_UPCALL_SPIN_US). */
void dfi_disp_set_spin(struct dfi_disp *d, uint64_t ns);
/* Join them; every EVD using d must have been freed or aborted first. */
void dfi_disp_stop(struct dfi_disp *d);
/* Put q on the run queue (EVD lock held; no-op if already queued). */
void dfi_disp_enqueue(struct dfi_disp *d, struct dfi_evq *q);
/* Run one budgeted turn on q in the calling thread (the progress thread),
 * with a claim like a dispatcher thread's; what the budget leaves goes to
 * the dispatcher threads. */
void dfi_disp_run_here(struct dfi_disp *d, struct dfi_evq *q);
/* Take q off the run queue and wait until no dispatcher thread holds it
 * (EVD lock not held).  After it, d never touches q again unless q is
 * enqueued anew - which a FREEING EVD never is. */
void dfi_disp_forget(struct dfi_disp *d, struct dfi_evq *q);

/* dat_evd_modify_upcall / kcreate: policy is a DAT_UPCALL_POLICY; obj NULL
 * keeps the current object (DAT_UPCALL_SAME); npending (may be NULL) gets
 * the number of events queued when the arm took effect.  TEARDOWN returns
 * once no upcall of q runs, DAT_INVALID_STATE from inside q's own upcall. */
DAT_RETURN dfi_evq_set_upcall(struct dfi_evq *q, struct dfi_disp *d, int policy,
			      const DAT_UPCALL_OBJECT *obj, int flag, DAT_COUNT *npending);
void dfi_evq_get_upcall(struct dfi_evq *q, int *policy, DAT_UPCALL_OBJECT *obj, int *flag);
/* One dispatcher turn on q: up to budget upcalls.  Called by dispatcher
 * threads only, with a claim on q (dfi_disp). */
void dfi_evq_dispatch(struct dfi_evq *q, int budget);
/* The EVD whose upcall this thread is running, or NULL. */
struct dfi_evq *dfi_upcall_current(void);

/* ------------------------------------------------------------------ CNO */

enum dfi_cno_state { DFI_CNO_UNTRIGGERED, DFI_CNO_TRIGGERED, DFI_CNO_DEAD };

struct dfi_cno {
	pthread_mutex_t lock;		/* leaf lock */
	pthread_cond_t idle;		/* waiters == 0 and busy == 0 */
	DAT_CNO_HANDLE handle;
	enum dfi_cno_state state;
	DAT_EVD_HANDLE hint;		/* first EVD since the last consume */
	DAT_OS_WAIT_PROXY_AGENT agent;	/* one-shot */
	bool fd_mode;			/* created by dat_cno_fd_create */
	int fd;				/* eventfd: readable iff TRIGGERED */
	int waiters;			/* threads in dfi_cno_wait */
	int nevd;			/* EVDs attached */
	int busy;			/* triggers in flight (agent calls) */
	unsigned release_gen;		/* bumped to release every waiter with NULL */
	uint64_t n_triggers, n_agent_calls;
};

int dfi_cno_init(struct dfi_cno *c, DAT_CNO_HANDLE self,
		 const DAT_OS_WAIT_PROXY_AGENT *agent, bool fd_mode);
void dfi_cno_fini(struct dfi_cno *c);
/* A notification from an EVD (NULL: released because its last EVD was freed). */
void dfi_cno_trigger(struct dfi_cno *c, DAT_EVD_HANDLE evd);
/* dat_cno_wait: DAT_SUCCESS with *evd (NULL after IA close or last EVD freed),
 * DAT_QUEUE_EMPTY with *evd = NULL on timeout, DAT_INTERRUPTED_CALL on a signal. */
DAT_RETURN dfi_cno_wait(struct dfi_cno *c, DAT_TIMEOUT timeout, DAT_EVD_HANDLE *evd);
/* dat_cno_trigger: the non-blocking consume. */
DAT_RETURN dfi_cno_consume(struct dfi_cno *c, DAT_EVD_HANDLE *evd);
void dfi_cno_set_agent(struct dfi_cno *c, const DAT_OS_WAIT_PROXY_AGENT *agent);
void dfi_cno_get_agent(struct dfi_cno *c, DAT_OS_WAIT_PROXY_AGENT *agent);
/* dat_cno_free: DAT_SUCCESS (the CNO is now DEAD: call dfi_cno_fini), or
 * DAT_INVALID_STATE|CNO_IN_USE (EVDs attached, a waiter, or an agent call in
 * flight) and nothing changed. */
DAT_RETURN dfi_cno_free_check(struct dfi_cno *c);
/* IA close: release every waiter with NULL and wait until none is left.
 * false: one waiter is the calling thread (a signal handler on top of its
 * wait), not waited for: the CNO must be left allocated. */
bool dfi_cno_kill(struct dfi_cno *c);
void dfi_cno_attach(struct dfi_cno *c);
/* Keep the CNO alive across a trigger made after the EVD lock is dropped. */
void dfi_cno_hold(struct dfi_cno *c);
void dfi_cno_release(struct dfi_cno *c);
/* from_free: the detach comes from dat_evd_free; waiters are released with
 * a NULL EVD when it was the last attached EVD. */
void dfi_cno_detach(struct dfi_cno *c, bool from_free);

/* --------------------------------------------------------- time helpers */

/* Absolute CLOCK_MONOTONIC deadline in ns for a DAT timeout (INFINITE: UINT64_MAX). */
uint64_t dfi_deadline(DAT_TIMEOUT timeout_us);
/* ns left until deadline (0 if passed); UINT64_MAX if infinite. */
uint64_t dfi_remaining(uint64_t deadline);
uint64_t dfi_now_ns(void);
/* ppoll on fds[] (at most 4; -1 entries skipped) until readable or deadline.
 * Returns the readable ones as a mask (bit i: fds[i]; > 0), 0 on timeout,
 * -EINTR on a signal.  A cancellation point (only while the caller has
 * cancellation enabled), in the sleep itself and nowhere else. */
int dfi_sleep_fds(const int *fds, int nfds, uint64_t deadline);

#endif
