/* Connection management over libfabric MSG endpoints: the IA's event queue,
 * listeners, active endpoints, and the data-path posts. */
#include "util/hot.h"
#include "fabric_int.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/param.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dfi_eq {
	struct fid_eq *eq;
	struct fid_fabric *fabric;
	int fd;
	/* Events read ahead by dfi_pep_close (the caller's lock, as every
	 * read): stash[head..n) come before libfabric's queue. */
	struct dfi_cm_event *stash;
	int head, n, cap;
	atomic_int stashed;	/* n - head, for dfi_eq_trywait (no lock) */
};

struct dfi_pep {
	struct fid_pep *pep;
	struct fi_info *info;
	struct dfi_eq *eq;
	void *ctx;
};

struct dfi_srx {
	struct fid_ep *srx;
};

int dfi_eq_open(struct dfi_fabric *f, struct dfi_eq **out)
{
	struct fi_eq_attr attr = { .size = 4096, .wait_obj = FI_WAIT_FD };
	struct dfi_eq *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	q->fabric = f->fabric;
	rc = fi_eq_open(f->fabric, &attr, &q->eq, NULL);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_eq_open: %s", fi_strerror(-rc));
		free(q);
		return rc;
	}
	rc = fi_control(&q->eq->fid, FI_GETWAIT, &q->fd);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_control(eq, FI_GETWAIT): %s", fi_strerror(-rc));
		fi_close(&q->eq->fid);
		free(q);
		return rc;
	}
	*out = q;
	return 0;
}

void dfi_eq_close(struct dfi_eq *q)
{
	if (!q)
		return;
	/* every listener was closed first, taking its requests out */
	for (int i = q->head; i < q->n; i++)
		if (q->stash[i].type == DFI_CM_CONNREQ)
			fi_freeinfo(q->stash[i].req);
	free(q->stash);
	fi_close(&q->eq->fid);
	free(q);
}

int dfi_eq_fd(struct dfi_eq *q)
{
	return q->fd;
}

int dfi_eq_trywait(struct dfi_eq *q)
{
	struct fid *fids[1] = { &q->eq->fid };
	int rc;

	if (atomic_load_explicit(&q->stashed, memory_order_relaxed))
		return -EAGAIN;		/* read ahead by dfi_pep_close */
	rc = fi_trywait(q->fabric, fids, 1);

	return rc == -FI_EAGAIN ? -EAGAIN : rc;
}

/* The next event of libfabric's queue (dfi_eq_read's results). */
static int eq_read_fi(struct dfi_eq *q, struct dfi_cm_event *ev)
{
	/* the entry ends in a flexible array: the private data follows it */
	_Alignas(struct fi_eq_cm_entry) uint8_t raw[sizeof(struct fi_eq_cm_entry) + DFI_PDATA_MAX];
	struct fi_eq_cm_entry *ent = (struct fi_eq_cm_entry *)raw;
	uint32_t event;
	ssize_t n;

	memset(ev, 0, sizeof(*ev));
	n = fi_eq_read(q->eq, &event, raw, sizeof(raw), 0);
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err = { 0 };
		uint8_t edata[DFI_PDATA_MAX];

		err.err_data = edata;
		err.err_data_size = sizeof(edata);
		n = fi_eq_readerr(q->eq, &err, 0);
		if (n < 0)
			return (int)n;
		ev->type = DFI_CM_ERROR;
		ev->ctx = err.fid ? err.fid->context : NULL;
		ev->err = err.err ? err.err : EIO;
		if (err.err_data_size && err.err_data_size <= sizeof(ev->pdata)) {
			memcpy(ev->pdata, err.err_data, err.err_data_size);
			ev->plen = err.err_data_size;
		}
		if (err.err == ECONNREFUSED && !err.err_data_size)
			ev->plen = 0;
		return 1;
	}
	if (n < 0)
		return (int)n;
	ev->ctx = ent->fid ? ent->fid->context : NULL;
	if ((size_t)n > sizeof(*ent)) {
		ev->plen = (size_t)n - sizeof(*ent);
		memcpy(ev->pdata, raw + sizeof(*ent), ev->plen);
	}
	switch (event) {
	case FI_CONNREQ:
		ev->type = DFI_CM_CONNREQ;
		ev->req = ent->info;
		break;
	case FI_CONNECTED:
		ev->type = DFI_CM_CONNECTED;
		break;
	case FI_SHUTDOWN:
		ev->type = DFI_CM_SHUTDOWN;
		break;
	default:
		dfi_warn(DFI_SS_FABRIC, "unexpected EQ event %u ignored", event);
		return 0;
	}
	return 1;
}

