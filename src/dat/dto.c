/*
 * Data transfer: descriptor pools, posting, and the EVD's completion source.
 *
 * Each DTO EVD owns one libfabric CQ (created when the first EP using it
 * connects).  The CQ is the EVD core's *source*: completions are read from it
 * under the EVD lock, only into free ring slots, by whoever looks first: a
 * dequeuing or waiting consumer, or the IA's progress thread when its fd
 * fires (progress.c).  A completion's context is a dfi_dto of the posting
 * EP; the conversion to a DAT_EVENT happens here, so the fabric layer knows
 * nothing of DAT.  The CQ is read in batches into its read-ahead
 * (dfi_cq_take), and a plain dequeue with nothing in the ring takes its
 * event from there directly (cq_read_one): on a ping-pong that skips the
 * ring and its bookkeeping, about 200 instructions per completion.
 *
 * The receive completions of SRQ EPs come from each EP's private CQ instead
 * (srq.c): the progress thread reads them and stages them on the EVD; the
 * source hands the staged ones out first (they were read from libfabric
 * earlier), so they too enter the ring only into free slots and are counted
 * until the consumer reaps them.
 */
#include "util/hot.h"
#include "dfi.h"
#include "fabric/fabric.h"
#include "util/arena.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- descriptors */

struct dfi_dto_pool *dfi_dto_pool_new(int n, const struct dfi_fabric_limits *lim)
{
	struct dfi_dto_pool *p = dfi_arena_calloc(sizeof(*p) + (size_t)n * sizeof(p->d[0]));

	if (!p)
		return NULL;
	p->writes_ahead = lim->writes_unordered;
	if (lim->unordered && n > 0) {
		/* (its early array comes with the first completion out of
		 * order: most RDM providers never make one) */
		p->order = calloc(1, sizeof(*p->order) + (size_t)n * sizeof(p->order->slot[0]));
		if (!p->order) {
			dfi_arena_free(p);
			return NULL;
		}
	}
	if ((lim->op_ctx && n > 0 && !(p->octx = calloc(2 * (size_t)n, sizeof(*p->octx)))) ||
	    (lim->writes_unordered && n > 0 && !(p->wimm = calloc((size_t)n, sizeof(*p->wimm))))) {
		free(p->octx);
		free(p->order);
		dfi_arena_free(p);
		return NULL;
	}
	p->n = n;
	for (int i = 0; i < n; i++) {
		p->d[i].pool = p;
		p->d[i].next = i + 1 < n ? i + 1 : -1;
		if (p->wimm) {
			p->wimm[i].pool = p;
			p->wimm[i].op = DAT_DTO_RDMA_WRITE;
			p->wimm[i].companion = true;
		}
		if (p->octx) {
			p->octx[2 * i].ctx = &p->d[i];
			p->octx[2 * i + 1].ctx = p->wimm ? &p->wimm[i] : NULL;
		}
	}
	p->free_head = n ? 0 : -1;
	atomic_init(&p->returned, -1);
	return p;
}

static void pool_free(struct dfi_dto_pool *p)
{
	if (p->order)
		free(p->order->early);
	free(p->order);
	free(p->atom);
	free(p->octx);
	free(p->wimm);
	dfi_arena_free(p);
}

/* post_lock held: a free descriptor, or -1 if every slot is in use.  No
 * lock and no atomic read-modify-write on the post's path: the credit
 * check reads `released`, which CQ readers raise only after they pushed
 * the descriptors back, so a free slot always has a free descriptor.
 * Always inlined, as the posts themselves are (POST_INLINE below). */
static inline __attribute__((always_inline)) int dto_get(struct dfi_dto_pool *p)
{
	unsigned taken = atomic_load_explicit(&p->taken, memory_order_relaxed);
	int i;

	if (taken - atomic_load_explicit(&p->released, memory_order_acquire) >= (unsigned)p->n)
		return -1;
	if (p->free_head < 0)
		p->free_head = atomic_exchange_explicit(&p->returned, -1, memory_order_acquire);
	i = p->free_head;
	if (i < 0)
		return -1;	/* cannot happen (see above); refuse rather than crash */
	p->free_head = p->d[i].next;
	atomic_store_explicit(&p->d[i].live, true, memory_order_relaxed);
	atomic_store_explicit(&p->taken, taken + 1, memory_order_relaxed);
	return i;
}

/* post_lock held: a descriptor taken and not posted after all. */
static void dto_put(struct dfi_dto_pool *p, int i)
{
	atomic_store_explicit(&p->d[i].live, false, memory_order_relaxed);
	p->d[i].next = p->free_head;
	p->free_head = i;
	atomic_store_explicit(&p->taken,
			      atomic_load_explicit(&p->taken, memory_order_relaxed) - 1,
			      memory_order_relaxed);
}

/* Descriptors read from the CQ, a run of one pool's (idx[], `reported` of
 * them reported): they go back on the returned stack, then the unreported
 * ones' slots are released (the reported ones' when their events are
 * reaped, cq_consumed).  One push per run, not per completion: a stream's
 * batch comes from one EP. */
DFI_HOT static void dto_complete(struct dfi_dto_pool *p, const int *idx, int n, int reported)
{
	int head;

	if (!p || !n)
		return;
	/* before the push: once pushed, a post may take a slot again */
	for (int k = 0; k < n; k++)
		atomic_store_explicit(&p->d[idx[k]].live, false, memory_order_relaxed);
	for (int k = 0; k + 1 < n; k++)
		p->d[idx[k]].next = idx[k + 1];
	head = atomic_load_explicit(&p->returned, memory_order_relaxed);
	do
		p->d[idx[n - 1]].next = head;
	while (!atomic_compare_exchange_weak_explicit(&p->returned, &head, idx[0],
						      memory_order_release, memory_order_relaxed));
	if (n > reported)
		atomic_fetch_add_explicit(&p->released, (unsigned)(n - reported),
					  memory_order_release);
	/* Last, and release: once `read` shows the run, the pool may be
	 * freed (dfi_dto_pool_busy), so nothing here touches it after this,
	 * and what this thread read of the descriptors (dto_event) happens
	 * before the free. */
	atomic_fetch_add_explicit(&p->read, (unsigned)n, memory_order_release);
}

/* Each difference loads the count that trails first: taken can only have
 * grown since, so the difference is never negative. */
int dfi_dto_pool_posted(struct dfi_dto_pool *p)
{
	unsigned read = atomic_load_explicit(&p->read, memory_order_acquire);

	return (int)(atomic_load_explicit(&p->taken, memory_order_relaxed) - read);
}

bool dfi_dto_pool_busy(struct dfi_dto_pool *p)
{
	return p && (dfi_dto_pool_posted(p) > 0 ||
		     atomic_load_explicit(&p->wimm_out, memory_order_acquire) > 0);
}

bool dfi_dto_pool_idle(struct dfi_dto_pool *p)
{
	unsigned released = atomic_load_explicit(&p->released, memory_order_acquire);

	return atomic_load_explicit(&p->taken, memory_order_relaxed) == released;
}

/* A freed EP's pool with completions still in a CQ stays until IA close,
 * so a late completion never points into freed memory. */
void dfi_dto_pool_release(struct dfi_ia *ia, struct dfi_dto_pool *p)
{
	if (!p)
		return;
	if (!dfi_dto_pool_busy(p)) {
		pool_free(p);
		return;
	}
	pthread_mutex_lock(&ia->lock);
	p->next_zombie = ia->zombies;
	ia->zombies = p;
	pthread_mutex_unlock(&ia->lock);
}

void dfi_zombies_free(struct dfi_ia *ia)
{
	while (ia->zombies) {
		struct dfi_dto_pool *p = ia->zombies;

		ia->zombies = p->next_zombie;
		pool_free(p);
	}
}

/* ------------------------------------------------------ the CQ as source */

DAT_DTO_COMPLETION_STATUS dfi_dto_status(int err)
{
	switch (err) {
	case 0: return DAT_DTO_SUCCESS;
	case ECANCELED: return DAT_DTO_ERR_FLUSHED;
	case EMSGSIZE: case 265 /* FI_ETRUNC */: return DAT_DTO_ERR_LOCAL_LENGTH;
	case EACCES: case EPERM: return DAT_DTO_ERR_REMOTE_ACCESS;
	default: return DAT_DTO_ERR_TRANSPORT;
	}
}

static void dto_event_ib(struct dfi_dto *d, const struct dfi_comp *c, DAT_EVENT *ev);
static void dto_event_ud(struct dfi_dto *d, const struct dfi_comp *c, DAT_EVENT *ev);
static void dto_event_invalidate(struct dfi_dto *d, const struct dfi_comp *c,
				 DAT_DTO_COMPLETION_EVENT_DATA *e);

/* Every field of the DTO completion is written; the rest of the event's
 * union is not cleared (it is not this event's, and this runs once per
 * completion). */
DFI_HOT static void dto_event(struct dfi_dto *d, const struct dfi_comp *c, DAT_EVENT *ev)
{
	DAT_DTO_COMPLETION_EVENT_DATA *e = &ev->event_data.dto_completion_event_data;

	ev->event_number = DAT_DTO_COMPLETION_EVENT;
	e->ep_handle = d->ep;
	e->user_cookie = d->cookie;
	e->status = DAT_DTO_SUCCESS;
	e->operation = d->op;
	/* tcp reports no length for sends: the posted length is ours */
	e->transfered_length = d->op == DAT_DTO_RECEIVE ? (DAT_SEG_LENGTH)c->len : d->len;
	e->rmr_context = 0;
	if (c->err) {
		e->status = atomic_load_explicit(&d->ep->cut, memory_order_relaxed) ?
			    DAT_DTO_ERR_FLUSHED : dfi_dto_status(c->err);
		if (c->err != ECANCELED)
			dfi_dbg(DFI_SS_EP, "EP %p: DTO %d (cookie 0x%llx) failed: %s",
				(void *)d->ep, (int)d->op, (unsigned long long)d->cookie.as_64,
				strerror(c->err));
	} else if (d->op == DAT_DTO_RECEIVE && (!c->imm || dfi_imm_invalidates(c->data))) {
		dfi_cnt_add_1w(&d->ep->cnt[DCNT_EP_RECV], 1);
		dfi_cnt_add_1w(&d->ep->cnt[DCNT_EP_RECV_DATA], c->len);
	}
	if (__builtin_expect(c->imm || d->op >= DAT_DTO_EXTENSION_BASE || d->ud, 0)) {
		/* (sockets reports the remote CQ data flag on the send's
		 * completion too: only a receive's means anything) */
		if (d->ud)
			dto_event_ud(d, c, ev);
		else if (d->op == DAT_DTO_RECEIVE && c->imm && dfi_imm_invalidates(c->data))
			dto_event_invalidate(d, c, e);
		else if (d->op == DAT_DTO_RECEIVE || d->op >= DAT_DTO_EXTENSION_BASE)
			dto_event_ib(d, c, ev);
	}
}

