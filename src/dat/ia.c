/* The Interface Adapter: open (fabric + domain + async EVD), query, close. */
#include "dfi.h"
#include "fabric/fabric.h"
#include "util/param.h"
#include "dat2/dapl_ofi.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Row/column order of DAT_EVD_FLAGS: software, CR, DTO, connection, RMR
 * bind, async.  Every stream merges with every other, except the async
 * stream, which stays alone (its EVD belongs to the IA). */
const DAT_BOOLEAN dfi_merging[6][6] = {
	{ DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_FALSE },
	{ DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_FALSE },
	{ DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_FALSE },
	{ DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_FALSE },
	{ DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_TRUE,  DAT_FALSE },
	{ DAT_FALSE, DAT_FALSE, DAT_FALSE, DAT_FALSE, DAT_FALSE, DAT_TRUE  },
};

static struct dfi_ia *ia_get(DAT_IA_HANDLE h)
{
	return dfi_obj_get(h, DFI_T_IA);
}

DAT_RETURN dfi_ia_open(const DAT_NAME_PTR name, DAT_COUNT async_qlen,
		       DAT_EVD_HANDLE *async_evd, DAT_IA_HANDLE *ia_out)
{
	struct dfi_provider *p;
	struct dfi_ia *ia;
	char err[384];
	DAT_RETURN rc;
	int r;

	dfi_log_init();
	if (!name)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1), "IA name is NULL");
	p = dfi_provider_find(name);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED),
				  "IA '%s' was not registered with dapl-ofi", name);
	if (!async_evd)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "IA '%s': async EVD pointer is NULL", name);
	if (!ia_out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "IA '%s': IA handle pointer is NULL", name);
	if (*async_evd != DAT_HANDLE_NULL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_ASYNC),
				  "IA '%s': an existing async EVD (%p) cannot be shared; pass "
				  "DAT_HANDLE_NULL and dapl-ofi creates one", name, (void *)*async_evd);
	if (async_qlen < 1 || async_qlen > DFI_EVD_MAX_QLEN)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "IA '%s': async EVD qlen %d out of range 1..%d", name,
				  async_qlen, DFI_EVD_MAX_QLEN);
	if (p->cfg.error[0]) {
		dfi_err(DFI_SS_IA, "IA '%s': ia_params \"%s\": %s", name, p->ia_params, p->cfg.error);
		return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	}

	ia = dfi_obj_new(NULL, DFI_T_IA, sizeof(*ia));
	if (!ia)
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	ia->hdr.provider = &p->table;
	ia->hdr.ia = ia;
	ia->prov = p;
	pthread_mutex_init(&ia->lock, NULL);
	pthread_mutex_init(&ia->rmr_lock, NULL);
	pthread_rwlock_init(&ia->ud_lock, NULL);
	pthread_mutex_init(&ia->cm_lock, NULL);
	pthread_mutex_init(&ia->eq_lock, NULL);
	pthread_cond_init(&ia->batch_done, NULL);
	ia->epfd = ia->stop_fd = -1;
	ia->objs.next = ia->objs.prev = &ia->objs;
	{
		long t = dfi_param_int(DFI_P_PEER_TIMEOUT_MS);

		ia->peer_timeout_ms = t < 0 ? 0 : t > INT32_MAX ? INT32_MAX : (unsigned)t;
	}

	/* getifaddrs and libfabric's own sockets need descriptors: without
	 * any, their failure must not read as a bad interface or provider */
	r = dfi_resolve_ipv4(p->cfg.where, &ia->addr);
	if (r && r != -EMFILE && r != -ENFILE)
		r = dfi_fds_gone() ? dfi_fds_gone() : r;
	if (r == -EMFILE || r == -ENFILE) {
		snprintf(err, sizeof(err), "IA '%s': resolving '%s'", name, p->cfg.where);
		rc = dfi_resource_err(r, DAT_RESOURCE_DEVICE, err);
		goto err_ia;
	}
	if (r) {
		dfi_err(DFI_SS_IA, "IA '%s': ia_params \"%s\": %s '%s'", name, p->ia_params,
			r == -EADDRNOTAVAIL ? "no IPv4 address on interface" :
			"no interface, IPv4 address or host name", p->cfg.where);
		rc = DFI_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
		goto err_ia;
	}
	r = dfi_fabric_open(p->cfg.prov_name, &ia->addr, p->cfg.domain, dfi_cfg_ep_kind(&p->cfg),
			    p->cfg.atomics, &ia->fab, err, sizeof(err));
	if (r && r != -EMFILE && r != -ENFILE && r != -ENOMEM)
		r = dfi_fds_gone() ? dfi_fds_gone() : r;
	if (r == -EMFILE || r == -ENFILE || r == -ENOMEM) {
		dfi_err(DFI_SS_IA, "IA '%s': ia_params \"%s\": %s", name, p->ia_params, err);
		snprintf(err, sizeof(err), "IA '%s': opening the fabric", name);
		rc = dfi_resource_err(r, DAT_RESOURCE_DEVICE, err);
		goto err_ia;
	}
	if (r) {
		dfi_err(DFI_SS_IA, "IA '%s': ia_params \"%s\": %s", name, p->ia_params, err);
		rc = r == -ENOENT ? DFI_ERR(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED) :
		     r == -ENODEV ? DFI_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED) :
				    DFI_ERR(DAT_INTERNAL_ERROR, 0);
		goto err_ia;
	}
	/* CQs with no wait fd: polled from the start (progress.c) */
	atomic_store(&ia->polling, dfi_fabric_limits(ia->fab)->polled);
	rc = dfi_evd_new(ia, async_qlen, NULL, DAT_EVD_ASYNC_FLAG, &ia->async_evd);
	if (rc != DAT_SUCCESS)
		goto err_fab;
	dfi_evq_ref(&ia->async_evd->q);		/* the IA feeds it */

	ia->prov_attr[0] = (DAT_NAMED_ATTR){ DAPL_OFI_ATTR_MTU, p->mtu_str };
	ia->prov_attr[1] = (DAT_NAMED_ATTR){ DAPL_OFI_ATTR_RDMA_READ, p->cfg.rdma_read ? "TRUE" : "FALSE" };
	ia->prov_attr[2] = (DAT_NAMED_ATTR){ DAPL_OFI_ATTR_FABRIC, p->cfg.prov_name };
	/* the IB extension's: "TRUE" where served, absent where not (dtestx
	 * skips the atomics then); and the upcall extension's own mark, which
	 * does not depend on extension_supported */
	ia->prov_attr[3] = (DAT_NAMED_ATTR){ DAT_IB_ATTR_IMMED_DATA,
		dfi_fabric_limits(ia->fab)->cq_data_size >= 8 ? "TRUE" : "FALSE" };
	ia->prov_attr[4] = (DAT_NAMED_ATTR){ DAT_IB_ATTR_COUNTERS, "TRUE" };
	ia->prov_attr[5] = (DAT_NAMED_ATTR){ DAT_OFI_ATTR_UPCALL,
					     DAT_OFI_ATTR_UPCALL_VERSION_STR };
	ia->prov_attr[6] = (DAT_NAMED_ATTR){ DAPL_OFI_ATTR_ENDPOINT,
					     dfi_fabric_limits(ia->fab)->rdm ? "rdm" : "msg" };
	ia->n_prov_attr = 7;
	if (dfi_fabric_limits(ia->fab)->ud)	/* RDM IAs only (ud.c) */
		ia->prov_attr[ia->n_prov_attr++] = (DAT_NAMED_ATTR){ DAT_IB_ATTR_UD, "TRUE" };
	if (dfi_fabric_limits(ia->fab)->rdm)
		ia->prov_attr[ia->n_prov_attr++] = (DAT_NAMED_ATTR){ DAPL_OFI_ATTR_RDM_ACKED,
			dfi_fabric_limits(ia->fab)->acked ? "TRUE" : "FALSE" };
	if (dfi_fabric_limits(ia->fab)->atomic ||	/* native, or emulated */
	    dfi_fabric_limits(ia->fab)->atomic_emul) {
		ia->prov_attr[ia->n_prov_attr++] =
			(DAT_NAMED_ATTR){ DAT_IB_ATTR_FETCH_AND_ADD, "TRUE" };
		ia->prov_attr[ia->n_prov_attr++] =
			(DAT_NAMED_ATTR){ DAT_IB_ATTR_CMP_AND_SWAP, "TRUE" };
		ia->prov_attr[ia->n_prov_attr++] = (DAT_NAMED_ATTR){
			DAPL_OFI_ATTR_ATOMICS,
			dfi_fabric_limits(ia->fab)->atomic ? "native" : "emulated" };
	}

	*async_evd = ia->async_evd;
	*ia_out = ia;
	dfi_info(DFI_SS_IA, "IA '%s' open: %s on %s, %s endpoints", name, p->cfg.prov_name,
		 inet_ntoa(ia->addr.sin_addr), dfi_fabric_limits(ia->fab)->rdm ? "RDM" : "MSG");
	return DAT_SUCCESS;