int dfi_eq_read(struct dfi_eq *q, struct dfi_cm_event *ev)
{
	if (q->head < q->n) {
		*ev = q->stash[q->head++];
		if (q->head == q->n)
			q->head = q->n = 0;
		atomic_store_explicit(&q->stashed, q->n - q->head, memory_order_relaxed);
		return 1;
	}
	return eq_read_fi(q, ev);
}

/* Keep ev for dfi_eq_read; false without memory. */
static bool eq_stash(struct dfi_eq *q, const struct dfi_cm_event *ev)
{
	if (q->n == q->cap) {
		int cap = q->cap ? 2 * q->cap : 8;
		struct dfi_cm_event *s = realloc(q->stash, (size_t)cap * sizeof(*s));

		if (!s)
			return false;
		q->stash = s;
		q->cap = cap;
	}
	q->stash[q->n++] = *ev;
	return true;
}

void dfi_connreq_free(void *req)
{
	fi_freeinfo(req);
}

void dfi_connreq_peer(void *req, struct sockaddr_in *peer)
{
	struct fi_info *info = req;

	memset(peer, 0, sizeof(*peer));
	if (info->dest_addr && info->dest_addrlen >= sizeof(*peer))
		memcpy(peer, info->dest_addr, sizeof(*peer));
}

int dfi_pep_listen(struct dfi_fabric *f, struct dfi_eq *eq, uint16_t port, void *ctx,
		   struct dfi_pep **out, uint16_t *bound)
{
	struct dfi_pep *p = calloc(1, sizeof(*p));
	struct sockaddr_in *sin;
	size_t len = sizeof(*sin);
	int rc;

	if (!p)
		return -ENOMEM;
	p->eq = eq;
	p->ctx = ctx;
	p->info = fi_dupinfo(f->info);
	if (!p->info) {
		free(p);
		return -ENOMEM;
	}
	sin = p->info->src_addr;
	if (!sin || p->info->src_addrlen < sizeof(*sin)) {
		fi_freeinfo(p->info);
		free(p);
		return -EINVAL;
	}
	sin->sin_port = htons(port);
	rc = fi_passive_ep(f->fabric, p->info, &p->pep, ctx);
	if (!rc)
		rc = fi_pep_bind(p->pep, &eq->eq->fid, 0);
	if (!rc)
		rc = fi_listen(p->pep);
	if (rc) {
		if (rc != -FI_EADDRINUSE)
			dfi_err(DFI_SS_FABRIC, "listen on port %u: %s", port, fi_strerror(-rc));
		if (p->pep)
			fi_close(&p->pep->fid);
		fi_freeinfo(p->info);
		free(p);
		return rc == -FI_EADDRINUSE ? -EADDRINUSE : rc;
	}
	if (bound) {
		struct sockaddr_in got;

		*bound = port;
		if (fi_getname(&p->pep->fid, &got, &len) == 0)
			*bound = ntohs(got.sin_port);
	}
	*out = p;
	return 0;
}

/* Refuse a request of p that will never become a CR. */
static void pep_refuse(struct dfi_pep *p, void *req)
{
	struct fi_info *info = req;

	fi_reject(p->pep, info->handle, NULL, 0);
	fi_freeinfo(info);
}

/* libfabric 1.17's tcp provider frees a listener under the requests it
 * has accepted and not delivered (halfreq.c says how).  So, with the
 * caller's lock that every read of the EQ takes: the requests it has
 * delivered into the EQ are taken out and refused while the listener
 * lives (the other events wait in the stash for dfi_eq_read); once it is
 * closed, those it holds half read are reset, and the EQ run until
 * libfabric has freed them (its error path touches no listener). */