/* A receive that a peer's dat_ep_post_send_with_invalidate took: the RMR
 * whose context the send carried is unbound before the consumer hears of
 * the data (rmr.c).  None bound with it: a protection error, as IB's. */
static void dto_event_invalidate(struct dfi_dto *d, const struct dfi_comp *c,
				 DAT_DTO_COMPLETION_EVENT_DATA *e)
{
	DAT_RMR_CONTEXT ctx = (DAT_RMR_CONTEXT)c->data;

	e->operation = DAT_DTO_RECEIVE_WITH_INVALIDATE;
	e->rmr_context = ctx;
	if (!c->err)
		e->status = dfi_rmr_invalidate(d->ep->hdr.ia, d->ep, ctx);
}

/* The IB extension's DTO events (ib.c, docs/ib-extension.md): the
 * sender's RDMA write with immediate data, and the receive it consumed at
 * the target, whose remote CQ data carries the write's length (high 32
 * bits, plus one: dfi_imm_write) and the immediate value (low 32). */
static void dto_event_ib(struct dfi_dto *d, const struct dfi_comp *c, DAT_EVENT *ev)
{
	DAT_DTO_COMPLETION_EVENT_DATA *e = &ev->event_data.dto_completion_event_data;
	DAT_IB_EXTENSION_EVENT_DATA *x = (DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;

	memset(x, 0, sizeof(*x));
	ev->event_number = (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT;
	x->status = c->err ? DAT_IB_OP_ERR : DAT_OP_SUCCESS;
	if (d->op == DAT_DTO_RECEIVE) {
		e->operation = (DAT_DTOS)DAT_IB_DTO_RECV_IMMED;
		x->type = DAT_IB_RDMA_WRITE_IMMED_DATA;
		x->val.immed.data = (DAT_UINT32)c->data;
		e->transfered_length = c->err ? 0 : (DAT_SEG_LENGTH)dfi_imm_write_len(c->data);
		if (!c->err) {
			dfi_cnt_add(&d->ep->cnt[DCNT_EP_RECV_RDMA_IMM], 1);
			dfi_cnt_add(&d->ep->cnt[DCNT_EP_RECV_RDMA_IMM_DATA],
				    dfi_imm_write_len(c->data));
		}
	} else {
		x->type = d->op == (DAT_DTOS)DAT_IB_DTO_FETCH_ADD ? DAT_IB_FETCH_AND_ADD :
			  d->op == (DAT_DTOS)DAT_IB_DTO_CMP_SWAP ? DAT_IB_CMP_AND_SWAP :
			  DAT_IB_RDMA_WRITE_IMMED;
	}
	x->context.as_64 = d->cookie.as_64;
}

/* A UD EP's completions (ud.c): the IB extension's UD send and receive,
 * the receive counting the global route header's room before the data. */
static void dto_event_ud(struct dfi_dto *d, const struct dfi_comp *c, DAT_EVENT *ev)
{
	DAT_DTO_COMPLETION_EVENT_DATA *e = &ev->event_data.dto_completion_event_data;
	DAT_IB_EXTENSION_EVENT_DATA *x = (DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;

	memset(x, 0, sizeof(*x));
	ev->event_number = (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT;
	x->status = c->err ? DAT_IB_OP_ERR : DAT_OP_SUCCESS;
	x->context.as_64 = d->cookie.as_64;
	if (d->op == DAT_DTO_RECEIVE) {
		e->operation = (DAT_DTOS)DAT_IB_DTO_RECV_UD;
		x->type = DAT_IB_UD_RECV;
		if (!c->err) {
			e->transfered_length = (DAT_SEG_LENGTH)c->len + DFI_UD_GRH;
			dfi_cnt_add(&d->ep->cnt[DCNT_EP_RECV_UD], 1);
			dfi_cnt_add(&d->ep->cnt[DCNT_EP_RECV_UD_DATA], c->len);
		}
	} else {
		e->operation = (DAT_DTOS)DAT_IB_DTO_SEND_UD;
		x->type = DAT_IB_UD_SEND;
	}
}

/* Whether a completion becomes an event: a suppressed success frees its
 * slot silently; an error is always reported. */
DFI_HOT static bool dto_reported(const struct dfi_dto *d, const struct dfi_comp *c)
{
	return !d->suppress || c->err;
}

/* A completion read from a CQ whose descriptor is not in flight: the
 * provider completed it before (twice the same context), or completes a
 * post it was never given.  Reporting it would name a cookie that is not
 * the consumer's any more and give its slot back twice (two posts on one
 * descriptor later): it is dropped, and said.  A live one is not live from
 * here on, so a second copy in the same batch is caught too.  Only the
 * CQ readers of the descriptor's EVD (under its lock) and the poster
 * that takes the slot back touch the flag; relaxed, ordered by the free
 * list's release and acquire. */
static bool dto_take_live(struct dfi_dto *d, const struct dfi_comp *c)
{
	if (__builtin_expect(atomic_load_explicit(&d->live, memory_order_relaxed), 1)) {
		atomic_store_explicit(&d->live, false, memory_order_relaxed);
		return true;
	}
	static atomic_bool said;	/* a warning once, then debug lines */

	dfi_log(atomic_exchange_explicit(&said, true, memory_order_relaxed) ? DFI_LOG_DEBUG :
		DFI_LOG_WARN, DFI_SS_EP, "a completion (status %d, %zu bytes) of DTO descriptor "
		"%d of pool %p, which is not in flight: the provider completed it twice; dropped",
		c->err, c->len, (int)(d - d->pool->d), (void *)d->pool);
	return false;
}

/* A request failed in the provider while its EP was connected: the
 * connection ends, as an IB QP goes to error at a failed request.  A
 * connected endpoint's provider ends it itself; an RDM endpoint carries
 * other connections on, so the RDM backend breaks this one
 * (dfi_ep_faults, run by the progress thread: this reader may hold an
 * EVD lock, below the locks that takes).  The flushes of a connection
 * that ended, or was cut, find the EP no longer up. */
static void dto_fault(struct dfi_dto *d, int err)
{
	struct dfi_ep *ep = d->ep;
	int none = 0;

	if (d->ud || !atomic_load_explicit(&ep->up, memory_order_relaxed) ||
	    atomic_load_explicit(&ep->cut, memory_order_relaxed) ||
	    !atomic_compare_exchange_strong(&ep->fault, &none, err))
		return;
	atomic_store(&ep->hdr.ia->faults, true);
	dfi_progress_kick_cq(ep->hdr.ia);
}

/*
 * Numbered messages.  A numbered fabric (the RDM backend) says which of
 * its connection's messages a receive took (dfi_comp_msgno), and a
 * connection's receives take its messages in the order they were posted:
 * the n-th receive posted on it, its pool's seq less the connection's base
 * (dfi_dto_order_base), must hold message n (dto_numbered).  Another means the messages
 * before it were lost underneath: net and tcp;ofi_rxm drop what a peer's
 * socket held when they tear it down, and send later messages on a new
 * one (docs/rdm.md, "Numbered messages").  The receive then fails, and
 * every one after it, and the connection ends, as an IB QP's would at a
 * gap in its packet sequence: a message in the wrong buffer would be
 * silent corruption.
 */
static const struct dfi_comp *dto_numbered(const struct dfi_dto *d, const struct dfi_comp *c,
					   struct dfi_comp *out)
{
	struct dfi_dto_order *o = d->pool->order;
	unsigned n, mask;

	if (c->err || d->op != DAT_DTO_RECEIVE || d->ud ||
	    !(mask = atomic_load_explicit(&o->msgno_mask, memory_order_relaxed)))
		return c;
	n = d->seq - atomic_load_explicit(&o->base, memory_order_relaxed);
	if (n > UINT_MAX / 2 || (n & mask) == dfi_comp_msgno(c))
		return c;	/* its own message, or posted for an earlier connection */
	n &= mask;
	/* the wrong message: the completion becomes a failure, in *out, said
	 * once per connection, the later ones in debug */
	dfi_log(atomic_exchange_explicit(&o->lost_said, true, memory_order_relaxed) ?
		DFI_LOG_DEBUG : DFI_LOG_WARN, DFI_SS_EP, "EP %p: receive %u of its connection "
		"took message %u of its peer: the fabric lost the ones between; the receive "
		"fails, as every one after it, and the connection ends", (void *)d->ep, n,
		dfi_comp_msgno(c));
	*out = *c;
	out->err = EPROTO;
	out->len = 0;
	return out;
}

/* A completion read for a live EP: a receive that took another message
 * fails (into *lost), and a failure ends the connection (dto_fault). */
DFI_HOT static inline const struct dfi_comp *dto_checked(struct dfi_dto *d,
							 const struct dfi_comp *c,
							 struct dfi_comp *lost)
{
	if (__builtin_expect(d->pool->order != NULL, 0))
		c = dto_numbered(d, c, lost);
	if (__builtin_expect(c->err != 0, 0))
		dto_fault(d, c->err);
	return c;
}

/* A completion of a freed EP's pool (dfi_ep_dto_orphan): its EP is gone,
 * maybe another EP in its memory, so nothing of it is looked at but the
 * pool, which stays until the completion is read (dfi_dto_pool_release).
 * Relaxed: the flag is set before a detach under the EVD lock, which the
 * reader holds. */
DFI_HOT static inline bool dto_orphan(const struct dfi_dto *d)
{
	return atomic_load_explicit(&d->pool->orphan, memory_order_relaxed);
}

static void fence_kick(struct dfi_dto *d);
static void fence_flush(struct dfi_ep *ep);

/* A request's completion read from the CQ: a read's is one fewer ahead of
 * the EP's fenced requests, and any may let held ones go (fence_release).
 * Before dto_complete: d is valid until then. */
DFI_HOT static inline void fence_done(struct dfi_dto *d)
{
	struct dfi_dto_pool *p = d->pool;

	if (d->op == DAT_DTO_RDMA_READ)
		atomic_fetch_sub_explicit(&p->reads_out, 1, memory_order_acq_rel);
	else if (p->writes_ahead && d->op == DAT_DTO_RDMA_WRITE)
		atomic_fetch_sub_explicit(&p->writes_out, 1, memory_order_acq_rel);
	if (atomic_load_explicit(&p->fence_held, memory_order_acquire))
		fence_kick(d);
}

/* The completion of a write with immediate data's write on a fabric whose
 * sends may overtake writes (post_write_imm): one fewer write ahead of the
 * EP's sends, and its notice may go.  Last, the count that keeps the pool. */
static void wimm_done(struct dfi_dto *w, const struct dfi_comp *c)
{
	struct dfi_dto_pool *p = w->pool;

	if (!atomic_exchange_explicit(&w->live, false, memory_order_relaxed))
		return;		/* a provider's second completion */
	if (!dto_orphan(w)) {
		if (c->err)
			dto_fault(w, c->err);
		atomic_fetch_sub_explicit(&p->writes_out, 1, memory_order_acq_rel);
		if (atomic_load_explicit(&p->fence_held, memory_order_acquire))
			fence_kick(w);
	}
	atomic_fetch_sub_explicit(&p->wimm_out, 1, memory_order_release);
}

/* ------------------------------------------------------ completion order */

/*
 * An unordered fabric (the RDM providers: dfi_fabric_limits' unordered)
 * may complete an EP's requests, or its receives, out of the order they
 * were posted: tcp;ofi_rxm completes a 64 KiB message, sent in segments or
 * fetched by the receiver, after a 4-byte one posted behind it.  DAT, as
 * IB, reports each queue's completions in posted order, and consumers
 * count on it.  So each post to such a pool takes the pool's next seq
 * (dfi_dto_order_take), and a completion read before its turn waits in the
 * pool's `early` array, its slot still taken; once the one before it is
 * reported the pool goes on its EVD's ready list, which the source empties
 * before it reads the CQ again.  All of it runs under the EVD lock: a
 * pool's completions come through one EVD.  A request counts for the
 * barrier fence when it is read (its data has moved), not when it is
 * reported; a freed EP's waiting completions go with it (order_forget).
 */

/* The pool's next completion to report, if it was read early. */
static struct dfi_dto *order_ready(struct dfi_dto_pool *p)
{
	struct dfi_dto_order *o = p->order;
	int i;

	if (!o->early || o->done == atomic_load_explicit(&o->posted, memory_order_acquire))
		return NULL;
	i = atomic_load_explicit(&o->slot[o->done % (unsigned)p->n], memory_order_relaxed);
	if (!o->early[i].ctx || p->d[i].seq != o->done)
		return NULL;
	return &p->d[i];
}

/* d's completion c was read: true if its turn has come; else c waits. */
DFI_HOT static inline bool order_turn(struct dfi_dto *d, const struct dfi_comp *c)
{
	struct dfi_dto_order *o = d->pool->order;

	if (__builtin_expect(!o, 1) || o->off || d->seq == o->done)
		return true;
	if (!o->early && !(o->early = calloc((size_t)d->pool->n, sizeof(*o->early)))) {
		dfi_err(DFI_SS_EP, "EP %p: out of memory holding a completion until its turn: "
			"its completions are reported as they come from now on", (void *)d->ep);
		o->off = true;
		return true;
	}
	o->early[d - d->pool->d] = *c;
	return false;
}

/* d, in its turn, is reported (or dropped): the next, if it came early, is
 * ready.  Before d's dto_complete, after which the pool may go. */
static void order_next(struct dfi_evd *evd, struct dfi_dto *d)
{
	struct dfi_dto_pool *p = d->pool;
	struct dfi_dto_order *o = p->order;

	if (o->off)
		return;
	o->done++;
	if (!o->listed && order_ready(p)) {
		o->listed = true;
		o->next_ready = evd->ready;
		evd->ready = p;
	}
}

/* A freed EP's pool: its early completions are dropped, their slots freed.
 * Before the dto_complete of the completion that found it freed. */
static void order_forget(struct dfi_dto_pool *p)
{
	struct dfi_dto_order *o = p->order;

	for (int i = 0; o->early && i < p->n; i++)
		if (o->early[i].ctx) {
			o->early[i].ctx = NULL;
			dto_complete(p, &i, 1, 0);
		}
}

/* The ready completions into ev[] (at most max).  reaped: the consumer
 * takes them now (cq_read_one), so their slots are freed here. */
static int order_drain(struct dfi_evd *evd, DAT_EVENT *ev, int max, bool reaped)
{
	int out = 0;

	while (evd->ready && out < max) {
		struct dfi_dto_pool *p = evd->ready;
		struct dfi_dto_order *o = p->order;
		struct dfi_dto *d = order_ready(p);
		struct dfi_comp c;
		bool report;
		int idx;

		if (!d) {
			evd->ready = o->next_ready;
			o->listed = false;
			continue;
		}
		idx = (int)(d - p->d);
		c = o->early[idx];
		o->early[idx].ctx = NULL;
		o->done++;
		report = !dto_orphan(d) && dto_reported(d, &c);
		if (report)
			dto_event(d, &c, &ev[out++]);
		if (!order_ready(p)) {	/* off the list before p may go */
			evd->ready = o->next_ready;
			o->listed = false;
		}
		dto_complete(p, &idx, 1, report && !reaped);
	}
	return out;
}

/* A completion read in its turn: the pool's order moves on. */
DFI_HOT static inline void order_read(struct dfi_evd *evd, struct dfi_dto *d, bool orphan)
{
	if (__builtin_expect(!d->pool->order, 1))
		return;
	if (orphan)
		order_forget(d->pool);
	else
		order_next(evd, d);
}

/* A fill of the EVD must cost one fi_cq_read: each is a progress pass. */
_Static_assert(DFI_CQ_BATCH >= DFI_EVQ_FILL_BATCH, "a fill must take one CQ read");

DFI_HOT static int cq_read(void *ctx, DAT_EVENT *ev, int max)
{
	struct dfi_evd *evd = ctx;
	int out = evd->staged ? dfi_srq_take_staged(evd, ev, max) : 0;

	if (evd->ready)
		out += order_drain(evd, ev + out, max - out, false);
	while (out < max && evd->cq) {
		const struct dfi_comp *c;
		int want = max - out < DFI_CQ_BATCH ? max - out : DFI_CQ_BATCH;
		int n = dfi_cq_take(evd->cq, &c, want);

		if (n <= 0)
			return out ? out : n;
		struct dfi_dto_pool *run = NULL;	/* the pool of idx[] */
		int idx[DFI_CQ_BATCH], nidx = 0, nrep = 0;

		for (int i = 0; i < n; i++) {
			const struct dfi_comp *ci = &c[i];
			struct dfi_dto *d = ci->ctx;
			struct dfi_comp lost;
			bool report, orphan;

			if (__builtin_expect(d && d->companion, 0)) {
				wimm_done(d, ci);
				continue;
			}
			if (!d || !dto_take_live(d, ci))
				continue;
			/* a reported one's slot stays taken until the
			 * consumer reaps the event (cq_consumed); one of a
			 * freed EP is dropped, its slot freed now */
			orphan = dto_orphan(d);
			if (!orphan)
				ci = dto_checked(d, ci, &lost);
			if (!orphan && !order_turn(d, ci)) {
				if (d->op != DAT_DTO_RECEIVE)
					fence_done(d);
				continue;
			}
			report = !orphan && dto_reported(d, ci);
			if (report)
				dto_event(d, ci, &ev[out++]);
			if (!orphan && d->op != DAT_DTO_RECEIVE)
				fence_done(d);
			order_read(evd, d, orphan);
			if (d->pool != run) {
				dto_complete(run, idx, nidx, nrep);
				run = d->pool;
				nidx = nrep = 0;
			}
			idx[nidx++] = (int)(d - run->d);
			nrep += report;
		}
		dto_complete(run, idx, nidx, nrep);
		if (evd->ready)
			out += order_drain(evd, ev + out, max - out, false);
		if (n < want)
			break;
	}
	if (out)
		dfi_cnt_add_1w(&evd->cnt[DCNT_EVD_DTO_CALLBACK], (uint64_t)out);
	return out;
}

static void cq_consumed(void *ctx, const DAT_EVENT *ev);

/* One completion for a consumer that reaps it now: its slot is released
 * here, as for a suppressed one (cq_read keeps a reported one's slot
 * until cq_consumed). */
DFI_HOT static int cq_read_one(void *ctx, DAT_EVENT *ev)
{
	struct dfi_evd *evd = ctx;

	if (evd->staged) {
		int n = dfi_srq_take_staged(evd, ev, 1);

		if (n == 1)
			cq_consumed(ctx, ev);
		return n;
	}
	while (evd->cq) {
		const struct dfi_comp *c;
		struct dfi_comp lost;
		struct dfi_dto *d;
		bool report, orphan;
		int n, idx;

		if (evd->ready && order_drain(evd, ev, 1, true)) {
			dfi_cnt_add_1w(&evd->cnt[DCNT_EVD_DTO_CALLBACK], 1);
			return 1;
		}
		n = dfi_cq_take(evd->cq, &c, 1);
		if (n <= 0)
			return n;
		d = c->ctx;
		if (__builtin_expect(d && d->companion, 0)) {
			wimm_done(d, c);
			continue;
		}
		if (!d || !dto_take_live(d, c))
			continue;
		orphan = dto_orphan(d);
		if (!orphan)
			c = dto_checked(d, c, &lost);
		if (!orphan && !order_turn(d, c)) {
			if (d->op != DAT_DTO_RECEIVE)
				fence_done(d);
			continue;
		}
		report = !orphan && dto_reported(d, c);
		if (report)
			dto_event(d, c, ev);
		if (!orphan && d->op != DAT_DTO_RECEIVE)
			fence_done(d);
		order_read(evd, d, orphan);
		idx = (int)(d - d->pool->d);
		dto_complete(d->pool, &idx, 1, 0);	/* last: d may be gone after it */
		if (report) {
			dfi_cnt_add_1w(&evd->cnt[DCNT_EVD_DTO_CALLBACK], 1);
			return 1;
		}
	}
	return 0;
}

DFI_HOT static int cq_trywait(void *ctx)
{
	struct dfi_evd *evd = ctx;

	if (evd->staged || evd->ready)
		return -EAGAIN;		/* staged or ready since the last read: read them */
	return dfi_cq_trywait(evd->cq);
}

DFI_HOT static int cq_fd(void *ctx)
{
	struct dfi_evd *evd = ctx;

	/* an fd that never settles: the waiter polls instead (progress.c) */
	if (atomic_load_explicit(&evd->hdr.ia->polling, memory_order_relaxed))
		return -1;
	return dfi_cq_sleep_fd(evd->cq);
}

DFI_HOT static void cq_slept(void *ctx)
{
	struct dfi_evd *evd = ctx;

	dfi_cq_slept(evd->cq);
}

DFI_HOT static void cq_consumed(void *ctx, const DAT_EVENT *ev)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *e = &ev->event_data.dto_completion_event_data;
	struct dfi_ep *ep = dfi_obj_get(e->ep_handle, DFI_T_EP);
	struct dfi_dto_pool *p;

	(void)ctx;
	/* A freed EP's events were detached at its free (dfi_ep_dto_orphan):
	 * the EP an event names here is the live one that posted it, never a
	 * new EP in a freed one's memory, whose counts this would wrap. */
	if (!ep)
		return;
	bool recv = e->operation == DAT_DTO_RECEIVE ||
		    e->operation == DAT_DTO_RECEIVE_WITH_INVALIDATE ||
		    e->operation == (DAT_DTOS)DAT_IB_DTO_RECV_IMMED ||
		    e->operation == (DAT_DTOS)DAT_IB_DTO_RECV_UD;

	if (recv && ep->srq) {
		dfi_srq_consumed(ep);	/* the slot was the SRQ's */
		return;
	}
	p = recv ? ep->recvq : ep->sendq;
	atomic_fetch_add_explicit(&p->released, 1, memory_order_release);
}

static const struct dfi_evq_source_ops cq_source = {
	.read = cq_read, .trywait = cq_trywait, .fd = cq_fd, .slept = cq_slept,
	.consumed = cq_consumed,
	.read_one = cq_read_one,
};

/* The EVD's CQ, created on first use (sized for the EVD, so a CQ never
 * holds more than the ring can take in one fill). */
int dfi_evd_cq(struct dfi_evd *evd, struct dfi_cq **out)
{
	struct dfi_ia *ia = evd->hdr.ia;
	int rc = 0;

	pthread_mutex_lock(&ia->lock);
	if (!evd->cq) {
		rc = dfi_cq_open(ia->fab, evd->q.qlen < 1024 ? 1024 : evd->q.qlen, &evd->cq);
		if (!rc) {
			dfi_evq_set_source(&evd->q, &cq_source, evd);
			rc = dfi_progress_watch_cq(ia, evd);
			if (rc) {
				dfi_evq_set_source(&evd->q, NULL, NULL);
				dfi_cq_close(evd->cq);
				evd->cq = NULL;
			}
		}
	}
	pthread_mutex_unlock(&ia->lock);
	*out = evd->cq;
	return rc;
}

void dfi_evd_cq_close(struct dfi_evd *evd)
{
	struct dfi_ia *ia = evd->hdr.ia;
	struct dfi_cq *cq;

	pthread_mutex_lock(&ia->lock);
	cq = evd->cq;
	if (cq)
		dfi_progress_unwatch_cq(ia, evd);
	evd->cq = NULL;
	pthread_mutex_unlock(&ia->lock);
	if (!cq)
		return;
	dfi_evq_set_source(&evd->q, NULL, NULL);
	dfi_cq_close(cq);
}

/* ----------------------------------------------------------------- posts */

/* Keep a receive posted before the EP has its libfabric endpoint (post_lock
 * held).  The list starts at the first one, sized for the receive queue up
 * to 16 entries, and doubles: the queue's depth bounds it. */
static int early_add(struct dfi_ep *ep, int idx, const struct dfi_sge *sg, int n)
{
	struct dfi_early *e;

	if (ep->n_early == ep->early_cap) {
		int cap = ep->early_cap ? 2 * ep->early_cap :
			  ep->recvq->n < 16 ? ep->recvq->n : 16;
		struct dfi_early *more = realloc(ep->early, (size_t)cap * sizeof(*more));

		if (!more)
			return -ENOMEM;
		ep->early = more;
		ep->early_cap = cap;
	}
	e = &ep->early[ep->n_early++];
	e->idx = idx;
	e->nsg = n;
	memcpy(e->sg, sg, (size_t)n * sizeof(*sg));
	return 0;
}

/* Receives posted before the connection are flushed by ep_reset/ep_free.
 * Called without ia->cm_lock: posting may run a CNO proxy agent. */
void dfi_ep_flush_pending(struct dfi_ep *ep)
{
	struct dfi_early *early;
	struct dfi_evd *evd;
	DAT_EVENT *evs;
	int n;

	fence_flush(ep);
	n = dfi_dto_atomic_flush(ep, &evs, &evd);
	dfi_dto_atomic_post(evd, evs, n);
	pthread_mutex_lock(&ep->hdr.ia->cm_lock);
	pthread_mutex_lock(&ep->post_lock);
	early = dfi_ep_early_take(ep, &n);
	pthread_mutex_unlock(&ep->post_lock);
	pthread_mutex_unlock(&ep->hdr.ia->cm_lock);
	for (int k = 0; k < n; k++) {
		struct dfi_dto *d = &ep->recvq->d[early[k].idx];
		struct dfi_comp c = { .ctx = d, .err = ECANCELED };
		DAT_EVENT ev;

		dto_event(d, &c, &ev);
		if (ep->recv_evd)
			dfi_evq_post(&ep->recv_evd->q, &ev);
		/* not from a CQ: no reap gives the slot back, this does */
		dto_complete(ep->recvq, &early[k].idx, 1, 0);
	}
	free(early);
}

/*
 * libfabric tcp and net (1.17, and their code since) keep an RDMA read
 * whose response they are receiving both at the head of their read queue
 * and as their current receive.  An endpoint shut down or closed then
 * flushes it from both: two completions of one read, and its transfer
 * entry freed twice into the CQ's pool, which two later posts of EPs on
 * that CQ both take (one's data lands in the other's buffer, or a post is
 * lost: the soak's crossed receives, docs/completions.md).  Their receive
 * path ends such a read once.  So an EP with reads out is cut under the
 * provider first (dfi_fep_cut: its socket shut both ways), and its request
 * EVD is filled from the CQ, which runs the provider's receive path, until
 * every read has come back; then it is shut down or closed.  Sends done
 * but still in the provider's buffer may not reach the peer: as on an
 * abrupt disconnect.  Bounded: a full EVD ring or a reader elsewhere that
 * does not keep up leaves the rest to the old way, and says so.
 */
#define CUT_READS_MS	1000u

void dfi_ep_cut_reads(struct dfi_ep *ep)
{
	struct dfi_dto_pool *p = ep->sendq;
	uint64_t until;

	if (!ep->fep || !ep->req_evd || !p ||
	    atomic_load_explicit(&p->reads_out, memory_order_acquire) == 0)
		return;
	atomic_store_explicit(&ep->cut, true, memory_order_relaxed);
	if (dfi_fep_cut(ep->fep)) {
		atomic_store_explicit(&ep->cut, false, memory_order_relaxed);
		return;
	}
	until = dfi_now_ns() + CUT_READS_MS * 1000000ull;
	while (atomic_load_explicit(&p->reads_out, memory_order_acquire) > 0) {
		if (dfi_now_ns() >= until) {
			dfi_warn(DFI_SS_EP, "EP %p: %d RDMA reads still out %u ms after its "
				 "socket was cut: closed with them (a provider may complete "
				 "one twice)", (void *)ep,
				 atomic_load_explicit(&p->reads_out, memory_order_acquire),
				 CUT_READS_MS);
			return;
		}
		dfi_evq_source_flush(&ep->req_evd->q);
		if (atomic_load_explicit(&p->reads_out, memory_order_acquire) > 0)
			sched_yield();
	}
}

static bool event_of_ep(const DAT_EVENT *ev, void *ep)
{
	return (ev->event_number == DAT_DTO_COMPLETION_EVENT ||
		ev->event_number == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT) &&
	       ev->event_data.dto_completion_event_data.ep_handle == ep;
}

/*
 * The EP is freed once this returns, and its memory may be the next EP's
 * (the quarantine of freed handles is finite, handle.c): an event or a
 * completion of it that reached the EP by its handle later would give a
 * queue slot back to that new EP, whose counts would wrap (its queues
 * "full" for good).  So, after ep_destroy flushed what the CQs held
 * through the EVDs (when there was room):
 *  - its pools are marked: a completion of theirs read from a CQ from now
 *    on is dropped (dat_ep_free lets the consumer find an EP's undequeued
 *    completions on its EVDs or not) and its slot freed;
 *  - its events still queued on its EVDs stay for the consumer, detached
 *    from the source: reaping them gives nothing back (cq_consumed).
 * The EVD lock orders the two: every CQ read and every reap holds it, so a
 * read before the detach left its event there to be found, and one after
 * it sees the mark.  An idle EP (no slot in use) has no event queued nor
 * completion due: no detach, no walk of its EVDs.
 */
void dfi_ep_dto_orphan(struct dfi_ep *ep)
{
	struct dfi_evd *req = ep->req_evd, *recv = ep->recv_evd;

	atomic_store_explicit(&ep->sendq->orphan, true, memory_order_relaxed);
	atomic_store_explicit(&ep->recvq->orphan, true, memory_order_relaxed);
	/* an SRQ EP's receives hold SRQ slots, not its (empty) recvq's */
	if (!ep->srq && dfi_dto_pool_idle(ep->sendq) && dfi_dto_pool_idle(ep->recvq))
		return;
	if (req)
		dfi_evq_source_detach(&req->q, event_of_ep, ep);
	if (recv && recv != req)
		dfi_evq_source_detach(&recv->q, event_of_ep, ep);
}

/* POST_IMM_NOTICE: a write with immediate data's notice, held behind its
 * write where sends may overtake writes (post_write_imm) */
enum post_kind { POST_SEND, POST_RECV, POST_WRITE, POST_READ, POST_WRITE_IMM, POST_SEND_INV,
		 POST_IMM_NOTICE };

/* A request that puts a message in the peer's receive: on a fabric whose
 * sends may overtake writes (writes_ahead), it waits for the EP's writes
 * before it, so that a target that sees the message finds their data
 * (DAT promises nothing here; IB's RC gives it, and DAT programs rely on
 * it: docs/rdm.md, "Send after write").  A write with immediate data
 * sends its notice at once after its write, and is not held: a gap. */
static inline bool kind_sends(enum post_kind kind)
{
	return kind == POST_SEND || kind == POST_SEND_INV;
}

/*
 * DAT_COMPLETION_BARRIER_FENCE_FLAG: the request may not start before the
 * EP's earlier RDMA reads have completed (DAT 2.0: the barrier fence
 * applies to prior RDMA reads; a send that carries what a read fetched).
 * libfabric's tcp and net 1.17 have no FI_FENCE (fi_getinfo with it gives
 * ENODATA), so the provider holds the request: posted to libfabric once
 * the EP's sendq counts no read outstanding (reads_out: posted to
 * libfabric, completion not read from the CQ yet), and every later
 * request of the EP is held behind it, so none overtakes it.  The reads'
 * completions, read by whoever reads the CQ (the consumer or the progress
 * thread), let the held requests go (fence_kick), and so does the next
 * post; a fenced request with no read outstanding goes out at once.  Held
 * requests of an EP whose connection ends are flushed by the next
 * dat_ep_reset or dat_ep_free (dfi_ep_flush_pending).
 */
struct dfi_held {
	struct dfi_held *next;
	enum post_kind kind;
	bool fenced;
	bool after_writes;		/* a send behind writes (writes_ahead) */
	int idx;			/* its descriptor in the sendq */
	int n;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t imm;			/* POST_WRITE_IMM's immediate value */
	struct dfi_sge sg[DFI_MAX_SGE];
};

/*
 * RDMA write with immediate data (the IB extension; docs/ib-extension.md):
 * the write, with no descriptor of its own (its completion, a NULL
 * context, is skipped), then on the same endpoint a message of no bytes
 * whose remote CQ data is the write's length and the immediate value.
 * libfabric orders a send after a write (FI_ORDER_SAW), so the target's
 * receive completes after the data landed; it consumes a posted receive
 * as IB's does, and touches none of its bytes.  tcp 1.17's own fi_writedata
 * would not do: its target completion takes no receive and names no
 * endpoint on a CQ that several share.
 *
 * Where sends may overtake writes (writes_ahead: efa, psm3, opx, cxi), the
 * notice would land before the data: the write goes under a descriptor of
 * its own (the pool's wimm[], counted in writes_out as the EP's other
 * writes), and the notice is held at the head of the EP's held requests,
 * until the write's completion lets it go (wimm_done, fence_release), as a
 * send behind writes is.  Its place among the pool's posts is taken then.
 */
static int write_imm_held(struct dfi_ep *ep, const struct dfi_sge *sg, int n, uint64_t raddr,
			  uint32_t rkey, uint32_t imm, struct dfi_dto *d)
{
	struct dfi_dto_pool *p = d->pool;
	struct dfi_dto *w = &p->wimm[d - p->d];
	struct dfi_held *h = malloc(sizeof(*h));
	int rc;

	if (!h)
		return -ENOMEM;
	*h = (struct dfi_held){ .kind = POST_IMM_NOTICE, .after_writes = true,
				.idx = (int)(d - p->d), .imm = imm };
	w->ep = d->ep;
	atomic_store_explicit(&w->live, true, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->wimm_out, 1, memory_order_acq_rel);
	atomic_fetch_add_explicit(&p->writes_out, 1, memory_order_acq_rel);
	rc = dfi_post_write(ep->fep, sg, n, raddr, rkey, dfi_dto_wimm_fctx(d));
	if (rc) {
		atomic_fetch_sub_explicit(&p->writes_out, 1, memory_order_acq_rel);
		atomic_store_explicit(&w->live, false, memory_order_relaxed);
		atomic_fetch_sub_explicit(&p->wimm_out, 1, memory_order_release);
		free(h);
		return rc;
	}
	dfi_dto_order_untake(d);	/* the notice's, when it goes */
	h->next = ep->held;
	ep->held = h;
	if (!h->next)
		ep->held_tail = &h->next;
	atomic_fetch_add_explicit(&p->fence_held, 1, memory_order_release);
	return 0;
}

static int post_write_imm(struct dfi_ep *ep, const struct dfi_sge *sg, int n, uint64_t raddr,
			  uint32_t rkey, uint32_t imm, struct dfi_dto *d)
{
	uint64_t data = dfi_imm_write((uint32_t)d->len, imm);
	int rc;

	if (d->pool->writes_ahead)
		return write_imm_held(ep, sg, n, raddr, rkey, imm, d);
	/* the write's completion, its context NULL, is skipped */
	rc = dfi_post_write(ep->fep, sg, n, raddr, rkey, dfi_dto_wimm_fctx(d));

	if (rc)
		return rc;
	/* the write is out: the notice must follow it (its slot is reserved:
	 * the endpoint's transmit queue is twice the EP's requests, conn.c) */
	for (int k = 0; k < 1000; k++) {
		rc = dfi_post_senddata(ep->fep, NULL, 0, data, dfi_dto_fctx(d));
		if (rc != -EAGAIN)
			break;
		sched_yield();
	}
	if (rc) {
		dfi_err(DFI_SS_EP, "EP %p: RDMA write with immediate data: the write went, its "
			"notice did not: %s", (void *)ep, strerror(-rc));
		return -EIO;
	}
	return 0;
}

DFI_HOT static inline int post_kind(struct dfi_ep *ep, enum post_kind kind,
				    const struct dfi_sge *sg, int n, uint64_t raddr, uint32_t rkey,
				    uint32_t imm, struct dfi_dto *d)
{
	void *ctx = dfi_dto_fctx(d);
	int rc;

	switch (kind) {
	case POST_SEND: return dfi_post_send(ep->fep, sg, n, ctx);
	case POST_RECV: return dfi_post_recv(ep->fep, sg, n, ctx);
	case POST_WRITE:
		if (!ep->sendq->writes_ahead)
			return dfi_post_write(ep->fep, sg, n, raddr, rkey, ctx);
		/* counted before the post, as a read is */
		atomic_fetch_add_explicit(&ep->sendq->writes_out, 1, memory_order_acq_rel);
		rc = dfi_post_write(ep->fep, sg, n, raddr, rkey, ctx);
		if (rc)
			atomic_fetch_sub_explicit(&ep->sendq->writes_out, 1, memory_order_acq_rel);
		return rc;
	case POST_WRITE_IMM: return post_write_imm(ep, sg, n, raddr, rkey, imm, d);
	/* the RMR context to invalidate as remote CQ data (dfi_imm_invalidates) */
	case POST_SEND_INV: return dfi_post_senddata(ep->fep, sg, n, imm, ctx);
	case POST_IMM_NOTICE:
		return dfi_post_senddata(ep->fep, NULL, 0, dfi_imm_write((uint32_t)d->len, imm),
					 ctx);
	default:
		/* counted before the post: its completion may be read first */
		atomic_fetch_add_explicit(&ep->sendq->reads_out, 1, memory_order_acq_rel);
		rc = dfi_post_read(ep->fep, sg, n, raddr, rkey, ctx);
		if (rc)
			atomic_fetch_sub_explicit(&ep->sendq->reads_out, 1, memory_order_acq_rel);
		return rc;
	}
}

/* The seq first: the completion may be read before the post returns. */
static int post_to_fabric(struct dfi_ep *ep, enum post_kind kind, const struct dfi_sge *sg,
			  int n, uint64_t raddr, uint32_t rkey, uint32_t imm, struct dfi_dto *d)
{
	int rc;

	dfi_dto_order_take(d);
	rc = post_kind(ep, kind, sg, n, raddr, rkey, imm, d);
	if (rc)
		dfi_dto_order_untake(d);
	return rc;
}

/* post_lock held: hold a request behind the fence (or behind held ones). */
static int fence_hold(struct dfi_ep *ep, enum post_kind kind, bool fenced, bool after_writes,
		      int idx, const struct dfi_sge *sg, int n, uint64_t raddr, uint32_t rkey,
		      uint32_t imm)
{
	struct dfi_held *h = malloc(sizeof(*h));

	if (!h)
		return -ENOMEM;
	*h = (struct dfi_held){ .kind = kind, .fenced = fenced, .after_writes = after_writes,
				.idx = idx, .n = n, .raddr = raddr, .rkey = rkey, .imm = imm };
	memcpy(h->sg, sg, (size_t)n * sizeof(*sg));
	if (ep->held)
		*ep->held_tail = h;
	else
		ep->held = h;
	ep->held_tail = &h->next;
	atomic_fetch_add_explicit(&ep->sendq->fence_held, 1, memory_order_release);
	return 0;
}

/* post_lock held: post the held requests that may go, in order - up to a
 * fenced one while reads are outstanding.  A full libfabric queue stops
 * it until the next completion; an EP no longer connected keeps them for
 * dfi_ep_flush_pending. */
static void fence_release(struct dfi_ep *ep)
{
	atomic_store_explicit(&ep->sendq->fence_due, false, memory_order_relaxed);
	while (ep->held && ep->fep && ep->state == DAT_EP_STATE_CONNECTED) {
		struct dfi_held *h = ep->held;
		int rc;

		if (h->fenced &&
		    atomic_load_explicit(&ep->sendq->reads_out, memory_order_acquire) > 0)
			return;
		if (h->after_writes &&
		    atomic_load_explicit(&ep->sendq->writes_out, memory_order_acquire) > 0)
			return;
		/* off the list first: a write with immediate data puts its
		 * notice at the head as it goes (write_imm_held) */
		ep->held = h->next;
		rc = post_to_fabric(ep, h->kind, h->sg, h->n, h->raddr, h->rkey, h->imm,
				    &ep->sendq->d[h->idx]);
		if (rc) {
			if (rc != -EAGAIN)
				dfi_warn(DFI_SS_EP, "EP %p: a request held by a fence: post "
					 "failed: %s", (void *)ep, strerror(-rc));
			h->next = ep->held;
			ep->held = h;
			if (!h->next)
				ep->held_tail = &h->next;
			return;
		}
		atomic_fetch_sub_explicit(&ep->sendq->fence_held, 1, memory_order_release);
		free(h);
	}
}

/* A completion of d's request queue while requests are held: release
 * them now if the EP's post lock is free (this runs under the EVD lock,
 * which comes after post_lock), else mark it due for the post that holds
 * the lock (post, below). */
static void fence_kick(struct dfi_dto *d)
{
	struct dfi_ep *ep = dfi_obj_get(d->ep, DFI_T_EP);

	if (!ep || ep->sendq != d->pool)
		return;		/* freed since (its held requests were flushed) */
	atomic_store_explicit(&d->pool->fence_due, true, memory_order_seq_cst);
	if (pthread_mutex_trylock(&ep->post_lock))
		return;
	fence_release(ep);
	pthread_mutex_unlock(&ep->post_lock);
}

/* dat_ep_reset, dat_ep_free: the held requests complete flushed. */
static void fence_flush(struct dfi_ep *ep)
{
	struct dfi_held *h;

	pthread_mutex_lock(&ep->post_lock);
	h = ep->held;
	ep->held = NULL;
	atomic_store_explicit(&ep->sendq->fence_held, 0, memory_order_release);
	pthread_mutex_unlock(&ep->post_lock);
	while (h) {
		struct dfi_held *next = h->next;
		struct dfi_dto *d = &ep->sendq->d[h->idx];
		struct dfi_comp c = { .ctx = d, .err = ECANCELED };
		DAT_EVENT ev;

		if (ep->req_evd && dto_reported(d, &c)) {
			dto_event(d, &c, &ev);
			dfi_evq_post(&ep->req_evd->q, &ev);
		}
		dto_complete(ep->sendq, &h->idx, 1, 0);
		free(h);
		h = next;
	}
}

/* What a post left to do once the EP's post lock is dropped: no lock is
 * held across an EVD post (a CNO's proxy agent is user code). */
struct post_after {
	struct dfi_evd *evd;	/* of the completion, if any */
	bool posted;		/* to libfabric: the EVD is touched */
	bool flushed;		/* ev is a flushed completion for evd */
	DAT_EVENT ev;
};

/* Inlined, with post() below, into each dat_ep_post_* entry: there `kind`
 * is a constant and its branches fold.  post_lock held. */
#define POST_INLINE static inline __attribute__((always_inline))

/* A post's segments as the fabric's (zero-length ones dropped, as DAT
 * allows): how many, their bytes in *total. */
POST_INLINE int sg_of(const DAT_LMR_TRIPLET *iov, DAT_COUNT nseg, struct dfi_sge *sg,
		      DAT_VLEN *total)
{
	int n = 0;

	*total = 0;
	for (int i = 0; i < nseg; i++) {
		if (!iov[i].segment_length)
			continue;
		sg[n].addr = (void *)(uintptr_t)iov[i].virtual_address;
		sg[n].len = iov[i].segment_length;
		sg[n].mr = NULL;	/* the providers we run on need no local key */
		*total += iov[i].segment_length;
		n++;
	}
	return n;
}

/* post_lock held: a request slot for an operation posted on its own (an
 * atomic, a UD send), filled in; -1 if the queue is full. */
static int request_take(struct dfi_ep *ep, DAT_DTO_COOKIE cookie, DAT_SEG_LENGTH len,
			DAT_DTOS op, bool ud, DAT_COMPLETION_FLAGS flags)
{
	int i = dto_get(ep->sendq);
	struct dfi_dto *d;

	if (i < 0)
		return -1;
	d = &ep->sendq->d[i];
	d->ep = ep;
	d->cookie = cookie;
	d->len = len;
	d->ud = ud;
	d->op = op;
	d->suppress = (flags & DAT_COMPLETION_SUPPRESS_FLAG) ||
		      ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) &&
		       (ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG));
	return i;
}

/* The EP's counters of what it posted (dat_ib_query_counters). */
POST_INLINE void post_count(struct dfi_ep *ep, enum post_kind kind, DAT_VLEN bytes)
{
	static const int which[] = {
		[POST_SEND] = DCNT_EP_POST_SEND, [POST_RECV] = DCNT_EP_POST_RECV,
		[POST_WRITE] = DCNT_EP_POST_WRITE, [POST_READ] = DCNT_EP_POST_READ,
		[POST_WRITE_IMM] = DCNT_EP_POST_WRITE_IMM, [POST_SEND_INV] = DCNT_EP_POST_SEND,
	};

	dfi_cnt_add_1w(&ep->cnt[which[kind]], 1);
	dfi_cnt_add_1w(&ep->cnt[which[kind] + 1], bytes);	/* its _DATA */
}
POST_INLINE DAT_RETURN post_locked(struct dfi_ep *ep, DAT_COUNT nseg, DAT_LMR_TRIPLET *iov,
				   DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				   DAT_COMPLETION_FLAGS flags, enum post_kind kind, uint32_t imm,
				   struct post_after *after)
{
	struct dfi_dto_pool *pool;
	struct dfi_sge sg[DFI_MAX_SGE];
	DAT_COUNT maxseg;
	struct dfi_dto *d;
	DAT_VLEN total;
	bool after_writes;
	int i, n, rc;

	after->evd = kind == POST_RECV ? ep->recv_evd : ep->req_evd;	/* its completion's */
	if (after->evd)
		dfi_evq_posting(&after->evd->q, true);	/* post() clears it */
	if (kind == POST_RECV && ep->srq)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1),
				  "EP %p takes its receives from SRQ %p: post them with "
				  "dat_srq_post_recv", (void *)ep, (void *)ep->srq);
	maxseg = kind == POST_RECV ? ep->attr.max_recv_iov :
		 kind == POST_SEND || kind == POST_SEND_INV ? ep->attr.max_request_iov :
		 kind == POST_WRITE || kind == POST_WRITE_IMM ? ep->attr.max_rdma_write_iov :
		 ep->attr.max_rdma_read_iov;
	if (nseg < 0 || nseg > maxseg)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "EP %p: %d segments, the EP allows %d", (void *)ep, nseg, maxseg);
	if (nseg > 0 && !iov)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "EP %p: segment list is NULL", (void *)ep);
	if ((kind == POST_WRITE || kind == POST_READ || kind == POST_WRITE_IMM) && !remote)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5),
				  "EP %p: remote RMR triplet is NULL", (void *)ep);
	n = sg_of(iov, nseg, sg, &total);
	if (__builtin_expect(ep->ud, 0)) {
		if (kind != POST_RECV)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1),
					  "EP %p is a UD EP: it sends with dat_ib_post_send_ud, "
					  "and has no RDMA", (void *)ep);
		/* the message lands after the GRH's room, as on IB */
		if (!n || sg[0].len < DFI_UD_GRH)
			return DFI_REJECT(DFI_ERR(DAT_LENGTH_ERROR, 0),
					  "UD EP %p: a receive's first segment must hold the "
					  "%d-byte global route header", (void *)ep, DFI_UD_GRH);
		sg[0].addr = (char *)sg[0].addr + DFI_UD_GRH;
		sg[0].len -= DFI_UD_GRH;
	}
	if (kind == POST_WRITE_IMM && total >= UINT32_MAX)
		return DFI_REJECT(DFI_ERR(DAT_LENGTH_ERROR, 0),
				  "EP %p: RDMA write with immediate data of %llu bytes: at most "
				  "4 GiB - 2", (void *)ep, (unsigned long long)total);
	pool = kind == POST_RECV ? ep->recvq : ep->sendq;
	i = dto_get(pool);
	if (i < 0)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP),
				  "EP %p: %s queue full (%d)", (void *)ep,
				  kind == POST_RECV ? "receive" : "request", pool->n);
	d = &pool->d[i];
	d->ep = ep;
	d->cookie = cookie;
	d->len = (DAT_SEG_LENGTH)total;
	d->ud = ep->ud;
	d->op = kind == POST_SEND || kind == POST_SEND_INV ? DAT_DTO_SEND :
		kind == POST_RECV ? DAT_DTO_RECEIVE :
		kind == POST_WRITE ? DAT_DTO_RDMA_WRITE : kind == POST_READ ? DAT_DTO_RDMA_READ :
		(DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED;
	d->suppress = (flags & DAT_COMPLETION_SUPPRESS_FLAG) ||
		      ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) && kind != POST_RECV &&
		       (ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG));

	if (ep->state == DAT_EP_STATE_DISCONNECTED ||
	    ep->state == DAT_EP_STATE_DISCONNECT_PENDING) {
		/* A DTO posted to a disconnected EP completes flushed (the
		 * dat_ep_reset "marker" technique relies on it). */
		struct dfi_comp c = { .ctx = d, .err = ECANCELED };

		dto_event(d, &c, &after->ev);
		dto_put(pool, i);
		after->flushed = after->evd != NULL;
		return DAT_SUCCESS;
	}
	if (ep->fep && kind != POST_RECV && ep->state != DAT_EP_STATE_CONNECTED) {
		dto_put(pool, i);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				  "EP %p: connection not established yet", (void *)ep);
	}
	if (!ep->fep) {
		DAT_EP_STATE st = ep->state;

		if (kind == POST_RECV && st != DAT_EP_STATE_CONNECTED &&
		    st != DAT_EP_STATE_DISCONNECTED) {
			if (!early_add(ep, i, sg, n)) {
				post_count(ep, kind, total);
				return DAT_SUCCESS;
			}
			dto_put(pool, i);
			return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY),
					  "EP %p: no memory to keep a receive posted before "
					  "connecting (%d kept)", (void *)ep, ep->n_early);
		}
		dto_put(pool, i);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED),
				  "EP %p is not connected", (void *)ep);
	}
	after_writes = pool->writes_ahead && kind_sends(kind) &&
		       atomic_load_explicit(&pool->writes_out, memory_order_acquire) > 0;
	if (kind != POST_RECV &&
	    (ep->held || after_writes ||
	     ((flags & DAT_COMPLETION_BARRIER_FENCE_FLAG) &&
	      atomic_load_explicit(&pool->reads_out, memory_order_acquire) > 0))) {
		bool fenced = flags & DAT_COMPLETION_BARRIER_FENCE_FLAG;

		if (fence_hold(ep, kind, fenced, pool->writes_ahead && kind_sends(kind), i, sg, n,
			       remote ? remote->virtual_address : 0,
			       remote ? remote->rmr_context : 0, imm)) {
			dto_put(pool, i);
			return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES,
						  DAT_RESOURCE_MEMORY),
					  "EP %p: no memory to hold a fenced request",
					  (void *)ep);
		}
		/* the reads may all have completed meanwhile */
		fence_release(ep);
		post_count(ep, kind, total);
		after->posted = true;
		return DAT_SUCCESS;
	}
	/* A suppressed send that fits goes out with no completion to read
	 * (DAPL_OFI_INJECT): its slot is free at once.  One that cannot
	 * (queue full) takes the ordinary way, which reports why. */
	if (kind == POST_SEND && d->suppress && total <= ep->inject_max &&
	    dfi_post_inject(ep->fep, sg, n) == 0) {
		dto_put(pool, i);
		post_count(ep, kind, total);
		after->posted = true;
		return DAT_SUCCESS;
	}
	rc = post_to_fabric(ep, kind, sg, n, remote ? remote->virtual_address : 0,
			    remote ? remote->rmr_context : 0, imm, d);
	if (rc == -ENOTCONN) {
		/* the connection ended under the post, before its event came:
		 * flushed, as a post to a disconnected EP */
		struct dfi_comp c = { .ctx = d, .err = ECANCELED };

		dto_event(d, &c, &after->ev);
		dto_put(pool, i);
		after->flushed = after->evd != NULL;
		return DAT_SUCCESS;
	}
	if (rc) {
		dto_put(pool, i);
		if (rc == -EAGAIN)
			return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP),
					  "EP %p: libfabric queue full", (void *)ep);
		dfi_warn(DFI_SS_EP, "EP %p: post failed: %s", (void *)ep, strerror(-rc));
		return DFI_ERR(DAT_INTERNAL_ERROR, 0);
	}
	if (__builtin_expect(ep->held != NULL, 0))
		fence_release(ep);	/* a notice held (write_imm_held): its write may be done */
	post_count(ep, kind, total);
	after->posted = true;
	return DAT_SUCCESS;
}

