/* An IA's fabric: the provider's fabric and domain, opened for the backend
 * that serves it (msg/ or rdm/), and the calls of fabric.h sent on to the
 * backend of the object they are given. */
#include "util/hot.h"
#include "fabric_int.h"
#include "util/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dfi_fabric_open(const char *prov, const struct sockaddr_in *addr, const char *domain,
		    enum dfi_ep_kind kind, bool atomics, struct dfi_fabric **out, char *err,
		    size_t errlen)
{
	struct dfi_fabric *f;
	int rc;

	f = calloc(1, sizeof(*f));
	if (!f) {
		snprintf(err, errlen, "out of memory");
		return -FI_ENOMEM;
	}
	pthread_mutex_init(&f->atomic_lock, NULL);
	rc = dfi_fabric_getinfo(prov, addr, domain, kind, &f->info, err, errlen);
	if (rc)
		goto err_info;
	f->be = f->info->ep_attr->type == FI_EP_RDM ? &dfi_rdm_backend : &dfi_msg_backend;
	/* Virtual-address RMA with provider keys, as DAT peers expect: tcp
	 * in libfabric 1.17 returns mr_mode 0, offsets, unless forced.
	 * tcp;ofi_rxm opens its core's domain with the core's own mode (0)
	 * unless asked for the legacy FI_MR_BASIC, which it hands down as it
	 * is (rxm_info_to_core_mr_modes): virtual addresses, keys the core
	 * returns.  psm3 (and psm2) likewise: psmx3_domain_open looks at
	 * FI_MR_BASIC alone, and without it takes offsets and the consumer's
	 * keys.  A provider that names its own mode keeps it (shm: virtual
	 * addresses, keys of ours, mr.c). */
	if (!f->info->domain_attr->mr_mode)
		f->info->domain_attr->mr_mode = strstr(prov, "ofi_rxm") || strstr(prov, "psm") ?
						FI_MR_BASIC : FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	if (f->info->domain_attr->mr_mode != FI_MR_BASIC &&
	    !(f->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)) {
		snprintf(err, errlen, "libfabric provider '%s' addresses remote memory by "
			 "offset (mr_mode 0x%x without FI_MR_VIRT_ADDR): not served yet "
			 "(docs/rdm.md)",
			 prov, f->info->domain_attr->mr_mode);
		rc = -ENODEV;
		goto err_info;
	}
	rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL);
	if (rc) {
		snprintf(err, errlen, "fi_fabric(%s): %s", f->info->fabric_attr->name,
			 fi_strerror(-rc));
		goto err_info;
	}
	rc = fi_domain(f->fabric, f->info, &f->domain, NULL);
	if (rc) {
		snprintf(err, errlen, "fi_domain(%s): %s", f->info->domain_attr->name,
			 fi_strerror(-rc));
		goto err_fabric;
	}
	dfi_fabric_fill_limits(f->info, atomics, &f->lim);
	if (f->be->open) {
		rc = f->be->open(f, addr, err, errlen);
		if (rc)
			goto err_domain;
	}
	dfi_info(DFI_SS_FABRIC, "opened %s fabric %s domain %s, %s backend: iov %zu, "
		 "queues %zu/%zu%s", f->lim.prov_name, f->lim.fabric_name, f->lim.domain_name,
		 f->be->name, f->lim.iov_limit, f->lim.tx_size, f->lim.rx_size,
		 f->lim.op_ctx ? ", contexts the provider writes in (FI_CONTEXT)" : "");
	*out = f;
	return 0;

err_domain:
	fi_close(&f->domain->fid);
err_fabric:
	fi_close(&f->fabric->fid);
err_info:
	fi_freeinfo(f->info);
	pthread_mutex_destroy(&f->atomic_lock);
	free(f);
	return rc;
}

