/*
 * Registry integration: dat_provider_init / dat_provider_fini, one provider
 * table per IA name (dat-clients.md 1.3-1.5); ia_params are parsed by
 * src/util/ia_params.c, which daplofi-info shares.
 */
#include "dfi.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t prov_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dfi_provider *prov_list;

/* dat_extension_op: the IB extension's ops (<dat2/dat_ib_extensions.h>,
 * ib.c: 0..0x1d, 0x1000, 0x2000) and the DAT_OFI_* ops of
 * <dat2/dat_ofi_extensions.h> (0x4f46xxxx), both whatever the IA reports
 * as extension_supported (ia_params ext=). */
static DAT_RETURN dfi_extendedop(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args)
{
	switch (op) {
	case DAT_OFI_EVD_KCREATE_OP:
	case DAT_OFI_EVD_MODIFY_UPCALL_OP:
	case DAT_OFI_EVD_QUERY_UPCALL_OP: {
		/* TEARDOWN and free wait for upcalls: no cancellation (cancel.c) */
		DAT_RETURN rc;
		int cs;

		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
		rc = dfi_evd_extension(h, op, args);
		pthread_setcancelstate(cs, NULL);
		return rc;
	}
	default:
		if (dfi_ib_op(op))
			return dfi_ib_extension(h, op, args);
		dfi_reject(DFI_SS_API, "extension op 0x%x on handle %p: neither an IB "
			   "extension op nor a dapl-ofi one", (unsigned)op, (void *)h);
		return DFI_ERR(DAT_NOT_IMPLEMENTED, 0);
	}
}

static void fill_table(struct dfi_provider *p)
{
	DAT_PROVIDER *t = &p->table;

	t->device_name = p->info.ia_name;
	t->extension = p;
	t->ia_open_func = dfi_ia_open;
	t->ia_query_func = dfi_ia_query;
	t->ia_close_func = dfi_ia_close;
	t->ia_ha_related_func = dfi_ia_ha_related;
	t->set_consumer_context_func = dfi_set_consumer_context;
	t->get_consumer_context_func = dfi_get_consumer_context;
	t->get_handle_type_func = dfi_get_handle_type;
	t->cno_create_func = dfi_cno_create;
	t->cno_modify_agent_func = dfi_cno_modify_agent;
	t->cno_query_func = dfi_cno_query;
	t->cno_free_func = dfi_cno_free;
	t->cno_wait_func = dfi_cno_wait_api;
	t->cno_fd_create_func = dfi_cno_fd_create;
	t->cno_trigger_func = dfi_cno_trigger_api;
	t->evd_create_func = dfi_evd_create;
	t->evd_query_func = dfi_evd_query;
	t->evd_modify_cno_func = dfi_evd_modify_cno;
	t->evd_enable_func = dfi_evd_enable;
	t->evd_disable_func = dfi_evd_disable;
	t->evd_wait_func = dfi_evd_wait;
	t->evd_resize_func = dfi_evd_resize;
	t->evd_post_se_func = dfi_evd_post_se;
	t->evd_dequeue_func = dfi_evd_dequeue;
	t->evd_free_func = dfi_evd_free;
	t->evd_set_unwaitable_func = dfi_evd_set_unwaitable;
	t->evd_clear_unwaitable_func = dfi_evd_clear_unwaitable;
	t->pz_create_func = dfi_pz_create;
	t->pz_query_func = dfi_pz_query;
	t->pz_free_func = dfi_pz_free;
	t->lmr_create_func = dfi_lmr_create;
	t->lmr_query_func = dfi_lmr_query;
	t->lmr_free_func = dfi_lmr_free;
	t->lmr_sync_rdma_read_func = dfi_lmr_sync_rdma_read;
	t->lmr_sync_rdma_write_func = dfi_lmr_sync_rdma_write;
	t->ep_create_func = dfi_ep_create;
	t->ep_query_func = dfi_ep_query;
	t->ep_modify_func = dfi_ep_modify;
	t->ep_get_status_func = dfi_ep_get_status;
	t->ep_reset_func = dfi_ep_reset;
	t->ep_free_func = dfi_ep_free;
	t->ep_connect_func = dfi_ep_connect;
	t->ep_disconnect_func = dfi_ep_disconnect;
	t->ep_post_send_func = dfi_ep_post_send;
	t->ep_post_send_with_invalidate_func = dfi_ep_post_send_with_invalidate;
	t->ep_post_recv_func = dfi_ep_post_recv;
	t->ep_post_rdma_write_func = dfi_ep_post_rdma_write;
	t->ep_post_rdma_read_func = dfi_ep_post_rdma_read;
	t->ep_post_rdma_read_to_rmr_func = dfi_ep_post_rdma_read_to_rmr;
	t->psp_create_func = dfi_psp_create;
	t->cr_handoff_func = dfi_cr_handoff;
	t->ep_dup_connect_func = dfi_ep_dup_connect;
	t->ep_common_connect_func = dfi_ep_common_connect;
	t->csp_create_func = dfi_csp_create;
	t->csp_query_func = dfi_csp_query;
	t->csp_free_func = dfi_csp_free;
	t->psp_create_any_func = dfi_psp_create_any;
	t->psp_query_func = dfi_psp_query;
	t->psp_free_func = dfi_psp_free;
	t->rsp_create_func = dfi_rsp_create;
	t->rsp_query_func = dfi_rsp_query;
	t->rsp_free_func = dfi_rsp_free;
	t->cr_query_func = dfi_cr_query;
	t->cr_accept_func = dfi_cr_accept;
	t->cr_reject_func = dfi_cr_reject;
	t->rmr_create_func = dfi_rmr_create;
	t->rmr_create_for_ep_func = dfi_rmr_create_for_ep;
	t->rmr_query_func = dfi_rmr_query;
	t->rmr_bind_func = dfi_rmr_bind;
	t->rmr_free_func = dfi_rmr_free;
	t->srq_create_func = dfi_srq_create;
	t->srq_free_func = dfi_srq_free;
	t->srq_post_recv_func = dfi_srq_post_recv;
	t->srq_query_func = dfi_srq_query;
	t->srq_resize_func = dfi_srq_resize;
	t->srq_set_lw_func = dfi_srq_set_lw;
	t->ep_create_with_srq_func = dfi_ep_create_with_srq;
	t->ep_recv_query_func = dfi_ep_recv_query;
	t->ep_set_watermark_func = dfi_ep_set_watermark;
	t->handle_extendedop_func = dfi_extendedop;
	dfi_nocancel_table(t);	/* the calls that hold cancellation off */
}

