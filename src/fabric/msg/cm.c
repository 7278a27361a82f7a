/* The MSG backend's connection management: the IA's event queue (libfabric's
 * EQ), listeners (passive endpoints), shared receive contexts and active
 * endpoints, one per DAT endpoint. */
#include "msg.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/param.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static int msg_eq_open(struct dfi_fabric *f, struct dfi_eq **out)
{
	/* FI_WRITE: emulated atomics' answers become events (atomic.c) */
	struct fi_eq_attr attr = { .size = 4096, .wait_obj = FI_WAIT_FD, .flags = FI_WRITE };
	struct msg_eq *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	q->base.be = &dfi_msg_backend;
	q->fabric = f->fabric;
	q->late_ms = dfi_param_int(DFI_P_FAULT_LATE_CONNECTED_MS);
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
	*out = &q->base;
	return 0;
}

static void msg_connreq_free(void *req)
{
	fi_freeinfo(MSG_REQ(req)->info);
	free(req);
}

static void msg_eq_close(struct dfi_eq *eq)
{
	struct msg_eq *q = MSG_EQ(eq);

	/* every listener was closed first, taking its requests out */
	for (int i = q->head; i < q->n; i++)
		if (q->stash[i].type == DFI_CM_CONNREQ)
			msg_connreq_free(q->stash[i].req);
	free(q->stash);
	free(q->late);
	fi_close(&q->eq->fid);
	free(q);
}

static int msg_eq_fd(struct dfi_eq *q)
{
	return MSG_EQ(q)->fd;
}

static int msg_eq_trywait(struct dfi_eq *eq)
{
	struct msg_eq *q = MSG_EQ(eq);
	struct fid *fids[1] = { &q->eq->fid };
	int rc;

	if (atomic_load_explicit(&q->stashed, memory_order_relaxed))
		return -EAGAIN;		/* read ahead by dfi_pep_close */
	if (q->n_late)
		return -EAGAIN;		/* held by the fault switch: look again */
	rc = fi_trywait(q->fabric, fids, 1);

	return rc == -FI_EAGAIN ? -EAGAIN : rc;
}

/* The DAT layer's context of what an event names: a listener's is its
 * fid's, an endpoint's fid names its msg_fep. */
static void *ev_ctx(const struct fid *fid)
{
	if (!fid)
		return NULL;
	return fid->fclass == FI_CLASS_EP ? MSG_FEP(fid->context)->ctx : fid->context;
}

/* A connection request, wrapped with its trailer's news (a struct msg_req
 * as ev->req), or refused without memory: 1 or 0. */
static int eq_connreq(struct fi_eq_cm_entry *ent, struct dfi_cm_event *ev)
{
	struct msg_req *r = malloc(sizeof(*r));

	if (!r) {
		dfi_err(DFI_SS_FABRIC, "no memory for a connection request: refused");
		fi_reject(container_of(ent->fid, struct fid_pep, fid), ent->info->handle, NULL, 0);
		fi_freeinfo(ent->info);
		return 0;
	}
	r->info = ent->info;
	memset(&r->peer, 0, sizeof(r->peer));
	ev->plen = dfi_msg_atom_strip(ev->pdata, ev->plen, &r->peer);
	ev->type = DFI_CM_CONNREQ;
	ev->req = r;
	return 1;
}

