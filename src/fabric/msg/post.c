/* The MSG backend's data path: posts on a DAT endpoint's own libfabric
 * endpoint, whose peer is implied. */
#include "util/hot.h"
#include "msg.h"

#include <string.h>

/* One segment (or none) goes by fi_send/fi_recv/fi_write/fi_read: on
 * libfabric 1.17 tcp the vector calls cost about 150 instructions more per
 * post (callgrind, 64 B ping-pong), and one segment is the common case. */
DFI_HOT static int msg(struct fid_ep *ep, const struct dfi_sge *sg, int n, void *ctx, bool send)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	int rc;

	if (n <= 1) {
		void *buf = n ? sg[0].addr : NULL, *d = n ? dfi_sge_desc(&sg[0]) : NULL;
		size_t len = n ? sg[0].len : 0;

		return dfi_post_rc(send ? fi_send(ep, buf, len, d, 0, ctx) :
				      fi_recv(ep, buf, len, d, 0, ctx));
	}
	rc = dfi_fill_iov(sg, n, iov, desc);
	if (rc)
		return rc;
	return dfi_post_rc(send ? fi_sendv(ep, iov, desc, (size_t)n, 0, ctx) :
			      fi_recvv(ep, iov, desc, (size_t)n, 0, ctx));
}

DFI_HOT int dfi_msg_post_send(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(MSG_FEP(e)->ep, sg, n, ctx, true);
}

/* fi_inject takes one buffer: several segments are gathered first. */
DFI_HOT int dfi_msg_post_inject(struct dfi_fep *fe, const struct dfi_sge *sg, int n)
{
	struct msg_fep *e = MSG_FEP(fe);
	uint8_t buf[DFI_INJECT_MAX];
	ssize_t len;

	if (n <= 1)
		return dfi_post_rc(fi_inject(e->ep, n ? sg[0].addr : NULL, n ? sg[0].len : 0, 0));
	len = dfi_gather(sg, n, buf, sizeof(buf));
	if (len < 0)
		return (int)len;
	return dfi_post_rc(fi_inject(e->ep, buf, (size_t)len, 0));
}

DFI_HOT int dfi_msg_post_recv(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(MSG_FEP(e)->ep, sg, n, ctx, false);
}

int dfi_msg_srx_post_recv(struct dfi_srx *x, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(MSG_SRX(x)->srx, sg, n, ctx, false);
}

DFI_HOT static int rma(struct msg_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		       uint32_t rkey, void *ctx, bool write)
{
	if (n != 1)
		return dfi_rma_msg(e->ep, sg, n, 0, raddr, rkey, ctx, write, 0);
	return dfi_post_rc(write ? fi_write(e->ep, sg[0].addr, sg[0].len, dfi_sge_desc(&sg[0]), 0,
					raddr, rkey, ctx) :
			       fi_read(e->ep, sg[0].addr, sg[0].len, dfi_sge_desc(&sg[0]), 0,
				       raddr, rkey, ctx));
}

DFI_HOT int dfi_msg_post_write(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
			       uint32_t rkey, void *ctx)
{
	return rma(MSG_FEP(e), sg, n, raddr, rkey, ctx, true);
}

int dfi_msg_post_atomic(struct dfi_fep *e, enum dfi_atomic_op op, const uint64_t *operand,
			const uint64_t *compare, uint64_t *result, struct dfi_mr *result_mr,
			uint64_t raddr, uint32_t rkey, void *ctx)
{
	return dfi_post_rc(dfi_atomic(MSG_FEP(e)->ep, 0, op, operand, compare, result, result_mr,
				      raddr, rkey, ctx));
}

int dfi_msg_post_senddata(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t data,
			  void *ctx)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	struct fi_msg m = { .msg_iov = iov, .desc = desc, .iov_count = (size_t)n, .context = ctx,
			    .data = data };
	int rc;

	if (n <= 1)
		return dfi_post_rc(fi_senddata(MSG_FEP(e)->ep, n ? sg[0].addr : NULL,
					       n ? sg[0].len : 0, n ? dfi_sge_desc(&sg[0]) : NULL,
					       data, 0, ctx));
	rc = dfi_fill_iov(sg, n, iov, desc);
	if (rc)
		return rc;
	return dfi_post_rc(fi_sendmsg(MSG_FEP(e)->ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION));
}

DFI_HOT int dfi_msg_post_read(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
			      uint32_t rkey, void *ctx)
{
	return rma(MSG_FEP(e), sg, n, raddr, rkey, ctx, false);
}