void dfi_fabric_close(struct dfi_fabric *f)
{
	int rc;

	if (!f)
		return;
	if (f->be->close)
		f->be->close(f);
	rc = fi_close(&f->domain->fid);
	if (rc)
		dfi_err(DFI_SS_FABRIC, "fi_close(domain): %s", fi_strerror(-rc));
	rc = fi_close(&f->fabric->fid);
	if (rc)
		dfi_err(DFI_SS_FABRIC, "fi_close(fabric): %s", fi_strerror(-rc));
	fi_freeinfo(f->info);
	pthread_mutex_destroy(&f->atomic_lock);
	free(f);
}

const struct dfi_fabric_limits *dfi_fabric_limits(const struct dfi_fabric *f)
{
	return &f->lim;
}


/* ------------------------------------------------------------- dispatch
 * Each call goes to the backend of the object it is given (fabric_int.h). */

int dfi_eq_open(struct dfi_fabric *f, struct dfi_eq **eq)
{
	return f->be->eq_open(f, eq);
}

void dfi_eq_close(struct dfi_eq *eq)
{
	if (eq)
		eq->be->eq_close(eq);
}

int dfi_eq_fd(struct dfi_eq *eq)
{
	return eq->be->eq_fd(eq);
}

int dfi_eq_trywait(struct dfi_eq *eq)
{
	return eq->be->eq_trywait(eq);
}

int dfi_eq_read(struct dfi_eq *eq, struct dfi_cm_event *ev)
{
	return eq->be->eq_read(eq, ev);
}

void dfi_connreq_free(struct dfi_eq *eq, void *req)
{
	eq->be->connreq_free(req);
}

void dfi_connreq_peer(struct dfi_eq *eq, void *req, struct sockaddr_in *peer)
{
	eq->be->connreq_peer(req, peer);
}

int dfi_pep_listen(struct dfi_fabric *f, struct dfi_eq *eq, uint16_t port, void *ctx,
		   struct dfi_pep **pep, uint16_t *bound_port)
{
	return f->be->pep_listen(f, eq, port, ctx, pep, bound_port);
}

void dfi_pep_close(struct dfi_pep *pep)
{
	if (pep)
		pep->be->pep_close(pep);
}

int dfi_pep_reject(struct dfi_pep *pep, void *req, const void *pdata, size_t plen)
{
	return pep->be->pep_reject(pep, req, pdata, plen);
}

int dfi_srx_open(struct dfi_fabric *f, size_t size, size_t iov_limit, struct dfi_srx **srx)
{
	return f->be->srx_open(f, size, iov_limit, srx);
}

void dfi_srx_close(struct dfi_srx *srx)
{
	if (srx)
		srx->be->srx_close(srx);
}

int dfi_srx_post_recv(struct dfi_srx *srx, const struct dfi_sge *sg, int n, void *ctx)
{
	return srx->be->srx_post_recv(srx, sg, n, ctx);
}

int dfi_srx_cq_open(struct dfi_srx *srx, size_t size, struct dfi_cq **cq)
{
	return srx->be->srx_cq_open(srx, size, cq);
}

void dfi_srx_progress(struct dfi_srx *srx)
{
	if (srx->be->srx_progress)
		srx->be->srx_progress(srx);
}

int dfi_fep_open(struct dfi_fabric *f, struct dfi_eq *eq, void *req, struct dfi_cq *txcq,
		 struct dfi_cq *rxcq, struct dfi_srx *srx, size_t tx_size, size_t rx_size,
		 void *ctx, struct dfi_fep **fep)
{
	return f->be->fep_open(f, eq, req, txcq, rxcq, srx, tx_size, rx_size, ctx, fep);
}

int dfi_fep_connect(struct dfi_fep *fep, const struct sockaddr_in *dest, const void *pdata,
		    size_t plen)
{
	return fep->be->fep_connect(fep, dest, pdata, plen);
}

int dfi_fep_accept(struct dfi_fep *fep, const void *pdata, size_t plen)
{
	return fep->be->fep_accept(fep, pdata, plen);
}

int dfi_fep_shutdown(struct dfi_fep *fep)
{
	return fep->be->fep_shutdown(fep);
}

void dfi_fep_cancel(struct dfi_fep *fep, void *ctx)
{
	fep->be->fep_cancel(fep, ctx);
}