/* The EP's post_lock, not the IA's cm_lock: posts on different EPs run in
 * parallel, also with the CM (struct dfi_ep). */
POST_INLINE DAT_RETURN post(DAT_EP_HANDLE h, DAT_COUNT nseg, DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
			    DAT_COMPLETION_FLAGS flags, enum post_kind kind, uint32_t imm)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct post_after after;
	DAT_RETURN rc;

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	after.posted = after.flushed = false;
	after.evd = NULL;
	pthread_mutex_lock(&ep->post_lock);
	rc = post_locked(ep, nseg, iov, cookie, remote, flags, kind, imm, &after);
	pthread_mutex_unlock(&ep->post_lock);
	if (after.evd)
		dfi_evq_posting(&after.evd->q, false);
	if (kind != POST_RECV &&
	    atomic_load_explicit(&ep->sendq->fence_due, memory_order_seq_cst)) {
		/* a completion found post_lock busy (fence_kick) */
		pthread_mutex_lock(&ep->post_lock);
		fence_release(ep);
		pthread_mutex_unlock(&ep->post_lock);
	}
	if (after.flushed)
		dfi_evq_post(&after.evd->q, &after.ev);
	else if (after.posted && after.evd)
		dfi_evq_touch(&after.evd->q);	/* a busy poster: the progress thread stays off */
	return rc;
}

