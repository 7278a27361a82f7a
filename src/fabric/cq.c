/* Completion queues, shared by both backends: opened on the domain with an
 * fd to sleep on (the provider's, or a mirror of its poll fds), read in
 * batches straight into struct dfi_comp arrays. */
#include "util/hot.h"
#include "fabric_int.h"
#include "util/log.h"
#include "util/param.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The wait object.  tcp's FI_WAIT_FD CQ is an epoll set of its EP sockets
 * (and a signal fd), and each empty-CQ progress pass epoll_waits on it;
 * asked for FI_WAIT_UNSPEC it keeps a poll-fd list instead and its pass is
 * a poll(2): a polling 64 B ping-pong is about 10 % faster one way (raw
 * libfabric 1.17, tcp, loopback; bench/RESULTS.md) - but poll(2) costs
 * every fd in the list, and beside 1024 idle EPs the same ping-pong takes
 * 6 times longer.  So FI_WAIT_FD stays the default, and
 * DAPL_OFI_CQ_WAIT=pollfd asks for FI_WAIT_UNSPEC, for a few connections
 * per CQ.  DAT EVDs must also be waitable, and the progress thread and
 * waiters sleep on one fd: for such a CQ that fd is an epoll set of ours
 * mirroring the provider's poll fds, events included (FI_GETWAIT gives
 * them as struct fi_wait_pollfd).
 *
 * The list changes when an EP's socket joins or leaves and when tcp wants
 * to know that a full socket can take more (POLLOUT).  Such a change
 * reaches the list at a progress pass of this CQ (tcp queues it until its
 * next poll), and the list's own signal fd, its first entry, announces it;
 * but a zero-timeout pass - every fi_cq_read - does not poll that fd, so
 * once set it stays readable and is left out of the mirror (a sleeper on
 * it would spin).  Instead the mirror is brought up to date:
 *   - before each sleep on it: a waiter's (dfi_cq_sleep_fd) and each arm
 *     of the progress thread's (dfi_cq_fd);
 *   - after every pass another thread makes while the progress thread
 *     holds the fd (dfi_cq_read, when watched): a consumer's pass may set
 *     POLLOUT that only the thread would act on.  A waiter owns its EVD,
 *     and the thread leaves a waited CQ alone, so no one passes its CQ
 *     while it sleeps;
 *   - when an EP bound to the CQ connects (dfi_cq_progress, from the CM
 *     event): its socket must be watched before its first message;
 *   - when one closes (dfi_fep_close_bound): the mirror knows fds by
 *     number, and a closed socket's number may come back as another file.
 *     The close, a pass and a sync run under the mirror's lock; a number
 *     that left and came back between two syncs anyway shows in the
 *     provider's count of adds and removals (change_index), and every fd
 *     kept is then checked.
 * A mirror nobody sleeps on still makes every packet of its sockets run an
 * epoll wake-up callback in the kernel (about 3 % of a polling ping-pong):
 * while its consumer keeps polling it is emptied (dfi_cq_quiet), and the
 * next sleeper fills it again.
 */
struct dfi_cq_mirror {
	pthread_mutex_t lock;
	int sleepers;			/* waiters between dfi_cq_sleep_fd and dfi_cq_slept */
	struct pollfd *have;		/* what the epoll set holds (fd, events) */
	size_t nhave, cap_have;
	struct pollfd *want;		/* FI_GETWAIT's list */
	size_t cap_want;
	struct mirror_fd {
		int events;		/* in the epoll set with these (-1: not) */
		uint32_t seen;		/* the sync that last wanted it */
	} *by_fd;			/* indexed by fd */
	size_t cap_fd;
	uint32_t gen;
	uint64_t change_index;		/* the provider's count of adds and removals, at the last sync */
	bool dirty;			/* an epoll_ctl failed: compare afresh */
};

