/*
 * Endpoints: creation with defaults and checks, query, status, reset, free.
 * An EP holds references on its PZ and its EVDs (and an SRQ EP on its SRQ),
 * so none of them is freed under it.  Connections are in conn.c, data
 * transfer in dto.c, what is special to SRQ EPs in srq.c.
 */
#include "dfi.h"
#include "fabric/fabric.h"
#include "util/param.h"

#include <arpa/inet.h>
#include <string.h>

/* NULL or zero fields mean "the provider's default" (dtest, dtestcm and
 * dapltest pass zeros and NULL); anything above the IA's limits is refused. */
static DAT_RETURN ep_attr_resolve(struct dfi_ia *ia, const DAT_EP_ATTR *in, DAT_EP_ATTR *a)
{
	const struct dfi_fabric_limits *l = dfi_fabric_limits(ia->fab);
	DAT_COUNT max_dtos = (DAT_COUNT)(l->tx_size < l->rx_size ? l->tx_size : l->rx_size);
	DAT_COUNT max_iov = (DAT_COUNT)(l->iov_limit > DFI_MAX_SGE ? DFI_MAX_SGE : l->iov_limit);
	DAT_COUNT max_riov = (DAT_COUNT)(l->rx_iov_limit > (size_t)max_iov ? (size_t)max_iov :
					 l->rx_iov_limit);
	DAT_SEG_LENGTH max_msg = l->max_msg_size > 0x80000000u ? 0x80000000u :
				 (DAT_SEG_LENGTH)l->max_msg_size;

	memset(a, 0, sizeof(*a));
	if (in)
		*a = *in;
	if (a->service_type == (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD && !l->ud)
		return DFI_REJECT(DFI_ERR(DAT_MODEL_NOT_SUPPORTED, 0),
				  "EP service type DAT_IB_SERVICE_TYPE_UD: served on reliable-"
				  "datagram IAs only (ia_params ep=rdm; this IA's libfabric %s has "
				  "connected endpoints: dapl-ofi(7))", l->prov_name);
	if (a->service_type != DAT_SERVICE_TYPE_RC &&
	    a->service_type != (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6),
				  "EP service type %d: only DAT_SERVICE_TYPE_RC and the IB "
				  "extension's DAT_IB_SERVICE_TYPE_UD", (int)a->service_type);
	if (!a->max_message_size)
		a->max_message_size = max_msg;
	/* max_rdma_size is not enforced per operation: dtest asks for 64 KiB
	 * and writes megabytes (dat-clients.md 3.2); report the IA's. */
	if (!a->max_rdma_size || a->max_rdma_size < max_msg)
		a->max_rdma_size = max_msg;
	if (!a->recv_completion_flags)
		a->recv_completion_flags = DAT_COMPLETION_EVD_THRESHOLD_FLAG;
	if (!a->max_recv_dtos)
		a->max_recv_dtos = DFI_EP_DEFAULT_DTOS;
	if (!a->max_request_dtos)
		a->max_request_dtos = DFI_EP_DEFAULT_DTOS;
	if (!a->max_recv_iov)
		a->max_recv_iov = DFI_EP_DEFAULT_IOV < max_riov ? DFI_EP_DEFAULT_IOV : max_riov;
	if (!a->max_request_iov)
		a->max_request_iov = DFI_EP_DEFAULT_IOV;
	if (!a->max_rdma_read_in)
		a->max_rdma_read_in = DFI_EP_DEFAULT_RDMA_RD;
	if (!a->max_rdma_read_out)
		a->max_rdma_read_out = DFI_EP_DEFAULT_RDMA_RD;
	if (!a->max_rdma_read_iov)
		a->max_rdma_read_iov = max_iov;
	if (!a->max_rdma_write_iov)
		a->max_rdma_write_iov = max_iov;
	if (a->max_recv_dtos < 0 || a->max_recv_dtos > max_dtos ||
	    a->max_request_dtos < 0 || a->max_request_dtos > max_dtos)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6),
				  "EP DTO queues %d/%d exceed max_dto_per_ep %d",
				  a->max_recv_dtos, a->max_request_dtos, max_dtos);
	if (a->max_recv_iov > max_riov && max_riov < max_iov)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6),
				  "EP max_recv_iov %d: libfabric %s takes %d segments a receive "
				  "(max_iov_segments_per_dto)", a->max_recv_iov, l->prov_name,
				  max_riov);
	if (a->max_recv_iov < 0 || a->max_recv_iov > max_iov || a->max_request_iov < 0 ||
	    a->max_request_iov > max_iov || a->max_rdma_read_iov < 0 ||
	    a->max_rdma_read_iov > max_iov || a->max_rdma_write_iov < 0 ||
	    a->max_rdma_write_iov > max_iov)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6),
				  "EP IOV limits %d/%d/%d/%d exceed max_iov_segments %d",
				  a->max_recv_iov, a->max_request_iov, a->max_rdma_read_iov,
				  a->max_rdma_write_iov, max_iov);
	if (a->max_rdma_read_in < 0 || a->max_rdma_read_in > DFI_MAX_RDMA_READ ||
	    a->max_rdma_read_out < 0 || a->max_rdma_read_out > DFI_MAX_RDMA_READ)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6),
				  "EP RDMA reads %d/%d exceed %d", a->max_rdma_read_in,
				  a->max_rdma_read_out, DFI_MAX_RDMA_READ);
	if (a->recv_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6),
				  "DAT_COMPLETION_UNSIGNALLED_FLAG is not allowed for receives");
	/* Not ours to keep: the consumer's arrays may go away. */
	a->ep_transport_specific_count = 0;
	a->ep_transport_specific = NULL;
	a->ep_provider_specific_count = 0;
	a->ep_provider_specific = NULL;
	return DAT_SUCCESS;
}

