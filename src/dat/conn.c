/*
 * Connections: service points (PSP, RSP, CSP), connection requests,
 * connect, accept, reject, handoff, disconnect, and the translation of
 * libfabric CM events into DAT connection events (called by the progress
 * thread).
 *
 * The connection qualifier's low 16 bits are the TCP port.  ia->cm_lock serializes CM
 * event handling with EP and service point teardown, so an event never
 * reaches an endpoint that is being closed.  Posts do not take it: what
 * they read of an EP changes under its post_lock too (struct dfi_ep).
 */
#include "dfi.h"
#include "fabric/fabric.h"
#include "util/param.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* A consumer call that starts a CM step: for the progress thread's EQ
 * lease, a consumer that polls for its outcome is busy with the EQ while it
 * makes these calls, as a poster is with a CQ (progress.c, eq_leased). */
static void cm_touch(struct dfi_ia *ia)
{
	atomic_fetch_add_explicit(&ia->eq_touches, 1, memory_order_relaxed);
}

/* A connection call's failure (-errno) at the API edge: descriptors run
 * out (libfabric's socket, or its epoll and signal fds; a code that does
 * not say so is checked) are the transport endpoint that could not be
 * had, and logged once as such; memory is memory; anything else `other`. */
static DAT_RETURN cm_err(int rc, const char *what, DAT_RETURN other)
{
	int gone;

	if (rc != -EMFILE && rc != -ENFILE && rc != -ENOMEM && (gone = dfi_fds_gone()))
		rc = gone;
	if (rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM)
		return dfi_resource_err(rc, DAT_RESOURCE_TEP, what);
	/* the provider endpoint's receive queue stayed full (post.c retried
	 * for 2 s): the early receives did not fit, as a post's would not */
	if (rc == -EAGAIN)
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	return other;
}

static DAT_RETURN sp_create(struct dfi_ia *ia, enum dfi_type type, DAT_CONN_QUAL *qual,
			    struct dfi_evd *evd, DAT_PSP_FLAGS flags, struct dfi_ep *ep,
			    struct dfi_sp **out)
{
	struct dfi_sp *sp;
	uint16_t port;
	int rc;

	/* The port is the qualifier's low 16 bits, as OFA's rdma_cm provider
	 * maps it (dapltest's limit test uses qualifiers above 65535). */
	if (*qual != 0 && (*qual & 0xffff) == 0)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "connection qualifier %llu maps to TCP port 0",
				  (unsigned long long)*qual);
	rc = dfi_progress_start(ia);
	if (rc)
		return cm_err(rc, "listening (the IA's event queue)",
			      DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY));
	sp = dfi_obj_new(ia, type, sizeof(*sp));
	if (!sp)
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	/* Complete before the listen: a request may reach the progress thread
	 * (handle_connreq) as soon as the port is open. */
	sp->cr_evd = evd;
	sp->conn_qual = *qual;
	sp->flags = flags;
	sp->ep = ep;
	dfi_evq_ref(&evd->q);
	rc = dfi_pep_listen(ia->fab, ia->eq, (uint16_t)(*qual & 0xffff), sp, &sp->pep, &port);
	if (rc) {
		dfi_evq_unref(&evd->q);
		dfi_obj_retire(sp);
		if (rc == -EADDRINUSE)
			return DFI_REJECT(DFI_ERR(DAT_CONN_QUAL_IN_USE, 0),
					  "connection qualifier %llu is in use",
					  (unsigned long long)*qual);
		return cm_err(rc, "listening", DFI_ERR(DAT_INSUFFICIENT_RESOURCES,
							DAT_RESOURCE_MEMORY));
	}
	pthread_mutex_lock(&ia->cm_lock);	/* what handle_connreq reads under */
	if (!*qual)
		sp->conn_qual = port;		/* create_any: the port chosen */
	ia->n_listening++;
	pthread_mutex_unlock(&ia->cm_lock);
	*qual = sp->conn_qual;
	*out = sp;
	dfi_dbg(DFI_SS_CM, "%s %p listening on port %u",
		type == DFI_T_PSP ? "PSP" : type == DFI_T_RSP ? "RSP" : "CSP", (void *)sp, port);
	return DAT_SUCCESS;
}

static DAT_RETURN psp_common(DAT_IA_HANDLE h, DAT_CONN_QUAL *qual, DAT_EVD_HANDLE evdh,
			     DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_evd *evd;
	struct dfi_sp *sp;
	DAT_RETURN rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!(evd = dfi_evd_of(ia, evdh, DAT_EVD_CR_FLAG)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR),
				  "%p is not a CR EVD of this IA", (void *)evdh);
	/* DAT_PSP_PROVIDER_FLAG: each request comes with an EP made for it
	 * (handle_connreq) */
	if (flags != DAT_PSP_CONSUMER_FLAG && flags != DAT_PSP_PROVIDER_FLAG)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "unknown PSP flags 0x%x", (unsigned)flags);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5),
				  "PSP handle pointer is NULL");
	rc = sp_create(ia, DFI_T_PSP, qual, evd, flags, NULL, &sp);
	if (rc == DAT_SUCCESS)
		*out = sp;
	return rc;
}

DAT_RETURN dfi_psp_create(DAT_IA_HANDLE h, DAT_CONN_QUAL qual, DAT_EVD_HANDLE evd,
			  DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *out)
{
	if (qual == 0)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "connection qualifier 0: use dat_psp_create_any");
	return psp_common(h, &qual, evd, flags, out);
}

DAT_RETURN dfi_psp_create_any(DAT_IA_HANDLE h, DAT_CONN_QUAL *qual, DAT_EVD_HANDLE evd,
			      DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *out)
{
	if (!qual)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "connection qualifier pointer is NULL");
	*qual = 0;
	return psp_common(h, qual, evd, flags, out);
}

DAT_RETURN dfi_psp_query(DAT_PSP_HANDLE h, DAT_PSP_PARAM_MASK mask, DAT_PSP_PARAM *p)
{
	struct dfi_sp *sp = dfi_obj_get(h, DFI_T_PSP);

	if (!sp)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP),
				  "%p is not a PSP handle", (void *)h);
	if (mask & ~(DAT_PSP_PARAM_MASK)DAT_PSP_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "PSP param mask 0x%x has unknown bits", (unsigned)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "PSP param pointer is NULL");
	p->ia_handle = sp->hdr.ia;
	p->conn_qual = sp->conn_qual;
	p->evd_handle = sp->cr_evd;
	p->psp_flags = sp->flags;
	return DAT_SUCCESS;
}

/* Freeing a service point "shall have no effect on previously generated
 * Connection Requested Events", CR instances included (dat_psp_free(3)): an
 * SP with CRs pending keeps its listener, which their accept or reject
 * needs, and is retired with the last of them (cr_done).  Meanwhile its
 * handle is dead and new requests on its port are refused. */
void dfi_sp_destroy(struct dfi_sp *sp)
{
	struct dfi_ia *ia = sp->hdr.ia;
	struct dfi_ep *back = NULL;
	bool keep;

	pthread_mutex_lock(&ia->cm_lock);
	ia->n_listening--;
	keep = sp->ncr > 0;
	if (keep) {
		sp->freed = true;
		sp->hdr.type = DFI_T_SP_GONE;
	} else {
		dfi_pep_close(sp->pep);
		sp->pep = NULL;
	}
	if (sp->ep) {
		/* an RSP's EP reverts to the consumer */
		if (sp->ep->rsp == sp)
			sp->ep->rsp = NULL;
		if (sp->ep->state == DAT_EP_STATE_RESERVED) {
			dfi_ep_set_state(sp->ep, DAT_EP_STATE_UNCONNECTED);
			back = sp->ep;
		}
		sp->ep = NULL;
	}
	pthread_mutex_unlock(&ia->cm_lock);
	dfi_evq_unref(&sp->cr_evd->q);
	if (!keep)
		dfi_obj_retire(sp);
	if (back)	/* unused: a fresh EP again, endpoint opened ahead */
		dfi_ep_preopen(back);
}

/* A CR is accepted, rejected or destroyed (cm_lock held).  Returns its SP
 * if the consumer freed that and this was its last CR: the listener is
 * closed here, the caller retires the SP once cm_lock is dropped. */
static struct dfi_sp *cr_done(struct dfi_cr *cr)
{
	struct dfi_sp *sp = cr->sp;

	if (--sp->ncr > 0 || !sp->freed)
		return NULL;
	dfi_pep_close(sp->pep);
	sp->pep = NULL;
	return sp;
}

/* The provider-created EP of a CR that will not be accepted, detached
 * from it, for the caller to destroy once cm_lock is dropped; or NULL. */
static struct dfi_ep *cr_drop_ep(struct dfi_cr *cr)
{
	struct dfi_ep *ep = cr->ep;

	if (ep) {
		ep->cr = NULL;
		cr->ep = NULL;
	}
	return ep;
}

/* Retire a finished CR, and its SP if cr_done handed it back. */
static void cr_retire(struct dfi_cr *cr, struct dfi_sp *gone)
{
	dfi_obj_retire(cr);
	if (gone)
		dfi_obj_retire(gone);
}

/* Refuse a CR on the wire (unless that was done already) and retire it,
 * with its SP if that was freed and this was its last CR. */
