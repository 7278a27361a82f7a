/*
 * The IB extension's unreliable-datagram endpoints (DAT_IB_SERVICE_TYPE_UD;
 * docs/ib-extension.md), where the fabric serves them (the RDM backend).
 *
 * A UD EP connects and accepts as many times as it likes, each time with
 * another peer's UD EP: that is an address resolution, reported on the
 * connection EVD as DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED with the peer's
 * address handle (DAT_IB_UD_REMOTE_AH on the connecting side,
 * DAT_IB_UD_PASSIVE_REMOTE_AH on the accepting one), and nothing stays
 * connected.  The EP is CONNECTED from its first resolution on, as OFA
 * uDAPL's, and sends with dat_ib_post_send_ud to any handle of its IA.
 *
 * A resolution (struct dfi_ud_cm) is the event's DAT_CONTEXT, and an
 * address handle (struct dfi_ud_ah) the DAT_IB_ADDR_HANDLE's ah: both are
 * objects of the IA, checked when the consumer hands them back, and freed
 * by dat_ib_ud_cm_free and dat_ib_ud_ah_free or with the EP that got them.
 */
#include "dfi.h"

#include <errno.h>
#include <string.h>

/* A handle the consumer hands back, if it is one of ia's (ud_lock held). */
static struct dfi_ud_ah *ah_of(struct dfi_ia *ia, const DAT_IB_ADDR_HANDLE *h)
{
	struct dfi_ud_ah *a = h ? dfi_obj_get(h->ah, DFI_T_AH) : NULL;

	return a && a->hdr.ia == ia ? a : NULL;
}

DAT_RETURN dfi_ud_start(struct dfi_ep *ep, void *req, const struct sockaddr_in *peer,
			const void *pdata, size_t plen, const void *req_pdata, size_t req_plen,
			uint64_t deadline)
{
	struct dfi_ia *ia = ep->hdr.ia;
	struct dfi_ud_cm *cm;
	int rc;

	if (ep->state != DAT_EP_STATE_UNCONNECTED && ep->state != DAT_EP_STATE_CONNECTED)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				  "UD EP %p cannot resolve addresses in state %d", (void *)ep,
				  (int)ep->state);
	if (!ep->conn_evd)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				  "UD EP %p has no connection EVD for the resolution's event",
				  (void *)ep);
	rc = dfi_ep_open_ud(ep);
	if (rc)
		return dfi_resource_err(rc, DAT_RESOURCE_TEP, "a UD EP's endpoint");
	cm = dfi_obj_new(ia, DFI_T_UD_CM, sizeof(*cm));
	if (!cm)
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	cm->ep = ep;
	cm->peer = *peer;
	cm->deadline = deadline;
	cm->passive = req != NULL;
	if (req_plen) {		/* the passive event carries the request's */
		memcpy(cm->pdata, req_pdata, req_plen);
		cm->plen = (DAT_COUNT)req_plen;
	}
	rc = req ? dfi_ud_accept(ep->fep, req, pdata, plen, cm, &cm->hs) :
		   dfi_ud_connect(ep->fep, peer, pdata, plen, cm, &cm->hs);
	if (rc) {
		dfi_obj_retire(cm);
		if (rc == -ENETUNREACH || rc == -EHOSTUNREACH)
			return DFI_REJECT(DFI_ERR(DAT_INVALID_ADDRESS,
						  DAT_INVALID_ADDRESS_UNREACHABLE),
					  "UD EP %p: no route to the peer: %s", (void *)ep,
					  strerror(-rc));
		return dfi_resource_err(rc, DAT_RESOURCE_TEP, "a UD address resolution");
	}
	cm->next = ep->ud_cms;
	ep->ud_cms = cm;
	return DAT_SUCCESS;
}

