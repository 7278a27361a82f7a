/*
 * Shared receive queues (DAT SRQs) over the fabric layer's shared receive
 * contexts.
 *
 * Receives posted to an SRQ go to its shared context (libfabric's
 * fi_srx_context on connected endpoints; an RDM endpoint of its own over
 * reliable datagrams, fabric/rdm/srx.c); each SRQ EP binds that context, so
 * whichever EP gets a message first takes the oldest posted buffer.
 * libfabric reports the completion on the CQ the consuming EP bound with
 * FI_RECV (tcp 1.17, checked by experiment), with the posting's context -
 * which cannot know its EP in advance.  So every SRQ EP gets a private
 * receive CQ of its own (dfi_srx_cq_open: over RDM a software CQ the SRQ
 * fills; watched by the IA's progress thread for the EP's whole life): a
 * completion read from it names its EP by where it was read.  Sends stay on
 * the request EVD's CQ.
 *
 * The progress thread converts nothing itself: it fills in the descriptor
 * (EP, length, status) and stages it on the EP's recv EVD, whose source
 * (dto.c) hands staged completions out before its own CQ's.  Staged
 * completions therefore enter the ring only into free slots, like every
 * DTO completion (an EVD never overflows with DTOs), and the event core
 * tells us when each one leaves the ring (the source's consumed op).
 *
 * Credits: a buffer holds an SRQ slot from dat_srq_post_recv until the
 * consumer has reaped its completion, so posted + undequeued never exceeds
 * max_recv_dtos and one more post gets DAT_INSUFFICIENT_RESOURCES.  The
 * buffers an EP has completed and the consumer not reaped yet (srq_held)
 * are "the buffers at the EP" of the high watermarks.
 *
 * An EP whose data waits for a buffer (the SRQ ran dry) cannot be armed:
 * libfabric's try-wait keeps saying "busy".  The progress thread marks it
 * stalled and retries it on its 10 ms tick, and a post to the SRQ kicks the
 * thread at once.
 *
 * Lock order: cm_lock -> IA -> recv EVD (q.lock) -> SRQ lock, and
 * ep->drain_lock -> recv EVD / SRQ lock (never with cm_lock or IA held).
 * drain_lock keeps one reader per private CQ, so that one EP's completions
 * are staged in order.
 */
#include "dfi.h"
#include "fabric/fabric.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Descriptors are allocated in chunks (create, resize up), never moved:
 * libfabric holds pointers to posted ones. */
struct dfi_srq_chunk {
	struct dfi_srq_chunk *next;
	int n;
	struct dfi_srq_dto d[];
};

#define SRQ_OR_REJECT(srq, h) do {						\
		(srq) = dfi_obj_get(h, DFI_T_SRQ);				\
		if (!(srq))							\
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ), \
					  "%p is not an SRQ handle", (void *)(h)); \
	} while (0)

void dfi_post_async(struct dfi_ia *ia, DAT_EVENT_NUMBER num, DAT_HANDLE h, DAT_COUNT reason)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = num;
	ev.event_data.asynch_error_event_data.dat_handle = h;
	ev.event_data.asynch_error_event_data.reason = reason;
	dfi_evq_post(&ia->async_evd->q, &ev);
}

/* SRQ lock held. */
static int srq_grow(struct dfi_srq *srq, int want)
{
	struct dfi_srq_chunk *c;
	struct dfi_opctx *octx = NULL;
	int n = want - srq->nalloc;

	if (n <= 0)
		return 0;
	/* the provider's context words after the descriptors (fabric.h) */
	c = calloc(1, sizeof(*c) + (size_t)n * sizeof(c->d[0]) +
		   (dfi_fabric_limits(srq->hdr.ia->fab)->op_ctx ? (size_t)n * sizeof(*octx) : 0));
	if (!c)
		return -ENOMEM;
	if (dfi_fabric_limits(srq->hdr.ia->fab)->op_ctx)
		octx = (struct dfi_opctx *)&c->d[n];
	c->n = n;
	for (int i = 0; i < n; i++) {
		c->d[i].srq = srq;
		if (octx) {
			c->d[i].octx = &octx[i];
			octx[i].ctx = &c->d[i];
		}
		c->d[i].next = srq->free;
		srq->free = &c->d[i];
	}
	c->next = srq->chunks;
	srq->chunks = c;
	srq->nalloc = want;
	return 0;
}