void dfi_fep_recvs_over(struct dfi_fep *fep)
{
	if (fep->be->fep_recvs_over)
		fep->be->fep_recvs_over(fep);
}

void dfi_fep_close(struct dfi_fep *fep)
{
	if (fep)
		fep->be->fep_close(fep);
}

int dfi_fep_peer(struct dfi_fep *fep, struct sockaddr_in *peer)
{
	return fep->be->fep_peer(fep, peer);
}

int dfi_fep_arm_liveness(struct dfi_fep *fep, unsigned timeout_ms, const struct sockaddr_in *dest)
{
	return fep->be->fep_arm_liveness(fep, timeout_ms, dest);
}

int dfi_fep_aborted(const struct dfi_fep *fep)
{
	return fep->be->fep_aborted(fep);
}

int dfi_fep_cut(struct dfi_fep *fep)
{
	return fep->be->fep_cut ? fep->be->fep_cut(fep) : -ENOTSUP;
}

void dfi_fep_fault(struct dfi_fep *fep, int err)
{
	if (fep->be->fep_fault)
		fep->be->fep_fault(fep, err);
}

DFI_HOT int dfi_post_send(struct dfi_fep *fep, const struct dfi_sge *sg, int n, void *ctx)
{
	return fep->be->post_send(fep, sg, n, ctx);
}

DFI_HOT int dfi_post_inject(struct dfi_fep *fep, const struct dfi_sge *sg, int n)
{
	return fep->be->post_inject(fep, sg, n);
}

DFI_HOT int dfi_post_recv(struct dfi_fep *fep, const struct dfi_sge *sg, int n, void *ctx)
{
	return fep->be->post_recv(fep, sg, n, ctx);
}

DFI_HOT int dfi_post_write(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t raddr,
			   uint32_t rkey, void *ctx)
{
	return fep->be->post_write(fep, sg, n, raddr, rkey, ctx);
}

DFI_HOT int dfi_post_read(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t raddr,
			  uint32_t rkey, void *ctx)
{
	return fep->be->post_read(fep, sg, n, raddr, rkey, ctx);
}

int dfi_post_senddata(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t data,
		      void *ctx)
{
	return fep->be->post_senddata(fep, sg, n, data, ctx);
}

int dfi_post_atomic(struct dfi_fep *fep, enum dfi_atomic_op op, const uint64_t *operand,
		    const uint64_t *compare, uint64_t *result, struct dfi_mr *result_mr,
		    uint64_t raddr, uint32_t rkey, void *ctx)
{
	return fep->be->post_atomic(fep, op, operand, compare, result, result_mr, raddr, rkey,
				    ctx);
}

int dfi_ud_connect(struct dfi_fep *ud, const struct sockaddr_in *dest, const void *pdata,
		   size_t plen, void *ctx, struct dfi_fep **hs)
{
	if (!ud->be->ud_connect)
		return -ENOSYS;
	return ud->be->ud_connect(ud, dest, pdata, plen, ctx, hs);
}

int dfi_ud_accept(struct dfi_fep *ud, void *req, const void *pdata, size_t plen, void *ctx,
		  struct dfi_fep **hs)
{
	if (!ud->be->ud_accept)
		return -ENOSYS;
	return ud->be->ud_accept(ud, req, pdata, plen, ctx, hs);
}

int dfi_post_send_ud(struct dfi_fep *ud, const struct dfi_ah *ah, const struct dfi_sge *sg,
		     int n, void *ctx)
{
	if (ah->be != ud->be)
		return -EINVAL;
	return ud->be->post_send_ud(ud, ah, sg, n, ctx);
}

void dfi_ah_free(struct dfi_ah *ah)
{
	if (ah)
		ah->be->ah_free(ah);
}

int dfi_post_atomic_emul(struct dfi_fep *fep, enum dfi_atomic_op op, uint64_t operand,
			 uint64_t compare, uint64_t raddr, uint32_t rkey, uint64_t id)
{
	if (!fep->be->post_atomic_emul)
		return -ENOSYS;
	return fep->be->post_atomic_emul(fep, op, operand, compare, raddr, rkey, id);
}