/* Consumer-controlled notification models restrict the wait threshold of the
 * EVDs they feed (DAT_INVALID_STATE for threshold > 1). */
static void ep_notify_models(struct dfi_ep *ep, int delta)
{
	if (ep->req_evd && (ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG))
		dfi_evq_notify_model(&ep->req_evd->q, DAT_EVD_STATE_CONFIG_NOTIFY, delta);
	if (ep->recv_evd && (ep->attr.recv_completion_flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG))
		dfi_evq_notify_model(&ep->recv_evd->q, DAT_EVD_STATE_CONFIG_SOLICITED, delta);
}

/* Count an EP in, against max_eps (dat_ia_query): false when the IA has
 * that many.  Each takes a socket when it connects; refusing here names
 * the resource (DAT_RESOURCE_TEP) before the descriptors run out at some
 * later connect or accept. */
static bool ep_count_in(struct dfi_ia *ia, DAT_COUNT *max)
{
	bool full;

	*max = dfi_max_eps();
	pthread_mutex_lock(&ia->lock);
	full = ia->n_ep >= *max;
	if (!full)
		ia->n_ep++;
	pthread_mutex_unlock(&ia->lock);
	return !full;
}

static void ep_count_out(struct dfi_ia *ia)
{
	pthread_mutex_lock(&ia->lock);
	ia->n_ep--;
	pthread_mutex_unlock(&ia->lock);
}

static void ep_refs(struct dfi_ep *ep, int delta)
{
	struct dfi_evd *evds[3] = { ep->recv_evd, ep->req_evd, ep->conn_evd };

	for (int i = 0; i < 3; i++) {
		if (!evds[i])
			continue;
		if (delta > 0)
			dfi_evq_ref(&evds[i]->q);
		else
			dfi_evq_unref(&evds[i]->q);
	}
	ep_notify_models(ep, delta);
}

/* dat_ep_create and dat_ep_create_with_srq (srqh not NULL); the arguments
 * after conn_evd are numbered one further with an SRQ. */
