/*
 * Shared receive queues over RDM (docs/rdm.md, section 9).
 *
 * No RDM provider here reports a shared context's completion per
 * receiving endpoint (tcp;ofi_rxm has no shared context, shm reports on
 * the context's own CQ), so an SRQ is an FI_EP_RDM endpoint of its own
 * whose receives match any message of tag class 1.  The endpoints of the
 * SRQ give that endpoint's address and a generation field with RDM_GEN_SRQ
 * in their REQ/REP; their peers send there with class 1, their own id and
 * generation, and a 16-bit sequence.  The SRQ's CQ is read by the pull of
 * any of its endpoints' private CQs (software CQs, cq_soft.c), which hands
 * each completion to the endpoint its tag names, in the peer's send order:
 * tcp;ofi_rxm completes a large message after a small one behind it.
 *
 * A message for a connection that is gone (an old generation, an id freed)
 * took a consumer's buffer all the same: the buffer is posted again.  Each
 * posted buffer therefore has a record here, its libfabric context, with
 * its segments and the DAT layer's context.
 */
#include "rdm.h"
#include "util/log.h"
#include "util/param.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define SRX_MAX_SGE	4	/* an SRQ's max_recv_iov, at most (srq.c) */
#define SRX_CQ_SIZE	1024	/* the provider's CQ spills over beyond */
#define SRX_BATCH	32
/* A post's EAGAIN: the provider's receive entries are all taken, for good
 * unless its progress frees those of messages completed */
#define SRX_POST_MS	100

struct rdm_srx_rec {
	struct rdm_srx_rec *next;	/* free list */
	struct rdm_srx_rec *all;	/* every record, freed at the close */
	struct dfi_opctx o;		/* its receive's context on an op_ctx fabric */
	void *ctx;
	int n;
	struct dfi_sge sg[SRX_MAX_SGE];
	/* more segments than the provider takes: received here, scattered
	 * into sg at the completion (route; bounce.c says why) */
	uint8_t *bounce;
	size_t bounce_len;
};

/* A completion that came before an earlier message of its connection. */
struct rdm_early {
	struct rdm_early *next;
	uint16_t seq;
	struct dfi_comp c;
};

static int srx_post(struct rdm_srx *x, struct rdm_srx_rec *r)
{
	struct iovec iov[SRX_MAX_SGE];
	void *desc[SRX_MAX_SGE];
	uint64_t t0 = rdm_now_ms();
	size_t n = (size_t)r->n;
	ssize_t rc;

	(void)dfi_fill_iov(r->sg, r->n, iov, desc);
	if (n > x->rf->rx_iov) {
		size_t len = 0;

		for (int i = 0; i < r->n; i++)
			len += r->sg[i].len;
		free(r->bounce);
		r->bounce = malloc(len ? len : 1);
		if (!r->bounce)
			return -ENOMEM;
		r->bounce_len = len;
		iov[0] = (struct iovec){ .iov_base = r->bounce, .iov_len = len };
		desc[0] = NULL;
		n = 1;
	}
	for (;;) {
		rc = fi_trecvv(x->ep, iov, desc, n, FI_ADDR_UNSPEC, RDM_TAG_SRQ,
			       RDM_TAG_SRQ_IGNORE, dfi_opctx_own(x->rf->f, &r->o, r));
		if (rc == -FI_ENOMEM)
			rc = -FI_EAGAIN;	/* shm's word for a full queue */
		if (rc != -FI_EAGAIN || !rdm_eagain_retry(x->cq, t0, SRX_POST_MS))
			break;
	}
	return dfi_post_rc(rc);
}

int dfi_rdm_srx_post_recv(struct dfi_srx *sx, const struct dfi_sge *sg, int n, void *ctx)
{
	struct rdm_srx *x = RDM_SRX(sx);
	struct rdm_srx_rec *r;
	int rc;

	if (n < 0 || n > SRX_MAX_SGE)
		return -EINVAL;
	pthread_mutex_lock(&x->lock);
	if (x->posted >= x->cap) {
		pthread_mutex_unlock(&x->lock);
		return -EAGAIN;
	}
	if ((r = x->free)) {
		x->free = r->next;
	} else if ((r = calloc(1, sizeof(*r)))) {
		r->all = x->all;
		x->all = r;
	}
	if (r)
		x->posted++;
	pthread_mutex_unlock(&x->lock);
	if (!r)
		return -ENOMEM;
	r->ctx = dfi_opctx_of(x->rf->f, ctx);	/* the record carries it */
	r->n = n;
	memcpy(r->sg, sg, (size_t)n * sizeof(*sg));
	rc = srx_post(x, r);
	if (rc) {
		pthread_mutex_lock(&x->lock);
		r->next = x->free;
		x->free = r;
		x->posted--;
		pthread_mutex_unlock(&x->lock);
	}
	return rc;
}

