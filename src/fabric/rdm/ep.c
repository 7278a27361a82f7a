/*
 * The RDM backend's endpoints and connection management (docs/rdm.md):
 * the IA's address vector and shared FI_EP_RDM endpoints, connection ids,
 * and the event queue, listeners and connections of rcm.c translated into
 * the fabric layer's CM events.
 */
#include "rdm.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/param.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- the fabric */

static uint32_t rdm_serve_atomic(void *arg, uint8_t op, uint64_t addr, uint32_t key,
				 uint64_t operand, uint64_t compare, uint64_t *old)
{
	return dfi_mr_atomic(arg, op == DFI_RDM_ATOMIC_CSWAP ? DFI_ATOMIC_CSWAP : DFI_ATOMIC_FADD,
			     addr, key, operand, compare, old);
}

static int rdm_open(struct dfi_fabric *f, const struct sockaddr_in *addr, char *err,
		    size_t errlen)
{
	struct fi_av_attr attr = { .type = FI_AV_TABLE };
	struct rdm_fabric *rf = calloc(1, sizeof(*rf));
	long timeout = dfi_param_int(DFI_P_PEER_TIMEOUT_MS);
	int rc;

	if (!rf) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rf->f = f;
	rf->rx_iov = f->info->rx_attr->iov_limit;
	rdm_sinks_init(rf);
	rf->lose = (int)dfi_param_int(DFI_P_FAULT_RDM_LOSE);
	if (rf->lose >= 0)
		dfi_warn(DFI_SS_FABRIC, "DAPL_OFI_FAULT_RDM_LOSE=%d: message %d of every "
			 "connection is lost", rf->lose, rf->lose);
	/* A provider whose CQs have no wait fd (shm, efa in 1.17), or take
	 * FI_WAIT_FD but cannot hand the fd out (rxd: FI_GETWAIT is
	 * ENOSYS): its CQs are polled, by the progress thread and by
	 * waiters (docs/rdm.md) */
	{
		struct fi_cq_attr ca = { .size = 1, .format = FI_CQ_FORMAT_TAGGED,
					 .wait_obj = FI_WAIT_FD };
		struct fid_cq *cq;
		int fd;

		if (fi_cq_open(f->domain, &ca, &cq, NULL) == 0) {
			f->lim.polled = fi_control(&cq->fid, FI_GETWAIT, &fd) != 0;
			fi_close(&cq->fid);
		} else {
			f->lim.polled = true;
		}
	}
	if (strcmp(f->lim.prov_name, "shm") == 0)
		dfi_rdm_shm_unlink_at_exit();
	/* shm puts a message in its peer's queue before the post returns:
	 * a DREQ after it cannot overtake it, and the peer's drain places it
	 * (bye.c) */
	rf->bye = strcmp(f->lim.prov_name, "shm") != 0;
	pthread_mutex_init(&rf->lock, NULL);
	rc = fi_av_open(f->domain, &attr, &rf->av, NULL);
	if (rc) {
		snprintf(err, errlen, "fi_av_open: %s", fi_strerror(-rc));
		goto err;
	}
	/* the connection manager listens and connects on the IA's address,
	 * as the MSG backend's libfabric CM does */
	rc = dfi_rcm_open(addr, timeout > 0 ? (unsigned)timeout : 0, &rf->cm);
	if (rc) {
		snprintf(err, errlen, "the RDM connection manager on the IA's address: %s",
			 strerror(-rc));
		goto err_av;
	}
	/* the IB extension's atomics without FI_ATOMIC: over the control
	 * channel, applied by the target's progress (docs/rdm.md, section 8) */
	dfi_rcm_serve_atomics(rf->cm, rdm_serve_atomic, f);
	dfi_rcm_serve_goodbye(rf->cm, rdm_bye_came, rf);
	f->priv = rf;
	return 0;
err_av:
	fi_close(&rf->av->fid);
err:
	pthread_mutex_destroy(&rf->lock);
	free(rf);
	return rc;
}

static void rdm_close(struct dfi_fabric *f)
{
	struct rdm_fabric *rf = f->priv;

	if (!rf)
		return;
	/* the IA's objects went before it: what is left is unused */
	rdm_sinks_drop(rf, NULL);
	for (struct rdm_ep *r = rf->eps, *next; r; r = next) {
		next = r->next;
		fi_close(&r->ep->fid);
		free(r);
	}
	for (struct rdm_kept_cq *k = rf->kept, *next; k; k = next) {
		next = k->next;
		fi_close(&k->cq->fid);
		free(k);
	}
	for (struct rdm_peer *p = rf->peers, *next; p; p = next) {
		next = p->next;
		free(p);
	}
	rdm_bye_boards_free(rf);
	dfi_rcm_close(rf->cm);
	fi_close(&rf->av->fid);
	free(rf->slots);
	pthread_mutex_destroy(&rf->lock);
	free(rf);
	f->priv = NULL;
}

/* ------------------------------------------------------ connection ids */

