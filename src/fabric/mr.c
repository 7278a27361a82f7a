/* Memory registration on the IA's domain (both backends). */
#include "fabric_int.h"
#include "util/log.h"

#include <errno.h>
#include <stdatomic.h>
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
	if (access & DFI_MR_REMOTE_ATOMIC) {
		m->f = f;
		m->addr = (uintptr_t)addr;
		m->len = len;
		m->key = (uint32_t)k;
		pthread_mutex_lock(&f->atomic_lock);
		m->next = f->atomic_mrs;
		f->atomic_mrs = m;
		pthread_mutex_unlock(&f->atomic_lock);
	}
	*out = m;
	return 0;
}

void dfi_mr_dereg(struct dfi_mr *m)
{
	int rc;

	if (!m)
		return;
	if (m->f) {	/* no peer's atomic touches it from now on */
		pthread_mutex_lock(&m->f->atomic_lock);
		for (struct dfi_mr **pp = &m->f->atomic_mrs; *pp; pp = &(*pp)->next)
			if (*pp == m) {
				*pp = m->next;
				break;
			}
		pthread_mutex_unlock(&m->f->atomic_lock);
	}
	rc = fi_close(&m->mr->fid);
	if (rc)
		dfi_err(DFI_SS_FABRIC, "fi_close(mr): %s", fi_strerror(-rc));
	free(m);
}

/*
 * Emulated atomics (the IB extension's, where libfabric has none: docs/
 * rdm.md): applied by the target's progress, under the fabric's lock, so
 * that a registration cannot go in the middle; the operation itself is the
 * CPU's, so it is atomic with respect to every other atomic on that memory,
 * a local one's included.  A linear search: an IA registers few regions
 * for remote atomics.
 */
uint32_t dfi_mr_atomic(struct dfi_fabric *f, enum dfi_atomic_op op, uint64_t addr, uint32_t key,
		       uint64_t operand, uint64_t compare, uint64_t *old)
{
	uint32_t status = EACCES;

	*old = 0;
	if (addr & 7)
		return EINVAL;
	pthread_mutex_lock(&f->atomic_lock);
	for (struct dfi_mr *m = f->atomic_mrs; m; m = m->next) {
		_Atomic uint64_t *p;

		if (m->key != key)
			continue;
		if (addr < m->addr || addr - m->addr > m->len || m->len - (addr - m->addr) < 8)
			break;
		p = (_Atomic uint64_t *)(uintptr_t)addr;
		if (op == DFI_ATOMIC_FADD) {
			*old = atomic_fetch_add_explicit(p, operand, memory_order_seq_cst);
		} else {
			uint64_t expected = compare;

			atomic_compare_exchange_strong_explicit(p, &expected, operand,
								memory_order_seq_cst,
								memory_order_seq_cst);
			*old = expected;	/* what was there, swapped or not */
		}
		status = 0;
		break;
	}
	pthread_mutex_unlock(&f->atomic_lock);
	return status;
}