/* e's place on its SRQ's list of endpoints waiting for an earlier message
 * (rf->lock held). */
static void gap_open(struct rdm_fep *e)
{
	struct rdm_srx *x = e->srx;

	if (e->gap_prev)
		return;
	e->gap_since_ms = rdm_now_ms();
	e->gap_next = x->gapped;
	if (x->gapped)
		x->gapped->gap_prev = &e->gap_next;
	x->gapped = e;
	e->gap_prev = &x->gapped;
}

static void gap_close(struct rdm_fep *e)
{
	if (!e->gap_prev)
		return;
	*e->gap_prev = e->gap_next;
	if (e->gap_next)
		e->gap_next->gap_prev = e->gap_prev;
	e->gap_next = NULL;
	e->gap_prev = NULL;
}

/* How far seq is ahead of e's next expected, modulo its sequence's span
 * (the fabric's msgno_mask + 1): half of it or more is behind. */
static unsigned seq_ahead(const struct rdm_fep *e, uint16_t seq)
{
	return (unsigned)(seq - e->rseq) & e->seq_mask;
}

/* rf->lock held: c to e's CQ, and those of e's that waited for it.
 * false: its sequence is behind the one expected (a duplicate, a forged
 * one), and the buffer is posted again. */
static bool deliver(struct rdm_fep *e, const struct dfi_comp *c, uint16_t seq)
{
	struct rdm_early *w, **pp;

	if (seq > e->seq_mask || seq_ahead(e, seq) > e->seq_mask / 2u)
		return false;
	if (seq != e->rseq) {
		if ((w = malloc(sizeof(*w)))) {
			w->seq = seq;
			w->c = *c;
			w->next = e->early;
			e->early = w;
			gap_open(e);
			return true;
		}
		dfi_warn(DFI_SS_FABRIC, "SRQ endpoint %u: out of memory holding a completion "
			 "that came early: it is reported out of order", e->id);
	} else {
		e->rseq = (e->rseq + 1) & e->seq_mask;
	}
	if (dfi_cq_soft_push(e->scq, c))
		dfi_err(DFI_SS_FABRIC, "SRQ endpoint %u: out of memory: a completion is lost",
			e->id);
	for (pp = &e->early; (w = *pp);) {
		if (w->seq != e->rseq) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		e->rseq = (e->rseq + 1) & e->seq_mask;
		if (dfi_cq_soft_push(e->scq, &w->c))
			dfi_err(DFI_SS_FABRIC, "SRQ endpoint %u: out of memory: a completion is "
				"lost", e->id);
		free(w);
		pp = &e->early;		/* the next may stand before it */
	}
	if (!e->early)
		gap_close(e);
	else
		e->gap_since_ms = rdm_now_ms();	/* the gap moved on */
	return true;
}

void rdm_srx_fep_gone(struct rdm_fep *e)
{
	gap_close(e);
	/* oldest first: the distance from the next one expected */
	while (e->early) {
		struct rdm_early *w, **pp, **best = &e->early;

		for (pp = &e->early; (w = *pp); pp = &w->next)
			if (seq_ahead(e, w->seq) < seq_ahead(e, (*best)->seq))
				best = pp;
		w = *best;
		*best = w->next;
		e->rseq = (w->seq + 1) & e->seq_mask;
		if (dfi_cq_soft_push(e->scq, &w->c))
			dfi_err(DFI_SS_FABRIC, "SRQ endpoint %u: out of memory: a completion is "
				"lost", e->id);
		free(w);
	}
}

/*
 * x->lock and rf->lock held: one completion of the SRQ's CQ to its
 * endpoint.  Its record goes back to the free list, or, when no endpoint
 * of this SRQ holds the connection the tag names any more, onto *stale,
 * to be posted again.  One whose context is odd is a hello's.
 */