/* A free id for e, with its slot's generation (lock held).  0: none. */
static uint32_t id_get(struct rdm_fabric *rf, struct rdm_fep *e)
{
	uint32_t id = rf->free_head;

	if (!id) {
		uint32_t n = rf->nslots ? 2 * rf->nslots : 64;
		struct rdm_slot *s;

		if (n > (1u << 24))	/* 16 M connections per IA */
			return 0;
		s = realloc(rf->slots, n * sizeof(*s));
		if (!s)
			return 0;
		memset(s + rf->nslots, 0, (n - rf->nslots) * sizeof(*s));
		for (uint32_t i = rf->nslots; i < n; i++)
			s[i].next_free = i + 2 <= n ? i + 2 : 0;
		rf->free_head = rf->nslots + 1;
		rf->free_tail = n;
		rf->slots = s;
		rf->nslots = n;
		id = rf->free_head;
	}
	rf->free_head = rf->slots[id - 1].next_free;
	if (!rf->free_head)
		rf->free_tail = 0;
	rf->slots[id - 1].fep = e;
	return id;
}

/* The id goes back, its generation bumped, to the end of the free list:
 * a message still in flight for the old one matches no receive of the
 * next holder, and a generation comes round again only after 16384
 * turns through every free id (lock held). */
static void id_put(struct rdm_fabric *rf, uint32_t id)
{
	struct rdm_slot *s = &rf->slots[id - 1];

	s->fep = NULL;
	s->gen = (uint16_t)((s->gen + 1) & RDM_GEN_MASK);
	s->next_free = 0;
	if (rf->free_tail)
		rf->slots[rf->free_tail - 1].next_free = id;
	else
		rf->free_head = id;
	rf->free_tail = id;
}

/* ------------------------------------------------- shared RDM endpoints */

/* Room on r for a DAT EP of this receive queue depth (the provider's
 * depth, granted at the open: info.c asks 16384, shm gives 1024): a posted
 * receive holds one of the endpoint's receive entries until a message
 * takes it, and a post that finds none never gets one (shm and
 * tcp;ofi_rxm answer EAGAIN for good: 1000 connections of 16 receives
 * each on one endpoint did not connect).  Transmit entries come back with
 * their completions: a post that finds none retries (post.c), and is
 * refused as a full queue after 2 s.  A quarter of the depth stays for
 * the messages that arrive before their receive (shm holds them in the
 * same entries).  An EP alone always fits. */
#define RDM_EPS_PER_CQ_PAIR	4	/* then the least used is shared beyond its depth */

static bool rep_fits(const struct rdm_fabric *rf, const struct rdm_ep *r, size_t rx)
{
	const struct dfi_fabric_limits *l = &rf->f->lim;

	return !r->rx_used || !l->rx_size || r->rx_used + rx <= l->rx_size - l->rx_size / 4;
}

int rdm_ep_open(struct rdm_fabric *rf, struct fid_cq *tx, struct fid_cq *rx, struct fid_ep **out,
		uint8_t *addr, size_t *len)
{
	struct dfi_fabric *f = rf->f;
	struct fid_ep *ep;
	int rc = fi_endpoint(f->domain, f->info, &ep, NULL);

	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_endpoint(RDM): %s", fi_strerror(-rc));
		return rc;
	}
	rc = fi_ep_bind(ep, &rf->av->fid, 0);
	if (!rc)
		rc = fi_ep_bind(ep, &tx->fid, tx == rx ? FI_TRANSMIT | FI_RECV : FI_TRANSMIT);
	if (!rc && tx != rx)
		rc = fi_ep_bind(ep, &rx->fid, FI_RECV);
	if (!rc)
		rc = fi_enable(ep);
	if (!rc)
		rc = fi_getname(&ep->fid, addr, len);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "binding/enabling/naming an RDM endpoint: %s",
			fi_strerror(-rc));
		fi_close(&ep->fid);
		return rc;
	}
	*out = ep;
	return 0;
}

/* An endpoint on this CQ pair with room for tx and rx, opened if none
 * has (lock held). */