/* SRQ lock held. */
static void dto_put(struct dfi_srq *srq, struct dfi_srq_dto *d)
{
	d->ep = NULL;
	d->next = srq->free;
	srq->free = d;
}

/* ------------------------------------------------------------ the SRQ */

DAT_RETURN dfi_srq_create(DAT_IA_HANDLE h, DAT_PZ_HANDLE pzh, DAT_SRQ_ATTR *attr,
			  DAT_SRQ_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_pz *pz = dfi_pz_of(ia, pzh);
	const struct dfi_fabric_limits *l;
	struct dfi_srq *srq;
	bool full;
	int rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!pz)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ),
				  "%p is not a PZ of this IA", (void *)pzh);
	if (!attr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "SRQ attributes are NULL");
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "SRQ handle pointer is NULL");
	l = dfi_fabric_limits(ia->fab);
	if (attr->max_recv_dtos <= 0 || attr->max_recv_dtos > DFI_MAX_RECV_PER_SRQ)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "SRQ max_recv_dtos %d out of range 1..%d", attr->max_recv_dtos,
				  DFI_MAX_RECV_PER_SRQ);
	if (attr->max_recv_iov <= 0 || (size_t)attr->max_recv_iov > l->rx_iov_limit ||
	    attr->max_recv_iov > 4)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "SRQ max_recv_iov %d out of range 1..%zu", attr->max_recv_iov,
				  l->rx_iov_limit < 4 ? l->rx_iov_limit : (size_t)4);
	/* "The Consumer must set low_watermark to DAT_SRQ_LW_DEFAULT" (an
	 * empty SRQ would be below any other at once); dat_srq_set_lw sets it. */
	if (attr->low_watermark != DAT_SRQ_LW_DEFAULT)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "SRQ low_watermark %d at creation: must be DAT_SRQ_LW_DEFAULT "
				  "(use dat_srq_set_lw)", attr->low_watermark);

	pthread_mutex_lock(&ia->lock);
	full = ia->n_srq >= DFI_MAX_SRQS;
	if (!full)
		ia->n_srq++;
	pthread_mutex_unlock(&ia->lock);
	if (full)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ),
				  "IA already has max_srqs (%d) SRQs", DFI_MAX_SRQS);
	srq = dfi_obj_new(ia, DFI_T_SRQ, sizeof(*srq));
	if (!srq)
		goto err_count;
	pthread_mutex_init(&srq->lock, NULL);
	srq->pz = pz;
	srq->max_recv_dtos = attr->max_recv_dtos;
	srq->max_recv_iov = attr->max_recv_iov;
	srq->low_watermark = DAT_SRQ_LW_DEFAULT;
	if (srq_grow(srq, attr->max_recv_dtos))
		goto err_obj;
	/* Sized for any resize: the context's pool grows on demand, so an
	 * unused capacity costs nothing (measured: no RSS for 65536). */
	rc = dfi_srx_open(ia->fab, DFI_MAX_RECV_PER_SRQ, (size_t)srq->max_recv_iov, &srq->srx);
	if (rc)
		goto err_obj;
	pthread_mutex_lock(&ia->lock);
	pz->refs++;
	srq->pulled = true;
	pthread_mutex_unlock(&ia->lock);
	dfi_dbg(DFI_SS_EP, "SRQ %p: %d receives of up to %d segments", (void *)srq,
		srq->max_recv_dtos, srq->max_recv_iov);
	*out = srq;
	return DAT_SUCCESS;

err_obj:
	while (srq->chunks) {
		struct dfi_srq_chunk *c = srq->chunks;

		srq->chunks = c->next;
		free(c);
	}
	pthread_mutex_destroy(&srq->lock);
	dfi_obj_retire(srq);
err_count:
	pthread_mutex_lock(&ia->lock);
	ia->n_srq--;
	pthread_mutex_unlock(&ia->lock);
	return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
}

/* No EP is attached any more (dat_srq_free, or IA close after its EPs):
 * closing the shared context releases the buffers still posted, without
 * completions (the DAT spec asks for none; libfabric tcp gives none). */