static void cr_refuse(struct dfi_cr *cr, const void *pdata, size_t plen)
{
	struct dfi_ia *ia = cr->hdr.ia;
	struct dfi_ep *ep;
	struct dfi_sp *gone;

	pthread_mutex_lock(&ia->cm_lock);
	if (cr->req)
		dfi_pep_reject(cr->sp->pep, cr->req, pdata, plen);
	cr->req = NULL;
	ep = cr_drop_ep(cr);
	gone = cr_done(cr);
	pthread_mutex_unlock(&ia->cm_lock);
	cr_retire(cr, gone);
	if (ep)		/* the provider made it for this request: it goes too (OFA) */
		dfi_ep_destroy(ep);
}

DAT_RETURN dfi_psp_free(DAT_PSP_HANDLE h)
{
	struct dfi_sp *sp = dfi_obj_get(h, DFI_T_PSP);

	if (!sp)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP),
				  "%p is not a PSP handle", (void *)h);
	dfi_sp_destroy(sp);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_rsp_create(DAT_IA_HANDLE h, DAT_CONN_QUAL qual, DAT_EP_HANDLE eph,
			  DAT_EVD_HANDLE evdh, DAT_RSP_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_ep *ep = dfi_obj_get(eph, DFI_T_EP);
	struct dfi_evd *evd;
	struct dfi_sp *sp;
	DAT_RETURN rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!ep || ep->hdr.ia != ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP of this IA", (void *)eph);
	if (!(evd = dfi_evd_of(ia, evdh, DAT_EVD_CR_FLAG)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR),
				  "%p is not a CR EVD of this IA", (void *)evdh);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5),
				  "RSP handle pointer is NULL");
	pthread_mutex_lock(&ia->cm_lock);
	if (ep->state != DAT_EP_STATE_UNCONNECTED) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				  "EP %p is not unconnected", (void *)ep);
	}
	dfi_ep_set_state(ep, DAT_EP_STATE_RESERVED);
	/* A reserved EP can only accept this RSP's request (DAT 2.0
	 * dat_rsp_create; OFA uDAPL likewise), and tcp's accepting endpoint
	 * comes from the request: the one opened ahead for a connect
	 * (dfi_ep_preopen) would be closed unused at the accept.  It goes
	 * now, with its socket; the EP opens one again if the RSP is freed
	 * unused (dfi_sp_destroy), as a new EP does. */
	dfi_ep_drop_spare(ep);
	pthread_mutex_unlock(&ia->cm_lock);
	rc = sp_create(ia, DFI_T_RSP, &qual, evd, DAT_PSP_CONSUMER_FLAG, ep, &sp);
	if (rc != DAT_SUCCESS) {
		pthread_mutex_lock(&ia->cm_lock);
		dfi_ep_set_state(ep, DAT_EP_STATE_UNCONNECTED);
		pthread_mutex_unlock(&ia->cm_lock);
		dfi_ep_preopen(ep);
		return rc;
	}
	ep->rsp = sp;
	*out = sp;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_rsp_query(DAT_RSP_HANDLE h, DAT_RSP_PARAM_MASK mask, DAT_RSP_PARAM *p)
{
	struct dfi_sp *sp = dfi_obj_get(h, DFI_T_RSP);

	if (!sp)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP),
				  "%p is not an RSP handle", (void *)h);
	if (mask & ~(DAT_RSP_PARAM_MASK)DAT_RSP_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "RSP param mask 0x%x has unknown bits", (unsigned)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "RSP param pointer is NULL");
	p->ia_handle = sp->hdr.ia;
	p->conn_qual = sp->conn_qual;
	p->evd_handle = sp->cr_evd;
	p->ep_handle = sp->ep;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_rsp_free(DAT_RSP_HANDLE h)
{
	struct dfi_sp *sp = dfi_obj_get(h, DFI_T_RSP);

	if (!sp)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP),
				  "%p is not an RSP handle", (void *)h);
	dfi_sp_destroy(sp);
	return DAT_SUCCESS;
}

/* ---------------------------------------------------- connection requests */

DAT_RETURN dfi_cr_query(DAT_CR_HANDLE h, DAT_CR_PARAM_MASK mask, DAT_CR_PARAM *p)
{
	struct dfi_cr *cr = dfi_obj_get(h, DFI_T_CR);

	(void)mask;	/* dtest passes DAT_CSP_FIELD_ALL: fill everything */
	if (!cr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR),
				  "%p is not a CR handle", (void *)h);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "CR param pointer is NULL");
	p->remote_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&cr->remote;
	p->remote_port_qual = ntohs(cr->remote.sin_port);
	p->private_data_size = cr->plen;
	p->private_data = cr->pdata;	/* writable: dtest edits it in place */
	pthread_mutex_lock(&cr->hdr.ia->cm_lock);
	/* the provider-created EP, or the RSP's (NULL once an RSP is freed) */
	p->local_ep_handle = cr->ep ? cr->ep : cr->sp->ep;
	pthread_mutex_unlock(&cr->hdr.ia->cm_lock);
	return DAT_SUCCESS;
}

void dfi_cr_destroy(struct dfi_cr *cr)
{
	cr_refuse(cr, NULL, 0);
}

/* The endpoint opened ahead for ep (dfi_ep_preopen), taken out of ep and
 * out of the IA's count: now the caller's, or NULL (cm_lock held). */
static struct dfi_fep *spare_take(struct dfi_ep *ep)
{
	struct dfi_fep *fep = ep->spare;

	if (fep) {
		ep->spare = NULL;
		ep->hdr.ia->n_spares--;
	}
	return fep;
}

/* Create the libfabric endpoint of `ep` (cm_lock held), not yet the EP's:
 * the CQs of its EVDs first.  An SRQ EP binds the SRQ's shared context and
 * receives on its private CQ (srq.c); its recv EVD's CQ is still created,
 * as the source its staged completions go through. */
static int ep_open_fep(struct dfi_ep *ep, void *req, struct dfi_fep **fep)
{
	struct dfi_ia *ia = ep->hdr.ia;
	struct dfi_cq *tx = NULL, *rx = NULL, *spare = NULL;
	size_t txn, txmax;
	int rc;

	*fep = NULL;
	if (ep->req_evd && (rc = dfi_evd_cq(ep->req_evd, &tx)))
		return rc;
	if (ep->recv_evd && (rc = dfi_evd_cq(ep->recv_evd, &rx)))
		return rc;
	/* libfabric wants both directions bound: borrow the other one */
	spare = tx ? tx : rx;
	if (!spare) {
		dfi_warn(DFI_SS_EP, "EP %p has no DTO EVD at all: cannot connect", (void *)ep);
		return -EINVAL;
	}
	if (ep->srq) {
		if ((rc = dfi_srq_ep_open_cq(ep)))
			return rc;
		rx = ep->rcq;
	} else {
		dfi_progress_pair(ep->req_evd, ep->recv_evd);
	}
	/* twice the requests: an RDMA write with immediate data posts two
	 * (dto.c, post_write_imm), within what the provider granted */
	txn = 2 * (size_t)ep->attr.max_request_dtos;
	txmax = dfi_fabric_limits(ia->fab)->tx_size;
	if (txmax && txn > txmax)
		txn = txmax > (size_t)ep->attr.max_request_dtos ? txmax :
		      (size_t)ep->attr.max_request_dtos;
	return dfi_fep_open(ia->fab, ia->eq, req, tx ? tx : spare, rx ? rx : spare,
			    ep->srq ? ep->srq->srx : NULL,
			    txn, (size_t)ep->attr.max_recv_dtos, ep, fep);
}

/* Then, under cm_lock and post_lock, the receives posted while it was
 * unconnected go to it, before the connect or accept that makes it the
 * EP's: a post cannot add one in between.  Those posted before one that
 * fails are fep's from then on (the caller closes it, and its flush
 * completes them): they leave the list, which would post them a second
 * time at the next connect, or flush them a second time at a reset. */
static int ep_post_early(struct dfi_ep *ep, struct dfi_fep *fep)
{
	const struct dfi_fabric_limits *lim = dfi_fabric_limits(ep->hdr.ia->fab);
	int rc, n;

	dfi_dto_order_base(ep->recvq, lim->numbered ? lim->msgno_mask : 0);
	for (int k = 0; k < ep->n_early; k++) {
		const struct dfi_early *e = &ep->early[k];

		struct dfi_dto *d = &ep->recvq->d[e->idx];

		dfi_dto_order_take(d);
		rc = dfi_post_recv(fep, e->sg, e->nsg, dfi_dto_fctx(d));
		if (rc) {
			dfi_dto_order_untake(d);
			dfi_err(DFI_SS_EP, "EP %p: posting an early receive: %s", (void *)ep,
				strerror(-rc));
			memmove(ep->early, ep->early + k,
				(size_t)(ep->n_early - k) * sizeof(*ep->early));
			ep->n_early -= k;
			return rc;
		}
	}
	free(dfi_ep_early_take(ep, &n));
	return 0;
}

/* ep's receives on fep cancelled, to complete flushed (post_lock held;
 * one not on fep is ignored).  At a connection's end (ep_lost), and when
 * fep will not carry the connection: its connect or accept was refused at
 * once, or ep_post_early failed.  A closing MSG endpoint would flush them
 * itself; an RDM endpoint is shared and outlives fep, and would keep them
 * for ever (found by the soak: a connect refused in a link flap). */
static void recvs_cancel(struct dfi_ep *ep, struct dfi_fep *fep)
{
	if (!ep->srq)
		for (int i = 0; i < ep->recvq->n; i++)
			dfi_fep_cancel(fep, dfi_dto_fctx(&ep->recvq->d[i]));
}