static int rep_get(struct rdm_fabric *rf, struct dfi_cq *txcq, struct dfi_cq *rxcq, size_t tx,
		   size_t rx, struct rdm_ep **out)
{
	struct dfi_fabric *f = rf->f;
	struct rdm_ep *r, *least = NULL;
	int rc, n = 0;

	/* Not more than RDM_EPS_PER_CQ_PAIR: each is a provider endpoint (a
	 * region of a few MiB on shm, whose progress crashed beside 167 of
	 * them; about 90 MiB of buffers on tcp;ofi_rxm, which also connects
	 * each pair of them to a peer's anew).  Beyond, a receive may find the
	 * queue full: DAT_INSUFFICIENT_RESOURCES after 2 s, never a hang. */
	for (r = rf->eps; r; r = r->next) {
		if (r->txcq != txcq || r->rxcq != rxcq)
			continue;
		n++;
		if (!least || r->rx_used < least->rx_used)
			least = r;
		if (rep_fits(rf, r, rx))
			break;
	}
	if (!r && n >= RDM_EPS_PER_CQ_PAIR)
		r = least;
	if (r) {
		r->refs++;
		r->tx_used += tx;
		r->rx_used += rx;
		*out = r;
		return 0;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->addr_len = sizeof(r->addr);
	rc = rdm_ep_open(rf, txcq->cq, rxcq->cq, &r->ep, r->addr, &r->addr_len);
	if (rc) {
		free(r);
		return rc;
	}
	r->txcq = txcq;
	r->rxcq = rxcq;
	r->refs = 1;
	r->tx_used = tx;
	r->rx_used = rx;
	dfi_dbg(DFI_SS_FABRIC, "RDM endpoint %d on CQs %p/%p opened (receive queue %zu)", n + 1,
		(void *)txcq, (void *)rxcq, f->lim.rx_size);
	r->next = rf->eps;
	rf->eps = r;
	*out = r;
	return 0;
}

/* Its last user gone, it stays open for the next one on the same CQs, and
 * closes once both its CQs' EVDs are gone (rdm_cq_closing). */
static void rep_put(struct rdm_fabric *rf, struct rdm_ep *r, size_t tx, size_t rx)
{
	(void)rf;
	r->refs--;
	r->tx_used -= tx;
	r->rx_used -= rx;
}

static void kept_put(struct rdm_fabric *rf, struct rdm_kept_cq *k)
{
	struct rdm_kept_cq **pp;

	if (--k->eps)
		return;
	for (pp = &rf->kept; *pp != k; pp = &(*pp)->next)
		;
	*pp = k->next;
	fi_close(&k->cq->fid);
	free(k);
}

/*
 * A CQ's EVD is gone, and with it every DAT EP that used it (the DAT layer
 * frees an EVD only once no EP uses it).  An endpoint bound to it alone
 * closes; one also bound to a CQ that lives on stays open, unused, with
 * this CQ kept, until that other CQ goes too: tcp;ofi_rxm 1.17 leaves a
 * closed endpoint's inner CQ in the wait set of each CQ it was bound to
 * (rxm_ep_close never deletes what rxm_ep_wait_fd_add added), and the
 * next fi_trywait on the CQ that lives on would call into freed memory.
 * True: the CQ is kept, and closes with its last endpoint.
 */
static bool rdm_cq_closing(struct dfi_fabric *f, struct dfi_cq *cq)
{
	struct rdm_fabric *rf = f->priv;
	struct rdm_kept_cq *k = NULL;
	struct rdm_ep **pp, *r;

	if (!rf)
		return false;
	pthread_mutex_lock(&rf->lock);
	for (pp = &rf->eps; (r = *pp);) {
		if (r->txcq != cq && r->rxcq != cq) {
			pp = &r->next;
			continue;
		}
		if (r->refs)
			dfi_err(DFI_SS_FABRIC, "CQ %p closes under %d endpoint(s)", (void *)cq,
				r->refs);
		if (r->txcq == r->rxcq || !r->txcq || !r->rxcq) {
			*pp = r->next;
			rdm_sinks_drop(rf, r);
			fi_close(&r->ep->fid);
			if (r->kept)
				kept_put(rf, r->kept);
			free(r);
			continue;
		}
		if (!k && !(k = calloc(1, sizeof(*k)))) {
			dfi_err(DFI_SS_FABRIC, "out of memory keeping CQ %p: its endpoint "
				"closes now", (void *)cq);
			*pp = r->next;
			fi_close(&r->ep->fid);
			free(r);
			continue;
		}
		k->eps++;
		r->kept = k;
		if (r->txcq == cq)
			r->txcq = NULL;
		else
			r->rxcq = NULL;
		pp = &r->next;
	}
	if (k) {
		k->cq = cq->cq;
		k->next = rf->kept;
		rf->kept = k;
	}
	pthread_mutex_unlock(&rf->lock);
	return k != NULL;
}

/* Peers no connection uses leave the AV (lock held): room for new ones. */
static int peers_evict(struct rdm_fabric *rf)
{
	int n = 0;

	for (struct rdm_peer **pp = &rf->peers, *p; (p = *pp);) {
		if (p->refs) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		fi_av_remove(rf->av, &p->addr, 1, 0);
		free(p);
		n++;
	}
	return n;
}

/* The peer's RDM endpoint in the AV (lock held), taken for e: its fi_addr
 * in e->peer.  The AV full (shm: 256 peers), the unused ones make room. */
int rdm_peer_get(struct rdm_fabric *rf, struct rdm_fep *e, const struct dfi_rcm_end *remote)
{
	struct rdm_peer *p;
	int n;

	for (p = rf->peers; p; p = p->next)
		if (p->len == remote->addr_len && !memcmp(p->name, remote->addr, p->len))
			goto found;
	if (!(p = calloc(1, sizeof(*p))))
		return -ENOMEM;
	n = fi_av_insert(rf->av, remote->addr, 1, &p->addr, 0, NULL);
	if (n != 1 && peers_evict(rf))
		n = fi_av_insert(rf->av, remote->addr, 1, &p->addr, 0, NULL);
	if (n != 1) {
		dfi_err(DFI_SS_FABRIC, "fi_av_insert of a peer's address (%u bytes): %s",
			remote->addr_len, n < 0 ? fi_strerror(-n) : "not inserted (the AV is full)");
		free(p);
		return n < 0 ? n : -ENOMEM;
	}
	p->len = remote->addr_len;
	memcpy(p->name, remote->addr, p->len);
	p->armed_fd = -1;
	p->next = rf->peers;
	rf->peers = p;
found:
	p->refs++;
	e->peer_ref = p;
	e->peer = p->addr;
	return 0;
}

/* An SRQ endpoint receives at its SRQ's endpoint, with tag class 1. */
void rdm_self_end(const struct rdm_fep *e, struct dfi_rcm_end *end)
{
	size_t len = e->srx ? e->srx->addr_len : e->rep->addr_len;

	memset(end, 0, sizeof(*end));
	end->id = e->id;
	end->gen = e->srx ? (uint16_t)(e->gen | RDM_GEN_SRQ) : e->gen;
	end->addr_len = (uint16_t)len;
	memcpy(end->addr, e->srx ? e->srx->addr : e->rep->addr, len);
	end->bye_addr = (uintptr_t)e->bye_word;
	end->bye_key = e->bye_word ? e->bye_key : 0;
}

/* What e sends with: the peer's tag, its messages numbered from 0 where
 * the fabric numbers them or the peer is an SRQ endpoint; and where its
 * goodbye goes. */
static void peer_tag(struct rdm_fep *e, const struct dfi_rcm_end *remote)
{
	e->stag = RDM_TAG(remote->id, remote->gen);
	e->sseq_on = e->seq_mask && (e->rf->f->lim.numbered || (remote->gen & RDM_GEN_SRQ));
	e->lose = e->sseq_on ? e->rf->lose : -1;
	e->sseq = e->lose == 0;		/* DAPL_OFI_FAULT_RDM_LOSE=0: message 0 lost */
	e->peer_bye_addr = remote->bye_addr;
	e->peer_bye_key = remote->bye_key;
}

/* ------------------------------------------------------------ the EQ */

static int rdm_eq_open(struct dfi_fabric *f, struct dfi_eq **out)
{
	struct rdm_eq *q = calloc(1, sizeof(*q));

	if (!q)
		return -ENOMEM;
	q->base.be = &dfi_rdm_backend;
	q->rf = f->priv;
	*out = &q->base;
	return 0;
}

static void rdm_eq_close(struct dfi_eq *q)
{
	free(q);
}

static int rdm_eq_fd(struct dfi_eq *q)
{
	return dfi_rcm_fd(((struct rdm_eq *)q)->rf->cm);
}

/* rcm's fd is an epoll set, level-triggered, and an event it queued
 * keeps its eventfd readable: nothing to arm. */
static int rdm_eq_trywait(struct dfi_eq *q)
{
	(void)q;
	return 0;
}

/* The connection ended: the endpoint's control channel goes (lock held). */
void rdm_conn_gone(struct rdm_fep *e)
{
	atomic_store_explicit(&e->ended, true, memory_order_relaxed);
	dfi_rcm_conn_free(e->conn);
	e->conn = NULL;
}

/*
 * The connecting side's fabric path to its peer, made before the peer may
 * report the connection (its RTU), so that ESTABLISHED on either side means
 * that data can flow: net and rxm connect underneath at the first message
 * to a peer, and a fabric path that does not work (a firewall on it, an
 * address the peer cannot be reached at) ends the connect here, with the
 * CM channel's close, rather than as a DAT message that never arrives.
 * The connecting side sends a message of no bytes the peer's accept posted
 * a receive for (RDM_TAG_HELLO, no context: the DAT layer skips its
 * completion), retried until the provider takes it, which it does once its
 * connection is up.  Lock held; the provider's progress is driven
 * meanwhile (the peer's half is its own thread's).
 */
int rdm_path_up(struct rdm_fep *e, const struct dfi_rcm_end *remote)
{
	uint64_t tag = RDM_TAG_HELLO(remote->id, remote->gen), t0 = rdm_now_ms();
	ssize_t rc;

	for (;;) {
		rc = fi_tinject(e->ep, NULL, 0, e->peer, tag);
		if (rc != -FI_EAGAIN)
			break;
		if (rdm_now_ms() - t0 > RDM_HELLO_MS) {
			rc = -FI_ETIMEDOUT;
			break;
		}
		(void)fi_cq_read(e->rep->txcq->cq, NULL, 0);
		if (e->rep->rxcq != e->rep->txcq)
			(void)fi_cq_read(e->rep->rxcq->cq, NULL, 0);
		sched_yield();
	}
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "RDM endpoint of the peer not reached: %s",
			 fi_strerror((int)-rc));
	return (int)rc;
}