void dfi_pep_close(struct dfi_pep *p)
{
	struct dfi_eq *q;
	struct sockaddr_in me;
	size_t len = sizeof(me);
	struct dfi_cm_event ev;
	struct dfi_halfreq h[64];
	int n, k, w, lfd;
	bool tcp;

	if (!p)
		return;
	q = p->eq;
	/* tcp before 1.18 (tcpx): from 1.18 tcp is the net code, whose error
	 * path reads the listener too (xnet_pep_close's TODO): a reset there
	 * would not help */
	tcp = strcmp(p->info->fabric_attr->prov_name, "tcp") == 0 &&
	      FI_VERSION_LT(fi_version(), FI_VERSION(1, 18));
	if (fi_getname(&p->pep->fid, &me, &len) || len != sizeof(me) || me.sin_family != AF_INET)
		tcp = false;
	/* First the listener stops taking connections, libfabric's pep
	 * staying open: then every request it had accepted is settled while
	 * the pep it points at is alive (a request libfabric reads now is
	 * refused, one that cannot be read whole is reset), and nothing new
	 * comes before fi_close.  Resetting after the close left a window: a
	 * request read between the scan and the reset reached the freed pep. */
	lfd = tcp ? dfi_halfreq_stop_listening(&me) : -1;
	if (tcp && lfd < 0)
		dfi_warn(DFI_SS_FABRIC, "listener on port %u not found among the sockets: "
			 "requests it had accepted may outlive it", ntohs(me.sin_port));
	for (int round = 0; tcp && round < 8; round++) {
		int refused = 0;

		for (k = 0; k < 4096 && eq_read_fi(q, &ev) > 0; k++) {
			if (ev.type == DFI_CM_CONNREQ && ev.ctx == p->ctx) {
				pep_refuse(p, ev.req);
				refused++;
			} else if (!eq_stash(q, &ev)) {
				dfi_err(DFI_SS_FABRIC, "no memory to keep a CM event: dropped");
				if (ev.type == DFI_CM_CONNREQ)
					fi_freeinfo(ev.req);
			}
		}
		n = dfi_halfreq_break(&me, lfd, h, (int)(sizeof(h) / sizeof(h[0])));
		if (!n && !refused)
			break;
		/* libfabric frees a reset request on its next look at it */
		for (int pass = 0; pass < 16 && n; pass++) {
			uint32_t event;
			uint8_t buf[sizeof(struct fi_eq_cm_entry) + DFI_PDATA_MAX];

			/* tcpx_cm_recv_req reads errno after a short recv:
			 * a stale EAGAIN would keep the handle */
			errno = 0;
			(void)fi_eq_read(q->eq, &event, buf, sizeof(buf), FI_PEEK);
			for (k = 0; k < n; k++)
				if (!dfi_halfreq_open(&h[k]))
					h[k--] = h[--n];
		}
		if (n)
			dfi_warn(DFI_SS_FABRIC, "%d request(s) half received on port %u outlived "
				 "their listener", n, ntohs(me.sin_port));
	}
	for (w = k = q->head; tcp && k < q->n; k++) {
		if (q->stash[k].type == DFI_CM_CONNREQ && q->stash[k].ctx == p->ctx)
			pep_refuse(p, q->stash[k].req);
		else
			q->stash[w++] = q->stash[k];
	}
	if (tcp && (q->n = w) == q->head)
		q->head = q->n = 0;
	atomic_store_explicit(&q->stashed, q->n - q->head, memory_order_relaxed);
	fi_close(&p->pep->fid);
	fi_freeinfo(p->info);
	free(p);
}

int dfi_pep_reject(struct dfi_pep *p, void *req, const void *pdata, size_t plen)
{
	struct fi_info *info = req;
	int rc = fi_reject(p->pep, info->handle, pdata, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_reject: %s", fi_strerror(-rc));
	fi_freeinfo(info);
	return rc;
}

int dfi_srx_open(struct dfi_fabric *f, size_t size, size_t iov_limit, struct dfi_srx **out)
{
	struct fi_rx_attr attr = { .caps = FI_MSG, .size = size, .iov_limit = iov_limit };
	struct dfi_srx *x = calloc(1, sizeof(*x));
	int rc;

	if (!x)
		return -ENOMEM;
	rc = fi_srx_context(f->domain, &attr, &x->srx, NULL);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_srx_context(size %zu): %s", size, fi_strerror(-rc));
		free(x);
		return rc;
	}
	*out = x;
	return 0;
}