/* A UD EP's datagram endpoint, opened at its first address resolution
 * (cm_lock held): its early receives go to it, and the EP is CONNECTED, as
 * OFA uDAPL's UD EPs once resolved (ud.c). */
int dfi_ep_open_ud(struct dfi_ep *ep)
{
	struct dfi_fep *fep;
	int rc;

	if (ep->fep)
		return 0;
	fep = spare_take(ep);
	rc = fep ? 0 : ep_open_fep(ep, NULL, &fep);
	if (rc)
		return rc;
	pthread_mutex_lock(&ep->post_lock);
	rc = ep_post_early(ep, fep);
	if (!rc) {
		ep->fep = fep;
		dfi_ep_state_locked(ep, DAT_EP_STATE_CONNECTED);
	} else {
		recvs_cancel(ep, fep);
	}
	pthread_mutex_unlock(&ep->post_lock);
	if (rc)
		dfi_fep_close(fep);
	return rc;
}

/* dat_cr_accept of a request from a UD EP, or with one: both must be. */
static DAT_RETURN ud_accept(struct dfi_cr *cr, struct dfi_ep *ep, DAT_COUNT plen,
			    const void *pdata)
{
	struct dfi_ia *ia = cr->hdr.ia;
	struct dfi_sp *gone = NULL;
	DAT_RETURN rc;

	if (cr->ud != ep->ud)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "CR %p comes from a%s EP: accept it with a%s EP, not EP %p",
				  (void *)cr, cr->ud ? " UD" : "n RC", cr->ud ? " UD" : "n RC",
				  (void *)ep);
	pthread_mutex_lock(&ia->cm_lock);
	if (ep->hdr.type != DFI_T_EP) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "EP %p was freed", (void *)ep);
	}
	if (!cr->req) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, 0), "CR %p was answered already",
				  (void *)cr);
	}
	rc = dfi_ud_start(ep, cr->req, &cr->remote, pdata, (size_t)plen, cr->pdata,
			  (size_t)cr->plen, 0);
	if (rc == DAT_SUCCESS) {
		cr->req = NULL;		/* the resolution's now */
		gone = cr_done(cr);
	}
	pthread_mutex_unlock(&ia->cm_lock);
	if (rc != DAT_SUCCESS)
		return rc;
	cr_retire(cr, gone);
	dfi_cnt_add(&ia->cnt[DCNT_IA_SP_CR_ACCEPTED], 1);
	return DAT_SUCCESS;
}

/* The private data a connect, accept or reject of ia's may carry (the
 * fabric's own may take some, fabric.h). */
static int pdata_max(const struct dfi_ia *ia)
{
	return (int)dfi_fabric_limits(ia->fab)->pdata_max;
}

/* A private data argument ia cannot carry: a length out of range, or none
 * given for a length. */
static bool pdata_bad(const struct dfi_ia *ia, DAT_COUNT plen, const void *pdata)
{
	return plen < 0 || plen > pdata_max(ia) || (plen && !pdata);
}

DAT_RETURN dfi_cr_accept(DAT_CR_HANDLE h, DAT_EP_HANDLE eph, DAT_COUNT plen,
			 const DAT_PVOID pdata)
{
	struct dfi_cr *cr = dfi_obj_get(h, DFI_T_CR);
	struct dfi_sp *gone = NULL;
	struct dfi_fep *fep;
	struct dfi_ep *ep, *own;
	struct dfi_ia *ia;
	DAT_EP_STATE entry;
	int rc;

	if (!cr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR),
				  "%p is not a CR handle", (void *)h);
	ia = cr->hdr.ia;
	pthread_mutex_lock(&ia->cm_lock);
	own = cr->ep;
	ep = eph ? dfi_obj_get(eph, DFI_T_EP) : own ? own : cr->sp->ep;
	pthread_mutex_unlock(&ia->cm_lock);
	/* as OFA uDAPL: a request that came with a provider-created EP is
	 * accepted on that one */
	if (eph && own)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "CR %p came with the provider-created EP %p: accept it with "
				  "DAT_HANDLE_NULL, not EP %p", (void *)cr, (void *)own, (void *)eph);
	if (!ep || ep->hdr.ia != ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP of this IA%s", (void *)eph,
				  eph ? "" : " (and the CR did not come to a live RSP or with an EP)");
	if (pdata_bad(ia, plen, pdata))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "private data size %d (max %d)", plen, pdata_max(ia));
	cm_touch(ia);
	if (cr->ud || ep->ud)
		return ud_accept(cr, ep, plen, pdata);
	pthread_mutex_lock(&ia->cm_lock);
	entry = ep->state;
	if (ep->hdr.type != DFI_T_EP) {		/* freed meanwhile */
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "EP %p was freed", (void *)ep);
	}
	if (ep->cr == cr && (!ep->pz || !ep->conn_evd || (!ep->req_evd && !ep->recv_evd))) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "provider-created EP %p has no PZ, connection EVD or DTO EVD: "
				  "give them with dat_ep_modify before dat_cr_accept", (void *)ep);
	}
	if (entry != DAT_EP_STATE_UNCONNECTED && entry != DAT_EP_STATE_RESERVED &&
	    !(entry == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING && ep->cr == cr)) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				  "EP %p cannot accept in state %d", (void *)ep, (int)ep->state);
	}
	/* tcp's accepting endpoint comes from the request: one opened ahead
	 * for a connect goes (its socket first) */
	dfi_ep_drop_spare(ep);
	rc = ep_open_fep(ep, cr->req, &fep);
	if (rc == 0) {
		cr->req = NULL;		/* the endpoint owns it now */
		ep->remote = cr->remote;
		ep->remote_port = 0;	/* no service point of the peer's */
		pthread_mutex_lock(&ep->post_lock);
		rc = ep_post_early(ep, fep);
		if (!rc)
			rc = dfi_fep_accept(fep, pdata, (size_t)plen);
		if (!rc)
			ep->fep = fep;
		dfi_ep_state_locked(ep, rc ? (entry == DAT_EP_STATE_RESERVED ?
					      DAT_EP_STATE_UNCONNECTED : entry) :
					 DAT_EP_STATE_PASSIVE_CONNECTION_PENDING);
		if (rc)
			recvs_cancel(ep, fep);
		pthread_mutex_unlock(&ep->post_lock);
		if (rc) {
			dfi_fep_close(fep);
		} else {
			if (ep->cr == cr)	/* a provider-created EP is the consumer's now */
				ep->cr = NULL;
			cr->ep = NULL;
			gone = cr_done(cr);
		}
	}
	pthread_mutex_unlock(&ia->cm_lock);
	/* the request stays the CR's unless the endpoint took it: refused
	 * for want of descriptors, it can be accepted again */
	if (rc)
		return cm_err(rc, "dat_cr_accept", DFI_ERR(DAT_INTERNAL_ERROR, 0));
	cr_retire(cr, gone);
	dfi_cnt_add(&ia->cnt[DCNT_IA_SP_CR_ACCEPTED], 1);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_cr_reject(DAT_CR_HANDLE h, DAT_COUNT plen, const DAT_PVOID pdata)
{
	struct dfi_cr *cr = dfi_obj_get(h, DFI_T_CR);

	if (!cr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR),
				  "%p is not a CR handle", (void *)h);
	if (pdata_bad(cr->hdr.ia, plen, pdata))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "private data size %d (max %d)", plen, pdata_max(cr->hdr.ia));
	dfi_cnt_add(&cr->hdr.ia->cnt[DCNT_IA_SP_CR_REJECTED], 1);	/* cr goes here */
	cr_refuse(cr, pdata, (size_t)plen);
	return DAT_SUCCESS;
}

/* ---------------------------------------------------- active side, teardown */

/* cm_lock held: a connect with a deadline (timed) starts the progress
 * thread's tick if none runs (dfi_connect_timeouts); true: it must be
 * kicked, once cm_lock is dropped (see ep_connect_to). */
static bool timers_on(struct dfi_ia *ia, bool timed)
{
	bool kick = timed && !ia->connect_timers;

	if (timed)
		ia->connect_timers = true;
	return kick;
}

/* The connect of dat_ep_connect and its DAT 2.0 variants, arguments
 * checked: to dest, whose port is qual's low 16 bits. */