/* Where the provider writes in contexts (lim.op_ctx), a hello's receive
 * has a context of its own, which outlives its endpoint: a hello cancelled
 * at the close completes after it.  Its completion frees it (and tells
 * the endpoint, while that is open); its own context is odd, as an
 * endpoint's hello context is. */
struct rdm_hello_ctx {
	struct dfi_opctx o;		/* o.ctx: RDM_HELLO_CTX(this) */
	struct rdm_fep *e;		/* NULL once its endpoint closed */
};

static void *hello_ctx(struct rdm_fep *e)
{
	if (!e->rf->f->lim.op_ctx)
		return RDM_HELLO_CTX(e);
	if (!e->hello_ctx) {
		e->hello_ctx = calloc(1, sizeof(*e->hello_ctx));
		if (!e->hello_ctx)
			return NULL;
		e->hello_ctx->e = e;
		e->hello_ctx->o.ctx = RDM_HELLO_CTX(e->hello_ctx);
	}
	return &e->hello_ctx->o;
}

void rdm_hello_done(struct rdm_fabric *rf, void *ctx)
{
	struct rdm_hello_ctx *h = (void *)((uintptr_t)ctx & ~(uintptr_t)1);

	if (!rf->f->lim.op_ctx)
		return;		/* the endpoint's own, odd: nothing to free */
	if (h->e) {
		h->e->hello_posted = false;
		h->e->hello_ctx = NULL;
	}
	free(h);
}