void dfi_srx_close(struct dfi_srx *x)
{
	int rc;

	if (!x)
		return;
	rc = fi_close(&x->srx->fid);
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_close(srx): %s", fi_strerror(-rc));
	free(x);
}

int dfi_fep_open(struct dfi_fabric *f, struct dfi_eq *eq, void *req,
		 struct dfi_cq *txcq, struct dfi_cq *rxcq,
		 struct dfi_srx *srx, size_t tx_size, size_t rx_size, void *ctx,
		 struct dfi_fep **out)
{
	struct dfi_fep *e = dfi_arena_calloc(sizeof(*e));
	struct fi_info *info;
	int rc;

	if (!e)
		return -ENOMEM;
	e->sock = -1;
	if (req) {
		info = req;		/* the connection request's, ours now */
	} else {
		info = fi_dupinfo(f->info);
		if (!info) {
			dfi_arena_free(e);
			return -ENOMEM;
		}
		/* the peer is fi_connect's argument */
		free(info->dest_addr);
		info->dest_addr = NULL;
		info->dest_addrlen = 0;
		/* bind to our address, any port */
		if (info->src_addr)
			((struct sockaddr_in *)info->src_addr)->sin_port = 0;
	}
	if (tx_size)
		info->tx_attr->size = tx_size;
	if (rx_size)
		info->rx_attr->size = rx_size;
	rc = fi_endpoint(f->domain, info, &e->ep, ctx);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_endpoint: %s", fi_strerror(-rc));
		goto err;
	}
	rc = fi_ep_bind(e->ep, &eq->eq->fid, 0);
	if (!rc && srx)
		rc = fi_ep_bind(e->ep, &srx->srx->fid, 0);
	if (!rc && txcq == rxcq)
		rc = fi_ep_bind(e->ep, &txcq->cq->fid, FI_TRANSMIT | FI_RECV);
	else {
		if (!rc)
			rc = fi_ep_bind(e->ep, &txcq->cq->fid, FI_TRANSMIT);
		if (!rc)
			rc = fi_ep_bind(e->ep, &rxcq->cq->fid, FI_RECV);
	}
	if (!rc)
		rc = fi_enable(e->ep);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "binding/enabling the endpoint: %s", fi_strerror(-rc));
		goto err_ep;
	}
	/* The info is not kept: freed now, its ~1 KiB of small blocks is
	 * what the next endpoint's fi_dupinfo gets back, so libfabric's
	 * endpoints lie in the heap one after the other, as in a raw
	 * program; kept, they were spaced 1.1 KiB wider, and the walk of
	 * every endpoint on each CQ read (libfabric 1.17 tcp) missed more. */
	fi_freeinfo(info);
	*out = e;
	return 0;
err_ep:
	fi_close(&e->ep->fid);
err:
	if (!req)
		fi_freeinfo(info);
	dfi_arena_free(e);
	return rc;
}