static int mirror_grow(void **p, size_t *cap, size_t n, size_t each)
{
	void *q;
	size_t c = *cap ? *cap : 16;

	if (n <= *cap)
		return 0;
	while (c < n)
		c *= 2;
	if (!(q = realloc(*p, c * each)))
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static int mirror_ctl(int epfd, int op, const struct pollfd *p)
{
	struct epoll_event ev = {
		.events = (p->events & POLLIN ? EPOLLIN : 0) | (p->events & POLLOUT ? EPOLLOUT : 0),
		.data.fd = p->fd,
	};
	int rc = epoll_ctl(epfd, op, p->fd, &ev) ? errno : 0;

	/* an fd number closed and reused since the last sync */
	if (rc == EEXIST && op == EPOLL_CTL_ADD)
		rc = epoll_ctl(epfd, EPOLL_CTL_MOD, p->fd, &ev) ? errno : 0;
	else if (rc == ENOENT && op == EPOLL_CTL_MOD)
		rc = epoll_ctl(epfd, EPOLL_CTL_ADD, p->fd, &ev) ? errno : 0;
	return rc;
}

/* FI_GETWAIT.  The provider's copy of its poll fds races, on the revents
 * fields only, with a concurrent pass's poll(2) (libfabric 1.17), and
 * tests/tsan.supp names mirror_getwait: ThreadSanitizer's report shows the
 * function that calls this one (libfabric has no frames of its own there). */
static __attribute__((noinline)) int getwait_call(struct dfi_cq *c, struct fi_wait_pollfd *w)
{
	int rc = fi_control(&c->cq->fid, FI_GETWAIT, w);

	__asm__ volatile("" ::: "memory");	/* no tail call */
	return rc;
}

/* The frame the suppression names: this call and nothing else. */
static __attribute__((noinline)) int mirror_getwait(struct dfi_cq *c, struct fi_wait_pollfd *w)
{
	int rc = getwait_call(c, w);

	__asm__ volatile("" ::: "memory");	/* no tail call */
	return rc;
}

/* The provider's poll fds into m->want, grown as needed (mirror lock held). */
static int mirror_fetch(struct dfi_cq *c, struct fi_wait_pollfd *w)
{
	struct dfi_cq_mirror *m = c->mirror;
	int rc;

	for (;;) {
		w->change_index = 0;
		w->nfds = m->cap_want;
		w->fd = m->want;
		rc = mirror_getwait(c, w);
		if (rc != -FI_ETOOSMALL)
			return rc;
		if (mirror_grow((void **)&m->want, &m->cap_want, w->nfds + 16, sizeof(*m->want)))
			return -ENOMEM;
	}
}

/* A pass of the CQ that reads no completion: tcp applies the changes to
 * its poll-fd list that it queued (an EP's socket added or removed). */
static void cq_apply_changes(struct dfi_cq *c)
{
	struct fi_cq_tagged_entry none;

	(void)fi_cq_read(c->cq, &none, 0);
}

/* Bring c's epoll set to the provider's poll fds (mirror lock held). */
static int mirror_sync(struct dfi_cq *c)
{
	struct dfi_cq_mirror *m = c->mirror;
	struct fi_wait_pollfd w;
	uint64_t seen_changes = 0;
	bool probe;
	size_t i;
	int rc;

	if ((rc = mirror_fetch(c, &w)))
		return rc;
	/* Entry 0 is the poll-fd set's own signal fd: a zero-timeout pass
	 * (every fi_cq_read) does not poll it, so it stays readable once set,
	 * and a sleeper watching it would spin.  The changes it announces
	 * reach the list at the CQ's next pass, and a sync follows every
	 * pass that a sleeper could miss (dfi_cq_read, dfi_cq_progress). */
	if (w.nfds > 0) {
		memmove(m->want, m->want + 1, (w.nfds - 1) * sizeof(*m->want));
		w.nfds--;
	}
	if (w.nfds == m->nhave && !m->dirty && w.change_index == m->change_index) {
		for (i = 0; i < w.nfds; i++)
			if (m->want[i].fd != m->have[i].fd || m->want[i].events != m->have[i].events)
				break;
		if (i == w.nfds)
			return 0;	/* the usual case: nothing changed */
	}
	if (mirror_grow((void **)&m->have, &m->cap_have, w.nfds, sizeof(*m->have)))
		return -ENOMEM;
	for (i = 0; i < w.nfds; i++) {
		size_t fd = (size_t)m->want[i].fd, old = m->cap_fd;

		if (mirror_grow((void **)&m->by_fd, &m->cap_fd, fd + 1, sizeof(*m->by_fd)))
			return -ENOMEM;
		for (size_t k = old; k < m->cap_fd; k++)
			m->by_fd[k] = (struct mirror_fd){ .events = -1 };
	}
	if (++m->gen == 0)
		m->gen = 1;
	for (i = 0; i < w.nfds; i++)
		m->by_fd[m->want[i].fd].seen = m->gen;
	for (i = 0; i < m->nhave; i++) {
		struct mirror_fd *h = &m->by_fd[m->have[i].fd];

		if (h->seen != m->gen && h->events >= 0) {
			epoll_ctl(c->fd, EPOLL_CTL_DEL, m->have[i].fd, NULL);	/* may be closed */
			h->events = -1;
			seen_changes++;
		}
	}
	for (i = 0; i < w.nfds; i++)
		seen_changes += m->by_fd[m->want[i].fd].events < 0;
	/* The provider counts each fd added and removed (change_index).  More
	 * than the differences show means an fd number left and came back:
	 * a socket closed and another one given its number, which the kernel
	 * took out of this epoll set with the old file.  Each fd kept is then
	 * checked (MOD; ENOENT: it is a new file, added). */
	probe = w.change_index - m->change_index > seen_changes;
	m->change_index = w.change_index;
	m->dirty = false;
	rc = 0;
	for (i = 0; i < w.nfds; i++) {
		const struct pollfd *p = &m->want[i];
		struct mirror_fd *h = &m->by_fd[p->fd];
		int e;

		if (h->events == p->events && !probe)
			continue;
		e = mirror_ctl(c->fd, h->events < 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, p);
		if (e == EBADF) {
			/* closed, its removal not applied yet: it leaves the
			 * list at the CQ's next pass */
			h->events = -1;
			continue;
		}
		if (e) {
			dfi_err(DFI_SS_FABRIC, "CQ %p: epoll_ctl(fd %d): %s", (void *)c, p->fd,
				strerror(e));
			m->dirty = true;	/* retried at the next sync */
			rc = -e;
			continue;
		}
		h->events = p->events;
	}
	if (w.nfds)
		memcpy(m->have, m->want, w.nfds * sizeof(*m->have));
	m->nhave = w.nfds;
	dfi_dbg(DFI_SS_FABRIC, "CQ %p: mirror of %zu poll fds", (void *)c, w.nfds);
	return rc;
}

/* mirror_sync if anyone may sleep on the mirror or it holds fds (lock
 * held); a failure is logged. */
static void mirror_sync_used(struct dfi_cq *c)
{
	struct dfi_cq_mirror *m = c->mirror;
	int rc;

	if (!m->sleepers && !m->nhave && !atomic_load_explicit(&c->watched, memory_order_relaxed))
		return;		/* emptied (dfi_cq_quiet): the next sleeper fills it */
	if ((rc = mirror_sync(c)))
		dfi_warn(DFI_SS_FABRIC, "CQ %p: its fd may miss an EP: %s", (void *)c,
			 fi_strerror(-rc));
}

/* Bring the mirror up to date (sleep: for one about to sleep on it). */
static void mirror_resync(struct dfi_cq *c, int sleep)
{
	pthread_mutex_lock(&c->mirror->lock);
	c->mirror->sleepers += sleep;
	mirror_sync_used(c);
	pthread_mutex_unlock(&c->mirror->lock);
}

static void mirror_free(struct dfi_cq_mirror *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->lock);
	free(m->have);
	free(m->want);
	free(m->by_fd);
	free(m);
}