/* The accepting side's receive for the connecting side's hello
 * (rdm_path_up), on the endpoint it receives at: its context the
 * endpoint's (or its rdm_hello_ctx's), odd, so that cq.c hands its
 * completion to rdm_own_done, which drops it, and a hello that never came
 * can be cancelled at the close.  0 or libfabric's error. */
#define RDM_HELLO_POST_MS	100

int rdm_hello_recv(struct rdm_fep *e)
{
	struct fid_ep *ep = e->srx ? e->srx->ep : e->ep;
	struct fid_cq *cq = e->srx ? e->srx->cq : e->rep->rxcq->cq;
	void *ctx = hello_ctx(e);
	uint64_t t0 = rdm_now_ms();
	int rc;

	if (!ctx)
		return -FI_ENOMEM;
	while ((rc = (int)fi_trecv(ep, NULL, 0, NULL, FI_ADDR_UNSPEC, RDM_TAG_HELLO(e->id, e->gen),
				   0, ctx)) == -FI_EAGAIN &&
	       rdm_eagain_retry(cq, t0, RDM_HELLO_POST_MS))
		;
	e->hello_posted = rc == 0;
	return rc;
}

/* The completion of a receive of the backend's own (cq.c): a bounce's,
 * which becomes the DAT layer's receive; a sink's; or a hello's, which has
 * nothing more to do. */
static bool rdm_own_done(struct dfi_fabric *f, struct dfi_comp *c)
{
	struct rdm_fabric *rf = f->priv;

	if (!rf)
		return false;
	if (rdm_is_bounce_ctx(c->ctx)) {
		rdm_bounce_done(rf, c);		/* the DAT layer's receive */
		return true;
	}
	pthread_mutex_lock(&rf->lock);
	if (!rdm_sink_done(rf, c->ctx, c->err, c->len))
		rdm_hello_done(rf, c->ctx);
	pthread_mutex_unlock(&rf->lock);
	return false;
}

/* A few progress passes of the endpoint's CQs, reading no completion:
 * messages already received by this host are matched to their receives. */
void rdm_drain(struct rdm_fep *e)
{
	for (int i = 0; i < 4; i++) {
		(void)fi_cq_read(e->rep->rxcq->cq, NULL, 0);
		if (e->rep->txcq != e->rep->rxcq)
			(void)fi_cq_read(e->rep->txcq->cq, NULL, 0);
		if (e->srx)	/* its completions: the DAT layer's next read */
			(void)fi_cq_read(e->srx->cq, NULL, 0);
	}
}

/* One rcm event as a CM event (lock held).  false: nothing to report. */
static bool translate(struct rdm_fabric *rf, struct dfi_rcm_event *r, struct dfi_cm_event *ev)
{
	struct rdm_fep *e = r->type == DFI_RCM_CONNREQ ? NULL : r->ctx;
	struct rdm_req *req;

	memset(ev, 0, offsetof(struct dfi_cm_event, pdata));
	switch (r->type) {
	case DFI_RCM_CONNREQ:
		req = calloc(1, sizeof(*req));
		if (!req) {
			if (dfi_rcm_reject(r->conn, DFI_RDM_REJ_RESOURCES, NULL, 0))
				dfi_rcm_conn_free(r->conn);
			return false;
		}
		req->rf = rf;
		req->conn = r->conn;
		req->peer = r->peer;
		req->remote = r->remote;
		ev->type = DFI_CM_CONNREQ;
		ev->ctx = r->ctx;
		ev->req = req;
		ev->ud = r->remote.ud;
		break;
	case DFI_RCM_ESTABLISHED:
		if (!e->established && e->peer == FI_ADDR_UNSPEC) {
			/* the connecting side: the peer's end came in its REP */
			if (rdm_peer_get(rf, e, &r->remote)) {
				rdm_conn_gone(e);
				ev->type = DFI_CM_ERROR;
				ev->ctx = e->ctx;
				ev->err = ENOMEM;
				return true;
			}
			peer_tag(e, &r->remote);
			if (rdm_path_up(e, &r->remote) || dfi_rcm_confirm(e->conn)) {
				rdm_conn_gone(e);	/* the peer sees the channel close */
				ev->type = DFI_CM_ERROR;
				ev->ctx = e->ctx;
				ev->err = ETIMEDOUT;
				return true;
			}
		}
		if (e->ud_hs) {
			rdm_ud_resolved(e, ev);	/* and the control channel goes */
			break;
		}
		e->established = true;
		ev->type = DFI_CM_CONNECTED;
		ev->ctx = e->ctx;
		break;
	case DFI_RCM_REJECTED:
		rdm_conn_gone(e);
		ev->type = DFI_CM_ERROR;
		ev->ctx = e->ctx;
		ev->err = ECONNREFUSED;
		break;
	case DFI_RCM_DISCONNECTED:
		/* After a DREQ, once the peer's goodbye landed (rcm waited):
		 * what it sent before is placed first */
		rdm_drain(e);
		rdm_conn_gone(e);
		if (e->srx)	/* before the DAT layer's settle */
			rdm_srx_fep_gone(e);
		ev->type = e->established ? DFI_CM_SHUTDOWN : DFI_CM_ERROR;
		ev->ctx = e->ctx;
		ev->err = ECONNRESET;
		break;
	case DFI_RCM_ATOMICREP:
		ev->type = DFI_CM_ATOMIC_DONE;
		ev->ctx = e->ctx;
		ev->id = r->id;
		ev->err = r->err;
		ev->value = r->value;
		return true;
	case DFI_RCM_BROKEN:
		if (r->err == ETIMEDOUT && e->established)	/* the kernel gave up */
			rdm_cut_peer(e);
		rdm_conn_gone(e);
		if (e->srx)
			rdm_srx_fep_gone(e);
		ev->ctx = e->ctx;
		if (e->established) {
			/* the kernel gave up on the peer, or the peer broke the
			 * protocol: BROKEN, not DISCONNECTED */
			e->aborted = r->err == ETIMEDOUT || r->err == EPROTO ? r->err : 0;
			ev->type = DFI_CM_SHUTDOWN;
		} else {
			ev->type = DFI_CM_ERROR;
			ev->err = r->err ? r->err : ECONNRESET;
		}
		return true;
	}
	if (r->plen && r->type != DFI_RCM_DISCONNECTED) {
		ev->plen = r->plen;
		memcpy(ev->pdata, r->pdata, r->plen);
	}
	return true;
}