int dfi_fep_connect(struct dfi_fep *e, const struct sockaddr_in *dest, const void *pdata,
		    size_t plen)
{
	int rc = fi_connect(e->ep, dest, pdata, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_connect: %s", fi_strerror(-rc));
	return rc;
}

int dfi_fep_accept(struct dfi_fep *e, const void *pdata, size_t plen)
{
	int rc = fi_accept(e->ep, pdata, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_accept: %s", fi_strerror(-rc));
	return rc;
}

int dfi_fep_shutdown(struct dfi_fep *e)
{
	return fi_shutdown(e->ep, 0);
}

void dfi_fep_cancel(struct dfi_fep *e, void *ctx)
{
	(void)fi_cancel(&e->ep->fid, ctx);
}

void dfi_fep_close(struct dfi_fep *e)
{
	int rc;

	if (!e)
		return;
	rc = fi_close(&e->ep->fid);
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_close(ep): %s", fi_strerror(-rc));
	dfi_arena_free(e);
}

int dfi_fep_peer(struct dfi_fep *e, struct sockaddr_in *peer)
{
	size_t len = sizeof(*peer);

	return fi_getpeer(e->ep, peer, &len);
}

/* ------------------------------------------------------------------- CQs */

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
	struct fi_cq_data_entry none;

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
	struct fi_cq_attr attr = { .size = size, .format = FI_CQ_FORMAT_DATA };
	const char *wait = dfi_param_str(DFI_P_CQ_WAIT);
	struct dfi_cq *c = calloc(1, sizeof(*c));
	int rc = -ENOTSUP;

	if (!c)
		return -ENOMEM;
	c->fabric = f->fabric;
	c->fd = -1;
	if (strcmp(wait, "pollfd") == 0) {
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
	if (c->cq)
		fi_close(&c->cq->fid);
	if (c->mirror) {
		if (c->fd >= 0)
			close(c->fd);	/* ours; an FI_WAIT_FD CQ's is the provider's */
		mirror_free(c->mirror);
	}
	free(c);
}

_Static_assert(sizeof(struct dfi_comp) == sizeof(struct fi_cq_data_entry) &&
	       offsetof(struct dfi_comp, ctx) == offsetof(struct fi_cq_data_entry, op_context) &&
	       offsetof(struct dfi_comp, err) == offsetof(struct fi_cq_data_entry, flags) &&
	       offsetof(struct dfi_comp, len) == offsetof(struct fi_cq_data_entry, len) &&
	       offsetof(struct dfi_comp, data) == offsetof(struct fi_cq_data_entry, data),
	       "fi_cq_read writes struct dfi_comp arrays as FI_CQ_FORMAT_DATA");

/* fi_cq_read writes straight into out (FI_CQ_FORMAT_DATA entries, see
 * struct dfi_comp), and each entry's flags word becomes err = 0 and imm: no copy,
 * and no 1.5 KiB bounce buffer on the stack, a page more for the
 * completion path to touch after the read's system calls. */
DFI_HOT int dfi_cq_read(struct dfi_cq *c, struct dfi_comp *out, int n)
{
	int got = 0;

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
			out[got].ctx = err.op_context;
			out[got].len = err.len;
			out[got].err = err.err ? err.err : EIO;
			out[got].imm = 0;
			got++;
			continue;
		}
		if (r < 0)
			return got ? got : (int)r;
		for (ssize_t i = 0; i < r; i++) {
			uint64_t flags;

			memcpy(&flags, &out[got].err, sizeof(flags));
			out[got].err = 0;
			out[got].imm = (flags & FI_REMOTE_CQ_DATA) != 0;
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
	struct fid *fids[1] = { &c->cq->fid };
	int rc;

	if (c->ahead_pos < c->ahead_n)
		return -EAGAIN;		/* read ahead, not handed out yet */
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
 * which takes the socket out of its list, and a sync (cm.c, the mirror). */
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

/* ---------------------------------------------------------------- posts */

static void *sge_desc(const struct dfi_sge *sg)
{
	return sg->mr ? fi_mr_desc(sg->mr->mr) : NULL;
}

static int fill_iov(const struct dfi_sge *sg, int n, struct iovec *iov, void **desc)
{
	if (n > DFI_MAX_SGE)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		iov[i].iov_base = sg[i].addr;
		iov[i].iov_len = sg[i].len;
		desc[i] = sge_desc(&sg[i]);
	}
	return 0;
}

static int post_rc(ssize_t rc)
{
	return rc == -FI_EAGAIN ? -EAGAIN : (int)rc;
}

/* One segment (or none) goes by fi_send/fi_recv/fi_write/fi_read: on
 * libfabric 1.17 tcp the vector calls cost about 150 instructions more per
 * post (callgrind, 64 B ping-pong), and one segment is the common case. */
DFI_HOT static int msg(struct fid_ep *ep, const struct dfi_sge *sg, int n, void *ctx, bool send)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	int rc;

	if (n <= 1) {
		void *buf = n ? sg[0].addr : NULL, *d = n ? sge_desc(&sg[0]) : NULL;
		size_t len = n ? sg[0].len : 0;

		return post_rc(send ? fi_send(ep, buf, len, d, 0, ctx) :
				      fi_recv(ep, buf, len, d, 0, ctx));
	}
	rc = fill_iov(sg, n, iov, desc);
	if (rc)
		return rc;
	return post_rc(send ? fi_sendv(ep, iov, desc, (size_t)n, 0, ctx) :
			      fi_recvv(ep, iov, desc, (size_t)n, 0, ctx));
}

DFI_HOT int dfi_post_send(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(e->ep, sg, n, ctx, true);
}

/* fi_inject takes one buffer: several segments are gathered first. */
DFI_HOT int dfi_post_inject(struct dfi_fep *e, const struct dfi_sge *sg, int n)
{
	uint8_t buf[DFI_INJECT_MAX];
	size_t off = 0;

	if (n <= 1)
		return post_rc(fi_inject(e->ep, n ? sg[0].addr : NULL, n ? sg[0].len : 0, 0));
	for (int i = 0; i < n; i++) {
		if (sg[i].len > sizeof(buf) - off)
			return -EMSGSIZE;
		memcpy(buf + off, sg[i].addr, sg[i].len);
		off += sg[i].len;
	}
	return post_rc(fi_inject(e->ep, buf, off, 0));
}

DFI_HOT int dfi_post_recv(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(e->ep, sg, n, ctx, false);
}

int dfi_srx_post_recv(struct dfi_srx *x, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(x->srx, sg, n, ctx, false);
}

/* Several segments: one fi_writemsg/fi_readmsg (kept apart so that the
 * one-segment post below builds none of this). */
static int rma_msg(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		   uint32_t rkey, void *ctx, bool write)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	size_t total = 0;
	struct fi_rma_iov riov;
	struct fi_msg_rma msg = {
		.msg_iov = iov, .desc = desc, .iov_count = (size_t)n,
		.rma_iov = &riov, .rma_iov_count = 1, .context = ctx,
	};
	int rc = fill_iov(sg, n, iov, desc);

	if (rc)
		return rc;
	for (int i = 0; i < n; i++)
		total += sg[i].len;
	riov = (struct fi_rma_iov){ .addr = raddr, .len = total, .key = rkey };
	return post_rc(write ? fi_writemsg(e->ep, &msg, FI_COMPLETION) :
			       fi_readmsg(e->ep, &msg, FI_COMPLETION));
}

