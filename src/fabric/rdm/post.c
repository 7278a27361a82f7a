/* The RDM backend's data path: tagged sends to the peer's id, receives
 * matching the endpoint's own, RMA to the peer's fabric address. */
#include "util/hot.h"
#include "rdm.h"

#include <sched.h>
#include <string.h>
#include <time.h>

/*
 * An RDM provider answers FI_EAGAIN where a connected endpoint would not:
 * tcp;ofi_rxm to the first send to a peer, while it connects underneath,
 * and whenever its own buffers run out.  The DAT layer counts its queues
 * itself, so this is the provider's transient state, not a full queue:
 * drive its progress (a read of no completions) and try again, for at
 * most RDM_EAGAIN_NS, or until the connection ends (a dead peer's provider
 * answers EAGAIN while it reconnects); then the DAT layer hears EAGAIN, or
 * ENOTCONN once the connection ended (the post completes flushed).
 * *t0 starts at 0.
 */
#define RDM_EAGAIN_NS 2000000000ull

static bool again(struct rdm_fep *e, uint64_t *t0)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (!*t0)
		*t0 = now;
	else if (now - *t0 > RDM_EAGAIN_NS ||
		 atomic_load_explicit(&e->ended, memory_order_relaxed))
		return false;
	(void)fi_cq_read(e->rep->txcq->cq, NULL, 0);
	if (e->rep->rxcq != e->rep->txcq)
		(void)fi_cq_read(e->rep->rxcq->cq, NULL, 0);
	sched_yield();
	return true;
}

#define RETRY(e, call)							\
	do {								\
		uint64_t t0_ = 0;					\
		ssize_t rc_;						\
									\
		while ((rc_ = (call)) == -FI_EAGAIN && again(e, &t0_))	\
			;						\
		if (rc_ == -FI_EAGAIN &&				\
		    atomic_load_explicit(&e->ended, memory_order_relaxed))	\
			return -ENOTCONN;				\
		return dfi_post_rc(rc_);				\
	} while (0)

/* A tagged send from e to addr's receive matching tag. */
static inline __attribute__((always_inline)) int
tsend(struct rdm_fep *e, const struct dfi_sge *sg, int n, fi_addr_t addr, uint64_t tag, void *ctx)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	int rc;

	if (n <= 1)
		RETRY(e, fi_tsend(e->ep, n ? sg[0].addr : NULL, n ? sg[0].len : 0,
				  n ? dfi_sge_desc(&sg[0]) : NULL, addr, tag, ctx));
	rc = dfi_fill_iov(sg, n, iov, desc);
	if (rc)
		return rc;
	RETRY(e, fi_tsendv(e->ep, iov, desc, (size_t)n, addr, tag, ctx));
}

/* The tag of e's next message: its peer's, and its sequence.  The peer
 * checks that its n-th receive took message n (the DAT layer: dto.c,
 * "numbered messages"), or, an SRQ endpoint, puts its completions back in
 * that order (srx.c).  The sequence moves on only with a message posted
 * (post_lock held): a gap is a lost message to the peer. */
static inline uint64_t stag(const struct rdm_fep *e)
{
	return e->stag | (uint64_t)e->sseq << RDM_SEQ_SHIFT;
}

static inline int sent(struct rdm_fep *e, int rc)
{
	if (rc == 0 && e->sseq_on) {
		e->sseq = (e->sseq + 1) & e->seq_mask;
		if (__builtin_expect(e->sseq == e->lose, 0))
			e->sseq = (e->sseq + 1) & e->seq_mask;	/* DAPL_OFI_FAULT_RDM_LOSE */
	}
	return rc;
}

DFI_HOT int dfi_rdm_post_send(struct dfi_fep *fe, const struct dfi_sge *sg, int n, void *ctx)
{
	struct rdm_fep *e = RDM_FEP(fe);

	return sent(e, tsend(e, sg, n, e->peer, stag(e), ctx));
}

/* fi_tinject takes one buffer: several segments are gathered first. */
static int inject(struct rdm_fep *e, const struct dfi_sge *sg, int n)
{
	uint8_t buf[DFI_INJECT_MAX];
	ssize_t len;

	if (n <= 1)
		RETRY(e, fi_tinject(e->ep, n ? sg[0].addr : NULL, n ? sg[0].len : 0,
				    e->peer, stag(e)));
	len = dfi_gather(sg, n, buf, sizeof(buf));
	if (len < 0)
		return (int)len;
	RETRY(e, fi_tinject(e->ep, buf, (size_t)len, e->peer, stag(e)));
}

DFI_HOT int dfi_rdm_post_inject(struct dfi_fep *fe, const struct dfi_sge *sg, int n)
{
	struct rdm_fep *e = RDM_FEP(fe);

	return sent(e, inject(e, sg, n));
}

/* From any source: the tag names this endpoint, and a stale connection's
 * messages carry another generation; any sequence (the completion says
 * which came). */
/* More segments than the provider takes: through a buffer of ours (bounce.c) */
static int bounce_trecv(struct rdm_fep *e, struct rdm_bounce *b)
{
	RETRY(e, fi_trecv(e->ep, b->buf, b->len, NULL, FI_ADDR_UNSPEC, e->rtag,
			  RDM_TAG_SEQ_IGNORE(e->seq_mask), b->posted));
}

static int bounce_recv(struct rdm_fep *e, const struct dfi_sge *sg, int n, void *ctx)
{
	struct rdm_bounce *b = rdm_bounce_new(e, sg, n, ctx);
	int rc;

	if (!b)
		return -ENOMEM;
	rc = bounce_trecv(e, b);
	if (rc)
		rdm_bounce_drop(e->rf, b);
	return rc;
}