static DAT_RETURN ep_connect_to(struct dfi_ep *ep, struct sockaddr_in dest, DAT_CONN_QUAL qual,
				DAT_TIMEOUT timeout, DAT_COUNT plen, const void *pdata)
{
	struct dfi_fep *fep;
	struct dfi_ia *ia;
	bool timed, kick;
	int rc;

	ia = ep->hdr.ia;
	rc = dfi_progress_start(ia);
	if (rc)
		return cm_err(rc, "dat_ep_connect (the IA's event queue)",
			      DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY));
	dest.sin_port = htons((uint16_t)(qual & 0xffff));
	cm_touch(ia);
	pthread_mutex_lock(&ia->cm_lock);
	if (ep->ud) {
		/* an address resolution (ud.c), its timeout the progress
		 * thread's as a connect's (dfi_connect_timeouts) */
		DAT_RETURN r;

		timed = timeout != DAT_TIMEOUT_INFINITE;
		r = dfi_ud_start(ep, NULL, &dest, pdata, (size_t)plen, NULL, 0,
				 timed ? dfi_deadline(timeout) : 0);
		kick = timers_on(ia, timed && r == DAT_SUCCESS);
		pthread_mutex_unlock(&ia->cm_lock);
		if (r == DAT_SUCCESS)
			dfi_cnt_add(&ia->cnt[DCNT_IA_CM_REQ_TX], 1);
		if (kick)
			dfi_progress_kick(ia);
		return r;
	}
	if (ep->state != DAT_EP_STATE_UNCONNECTED || ep->fep) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY),
				  "EP %p cannot connect in state %d", (void *)ep, (int)ep->state);
	}
	fep = spare_take(ep);	/* opened at dat_ep_create (dfi_ep_preopen) */
	rc = fep ? 0 : ep_open_fep(ep, NULL, &fep);
	if (!rc) {
		ep->remote = dest;
		ep->remote_port = qual;
		pthread_mutex_lock(&ep->post_lock);
		rc = ep_post_early(ep, fep);
		if (!rc)
			rc = dfi_fep_connect(fep, &dest, pdata, (size_t)plen);
		if (!rc) {
			ep->fep = fep;
			dfi_ep_state_locked(ep, DAT_EP_STATE_ACTIVE_CONNECTION_PENDING);
			/* a listener's host that vanishes before it
			 * answers ends the connect too */
			dfi_fep_arm_liveness(fep, ia->peer_timeout_ms, &dest);
			dfi_cnt_add(&ia->cnt[DCNT_IA_CM_REQ_TX], 1);
		} else {
			recvs_cancel(ep, fep);
		}
		pthread_mutex_unlock(&ep->post_lock);
		if (rc)
			dfi_fep_close(fep);
	}
	/* libfabric has no connect timeout of its own (a peer that accepts
	 * the TCP connection and never answers leaves it pending forever):
	 * the progress thread enforces DAT's (dfi_connect_timeouts). */
	timed = !rc && timeout != DAT_TIMEOUT_INFINITE;
	ep->connect_deadline = timed ? dfi_deadline(timeout) : 0;
	/* The first timed connect wakes the thread, which then ticks until
	 * none is left (dfi_connect_timeouts clears connect_timers); later
	 * ones ride on that tick.  A kick per connect cost a scan of every
	 * EP under cm_lock per connect: quadratic in a connect storm. */
	kick = timers_on(ia, timed);
	pthread_mutex_unlock(&ia->cm_lock);
	/* No route to the peer at all (the host's link is down): libfabric's
	 * connect(2) fails at once, which is the consumer's news, not ours:
	 * the EP stays unconnected and may connect again (found by the soak,
	 * tests/hosts/soak.sh, in a link flap). */
	if (rc == -ENETUNREACH || rc == -EHOSTUNREACH)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE),
				  "EP %p: no route to the peer: %s", (void *)ep, strerror(-rc));
	if (rc)
		return cm_err(rc, "dat_ep_connect", DFI_ERR(DAT_INTERNAL_ERROR, 0));
	if (kick)
		dfi_progress_kick(ia);	/* it may be asleep with no tick */
	return DAT_SUCCESS;
}

DAT_RETURN dfi_ep_connect(DAT_EP_HANDLE h, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL qual,
			  DAT_TIMEOUT timeout, DAT_COUNT plen, const DAT_PVOID pdata,
			  DAT_QOS qos, DAT_CONNECT_FLAGS flags)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct sockaddr_in dest;

	(void)qos;
	(void)flags;
	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	if (!addr || addr->sa_family != AF_INET)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED),
				  "EP %p: only IPv4 (AF_INET) remote addresses", (void *)ep);
	if ((qual & 0xffff) == 0)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "connection qualifier %llu maps to TCP port 0",
				  (unsigned long long)qual);
	if (pdata_bad(ep->hdr.ia, plen, pdata))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5),
				  "private data size %d (max %d)", plen, pdata_max(ep->hdr.ia));
	memcpy(&dest, addr, sizeof(dest));
	return ep_connect_to(ep, dest, qual, timeout, plen, pdata);
}

/* DAT 2.0: the port is in the address (a CSP's, or any listener's). */
DAT_RETURN dfi_ep_common_connect(DAT_EP_HANDLE h, DAT_IA_ADDRESS_PTR addr, DAT_TIMEOUT timeout,
				 DAT_COUNT plen, const DAT_PVOID pdata)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct sockaddr_in dest;

	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	if (!addr || addr->sa_family != AF_INET)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED),
				  "EP %p: only IPv4 (AF_INET) remote addresses", (void *)ep);
	memcpy(&dest, addr, sizeof(dest));
	if (dest.sin_port == 0)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE),
				  "EP %p: remote address has port 0 (dat_ep_common_connect takes "
				  "the port from the address)", (void *)ep);
	if (pdata_bad(ep->hdr.ia, plen, pdata))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "private data size %d (max %d)", plen, pdata_max(ep->hdr.ia));
	return ep_connect_to(ep, dest, ntohs(dest.sin_port), timeout, plen, pdata);
}

/* To the remote of a connected EP: its address and the qualifier it
 * connected to.  An EP that accepted its connection knows no qualifier
 * of the peer's (OFA uDAPL would connect to the peer's own port). */
DAT_RETURN dfi_ep_dup_connect(DAT_EP_HANDLE h, DAT_EP_HANDLE duph, DAT_TIMEOUT timeout,
			      DAT_COUNT plen, const DAT_PVOID pdata, DAT_QOS qos)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct dfi_ep *dup = dfi_obj_get(duph, DFI_T_EP);
	struct sockaddr_in dest;
	DAT_CONN_QUAL qual;
	DAT_EP_STATE st;

	(void)qos;
	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	if (!dup || dup->hdr.ia != ep->hdr.ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "dup EP %p is not an EP of this IA", (void *)duph);
	/* as OFA uDAPL: a connection cannot be made in no time */
	if (timeout == 0)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "timeout 0");
	if (pdata_bad(ep->hdr.ia, plen, pdata))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "private data size %d (max %d)", plen, pdata_max(ep->hdr.ia));
	pthread_mutex_lock(&ep->hdr.ia->cm_lock);
	st = dup->state;
	dest = dup->remote;
	qual = dup->remote_port;
	pthread_mutex_unlock(&ep->hdr.ia->cm_lock);
	if (st != DAT_EP_STATE_CONNECTED)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED),
				  "dup EP %p is not connected (state %d)", (void *)dup, (int)st);
	if (!qual)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "dup EP %p accepted its connection: the peer's service point "
				  "is unknown", (void *)dup);
	return ep_connect_to(ep, dest, qual, timeout, plen, pdata);
}

static void ep_lost(struct dfi_ep *ep);

DAT_RETURN dfi_ep_disconnect(DAT_EP_HANDLE h, DAT_CLOSE_FLAGS flags)
{
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct dfi_ia *ia;
	DAT_RETURN rc = DAT_SUCCESS;
	DAT_EP_STATE st;
	bool self_report = false, broken;
	int err;

	(void)flags;	/* graceful and abrupt both shut the connection down */
	if (!ep)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP),
				  "%p is not an EP handle", (void *)h);
	ia = ep->hdr.ia;
	cm_touch(ia);
	pthread_mutex_lock(&ia->cm_lock);
	st = ep->state;
	pthread_mutex_unlock(&ia->cm_lock);
	if (st == DAT_EP_STATE_CONNECTED && !ep->ud)
		dfi_ep_cut_reads(ep);	/* its RDMA reads first (dto.c) */
	pthread_mutex_lock(&ia->cm_lock);
	switch (ep->state) {
	case DAT_EP_STATE_CONNECTED:
	case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
	case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
		dfi_ep_set_state(ep, DAT_EP_STATE_DISCONNECT_PENDING);
		if (ep->ud) {
			/* no connection: its receives complete flushed */
			ep_lost(ep);
			self_report = true;
		} else if ((err = dfi_fep_shutdown(ep->fep))) {
			/* no local FI_SHUTDOWN will come: report it ourselves.
			 * (Not through ep_lost: the peer's end is on its way,
			 * and cancelling here, beside tcp;ofi_rxm 1.17 tearing
			 * that connection down, crashed rxm's own thread about
			 * 1 run in 4 of test_send_without_posted_recv.) */
			dfi_dbg(DFI_SS_CM, "EP %p: no connection left to shut down (%s)", (void *)ep,
				strerror(-err));
			dfi_ep_set_state(ep, DAT_EP_STATE_DISCONNECTED);
			self_report = true;
		}
		break;
	case DAT_EP_STATE_DISCONNECT_PENDING:
	case DAT_EP_STATE_DISCONNECTED:
		break;
	default:
		rc = DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED),
				"EP %p is not connected", (void *)ep);
	}
	/* An SRQ EP reports the end of its connection with an async
	 * EP_BROKEN too (srq.c), once per established connection. */
	broken = self_report && ep->srq && ep->established;
	if (broken)
		ep->established = false;
	pthread_mutex_unlock(&ia->cm_lock);
	if (broken)
		dfi_srq_ep_settle(ep);
	if (self_report && ep->conn_evd) {
		DAT_EVENT ev;

		memset(&ev, 0, sizeof(ev));
		ev.event_number = DAT_CONNECTION_EVENT_DISCONNECTED;
		ev.event_data.connect_event_data.ep_handle = ep;
		dfi_evq_post(&ep->conn_evd->q, &ev);
	}
	if (broken)
		dfi_post_async(ia, DAT_ASYNC_ERROR_EP_BROKEN, ep, DAT_EP_TRANSFER_TO_ERROR);
	return rc;
}

