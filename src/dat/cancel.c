/*
 * Thread cancellation (dapl-ofi(7), CANCELLATION).  Calls that set up, tear
 * down or connect run with cancellation held off: they wait for provider
 * threads (the progress thread, upcall dispatchers, a departing waiter) in
 * pthread_cond_wait and pthread_join, and they call libfabric, whose own
 * cancellation points (open, connect, sendmsg, epoll_wait...) lie under its
 * locks and ours.  None of them waits for the network or for the consumer,
 * so holding cancellation off costs a consumer nothing but a bounded delay.
 * dat_evd_wait and dat_cno_wait hold it off themselves, all but their sleep
 * (event core).  The data path (dequeue, posts) is left alone: a pair of
 * pthread_setcancelstate calls, two atomic operations, would cost about as
 * much as a mutex lock and unlock on every call.
 */
#include "dfi.h"

#define NOCANCEL(fn, params, args)						\
	static DAT_RETURN nc_##fn params					\
	{									\
		DAT_RETURN rc;							\
		int cs;								\
										\
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);		\
		rc = dfi_##fn args;						\
		pthread_setcancelstate(cs, NULL);				\
		return rc;							\
	}

NOCANCEL(ia_open, (const DAT_NAME_PTR name, DAT_COUNT qlen, DAT_EVD_HANDLE *async,
		   DAT_IA_HANDLE *ia), (name, qlen, async, ia))
NOCANCEL(ia_close, (DAT_IA_HANDLE ia, DAT_CLOSE_FLAGS flags), (ia, flags))
NOCANCEL(evd_create, (DAT_IA_HANDLE ia, DAT_COUNT qlen, DAT_CNO_HANDLE cno, DAT_EVD_FLAGS flags,
		      DAT_EVD_HANDLE *evd), (ia, qlen, cno, flags, evd))
NOCANCEL(evd_modify_cno, (DAT_EVD_HANDLE evd, DAT_CNO_HANDLE cno), (evd, cno))
NOCANCEL(evd_enable, (DAT_EVD_HANDLE evd), (evd))
NOCANCEL(evd_set_unwaitable, (DAT_EVD_HANDLE evd), (evd))
NOCANCEL(evd_post_se, (DAT_EVD_HANDLE evd, const DAT_EVENT *ev), (evd, ev))
NOCANCEL(evd_free, (DAT_EVD_HANDLE evd), (evd))
NOCANCEL(cno_free, (DAT_CNO_HANDLE cno), (cno))
NOCANCEL(ep_create, (DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE r, DAT_EVD_HANDLE s,
		     DAT_EVD_HANDLE c, const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep),
	 (ia, pz, r, s, c, attr, ep))
NOCANCEL(ep_create_with_srq, (DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE r,
			      DAT_EVD_HANDLE s, DAT_EVD_HANDLE c, DAT_SRQ_HANDLE srq,
			      const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep),
	 (ia, pz, r, s, c, srq, attr, ep))
NOCANCEL(ep_modify, (DAT_EP_HANDLE ep, DAT_EP_PARAM_MASK m, const DAT_EP_PARAM *p), (ep, m, p))
NOCANCEL(ep_reset, (DAT_EP_HANDLE ep), (ep))
NOCANCEL(ep_free, (DAT_EP_HANDLE ep), (ep))
NOCANCEL(ep_connect, (DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL q, DAT_TIMEOUT t,
		      DAT_COUNT n, const DAT_PVOID pd, DAT_QOS qos, DAT_CONNECT_FLAGS f),
	 (ep, addr, q, t, n, pd, qos, f))
NOCANCEL(ep_disconnect, (DAT_EP_HANDLE ep, DAT_CLOSE_FLAGS f), (ep, f))
NOCANCEL(psp_create, (DAT_IA_HANDLE ia, DAT_CONN_QUAL q, DAT_EVD_HANDLE evd, DAT_PSP_FLAGS f,
		      DAT_PSP_HANDLE *psp), (ia, q, evd, f, psp))
NOCANCEL(psp_create_any, (DAT_IA_HANDLE ia, DAT_CONN_QUAL *q, DAT_EVD_HANDLE evd,
			  DAT_PSP_FLAGS f, DAT_PSP_HANDLE *psp), (ia, q, evd, f, psp))
NOCANCEL(psp_free, (DAT_PSP_HANDLE psp), (psp))
NOCANCEL(rsp_create, (DAT_IA_HANDLE ia, DAT_CONN_QUAL q, DAT_EP_HANDLE ep, DAT_EVD_HANDLE evd,
		      DAT_RSP_HANDLE *rsp), (ia, q, ep, evd, rsp))
NOCANCEL(rsp_free, (DAT_RSP_HANDLE rsp), (rsp))
NOCANCEL(cr_accept, (DAT_CR_HANDLE cr, DAT_EP_HANDLE ep, DAT_COUNT n, const DAT_PVOID pd),
	 (cr, ep, n, pd))
