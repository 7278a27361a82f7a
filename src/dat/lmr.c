/* Local memory regions: real libfabric registrations, virtual addressing,
 * lmr_context == rmr_context == the provider's 32-bit key. */
#include "dfi.h"
#include "fabric/fabric.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Whether [addr, addr + len) is mapped memory of the process.  libfabric's
 * tcp provider registers any range without touching it (it does not pin),
 * so a range with a hole, or past the end of the address space, would be
 * registered and fail only at a DTO into it, breaking the connection (the
 * provider's recvmsg gets EFAULT).  msync(MS_ASYNC) walks the mappings and
 * answers ENOMEM for a hole; it writes nothing back (Linux >= 2.6.19). */
static int range_mapped(const void *addr, DAT_VLEN len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)addr, start = a & ~(page - 1);

	if (len > DFI_MAX_LMR_VA || a > DFI_MAX_LMR_VA - len + 1)
		return -ERANGE;
	if (msync((void *)start, (size_t)(a - start + len), MS_ASYNC) != 0)
		return -errno;
	return 0;
}

static unsigned access_of(DAT_MEM_PRIV_FLAGS priv)
{
	unsigned a = 0;

	/* Bits at and above DAT_MEM_PRIV_EXTENSION_BASE belong to extensions:
	 * accepted and ignored. */
	if (priv & DAT_MEM_PRIV_LOCAL_READ_FLAG)
		a |= DFI_MR_LOCAL_READ;
	if (priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG)
		a |= DFI_MR_LOCAL_WRITE;
	if (priv & DAT_MEM_PRIV_REMOTE_READ_FLAG)
		a |= DFI_MR_REMOTE_READ;
	if (priv & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
		a |= DFI_MR_REMOTE_WRITE;
	/* a native atomic reads and writes the target (libfabric has no
	 * access bit of its own for it); an emulated one checks its own */
	if (priv & DAT_IB_MEM_PRIV_REMOTE_ATOMIC)
		a |= DFI_MR_REMOTE_READ | DFI_MR_REMOTE_WRITE | DFI_MR_REMOTE_ATOMIC;
	return a;
}

DAT_RETURN dfi_lmr_create(DAT_IA_HANDLE h, DAT_MEM_TYPE type, DAT_REGION_DESCRIPTION desc,
			  DAT_VLEN len, DAT_PZ_HANDLE pzh, DAT_MEM_PRIV_FLAGS priv,
			  DAT_VA_TYPE va_type, DAT_LMR_HANDLE *out, DAT_LMR_CONTEXT *lctx,
			  DAT_RMR_CONTEXT *rctx, DAT_VLEN *reg_len, DAT_VADDR *reg_addr)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_pz *pz = dfi_pz_of(ia, pzh);
	struct dfi_lmr *lmr, *base = NULL;
	const void *addr;
	uint32_t key;
	bool full;
	int rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!pz)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ),
				  "%p is not a PZ of this IA", (void *)pzh);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8),
				  "LMR handle pointer is NULL");
	if (va_type != DAT_VA_TYPE_VA)
		return DFI_REJECT(DFI_ERR(DAT_MODEL_NOT_SUPPORTED, 0),
				  "zero-based virtual addresses are not supported "
				  "(zb_supported is FALSE)");
	switch (type) {
	case DAT_MEM_TYPE_VIRTUAL:
		addr = desc.for_va;
		if (len == 0)
			return DFI_REJECT(DFI_ERR(DAT_LENGTH_ERROR, 0), "LMR length is 0");
		if (!addr)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
					  "LMR virtual address is NULL");
		break;
	case DAT_MEM_TYPE_LMR:
		base = dfi_obj_get(desc.for_lmr_handle, DFI_T_LMR);
		if (!base || base->hdr.ia != ia)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR),
					  "region %p is not an LMR of this IA",
					  (void *)desc.for_lmr_handle);
		addr = (const void *)(uintptr_t)base->addr;
		len = base->length;
		break;
	case DAT_MEM_TYPE_SHARED_VIRTUAL:
		return DFI_REJECT(DFI_ERR(DAT_NOT_IMPLEMENTED, 0),
				  "DAT_MEM_TYPE_SHARED_VIRTUAL LMRs are not supported by dapl-ofi");
	default:
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "unknown memory type %d", (int)type);
	}
	if (len > DFI_MAX_LMR_BLOCK)
		return DFI_REJECT(DFI_ERR(DAT_LENGTH_ERROR, 0),
				  "LMR length %llu exceeds max_lmr_block_size %u",
				  (unsigned long long)len, DFI_MAX_LMR_BLOCK);
	if (type == DAT_MEM_TYPE_VIRTUAL && (rc = range_mapped(addr, len)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "LMR region %p+%llu %s", addr, (unsigned long long)len,
				  rc == -ERANGE ? "runs past max_lmr_virtual_address" :
				  rc == -ENOMEM ? "is not all mapped memory of the process" :
				  strerror(-rc));

	pthread_mutex_lock(&ia->lock);
	full = ia->n_lmr >= DFI_MAX_LMRS;
	if (!full) {
		ia->n_lmr++;
		pz->refs++;
		if (base)
			base->refs++;
	}
	pthread_mutex_unlock(&ia->lock);
	if (full)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION),
				  "IA already has max_lmrs (%d) LMRs", DFI_MAX_LMRS);

	lmr = dfi_obj_new(ia, DFI_T_LMR, sizeof(*lmr));
	if (!lmr) {
		rc = -ENOMEM;
		goto err;
	}
	if (priv & DAT_IB_MEM_PRIV_REMOTE_ATOMIC)
		dfi_progress_atomics(ia);	/* a target of atomics */
	rc = dfi_mr_reg(ia->fab, addr, (size_t)len, access_of(priv), &lmr->mr, &key);
	if (rc) {
		dfi_obj_retire(lmr);
		goto err;
	}
	lmr->pz = pz;
	lmr->mem_type = type;
	lmr->region = desc;
	lmr->length = len;
	lmr->priv = priv;
	lmr->va_type = va_type;
	lmr->addr = (DAT_VADDR)(uintptr_t)addr;
	lmr->lmr_context = lmr->rmr_context = key;
	lmr->base = base;

	*out = lmr;
	if (lctx)
		*lctx = lmr->lmr_context;
	if (rctx)
		*rctx = lmr->rmr_context;
	if (reg_len)
		*reg_len = len;
	if (reg_addr)
		*reg_addr = lmr->addr;
	dfi_dbg(DFI_SS_MR, "LMR %p: %p+%llu priv 0x%x key 0x%x", (void *)lmr, addr,
		(unsigned long long)len, (unsigned)priv, key);
	return DAT_SUCCESS;