static int rdm_eq_read(struct dfi_eq *q, struct dfi_cm_event *ev)
{
	struct rdm_fabric *rf = ((struct rdm_eq *)q)->rf;
	struct dfi_rcm_event r;
	int rc;

	pthread_mutex_lock(&rf->lock);
	do {
		rc = dfi_rcm_read(rf->cm, &r);
	} while (rc == 1 && !translate(rf, &r, ev));
	pthread_mutex_unlock(&rf->lock);
	return rc;
}

static void rdm_connreq_free(void *p)
{
	struct rdm_req *req = p;
	struct rdm_fabric *rf = req->rf;

	pthread_mutex_lock(&rf->lock);
	if (dfi_rcm_reject(req->conn, DFI_RDM_REJ_NO_LISTENER, NULL, 0))
		dfi_rcm_conn_free(req->conn);
	pthread_mutex_unlock(&rf->lock);
	free(req);
}

static void rdm_connreq_peer(void *p, struct sockaddr_in *peer)
{
	*peer = ((struct rdm_req *)p)->peer;
}

/* ------------------------------------------------------------ listeners */

static int rdm_pep_listen(struct dfi_fabric *f, struct dfi_eq *eq, uint16_t port, void *ctx,
			  struct dfi_pep **out, uint16_t *bound)
{
	struct rdm_pep *p = calloc(1, sizeof(*p));
	uint16_t got = port;
	int rc;

	(void)eq;
	if (!p)
		return -ENOMEM;
	p->base.be = &dfi_rdm_backend;
	p->rf = f->priv;
	pthread_mutex_lock(&p->rf->lock);
	rc = dfi_rcm_listen(p->rf->cm, port, ctx, &p->lis, &got);
	pthread_mutex_unlock(&p->rf->lock);
	if (rc) {
		if (rc != -EADDRINUSE)
			dfi_err(DFI_SS_FABRIC, "listen on port %u: %s", port, strerror(-rc));
		free(p);
		return rc;
	}
	if (bound)
		*bound = got;
	*out = &p->base;
	return 0;
}

static void rdm_pep_close(struct dfi_pep *pep)
{
	struct rdm_pep *p = (struct rdm_pep *)pep;

	pthread_mutex_lock(&p->rf->lock);
	dfi_rcm_unlisten(p->lis);
	pthread_mutex_unlock(&p->rf->lock);
	free(p);
}

static int rdm_pep_reject(struct dfi_pep *pep, void *p, const void *pdata, size_t plen)
{
	struct rdm_req *req = p;
	struct rdm_fabric *rf = req->rf;
	int rc;

	(void)pep;
	pthread_mutex_lock(&rf->lock);
	rc = dfi_rcm_reject(req->conn, DFI_RDM_REJ_CONSUMER, pdata, plen);
	if (rc)		/* the request goes either way */
		dfi_rcm_conn_free(req->conn);
	pthread_mutex_unlock(&rf->lock);
	free(req);
	return rc;
}

/* ------------------------------------------------------------ endpoints */

/* An endpoint has its id (and so its receive tag) from the start: DAT
 * lets receives be posted before the connection. */
