/*
 * Remote memory regions.  libfabric has no memory windows, so an RMR is
 * emulated: each bind registers the bound range anew with the remote
 * privileges asked for (its key is the rmr_context) and an unbind or a
 * rebind closes the previous registration.  The bind completes at once:
 * an RMR_BIND completion is posted to the EP's request EVD (unless
 * suppressed).  Documented in dapl-ofi(7).
 *
 * dat_rmr_create_for_ep makes the same RMR: its key, like every RMR's here,
 * serves the connections of the whole IA (libfabric keys are per domain),
 * and its scope reads DAT_RMR_SCOPE_EP as every RMR's does.
 *
 * A peer's dat_ep_post_send_with_invalidate unbinds one (dfi_rmr_invalidate)
 * from the completion path, under an EVD lock: the IA's RMRs are listed
 * under rmr_lock, a leaf lock, and a binding changes under it.
 */
#include "dfi.h"
#include "fabric/fabric.h"

#include <string.h>

struct dfi_rmr {
	struct dfi_obj hdr;
	struct dfi_pz *pz;
	struct dfi_mr *mr;		/* the current binding, or NULL */
	DAT_LMR_TRIPLET triplet;
	DAT_MEM_PRIV_FLAGS priv;
	DAT_VA_TYPE va_type;
	DAT_RMR_CONTEXT context;
	struct dfi_rmr *next;		/* ia->rmrs (rmr_lock) */
};

DAT_RETURN dfi_rmr_create(DAT_PZ_HANDLE pzh, DAT_RMR_HANDLE *out)
{
	struct dfi_pz *pz = dfi_obj_get(pzh, DFI_T_PZ);
	struct dfi_rmr *rmr;
	struct dfi_ia *ia;
	bool full;

	if (!pz)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ),
				  "%p is not a PZ handle", (void *)pzh);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "RMR handle pointer is NULL");
	ia = pz->hdr.ia;
	pthread_mutex_lock(&ia->lock);
	full = ia->n_rmr >= DFI_MAX_RMRS;	/* ia_attr.max_rmrs */
	if (!full)
		ia->n_rmr++;
	pthread_mutex_unlock(&ia->lock);
	if (full)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION),
				  "IA already has max_rmrs (%d) RMRs", DFI_MAX_RMRS);
	rmr = dfi_obj_new(ia, DFI_T_RMR, sizeof(*rmr));
	if (!rmr) {
		pthread_mutex_lock(&ia->lock);
		ia->n_rmr--;
		pthread_mutex_unlock(&ia->lock);
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	rmr->pz = pz;
	pthread_mutex_lock(&ia->lock);
	pz->refs++;
	pthread_mutex_unlock(&ia->lock);
	pthread_mutex_lock(&ia->rmr_lock);
	rmr->next = ia->rmrs;
	ia->rmrs = rmr;
	pthread_mutex_unlock(&ia->rmr_lock);
	*out = rmr;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_rmr_create_for_ep(DAT_PZ_HANDLE pzh, DAT_RMR_HANDLE *out)
{
	return dfi_rmr_create(pzh, out);
}

#define RMR_OR_REJECT(r, h) do {						\
		(r) = dfi_obj_get(h, DFI_T_RMR);				\
		if (!(r))							\
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR), \
					  "%p is not an RMR handle", (void *)(h)); \
	} while (0)

/* The bound RMR of ia whose key is ctx, or NULL (rmr_lock held). */
static struct dfi_rmr *rmr_by_context(struct dfi_ia *ia, DAT_RMR_CONTEXT ctx)
{
	for (struct dfi_rmr *r = ia->rmrs; r; r = r->next)
		if (r->mr && r->context == ctx)
			return r;
	return NULL;
}

/* r's binding becomes mr (NULL: unbound) with these: rmr_lock held.
 * Returns the old registration, for the caller to close unlocked. */
static struct dfi_mr *rmr_set(struct dfi_rmr *r, struct dfi_mr *mr, DAT_RMR_CONTEXT key,
			      DAT_MEM_PRIV_FLAGS priv, const DAT_LMR_TRIPLET *t)
{
	struct dfi_mr *old = r->mr;

	r->mr = mr;
	r->context = key;
	r->priv = mr ? priv : 0;
	if (mr)
		r->triplet = *t;
	else
		memset(&r->triplet, 0, sizeof(r->triplet));
	return old;
}