void dfi_srq_destroy(struct dfi_srq *srq)
{
	struct dfi_ia *ia = srq->hdr.ia;

	pthread_mutex_lock(&ia->lock);
	dfi_progress_unpull_srq(ia, srq);
	pthread_mutex_unlock(&ia->lock);
	dfi_srx_close(srq->srx);
	while (srq->chunks) {
		struct dfi_srq_chunk *c = srq->chunks;

		srq->chunks = c->next;
		free(c);
	}
	pthread_mutex_destroy(&srq->lock);
	pthread_mutex_lock(&ia->lock);
	srq->pz->refs--;
	ia->n_srq--;
	pthread_mutex_unlock(&ia->lock);
	dfi_obj_retire(srq);
}

DAT_RETURN dfi_srq_free(DAT_SRQ_HANDLE h)
{
	struct dfi_srq *srq;
	int neps;

	SRQ_OR_REJECT(srq, h);
	pthread_mutex_lock(&srq->lock);
	neps = srq->neps;
	if (!neps)
		srq->freeing = true;
	pthread_mutex_unlock(&srq->lock);
	if (neps)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE),
				  "SRQ %p is in use by %d EPs (free them first)", (void *)srq, neps);
	dfi_srq_destroy(srq);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_srq_post_recv(DAT_SRQ_HANDLE h, DAT_COUNT nseg, DAT_LMR_TRIPLET *iov,
			     DAT_DTO_COOKIE cookie)
{
	struct dfi_srq *srq;
	struct dfi_srq_dto *d;
	struct dfi_sge sg[4];
	int n = 0, rc, stalled;
	bool dry;

	SRQ_OR_REJECT(srq, h);
	if (nseg < 0 || nseg > srq->max_recv_iov)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "SRQ %p: %d segments, the SRQ allows %d", (void *)srq, nseg,
				  srq->max_recv_iov);
	if (nseg > 0 && !iov)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "SRQ %p: segment list is NULL", (void *)srq);
	for (int i = 0; i < nseg; i++) {
		if (!iov[i].segment_length)
			continue;	/* a zero-length segment is ignored */
		sg[n].addr = (void *)(uintptr_t)iov[i].virtual_address;
		sg[n].len = iov[i].segment_length;
		sg[n].mr = NULL;	/* the providers we run on need no local key */
		n++;
	}

	pthread_mutex_lock(&srq->lock);
	d = srq->posted + srq->undequeued < srq->max_recv_dtos ? srq->free : NULL;
	dry = srq->posted == 0 && srq->neps > 0;
	if (d) {
		srq->free = d->next;
		srq->posted++;		/* before libfabric can complete it */
	}
	pthread_mutex_unlock(&srq->lock);
	if (!d)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ),
				  "SRQ %p full: %d receives posted or not reaped (max_recv_dtos)",
				  (void *)srq, srq->max_recv_dtos);
	d->cookie = cookie;
	d->ep = NULL;
	d->len = 0;
	d->err = 0;
	rc = dfi_srx_post_recv(srq->srx, sg, n, d->octx ? (void *)d->octx : d);
	pthread_mutex_lock(&srq->lock);
	if (rc) {
		srq->posted--;
		dto_put(srq, d);
	}
	stalled = srq->n_stalled;
	pthread_mutex_unlock(&srq->lock);
	if (rc == -EAGAIN)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ),
				  "SRQ %p: libfabric's shared context is full", (void *)srq);
	if (rc) {
		dfi_warn(DFI_SS_EP, "SRQ %p: post failed: %s", (void *)srq, strerror(-rc));
		return DFI_ERR(DAT_INTERNAL_ERROR, 0);
	}
	/* An EP waiting for a buffer will not wake by itself (see top).  One
	 * whose message libfabric already pulled in is not marked stalled
	 * (progress.c, rcqs_watched): a post to a dry SRQ reads every SRQ EP
	 * at once, the others wait for the tick. */
	if (dry)
		dfi_progress_kick_all_rcqs(srq->hdr.ia);
	else if (stalled)
		dfi_progress_kick(srq->hdr.ia);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_srq_query(DAT_SRQ_HANDLE h, DAT_SRQ_PARAM_MASK mask, DAT_SRQ_PARAM *p)
{
	struct dfi_srq *srq;

	SRQ_OR_REJECT(srq, h);
	if (mask & ~(DAT_SRQ_PARAM_MASK)DAT_SRQ_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "SRQ param mask 0x%x has unknown bits", (unsigned)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "SRQ param pointer is NULL");
	memset(p, 0, sizeof(*p));
	p->ia_handle = srq->hdr.ia;
	p->srq_state = DAT_SRQ_STATE_OPERATIONAL;
	p->pz_handle = srq->pz;
	pthread_mutex_lock(&srq->lock);
	p->max_recv_dtos = srq->max_recv_dtos;
	p->max_recv_iov = srq->max_recv_iov;
	p->low_watermark = srq->low_watermark;
	/* available: posted and not completed (a buffer an EP is filling
	 * right now still counts: libfabric does not tell); outstanding:
	 * every slot taken, completions not reaped included */
	p->available_dto_count = srq->posted;
	p->outstanding_dto_count = srq->posted + srq->undequeued;
	pthread_mutex_unlock(&srq->lock);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_srq_resize(DAT_SRQ_HANDLE h, DAT_COUNT max)
{
	struct dfi_srq *srq;
	int taken, lw, rc;

	SRQ_OR_REJECT(srq, h);
	if (max <= 0 || max > DFI_MAX_RECV_PER_SRQ)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "SRQ %p: size %d out of range 1..%d", (void *)srq, max,
				  DFI_MAX_RECV_PER_SRQ);
	pthread_mutex_lock(&srq->lock);
	taken = srq->posted + srq->undequeued;
	lw = srq->low_watermark;
	rc = taken > max || lw > max ? -EBUSY : srq_grow(srq, max);
	if (!rc)
		srq->max_recv_dtos = max;
	pthread_mutex_unlock(&srq->lock);
	/* never lose a buffer: below what is outstanding (posted, or completed
	 * and not reaped) or below the low watermark is refused */
	if (rc == -EBUSY)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, 0),
				  "SRQ %p: cannot resize to %d: %d receives outstanding, low "
				  "watermark %d", (void *)srq, max, taken, lw);
	if (rc)
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_srq_set_lw(DAT_SRQ_HANDLE h, DAT_COUNT lw)
{
	struct dfi_srq *srq;
	bool fire;

	SRQ_OR_REJECT(srq, h);
	pthread_mutex_lock(&srq->lock);
	if (lw < 0 || lw > srq->max_recv_dtos) {
		DAT_COUNT max = srq->max_recv_dtos;

		pthread_mutex_unlock(&srq->lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "SRQ %p: low watermark %d out of range 0..%d (max_recv_dtos)",
				  (void *)srq, lw, max);
	}
	/* armed once per call; below it already: the event comes now */
	srq->low_watermark = lw;
	fire = srq->posted < lw;
	srq->lw_armed = !fire;
	pthread_mutex_unlock(&srq->lock);
	if (fire)
		dfi_post_async(srq->hdr.ia, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, srq,
			       DAT_SRQ_LOW_WATERMARK_EVENT);
	return DAT_SUCCESS;
}