static DAT_RETURN ep_create(DAT_IA_HANDLE h, DAT_PZ_HANDLE pzh, DAT_EVD_HANDLE recvh,
			    DAT_EVD_HANDLE reqh, DAT_EVD_HANDLE connh, DAT_SRQ_HANDLE srqh,
			    const DAT_EP_ATTR *attr, DAT_EP_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_pz *pz = dfi_pz_of(ia, pzh);
	struct dfi_evd *recv = NULL, *req = NULL, *conn = NULL;
	struct dfi_srq *srq = NULL;
	DAT_COUNT max_eps;
	DAT_EP_ATTR a;
	struct dfi_ep *ep;
	DAT_RETURN rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!pz)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ),
				  "%p is not a PZ of this IA", (void *)pzh);
	if (recvh && !(recv = dfi_evd_of(ia, recvh, DAT_EVD_DTO_FLAG)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV),
				  "%p is not a DTO EVD of this IA", (void *)recvh);
	if (reqh && !(req = dfi_evd_of(ia, reqh, DAT_EVD_DTO_FLAG)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST),
				  "%p is not a DTO EVD of this IA", (void *)reqh);
	if (connh && !(conn = dfi_evd_of(ia, connh, DAT_EVD_CONNECTION_FLAG)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN),
				  "%p is not a connection EVD of this IA", (void *)connh);
	if (srqh) {
		srq = dfi_obj_get(srqh, DFI_T_SRQ);
		if (!srq || srq->hdr.ia != ia)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ),
					  "%p is not an SRQ of this IA", (void *)srqh);
		/* srq_ep_pz_difference_supported is FALSE */
		if (srq->pz != pz)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
					  "PZ %p differs from the PZ %p of SRQ %p", (void *)pz,
					  (void *)srq->pz, (void *)srq);
		/* "Cannot be NULL" for dat_ep_create_with_srq */
		if (!attr)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7),
					  "EP attributes are NULL (dat_ep_create_with_srq needs them)");
	}
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER,
					  srq ? DAT_INVALID_ARG8 : DAT_INVALID_ARG7),
				  "EP handle pointer is NULL");
	if (srq) {
		/* DAT_COMPLETION_UNSIGNALLED_FLAG is an SRQ EP's default: its
		 * receives complete signalled anyway (dat_srq_post_recv), so
		 * the flag is kept, not refused; max_recv_iov is ignored (the
		 * SRQ's applies), so it gets the default */
		DAT_EP_ATTR in = *attr;

		in.recv_completion_flags &= ~(DAT_COMPLETION_FLAGS)DAT_COMPLETION_UNSIGNALLED_FLAG;
		in.max_recv_iov = 0;
		rc = ep_attr_resolve(ia, &in, &a);
		if (attr->recv_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG)
			a.recv_completion_flags = attr->recv_completion_flags;
	} else {
		rc = ep_attr_resolve(ia, attr, &a);
	}
	if (rc != DAT_SUCCESS)
		return srq && DAT_GET_SUBTYPE(rc) == DAT_INVALID_ARG6 ?
		       DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7) : rc;
	if (srq && a.service_type == (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7),
				  "a UD EP takes no SRQ");
	if (srq) {
		/* an SRQ EP takes no receives of its own (max_recv_iov is
		 * ignored, max_recv_dtos only reported); zero means "default"
		 * for the soft high watermark as for every EP attribute */
		if (!a.srq_soft_hw)
			a.srq_soft_hw = DAT_HW_DEFAULT;
		if (a.srq_soft_hw < 0 && a.srq_soft_hw != DAT_WATERMARK_INFINITE)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7),
					  "EP srq_soft_hw %d is negative", a.srq_soft_hw);
	}

	if (!ep_count_in(ia, &max_eps))
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP),
				  "IA already has max_eps (%d) EPs (each connects with a socket: "
				  "the open-file limit, ulimit -n, less 64)", max_eps);
	ep = dfi_obj_new(ia, DFI_T_EP, sizeof(*ep));
	if (!ep) {
		ep_count_out(ia);
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	pthread_mutex_init(&ep->post_lock, NULL);
	ep->sendq = dfi_dto_pool_new(a.max_request_dtos, dfi_fabric_limits(ia->fab));
	ep->recvq = dfi_dto_pool_new(srq ? 0 : a.max_recv_dtos, dfi_fabric_limits(ia->fab));
	rc = DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (!ep->sendq || !ep->recvq)
		goto undo;
	ep->pz = pz;
	ep->recv_evd = recv;
	ep->req_evd = req;
	ep->conn_evd = conn;
	ep->attr = a;
	ep->ud = a.service_type == (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD;
	dfi_ep_state_locked(ep, DAT_EP_STATE_UNCONNECTED);
	if (dfi_param_int(DFI_P_INJECT))
		ep->inject_max = (uint32_t)dfi_fabric_limits(ia->fab)->inject_size;
	if (srq) {
		rc = dfi_srq_attach(srq, ep);
		if (rc != DAT_SUCCESS)
			goto undo;
	}
	pthread_mutex_lock(&ia->lock);
	pz->refs++;
	pthread_mutex_unlock(&ia->lock);
	ep_refs(ep, +1);
	dfi_ep_preopen(ep);
	*out = ep;
	return DAT_SUCCESS;

undo:
	dfi_dto_pool_release(ia, ep->sendq);
	dfi_dto_pool_release(ia, ep->recvq);
	pthread_mutex_destroy(&ep->post_lock);
	dfi_obj_retire(ep);
	ep_count_out(ia);
	return rc;
}

DAT_RETURN dfi_ep_create(DAT_IA_HANDLE h, DAT_PZ_HANDLE pzh, DAT_EVD_HANDLE recvh,
			 DAT_EVD_HANDLE reqh, DAT_EVD_HANDLE connh,
			 const DAT_EP_ATTR *attr, DAT_EP_HANDLE *out)
{
	return ep_create(h, pzh, recvh, reqh, connh, DAT_HANDLE_NULL, attr, out);
}

struct dfi_ep *dfi_ep_new_tentative(struct dfi_ia *ia)
{
	DAT_COUNT max_eps;
	DAT_EP_ATTR a;
	struct dfi_ep *ep;

	if (ep_attr_resolve(ia, NULL, &a) != DAT_SUCCESS)
		return NULL;
	if (!ep_count_in(ia, &max_eps)) {
		dfi_warn(DFI_SS_EP, "IA already has max_eps (%d) EPs: no provider-created EP",
			 max_eps);
		return NULL;
	}
	ep = dfi_obj_new(ia, DFI_T_EP, sizeof(*ep));
	if (!ep) {
		ep_count_out(ia);
		return NULL;
	}
	pthread_mutex_init(&ep->post_lock, NULL);
	ep->sendq = dfi_dto_pool_new(a.max_request_dtos, dfi_fabric_limits(ia->fab));
	ep->recvq = dfi_dto_pool_new(a.max_recv_dtos, dfi_fabric_limits(ia->fab));
	if (!ep->sendq || !ep->recvq) {
		dfi_dto_pool_release(ia, ep->sendq);
		dfi_dto_pool_release(ia, ep->recvq);
		pthread_mutex_destroy(&ep->post_lock);
		dfi_obj_retire(ep);
		ep_count_out(ia);
		return NULL;
	}
	ep->attr = a;
	dfi_ep_state_locked(ep, DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING);
	return ep;
}

DAT_RETURN dfi_ep_create_with_srq(DAT_IA_HANDLE h, DAT_PZ_HANDLE pzh, DAT_EVD_HANDLE recvh,
				  DAT_EVD_HANDLE reqh, DAT_EVD_HANDLE connh, DAT_SRQ_HANDLE srqh,
				  const DAT_EP_ATTR *attr, DAT_EP_HANDLE *out)
{
	if (srqh == DAT_HANDLE_NULL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ),
				  "SRQ handle is NULL");
	return ep_create(h, pzh, recvh, reqh, connh, srqh, attr, out);
}