err_fab:
	dfi_fabric_close(ia->fab);
err_ia:
	pthread_cond_destroy(&ia->batch_done);
	pthread_mutex_destroy(&ia->eq_lock);
	pthread_mutex_destroy(&ia->cm_lock);
	pthread_mutex_destroy(&ia->lock);
	pthread_mutex_destroy(&ia->rmr_lock);
	pthread_rwlock_destroy(&ia->ud_lock);
	dfi_obj_retire(ia);
	return rc;
}

static void fill_ia_attr(struct dfi_ia *ia, DAT_IA_ATTR *a)
{
	const struct dfi_fabric_limits *l = dfi_fabric_limits(ia->fab);
	size_t both = l->iov_limit < l->rx_iov_limit ? l->iov_limit : l->rx_iov_limit;
	DAT_COUNT iov = both > DFI_MAX_SGE ? DFI_MAX_SGE : (DAT_COUNT)both;
	DAT_COUNT dtos = (DAT_COUNT)(l->tx_size < l->rx_size ? l->tx_size : l->rx_size);
	DAT_SEG_LENGTH maxmsg = l->max_msg_size > 0x80000000u ? 0x80000000u :
				(DAT_SEG_LENGTH)l->max_msg_size;

	memset(a, 0, sizeof(*a));
	snprintf(a->adapter_name, sizeof(a->adapter_name), "%.100s (libfabric %.40s on %.96s)",
		 ia->prov->info.ia_name, l->prov_name, ia->prov->cfg.where);
	snprintf(a->vendor_name, sizeof(a->vendor_name), "dapl-ofi");
	a->hardware_version_major = l->prov_major;	/* libfabric provider */
	a->hardware_version_minor = l->prov_minor;
	a->firmware_version_major = l->fi_major;	/* libfabric itself */
	a->firmware_version_minor = l->fi_minor;
	a->ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ia->addr;
	a->max_eps = dfi_max_eps();
	a->max_dto_per_ep = dtos;
	a->max_rdma_read_per_ep_in = 16;
	a->max_rdma_read_per_ep_out = 16;
	a->max_evds = DFI_MAX_EVDS;
	a->max_evd_qlen = DFI_EVD_MAX_QLEN;
	a->max_iov_segments_per_dto = iov;
	a->max_lmrs = DFI_MAX_LMRS;
	a->max_lmr_block_size = DFI_MAX_LMR_BLOCK;
	a->max_lmr_virtual_address = DFI_MAX_LMR_VA;
	a->max_pzs = DFI_MAX_PZS;
	a->max_message_size = maxmsg;
	a->max_rdma_size = maxmsg;
	a->max_rmrs = DFI_MAX_RMRS;	/* emulated: a registration per bind */
	a->max_rmr_target_address = UINT64_C(0x00007fffffffffff);
	/* libfabric shared receive contexts (srq.c); none on the RDM backend
	 * yet (docs/rdm.md) */
	a->max_srqs = DFI_MAX_SRQS;
	a->max_ep_per_srq = DFI_MAX_EP_PER_SRQ;
	a->max_recv_per_srq = DFI_MAX_RECV_PER_SRQ;
	a->max_iov_segments_per_rdma_read = iov;
	a->max_iov_segments_per_rdma_write = iov;
	a->max_rdma_read_in = 16;
	a->max_rdma_read_out = 16;
	a->max_rdma_read_per_ep_in_guaranteed = DAT_TRUE;
	a->max_rdma_read_per_ep_out_guaranteed = DAT_TRUE;
	a->zb_supported = DAT_FALSE;
	/* Both extensions are served either way (provider.c); ext=ofi keeps
	 * what programs built before the IB extension look for. */
	if (ia->prov->cfg.ext_ofi) {
		a->extension_supported = DAT_OFI_EXTENSION;
		a->extension_version = DAT_OFI_EXTENSION_VERSION;
	} else {
		a->extension_supported = DAT_EXTENSION_IB;
		a->extension_version = DAT_IB_EXTENSION_VERSION;
	}
	a->num_transport_attr = 0;
	a->transport_attr = NULL;
	a->num_vendor_attr = 0;
	a->vendor_attr = NULL;
}

