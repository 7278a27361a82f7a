/* Protection zones.  libfabric has no PZ: a PZ is a DAT-side grouping whose
 * dependencies (LMRs, EPs, RMRs, SRQs) are counted so it is not freed early. */
#include "dfi.h"

DAT_RETURN dfi_pz_create(DAT_IA_HANDLE h, DAT_PZ_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_pz *pz;
	bool full;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "PZ handle pointer is NULL");
	pthread_mutex_lock(&ia->lock);
	full = ia->n_pz >= DFI_MAX_PZS;
	if (!full)
		ia->n_pz++;
	pthread_mutex_unlock(&ia->lock);
	if (full)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN),
				  "IA already has max_pzs (%d) PZs", DFI_MAX_PZS);
	pz = dfi_obj_new(ia, DFI_T_PZ, sizeof(*pz));
	if (!pz) {
		pthread_mutex_lock(&ia->lock);
		ia->n_pz--;
		pthread_mutex_unlock(&ia->lock);
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	*out = pz;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_pz_query(DAT_PZ_HANDLE h, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM *param)
{
	struct dfi_pz *pz = dfi_obj_get(h, DFI_T_PZ);

	if (!pz)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ),
				  "%p is not a PZ handle", (void *)h);
	if (mask & ~DAT_PZ_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "PZ param mask 0x%x has unknown bits", (unsigned)mask);
	if (!param)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "PZ param pointer is NULL");
	param->ia_handle = pz->hdr.ia;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_pz_free(DAT_PZ_HANDLE h)
{
	struct dfi_pz *pz = dfi_obj_get(h, DFI_T_PZ);
	struct dfi_ia *ia;
	int refs;

	if (!pz)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ),
				  "%p is not a PZ handle", (void *)h);
	ia = pz->hdr.ia;
	pthread_mutex_lock(&ia->lock);
	refs = pz->refs;
	pthread_mutex_unlock(&ia->lock);
	if (refs)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE),
				  "PZ %p is in use by %d LMRs/EPs/RMRs/SRQs", (void *)pz, refs);
	dfi_pz_destroy(pz);
	return DAT_SUCCESS;
}

void dfi_pz_destroy(struct dfi_pz *pz)
{
	struct dfi_ia *ia = pz->hdr.ia;

	pthread_mutex_lock(&ia->lock);
	ia->n_pz--;
	pthread_mutex_unlock(&ia->lock);
	dfi_obj_retire(pz);
}