#define EP_OR_REJECT(ep, h) do {						\
		(ep) = dfi_obj_get(h, DFI_T_EP);				\
		if (!(ep))							\
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP), \
					  "%p is not an EP handle", (void *)(h)); \
	} while (0)

DAT_RETURN dfi_ep_query(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM *p)
{
	struct dfi_ep *ep;

	EP_OR_REJECT(ep, h);
	if (mask & ~DAT_EP_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "EP param mask 0x%llx has unknown bits", (unsigned long long)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "EP param pointer is NULL");
	memset(p, 0, sizeof(*p));
	p->ia_handle = ep->hdr.ia;
	pthread_mutex_lock(&ep->hdr.ia->cm_lock);
	p->ep_state = ep->state;
	if (ep->state != DAT_EP_STATE_UNCONNECTED) {
		p->remote_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ep->remote;
		p->remote_port_qual = ntohs(ep->remote.sin_port);
	}
	pthread_mutex_unlock(&ep->hdr.ia->cm_lock);
	p->local_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ep->hdr.ia->addr;
	p->pz_handle = ep->pz;
	p->recv_evd_handle = ep->recv_evd;
	p->request_evd_handle = ep->req_evd;
	p->connect_evd_handle = ep->conn_evd;
	p->srq_handle = ep->srq ? (DAT_SRQ_HANDLE)ep->srq : DAT_HANDLE_NULL;
	p->ep_attr = ep->attr;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_ep_get_status(DAT_EP_HANDLE h, DAT_EP_STATE *state, DAT_BOOLEAN *recv_idle,
			     DAT_BOOLEAN *req_idle)
{
	struct dfi_ep *ep;

	EP_OR_REJECT(ep, h);
	/* NULL out-pointers are allowed: the caller wants only some fields. */
	if (state) {
		pthread_mutex_lock(&ep->hdr.ia->cm_lock);
		*state = ep->state;
		pthread_mutex_unlock(&ep->hdr.ia->cm_lock);
	}
	if (recv_idle && ep->srq) {
		*recv_idle = dfi_srq_ep_idle(ep) ? DAT_TRUE : DAT_FALSE;
	} else if (recv_idle) {
		*recv_idle = dfi_dto_pool_idle(ep->recvq) ? DAT_TRUE : DAT_FALSE;
	}
	if (req_idle) {
		*req_idle = dfi_dto_pool_idle(ep->sendq) ? DAT_TRUE : DAT_FALSE;
	}
	return DAT_SUCCESS;
}

DAT_RETURN dfi_ep_reset(DAT_EP_HANDLE h)
{
	struct dfi_ep *ep;
	DAT_EP_STATE st;

	EP_OR_REJECT(ep, h);
	pthread_mutex_lock(&ep->hdr.ia->cm_lock);
	st = ep->state;
	pthread_mutex_unlock(&ep->hdr.ia->cm_lock);
	if (st != DAT_EP_STATE_UNCONNECTED && st != DAT_EP_STATE_DISCONNECTED)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED),
				  "EP %p: reset needs an unconnected or disconnected EP", (void *)ep);
	/* Back to a fresh EP: the old connection's endpoint goes (its posted
	 * receives were flushed by the disconnect), early receives are
	 * flushed to the receive EVD, and a new endpoint is opened ahead as
	 * for a new EP, so the next connect only connects (dapltest resets
	 * and reconnects its EPs). */
	dfi_ep_close_fep(ep);
	dfi_ep_flush_pending(ep);
	pthread_mutex_lock(&ep->hdr.ia->cm_lock);
	dfi_ep_set_state(ep, DAT_EP_STATE_UNCONNECTED);
	pthread_mutex_unlock(&ep->hdr.ia->cm_lock);
	dfi_ep_preopen(ep);
	return DAT_SUCCESS;
}

