/* What the posts of both backends share: the multi-segment RMA message,
 * the gathering of an inject's segments, the native atomics.  Each takes
 * the libfabric endpoint and the peer's address (0 on a connected
 * endpoint) and returns libfabric's result, so that a backend may retry
 * on FI_EAGAIN (rdm/post.c). */
#include "fabric_int.h"

#include <string.h>

int dfi_rma_msg(struct fid_ep *ep, const struct dfi_sge *sg, int n, fi_addr_t addr,
		uint64_t raddr, uint32_t rkey, void *ctx, bool write, uint64_t flags)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	size_t total = 0;
	struct fi_rma_iov riov;
	struct fi_msg_rma msg = {
		.msg_iov = iov, .desc = desc, .iov_count = (size_t)n, .addr = addr,
		.rma_iov = &riov, .rma_iov_count = 1, .context = ctx,
	};
	int rc = dfi_fill_iov(sg, n, iov, desc);

	if (rc)
		return rc;
	for (int i = 0; i < n; i++)
		total += sg[i].len;
	riov = (struct fi_rma_iov){ .addr = raddr, .len = total, .key = rkey };
	return dfi_post_rc(write ? fi_writemsg(ep, &msg, FI_COMPLETION | flags) :
				   fi_readmsg(ep, &msg, FI_COMPLETION | flags));
}

ssize_t dfi_gather(const struct dfi_sge *sg, int n, void *buf, size_t cap)
{
	size_t off = 0;

	for (int i = 0; i < n; i++) {
		if (sg[i].len > cap - off)
			return -EMSGSIZE;
		memcpy((uint8_t *)buf + off, sg[i].addr, sg[i].len);
		off += sg[i].len;
	}
	return (ssize_t)off;
}

void dfi_scatter(const void *buf, size_t len, const struct dfi_sge *sg, int n)
{
	size_t off = 0;

	for (int i = 0; i < n && off < len; i++) {
		size_t k = sg[i].len < len - off ? sg[i].len : len - off;

		memcpy(sg[i].addr, (const uint8_t *)buf + off, k);
		off += k;
	}
}

ssize_t dfi_atomic(struct fid_ep *ep, fi_addr_t addr, enum dfi_atomic_op op,
		   const uint64_t *operand, const uint64_t *compare, uint64_t *result,
		   struct dfi_mr *result_mr, uint64_t raddr, uint32_t rkey, void *ctx)
{
	void *rdesc = result_mr ? fi_mr_desc(result_mr->mr) : NULL;

	if (op == DFI_ATOMIC_FADD)
		return fi_fetch_atomic(ep, operand, 1, NULL, result, rdesc, addr, raddr, rkey,
				       FI_UINT64, FI_SUM, ctx);
	return fi_compare_atomic(ep, operand, 1, NULL, compare, NULL, result, rdesc, addr, raddr,
				 rkey, FI_UINT64, FI_CSWAP, ctx);
}