/* c's CQ with the provider's choice of wait object: mirrored poll fds, or
 * its fd.  Any other answer (no fd at all) closes it: -ENOTSUP. */
static int cq_open_unspec(struct dfi_fabric *f, struct fi_cq_attr *attr, struct dfi_cq *c)
{
	enum fi_wait_obj obj;
	int rc;

	attr->wait_obj = FI_WAIT_UNSPEC;
	if ((rc = fi_cq_open(f->domain, attr, &c->cq, NULL)))
		return rc;
	rc = fi_control(&c->cq->fid, FI_GETWAITOBJ, &obj);
	if (!rc && obj == FI_WAIT_FD)
		return fi_control(&c->cq->fid, FI_GETWAIT, &c->fd);
	if (!rc && obj == FI_WAIT_POLLFD) {
		if (!(c->mirror = calloc(1, sizeof(*c->mirror))))
			return -FI_ENOMEM;
		pthread_mutex_init(&c->mirror->lock, NULL);
		if ((c->fd = epoll_create1(EPOLL_CLOEXEC)) < 0)
			return -errno;
		return mirror_sync(c);
	}
	dfi_info(DFI_SS_FABRIC, "a CQ of wait object FI_WAIT_UNSPEC has %s (%d): "
		 "FI_WAIT_FD is asked for instead", rc ? "none known" : "neither an fd nor poll fds",
		 rc ? rc : (int)obj);
	fi_close(&c->cq->fid);
	c->cq = NULL;
	return -ENOTSUP;
}