static void route(struct rdm_srx *x, struct rdm_srx_rec *r, uint64_t tag, struct dfi_comp *c,
		  struct rdm_srx_rec **stale)
{
	struct rdm_fabric *rf = x->rf;
	uint32_t id = (uint32_t)tag;
	uint16_t gen = (uint16_t)((tag >> 32) & RDM_GEN_MASK);
	struct rdm_fep *e = id && id <= rf->nslots ? rf->slots[id - 1].fep : NULL;

	if (!r)
		return;
	if (dfi_cq_own_ctx(r)) {
		rdm_hello_done(rf, r);
		return;
	}
	c->ctx = r->ctx;
	if (r->bounce) {
		if (!c->err)
			dfi_scatter(r->bounce, c->len < r->bounce_len ? c->len : r->bounce_len,
				    r->sg, r->n);
		free(r->bounce);
		r->bounce = NULL;
	}
	if (c->err == ECANCELED ||
	    (e && e->gen == gen && e->srx == x && (tag >> 46 & 3) == 1 &&
	     deliver(e, c, (uint16_t)(tag >> RDM_SEQ_SHIFT)))) {
		r->next = x->free;
		x->free = r;
		x->posted--;
		return;
	}
	dfi_dbg(DFI_SS_FABRIC, "SRQ %p: a message for connection %u:%u, which is gone (or "
		"not in its sequence): its buffer is posted again", (void *)x, id, gen);
	r->next = *stale;
	*stale = r;
}

/* x->lock held: the connections whose gap has lasted DAPL_OFI_SRQ_GAP_MS
 * are broken (their held completions go out with the event, ep.c); the
 * pulls of the progress thread's ticks look. */
static void gaps_check(struct rdm_srx *x)
{
	struct rdm_fabric *rf = x->rf;
	long ms = dfi_param_int(DFI_P_SRQ_GAP_MS);
	uint64_t now;

	if (ms <= 0)
		return;
	now = rdm_now_ms();
	pthread_mutex_lock(&rf->lock);
	for (struct rdm_fep *e = x->gapped, *next; e; e = next) {
		next = e->gap_next;
		if (now - e->gap_since_ms < (uint64_t)ms)
			continue;
		dfi_warn(DFI_SS_FABRIC, "SRQ %p: connection %u has waited %ld ms for message %u of "
			 "its peer, with later ones in: connection broken", (void *)x, e->id, ms,
			 e->rseq);
		gap_close(e);
		if (e->conn)
			dfi_rcm_break(e->conn);
	}
	pthread_mutex_unlock(&rf->lock);
}

static void srx_pull(void *arg)
{
	struct rdm_srx *x = arg;
	struct rdm_fabric *rf = x->rf;
	struct fi_cq_tagged_entry t[SRX_BATCH];
	struct rdm_srx_rec *stale = NULL;

	pthread_mutex_lock(&x->lock);
	for (int round = 0; round < 64; round++) {	/* the rest: the next pull */
		ssize_t n = fi_cq_read(x->cq, t, SRX_BATCH);

		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };
			struct dfi_comp c = { 0 };

			if (fi_cq_readerr(x->cq, &err, 0) != 1)
				break;
			c.len = err.len;
			c.err = err.err ? err.err : EIO;
			pthread_mutex_lock(&rf->lock);
			route(x, dfi_opctx_of(rf->f, err.op_context), err.tag, &c, &stale);
			pthread_mutex_unlock(&rf->lock);
			continue;
		}
		if (n <= 0) {
			if (n != -FI_EAGAIN && n != 0)
				dfi_warn(DFI_SS_FABRIC, "SRQ %p: reading its CQ: %s", (void *)x,
					 fi_strerror((int)-n));
			break;
		}
		pthread_mutex_lock(&rf->lock);
		for (ssize_t i = 0; i < n; i++) {
			struct dfi_comp c = { .len = t[i].len, .data = t[i].data,
					      .imm = (t[i].flags & FI_REMOTE_CQ_DATA) != 0 };

			route(x, dfi_opctx_of(rf->f, t[i].op_context), t[i].tag, &c, &stale);
		}
		pthread_mutex_unlock(&rf->lock);
		if (n < SRX_BATCH)
			break;
	}
	gaps_check(x);
	while (stale) {
		struct rdm_srx_rec *r = stale;

		stale = r->next;
		if (srx_post(x, r)) {
			/* the SRQ has one buffer less, and its count stays */
			dfi_warn(DFI_SS_FABRIC, "SRQ %p: a buffer a stale message took could not "
				 "be posted again", (void *)x);
			r->next = x->free;
			x->free = r;
			x->posted--;
		}
	}
	pthread_mutex_unlock(&x->lock);
}