static void fill_provider_attr(struct dfi_ia *ia, DAT_PROVIDER_ATTR *a)
{
	/* evd_stream_merging_supported is const in the header: build a copy. */
	DAT_PROVIDER_ATTR t = {
		.provider_version_major = DAPL_OFI_VERSION_MAJOR,
		.provider_version_minor = DAPL_OFI_VERSION_MINOR,
		.dapl_version_major = DAT_VERSION_MAJOR,
		.dapl_version_minor = DAT_VERSION_MINOR,
		.lmr_mem_types_supported = DAT_MEM_TYPE_VIRTUAL | DAT_MEM_TYPE_LMR,
		.iov_ownership_on_return = DAT_IOV_CONSUMER,
		.dat_qos_supported = DAT_QOS_BEST_EFFORT,
		.completion_flags_supported = DAT_COMPLETION_DEFAULT_FLAG |
			DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_UNSIGNALLED_FLAG |
			DAT_COMPLETION_SOLICITED_WAIT_FLAG | DAT_COMPLETION_EVD_THRESHOLD_FLAG,
		.is_thread_safe = DAT_FALSE,	/* the registry's lookup key (dat.conf) */
		/* FI_OPT_CM_DATA_SIZE of tcp, net, sockets, less what emulated
		 * atomics take (fabric.h) */
		.max_private_data_size = (DAT_COUNT)dfi_fabric_limits(ia->fab)->pdata_max,
		.supports_multipath = DAT_FALSE,
		.ep_creator = DAT_PSP_CREATES_EP_IFASKED,	/* DAT_PSP_PROVIDER_FLAG */
		.pz_support = DAT_PZ_UNIQUE,
		.optimal_buffer_alignment = 64,
		.srq_supported = DAT_TRUE,
		.srq_watermarks_supported = 1,	/* low, and EP soft/hard high */
		.srq_ep_pz_difference_supported = DAT_FALSE,
		.srq_info_supported = 1,
		.ep_recv_info_supported = 1,
		.lmr_sync_req = DAT_FALSE,
		.dto_async_return_guaranteed = DAT_FALSE,
		.rdma_write_for_rdma_read_req = DAT_FALSE,
		.rdma_read_lmr_rmr_context_exposure = DAT_FALSE,
		.rmr_scope_supported = DAT_RMR_SCOPE_EP,
		.is_signal_safe = DAT_FALSE,
		.ha_supported = DAT_FALSE,
		.ha_loadbalancing = DAT_HA_LB_NONE,
		.num_provider_specific_attr = ia->n_prov_attr,
		.provider_specific_attr = ia->prov_attr,
	};

	snprintf(t.provider_name, sizeof(t.provider_name), DAPL_OFI_PROVIDER_NAME);
	memcpy(a, &t, sizeof(t));
	memcpy((void *)a->evd_stream_merging_supported, dfi_merging, sizeof(dfi_merging));
}