/* The CQs ep's endpoint is bound to (NULL where it has none): request,
 * receive, and an SRQ EP's own receive CQ. */
#define EP_NCQS 3
static void ep_cqs(const struct dfi_ep *ep, struct dfi_cq *cqs[EP_NCQS])
{
	cqs[0] = ep->req_evd ? ep->req_evd->cq : NULL;
	cqs[1] = ep->recv_evd ? ep->recv_evd->cq : NULL;
	cqs[2] = ep->rcq;
}

void dfi_ep_drop_spare(struct dfi_ep *ep)
{
	struct dfi_fep *fep = spare_take(ep);
	struct dfi_cq *cqs[EP_NCQS];

	if (!fep)
		return;
	ep_cqs(ep, cqs);
	dfi_fep_close_bound(fep, cqs, EP_NCQS);
}

/* How many EPs of an IA may hold an endpoint opened ahead: the parameter,
 * and never more than a quarter of the open-file limit (each holds a
 * socket; an accepting server's EPs would otherwise hold one each beside
 * the accepted ones). */
static int spare_budget(void)
{
	long want = dfi_param_int(DFI_P_EP_PREOPEN);
	struct rlimit rl;

	if (want <= 0)
		return 0;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    (rlim_t)want > rl.rlim_cur / 4)
		want = (long)(rl.rlim_cur / 4);
	return want > INT_MAX ? INT_MAX : (int)want;
}

/* Opening libfabric's endpoint is most of what a connect costs here (about
 * 70 us on a small VM, mostly the first touch of its 18 KiB; bench/
 * RESULTS.md): a new EP opens it now, so that dat_ep_connect only connects,
 * as a raw libfabric program that opens its endpoints first.  Not an SRQ
 * EP (its receive side is set up at connect, srq.c), nor one without a DTO
 * EVD (it cannot connect), nor an EP of an IA that listens: a server
 * creates its EPs to accept, and an accept opens the request's endpoint,
 * so one opened ahead would be opened twice (a server creating an EP per
 * request set up connections 25-40 % slower).  Best effort: an EP without
 * one opens it at connect, as before. */
void dfi_ep_preopen(struct dfi_ep *ep)
{
	struct dfi_ia *ia = ep->hdr.ia;
	struct dfi_fep *fep;
	bool room;
	int rc;

	if (ep->srq || (!ep->req_evd && !ep->recv_evd))
		return;
	pthread_mutex_lock(&ia->cm_lock);
	/* the limit as it is now: a consumer may lower it after the IA
	 * opened, and spares must never take the last descriptors */
	room = ia->n_listening == 0 && ia->n_spares < spare_budget();
	if (room)
		ia->n_spares++;		/* reserved */
	pthread_mutex_unlock(&ia->cm_lock);
	if (!room)
		return;
	rc = dfi_progress_start(ia);	/* the EQ, and the CQs' watcher */
	pthread_mutex_lock(&ia->cm_lock);
	if (!rc)
		rc = ep_open_fep(ep, NULL, &fep);
	if (!rc)
		ep->spare = fep;
	else
		ia->n_spares--;
	pthread_mutex_unlock(&ia->cm_lock);
	if (rc)
		dfi_dbg(DFI_SS_EP, "EP %p: endpoint not opened ahead (%s): opened at connect",
			(void *)ep, strerror(rc < 0 ? -rc : rc));
}

void dfi_ep_close_fep(struct dfi_ep *ep)
{
	struct dfi_ia *ia = ep->hdr.ia;
	struct dfi_fep *fep;

	pthread_mutex_lock(&ia->cm_lock);
	if (ep->ud)
		dfi_ud_ep_release(ep);
	dfi_ep_drop_spare(ep);
	pthread_mutex_lock(&ep->post_lock);	/* no post is using it any more */
	fep = ep->fep;
	ep->fep = NULL;
	pthread_mutex_unlock(&ep->post_lock);
	/* No attempt is left to time out: dfi_ep_destroy keeps the EP in
	 * the IA's list until it retires it, and the progress thread's
	 * dfi_connect_timeouts would otherwise find it still ACTIVE_
	 * CONNECTION_PENDING there and shut down its NULL endpoint (found by
	 * tests/fuzz/fuzz_api: dat_ep_free of an EP with a timed connect). */
	ep->connect_deadline = 0;
	if (fep) {
		struct dfi_cq *cqs[EP_NCQS];

		ep_cqs(ep, cqs);
		if (ep->state == DAT_EP_STATE_CONNECTED)
			dfi_fep_shutdown(fep);
		dfi_fep_close_bound(fep, cqs, EP_NCQS);
	}
	pthread_mutex_unlock(&ia->cm_lock);
}

/* ------------------------------------------------------ CM event handling */

/* An event to post once ia->cm_lock is dropped: posting can trigger a CNO
 * whose proxy agent is user code, and no lock is held across user code.
 * The target EVD is referenced meanwhile, so it cannot be freed. */
struct cm_post {
	struct dfi_evq *q;
	DAT_EVENT ev;
	DAT_EVENT pre;			/* posted before ev when has_pre */
	bool has_pre;
	struct dfi_cr *cr;		/* a CR event: rejected if it does not fit */
	struct dfi_ep *broken;		/* an SRQ EP whose connection ended */
	/* its emulated atomics, flushed when its connection ended: posted
	 * after ev, on fq (held) */
	DAT_EVENT *flushed;
	int n_flushed;
	struct dfi_evd *fq;
};

/* The connection of an SRQ EP ended (cm_lock held): its completions are
 * settled and EP_BROKEN posted around the connection event (srq.c).  Not
 * for an EP being freed (its endpoint is closed first, under cm_lock): its
 * private CQ is about to go, and so is the EP. */
static void srq_ep_ended(struct cm_post *p, struct dfi_ep *ep)
{
	if (ep->srq && ep->established && ep->fep)
		p->broken = ep;
	ep->established = false;
}

static void conn_event(struct cm_post *p, struct dfi_ep *ep, DAT_EVENT_NUMBER num,
		       const void *pdata, size_t plen)
{
	struct dfi_ia *ia = ep->hdr.ia;

	/* the IB extension's counters (ib.c) */
	if (num == DAT_CONNECTION_EVENT_ESTABLISHED) {
		dfi_cnt_add(&ep->cnt[DCNT_EP_CONNECT], 1);
		dfi_cnt_add(&ia->cnt[ep->remote_port ? DCNT_IA_CM_ACTIVE_EST :
				     DCNT_IA_CM_PASSIVE_EST], 1);
	} else if (num == DAT_CONNECTION_EVENT_DISCONNECTED) {
		dfi_cnt_add(&ep->cnt[DCNT_EP_DISCONNECT], 1);
	} else {
		dfi_cnt_add(&ia->cnt[DCNT_IA_CM_ERR], 1);
	}
	dfi_trace(DFI_SS_CM, "EP %p: connection event %#x", (void *)ep, (unsigned)num);
	if (!ep->conn_evd)
		return;
	dfi_cnt_add(&ep->conn_evd->cnt[DCNT_EVD_CONN_CALLBACK], 1);
	memset(&p->ev, 0, sizeof(p->ev));
	p->ev.event_number = num;
	p->ev.event_data.connect_event_data.ep_handle = ep;
	if (plen) {
		memcpy(ep->pdata, pdata, plen);
		p->ev.event_data.connect_event_data.private_data = ep->pdata;
		p->ev.event_data.connect_event_data.private_data_size = (DAT_COUNT)plen;
	}
	if (!p->q) {		/* a second event goes to the same EVD */
		p->q = &ep->conn_evd->q;
		dfi_evq_hold(p->q);
	}
}

/* A CR of sp for the libfabric request req (cm_lock held), with the EP
 * made for it if sp is a DAT_PSP_PROVIDER_FLAG PSP; NULL without memory. */
static struct dfi_cr *cr_new(struct dfi_ia *ia, struct dfi_sp *sp, void *req)
{
	struct dfi_cr *cr = dfi_obj_new(ia, DFI_T_CR, sizeof(*cr));

	if (!cr)
		return NULL;
	if (sp->flags == DAT_PSP_PROVIDER_FLAG) {
		cr->ep = dfi_ep_new_tentative(ia);
		if (!cr->ep) {
			dfi_obj_retire(cr);
			return NULL;
		}
		cr->ep->cr = cr;
	}
	cr->sp = sp;
	sp->ncr++;
	cr->req = req;
	sp->used = true;
	return cr;
}