int dfi_cq_open(struct dfi_fabric *f, size_t size, struct dfi_cq **out)
{
	struct fi_cq_attr attr = { .size = size, .format = FI_CQ_FORMAT_TAGGED };
	const char *wait = dfi_param_str(DFI_P_CQ_WAIT);
	struct dfi_cq *c = calloc(1, sizeof(*c));
	int rc = -ENOTSUP;

	if (!c)
		return -ENOMEM;
	c->fabric = f->fabric;
	c->owner = f;
	c->fd = -1;
	if (dfi_param_int(DFI_P_FAULT_CQ_OPEN) == 1) {
		static atomic_bool warned;

		if (!atomic_exchange(&warned, true))
			dfi_warn(DFI_SS_FABRIC, "DAPL_OFI_FAULT_CQ_OPEN=1: every completion queue "
				 "fails to open (FI_ENOSYS)");
		rc = -FI_ENOSYS;
	} else if (f->lim.polled) {
		attr.wait_obj = FI_WAIT_NONE;	/* polled: dfi_cq_fd is -1 */
		rc = fi_cq_open(f->domain, &attr, &c->cq, NULL);
	} else if (strcmp(wait, "pollfd") == 0) {
		rc = cq_open_unspec(f, &attr, c);
	} else if (strcmp(wait, "fd") != 0) {
		static atomic_bool warned;

		if (!atomic_exchange(&warned, true))
			dfi_warn(DFI_SS_FABRIC, "DAPL_OFI_CQ_WAIT=%s is neither fd nor pollfd: "
				 "fd is used", wait);
	}
	if (rc == -ENOTSUP) {
		attr.wait_obj = FI_WAIT_FD;
		rc = fi_cq_open(f->domain, &attr, &c->cq, NULL);
		if (!rc)
			rc = fi_control(&c->cq->fid, FI_GETWAIT, &c->fd);
	}
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_cq_open(%zu): %s", size, fi_strerror(-rc));
		dfi_cq_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

void dfi_cq_close(struct dfi_cq *c)
{
	if (!c)
		return;
	if (c->soft) {
		dfi_cq_soft_close(c);	/* and its fd */
		free(c);
		return;
	}
	if (c->cq && c->owner->be->cq_closing && c->owner->be->cq_closing(c->owner, c))
		c->cq = NULL;		/* the backend's now */
	if (c->cq)
		fi_close(&c->cq->fid);
	if (c->mirror) {
		if (c->fd >= 0)
			close(c->fd);	/* ours; an FI_WAIT_FD CQ's is the provider's */
		mirror_free(c->mirror);
	}
	free(c);
}

_Static_assert(sizeof(struct dfi_comp) == sizeof(struct fi_cq_tagged_entry) &&
	       offsetof(struct dfi_comp, ctx) == offsetof(struct fi_cq_tagged_entry, op_context) &&
	       offsetof(struct dfi_comp, err) == offsetof(struct fi_cq_tagged_entry, flags) &&
	       offsetof(struct dfi_comp, len) == offsetof(struct fi_cq_tagged_entry, len) &&
	       offsetof(struct dfi_comp, data) == offsetof(struct fi_cq_tagged_entry, data) &&
	       offsetof(struct dfi_comp, tag) == offsetof(struct fi_cq_tagged_entry, tag),
	       "fi_cq_read writes struct dfi_comp arrays as FI_CQ_FORMAT_TAGGED");

static bool own_done(struct dfi_cq *c, struct dfi_comp *o)
{
	const struct dfi_backend *be = c->owner->be;

	return be->own_done && be->own_done(c->owner, o);
}

/* fi_cq_read writes straight into out (FI_CQ_FORMAT_TAGGED entries, see
 * struct dfi_comp), and each entry's flags word becomes err = 0 and imm: no copy,
 * and no 1.5 KiB bounce buffer on the stack, a page more for the
 * completion path to touch after the read's system calls. */
DFI_HOT int dfi_cq_read(struct dfi_cq *c, struct dfi_comp *out, int n)
{
	int got = 0;

	if (__builtin_expect(c->soft != NULL, 0))
		return dfi_cq_soft_read(c, out, n);

	while (got < n) {
		int want = n - got;
		ssize_t r = fi_cq_read(c->cq, &out[got], (size_t)want);

		if (r == -FI_EAGAIN)
			break;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };

			r = fi_cq_readerr(c->cq, &err, 0);
			if (r < 0)
				return got ? got : (int)r;
			out[got].ctx = dfi_opctx_of(c->owner, err.op_context);
			out[got].len = err.len;
			out[got].err = err.err ? err.err : EIO;
			out[got].imm = 0;
			out[got].tag = err.tag;
			if (dfi_cq_own_ctx(out[got].ctx) && !own_done(c, &out[got]))
				continue;	/* a receive of the backend's */
			got++;
			continue;
		}
		if (r < 0)
			return got ? got : (int)r;
		for (int rd = got, end = got + (int)r; rd < end; rd++) {
			struct dfi_comp *o = &out[rd];
			uint64_t flags;

			memcpy(&flags, &o->err, sizeof(flags));
			o->ctx = dfi_opctx_of(c->owner, o->ctx);
			o->err = 0;
			o->imm = (flags & FI_REMOTE_CQ_DATA) != 0;
			/* a remote write with CQ data and no context is the
			 * backend's own (msg/atomic.c): taken out */
			if (__builtin_expect(o->imm && !o->ctx, 0) && c->owner->be->cq_data &&
			    c->owner->be->cq_data(c->owner, o->data))
				continue;
			if (__builtin_expect(dfi_cq_own_ctx(o->ctx), 0) && !own_done(c, o))
				continue;	/* a receive the backend posted for itself */
			if (got != rd)
				out[got] = *o;
			got++;
		}
		if (r < want)
			break;
	}
	if (c->mirror && atomic_load_explicit(&c->watched, memory_order_relaxed))
		mirror_resync(c, 0);
	return got;
}