static int rdm_fep_open(struct dfi_fabric *f, struct dfi_eq *eq, void *p,
			struct dfi_cq *txcq, struct dfi_cq *rxcq, struct dfi_srx *srx,
			size_t tx_size, size_t rx_size, void *ctx, struct dfi_fep **out)
{
	struct rdm_fabric *rf = f->priv;
	struct rdm_req *req = p;
	struct rdm_fep *e;
	int rc;

	(void)eq;
	e = dfi_arena_calloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->base.be = &dfi_rdm_backend;
	e->rf = rf;
	e->acked = f->lim.acked;
	e->delivered = f->lim.writes_unordered;
	e->ctx = ctx;
	e->peer = FI_ADDR_UNSPEC;
	e->seq_mask = f->lim.msgno_mask;
	e->tx_need = tx_size;
	e->rx_need = rx_size + 1;	/* and the hello's (rdm_path_up) */
	if (srx) {
		/* it receives at the SRQ's endpoint, into rxcq (a software CQ
		 * the SRQ fills), and sends from an endpoint of its request CQ,
		 * where nothing arrives for it */
		e->srx = RDM_SRX(srx);
		e->scq = rxcq;
		rxcq = txcq;
		e->rx_need = 0;
	}
	pthread_mutex_lock(&rf->lock);
	rc = rep_get(rf, txcq, rxcq, e->tx_need, e->rx_need, &e->rep);
	if (!rc) {
		e->id = id_get(rf, e);
		if (!e->id) {
			rep_put(rf, e->rep, e->tx_need, e->rx_need);
			rc = -ENOMEM;
		}
	}
	if (!rc && req) {
		rc = rdm_peer_get(rf, e, &req->remote);
		if (rc) {
			id_put(rf, e->id);
			rep_put(rf, e->rep, e->tx_need, e->rx_need);
		}
	}
	if (rc) {
		pthread_mutex_unlock(&rf->lock);
		dfi_arena_free(e);
		return rc;
	}
	e->gen = rf->slots[e->id - 1].gen;
	e->rtag = RDM_TAG(e->id, e->gen);
	if (rf->bye && (e->bye_word = rdm_bye_word(rf, e->id, &e->bye_key)))
		__atomic_store_n(e->bye_word, 0, __ATOMIC_RELAXED);	/* a new holder's */
	e->ep = e->rep->ep;
	if (req) {		/* ours now: answered by rdm_fep_accept */
		peer_tag(e, &req->remote);
		e->conn = req->conn;
		e->peer_in = req->peer;
		free(req);
	}
	pthread_mutex_unlock(&rf->lock);
	*out = &e->base;
	return 0;
}

static int rdm_fep_connect(struct dfi_fep *fe, const struct sockaddr_in *dest, const void *pdata,
			   size_t plen)
{
	struct rdm_fep *e = RDM_FEP(fe);
	struct dfi_rcm_end self;
	int rc;

	pthread_mutex_lock(&e->rf->lock);
	if (e->conn) {
		pthread_mutex_unlock(&e->rf->lock);
		return -EISCONN;
	}
	rdm_self_end(e, &self);
	e->peer_in = *dest;
	rc = dfi_rcm_connect(e->rf->cm, dest, ntohs(dest->sin_port), &self, pdata, plen, e,
			     &e->conn);
	if (!rc && e->bye_word)
		dfi_rcm_want_goodbye(e->conn);
	pthread_mutex_unlock(&e->rf->lock);
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "connect: %s", strerror(-rc));
	return rc;
}

static int rdm_fep_accept(struct dfi_fep *fe, const void *pdata, size_t plen)
{
	struct rdm_fep *e = RDM_FEP(fe);
	struct dfi_rcm_end self;
	int rc = -EINVAL;

	pthread_mutex_lock(&e->rf->lock);
	if (e->conn) {
		int r = rdm_hello_recv(e);

		rdm_self_end(e, &self);
		rc = r ? r : dfi_rcm_accept(e->conn, &self, pdata, plen, e);
		if (!rc && e->bye_word)
			dfi_rcm_want_goodbye(e->conn);
	}
	pthread_mutex_unlock(&e->rf->lock);
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "accept: %s", strerror(-rc));
	return rc;
}

/* Established: a DREQ, and DISCONNECTED follows.  Otherwise (a connect
 * given up, an accept not yet confirmed) the control channel is closed,
 * which the peer sees, and no event follows: -ENOTCONN, as fi_shutdown
 * on a connection that is not up. */
static int rdm_fep_shutdown(struct dfi_fep *fe)
{
	struct rdm_fep *e = RDM_FEP(fe);
	int rc = -ENOTCONN;

	pthread_mutex_lock(&e->rf->lock);
	if (e->conn && e->established) {
		rdm_bye_send(e);	/* behind this side's data, before the DREQ */
		rc = dfi_rcm_disconnect(e->conn);
	}
	if (rc && e->conn)
		rdm_conn_gone(e);
	pthread_mutex_unlock(&e->rf->lock);
	return rc;
}

static void rdm_fep_cancel(struct dfi_fep *fe, void *ctx)
{
	(void)fi_cancel(&RDM_FEP(fe)->ep->fid, ctx);
	if (RDM_FEP(fe)->rf->rx_iov < RDM_FEP(fe)->rf->f->lim.rx_iov_limit)
		rdm_bounce_cancel(RDM_FEP(fe), ctx);	/* or the bounce posted for it */
}

/* What the peer had sent may still be on its way: a sink takes it, posted
 * only now, behind every receive of the EP's (a sink posted at the
 * connection's end, while the consumer still reposted receives, took
 * messages those should have). */
static void rdm_fep_recvs_over(struct dfi_fep *fe)
{
	struct rdm_fep *e = RDM_FEP(fe);

	pthread_mutex_lock(&e->rf->lock);
	rdm_sink_open(e);
	pthread_mutex_unlock(&e->rf->lock);
}