DAT_RETURN dfi_ia_query(DAT_IA_HANDLE h, DAT_EVD_HANDLE *async_evd,
			DAT_IA_ATTR_MASK ia_mask, DAT_IA_ATTR *ia_attr,
			DAT_PROVIDER_ATTR_MASK pr_mask, DAT_PROVIDER_ATTR *pr_attr)
{
	struct dfi_ia *ia = ia_get(h);

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	/* Masks are ignored on purpose: callers read fields they did not ask
	 * for (dat-clients.md 3.1), so everything is always filled. */
	if ((ia_mask & ~DAT_IA_FIELD_ALL) != 0)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "IA attribute mask 0x%llx has unknown bits",
				  (unsigned long long)ia_mask);
	if (ia_mask && !ia_attr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "IA attributes requested (mask 0x%llx) into a NULL pointer",
				  (unsigned long long)ia_mask);
	if (pr_mask && !pr_attr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6),
				  "provider attributes requested (mask 0x%llx) into a NULL pointer",
				  (unsigned long long)pr_mask);
	if (async_evd)
		*async_evd = ia->async_evd;
	if (ia_attr)
		fill_ia_attr(ia, ia_attr);
	if (pr_attr)
		fill_provider_attr(ia, pr_attr);
	return DAT_SUCCESS;
}