NOCANCEL(cr_reject, (DAT_CR_HANDLE cr, DAT_COUNT n, const DAT_PVOID pd), (cr, n, pd))
NOCANCEL(cr_handoff, (DAT_CR_HANDLE cr, DAT_CONN_QUAL q), (cr, q))
NOCANCEL(ep_dup_connect, (DAT_EP_HANDLE ep, DAT_EP_HANDLE dup, DAT_TIMEOUT t, DAT_COUNT n,
			  const DAT_PVOID pd, DAT_QOS qos), (ep, dup, t, n, pd, qos))
NOCANCEL(ep_common_connect, (DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR addr, DAT_TIMEOUT t,
			     DAT_COUNT n, const DAT_PVOID pd), (ep, addr, t, n, pd))
NOCANCEL(csp_create, (DAT_IA_HANDLE ia, DAT_COMM *comm, DAT_IA_ADDRESS_PTR addr,
		      DAT_EVD_HANDLE evd, DAT_CSP_HANDLE *csp), (ia, comm, addr, evd, csp))
NOCANCEL(csp_free, (DAT_CSP_HANDLE csp), (csp))
NOCANCEL(srq_create, (DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_SRQ_ATTR *a, DAT_SRQ_HANDLE *srq),
	 (ia, pz, a, srq))
NOCANCEL(srq_free, (DAT_SRQ_HANDLE srq), (srq))
NOCANCEL(srq_resize, (DAT_SRQ_HANDLE srq, DAT_COUNT n), (srq, n))
NOCANCEL(srq_set_lw, (DAT_SRQ_HANDLE srq, DAT_COUNT n), (srq, n))
NOCANCEL(ep_set_watermark, (DAT_EP_HANDLE ep, DAT_COUNT soft, DAT_COUNT hard), (ep, soft, hard))
NOCANCEL(cno_trigger_api, (DAT_CNO_HANDLE cno, DAT_EVD_HANDLE *evd), (cno, evd))
NOCANCEL(lmr_create, (DAT_IA_HANDLE ia, DAT_MEM_TYPE type, DAT_REGION_DESCRIPTION desc,
		      DAT_VLEN len, DAT_PZ_HANDLE pz, DAT_MEM_PRIV_FLAGS priv, DAT_VA_TYPE va,
		      DAT_LMR_HANDLE *lmr, DAT_LMR_CONTEXT *lctx, DAT_RMR_CONTEXT *rctx,
		      DAT_VLEN *reg_len, DAT_VADDR *reg_addr),
	 (ia, type, desc, len, pz, priv, va, lmr, lctx, rctx, reg_len, reg_addr))
NOCANCEL(lmr_free, (DAT_LMR_HANDLE lmr), (lmr))
NOCANCEL(rmr_free, (DAT_RMR_HANDLE rmr), (rmr))

void dfi_nocancel_table(DAT_PROVIDER *t)
{
	t->ia_open_func = nc_ia_open;
	t->ia_close_func = nc_ia_close;
	t->evd_create_func = nc_evd_create;
	t->evd_modify_cno_func = nc_evd_modify_cno;
	t->evd_enable_func = nc_evd_enable;
	t->evd_set_unwaitable_func = nc_evd_set_unwaitable;
	t->evd_post_se_func = nc_evd_post_se;
	t->evd_free_func = nc_evd_free;
	t->cno_free_func = nc_cno_free;
	t->ep_create_func = nc_ep_create;
	t->ep_create_with_srq_func = nc_ep_create_with_srq;
	t->ep_modify_func = nc_ep_modify;
	t->ep_reset_func = nc_ep_reset;
	t->ep_free_func = nc_ep_free;
	t->ep_connect_func = nc_ep_connect;
	t->ep_disconnect_func = nc_ep_disconnect;
	t->psp_create_func = nc_psp_create;
	t->psp_create_any_func = nc_psp_create_any;
	t->psp_free_func = nc_psp_free;
	t->rsp_create_func = nc_rsp_create;
	t->rsp_free_func = nc_rsp_free;
	t->cr_accept_func = nc_cr_accept;
	t->cr_reject_func = nc_cr_reject;
	t->cr_handoff_func = nc_cr_handoff;
	t->ep_dup_connect_func = nc_ep_dup_connect;
	t->ep_common_connect_func = nc_ep_common_connect;
	t->csp_create_func = nc_csp_create;
	t->csp_free_func = nc_csp_free;
	t->srq_create_func = nc_srq_create;
	t->srq_free_func = nc_srq_free;
	t->srq_resize_func = nc_srq_resize;
	t->srq_set_lw_func = nc_srq_set_lw;
	t->ep_set_watermark_func = nc_ep_set_watermark;
	t->cno_trigger_func = nc_cno_trigger_api;
	t->lmr_create_func = nc_lmr_create;
	t->lmr_free_func = nc_lmr_free;
	t->rmr_free_func = nc_rmr_free;
}