/* A request of e failed in the provider while the connection was up: a
 * peer refused an RDMA access, or the stream that carries every
 * connection to that peer broke under it (net, tcp;ofi_rxm; docs/rdm.md,
 * "A late RDMA access").  The connection is broken, as an IB QP in error
 * is, and closing its control channel tells the peer. */
static void rdm_fep_fault(struct dfi_fep *fe, int err)
{
	struct rdm_fep *e = RDM_FEP(fe);

	pthread_mutex_lock(&e->rf->lock);
	if (e->conn && !atomic_load_explicit(&e->ended, memory_order_relaxed)) {
		dfi_warn(DFI_SS_FABRIC, "connection %u: a request failed in the provider (%s): "
			 "connection broken", e->id, strerror(err));
		dfi_rcm_break(e->conn);
	}
	pthread_mutex_unlock(&e->rf->lock);
}

static void rdm_fep_close(struct dfi_fep *fe)
{
	struct rdm_fep *e = RDM_FEP(fe);
	struct rdm_fabric *rf = e->rf;

	pthread_mutex_lock(&rf->lock);
	if (e->conn)
		rdm_conn_gone(e);
	rdm_sink_open(e);	/* the close says the DAT layer is done too */
	if (e->srx)
		rdm_srx_fep_gone(e);
	if (e->hello_posted)	/* a peer that never said it: the entry back */
		(void)fi_cancel(&(e->srx ? e->srx->ep : e->ep)->fid,
				e->hello_ctx ? (void *)&e->hello_ctx->o : RDM_HELLO_CTX(e));
	rdm_bounces_orphan(e);
	if (e->hello_ctx) {	/* its completion, to come, frees it */
		if (e->hello_posted)
			e->hello_ctx->e = NULL;
		else
			free(e->hello_ctx);
		e->hello_ctx = NULL;
	}
	if (!e->ud_hs) {	/* a handshake's are its UD endpoint's */
		id_put(rf, e->id);
		rep_put(rf, e->rep, e->tx_need, e->rx_need);
	}
	if (e->peer_ref)
		e->peer_ref->refs--;
	pthread_mutex_unlock(&rf->lock);
	dfi_arena_free(e);
}

static int rdm_fep_peer(struct dfi_fep *fe, struct sockaddr_in *peer)
{
	*peer = RDM_FEP(fe)->peer_in;
	return 0;
}

/* rcm arms every control channel itself (DAPL_OFI_PEER_TIMEOUT_MS at the
 * fabric's open); once a connection is up, the provider's sockets to its
 * peer get the same (liveness.c). */
static int rdm_fep_arm_liveness(struct dfi_fep *fe, unsigned timeout_ms,
				const struct sockaddr_in *dest)
{
	struct rdm_fep *e = RDM_FEP(fe);

	if (dest || e->ud_hs)
		return 0;
	pthread_mutex_lock(&e->rf->lock);
	rdm_arm_peer(e, timeout_ms);
	pthread_mutex_unlock(&e->rf->lock);
	return 0;
}

static int rdm_fep_aborted(const struct dfi_fep *fe)
{
	return ((const struct rdm_fep *)fe)->aborted;
}

const struct dfi_backend dfi_rdm_backend = {
	.name = "rdm",
	.open = rdm_open,
	.close = rdm_close,
	.cq_closing = rdm_cq_closing,
	.own_done = rdm_own_done,
	.eq_open = rdm_eq_open,
	.eq_close = rdm_eq_close,
	.eq_fd = rdm_eq_fd,
	.eq_trywait = rdm_eq_trywait,
	.eq_read = rdm_eq_read,
	.connreq_free = rdm_connreq_free,
	.connreq_peer = rdm_connreq_peer,
	.pep_listen = rdm_pep_listen,
	.pep_close = rdm_pep_close,
	.pep_reject = rdm_pep_reject,
	.srx_open = dfi_rdm_srx_open,
	.srx_close = dfi_rdm_srx_close,
	.srx_post_recv = dfi_rdm_srx_post_recv,
	.srx_cq_open = dfi_rdm_srx_cq_open,
	.srx_progress = dfi_rdm_srx_progress,
	.fep_open = rdm_fep_open,
	.fep_connect = rdm_fep_connect,
	.fep_accept = rdm_fep_accept,
	.fep_shutdown = rdm_fep_shutdown,
	.fep_cancel = rdm_fep_cancel,
	.fep_recvs_over = rdm_fep_recvs_over,
	.fep_fault = rdm_fep_fault,
	.fep_close = rdm_fep_close,
	.fep_peer = rdm_fep_peer,
	.fep_arm_liveness = rdm_fep_arm_liveness,
	.fep_aborted = rdm_fep_aborted,
	.post_send = dfi_rdm_post_send,
	.post_inject = dfi_rdm_post_inject,
	.post_recv = dfi_rdm_post_recv,
	.post_write = dfi_rdm_post_write,
	.post_read = dfi_rdm_post_read,
	.post_senddata = dfi_rdm_post_senddata,
	.post_atomic = dfi_rdm_post_atomic,
	.post_atomic_emul = dfi_rdm_post_atomic_emul,
	.ud_connect = dfi_rdm_ud_connect,
	.ud_accept = dfi_rdm_ud_accept,
	.post_send_ud = dfi_rdm_post_send_ud,
	.ah_free = dfi_rdm_ah_free,
};