/* The DAT_CONNECTION_REQUEST_EVENT of cr into p (cm_lock held). */
static void cr_event(struct dfi_ia *ia, struct dfi_cr *cr, struct cm_post *p)
{
	struct dfi_sp *sp = cr->sp;

	dfi_cnt_add(&ia->cnt[DCNT_IA_SP_CR], 1);
	dfi_cnt_add(&sp->cr_evd->cnt[DCNT_EVD_CONN_CALLBACK], 1);
	memset(&p->ev, 0, sizeof(p->ev));
	p->ev.event_number = DAT_CONNECTION_REQUEST_EVENT;
	if (cr->ud) {
		((DAT_IB_EXTENSION_EVENT_DATA *)p->ev.event_extension_data)->type =
			DAT_IB_UD_CONNECT_REQUEST;
		p->ev.event_number = (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_REQUEST_EVENT;
	}
	p->ev.event_data.cr_arrival_event_data.sp_handle.psp_handle = sp;
	p->ev.event_data.cr_arrival_event_data.local_ia_address_ptr =
		(DAT_IA_ADDRESS_PTR)&ia->addr;
	p->ev.event_data.cr_arrival_event_data.conn_qual = sp->conn_qual;
	p->ev.event_data.cr_arrival_event_data.cr_handle = cr;
	p->cr = cr;
	p->q = &sp->cr_evd->q;
	dfi_evq_hold(p->q);
}

static void handle_connreq(struct dfi_ia *ia, struct dfi_sp *sp, struct dfi_cm_event *e,
			   struct cm_post *p)
{
	struct dfi_cr *cr;

	if (sp->freed || (sp->hdr.type == DFI_T_RSP && sp->used)) {
		/* freed, kept for its CRs; or an RSP's single use is spent */
		dfi_pep_reject(sp->pep, e->req, NULL, 0);
		return;
	}
	cr = cr_new(ia, sp, e->req);
	if (!cr) {
		dfi_pep_reject(sp->pep, e->req, NULL, 0);
		return;
	}
	cr->plen = (DAT_COUNT)e->plen;
	cr->ud = e->ud;
	memcpy(cr->pdata, e->pdata, e->plen);
	dfi_connreq_peer(ia->eq, e->req, &cr->remote);
	if (cr->ep)
		cr->ep->remote = cr->remote;	/* dat_ep_query's, before the accept */
	cr_event(ia, cr, p);
}

static DAT_EVENT_NUMBER error_event(int err, bool connected)
{
	if (connected)
		return DAT_CONNECTION_EVENT_BROKEN;
	switch (err) {
	case ECONNREFUSED: return DAT_CONNECTION_EVENT_PEER_REJECTED;
	case ETIMEDOUT: return DAT_CONNECTION_EVENT_TIMED_OUT;
	case ENETUNREACH: case EHOSTUNREACH: return DAT_CONNECTION_EVENT_UNREACHABLE;
	default: return DAT_CONNECTION_EVENT_NON_PEER_REJECTED;
	}
}

/* The connection ended under libfabric (cm_lock held): the peer closed
 * it, or it broke.  libfabric flushed what was posted when it found out,
 * but a receive posted between then and this event (the EP still looked
 * connected) would sit in its queue for ever: nothing reads a dead
 * connection.  Once the EP is DISCONNECTED no later post reaches the
 * endpoint; under the same post_lock every receive descriptor is
 * cancelled (one libfabric does not queue is ignored), and a stale one
 * comes back flushed.  A send posted in the same window is written to the
 * socket at once and completes or fails there (libfabric cannot cancel a
 * send); only one that found the socket full could stay, which a dead
 * peer's socket is not. */
static void ep_lost(struct dfi_ep *ep)
{
	pthread_mutex_lock(&ep->post_lock);
	dfi_ep_state_locked(ep, DAT_EP_STATE_DISCONNECTED);
	if (ep->fep) {
		recvs_cancel(ep, ep->fep);
		dfi_fep_recvs_over(ep->fep);
	}
	pthread_mutex_unlock(&ep->post_lock);
}

/* ep's socket has just joined the poll fds of its CQs, to be applied at
 * each CQ's next pass: run one, so that whoever sleeps on a CQ's fd - a
 * waiter, the progress thread - wakes for data on this connection too
 * (fabric/cq.c, the poll-fd mirror). */
static void ep_cqs_refresh(struct dfi_ep *ep)
{
	struct dfi_cq *cqs[EP_NCQS];

	ep_cqs(ep, cqs);
	for (int i = 0; i < EP_NCQS; i++)
		if (cqs[i] && (i == 0 || cqs[i] != cqs[0]))
			dfi_cq_progress(cqs[i]);
}

/* Translate one CM event (cm_lock held) into at most one DAT event. */
static void translate(struct dfi_ia *ia, struct dfi_cm_event *e, struct cm_post *p)
{
	struct dfi_obj *o = e->ctx;
	struct dfi_ep *ep;

	if (e->type == DFI_CM_CONNREQ) {
		if (o && (o->type == DFI_T_PSP || o->type == DFI_T_RSP ||
			  o->type == DFI_T_CSP || o->type == DFI_T_SP_GONE))
			handle_connreq(ia, (struct dfi_sp *)o, e, p);
		else
			dfi_connreq_free(ia->eq, e->req);
		return;
	}
	if (o && o->type == DFI_T_UD_CM) {
		struct dfi_evd *evd = dfi_ud_event(ia, e, &p->ev);

		if (evd)
			p->q = &evd->q;		/* held */
		return;
	}
	if (e->type == DFI_CM_UD_RESOLVED) {
		dfi_ah_free(e->ah);	/* its resolution was freed */
		return;
	}
	ep = dfi_obj_get(o, DFI_T_EP);
	if (!ep)
		return;		/* an endpoint already closed */
	/* An event of an endpoint closed since (libfabric 1.17 tcp leaves
	 * them queued): the EP is being reset or freed, and that connection
	 * is over. */
	if (!ep->fep)
		return;
	switch (e->type) {
	case DFI_CM_CONNECTED:
		if (ep->state == DAT_EP_STATE_DISCONNECTED)
			break;	/* too late: the connect timed out, and was shut down */
		ep->connect_deadline = 0;
		dfi_ep_set_state(ep, DAT_EP_STATE_CONNECTED);
		ep->established = true;
		atomic_store_explicit(&ep->cut, false, memory_order_relaxed);
		if (ep->fep)
			dfi_fep_arm_liveness(ep->fep, ia->peer_timeout_ms, NULL);
		ep_cqs_refresh(ep);
		conn_event(p, ep, DAT_CONNECTION_EVENT_ESTABLISHED, e->pdata, e->plen);
		break;
	case DFI_CM_SHUTDOWN:
		if (ep->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING) {
			/* An accepted EP's shutdown before its FI_CONNECTED
			 * (seen once, under TSan; most likely libfabric 1.17
			 * tcp reporting the peer's close, found by the data
			 * path, first).  tcp reports a shutdown only for a
			 * connection that was up, and the peer had its
			 * ESTABLISHED: so does this side, first.  The late
			 * FI_CONNECTED finds it disconnected. */
			ep->established = true;
			conn_event(p, ep, DAT_CONNECTION_EVENT_ESTABLISHED, NULL, 0);
			p->pre = p->ev;
			p->has_pre = p->q != NULL;
		}
		if (ep->state != DAT_EP_STATE_DISCONNECTED) {
			/* the kernel gave up on a silent peer: what IB calls
			 * a retry error, not the peer's disconnect */
			int aborted = ep->state == DAT_EP_STATE_CONNECTED && ep->fep ?
				      dfi_fep_aborted(ep->fep) : 0;

			if (aborted == ETIMEDOUT)
				dfi_warn(DFI_SS_CM, "EP %p: peer silent for %u ms: connection broken",
					 (void *)ep, ia->peer_timeout_ms);
			else if (aborted)
				dfi_warn(DFI_SS_CM, "EP %p: connection broken: a request failed, here "
					 "or at the peer, or the peer broke the protocol (said above, "
					 "or in the peer's log)", (void *)ep);
			ep_lost(ep);
			srq_ep_ended(p, ep);
			p->n_flushed = dfi_dto_atomic_flush(ep, &p->flushed, &p->fq);
			conn_event(p, ep, aborted ? DAT_CONNECTION_EVENT_BROKEN :
				   DAT_CONNECTION_EVENT_DISCONNECTED, NULL, 0);
		}
		break;
	case DFI_CM_ERROR: {
		bool was = ep->state == DAT_EP_STATE_CONNECTED;
		bool pending = ep->state == DAT_EP_STATE_DISCONNECT_PENDING;

		if (ep->state == DAT_EP_STATE_DISCONNECTED)
			break;
		dfi_dbg(DFI_SS_CM, "EP %p: connection error %s", (void *)ep, strerror(e->err));
		ep_lost(ep);
		srq_ep_ended(p, ep);
		p->n_flushed = dfi_dto_atomic_flush(ep, &p->flushed, &p->fq);
		conn_event(p, ep, pending ? DAT_CONNECTION_EVENT_DISCONNECTED :
			   error_event(e->err, was), e->pdata, e->plen);
		break;
	}
	case DFI_CM_ATOMIC_DONE: {
		struct dfi_evd *evd = dfi_dto_atomic_done(ep, e, &p->ev);

		if (evd)
			p->q = &evd->q;		/* held */
		break;
	}
	default:
		break;
	}
}

/* An EP whose request failed in the provider while it was connected (the
 * CQ reader's dto_fault) loses its connection: the backend ends it, and
 * its events follow as for any broken connection.  One walk takes every
 * EP flagged since the last. */
void dfi_ep_faults(struct dfi_ia *ia)
{
	if (!atomic_exchange(&ia->faults, false))
		return;
	pthread_mutex_lock(&ia->cm_lock);
	pthread_mutex_lock(&ia->lock);	/* the object list; after cm_lock */
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs; o = o->next) {
		struct dfi_ep *ep = (struct dfi_ep *)o;
		int err;

		if (o->type != DFI_T_EP || !(err = atomic_exchange(&ep->fault, 0)))
			continue;
		if (ep->fep && ep->state == DAT_EP_STATE_CONNECTED)
			dfi_fep_fault(ep->fep, err);	/* (the backend says why) */
	}
	pthread_mutex_unlock(&ia->lock);
	pthread_mutex_unlock(&ia->cm_lock);
}