DFI_HOT static int rma(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		       uint32_t rkey, void *ctx, bool write)
{
	if (n != 1)
		return rma_msg(e, sg, n, raddr, rkey, ctx, write);
	return post_rc(write ? fi_write(e->ep, sg[0].addr, sg[0].len, sge_desc(&sg[0]), 0,
					raddr, rkey, ctx) :
			       fi_read(e->ep, sg[0].addr, sg[0].len, sge_desc(&sg[0]), 0,
				       raddr, rkey, ctx));
}

DFI_HOT int dfi_post_write(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
			   uint32_t rkey, void *ctx)
{
	return rma(e, sg, n, raddr, rkey, ctx, true);
}

int dfi_post_atomic(struct dfi_fep *e, enum dfi_atomic_op op, const uint64_t *operand,
		    const uint64_t *compare, uint64_t *result, struct dfi_mr *result_mr,
		    uint64_t raddr, uint32_t rkey, void *ctx)
{
	void *rdesc = result_mr ? fi_mr_desc(result_mr->mr) : NULL;

	if (op == DFI_ATOMIC_FADD)
		return post_rc(fi_fetch_atomic(e->ep, operand, 1, NULL, result, rdesc, 0, raddr,
					       rkey, FI_UINT64, FI_SUM, ctx));
	return post_rc(fi_compare_atomic(e->ep, operand, 1, NULL, compare, NULL, result, rdesc,
					 0, raddr, rkey, FI_UINT64, FI_CSWAP, ctx));
}

int dfi_post_senddata(struct dfi_fep *e, uint64_t data, void *ctx)
{
	return post_rc(fi_senddata(e->ep, NULL, 0, NULL, data, 0, ctx));
}

DFI_HOT int dfi_post_read(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
			  uint32_t rkey, void *ctx)
{
	return rma(e, sg, n, raddr, rkey, ctx, false);
}
