/*
 * The CNO core.  State UNTRIGGERED/TRIGGERED/DEAD under a leaf lock; an
 * eventfd that is readable exactly while the CNO is TRIGGERED (or DEAD, or a
 * release is pending) serves dat_cno_fd_create consumers and our own
 * waiters alike, so one mechanism wakes everybody and a trigger that lands
 * while a waiter times out is consumed, not lost (fixes OFA D11).
 *
 * The proxy agent is one-shot (uDAPL 1.2): every trigger that finds one
 * installed detaches it and calls it, with no lock held.
 */
#include "event.h"
#include "util/daterr.h"
#include "util/log.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void fd_set_ready(struct dfi_cno *c)
{
	uint64_t one = 1;

	if (write(c->fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		dfi_err(DFI_SS_CNO, "CNO %p: eventfd write: %m", (void *)c->handle);
}

static void fd_clear(struct dfi_cno *c)
{
	uint64_t v;

	if (read(c->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		dfi_err(DFI_SS_CNO, "CNO %p: eventfd read: %m", (void *)c->handle);
}

int dfi_cno_init(struct dfi_cno *c, DAT_CNO_HANDLE self,
		 const DAT_OS_WAIT_PROXY_AGENT *agent, bool fd_mode)
{
	memset(c, 0, sizeof(*c));
	c->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->fd < 0)
		return -errno;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->idle, NULL);
	c->handle = self;
	c->state = DFI_CNO_UNTRIGGERED;
	c->fd_mode = fd_mode;
	if (agent && agent->proxy_agent_func)
		c->agent = *agent;
	return 0;
}

void dfi_cno_fini(struct dfi_cno *c)
{
	close(c->fd);
	pthread_cond_destroy(&c->idle);
	pthread_mutex_destroy(&c->lock);
}

static void maybe_idle(struct dfi_cno *c)
{
	/* dfi_cno_kill may wait for all waiters but one (itself) */
	if ((c->waiters == 0 && c->busy == 0) || c->state == DFI_CNO_DEAD)
		pthread_cond_broadcast(&c->idle);
}

void dfi_cno_hold(struct dfi_cno *c)
{
	pthread_mutex_lock(&c->lock);
	c->busy++;
	pthread_mutex_unlock(&c->lock);
}

void dfi_cno_release(struct dfi_cno *c)
{
	pthread_mutex_lock(&c->lock);
	c->busy--;
	maybe_idle(c);
	pthread_mutex_unlock(&c->lock);
}

void dfi_cno_trigger(struct dfi_cno *c, DAT_EVD_HANDLE evd)
{
	DAT_OS_WAIT_PROXY_AGENT agent = { NULL, NULL };

	pthread_mutex_lock(&c->lock);
	if (c->state == DFI_CNO_DEAD) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	c->n_triggers++;
	if (c->state == DFI_CNO_UNTRIGGERED) {
		c->state = DFI_CNO_TRIGGERED;
		c->hint = evd;
		fd_set_ready(c);
	}
	if (c->agent.proxy_agent_func) {
		agent = c->agent;
		c->agent.proxy_agent_func = NULL;
		c->agent.instance_data = NULL;
		c->busy++;
		c->n_agent_calls++;
	}
	pthread_mutex_unlock(&c->lock);

	if (agent.proxy_agent_func) {
		agent.proxy_agent_func(agent.instance_data, evd);
		dfi_cno_release(c);
	}
}

/* Consume a trigger (lock held). */
static DAT_EVD_HANDLE consume(struct dfi_cno *c)
{
	DAT_EVD_HANDLE h = c->hint;

	c->state = DFI_CNO_UNTRIGGERED;
	c->hint = NULL;
	fd_clear(c);
	return h;
}

/* The CNO this thread sleeps in (dfi_cno_kill from a signal handler on
 * top of the wait must not wait for it). */
static __thread struct dfi_cno *cno_waiting;

struct cno_waiter {
	struct dfi_cno *c;
	unsigned gen;
};

/* A waiter leaves (lock held; it has counted itself out). */
static void waiter_left(struct dfi_cno *c, unsigned gen)
{
	/* The last waiter out clears a release readiness. */
	if (c->waiters == 0 && c->state == DFI_CNO_UNTRIGGERED && c->release_gen != gen)
		fd_clear(c);
	maybe_idle(c);
}

/* Cancelled in its sleep, where it holds no lock: leave as a waiter that
 * times out does (a trigger stays for the next waiter). */
static void wait_cancelled(void *arg)
{
	struct cno_waiter *w = arg;

	pthread_mutex_lock(&w->c->lock);
	w->c->waiters--;
	waiter_left(w->c, w->gen);
	pthread_mutex_unlock(&w->c->lock);
	cno_waiting = NULL;
}

/* The only point of dfi_cno_wait where cancellation may act. */
static int sleep_cancellable(struct cno_waiter *w, uint64_t deadline, int cstate)
{
	int r, type;

	pthread_cleanup_push(wait_cancelled, w);
	/* Deferred even for an asynchronous consumer: the cancel then acts
	 * in ppoll, at a call.  Between calls gcc's C personality routine
	 * finds no call site and would unwind past the cleanup. */
	pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &type);
	pthread_setcancelstate(cstate, NULL);
	r = dfi_sleep_fds(&w->c->fd, 1, deadline);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_setcanceltype(type, NULL);
	pthread_cleanup_pop(0);
	return r;
}

DAT_RETURN dfi_cno_wait(struct dfi_cno *c, DAT_TIMEOUT timeout, DAT_EVD_HANDLE *evd)
{
	uint64_t deadline = dfi_deadline(timeout);
	struct cno_waiter w = { c, 0 };
	DAT_RETURN rc;
	unsigned gen;
	int cstate;

	/* Cancellation acts only in the sleep (see dfi_evq_wait). */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cstate);
	pthread_mutex_lock(&c->lock);
	gen = c->release_gen;
	w.gen = gen;
	for (;;) {
		int r;

		if (c->state == DFI_CNO_TRIGGERED) {
			*evd = consume(c);
			rc = DAT_SUCCESS;
			break;
		}
		if (c->state == DFI_CNO_DEAD || c->release_gen != gen) {
			*evd = NULL;
			rc = DAT_SUCCESS;
			break;
		}
		if (dfi_remaining(deadline) == 0) {
			*evd = NULL;
			rc = DFI_QUEUE_EMPTY;
			break;
		}
		c->waiters++;
		cno_waiting = c;
		pthread_mutex_unlock(&c->lock);
		r = sleep_cancellable(&w, deadline, cstate);
		pthread_mutex_lock(&c->lock);
		cno_waiting = NULL;
		c->waiters--;
		if (r == -EINTR && c->state == DFI_CNO_UNTRIGGERED && c->release_gen == gen) {
			*evd = NULL;
			rc = DFI_ERR(DAT_INTERRUPTED_CALL, 0);
			break;
		}
	}
	waiter_left(c, gen);
	pthread_mutex_unlock(&c->lock);
	pthread_setcancelstate(cstate, NULL);
	return rc;
}