DFI_HOT int dfi_rdm_post_recv(struct dfi_fep *fe, const struct dfi_sge *sg, int n, void *ctx)
{
	struct rdm_fep *e = RDM_FEP(fe);
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	int rc;

	if (__builtin_expect((size_t)n > e->rf->rx_iov, 0))
		return bounce_recv(e, sg, n, ctx);
	if (n <= 1)
		RETRY(e, fi_trecv(e->ep, n ? sg[0].addr : NULL, n ? sg[0].len : 0,
				  n ? dfi_sge_desc(&sg[0]) : NULL, FI_ADDR_UNSPEC, e->rtag,
				  RDM_TAG_SEQ_IGNORE(e->seq_mask), ctx));
	rc = dfi_fill_iov(sg, n, iov, desc);
	if (rc)
		return rc;
	RETRY(e, fi_trecvv(e->ep, iov, desc, (size_t)n, FI_ADDR_UNSPEC, e->rtag,
			    RDM_TAG_SEQ_IGNORE(e->seq_mask), ctx));
}

static int rma(struct rdm_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
	       uint32_t rkey, void *ctx, bool write)
{
	/* net 1.17's fi_write asks for no acknowledgement, whatever the
	 * endpoint's flags: an acknowledged fabric's writes ask themselves
	 * (info.c, acked_prov) */
	if (write && e->delivered)	/* a send held behind it goes at its end */
		RETRY(e, dfi_rma_msg(e->ep, sg, n, e->peer, raddr, rkey, ctx, write,
				     FI_DELIVERY_COMPLETE));
	if (write && e->acked)
		RETRY(e, dfi_rma_msg(e->ep, sg, n, e->peer, raddr, rkey, ctx, write,
				     FI_TRANSMIT_COMPLETE));
	if (n == 1)
		RETRY(e, write ?
			fi_write(e->ep, sg[0].addr, sg[0].len, dfi_sge_desc(&sg[0]), e->peer,
				 raddr, rkey, ctx) :
			fi_read(e->ep, sg[0].addr, sg[0].len, dfi_sge_desc(&sg[0]), e->peer,
				raddr, rkey, ctx));
	RETRY(e, dfi_rma_msg(e->ep, sg, n, e->peer, raddr, rkey, ctx, write, 0));
}

DFI_HOT int dfi_rdm_post_write(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
			       uint32_t rkey, void *ctx)
{
	return rma(RDM_FEP(e), sg, n, raddr, rkey, ctx, true);
}

DFI_HOT int dfi_rdm_post_read(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
			      uint32_t rkey, void *ctx)
{
	return rma(RDM_FEP(e), sg, n, raddr, rkey, ctx, false);
}

/* A tagged message that takes a posted receive at the peer, whose
 * completion carries data (the IB extension's immediate data). */
static int senddata(struct rdm_fep *e, const struct dfi_sge *sg, int n, uint64_t data, void *ctx)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	struct fi_msg_tagged m = { .msg_iov = iov, .desc = desc, .iov_count = (size_t)n,
				   .addr = e->peer, .tag = stag(e), .context = ctx, .data = data };
	int rc;

	if (n <= 1)
		RETRY(e, fi_tsenddata(e->ep, n ? sg[0].addr : NULL, n ? sg[0].len : 0,
				      n ? dfi_sge_desc(&sg[0]) : NULL, data, e->peer, stag(e), ctx));
	rc = dfi_fill_iov(sg, n, iov, desc);
	if (rc)
		return rc;
	RETRY(e, fi_tsendmsg(e->ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION |
			     (e->acked ? FI_TRANSMIT_COMPLETE : 0)));
}

int dfi_rdm_post_senddata(struct dfi_fep *fe, const struct dfi_sge *sg, int n, uint64_t data,
			  void *ctx)
{
	struct rdm_fep *e = RDM_FEP(fe);

	return sent(e, senddata(e, sg, n, data, ctx));
}

int dfi_rdm_post_atomic(struct dfi_fep *fe, enum dfi_atomic_op op, const uint64_t *operand,
			const uint64_t *compare, uint64_t *result, struct dfi_mr *result_mr,
			uint64_t raddr, uint32_t rkey, void *ctx)
{
	struct rdm_fep *e = RDM_FEP(fe);

	RETRY(e, dfi_atomic(e->ep, e->peer, op, operand, compare, result, result_mr, raddr, rkey,
			    ctx));
}

/* An emulated atomic: the request travels the connection's control
 * channel (rcm.c), and its answer comes back as a CM event. */
int dfi_rdm_post_atomic_emul(struct dfi_fep *fe, enum dfi_atomic_op op, uint64_t operand,
			     uint64_t compare, uint64_t raddr, uint32_t rkey, uint64_t id)
{
	struct rdm_fep *e = RDM_FEP(fe);
	int rc = -ENOTCONN;

	pthread_mutex_lock(&e->rf->lock);
	if (e->conn && e->established)
		rc = dfi_rcm_atomic(e->conn, op == DFI_ATOMIC_CSWAP ? DFI_RDM_ATOMIC_CSWAP :
				    DFI_RDM_ATOMIC_FADD, id, raddr, rkey, operand, compare);
	pthread_mutex_unlock(&e->rf->lock);
	return rc;
}

/* A UD endpoint's send (ud.c): to the handle's endpoint and tag, which a
 * receive posted there matches as one of its connection's would. */
int dfi_rdm_post_send_ud(struct dfi_fep *fe, const struct dfi_ah *ah, const struct dfi_sge *sg,
			 int n, void *ctx)
{
	const struct rdm_ah *a = (const struct rdm_ah *)ah;

	return tsend(RDM_FEP(fe), sg, n, a->addr, a->stag, ctx);
}