DFI_HOT int dfi_cq_take(struct dfi_cq *c, const struct dfi_comp **out, int n)
{
	int avail = c->ahead_n - c->ahead_pos;

	if (!avail) {
		int r = dfi_cq_read(c, c->ahead, DFI_CQ_BATCH);

		if (r <= 0)
			return r;
		c->ahead_pos = 0;
		c->ahead_n = avail = r;
	}
	if (n > avail)
		n = avail;
	*out = &c->ahead[c->ahead_pos];
	c->ahead_pos += n;
	return n;
}

DFI_HOT int dfi_cq_trywait(struct dfi_cq *c)
{
	struct fid *fids[1];
	int rc;

	if (c->ahead_pos < c->ahead_n)
		return -EAGAIN;		/* read ahead, not handed out yet */
	if (__builtin_expect(c->soft != NULL, 0))
		return dfi_cq_soft_trywait(c);
	if (c->fd < 0)
		return 0;		/* polled: nothing to arm */
	fids[0] = &c->cq->fid;
	rc = fi_trywait(c->fabric, fids, 1);

	return rc == -FI_EAGAIN ? -EAGAIN : rc;
}

int dfi_cq_fd(struct dfi_cq *c)
{
	if (c->mirror)
		mirror_resync(c, 0);
	return c->fd;
}