DFI_HOT DAT_RETURN dfi_ep_post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return post(ep, n, iov, cookie, NULL, flags, POST_SEND, 0);
}

/* A send whose receive unbinds the peer's RMR with context rmr (DAT 2.0;
 * IB's send with invalidate): the context travels as the message's remote
 * CQ data, and the receiver's completion is DAT_DTO_RECEIVE_WITH_INVALIDATE
 * with that context (dto_event_invalidate). */
DAT_RETURN dfi_ep_post_send_with_invalidate(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
					    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags,
					    DAT_BOOLEAN invalidate, DAT_RMR_CONTEXT rmr)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);

	if (!invalidate)
		return post(h, n, iov, cookie, NULL, flags, POST_SEND, 0);
	if (ep && dfi_fabric_limits(ep->hdr.ia->fab)->cq_data_size < 8)
		return DFI_REJECT(DFI_ERR(DAT_MODEL_NOT_SUPPORTED, 0),
				  "EP %p: libfabric %s carries no remote CQ data, which a send "
				  "with invalidate needs", (void *)ep,
				  dfi_fabric_limits(ep->hdr.ia->fab)->prov_name);
	return post(h, n, iov, cookie, NULL, flags, POST_SEND_INV, rmr);
}

DFI_HOT DAT_RETURN dfi_ep_post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return post(ep, n, iov, cookie, NULL, flags, POST_RECV, 0);
}