/* The next event of libfabric's queue (dfi_eq_read's results). */
static int eq_read_fi(struct msg_eq *q, struct dfi_cm_event *ev)
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
		ev->ctx = ev_ctx(err.fid);
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
	if (event == FI_NOTIFY)		/* an atomic's answer (atomic.c) */
		return dfi_msg_atom_event(raw, (size_t)n, ev);
	ev->ctx = ev_ctx(ent->fid);
	if ((size_t)n > sizeof(*ent)) {
		ev->plen = (size_t)n - sizeof(*ent);
		if (ev->plen > sizeof(ev->pdata))
			ev->plen = sizeof(ev->pdata);
		memcpy(ev->pdata, raw + sizeof(*ent), ev->plen);
	}
	switch (event) {
	case FI_CONNREQ:
		return eq_connreq(ent, ev);
	case FI_CONNECTED:
		ev->type = DFI_CM_CONNECTED;
		if (ent->fid && ent->fid->fclass == FI_CLASS_EP) {
			struct msg_fep *e = ent->fid->context;
			struct msg_peer peer;

			ev->plen = dfi_msg_atom_strip(ev->pdata, ev->plen, &peer);
			if (!e->passive)	/* the accepting side had the request's */
				dfi_msg_atom_peer(e, &peer);
			q->last_passive = e->passive;
		}
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

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The fault switch (DAPL_OFI_FAULT_LATE_CONNECTED_MS): ev, an accepting
 * side's FI_CONNECTED, is held; false without memory (it goes now). */
static bool late_hold(struct msg_eq *q, const struct dfi_cm_event *ev)
{
	if (q->n_late == q->cap_late) {
		int cap = q->cap_late ? 2 * q->cap_late : 8;
		struct msg_late *more = realloc(q->late, (size_t)cap * sizeof(*more));

		if (!more)
			return false;
		q->late = more;
		q->cap_late = cap;
	}
	q->late[q->n_late].ev = *ev;
	q->late[q->n_late].at = ms_now() + (uint64_t)q->late_ms;
	q->n_late++;
	return true;
}

static int msg_eq_read(struct dfi_eq *eq, struct dfi_cm_event *ev)
{
	struct msg_eq *q = MSG_EQ(eq);
	int rc;

	if (q->head < q->n) {
		*ev = q->stash[q->head++];
		if (q->head == q->n)
			q->head = q->n = 0;
		atomic_store_explicit(&q->stashed, q->n - q->head, memory_order_relaxed);
		return 1;
	}
	if (q->n_late && ms_now() >= q->late[0].at) {
		*ev = q->late[0].ev;
		memmove(q->late, q->late + 1, (size_t)(--q->n_late) * sizeof(*q->late));
		return 1;
	}
	while ((rc = eq_read_fi(q, ev)) == 1 && q->late_ms > 0 && ev->type == DFI_CM_CONNECTED &&
	       q->last_passive && late_hold(q, ev))
		q->last_passive = false;
	q->last_passive = false;
	return rc;
}

/* Keep ev for dfi_eq_read; false without memory. */
static bool eq_stash(struct msg_eq *q, const struct dfi_cm_event *ev)
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

static void msg_connreq_peer(void *req, struct sockaddr_in *peer)
{
	struct fi_info *info = MSG_REQ(req)->info;

	memset(peer, 0, sizeof(*peer));
	if (info->dest_addr && info->dest_addrlen >= sizeof(*peer))
		memcpy(peer, info->dest_addr, sizeof(*peer));
}

static int msg_pep_listen(struct dfi_fabric *f, struct dfi_eq *eq, uint16_t port, void *ctx,
			  struct dfi_pep **out, uint16_t *bound)
{
	struct msg_pep *p = calloc(1, sizeof(*p));
	struct sockaddr_in *sin;
	size_t len = sizeof(*sin);
	int rc;

	if (!p)
		return -ENOMEM;
	p->base.be = &dfi_msg_backend;
	p->eq = MSG_EQ(eq);
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
		rc = fi_pep_bind(p->pep, &p->eq->eq->fid, 0);
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
	*out = &p->base;
	return 0;
}

/* Refuse a request of p that will never become a CR. */
static void pep_refuse(struct msg_pep *p, void *req)
{
	fi_reject(p->pep, MSG_REQ(req)->info->handle, NULL, 0);
	msg_connreq_free(req);
}

/* libfabric 1.17's tcp provider frees a listener under the requests it
 * has accepted and not delivered (halfreq.c says how).  So, with the
 * caller's lock that every read of the EQ takes: the requests it has
 * delivered into the EQ are taken out and refused while the listener
 * lives (the other events wait in the stash for dfi_eq_read); once it is
 * closed, those it holds half read are reset, and the EQ run until
 * libfabric has freed them (its error path touches no listener). */
static void msg_pep_close(struct dfi_pep *pep)
{
	struct msg_pep *p = MSG_PEP(pep);
	struct msg_eq *q;
	struct sockaddr_in me;
	size_t len = sizeof(me);
	struct dfi_cm_event ev;
	struct dfi_halfreq h[64];
	int n, k, w, lfd;
	bool tcp;

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
					msg_connreq_free(ev.req);
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

static int msg_pep_reject(struct dfi_pep *p, void *req, const void *pdata, size_t plen)
{
	int rc = fi_reject(MSG_PEP(p)->pep, MSG_REQ(req)->info->handle, pdata, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_reject: %s", fi_strerror(-rc));
	msg_connreq_free(req);
	return rc;
}

static int msg_srx_open(struct dfi_fabric *f, size_t size, size_t iov_limit,
			struct dfi_srx **out)
{
	struct fi_rx_attr attr = { .caps = FI_MSG, .size = size, .iov_limit = iov_limit };
	struct msg_srx *x = calloc(1, sizeof(*x));
	int rc;

	if (!x)
		return -ENOMEM;
	x->base.be = &dfi_msg_backend;
	x->f = f;
	rc = fi_srx_context(f->domain, &attr, &x->srx, NULL);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_srx_context(size %zu): %s", size, fi_strerror(-rc));
		free(x);
		return rc;
	}
	*out = &x->base;
	return 0;
}

static void msg_srx_close(struct dfi_srx *sx)
{
	struct msg_srx *x = MSG_SRX(sx);
	int rc;

	rc = fi_close(&x->srx->fid);
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_close(srx): %s", fi_strerror(-rc));
	free(x);
}

/* tcp reports a shared context's completion on the CQ its receiving
 * endpoint bound with FI_RECV: a CQ of the endpoint's own tells which. */
static int msg_srx_cq_open(struct dfi_srx *x, size_t size, struct dfi_cq **cq)
{
	return dfi_cq_open(MSG_SRX(x)->f, size, cq);
}

static int msg_fep_open(struct dfi_fabric *f, struct dfi_eq *eq, void *req,
			struct dfi_cq *txcq, struct dfi_cq *rxcq,
			struct dfi_srx *srx, size_t tx_size, size_t rx_size, void *ctx,
			struct dfi_fep **out)
{
	struct msg_fep *e = dfi_arena_calloc(sizeof(*e));
	struct fi_info *info;
	int rc;

	if (!e)
		return -ENOMEM;
	e->base.be = &dfi_msg_backend;
	e->sock = -1;
	e->ctx = ctx;
	if (req) {
		info = MSG_REQ(req)->info;	/* the request's, ours now */
		e->passive = true;
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
	rc = dfi_msg_atom_new(f, e, MSG_EQ(eq)->eq);
	if (rc)
		goto err;
	if (e->atom && req)
		dfi_msg_atom_peer(e, &MSG_REQ(req)->peer);
	/* room for the mailbox writes too: ours, and our answers to the
	 * peer's, one per slot each way at most (atomic.c) */
	if (e->atom && tx_size)
		tx_size += 2 * DFI_MSG_MBOX_SLOTS;
	if (tx_size)
		info->tx_attr->size = f->lim.tx_size && tx_size > f->lim.tx_size ? f->lim.tx_size :
										  tx_size;
	if (rx_size)
		info->rx_attr->size = rx_size;
	rc = fi_endpoint(f->domain, info, &e->ep, e);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_endpoint: %s", fi_strerror(-rc));
		goto err_atom;
	}
	rc = fi_ep_bind(e->ep, &MSG_EQ(eq)->eq->fid, 0);
	if (!rc && srx)
		rc = fi_ep_bind(e->ep, &MSG_SRX(srx)->srx->fid, 0);
	if (!rc)
		rc = dfi_cq_bind(e->ep, txcq, rxcq);
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
	free(req);		/* its info is freed above */
	*out = &e->base;
	return 0;
err_ep:
	fi_close(&e->ep->fid);
err_atom:
	dfi_msg_atom_free(e);
err:
	if (!req)
		fi_freeinfo(info);
	dfi_arena_free(e);
	return rc;
}

static int msg_fep_connect(struct dfi_fep *e, const struct sockaddr_in *dest, const void *pdata,
			   size_t plen)
{
	uint8_t buf[DFI_PDATA_MAX];
	int rc;

	plen = dfi_msg_atom_pdata(MSG_FEP(e), pdata, plen, buf);
	rc = fi_connect(MSG_FEP(e)->ep, dest, plen ? buf : NULL, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_connect: %s", fi_strerror(-rc));
	return rc;
}

static int msg_fep_accept(struct dfi_fep *e, const void *pdata, size_t plen)
{
	uint8_t buf[DFI_PDATA_MAX];
	int rc;

	plen = dfi_msg_atom_pdata(MSG_FEP(e), pdata, plen, buf);
	rc = fi_accept(MSG_FEP(e)->ep, plen ? buf : NULL, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_accept: %s", fi_strerror(-rc));
	return rc;
}

static int msg_fep_shutdown(struct dfi_fep *e)
{
	return fi_shutdown(MSG_FEP(e)->ep, 0);
}

/* shutdown(2), not fi_shutdown: the provider finds the socket's end in its
 * receive path (EPOLLIN, then a read of 0), which ends a half-received
 * message or read response once; fi_shutdown's flush does not (dto.c,
 * dfi_ep_cut_reads). */
static int msg_fep_cut(struct dfi_fep *fe)
{
	int fd = dfi_msg_sock(MSG_FEP(fe));

	if (fd < 0)
		return -ENOTSUP;
	if (shutdown(fd, SHUT_RDWR) && errno != ENOTCONN)
		return -errno;
	return 0;
}

static void msg_fep_cancel(struct dfi_fep *e, void *ctx)
{
	(void)fi_cancel(&MSG_FEP(e)->ep->fid, ctx);
}

static void msg_fep_close(struct dfi_fep *fe)
{
	struct msg_fep *e = MSG_FEP(fe);
	int rc;

	dfi_msg_atom_free(e);	/* first: no answer is written for it after */
	rc = fi_close(&e->ep->fid);
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_close(ep): %s", fi_strerror(-rc));
	dfi_arena_free(e);
}

static int msg_fep_peer(struct dfi_fep *e, struct sockaddr_in *peer)
{
	size_t len = sizeof(*peer);

	return fi_getpeer(MSG_FEP(e)->ep, peer, &len);
}

static int msg_open(struct dfi_fabric *f, const struct sockaddr_in *addr, char *err,
		    size_t errlen)
{
	(void)addr;
	if (f->lim.atomic_emul && dfi_msg_atomics_open(f)) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

const struct dfi_backend dfi_msg_backend = {
	.name = "msg",
	.open = msg_open,
	.close = dfi_msg_atomics_close,
	.cq_data = dfi_msg_cq_data,
	.eq_open = msg_eq_open,
	.eq_close = msg_eq_close,
	.eq_fd = msg_eq_fd,
	.eq_trywait = msg_eq_trywait,
	.eq_read = msg_eq_read,
	.connreq_free = msg_connreq_free,
	.connreq_peer = msg_connreq_peer,
	.pep_listen = msg_pep_listen,
	.pep_close = msg_pep_close,
	.pep_reject = msg_pep_reject,
	.srx_open = msg_srx_open,
	.srx_close = msg_srx_close,
	.srx_post_recv = dfi_msg_srx_post_recv,
	.srx_cq_open = msg_srx_cq_open,
	.fep_open = msg_fep_open,
	.fep_connect = msg_fep_connect,
	.fep_accept = msg_fep_accept,
	.fep_shutdown = msg_fep_shutdown,
	.fep_cancel = msg_fep_cancel,
	.fep_close = msg_fep_close,
	.fep_peer = msg_fep_peer,
	.fep_arm_liveness = dfi_msg_arm_liveness,
	.fep_aborted = dfi_msg_aborted,
	.fep_cut = msg_fep_cut,
	.post_send = dfi_msg_post_send,
	.post_inject = dfi_msg_post_inject,
	.post_recv = dfi_msg_post_recv,
	.post_write = dfi_msg_post_write,
	.post_read = dfi_msg_post_read,
	.post_senddata = dfi_msg_post_senddata,
	.post_atomic = dfi_msg_post_atomic,
	.post_atomic_emul = dfi_msg_post_atomic_emul,
};