__attribute__((visibility("default")))
void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *ia_params);
__attribute__((visibility("default")))
void dat_provider_fini(const DAT_PROVIDER_INFO *info);
__attribute__((visibility("default")))
void dapl_extensions(void);

void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *ia_params)
{
	struct dfi_provider *p;
	DAT_RETURN rc;

	dfi_log_init();
	if (!info)
		return;
	p = calloc(1, sizeof(*p));
	if (!p) {
		dfi_err(DFI_SS_IA, "IA '%s': out of memory", info->ia_name);
		return;
	}
	p->info = *info;
	p->info.ia_name[DAT_NAME_MAX_LENGTH - 1] = '\0';
	snprintf(p->ia_params, sizeof(p->ia_params), "%s", ia_params ? ia_params : "");
	/* A malformed entry is still registered, so that dat_ia_open reaches
	 * us and fails with a DAT error and a line that says why. */
	dfi_ia_params_parse(ia_params, &p->cfg);
	snprintf(p->mtu_str, sizeof(p->mtu_str), "%u", p->cfg.mtu);
	fill_table(p);

	rc = dat_registry_add_provider(&p->table, &p->info);
	if (rc != DAT_SUCCESS) {
		dfi_err(DFI_SS_IA, "IA '%s': dat_registry_add_provider failed: 0x%x",
			p->info.ia_name, (unsigned)rc);
		free(p);
		return;
	}
	pthread_mutex_lock(&prov_lock);
	p->next = prov_list;
	prov_list = p;
	pthread_mutex_unlock(&prov_lock);
	dfi_info(DFI_SS_IA, "registered IA '%s' (\"%s\")", p->info.ia_name, p->ia_params);
}

void dat_provider_fini(const DAT_PROVIDER_INFO *info)
{
	struct dfi_provider **pp, *p = NULL;
	bool last;

	if (!info)
		return;
	pthread_mutex_lock(&prov_lock);
	for (pp = &prov_list; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->info.ia_name, info->ia_name) == 0) {
			p = *pp;
			*pp = p->next;
			break;
		}
	}
	last = prov_list == NULL;
	pthread_mutex_unlock(&prov_lock);
	if (!p)
		return;
	dat_registry_remove_provider(&p->table, &p->info);
	dfi_info(DFI_SS_IA, "unregistered IA '%s'", p->info.ia_name);
	free(p);
	if (last)
		dfi_quarantine_flush();
}

/* Looked up by libdat2 when it loads a provider (its presence only spares
 * a debug line; the extension ops come through handle_extendedop_func). */
void dapl_extensions(void)
{
}

struct dfi_provider *dfi_provider_find(const char *ia_name)
{
	struct dfi_provider *p;

	pthread_mutex_lock(&prov_lock);
	for (p = prov_list; p; p = p->next)
		if (strcmp(p->info.ia_name, ia_name) == 0)
			break;
	pthread_mutex_unlock(&prov_lock);
	return p;
}