/* ------------------------------------------------- EPs attached to an SRQ */

DAT_RETURN dfi_srq_attach(struct dfi_srq *srq, struct dfi_ep *ep)
{
	int neps;

	pthread_mutex_lock(&srq->lock);
	neps = srq->neps;
	if (srq->freeing || neps >= DFI_MAX_EP_PER_SRQ) {
		bool freeing = srq->freeing;

		pthread_mutex_unlock(&srq->lock);
		if (freeing)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ),
					  "SRQ %p is being freed", (void *)srq);
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ),
				  "SRQ %p already has max_ep_per_srq (%d) EPs", (void *)srq,
				  DFI_MAX_EP_PER_SRQ);
	}
	srq->neps++;
	ep->srq = srq;
	ep->soft_hw = ep->attr.srq_soft_hw;
	ep->soft_armed = ep->soft_hw != DAT_WATERMARK_INFINITE;
	ep->hard_hw = DAT_WATERMARK_INFINITE;
	pthread_mutex_unlock(&srq->lock);
	pthread_mutex_init(&ep->drain_lock, NULL);
	return DAT_SUCCESS;
}

/* cm_lock held (ep_open_fep): the private CQ, once per EP. */
int dfi_srq_ep_open_cq(struct dfi_ep *ep)
{
	struct dfi_ia *ia = ep->hdr.ia;
	size_t size;
	int rc;

	if (ep->rcq)
		return 0;
	pthread_mutex_lock(&ep->srq->lock);
	size = (size_t)ep->srq->max_recv_dtos;
	pthread_mutex_unlock(&ep->srq->lock);
	/* a resize may raise the SRQ later; libfabric's CQs spill over
	 * rather than drop (the RDM backend's software ones grow), and the
	 * progress thread keeps this one empty */
	rc = dfi_srx_cq_open(ep->srq->srx, size < 1024 ? 1024 : size, &ep->rcq);
	if (rc)
		return rc;
	pthread_mutex_lock(&ia->lock);
	rc = dfi_progress_watch_rcq(ia, ep);
	pthread_mutex_unlock(&ia->lock);
	if (rc) {
		dfi_cq_close(ep->rcq);
		ep->rcq = NULL;
	}
	return rc;
}