void dfi_ep_destroy(struct dfi_ep *ep)
{
	struct dfi_ia *ia = ep->hdr.ia;
	struct dfi_srq *srq = ep->srq;
	bool sbusy, rbusy, connected;

	pthread_mutex_lock(&ia->cm_lock);
	connected = ep->state == DAT_EP_STATE_CONNECTED;
	pthread_mutex_unlock(&ia->cm_lock);
	if (connected)
		dfi_ep_cut_reads(ep);	/* before the close's flush (dto.c) */
	dfi_ep_close_fep(ep);
	dfi_ep_flush_pending(ep);
	pthread_mutex_lock(&ia->cm_lock);
	if (ep->rsp)
		ep->rsp->ep = NULL;
	if (ep->cr)
		ep->cr->ep = NULL;	/* its CR stays, now without an EP */
	ep->cr = NULL;
	pthread_mutex_unlock(&ia->cm_lock);
	/* its private CQ: the last completions, then the SRQ's counts */
	if (ep->srq)
		dfi_srq_ep_detach(ep);
	/* Completions of this EP still in a CQ are flushed through the EVDs
	 * (their events name a freed EP) as far as the rings have room, the
	 * rest is dropped when read (dfi_ep_dto_orphan); a pool with
	 * completions due stays with the IA until it closes.  A pool with nothing posted left
	 * nothing there: no read (on libfabric 1.17 tcp a read of an empty
	 * CQ walks every EP bound to it, so freeing N idle EPs would cost
	 * N walks of N). */
	sbusy = dfi_dto_pool_busy(ep->sendq);
	rbusy = dfi_dto_pool_busy(ep->recvq);
	if (ep->req_evd && (sbusy || (rbusy && ep->recv_evd == ep->req_evd)))
		dfi_evq_source_flush(&ep->req_evd->q);
	if (ep->recv_evd && ep->recv_evd != ep->req_evd && rbusy)
		dfi_evq_source_flush(&ep->recv_evd->q);
	if (sbusy || rbusy) {
		int nr = dfi_dto_pool_posted(ep->recvq), ns = dfi_dto_pool_posted(ep->sendq);

		if (nr || ns)
			dfi_info(DFI_SS_EP, "EP %p freed with %d receive(s) and %d request(s) not "
				 "completed yet: their completions are dropped (DAT allows it)",
				 (void *)ep, nr, ns);
	}
	dfi_ep_dto_orphan(ep);
	dfi_dto_pool_release(ia, ep->sendq);
	dfi_dto_pool_release(ia, ep->recvq);
	ep_refs(ep, -1);
	pthread_mutex_lock(&ia->lock);
	if (ep->pz)		/* a provider-created EP may have none */
		ep->pz->refs--;
	pthread_mutex_unlock(&ia->lock);
	pthread_mutex_destroy(&ep->post_lock);
	/* Under cm_lock: an event of its closed endpoint still in the EQ
	 * leads translate (conn.c, under cm_lock) here, and it must find the
	 * EP whole or retired, never being poisoned (fuzz_api: translate read
	 * a half-poisoned EP and followed its 0xdb endpoint pointer). */
	pthread_mutex_lock(&ia->cm_lock);
	dfi_obj_retire(ep);
	pthread_mutex_unlock(&ia->cm_lock);
	ep_count_out(ia);
	if (srq)
		dfi_srq_release(srq);
}