DFI_HOT DAT_RETURN dfi_ep_post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
					  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *r,
					  DAT_COMPLETION_FLAGS flags)
{
	return post(ep, n, iov, cookie, r, flags, POST_WRITE, 0);
}

DFI_HOT DAT_RETURN dfi_ep_post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
					 DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *r,
					 DAT_COMPLETION_FLAGS flags)
{
	return post(ep, n, iov, cookie, r, flags, POST_READ, 0);
}

/* dat_ib_post_rdma_write_immed (ib.c checked the IA can). */
DAT_RETURN dfi_ep_post_rdma_write_immed(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
					DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *r,
					DAT_UINT32 imm, DAT_COMPLETION_FLAGS flags)
{
	return post(ep, n, iov, cookie, r, flags, POST_WRITE_IMM, imm);
}

/* Native atomics (docs/ib-extension.md): one 8-byte operation, its old
 * value into the consumer's LMR segment, its operands kept in the request
 * queue's slot until the completion.  On a connected EP only, after any
 * requests a fence holds (they would be overtaken). */
DAT_RETURN dfi_ep_post_atomic(DAT_EP_HANDLE h, bool cswap, DAT_UINT64 compare, DAT_UINT64 value,
			      const DAT_LMR_TRIPLET *l, DAT_DTO_COOKIE cookie,
			      const DAT_RMR_TRIPLET *r, DAT_COMPLETION_FLAGS flags)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct dfi_dto_pool *pool;
	struct dfi_dto *d;
	DAT_RETURN rc = DAT_SUCCESS;
	bool emul;
	int i, err;

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	emul = !dfi_fabric_limits(ep->hdr.ia->fab)->atomic;
	if (!l)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER,
					  cswap ? DAT_INVALID_ARG4 : DAT_INVALID_ARG3),
				  "EP %p: atomic: local segment is NULL", (void *)ep);
	if (!r)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER,
					  cswap ? DAT_INVALID_ARG6 : DAT_INVALID_ARG5),
				  "EP %p: atomic: remote RMR triplet is NULL", (void *)ep);
	if (l->segment_length < 8 || (l->virtual_address & 7))
		return DFI_REJECT(DFI_ERR(DAT_LENGTH_ERROR, 0),
				  "EP %p: atomic: the local segment (%llu bytes at 0x%llx) must hold "
				  "8 aligned bytes", (void *)ep, (unsigned long long)l->segment_length,
				  (unsigned long long)l->virtual_address);
	if (r->virtual_address & 7)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER,
					  cswap ? DAT_INVALID_ARG6 : DAT_INVALID_ARG5),
				  "EP %p: atomic: remote address 0x%llx is not 8-byte aligned",
				  (void *)ep, (unsigned long long)r->virtual_address);
	pthread_mutex_lock(&ep->post_lock);
	pool = ep->sendq;
	if (!ep->fep || ep->state != DAT_EP_STATE_CONNECTED) {
		rc = DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				"EP %p: atomic: not connected", (void *)ep);
		goto out;
	}
	if (ep->held) {
		rc = DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP),
				"EP %p: atomic: requests are held behind a fence", (void *)ep);
		goto out;
	}
	if (!pool->atom && !(pool->atom = calloc((size_t)pool->n, sizeof(*pool->atom)))) {
		rc = DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY),
				"EP %p: atomic: no memory for the operands", (void *)ep);
		goto out;
	}
	i = request_take(ep, cookie, 8, (DAT_DTOS)(cswap ? DAT_IB_DTO_CMP_SWAP :
						  DAT_IB_DTO_FETCH_ADD), false, flags);
	if (i < 0) {
		rc = DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP),
				"EP %p: request queue full (%d)", (void *)ep, pool->n);
		goto out;
	}
	d = &pool->d[i];
	pool->atom[i].operand = value;
	pool->atom[i].compare = compare;
	if (emul) {
		/* its outcome comes as a CM event (dfi_dto_atomic_done), not
		 * from the CQ: no place among the CQ's completions */
		uint64_t id;

		dfi_progress_atomics(ep->hdr.ia);	/* the answer may come on a receive CQ */
		if (!++pool->atom_seq)
			pool->atom_seq = 1;	/* an id is never 0: "none out" */
		id = (uint64_t)pool->atom_seq << 32 | (uint32_t)i;

		pool->atom[i].id = id;
		pool->atom[i].result = (uint64_t *)(uintptr_t)l->virtual_address;
		err = dfi_post_atomic_emul(ep->fep, cswap ? DFI_ATOMIC_CSWAP : DFI_ATOMIC_FADD,
					   value, compare, r->virtual_address, r->rmr_context, id);
		if (err)
			pool->atom[i].id = 0;
	} else {
		dfi_dto_order_take(d);
		err = dfi_post_atomic(ep->fep, cswap ? DFI_ATOMIC_CSWAP : DFI_ATOMIC_FADD,
				      &pool->atom[i].operand, &pool->atom[i].compare,
				      (uint64_t *)(uintptr_t)l->virtual_address, NULL,
				      r->virtual_address, r->rmr_context, dfi_dto_fctx(d));
		if (err)
			dfi_dto_order_untake(d);
	}
	if (err) {
		dto_put(pool, i);
		if (err == -EAGAIN)
			rc = DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP),
					"EP %p: %s queue full", (void *)ep,
					emul ? "the emulated atomics'" : "libfabric");
		else if (err == -ENOPROTOOPT)
			rc = DFI_REJECT(DFI_ERR(DAT_NOT_IMPLEMENTED, 0),
					"EP %p: atomic: the peer serves no emulated atomics (it "
					"announced no mailbox when connecting)", (void *)ep);
		else if (err == -ENOTCONN)
			rc = DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
					"EP %p: atomic: the connection ended", (void *)ep);
		else
			rc = DFI_REJECT(DFI_ERR(DAT_INTERNAL_ERROR, 0), "EP %p: atomic: %s",
					(void *)ep, strerror(-err));
		goto out;
	}
	dfi_cnt_add_1w(&ep->cnt[cswap ? DCNT_EP_POST_CMP_SWAP : DCNT_EP_POST_FETCH_ADD], 1);