err:
	pthread_mutex_lock(&ia->lock);
	ia->n_lmr--;
	pz->refs--;
	if (base)
		base->refs--;
	pthread_mutex_unlock(&ia->lock);
	return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, rc == -ENOMEM ? DAT_RESOURCE_MEMORY :
		       DAT_RESOURCE_MEMORY_REGION);
}

DAT_RETURN dfi_lmr_query(DAT_LMR_HANDLE h, DAT_LMR_PARAM_MASK mask, DAT_LMR_PARAM *p)
{
	struct dfi_lmr *lmr = dfi_obj_get(h, DFI_T_LMR);

	if (!lmr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR),
				  "%p is not an LMR handle", (void *)h);
	if (mask & ~DAT_LMR_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "LMR param mask 0x%x has unknown bits", (unsigned)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "LMR param pointer is NULL");
	p->ia_handle = lmr->hdr.ia;
	p->mem_type = lmr->mem_type;
	p->region_desc = lmr->region;
	p->length = lmr->length;
	p->pz_handle = lmr->pz;
	p->mem_priv = lmr->priv;
	p->va_type = lmr->va_type;
	p->lmr_context = lmr->lmr_context;
	p->rmr_context = lmr->rmr_context;
	p->registered_size = lmr->length;
	p->registered_address = lmr->addr;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_lmr_free(DAT_LMR_HANDLE h)
{
	struct dfi_lmr *lmr = dfi_obj_get(h, DFI_T_LMR);
	int refs;

	if (!lmr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR),
				  "%p is not an LMR handle", (void *)h);
	pthread_mutex_lock(&lmr->hdr.ia->lock);
	refs = lmr->refs;
	pthread_mutex_unlock(&lmr->hdr.ia->lock);
	if (refs)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_LMR_IN_USE),
				  "LMR %p is shared by %d LMRs created from it", (void *)lmr, refs);
	dfi_lmr_destroy(lmr);
	return DAT_SUCCESS;
}

void dfi_lmr_destroy(struct dfi_lmr *lmr)
{
	struct dfi_ia *ia = lmr->hdr.ia;

	dfi_mr_dereg(lmr->mr);
	pthread_mutex_lock(&ia->lock);
	ia->n_lmr--;
	lmr->pz->refs--;
	if (lmr->base)
		lmr->base->refs--;
	pthread_mutex_unlock(&ia->lock);
	dfi_obj_retire(lmr);
}

/* Cache-coherent memory and a software transport: nothing to flush
 * (lmr_sync_req is FALSE); the arguments are still checked. */
static DAT_RETURN lmr_sync(DAT_IA_HANDLE h, const DAT_LMR_TRIPLET *iov, DAT_VLEN n)
{
	if (!dfi_obj_get(h, DFI_T_IA))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (n > 0 && !iov)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "%llu segments but the IOV pointer is NULL", (unsigned long long)n);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_lmr_sync_rdma_read(DAT_IA_HANDLE h, const DAT_LMR_TRIPLET *iov, DAT_VLEN n)
{
	return lmr_sync(h, iov, n);
}

DAT_RETURN dfi_lmr_sync_rdma_write(DAT_IA_HANDLE h, const DAT_LMR_TRIPLET *iov, DAT_VLEN n)
{
	return lmr_sync(h, iov, n);
}