struct dfi_evd *dfi_ud_event(struct dfi_ia *ia, struct dfi_cm_event *e, DAT_EVENT *ev)
{
	struct dfi_ud_cm *cm = dfi_obj_get(e->ctx, DFI_T_UD_CM);
	DAT_IB_EXTENSION_EVENT_DATA *x = (DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;
	DAT_CONNECTION_EVENT_DATA *c = &ev->event_data.connect_event_data;
	struct dfi_ud_ah *a = NULL;
	struct dfi_ep *ep;

	if (!cm || !cm->hs) {		/* reported already, or freed */
		if (e->type == DFI_CM_UD_RESOLVED)
			dfi_ah_free(e->ah);
		return NULL;
	}
	ep = cm->ep;
	dfi_fep_close(cm->hs);		/* its one event */
	cm->hs = NULL;
	if (e->type == DFI_CM_UD_RESOLVED) {
		a = dfi_obj_new(ia, DFI_T_AH, sizeof(*a));
		if (!a) {
			dfi_ah_free(e->ah);
			e->type = DFI_CM_ERROR;
			e->err = ENOMEM;
		} else {
			a->ep = ep;
			a->ah = e->ah;
			pthread_rwlock_wrlock(&ia->ud_lock);
			a->next = ep->ud_ahs;
			ep->ud_ahs = a;
			pthread_rwlock_unlock(&ia->ud_lock);
		}
	} else if (e->type != DFI_CM_ERROR) {
		/* a handshake reports once: nothing else is its to say */
		dfi_warn(DFI_SS_CM, "UD EP %p: unexpected CM event %d of a resolution",
			 (void *)ep, (int)e->type);
		e->type = DFI_CM_ERROR;
		e->err = EPROTO;
	}
	memset(ev, 0, sizeof(*ev));
	c->ep_handle = ep;
	x->context.as_ptr = cm;
	if (a) {
		if (!cm->passive && e->plen) {	/* the accepting side's */
			memcpy(cm->pdata, e->pdata, e->plen);
			cm->plen = (DAT_COUNT)e->plen;
		}
		ev->event_number = (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED;
		x->type = cm->passive ? DAT_IB_UD_PASSIVE_REMOTE_AH : DAT_IB_UD_REMOTE_AH;
		x->status = DAT_OP_SUCCESS;
		x->remote_ah.ah = (struct ibv_ah *)(void *)a;
		x->remote_ah.qpn = e->qpn;
		memcpy(&x->remote_ah.ia_addr, &cm->peer, sizeof(cm->peer));
		dfi_cnt_add(&ia->cnt[cm->passive ? DCNT_IA_CM_PASSIVE_EST :
				     DCNT_IA_CM_ACTIVE_EST], 1);
	} else {
		bool rejected = e->err == ECONNREFUSED;

		dfi_dbg(DFI_SS_CM, "UD EP %p: address resolution failed: %s", (void *)ep,
			strerror(e->err));
		ev->event_number = (DAT_EVENT_NUMBER)(rejected ? DAT_IB_UD_CONNECTION_REJECT_EVENT :
						      DAT_IB_UD_CONNECTION_ERROR_EVENT);
		x->type = rejected ? DAT_IB_UD_CONNECT_REJECT : DAT_IB_UD_CONNECT_ERROR;
		x->status = DAT_IB_OP_ERR;
		memcpy(&x->remote_ah.ia_addr, &cm->peer, sizeof(cm->peer));
		dfi_cnt_add(&ia->cnt[DCNT_IA_CM_ERR], 1);
		cm->plen = 0;
	}
	if (cm->plen) {
		c->private_data = cm->pdata;
		c->private_data_size = cm->plen;
	}
	dfi_cnt_add(&ep->conn_evd->cnt[DCNT_EVD_CONN_CALLBACK], 1);
	dfi_evq_hold(&ep->conn_evd->q);
	return ep->conn_evd;
}

/* cm_lock held: one resolution goes, its handshake abandoned if pending. */
static void cm_put(struct dfi_ud_cm *cm)
{
	if (cm->hs)
		dfi_fep_close(cm->hs);
	dfi_obj_retire(cm);
}

void dfi_ud_ep_release(struct dfi_ep *ep)
{
	struct dfi_ia *ia = ep->hdr.ia;
	struct dfi_ud_ah *a;

	while (ep->ud_cms) {
		struct dfi_ud_cm *cm = ep->ud_cms;

		ep->ud_cms = cm->next;
		cm_put(cm);
	}
	pthread_rwlock_wrlock(&ia->ud_lock);
	a = ep->ud_ahs;
	ep->ud_ahs = NULL;
	pthread_rwlock_unlock(&ia->ud_lock);
	while (a) {
		struct dfi_ud_ah *next = a->next;

		dfi_ah_free(a->ah);
		dfi_obj_retire(a);
		a = next;
	}
}

DAT_RETURN dfi_ud_cm_free(DAT_EP_HANDLE h, DAT_CONTEXT ctx)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct dfi_ud_cm *cm = dfi_obj_get(ctx.as_ptr, DFI_T_UD_CM), **pp;
	struct dfi_ia *ia;

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "UD CM free: %p is not an EP handle", (void *)h);
	ia = ep->hdr.ia;
	pthread_mutex_lock(&ia->cm_lock);
	for (pp = &ep->ud_cms; *pp && *pp != cm; pp = &(*pp)->next)
		;
	if (!cm || !*pp) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "UD CM free: %p is not an address resolution of EP %p",
				  ctx.as_ptr, (void *)ep);
	}
	*pp = cm->next;
	cm_put(cm);
	pthread_mutex_unlock(&ia->cm_lock);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_ud_ah_free(DAT_EP_HANDLE h, const DAT_IB_ADDR_HANDLE *ah)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct dfi_ud_ah *a, **pp = NULL;
	struct dfi_ia *ia;

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "UD AH free: %p is not an EP handle", (void *)h);
	ia = ep->hdr.ia;
	pthread_rwlock_wrlock(&ia->ud_lock);
	a = ah_of(ia, ah);
	if (a)
		for (pp = &a->ep->ud_ahs; *pp != a; pp = &(*pp)->next)
			;
	if (a)
		*pp = a->next;
	pthread_rwlock_unlock(&ia->ud_lock);
	if (!a)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "UD AH free: %p is not an address handle of this IA",
				  ah ? (void *)ah->ah : NULL);
	dfi_ah_free(a->ah);
	dfi_obj_retire(a);
	return DAT_SUCCESS;
}

/* dto.c's UD send, under ud_lock read-held: the backend's handle. */
struct dfi_ah *dfi_ud_ah_get(struct dfi_ia *ia, const DAT_IB_ADDR_HANDLE *h)
{
	struct dfi_ud_ah *a = ah_of(ia, h);

	return a ? a->ah : NULL;
}