DAT_RETURN dfi_rmr_query(DAT_RMR_HANDLE h, DAT_RMR_PARAM_MASK mask, DAT_RMR_PARAM *p)
{
	struct dfi_rmr *rmr;

	RMR_OR_REJECT(rmr, h);
	if (mask & ~(DAT_RMR_PARAM_MASK)DAT_RMR_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "RMR param mask 0x%x has unknown bits", (unsigned)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "RMR param pointer is NULL");
	memset(p, 0, sizeof(*p));
	p->ia_handle = rmr->hdr.ia;
	p->pz_handle = rmr->pz;
	pthread_mutex_lock(&rmr->hdr.ia->rmr_lock);	/* a peer may invalidate it */
	p->lmr_triplet = rmr->triplet;
	p->mem_priv = rmr->priv;
	p->rmr_context = rmr->context;
	p->va_type = rmr->va_type;
	pthread_mutex_unlock(&rmr->hdr.ia->rmr_lock);
	p->rmr_scope = DAT_RMR_SCOPE_EP;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_rmr_bind(DAT_RMR_HANDLE h, DAT_LMR_HANDLE lmrh, const DAT_LMR_TRIPLET *t,
			DAT_MEM_PRIV_FLAGS priv, DAT_VA_TYPE va_type, DAT_EP_HANDLE eph,
			DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT *ctx)
{
	struct dfi_rmr *rmr;
	struct dfi_lmr *lmr = NULL;
	struct dfi_ep *ep = dfi_obj_get(eph, DFI_T_EP);
	struct dfi_mr *mr = NULL, *old;
	uint32_t key = 0;
	unsigned access = 0;
	DAT_EVENT ev;
	int rc;

	RMR_OR_REJECT(rmr, h);
	if (!ep || ep->hdr.ia != rmr->hdr.ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP of this IA", (void *)eph);
	if (ep->pz != rmr->pz)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_PZ),
				  "EP %p and RMR %p are in different PZs", (void *)ep, (void *)rmr);
	if (va_type != DAT_VA_TYPE_VA)
		return DFI_REJECT(DFI_ERR(DAT_MODEL_NOT_SUPPORTED, 0),
				  "zero-based virtual addresses are not supported");
	if (lmrh && t && t->segment_length) {
		lmr = dfi_obj_get(lmrh, DFI_T_LMR);
		if (!lmr || lmr->hdr.ia != rmr->hdr.ia)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR),
					  "%p is not an LMR of this IA", (void *)lmrh);
		if (t->virtual_address < lmr->addr ||
		    t->virtual_address + t->segment_length > lmr->addr + lmr->length)
			return DFI_REJECT(DFI_ERR(DAT_LENGTH_ERROR, 0),
					  "RMR range 0x%llx+%u lies outside LMR %p",
					  (unsigned long long)t->virtual_address,
					  t->segment_length, (void *)lmr);
		if (priv & DAT_MEM_PRIV_REMOTE_READ_FLAG)
			access |= DFI_MR_REMOTE_READ;
		if (priv & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
			access |= DFI_MR_REMOTE_WRITE;
		if (priv & DAT_IB_MEM_PRIV_REMOTE_ATOMIC) {
			access |= DFI_MR_REMOTE_READ | DFI_MR_REMOTE_WRITE | DFI_MR_REMOTE_ATOMIC;
			dfi_progress_atomics(rmr->hdr.ia);	/* a target of atomics */
		}
		rc = dfi_mr_reg(rmr->hdr.ia->fab, (void *)(uintptr_t)t->virtual_address,
				t->segment_length, access, &mr, &key);
		if (rc)
			return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
	}
	/* rebind or unbind: the old registration goes */
	pthread_mutex_lock(&rmr->hdr.ia->rmr_lock);
	old = rmr_set(rmr, mr, key, priv, t);
	rmr->va_type = va_type;
	pthread_mutex_unlock(&rmr->hdr.ia->rmr_lock);
	dfi_mr_dereg(old);
	if (ctx)
		*ctx = key;
	if (!(flags & DAT_COMPLETION_SUPPRESS_FLAG) && ep->req_evd) {
		memset(&ev, 0, sizeof(ev));
		ev.event_number = DAT_RMR_BIND_COMPLETION_EVENT;
		ev.event_data.rmr_completion_event_data.rmr_handle = rmr;
		ev.event_data.rmr_completion_event_data.user_cookie = cookie;
		ev.event_data.rmr_completion_event_data.status = DAT_RMR_BIND_SUCCESS;
		dfi_evq_post(&ep->req_evd->q, &ev);
	}
	return DAT_SUCCESS;
}