out:
	pthread_mutex_unlock(&ep->post_lock);
	if (rc == DAT_SUCCESS && ep->req_evd)
		dfi_evq_touch(&ep->req_evd->q);
	return rc;
}

/* dat_ib_post_send_ud: a send of a UD EP to the peer UD EP an address
 * handle names (ud.c), whose receive it takes as a connection's send
 * would; never injected, and no fence applies (a UD EP has no RDMA). */
DAT_RETURN dfi_ep_post_send_ud(DAT_EP_HANDLE h, DAT_COUNT nseg, DAT_LMR_TRIPLET *iov,
			       const DAT_IB_ADDR_HANDLE *ah, DAT_DTO_COOKIE cookie,
			       DAT_COMPLETION_FLAGS flags)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct dfi_sge sg[DFI_MAX_SGE];
	struct dfi_dto_pool *pool;
	struct dfi_ah *fah;
	struct dfi_dto *d;
	DAT_VLEN total;
	DAT_RETURN rc = DAT_SUCCESS;
	int i, n, err;

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	if (!ep->ud)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "UD send: EP %p is not a UD EP (DAT_IB_SERVICE_TYPE_UD)",
				  (void *)ep);
	if (nseg < 0 || nseg > ep->attr.max_request_iov)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "EP %p: %d segments, the EP allows %d", (void *)ep, nseg,
				  ep->attr.max_request_iov);
	if (nseg > 0 && !iov)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "EP %p: segment list is NULL", (void *)ep);
	n = sg_of(iov, nseg, sg, &total);
	if (total > (DAT_VLEN)ep->attr.max_message_size)
		return DFI_REJECT(DFI_ERR(DAT_LENGTH_ERROR, 0),
				  "UD EP %p: %llu bytes, above its max_message_size %llu", (void *)ep,
				  (unsigned long long)total,
				  (unsigned long long)ep->attr.max_message_size);
	pthread_rwlock_rdlock(&ep->hdr.ia->ud_lock);
	fah = dfi_ud_ah_get(ep->hdr.ia, ah);
	if (!fah) {
		pthread_rwlock_unlock(&ep->hdr.ia->ud_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "UD EP %p: %p is not an address handle of this IA (freed, or "
				  "never given by a UD connection event)", (void *)ep,
				  ah ? (void *)ah->ah : NULL);
	}
	pthread_mutex_lock(&ep->post_lock);
	pool = ep->sendq;
	if (!ep->fep || ep->state != DAT_EP_STATE_CONNECTED) {
		rc = DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				"UD EP %p: no address resolved yet, or disconnected", (void *)ep);
		goto out;
	}
	i = request_take(ep, cookie, (DAT_SEG_LENGTH)total, DAT_DTO_SEND, true, flags);
	if (i < 0) {
		rc = DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP),
				"EP %p: request queue full (%d)", (void *)ep, pool->n);
		goto out;
	}
	d = &pool->d[i];
	dfi_dto_order_take(d);
	err = dfi_post_send_ud(ep->fep, fah, sg, n, dfi_dto_fctx(d));
	if (err) {
		dfi_dto_order_untake(d);
		dto_put(pool, i);
		rc = err == -EAGAIN ?
		     DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP),
				"EP %p: libfabric queue full", (void *)ep) :
		     DFI_REJECT(DFI_ERR(DAT_INTERNAL_ERROR, 0), "UD EP %p: send: %s", (void *)ep,
				strerror(-err));
		goto out;
	}
	dfi_cnt_add_1w(&ep->cnt[DCNT_EP_POST_SEND_UD], 1);
	dfi_cnt_add_1w(&ep->cnt[DCNT_EP_POST_SEND_UD_DATA], total);