static int srx_trywait(void *arg)
{
	struct rdm_srx *x = arg;
	struct fid *fids[1] = { &x->cq->fid };
	int rc;

	if (x->fd < 0)
		return 0;		/* polled: nothing to arm */
	rc = fi_trywait(x->rf->f->fabric, fids, 1);
	return rc == -FI_EAGAIN ? -EAGAIN : rc;
}

static const struct dfi_cq_feed srx_feed = { .pull = srx_pull, .trywait = srx_trywait };

void dfi_rdm_srx_progress(struct dfi_srx *sx)
{
	srx_pull(RDM_SRX(sx));
}

int dfi_rdm_srx_cq_open(struct dfi_srx *sx, size_t size, struct dfi_cq **cq)
{
	struct rdm_srx *x = RDM_SRX(sx);

	return dfi_cq_soft_open(x->rf->f, size, x->fd, &srx_feed, x, cq);
}

int dfi_rdm_srx_open(struct dfi_fabric *f, size_t size, size_t iov_limit, struct dfi_srx **out)
{
	struct fi_cq_attr ca = { .size = SRX_CQ_SIZE, .format = FI_CQ_FORMAT_TAGGED,
				 .wait_obj = f->lim.polled ? FI_WAIT_NONE : FI_WAIT_FD };
	struct rdm_srx *x = calloc(1, sizeof(*x));
	int rc;

	(void)size;	/* the provider's receive queue is what it is */
	if (!x)
		return -ENOMEM;
	if (!f->lim.msgno_mask) {
		dfi_err(DFI_SS_FABRIC, "an SRQ: the provider's tags have no room for the "
			"sequence it puts each connection's messages in order with (fewer "
			"than 56 bits)");
		free(x);
		return -ENOTSUP;
	}
	if (iov_limit > SRX_MAX_SGE) {
		free(x);
		return -EINVAL;
	}
	x->base.be = &dfi_rdm_backend;
	x->rf = f->priv;
	x->fd = -1;
	/* a quarter of the provider's receive queue stays for its endpoints'
	 * hellos and the messages that come before a buffer (shm keeps those
	 * in the same entries): a full queue refuses a post for good */
	x->cap = f->lim.rx_size ? f->lim.rx_size - f->lim.rx_size / 4 : SIZE_MAX;
	pthread_mutex_init(&x->lock, NULL);
	rc = fi_cq_open(f->domain, &ca, &x->cq, NULL);
	if (!rc && !f->lim.polled)
		rc = fi_control(&x->cq->fid, FI_GETWAIT, &x->fd);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "an SRQ's CQ: %s", fi_strerror(-rc));
		goto err;
	}
	/* it never sends: the CQ is bound both ways, as providers want one */
	x->addr_len = sizeof(x->addr);
	rc = rdm_ep_open(x->rf, x->cq, x->cq, &x->ep, x->addr, &x->addr_len);
	if (rc)
		goto err;
	dfi_dbg(DFI_SS_FABRIC, "SRQ %p: its RDM endpoint opened", (void *)x);
	*out = &x->base;
	return 0;
err:
	dfi_rdm_srx_close(&x->base);
	return rc;
}

/* After its last endpoint: the buffers still posted go without
 * completions, as the DAT layer expects (srq.c). */
void dfi_rdm_srx_close(struct dfi_srx *sx)
{
	struct rdm_srx *x = RDM_SRX(sx);

	if (x->ep)
		fi_close(&x->ep->fid);
	if (x->cq)
		fi_close(&x->cq->fid);
	while (x->all) {
		struct rdm_srx_rec *r = x->all;

		x->all = r->all;
		free(r->bounce);
		free(r);
	}
	pthread_mutex_destroy(&x->lock);
	free(x);
}