void dfi_rmr_destroy(struct dfi_rmr *rmr)
{
	struct dfi_ia *ia = rmr->hdr.ia;
	struct dfi_rmr **pp;
	struct dfi_mr *mr;

	pthread_mutex_lock(&ia->rmr_lock);
	for (pp = &ia->rmrs; *pp && *pp != rmr; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = rmr->next;
	mr = rmr->mr;
	rmr->mr = NULL;
	pthread_mutex_unlock(&ia->rmr_lock);
	dfi_mr_dereg(mr);
	pthread_mutex_lock(&ia->lock);
	rmr->pz->refs--;
	ia->n_rmr--;
	pthread_mutex_unlock(&ia->lock);
	dfi_obj_retire(rmr);
}

DAT_RETURN dfi_rmr_free(DAT_RMR_HANDLE h)
{
	struct dfi_rmr *rmr;

	RMR_OR_REJECT(rmr, h);
	dfi_rmr_destroy(rmr);
	return DAT_SUCCESS;
}

DAT_DTO_COMPLETION_STATUS dfi_rmr_invalidate(struct dfi_ia *ia, const void *ep,
					     DAT_RMR_CONTEXT ctx)
{
	struct dfi_rmr *r;
	struct dfi_mr *old = NULL;

	pthread_mutex_lock(&ia->rmr_lock);
	if ((r = rmr_by_context(ia, ctx)))
		old = rmr_set(r, NULL, 0, 0, NULL);
	pthread_mutex_unlock(&ia->rmr_lock);
	if (!old) {
		dfi_warn(DFI_SS_EP, "EP %p: the peer's send with invalidate names RMR context "
			 "0x%x, which no RMR of this IA has bound", ep, (unsigned)ctx);
		return DAT_DTO_ERR_LOCAL_PROTECTION;
	}
	/* after it, no access with the key is served (libfabric closes it) */
	dfi_mr_dereg(old);
	return DAT_DTO_SUCCESS;
}

/* An RDMA read whose local target is named by an RMR of this IA (iWARP's
 * read into a steering tag): the RMR's bound range stands in for an LMR
 * triplet, and the read is an ordinary one.  The RMR must grant what a
 * peer's read response does to it, remote write.  Found by a walk of the
 * IA's RMRs: this call is rare, and keeps the hot post path as it is. */
DAT_RETURN dfi_ep_post_rdma_read_to_rmr(DAT_EP_HANDLE eph, const DAT_RMR_TRIPLET *local,
					DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
					DAT_COMPLETION_FLAGS flags)
{
	struct dfi_ep *ep = dfi_obj_get(eph, DFI_T_EP);
	DAT_LMR_TRIPLET iov;
	struct dfi_rmr *r;
	struct dfi_ia *ia;
	DAT_RETURN rc = DAT_SUCCESS;

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)eph);
	if (!local)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "local RMR triplet is NULL");
	if (!remote)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "remote RMR triplet is NULL");
	ia = ep->hdr.ia;
	pthread_mutex_lock(&ia->rmr_lock);
	r = rmr_by_context(ia, local->rmr_context);
	if (!r)
		rc = DFI_REJECT(DFI_ERR(DAT_PROTECTION_VIOLATION, 0),
				"no bound RMR of this IA has context 0x%x", local->rmr_context);
	else if (r->pz != ep->pz)
		rc = DFI_REJECT(DFI_ERR(DAT_PROTECTION_VIOLATION, 0),
				"RMR context 0x%x is in another PZ than EP %p",
				local->rmr_context, (void *)ep);
	else if (!(r->priv & DAT_MEM_PRIV_REMOTE_WRITE_FLAG))
		rc = DFI_REJECT(DFI_ERR(DAT_PRIVILEGES_VIOLATION, 0),
				"RMR context 0x%x was not bound with remote write",
				local->rmr_context);
	else if (local->virtual_address < r->triplet.virtual_address ||
		 local->virtual_address + local->segment_length >
		 r->triplet.virtual_address + r->triplet.segment_length)
		rc = DFI_REJECT(DFI_ERR(DAT_LENGTH_ERROR, 0),
				"0x%llx+%u lies outside RMR context 0x%x",
				(unsigned long long)local->virtual_address,
				local->segment_length, local->rmr_context);
	else {
		iov.lmr_context = r->triplet.lmr_context;
		iov.virtual_address = local->virtual_address;
		iov.segment_length = local->segment_length;
	}
	pthread_mutex_unlock(&ia->rmr_lock);
	if (rc != DAT_SUCCESS)
		return rc;
	return dfi_ep_post_rdma_read(ep, 1, &iov, cookie, remote, flags);
}