DAT_RETURN dfi_ep_free(DAT_EP_HANDLE h)
{
	struct dfi_ep *ep;

	EP_OR_REJECT(ep, h);
	dfi_ep_destroy(ep);
	return DAT_SUCCESS;
}

/* ------------------------------------------------------------ dat_ep_modify */

/* What dat_ep_modify may change: the PZ, the three EVDs and the EP
 * attributes, except the consumer-owned arrays (never kept, see
 * ep_attr_resolve). */
#define EP_MODIFIABLE (DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_RECV_EVD_HANDLE |		\
		       DAT_EP_FIELD_REQUEST_EVD_HANDLE | DAT_EP_FIELD_CONNECT_EVD_HANDLE |	\
		       (DAT_EP_FIELD_EP_ATTR_ALL &					\
			~(DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR |			\
			  DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR |		\
			  DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR |			\
			  DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR)))

/* The masked attribute fields of `from` over `to`. */
static void ep_attr_merge(DAT_EP_ATTR *to, const DAT_EP_ATTR *from, DAT_EP_PARAM_MASK m)
{
#define TAKE(bit, field) do { if (m & (bit)) to->field = from->field; } while (0)
	TAKE(DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE, service_type);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE, max_message_size);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE, max_rdma_size);
	TAKE(DAT_EP_FIELD_EP_ATTR_QOS, qos);
	TAKE(DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, recv_completion_flags);
	TAKE(DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS, request_completion_flags);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, max_recv_dtos);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, max_request_dtos);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV, max_recv_iov);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV, max_request_iov);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN, max_rdma_read_in);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT, max_rdma_read_out);
	TAKE(DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW, srq_soft_hw);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV, max_rdma_read_iov);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV, max_rdma_write_iov);
#undef TAKE
}

/* dat_ep_modify: an EP that is UNCONNECTED, with nothing posted (early
 * receives included) and nothing to reap, takes a new PZ, EVDs and
 * attributes.  Everything is checked before anything changes; an EP of an
 * SRQ keeps what it was created with. */