DAT_RETURN dfi_cno_consume(struct dfi_cno *c, DAT_EVD_HANDLE *evd)
{
	DAT_RETURN rc;

	pthread_mutex_lock(&c->lock);
	if (c->state == DFI_CNO_TRIGGERED) {
		*evd = consume(c);
		rc = DAT_SUCCESS;
	} else {
		*evd = NULL;
		rc = c->state == DFI_CNO_DEAD ?
			DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_DEAD) : DFI_QUEUE_EMPTY;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void dfi_cno_set_agent(struct dfi_cno *c, const DAT_OS_WAIT_PROXY_AGENT *agent)
{
	pthread_mutex_lock(&c->lock);
	if (agent && agent->proxy_agent_func)
		c->agent = *agent;
	else
		c->agent = (DAT_OS_WAIT_PROXY_AGENT){ NULL, NULL };
	pthread_mutex_unlock(&c->lock);
}

void dfi_cno_get_agent(struct dfi_cno *c, DAT_OS_WAIT_PROXY_AGENT *agent)
{
	pthread_mutex_lock(&c->lock);
	*agent = c->agent;
	pthread_mutex_unlock(&c->lock);
}

DAT_RETURN dfi_cno_free_check(struct dfi_cno *c)
{
	DAT_RETURN rc = DAT_SUCCESS;
	int nevd, waiters, busy;

	pthread_mutex_lock(&c->lock);
	nevd = c->nevd;
	waiters = c->waiters;
	busy = c->busy;
	if (nevd > 0 || waiters > 0 || busy > 0)
		rc = DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
	else
		c->state = DFI_CNO_DEAD;
	pthread_mutex_unlock(&c->lock);
	if (rc != DAT_SUCCESS)
		dfi_reject(DFI_SS_API, "CNO %p in use: %d EVDs attached, %d waiters, "
			   "%d agent calls in flight", (void *)c->handle, nevd, waiters, busy);
	return rc;
}

bool dfi_cno_kill(struct dfi_cno *c)
{
	bool self = cno_waiting == c;

	pthread_mutex_lock(&c->lock);
	c->state = DFI_CNO_DEAD;
	c->agent = (DAT_OS_WAIT_PROXY_AGENT){ NULL, NULL };
	fd_set_ready(c);
	/* A waiter that is this very thread (a signal handler on top of its
	 * wait closes the IA) cannot leave before we return. */
	while (c->waiters > (self ? 1 : 0) || c->busy > 0)
		pthread_cond_wait(&c->idle, &c->lock);
	pthread_mutex_unlock(&c->lock);
	return !self;
}

void dfi_cno_attach(struct dfi_cno *c)
{
	pthread_mutex_lock(&c->lock);
	c->nevd++;
	pthread_mutex_unlock(&c->lock);
}

void dfi_cno_detach(struct dfi_cno *c, bool from_free)
{
	pthread_mutex_lock(&c->lock);
	c->nevd--;
	if (from_free && c->nevd == 0 && c->waiters > 0) {
		/* uDAPL: waiters are released with a NULL EVD when every EVD
		 * attached to the CNO is freed. */
		c->release_gen++;
		fd_set_ready(c);
	}
	pthread_mutex_unlock(&c->lock);
}