out:
	pthread_mutex_unlock(&ep->post_lock);
	pthread_rwlock_unlock(&ep->hdr.ia->ud_lock);
	if (rc == DAT_SUCCESS && ep->req_evd)
		dfi_evq_touch(&ep->req_evd->q);
	return rc;
}

/* ------------------------------------------------------- emulated atomics
 * Where libfabric has no FI_ATOMIC, an RDM fabric carries an atomic over
 * the connection's control channel (rdm/rcm.c), the target's progress
 * applies it, and its outcome comes back as a CM event: the request's
 * slot is completed here, not from the CQ.  An id names the slot and the
 * post (atom_seq), so that a stale or forged answer matches nothing. */

/* post_lock held: the slot of ep's atomic out with this id, or -1. */
static int atom_slot(struct dfi_ep *ep, uint64_t id)
{
	struct dfi_dto_pool *p = ep->sendq;
	uint32_t i = (uint32_t)id;

	if (!p->atom || i >= (uint32_t)p->n || !id || p->atom[i].id != id)
		return -1;
	return (int)i;
}

/* post_lock held: the slot's event into *ev, and the slot free; whether
 * the event is to be posted. */
static bool atom_complete(struct dfi_ep *ep, int i, int err, DAT_EVENT *ev)
{
	struct dfi_dto_pool *p = ep->sendq;
	struct dfi_dto *d = &p->d[i];
	struct dfi_comp c = { .ctx = d, .err = err };
	bool reported = dto_reported(d, &c);

	p->atom[i].id = 0;
	if (reported)
		dto_event(d, &c, ev);
	dto_complete(p, &i, 1, 0);	/* not from a CQ: no reap gives it back */
	return reported;
}