DFI_HOT int dfi_cq_sleep_fd(struct dfi_cq *c)
{
	if (c->mirror)
		mirror_resync(c, 1);
	return c->fd;
}

DFI_HOT void dfi_cq_slept(struct dfi_cq *c)
{
	if (!c->mirror)
		return;
	pthread_mutex_lock(&c->mirror->lock);
	c->mirror->sleepers--;
	pthread_mutex_unlock(&c->mirror->lock);
}

void dfi_cq_watch(struct dfi_cq *c, bool on)
{
	atomic_store_explicit(&c->watched, on, memory_order_relaxed);
}

void dfi_cq_quiet(struct dfi_cq *c)
{
	struct dfi_cq_mirror *m = c->mirror;

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	if (!m->sleepers && !atomic_load_explicit(&c->watched, memory_order_relaxed)) {
		for (size_t i = 0; i < m->nhave; i++) {
			epoll_ctl(c->fd, EPOLL_CTL_DEL, m->have[i].fd, NULL);
			m->by_fd[m->have[i].fd].events = -1;
		}
		if (m->nhave)
			dfi_dbg(DFI_SS_FABRIC, "CQ %p: mirror of %zu poll fds emptied", (void *)c,
				m->nhave);
		m->nhave = 0;
	}
	pthread_mutex_unlock(&m->lock);
}

void dfi_cq_progress(struct dfi_cq *c)
{
	if (!c->mirror)
		return;		/* the provider's own fd follows its sockets */
	cq_apply_changes(c);
	mirror_resync(c, 0);
}

/* A mirror's fds are the provider's by number: an EP's socket may not be
 * closed while a sync uses its number, nor its number stay in a mirror's
 * books once closed (another file may get it).  So the mirrors of the CQs
 * the EP is bound to are locked across the close and a pass of each CQ,
 * which takes the socket out of its list, and a sync (the mirror, above). */
void dfi_fep_close_bound(struct dfi_fep *e, struct dfi_cq *const *cqs, int n)
{
	struct dfi_cq *held[4];
	int nheld = 0;

	for (int i = 0; i < n && nheld < 4; i++) {
		bool dup = false;

		for (int k = 0; k < nheld; k++)
			dup = dup || held[k] == cqs[i];
		if (cqs[i] && cqs[i]->mirror && !dup)
			held[nheld++] = cqs[i];
	}
	/* a fixed order: by address */
	for (int i = 1; i < nheld; i++)
		for (int k = i; k > 0 && held[k - 1] > held[k]; k--) {
			struct dfi_cq *t = held[k];

			held[k] = held[k - 1];
			held[k - 1] = t;
		}
	for (int i = 0; i < nheld; i++)
		pthread_mutex_lock(&held[i]->mirror->lock);
	dfi_fep_close(e);
	for (int i = nheld - 1; i >= 0; i--) {
		cq_apply_changes(held[i]);	/* the socket's removal */
		mirror_sync_used(held[i]);
		pthread_mutex_unlock(&held[i]->mirror->lock);
	}
}

int dfi_cq_bind(struct fid_ep *ep, struct dfi_cq *txcq, struct dfi_cq *rxcq)
{
	int rc;

	if (txcq == rxcq)
		return fi_ep_bind(ep, &txcq->cq->fid, FI_TRANSMIT | FI_RECV);
	rc = fi_ep_bind(ep, &txcq->cq->fid, FI_TRANSMIT);
	return rc ? rc : fi_ep_bind(ep, &rxcq->cq->fid, FI_RECV);
}
