/*
 * The IB extension's unreliable-datagram endpoints over RDM (docs/rdm.md,
 * section 7).  A UD endpoint is an RDM one with an id and no peer: its
 * receives match its own tag, and each send names its destination.  A
 * destination is an address handle, resolved by a handshake with the
 * peer's UD endpoint: rcm's REQ (flagged UD), REP and RTU, as for a
 * connection, and then the control channel closes, for nothing stays
 * connected.  Both sides come out with the other's fabric address and tag,
 * and the connecting side's hello (rdm_path_up) has made the fabric path
 * before either reports.  A handshake is an rdm_fep of its own, sharing its
 * UD endpoint's id, tags and provider endpoint, so that rcm and ep.c's
 * translate carry it as any connection until its ESTABLISHED.
 */
#include "rdm.h"
#include "util/arena.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

/* A handshake of ud (lock held): its identity is ud's. */
static struct rdm_fep *hs_new(struct rdm_fep *ud, void *ctx)
{
	struct rdm_fep *e = dfi_arena_calloc(sizeof(*e));

	if (!e)
		return NULL;
	e->base.be = &dfi_rdm_backend;
	e->rf = ud->rf;
	e->ctx = ctx;
	e->ud_hs = true;
	e->peer = FI_ADDR_UNSPEC;
	e->ep = ud->ep;
	e->rep = ud->rep;
	e->id = ud->id;
	e->gen = ud->gen;
	e->rtag = ud->rtag;
	return e;
}

int dfi_rdm_ud_connect(struct dfi_fep *fe, const struct sockaddr_in *dest, const void *pdata,
		       size_t plen, void *ctx, struct dfi_fep **hs)
{
	struct rdm_fep *ud = RDM_FEP(fe), *e;
	struct rdm_fabric *rf = ud->rf;
	struct dfi_rcm_end self;
	int rc;

	pthread_mutex_lock(&rf->lock);
	e = hs_new(ud, ctx);
	rc = e ? 0 : -ENOMEM;
	if (e) {
		rdm_self_end(e, &self);
		self.ud = true;
		e->peer_in = *dest;
		rc = dfi_rcm_connect(rf->cm, dest, ntohs(dest->sin_port), &self, pdata, plen, e,
				     &e->conn);
	}
	pthread_mutex_unlock(&rf->lock);
	if (rc) {
		dfi_warn(DFI_SS_FABRIC, "UD address resolution: connect: %s", strerror(-rc));
		dfi_arena_free(e);
		return rc;
	}
	*hs = &e->base;
	return 0;
}

/* The request is the handshake's once this returns 0, and the caller's
 * otherwise, as dfi_fep_open's. */
int dfi_rdm_ud_accept(struct dfi_fep *fe, void *p, const void *pdata, size_t plen, void *ctx,
		      struct dfi_fep **hs)
{
	struct rdm_fep *ud = RDM_FEP(fe), *e;
	struct rdm_fabric *rf = ud->rf;
	struct rdm_req *req = p;
	struct dfi_rcm_end self;
	int rc;

	pthread_mutex_lock(&rf->lock);
	e = hs_new(ud, ctx);
	rc = e ? rdm_peer_get(rf, e, &req->remote) : -ENOMEM;
	if (!rc) {
		e->stag = RDM_TAG(req->remote.id, req->remote.gen);
		e->peer_in = req->peer;
		rdm_self_end(e, &self);
		rc = dfi_rcm_accept(req->conn, &self, pdata, plen, e);
		if (rc) {
			e->peer_ref->refs--;
		} else {
			int r;

			e->conn = req->conn;
			r = rdm_hello_recv(e);
			if (r)
				dfi_warn(DFI_SS_FABRIC, "UD handshake: posting for the hello: %s",
					 fi_strerror(-r));
		}
	}
	pthread_mutex_unlock(&rf->lock);
	if (rc) {
		dfi_warn(DFI_SS_FABRIC, "UD address resolution: accept: %s", strerror(-rc));
		dfi_arena_free(e);
		return rc;
	}
	free(req);
	*hs = &e->base;
	return 0;
}

/* ep.c's translate, at the handshake's ESTABLISHED (lock held): the peer's
 * address handle takes the handshake's AV reference, and the control
 * channel closes. */
void rdm_ud_resolved(struct rdm_fep *hs, struct dfi_cm_event *ev)
{
	struct rdm_ah *a = calloc(1, sizeof(*a));

	ev->ctx = hs->ctx;
	rdm_conn_gone(hs);
	if (!a) {
		ev->type = DFI_CM_ERROR;
		ev->err = ENOMEM;
		return;
	}
	a->base.be = &dfi_rdm_backend;
	a->rf = hs->rf;
	a->peer = hs->peer_ref;
	a->addr = hs->peer;
	a->stag = hs->stag;
	hs->peer_ref = NULL;
	ev->type = DFI_CM_UD_RESOLVED;
	ev->ah = &a->base;
	ev->qpn = (uint32_t)hs->stag;	/* the peer endpoint's id */
}

void dfi_rdm_ah_free(struct dfi_ah *ah)
{
	struct rdm_ah *a = (struct rdm_ah *)ah;

	pthread_mutex_lock(&a->rf->lock);
	a->peer->refs--;
	pthread_mutex_unlock(&a->rf->lock);
	free(a);
}