struct dfi_evd *dfi_dto_atomic_done(struct dfi_ep *ep, const struct dfi_cm_event *e,
				    DAT_EVENT *ev)
{
	struct dfi_evd *evd = NULL;
	int i;

	pthread_mutex_lock(&ep->post_lock);
	i = atom_slot(ep, e->id);
	if (i < 0) {
		pthread_mutex_unlock(&ep->post_lock);
		dfi_warn(DFI_SS_EP, "EP %p: an atomic's answer (id 0x%llx) for no atomic of its: "
			 "dropped", (void *)ep, (unsigned long long)e->id);
		return NULL;
	}
	if (!e->err)
		*ep->sendq->atom[i].result = e->value;	/* the consumer's LMR segment */
	else
		dfi_dbg(DFI_SS_EP, "EP %p: emulated atomic refused by the peer: %s", (void *)ep,
			strerror(e->err));
	if (atom_complete(ep, i, e->err, ev) && ep->req_evd) {
		evd = ep->req_evd;
		dfi_evq_hold(&evd->q);
	}
	pthread_mutex_unlock(&ep->post_lock);
	return evd;
}

void dfi_dto_atomic_post(struct dfi_evd *evd, DAT_EVENT *evs, int n)
{
	if (!evd)
		return;
	for (int k = 0; k < n; k++)
		dfi_evq_post(&evd->q, &evs[k]);
	dfi_evq_unhold(&evd->q);
	free(evs);
}

int dfi_dto_atomic_flush(struct dfi_ep *ep, DAT_EVENT **evs, struct dfi_evd **evd)
{
	struct dfi_dto_pool *p;
	int n = 0, out = 0;

	*evs = NULL;
	*evd = NULL;
	pthread_mutex_lock(&ep->post_lock);
	p = ep->sendq;
	for (int i = 0; p->atom && i < p->n; i++)
		n += p->atom[i].id != 0;
	if (n && ep->req_evd && !(*evs = malloc((size_t)n * sizeof(**evs))))
		dfi_err(DFI_SS_EP, "EP %p: no memory for the events of %d flushed atomics: "
			"they complete unreported", (void *)ep, n);
	for (int i = 0; n && p->atom && i < p->n; i++) {
		DAT_EVENT ev;

		if (!p->atom[i].id)
			continue;
		if (atom_complete(ep, i, ECANCELED, &ev) && *evs)
			(*evs)[out++] = ev;
	}
	if (out) {
		*evd = ep->req_evd;
		dfi_evq_hold(&(*evd)->q);
	}
	pthread_mutex_unlock(&ep->post_lock);
	if (!out) {
		free(*evs);
		*evs = NULL;
	}
	return out;
}