/* A UD EP's resolutions past their deadline (cm_lock and the IA lock
 * held): each reports DAT_IB_UD_CONNECTION_ERROR_EVENT into posts[n..16);
 * the new n.  *more: one is left to time out. */
static int ud_timeouts(struct dfi_ia *ia, struct dfi_ep *ep, uint64_t now, struct cm_post *posts,
		       int n, bool *more)
{
	for (struct dfi_ud_cm *cm = ep->ud_cms; cm; cm = cm->next) {
		struct dfi_cm_event e = { .type = DFI_CM_ERROR, .ctx = cm, .err = ETIMEDOUT };
		struct dfi_evd *evd;

		if (!cm->hs || !cm->deadline)
			continue;
		if (now < cm->deadline || n == 16) {
			*more = true;
			continue;
		}
		dfi_info(DFI_SS_CM, "UD EP %p: address resolution timed out", (void *)ep);
		cm->deadline = 0;
		memset(&posts[n], 0, sizeof(posts[n]));
		evd = dfi_ud_event(ia, &e, &posts[n].ev);	/* abandons the handshake */
		if (evd)
			posts[n++].q = &evd->q;
	}
	return n;
}

bool dfi_connect_timeouts(struct dfi_ia *ia)
{
	struct cm_post posts[16];
	struct dfi_ep *gone[16];		/* the timed-out EPs among them */
	uint64_t now = dfi_now_ns();
	bool more = false;
	int n = 0, ngone = 0;

	pthread_mutex_lock(&ia->cm_lock);
	if (!ia->connect_timers) {
		pthread_mutex_unlock(&ia->cm_lock);
		return false;
	}
	pthread_mutex_lock(&ia->lock);	/* the object list; after cm_lock, as handle_connreq */
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs; o = o->next) {
		struct dfi_ep *ep = (struct dfi_ep *)o;

		/* (ud_cms, not ud: only what cm_lock guards is read here, and a
		 * new EP is in the list before dat_ep_create has filled it) */
		if (o->type == DFI_T_EP && ep->ud_cms) {
			n = ud_timeouts(ia, ep, now, posts, n, &more);
			continue;
		}
		if (o->type != DFI_T_EP || !ep->connect_deadline)
			continue;
		if (ep->state != DAT_EP_STATE_ACTIVE_CONNECTION_PENDING) {
			ep->connect_deadline = 0;	/* settled otherwise */
			continue;
		}
		if (now < ep->connect_deadline || n == 16) {
			more = true;
			continue;
		}
		{
			char a[INET_ADDRSTRLEN] = "?";

			inet_ntop(AF_INET, &ep->remote.sin_addr, a, sizeof(a));
			dfi_info(DFI_SS_CM, "EP %p: connect to %s:%u timed out", (void *)ep, a,
				 ntohs(ep->remote.sin_port));
		}
		ep->connect_deadline = 0;
		dfi_ep_set_state(ep, DAT_EP_STATE_DISCONNECTED);	/* later CM events are ignored */
		dfi_fep_shutdown(ep->fep);		/* give up the attempt */
		memset(&posts[n], 0, sizeof(posts[n]));
		conn_event(&posts[n], ep, DAT_CONNECTION_EVENT_TIMED_OUT, NULL, 0);
		n++;
		gone[ngone++] = ep;
	}
	ia->connect_timers = more;
	pthread_mutex_unlock(&ia->lock);
	/* Its receives went to its endpoint at the connect: they come back
	 * flushed (on an RDM endpoint, shared with other EPs, nothing else
	 * would end them; the soak found 8 never completed).  After ia->lock:
	 * ep_lost takes the post lock. */
	for (int i = 0; i < ngone; i++)
		ep_lost(gone[i]);
	pthread_mutex_unlock(&ia->cm_lock);
	for (int i = 0; i < n; i++) {
		if (!posts[i].q)
			continue;
		dfi_evq_post(posts[i].q, &posts[i].ev);
		dfi_evq_unhold(posts[i].q);
	}
	return more;
}

/* ------------------------------------------------ order across connections */

/*
 * A peer's end of one connection comes after the ESTABLISHEDs it caused
 * before it on others, as InfiniBand's CM orders them: dtestcm's server
 * takes the first c events of its connection EVD for its c ESTABLISHEDs.
 * The RDM backend's manager orders them itself (docs/rdm.md, "Order
 * across connections").  libfabric's CM does not: tcp 1.17 queues the
 * accepting side's FI_CONNECTED after it has sent the accept, and a peer
 * quick to see that accept and disconnect another connection can have
 * that one's FI_SHUTDOWN queued first, when the thread that sent the
 * accept is preempted before its fi_eq_write (dtestcm -c 1000 on tcp hung
 * so 3 times in about 160 runs under load).  So a shutdown of a connected
 * EP is held back while another EP of the IA has accepted a connection of
 * the same peer host and is not connected yet, at most HELD_END_MS: the
 * events read meanwhile go first, the held one behind them.
 */
#define HELD_END_MS	2000u

struct dfi_held_end {
	struct dfi_cm_event e;
	uint64_t until;
};

/* Whether e waits for an accept of the same host (cm_lock held). */
static bool end_waits(struct dfi_ia *ia, const struct dfi_cm_event *e)
{
	struct dfi_ep *ep;
	bool wait = false;

	if (e->type != DFI_CM_SHUTDOWN || dfi_fabric_limits(ia->fab)->cm_ordered)
		return false;
	ep = dfi_obj_get(e->ctx, DFI_T_EP);
	/* (an accepted EP's shutdown may come before its own FI_CONNECTED:
	 * translate then reports both) */
	if (!ep || !ep->fep || ep->ud || (ep->state != DAT_EP_STATE_CONNECTED &&
					  ep->state != DAT_EP_STATE_PASSIVE_CONNECTION_PENDING))
		return false;
	pthread_mutex_lock(&ia->lock);	/* the object list; after cm_lock */
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs && !wait; o = o->next) {
		const struct dfi_ep *z = (const struct dfi_ep *)o;

		wait = o->type == DFI_T_EP && z != ep &&
		       z->state == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING &&
		       z->remote.sin_addr.s_addr == ep->remote.sin_addr.s_addr;
	}
	pthread_mutex_unlock(&ia->lock);
	return wait;
}

/* eq_lock held: e is held back; false without memory (it goes now). */
static bool end_hold(struct dfi_ia *ia, const struct dfi_cm_event *e)
{
	if (ia->n_held_ends == ia->cap_held_ends) {
		int cap = ia->cap_held_ends ? 2 * ia->cap_held_ends : 8;
		struct dfi_held_end *more = realloc(ia->held_ends, (size_t)cap * sizeof(*more));

		if (!more)
			return false;
		ia->held_ends = more;
		ia->cap_held_ends = cap;
	}
	ia->held_ends[ia->n_held_ends].e = *e;
	ia->held_ends[ia->n_held_ends].until = dfi_now_ns() + HELD_END_MS * 1000000ull;
	ia->n_held_ends++;
	atomic_store_explicit(&ia->ends_held, true, memory_order_relaxed);
	return true;
}

/* eq_lock and cm_lock held: a held end whose wait is over, into e. */
static bool end_release(struct dfi_ia *ia, struct dfi_cm_event *e)
{
	uint64_t now = dfi_now_ns();

	for (int i = 0; i < ia->n_held_ends; i++) {
		struct dfi_held_end *h = &ia->held_ends[i];

		if (now < h->until && end_waits(ia, &h->e))
			continue;
		*e = h->e;
		memmove(h, h + 1, (size_t)(ia->n_held_ends - i - 1) * sizeof(*h));
		if (--ia->n_held_ends == 0)
			atomic_store_explicit(&ia->ends_held, false, memory_order_relaxed);
		return true;
	}
	return false;
}

void dfi_cm_held_free(struct dfi_ia *ia)
{
	free(ia->held_ends);
	ia->held_ends = NULL;
	ia->n_held_ends = ia->cap_held_ends = 0;
	atomic_store_explicit(&ia->ends_held, false, memory_order_relaxed);
}

/* Read and deliver every pending CM event (eq_lock held, so that two readers
 * cannot post one EP's events out of order).  An EP that translate() found
 * alive cannot be freed until this returns: the progress thread runs it
 * inside its batch, a consumer counted in ia->n_pulling, and
 * dfi_progress_unwatch_rcq waits for both. */
static void post_flushed(struct cm_post *p)
{
	dfi_dto_atomic_post(p->fq, p->flushed, p->n_flushed);
}

