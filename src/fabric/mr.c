/* Memory registration on the IA's domain (both backends). */
#include "fabric_int.h"
#include "util/log.h"

#include <errno.h>
#include <stdlib.h>

int dfi_mr_reg(struct dfi_fabric *f, const void *addr, size_t len, unsigned access,
	       struct dfi_mr **out, uint32_t *key)
{
	struct dfi_mr *m = calloc(1, sizeof(*m));
	uint64_t acc = 0, k, req_key = 0;
	int rc;

	if (!m)
		return -FI_ENOMEM;
	if (access & DFI_MR_LOCAL_READ)
		acc |= FI_SEND | FI_WRITE;
	if (access & DFI_MR_LOCAL_WRITE)
		acc |= FI_RECV | FI_READ;
	if (access & DFI_MR_REMOTE_READ)
		acc |= FI_REMOTE_READ;
	if (access & DFI_MR_REMOTE_WRITE)
		acc |= FI_REMOTE_WRITE;
	/* Without FI_MR_PROV_KEY (shm) the keys are ours to choose, and must
	 * differ; tcp;ofi_rxm takes ours even when asked for its own.  A
	 * provider that makes its own ignores this one. */
	req_key = atomic_fetch_add_explicit(&f->next_key, 1, memory_order_relaxed) + 1;
	rc = fi_mr_reg(f->domain, addr, len, acc, 0, req_key, 0, &m->mr, NULL);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_mr_reg(%p, %zu): %s", addr, len, fi_strerror(-rc));
		free(m);
		return rc;
	}
	k = fi_mr_key(m->mr);
	if (k == FI_KEY_NOTAVAIL || k > UINT32_MAX) {
		dfi_err(DFI_SS_FABRIC, "fi_mr_reg(%p, %zu): key 0x%llx does not fit DAT's "
			"32-bit rmr_context", addr, len, (unsigned long long)k);
		fi_close(&m->mr->fid);
		free(m);
		return -ERANGE;
	}
	*key = (uint32_t)k;
	*out = m;
	return 0;
}

void dfi_mr_dereg(struct dfi_mr *m)
{
	int rc;

	if (!m)
		return;
	rc = fi_close(&m->mr->fid);
	if (rc)
		dfi_err(DFI_SS_FABRIC, "fi_close(mr): %s", fi_strerror(-rc));
	free(m);
}