/* Free everything the IA owns, dependents first. */
static void destroy_children(struct dfi_ia *ia)
{
	static const enum dfi_type order[] = {
		DFI_T_EP, DFI_T_CR, DFI_T_PSP, DFI_T_RSP, DFI_T_CSP, DFI_T_RMR, DFI_T_SRQ, DFI_T_LMR, DFI_T_PZ,
		DFI_T_EVD, DFI_T_CNO,
	};

	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		bool again = true;

		while (again) {
			struct dfi_obj *o, *victim = NULL;

			pthread_mutex_lock(&ia->lock);
			for (o = ia->objs.next; o != &ia->objs; o = o->next) {
				if (o->type != (uint32_t)order[k] || o == &ia->async_evd->hdr)
					continue;
				/* an LMR that others are registered on goes last */
				if (o->type == DFI_T_LMR && ((struct dfi_lmr *)o)->refs)
					continue;
				victim = o;
				break;
			}
			pthread_mutex_unlock(&ia->lock);
			again = victim != NULL;
			if (!victim)
				break;
			switch (order[k]) {
			case DFI_T_EP: dfi_ep_destroy((struct dfi_ep *)victim); break;
			case DFI_T_CR: dfi_cr_destroy((struct dfi_cr *)victim); break;
			case DFI_T_RMR: dfi_rmr_destroy((struct dfi_rmr *)victim); break;
			case DFI_T_SRQ: dfi_srq_destroy((struct dfi_srq *)victim); break;
			case DFI_T_PSP: case DFI_T_RSP: case DFI_T_CSP: dfi_sp_destroy((struct dfi_sp *)victim); break;
			case DFI_T_LMR: dfi_lmr_destroy((struct dfi_lmr *)victim); break;
			case DFI_T_PZ: dfi_pz_destroy((struct dfi_pz *)victim); break;
			case DFI_T_EVD: dfi_evd_destroy((struct dfi_evd *)victim); break;
			case DFI_T_CNO: dfi_cno_destroy((struct dfi_cno_obj *)victim); break;
			default: break;
			}
		}
	}
}

DAT_RETURN dfi_ia_close(DAT_IA_HANDLE h, DAT_CLOSE_FLAGS flags)
{
	struct dfi_ia *ia = ia_get(h);
	bool busy;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "close flags 0x%x are neither ABRUPT nor GRACEFUL", (unsigned)flags);
	if (dfi_upcall_current())
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE),
				  "IA '%s': dat_ia_close from inside an upcall would wait for "
				  "the upcall itself", ia->prov->info.ia_name);
	if (flags == DAT_CLOSE_GRACEFUL_FLAG) {
		pthread_mutex_lock(&ia->lock);
		busy = ia->objs.next != &ia->async_evd->hdr || ia->objs.prev != &ia->async_evd->hdr;
		pthread_mutex_unlock(&ia->lock);
		if (busy)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE),
					  "IA '%s': graceful close refused: objects still exist "
					  "(free them, or close ABRUPT)", ia->prov->info.ia_name);
	}
	destroy_children(ia);
	dfi_evq_unref(&ia->async_evd->q);
	dfi_evd_destroy(ia->async_evd);
	if (ia->disp_on)
		dfi_disp_stop(&ia->disp);	/* every EVD is gone: no upcall left */
	dfi_progress_stop(ia);
	dfi_zombies_free(ia);
	dfi_fabric_close(ia->fab);
	dfi_info(DFI_SS_IA, "IA '%s' closed (%s)", ia->prov->info.ia_name,
		 flags == DAT_CLOSE_ABRUPT_FLAG ? "abrupt" : "graceful");
	pthread_cond_destroy(&ia->batch_done);
	pthread_mutex_destroy(&ia->eq_lock);
	pthread_mutex_destroy(&ia->cm_lock);
	pthread_mutex_destroy(&ia->lock);
	pthread_mutex_destroy(&ia->rmr_lock);
	pthread_rwlock_destroy(&ia->ud_lock);
	dfi_obj_retire(ia);
	return DAT_SUCCESS;
}

/* dapl-ofi has no transparent failover: no other IA is HA-related to this
 * one, whatever its provider.  (OFA uDAPL answers DAT_MODEL_NOT_SUPPORTED;
 * a definite "no" lets a consumer go on without a special case.) */
DAT_RETURN dfi_ia_ha_related(DAT_IA_HANDLE h, const DAT_NAME_PTR provider, DAT_BOOLEAN *answer)
{
	if (!dfi_obj_get(h, DFI_T_IA))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!provider)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "provider name is NULL");
	if (!answer)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "answer pointer is NULL");
	*answer = DAT_FALSE;
	return DAT_SUCCESS;
}