int dfi_cm_handle(struct dfi_ia *ia)
{
	struct dfi_cm_event e;
	int handled = 0;

	for (;;) {
		struct cm_post p = { 0 };
		bool held = false;
		int rc = 1;

		pthread_mutex_lock(&ia->cm_lock);
		if (!ia->n_held_ends || !end_release(ia, &e))
			while ((rc = dfi_eq_read(ia->eq, &e)) > 0 && end_waits(ia, &e) &&
			       end_hold(ia, &e))
				held = true;	/* the events behind it first */
		if (rc > 0)
			translate(ia, &e, &p);
		pthread_mutex_unlock(&ia->cm_lock);
		if (held)
			dfi_progress_kick(ia);	/* its tick looks again */
		if (rc <= 0) {
			if (rc < 0)
				dfi_warn(DFI_SS_CM, "reading the event queue: %s", strerror(-rc));
			return handled;
		}
		handled++;
		if (p.broken)
			dfi_srq_ep_settle(p.broken);
		if (!p.q) {
			post_flushed(&p);
			if (p.broken)
				dfi_post_async(ia, DAT_ASYNC_ERROR_EP_BROKEN, p.broken,
					       DAT_EP_TRANSFER_TO_ERROR);
			continue;
		}
		if (p.has_pre)
			dfi_evq_post(p.q, &p.pre);
		if (dfi_evq_post(p.q, &p.ev) != 0 && p.cr)
			/* the CR EVD overflowed: refuse on the wire, as OFA does
			 * (the SP is alive: it counts this CR) */
			cr_refuse(p.cr, NULL, 0);
		dfi_evq_unhold(p.q);
		post_flushed(&p);	/* after the connection event, as IB's flush */
		/* after the connection event: dtestsrq waits for that first,
		 * then for EP_BROKEN naming the same EP (dat-clients.md 3.4) */
		if (p.broken)
			dfi_post_async(ia, DAT_ASYNC_ERROR_EP_BROKEN, p.broken,
				       DAT_EP_TRANSFER_TO_ERROR);
	}
}

static _Thread_local bool pulling;

bool dfi_cm_pulling(void)
{
	return pulling;
}

/* libfabric's tcp provider moves connections only inside fi_eq_read, and
 * the progress thread's read is a cross-thread hop per CM event (on 2 CPUs
 * its wake-up preempts the consumer): a consumer that polls for connection
 * events reads the EQ itself, as a raw libfabric program does, and the
 * thread stays off the EQ while it does (progress.c, the EQ lease).
 * Nothing waits: if the thread (or another consumer) is reading, it will
 * deliver what there is. */
int dfi_cm_pull(struct dfi_ia *ia)
{
	int n;

	if (!atomic_load_explicit(&ia->eq_open, memory_order_acquire))
		return -ENOTCONN;	/* no listener or connect yet */
	if (pthread_mutex_trylock(&ia->eq_lock))
		return -EBUSY;
	/* again under the lock: dfi_progress_stop closes the EQ once it has
	 * taken the lock after clearing eq_open */
	if (!atomic_load_explicit(&ia->eq_open, memory_order_acquire)) {
		pthread_mutex_unlock(&ia->eq_lock);
		return -ENOTCONN;
	}
	pthread_mutex_lock(&ia->lock);
	ia->n_pulling++;
	pthread_mutex_unlock(&ia->lock);
	pulling = true;
	n = dfi_cm_handle(ia);
	pulling = false;
	pthread_mutex_lock(&ia->lock);
	if (--ia->n_pulling == 0)
		pthread_cond_broadcast(&ia->batch_done);
	pthread_mutex_unlock(&ia->lock);
	pthread_mutex_unlock(&ia->eq_lock);
	return n;
}

/* ------------------------------------------------------------ DAT 2.0 */

/* dat_cr_handoff: the request goes to the live service point of this IA
 * listening on qualifier `qual` (a PSP, a CSP by its port, or an unused
 * RSP), as a new CR there with its own CONNECTION_REQUEST event; this CR
 * is destroyed, with the EP the provider made for it if any.  The
 * libfabric request moves as it is (OFA uDAPL does not implement the
 * call: this follows the DAT 2.0 text). */
DAT_RETURN dfi_cr_handoff(DAT_CR_HANDLE h, DAT_CONN_QUAL qual)
{
	struct dfi_cr *cr = dfi_obj_get(h, DFI_T_CR), *cr2;
	struct dfi_sp *target = NULL, *gone;
	struct cm_post p = { 0 };
	struct dfi_ep *old_ep;
	struct dfi_ia *ia;

	if (!cr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR),
				  "%p is not a CR handle", (void *)h);
	ia = cr->hdr.ia;
	pthread_mutex_lock(&ia->cm_lock);
	pthread_mutex_lock(&ia->lock);	/* the object list, after cm_lock */
	for (struct dfi_obj *o = ia->objs.next; o != &ia->objs; o = o->next) {
		struct dfi_sp *sp = (struct dfi_sp *)o;

		if ((o->type == DFI_T_PSP || o->type == DFI_T_CSP ||
		     (o->type == DFI_T_RSP && !sp->used)) && sp->conn_qual == qual) {
			target = sp;
			break;
		}
	}
	pthread_mutex_unlock(&ia->lock);
	if (!target) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "no live service point of this IA listens on qualifier %llu",
				  (unsigned long long)qual);
	}
	cr2 = cr_new(ia, target, cr->req);
	if (!cr2) {
		pthread_mutex_unlock(&ia->cm_lock);
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY),
				  "no memory for the handed-off CR");
	}
	cr2->remote = cr->remote;
	if (cr2->ep)
		cr2->ep->remote = cr->remote;
	cr2->plen = cr->plen;
	memcpy(cr2->pdata, cr->pdata, sizeof(cr2->pdata));
	cr->req = NULL;			/* cr2's now */
	old_ep = cr_drop_ep(cr);
	gone = cr_done(cr);
	cr_event(ia, cr2, &p);
	pthread_mutex_unlock(&ia->cm_lock);
	cr_retire(cr, gone);
	if (old_ep)
		dfi_ep_destroy(old_ep);
	dfi_dbg(DFI_SS_CM, "CR %p handed off to SP %p (qualifier %llu) as CR %p", (void *)cr,
		(void *)target, (unsigned long long)qual, (void *)cr2);
	if (dfi_evq_post(p.q, &p.ev) != 0)
		cr_refuse(cr2, NULL, 0);	/* the target's CR EVD overflowed */
	dfi_evq_unhold(p.q);
	return DAT_SUCCESS;
}

/* Common service points.  A CSP is a listener addressed as a socket is:
 * the IA address and a TCP port (port 0: any, reported by dat_csp_query),
 * with a communicator that must describe TCP over IPv4.  It is a PSP whose
 * qualifier is that port: dat_ep_common_connect to the address, or
 * dat_ep_connect with the port as qualifier, reach it; its requests are
 * CRs as a PSP's (sp_handle.csp_handle names it). */
DAT_RETURN dfi_csp_create(DAT_IA_HANDLE h, DAT_COMM *comm, DAT_IA_ADDRESS_PTR addr,
			  DAT_EVD_HANDLE evdh, DAT_CSP_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	DAT_COMM c = { .domain = AF_INET, .type = SOCK_STREAM, .protocol = IPPROTO_TCP };
	struct sockaddr_in a;
	struct dfi_evd *evd;
	struct dfi_sp *sp;
	DAT_CONN_QUAL qual;
	DAT_RETURN rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (comm && ((comm->domain != 0 && comm->domain != AF_INET) ||
		     (comm->type != 0 && comm->type != SOCK_STREAM) ||
		     (comm->protocol != 0 && comm->protocol != IPPROTO_TCP)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "communicator {domain %d, type %d, protocol %d}: only TCP over "
				  "IPv4 (AF_INET, SOCK_STREAM)", comm->domain, comm->type,
				  comm->protocol);
	if (!addr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "CSP address is NULL");
	if (addr->sa_family != AF_INET)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED),
				  "CSP address family %d: only IPv4 (AF_INET)", (int)addr->sa_family);
	memcpy(&a, addr, sizeof(a));
	if (a.sin_addr.s_addr != htonl(INADDR_ANY) && a.sin_addr.s_addr != ia->addr.sin_addr.s_addr)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED),
				  "CSP address is neither the IA's nor INADDR_ANY");
	if (!(evd = dfi_evd_of(ia, evdh, DAT_EVD_CR_FLAG)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR),
				  "%p is not a CR EVD of this IA", (void *)evdh);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5),
				  "CSP handle pointer is NULL");
	if (comm)
		c = *comm;
	qual = ntohs(a.sin_port);	/* 0: any port (sp_create) */
	rc = sp_create(ia, DFI_T_CSP, &qual, evd, DAT_PSP_CONSUMER_FLAG, NULL, &sp);
	if (rc != DAT_SUCCESS)
		return rc;
	sp->comm = c;
	sp->addr = ia->addr;
	sp->addr.sin_port = htons((uint16_t)qual);
	*out = sp;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_csp_query(DAT_CSP_HANDLE h, DAT_CSP_PARAM_MASK mask, DAT_CSP_PARAM *p)
{
	struct dfi_sp *sp = dfi_obj_get(h, DFI_T_CSP);

	if (!sp)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CSP),
				  "%p is not a CSP handle", (void *)h);
	if (mask & ~(DAT_CSP_PARAM_MASK)DAT_CSP_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "CSP param mask 0x%x has unknown bits", (unsigned)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "CSP param pointer is NULL");
	p->ia_handle = sp->hdr.ia;
	p->comm = &sp->comm;
	p->address_ptr = (DAT_IA_ADDRESS_PTR)&sp->addr;
	p->evd_handle = sp->cr_evd;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_csp_free(DAT_CSP_HANDLE h)
{
	struct dfi_sp *sp = dfi_obj_get(h, DFI_T_CSP);

	if (!sp)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CSP),
				  "%p is not a CSP handle", (void *)h);
	dfi_sp_destroy(sp);
	return DAT_SUCCESS;
}