DAT_RETURN dfi_ep_modify(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM *p)
{
	struct dfi_ep *ep;
	struct dfi_ia *ia;
	struct dfi_pz *pz;
	struct dfi_evd *recv, *req, *conn;
	struct dfi_dto_pool *sendq = NULL, *recvq = NULL;
	DAT_EP_ATTR in, a;
	DAT_RETURN rc;
	bool busy;

	EP_OR_REJECT(ep, h);
	ia = ep->hdr.ia;
	if (!mask || (mask & ~(DAT_EP_PARAM_MASK)EP_MODIFIABLE))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "EP %p: mask 0x%llx: only the PZ, the EVDs and the EP attributes "
				  "(not the consumer's attribute arrays) can be modified",
				  (void *)ep, (unsigned long long)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "EP param pointer is NULL");
	if (ep->srq)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, 0),
				  "EP %p takes its receives from SRQ %p: it keeps what it was "
				  "created with", (void *)ep, (void *)ep->srq);
	/* a provider-created EP has no PZ until it is given one here */
	pz = mask & DAT_EP_FIELD_PZ_HANDLE ? dfi_pz_of(ia, p->pz_handle) : ep->pz;
	if (!pz && (mask & DAT_EP_FIELD_PZ_HANDLE))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ),
				  "%p is not a PZ of this IA", (void *)p->pz_handle);
	recv = ep->recv_evd;
	req = ep->req_evd;
	conn = ep->conn_evd;
	if ((mask & DAT_EP_FIELD_RECV_EVD_HANDLE) &&
	    !(recv = p->recv_evd_handle ? dfi_evd_of(ia, p->recv_evd_handle, DAT_EVD_DTO_FLAG) : NULL) &&
	    p->recv_evd_handle)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV),
				  "%p is not a DTO EVD of this IA", (void *)p->recv_evd_handle);
	if ((mask & DAT_EP_FIELD_REQUEST_EVD_HANDLE) &&
	    !(req = p->request_evd_handle ? dfi_evd_of(ia, p->request_evd_handle, DAT_EVD_DTO_FLAG) : NULL) &&
	    p->request_evd_handle)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST),
				  "%p is not a DTO EVD of this IA", (void *)p->request_evd_handle);
	if ((mask & DAT_EP_FIELD_CONNECT_EVD_HANDLE) &&
	    !(conn = p->connect_evd_handle ?
		     dfi_evd_of(ia, p->connect_evd_handle, DAT_EVD_CONNECTION_FLAG) : NULL) &&
	    p->connect_evd_handle)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN),
				  "%p is not a connection EVD of this IA",
				  (void *)p->connect_evd_handle);
	in = ep->attr;
	ep_attr_merge(&in, &p->ep_attr, mask);
	rc = ep_attr_resolve(ia, &in, &a);
	if (rc != DAT_SUCCESS)
		return DAT_GET_SUBTYPE(rc) == DAT_INVALID_ARG6 ?
		       DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3) : rc;
	if (a.max_request_dtos != ep->attr.max_request_dtos &&
	    !(sendq = dfi_dto_pool_new(a.max_request_dtos, dfi_fabric_limits(ia->fab))))
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (a.max_recv_dtos != ep->attr.max_recv_dtos &&
	    !(recvq = dfi_dto_pool_new(a.max_recv_dtos, dfi_fabric_limits(ia->fab)))) {
		dfi_dto_pool_release(ia, sendq);
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}

	pthread_mutex_lock(&ia->cm_lock);
	/* an endpoint opened ahead is bound to the old EVDs' CQs and sized
	 * by the old attributes: it goes (the connect opens a new one) */
	dfi_ep_drop_spare(ep);
	pthread_mutex_lock(&ep->post_lock);
	/* a provider-created EP is modified before its accept, in its own
	 * state */
	busy = (ep->state != DAT_EP_STATE_UNCONNECTED &&
		ep->state != DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING) || ep->fep || ep->n_early ||
	       !dfi_dto_pool_idle(ep->sendq) || !dfi_dto_pool_idle(ep->recvq);
	if (!busy) {
		ep_refs(ep, -1);	/* the old EVDs and their notification models */
		ep->recv_evd = recv;
		ep->req_evd = req;
		ep->conn_evd = conn;
		ep->attr = a;
		ep->ud = a.service_type == (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD;
		ep_refs(ep, +1);
		if (sendq) {
			struct dfi_dto_pool *old = ep->sendq;

			ep->sendq = sendq;
			sendq = old;	/* released below */
		}
		if (recvq) {
			struct dfi_dto_pool *old = ep->recvq;

			ep->recvq = recvq;
			recvq = old;
		}
	}
	pthread_mutex_unlock(&ep->post_lock);
	if (!busy) {
		if (pz != ep->pz) {
			pthread_mutex_lock(&ia->lock);	/* after cm_lock, as elsewhere */
			if (ep->pz)
				ep->pz->refs--;
			pz->refs++;
			ep->pz = pz;
			pthread_mutex_unlock(&ia->lock);
		}
	}
	pthread_mutex_unlock(&ia->cm_lock);
	dfi_dto_pool_release(ia, sendq);	/* the unused new ones, or the idle old ones */
	dfi_dto_pool_release(ia, recvq);
	if (busy)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				  "EP %p can be modified only unconnected, with no DTO posted or "
				  "left to reap (dat_ep_reset and dequeue first)", (void *)ep);
	return DAT_SUCCESS;
}