/* What a pass over a private CQ leaves to do once no lock is held and the
 * EP may be gone (a CNO agent run by the notify can free it). */
struct todo {
	struct dfi_ia *ia;
	struct dfi_evd *evd;		/* held: notify, then unhold */
	struct dfi_evd *conn;		/* held: DAT_CONNECTION_EVENT_BROKEN */
	DAT_HANDLE ep, srq;
	int held;			/* srq_held when the hard watermark was passed */
	bool lw, soft, broken, hard;
};

static void todo_run(struct todo *t)
{
	if (t->evd) {
		dfi_evq_source_notify(&t->evd->q);
		dfi_evq_unhold(&t->evd->q);
	}
	if (t->lw)
		dfi_post_async(t->ia, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, t->srq,
			       DAT_SRQ_LOW_WATERMARK_EVENT);
	if (t->soft)
		dfi_post_async(t->ia, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, t->ep,
			       DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
	if (t->conn) {
		DAT_EVENT ev;

		memset(&ev, 0, sizeof(ev));
		ev.event_number = DAT_CONNECTION_EVENT_BROKEN;
		ev.event_data.connect_event_data.ep_handle = t->ep;
		dfi_evq_post(&t->conn->q, &ev);
		dfi_evq_unhold(&t->conn->q);
	}
	if (t->broken)
		dfi_post_async(t->ia, DAT_ASYNC_ERROR_EP_BROKEN, t->ep, DAT_EP_TRANSFER_TO_ERROR);
}

/* drain_lock held: read everything the private CQ has, fill in the
 * descriptors, count, and stage them on the recv EVD.  Returns how many. */
static int rcq_read(struct dfi_ep *ep, struct todo *t)
{
	struct dfi_srq *srq = ep->srq;
	struct dfi_evd *evd = ep->recv_evd;
	struct dfi_srq_dto *head = NULL, *tail = NULL;
	struct dfi_comp c[32];
	int total = 0, n;

	while ((n = dfi_cq_read(ep->rcq, c, 32)) > 0) {
		pthread_mutex_lock(&srq->lock);
		for (int i = 0; i < n; i++) {
			struct dfi_srq_dto *d = c[i].ctx;

			d->ep = ep;
			d->len = c[i].len;
			d->err = c[i].err;
			d->imm = c[i].imm && !c[i].err;
			d->data = c[i].data;
			srq->posted--;
			if (srq->lw_armed && srq->posted < srq->low_watermark) {
				srq->lw_armed = false;	/* once per dat_srq_set_lw */
				t->lw = true;
			}
			if (!evd) {
				/* nobody to tell: the slot is free at once */
				dto_put(srq, d);
				continue;
			}
			srq->undequeued++;
			ep->srq_held++;
			d->next = NULL;
			if (tail)
				tail->next = d;
			else
				head = d;
			tail = d;
		}
		if (ep->soft_armed && ep->srq_held > ep->soft_hw) {
			ep->soft_armed = false;		/* once per setting */
			t->soft = true;
		}
		if (ep->hard_hw != DAT_WATERMARK_INFINITE && ep->srq_held > ep->hard_hw) {
			t->hard = true;
			t->held = ep->srq_held;
		}
		pthread_mutex_unlock(&srq->lock);
		total += n;
		if (n < 32)
			break;
	}
	if (n < 0)
		dfi_warn(DFI_SS_EP, "EP %p: reading its SRQ receive CQ: %s", (void *)ep,
			 strerror(-n));
	if (head) {
		pthread_mutex_lock(&evd->q.lock);
		if (evd->staged_tail)
			evd->staged_tail->next = head;
		else
			evd->staged = head;
		evd->staged_tail = tail;
		pthread_mutex_unlock(&evd->q.lock);
		if (!t->evd) {
			t->evd = evd;
			dfi_evq_hold(&evd->q);	/* not freed before todo_run */
		}
	}
	t->ia = ep->hdr.ia;
	t->ep = ep;
	t->srq = srq;
	return total;
}

/* The hard high watermark was passed: the connection is broken (the spec's
 * "connection broken event for EP connect_evd"), the EP's own state and its
 * peer's alike, as when a verbs QP runs out of receive buffers. */
static void hard_break(struct dfi_ep *ep, struct todo *t)
{
	struct dfi_ia *ia = ep->hdr.ia;

	pthread_mutex_lock(&ia->cm_lock);
	if (ep->fep && (ep->state == DAT_EP_STATE_CONNECTED ||
			ep->state == DAT_EP_STATE_DISCONNECT_PENDING)) {
		dfi_warn(DFI_SS_EP, "EP %p holds %d SRQ buffers, above its hard high watermark: "
			 "connection broken", (void *)ep, t->held);
		dfi_ep_set_state(ep, DAT_EP_STATE_DISCONNECTED);
		dfi_fep_shutdown(ep->fep);	/* its FI_SHUTDOWN then finds it DISCONNECTED */
		t->broken = ep->established;
		ep->established = false;
		if (ep->conn_evd) {
			t->conn = ep->conn_evd;
			dfi_evq_hold(&t->conn->q);
		}
	}
	pthread_mutex_unlock(&ia->cm_lock);
}

/* Progress thread, inside its batch (see dfi_progress_unwatch_rcq). */
bool dfi_srq_ep_progress(struct dfi_ep *ep)
{
	struct todo t = { 0 };
	bool stalled = true, marked = false;
	int rc = 0;

	pthread_mutex_lock(&ep->drain_lock);
	/* A try-wait that keeps saying "busy" while nothing comes is an EP
	 * whose data waits for a buffer: stop, the tick or a post retries.
	 * The EP is marked stalled before one last look, and a post reads
	 * the mark after posting: either the post sees the mark and kicks,
	 * or the last look sees the buffer (no lost wake-up). */
	for (int k = 0; k < 8; k++) {
		int n = rcq_read(ep, &t);

		rc = dfi_cq_trywait(ep->rcq);
		if (rc == 0) {
			stalled = false;
			break;
		}
		if (rc != -EAGAIN)
			break;
		if (n == 0) {
			if (marked)
				break;
			dfi_progress_mark_stalled(ep, true);
			marked = true;
		}
	}
	pthread_mutex_unlock(&ep->drain_lock);
	if (rc && rc != -EAGAIN)
		dfi_warn(DFI_SS_EP, "EP %p: try-wait on its SRQ receive CQ: %s", (void *)ep,
			 strerror(-rc));
	if (t.hard)
		hard_break(ep, &t);
	dfi_progress_rearm_rcq(ep, stalled);	/* before todo_run: ep may go */
	todo_run(&t);
	return stalled;
}

/* Before a connection event of ep (or its free): what its private CQ holds
 * goes to the recv EVD first, so that, as the spec wants, the buffers the EP
 * took are on its recv EVD when the consumer learns of the disconnect. */
void dfi_srq_ep_settle(struct dfi_ep *ep)
{
	struct todo t = { 0 };

	if (!ep->rcq)
		return;
	pthread_mutex_lock(&ep->drain_lock);
	rcq_read(ep, &t);
	pthread_mutex_unlock(&ep->drain_lock);
	t.hard = false;		/* the connection is ending anyway */
	todo_run(&t);
}

/* ep_destroy, after the libfabric endpoint is closed. */
void dfi_srq_ep_detach(struct dfi_ep *ep)
{
	struct dfi_ia *ia = ep->hdr.ia;
	struct dfi_srq *srq = ep->srq;
	struct dfi_evd *evd = ep->recv_evd;
	int dropped = 0;

	if (ep->rcq) {
		pthread_mutex_lock(&ia->lock);
		dfi_progress_unwatch_rcq(ia, ep);	/* the thread is done with it */
		pthread_mutex_unlock(&ia->lock);
		/* closing the endpoint flushed the buffer it was filling, if any */
		dfi_srq_ep_settle(ep);
		/* staged completions the ring had no room for would outlive their
		 * EP: they are dropped, their slots freed */
		if (evd) {
			struct dfi_srq_dto **pp, *d;

			pthread_mutex_lock(&evd->q.lock);
			evd->staged_tail = NULL;
			for (pp = &evd->staged; (d = *pp);) {
				if (d->ep != ep) {
					evd->staged_tail = d;
					pp = &d->next;
					continue;
				}
				*pp = d->next;
				pthread_mutex_lock(&srq->lock);
				srq->undequeued--;
				ep->srq_held--;
				dto_put(srq, d);
				pthread_mutex_unlock(&srq->lock);
				dropped++;
			}
			pthread_mutex_unlock(&evd->q.lock);
		}
		dfi_cq_close(ep->rcq);
		ep->rcq = NULL;
	}
	if (dropped)
		dfi_warn(DFI_SS_EP, "EP %p freed: %d SRQ receive completions dropped (its recv "
			 "EVD %p was full)", (void *)ep, dropped, (void *)evd);
	pthread_mutex_lock(&srq->lock);
	/* completions of this EP still in the ring stop counting: their
	 * consumption cannot be matched to a freed EP */
	srq->undequeued -= ep->srq_held;
	ep->srq_held = 0;
	pthread_mutex_unlock(&srq->lock);
	pthread_mutex_destroy(&ep->drain_lock);
}

/* ep_destroy, once the EP is retired: the SRQ may be freed from now on
 * (not before: a dequeue of one of the EP's events looks at it). */
void dfi_srq_release(struct dfi_srq *srq)
{
	pthread_mutex_lock(&srq->lock);
	srq->neps--;
	pthread_mutex_unlock(&srq->lock);
}

bool dfi_srq_ep_idle(struct dfi_ep *ep)
{
	bool idle;

	pthread_mutex_lock(&ep->srq->lock);
	idle = ep->srq_held == 0;
	pthread_mutex_unlock(&ep->srq->lock);
	return idle;
}

/* Recv EVD lock held: an SRQ completion of ep left the ring. */
void dfi_srq_consumed(struct dfi_ep *ep)
{
	struct dfi_srq *srq = ep->srq;

	pthread_mutex_lock(&srq->lock);
	if (ep->srq_held > 0) {	/* 0: the EP was freed meanwhile (detach) */
		ep->srq_held--;
		srq->undequeued--;
	}
	pthread_mutex_unlock(&srq->lock);
}

/* Recv EVD lock held (the EVD's source, dto.c): staged completions into
 * ring slots.  The descriptors go back to their SRQ now; the slot they
 * stood for stays taken until the consumer reaps the event. */
int dfi_srq_take_staged(struct dfi_evd *evd, DAT_EVENT *ev, int max)
{
	int out = 0;

	while (out < max && evd->staged) {
		struct dfi_srq_dto *d = evd->staged;
		DAT_DTO_COMPLETION_EVENT_DATA *e = &ev[out].event_data.dto_completion_event_data;
		struct dfi_srq *srq = d->srq;

		evd->staged = d->next;
		if (!evd->staged)
			evd->staged_tail = NULL;
		memset(&ev[out], 0, sizeof(ev[out]));
		ev[out].event_number = DAT_DTO_COMPLETION_EVENT;
		e->ep_handle = d->ep;
		e->user_cookie = d->cookie;
		e->status = dfi_dto_status(d->err);
		e->operation = DAT_DTO_RECEIVE;
		e->transfered_length = (DAT_SEG_LENGTH)d->len;
		if (d->imm && dfi_imm_invalidates(d->data)) {
			/* a send with invalidate took it (dto.c) */
			e->operation = DAT_DTO_RECEIVE_WITH_INVALIDATE;
			e->rmr_context = (DAT_RMR_CONTEXT)d->data;
			e->status = dfi_rmr_invalidate(srq->hdr.ia, d->ep, e->rmr_context);
		} else if (d->imm) {
			/* an RDMA write with immediate data took it (dto.c) */
			DAT_IB_EXTENSION_EVENT_DATA *x =
				(DAT_IB_EXTENSION_EVENT_DATA *)ev[out].event_extension_data;

			ev[out].event_number = (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT;
			e->operation = (DAT_DTOS)DAT_IB_DTO_RECV_IMMED;
			e->transfered_length = (DAT_SEG_LENGTH)dfi_imm_write_len(d->data);
			x->type = DAT_IB_RDMA_WRITE_IMMED_DATA;
			x->status = DAT_OP_SUCCESS;
			x->val.immed.data = (DAT_UINT32)d->data;
			x->context.as_64 = d->cookie.as_64;
		}
		if (d->err && d->err != ECANCELED)
			dfi_dbg(DFI_SS_EP, "EP %p: SRQ receive (cookie 0x%llx) failed: %s",
				(void *)d->ep, (unsigned long long)d->cookie.as_64,
				strerror(d->err));
		pthread_mutex_lock(&srq->lock);
		dto_put(srq, d);
		pthread_mutex_unlock(&srq->lock);
		out++;
	}
	return out;
}

/* ----------------------------------------------- EP calls about receives */

DAT_RETURN dfi_ep_recv_query(DAT_EP_HANDLE h, DAT_COUNT *nbufs, DAT_COUNT *span)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	DAT_COUNT n;

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	if (ep->srq) {
		bool open;

		pthread_mutex_lock(&ep->hdr.ia->cm_lock);
		open = ep->fep != NULL;
		pthread_mutex_unlock(&ep->hdr.ia->cm_lock);
		/* Without a connection it holds none.  With one, libfabric does
		 * not say when a message starts to land in a shared buffer (on
		 * tcp at most one is being filled per connection): unknown. */
		n = open ? DAT_VALUE_UNKNOWN : 0;
	} else {
		/* posted to the EP and not completed; an RC EP fills them in
		 * order, so the span is the count */
		n = dfi_dto_pool_posted(ep->recvq);
	}
	if (nbufs)
		*nbufs = n;
	if (span)
		*span = n;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_ep_set_watermark(DAT_EP_HANDLE h, DAT_COUNT soft, DAT_COUNT hard)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct todo t = { 0 };

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	if (soft < 0 && soft != DAT_WATERMARK_INFINITE)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "EP %p: soft high watermark %d is negative", (void *)ep, soft);
	if (hard < 0 && hard != DAT_WATERMARK_INFINITE)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "EP %p: hard high watermark %d is negative", (void *)ep, hard);
	if (!ep->srq) {
		/* an EP's own receive queue: the values are kept (dat_ep_query
		 * reports the soft one), no event is generated */
		pthread_mutex_lock(&ep->hdr.ia->cm_lock);
		ep->soft_hw = soft;
		ep->hard_hw = hard;
		ep->attr.srq_soft_hw = soft;
		pthread_mutex_unlock(&ep->hdr.ia->cm_lock);
		return DAT_SUCCESS;
	}
	/* armed anew by every call; already above: the event comes now */
	pthread_mutex_lock(&ep->srq->lock);
	ep->soft_hw = soft;
	ep->hard_hw = hard;
	ep->attr.srq_soft_hw = soft;
	ep->soft_armed = soft != DAT_WATERMARK_INFINITE;
	if (ep->soft_armed && ep->srq_held > soft) {
		ep->soft_armed = false;
		t.soft = true;
	}
	t.hard = hard != DAT_WATERMARK_INFINITE && ep->srq_held > hard;
	t.held = ep->srq_held;
	pthread_mutex_unlock(&ep->srq->lock);
	t.ia = ep->hdr.ia;
	t.ep = ep;
	if (t.hard)
		hard_break(ep, &t);
	todo_run(&t);
	return DAT_SUCCESS;
}
