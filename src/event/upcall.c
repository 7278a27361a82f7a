/*
 * The upcall dispatcher: a run queue of EVDs with upcalls to make and the
 * threads that make them - the provider's "interrupt" context for kDAT
 * upcall policies in user space.
 *
 * An EVD is queued at most once (up_queued); a thread pops it, holds a
 * claim on it while it runs dfi_evq_dispatch() (at most `budget` upcalls, so
 * one busy EVD cannot starve the others: it goes to the back of the queue),
 * and drops the claim.  dfi_disp_forget() is how an EVD being freed makes
 * sure no thread will touch it again.  Several threads make DAT_UPCALL_MANY
 * real; SINGLE_INSTANCE exclusion is per EVD, in evd_core.c.
 *
 * Lock order: EVD lock -> dispatcher lock (enqueue runs under the EVD lock);
 * a thread never holds the dispatcher lock while it takes an EVD lock.
 *
 * Modelled in model/upcall.pml (same names; the table is model/README.md).
 */
#include "event.h"
#include "util/log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Lock held, run queue empty: watch it without the lock for spin_ns.  One
 * thread spins at a time, and an enqueue wakes no sleeper meanwhile: on 2
 * CPUs a second spinner, or a woken thread that finds nothing, only takes a
 * CPU from the spinner and the producer.  The spinner clears the flag
 * before it takes the lock and looks at the run queue again, and an
 * enqueue reads it under the lock after linking: whichever comes first,
 * the work is seen. */
static void spin(struct dfi_disp *d)
{
	uint64_t ns = atomic_load_explicit(&d->spin_ns, memory_order_relaxed), until;
	uint64_t seen = atomic_load_explicit(&d->enqueued, memory_order_relaxed);

	if (!ns || atomic_exchange(&d->spinner, true))
		return;
	pthread_mutex_unlock(&d->lock);
	until = dfi_now_ns() + ns;
	for (unsigned k = 1;; k++) {
		if (atomic_load_explicit(&d->enqueued, memory_order_acquire) != seen)
			break;
		if (!(k & 255) && dfi_now_ns() > until)
			break;
		cpu_relax();
	}
	atomic_store(&d->spinner, false);
	pthread_mutex_lock(&d->lock);
}

/* One turn on q with a claim (dfi_disp_forget waits for claims): the
 * dispatcher lock is held on entry and on return, not during the turn. */
static void claimed_turn(struct dfi_disp *d, struct dfi_evq *q)
{
	q->up_claims++;
	d->n_turns++;
	pthread_mutex_unlock(&d->lock);

	dfi_evq_dispatch(q, d->budget);

	pthread_mutex_lock(&d->lock);
	if (--q->up_claims == 0)
		pthread_cond_broadcast(&d->released);
}

static void *disp_main(void *arg)
{
	struct dfi_disp_thread *self = arg;
	struct dfi_disp *d = self->d;

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct dfi_evq *q;

		if (!d->head && !d->stop)
			spin(d);
		while (!d->head && !d->stop) {
			if (!self->idle) {
				self->idle = true;
				d->idle[d->nidle++] = self;
			}
			pthread_cond_wait(&self->wake, &d->lock);
		}
		if (!d->head)
			break;		/* stop, and nothing left to run */
		q = d->head;
		d->head = q->up_next;
		if (!d->head)
			d->tail = NULL;
		q->up_next = NULL;
		q->up_queued = false;
		claimed_turn(d, q);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* Lock held: wake the idle thread that slept last, if any (a busy thread
 * looks at the run queue before it sleeps). */
static void wake_one(struct dfi_disp *d)
{
	struct dfi_disp_thread *t;

	if (!d->nidle)
		return;
	t = d->idle[--d->nidle];
	t->idle = false;
	pthread_cond_signal(&t->wake);
}

int dfi_disp_start(struct dfi_disp *d, int nthreads, int budget)
{
	memset(d, 0, sizeof(*d));
	if (nthreads < 1 || budget < 1)
		return -EINVAL;
	d->budget = budget;
	d->threads = calloc((size_t)nthreads, sizeof(*d->threads));
	d->idle = calloc((size_t)nthreads, sizeof(*d->idle));
	if (!d->threads || !d->idle) {
		free(d->threads);
		free(d->idle);
		return -ENOMEM;
	}
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->released, NULL);
	for (int i = 0; i < nthreads; i++) {
		struct dfi_disp_thread *t = &d->threads[i];
		int rc;

		t->d = d;
		pthread_cond_init(&t->wake, NULL);
		rc = pthread_create(&t->tid, NULL, disp_main, t);
		if (rc) {
			pthread_cond_destroy(&t->wake);
			dfi_err(DFI_SS_EVD, "upcall dispatcher: thread %d of %d: %s", i + 1,
				nthreads, strerror(rc));
			dfi_disp_stop(d);
			return -rc;
		}
		pthread_setname_np(t->tid, "dfi-upcall");	/* for top -H, gdb */
		d->nthreads++;
	}
	dfi_dbg(DFI_SS_EVD, "upcall dispatcher %p: %d threads, budget %d", (void *)d,
		nthreads, budget);
	return 0;
}

void dfi_disp_set_spin(struct dfi_disp *d, uint64_t ns)
{
	atomic_store_explicit(&d->spin_ns, ns, memory_order_relaxed);
}

void dfi_disp_stop(struct dfi_disp *d)
{
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	atomic_fetch_add_explicit(&d->enqueued, 1, memory_order_release);	/* spinners */
	for (int i = 0; i < d->nthreads; i++)
		pthread_cond_signal(&d->threads[i].wake);
	pthread_mutex_unlock(&d->lock);
	for (int i = 0; i < d->nthreads; i++) {
		pthread_join(d->threads[i].tid, NULL);
		pthread_cond_destroy(&d->threads[i].wake);
	}
	free(d->threads);
	free(d->idle);
	d->threads = NULL;
	d->idle = NULL;
	d->nthreads = d->nidle = 0;
	pthread_cond_destroy(&d->released);
	pthread_mutex_destroy(&d->lock);
}

void dfi_disp_enqueue(struct dfi_disp *d, struct dfi_evq *q)
{
	pthread_mutex_lock(&d->lock);
	if (!q->up_queued) {
		q->up_queued = true;
		q->up_next = NULL;
		if (d->tail)
			d->tail->up_next = q;
		else
			d->head = q;
		d->tail = q;
		atomic_fetch_add_explicit(&d->enqueued, 1, memory_order_release);
		if (!atomic_load(&d->spinner))
			wake_one(d);
	}
	pthread_mutex_unlock(&d->lock);
}

void dfi_disp_run_here(struct dfi_disp *d, struct dfi_evq *q)
{
	pthread_mutex_lock(&d->lock);
	claimed_turn(d, q);
	pthread_mutex_unlock(&d->lock);
}

void dfi_disp_forget(struct dfi_disp *d, struct dfi_evq *q)
{
	pthread_mutex_lock(&d->lock);
	if (q->up_queued) {
		struct dfi_evq **pp = &d->head, *prev = NULL;

		while (*pp != q) {
			prev = *pp;
			pp = &(*pp)->up_next;
		}
		*pp = q->up_next;
		if (d->tail == q)
			d->tail = prev;
		q->up_next = NULL;
		q->up_queued = false;
	}
	while (q->up_claims > 0)
		pthread_cond_wait(&d->released, &d->lock);
	pthread_mutex_unlock(&d->lock);
}
