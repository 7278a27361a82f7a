/* Connection management over libfabric MSG endpoints: the IA's event queue,
 * listeners, active endpoints, and the data-path posts. */
#include "fabric_int.h"
#include "util/log.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/uio.h>
#include <stdlib.h>
#include <string.h>

struct dfi_eq {
	struct fid_eq *eq;
	struct fid_fabric *fabric;
	int fd;
};

struct dfi_pep {
	struct fid_pep *pep;
	struct fi_info *info;
};

struct dfi_fep {
	struct fid_ep *ep;
	struct fi_info *info;
};

struct dfi_srx {
	struct fid_ep *srx;
};

int dfi_eq_open(struct dfi_fabric *f, struct dfi_eq **out)
{
	struct fi_eq_attr attr = { .size = 4096, .wait_obj = FI_WAIT_FD };
	struct dfi_eq *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	q->fabric = f->fabric;
	rc = fi_eq_open(f->fabric, &attr, &q->eq, NULL);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_eq_open: %s", fi_strerror(-rc));
		free(q);
		return rc;
	}
	rc = fi_control(&q->eq->fid, FI_GETWAIT, &q->fd);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_control(eq, FI_GETWAIT): %s", fi_strerror(-rc));
		fi_close(&q->eq->fid);
		free(q);
		return rc;
	}
	*out = q;
	return 0;
}

void dfi_eq_close(struct dfi_eq *q)
{
	if (!q)
		return;
	fi_close(&q->eq->fid);
	free(q);
}

int dfi_eq_fd(struct dfi_eq *q)
{
	return q->fd;
}

int dfi_eq_trywait(struct dfi_eq *q)
{
	struct fid *fids[1] = { &q->eq->fid };
	int rc = fi_trywait(q->fabric, fids, 1);

	return rc == -FI_EAGAIN ? -EAGAIN : rc;
}

int dfi_eq_read(struct dfi_eq *q, struct dfi_cm_event *ev)
{
	/* the entry ends in a flexible array: the private data follows it */
	_Alignas(struct fi_eq_cm_entry) uint8_t raw[sizeof(struct fi_eq_cm_entry) + DFI_PDATA_MAX];
	struct fi_eq_cm_entry *ent = (struct fi_eq_cm_entry *)raw;
	uint32_t event;
	ssize_t n;

	memset(ev, 0, sizeof(*ev));
	n = fi_eq_read(q->eq, &event, raw, sizeof(raw), 0);
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err = { 0 };
		uint8_t edata[DFI_PDATA_MAX];

		err.err_data = edata;
		err.err_data_size = sizeof(edata);
		n = fi_eq_readerr(q->eq, &err, 0);
		if (n < 0)
			return (int)n;
		ev->type = DFI_CM_ERROR;
		ev->ctx = err.fid ? err.fid->context : NULL;
		ev->err = err.err ? err.err : EIO;
		if (err.err_data_size && err.err_data_size <= sizeof(ev->pdata)) {
			memcpy(ev->pdata, err.err_data, err.err_data_size);
			ev->plen = err.err_data_size;
		}
		if (err.err == ECONNREFUSED && !err.err_data_size)
			ev->plen = 0;
		return 1;
	}
	if (n < 0)
		return (int)n;
	ev->ctx = ent->fid ? ent->fid->context : NULL;
	if ((size_t)n > sizeof(*ent)) {
		ev->plen = (size_t)n - sizeof(*ent);
		memcpy(ev->pdata, raw + sizeof(*ent), ev->plen);
	}
	switch (event) {
	case FI_CONNREQ:
		ev->type = DFI_CM_CONNREQ;
		ev->req = ent->info;
		break;
	case FI_CONNECTED:
		ev->type = DFI_CM_CONNECTED;
		break;
	case FI_SHUTDOWN:
		ev->type = DFI_CM_SHUTDOWN;
		break;
	default:
		dfi_warn(DFI_SS_FABRIC, "unexpected EQ event %u ignored", event);
		return 0;
	}
	return 1;
}

void dfi_connreq_free(void *req)
{
	fi_freeinfo(req);
}

void dfi_connreq_peer(void *req, struct sockaddr_in *peer)
{
	struct fi_info *info = req;

	memset(peer, 0, sizeof(*peer));
	if (info->dest_addr && info->dest_addrlen >= sizeof(*peer))
		memcpy(peer, info->dest_addr, sizeof(*peer));
}

int dfi_pep_listen(struct dfi_fabric *f, struct dfi_eq *eq, uint16_t port, void *ctx,
		   struct dfi_pep **out, uint16_t *bound)
{
	struct dfi_pep *p = calloc(1, sizeof(*p));
	struct sockaddr_in *sin;
	size_t len = sizeof(*sin);
	int rc;

	if (!p)
		return -ENOMEM;
	p->info = fi_dupinfo(f->info);
	if (!p->info) {
		free(p);
		return -ENOMEM;
	}
	sin = p->info->src_addr;
	if (!sin || p->info->src_addrlen < sizeof(*sin)) {
		fi_freeinfo(p->info);
		free(p);
		return -EINVAL;
	}
	sin->sin_port = htons(port);
	rc = fi_passive_ep(f->fabric, p->info, &p->pep, ctx);
	if (!rc)
		rc = fi_pep_bind(p->pep, &eq->eq->fid, 0);
	if (!rc)
		rc = fi_listen(p->pep);
	if (rc) {
		if (rc != -FI_EADDRINUSE)
			dfi_err(DFI_SS_FABRIC, "listen on port %u: %s", port, fi_strerror(-rc));
		if (p->pep)
			fi_close(&p->pep->fid);
		fi_freeinfo(p->info);
		free(p);
		return rc == -FI_EADDRINUSE ? -EADDRINUSE : rc;
	}
	if (bound) {
		struct sockaddr_in got;

		*bound = port;
		if (fi_getname(&p->pep->fid, &got, &len) == 0)
			*bound = ntohs(got.sin_port);
	}
	*out = p;
	return 0;
}

void dfi_pep_close(struct dfi_pep *p)
{
	if (!p)
		return;
	fi_close(&p->pep->fid);
	fi_freeinfo(p->info);
	free(p);
}

int dfi_pep_reject(struct dfi_pep *p, void *req, const void *pdata, size_t plen)
{
	struct fi_info *info = req;
	int rc = fi_reject(p->pep, info->handle, pdata, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_reject: %s", fi_strerror(-rc));
	fi_freeinfo(info);
	return rc;
}

int dfi_srx_open(struct dfi_fabric *f, size_t size, size_t iov_limit, struct dfi_srx **out)
{
	struct fi_rx_attr attr = { .caps = FI_MSG, .size = size, .iov_limit = iov_limit };
	struct dfi_srx *x = calloc(1, sizeof(*x));
	int rc;

	if (!x)
		return -ENOMEM;
	rc = fi_srx_context(f->domain, &attr, &x->srx, NULL);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_srx_context(size %zu): %s", size, fi_strerror(-rc));
		free(x);
		return rc;
	}
	*out = x;
	return 0;
}

void dfi_srx_close(struct dfi_srx *x)
{
	int rc;

	if (!x)
		return;
	rc = fi_close(&x->srx->fid);
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_close(srx): %s", fi_strerror(-rc));
	free(x);
}

int dfi_fep_open(struct dfi_fabric *f, struct dfi_eq *eq, void *req,
		 const struct sockaddr_in *dest, struct dfi_cq *txcq, struct dfi_cq *rxcq,
		 struct dfi_srx *srx, size_t tx_size, size_t rx_size, void *ctx,
		 struct dfi_fep **out)
{
	struct dfi_fep *e = calloc(1, sizeof(*e));
	int rc;

	if (!e)
		return -ENOMEM;
	if (req) {
		e->info = req;		/* the connection request's, ours now */
	} else {
		e->info = fi_dupinfo(f->info);
		if (!e->info) {
			free(e);
			return -ENOMEM;
		}
		free(e->info->dest_addr);
		e->info->dest_addr = malloc(sizeof(*dest));
		if (!e->info->dest_addr) {
			fi_freeinfo(e->info);
			free(e);
			return -ENOMEM;
		}
		memcpy(e->info->dest_addr, dest, sizeof(*dest));
		e->info->dest_addrlen = sizeof(*dest);
		/* bind to our address, any port */
		if (e->info->src_addr)
			((struct sockaddr_in *)e->info->src_addr)->sin_port = 0;
	}
	if (tx_size)
		e->info->tx_attr->size = tx_size;
	if (rx_size)
		e->info->rx_attr->size = rx_size;
	rc = fi_endpoint(f->domain, e->info, &e->ep, ctx);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_endpoint: %s", fi_strerror(-rc));
		goto err;
	}
	rc = fi_ep_bind(e->ep, &eq->eq->fid, 0);
	if (!rc && srx)
		rc = fi_ep_bind(e->ep, &srx->srx->fid, 0);
	if (!rc && txcq == rxcq)
		rc = fi_ep_bind(e->ep, &txcq->cq->fid, FI_TRANSMIT | FI_RECV);
	else {
		if (!rc)
			rc = fi_ep_bind(e->ep, &txcq->cq->fid, FI_TRANSMIT);
		if (!rc)
			rc = fi_ep_bind(e->ep, &rxcq->cq->fid, FI_RECV);
	}
	if (!rc)
		rc = fi_enable(e->ep);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "binding/enabling the endpoint: %s", fi_strerror(-rc));
		goto err_ep;
	}
	*out = e;
	return 0;
err_ep:
	fi_close(&e->ep->fid);
err:
	if (!req)
		fi_freeinfo(e->info);
	free(e);
	return rc;
}

int dfi_fep_connect(struct dfi_fep *e, const void *pdata, size_t plen)
{
	int rc = fi_connect(e->ep, e->info->dest_addr, pdata, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_connect: %s", fi_strerror(-rc));
	return rc;
}

int dfi_fep_accept(struct dfi_fep *e, const void *pdata, size_t plen)
{
	int rc = fi_accept(e->ep, pdata, plen);

	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_accept: %s", fi_strerror(-rc));
	return rc;
}

int dfi_fep_shutdown(struct dfi_fep *e)
{
	return fi_shutdown(e->ep, 0);
}

void dfi_fep_cancel(struct dfi_fep *e, void *ctx)
{
	(void)fi_cancel(&e->ep->fid, ctx);
}

void dfi_fep_close(struct dfi_fep *e)
{
	int rc;

	if (!e)
		return;
	rc = fi_close(&e->ep->fid);
	if (rc)
		dfi_warn(DFI_SS_FABRIC, "fi_close(ep): %s", fi_strerror(-rc));
	fi_freeinfo(e->info);
	free(e);
}

int dfi_fep_peer(struct dfi_fep *e, struct sockaddr_in *peer)
{
	size_t len = sizeof(*peer);

	return fi_getpeer(e->ep, peer, &len);
}

/* ------------------------------------------------------------------- CQs */

int dfi_cq_open(struct dfi_fabric *f, size_t size, struct dfi_cq **out)
{
	struct fi_cq_attr attr = {
		.size = size, .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_FD,
	};
	struct dfi_cq *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	c->fabric = f->fabric;
	rc = fi_cq_open(f->domain, &attr, &c->cq, NULL);
	if (!rc)
		rc = fi_control(&c->cq->fid, FI_GETWAIT, &c->fd);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_cq_open(%zu): %s", size, fi_strerror(-rc));
		if (c->cq)
			fi_close(&c->cq->fid);
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void dfi_cq_close(struct dfi_cq *c)
{
	if (!c)
		return;
	fi_close(&c->cq->fid);
	free(c);
}

int dfi_cq_read(struct dfi_cq *c, struct dfi_comp *out, int n)
{
	struct fi_cq_msg_entry e[DFI_CQ_BATCH];
	int got = 0;

	while (got < n) {
		int want = n - got < DFI_CQ_BATCH ? n - got : DFI_CQ_BATCH;
		ssize_t r = fi_cq_read(c->cq, e, (size_t)want);

		if (r == -FI_EAGAIN)
			break;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = { 0 };

			r = fi_cq_readerr(c->cq, &err, 0);
			if (r < 0)
				return got ? got : (int)r;
			out[got].ctx = err.op_context;
			out[got].len = err.len;
			out[got].err = err.err ? err.err : EIO;
			got++;
			continue;
		}
		if (r < 0)
			return got ? got : (int)r;
		for (ssize_t i = 0; i < r; i++) {
			out[got].ctx = e[i].op_context;
			out[got].len = e[i].len;
			out[got].err = 0;
			got++;
		}
		if (r < want)
			break;
	}
	return got;
}

int dfi_cq_take(struct dfi_cq *c, const struct dfi_comp **out, int n)
{
	int avail = c->ahead_n - c->ahead_pos;

	if (!avail) {
		int r = dfi_cq_read(c, c->ahead, DFI_CQ_BATCH);

		if (r <= 0)
			return r;
		c->ahead_pos = 0;
		c->ahead_n = avail = r;
	}
	if (n > avail)
		n = avail;
	*out = &c->ahead[c->ahead_pos];
	c->ahead_pos += n;
	return n;
}

int dfi_cq_trywait(struct dfi_cq *c)
{
	struct fid *fids[1] = { &c->cq->fid };
	int rc;

	if (c->ahead_pos < c->ahead_n)
		return -EAGAIN;		/* read ahead, not handed out yet */
	rc = fi_trywait(c->fabric, fids, 1);

	return rc == -FI_EAGAIN ? -EAGAIN : rc;
}

int dfi_cq_fd(struct dfi_cq *c)
{
	return c->fd;
}

void dfi_cq_progress(struct dfi_cq *c)
{
	(void)fi_cq_read(c->cq, NULL, 0);
}

/* ---------------------------------------------------------------- posts */

static void *sge_desc(const struct dfi_sge *sg)
{
	return sg->mr ? fi_mr_desc(sg->mr->mr) : NULL;
}

static int fill_iov(const struct dfi_sge *sg, int n, struct iovec *iov, void **desc)
{
	if (n > DFI_MAX_SGE)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		iov[i].iov_base = sg[i].addr;
		iov[i].iov_len = sg[i].len;
		desc[i] = sge_desc(&sg[i]);
	}
	return 0;
}

static int post_rc(ssize_t rc)
{
	return rc == -FI_EAGAIN ? -EAGAIN : (int)rc;
}

/* One segment (or none) goes by fi_send/fi_recv/fi_write/fi_read: on
 * libfabric 1.17 tcp the vector calls cost about 150 instructions more per
 * post (callgrind, 64 B ping-pong), and one segment is the common case. */
static int msg(struct fid_ep *ep, const struct dfi_sge *sg, int n, void *ctx, bool send)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	int rc;

	if (n <= 1) {
		void *buf = n ? sg[0].addr : NULL, *d = n ? sge_desc(&sg[0]) : NULL;
		size_t len = n ? sg[0].len : 0;

		return post_rc(send ? fi_send(ep, buf, len, d, 0, ctx) :
				      fi_recv(ep, buf, len, d, 0, ctx));
	}
	rc = fill_iov(sg, n, iov, desc);
	if (rc)
		return rc;
	return post_rc(send ? fi_sendv(ep, iov, desc, (size_t)n, 0, ctx) :
			      fi_recvv(ep, iov, desc, (size_t)n, 0, ctx));
}

int dfi_post_send(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(e->ep, sg, n, ctx, true);
}

int dfi_post_recv(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(e->ep, sg, n, ctx, false);
}

int dfi_srx_post_recv(struct dfi_srx *x, const struct dfi_sge *sg, int n, void *ctx)
{
	return msg(x->srx, sg, n, ctx, false);
}

/* Several segments: one fi_writemsg/fi_readmsg (kept apart so that the
 * one-segment post below builds none of this). */
static int rma_msg(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		   uint32_t rkey, void *ctx, bool write)
{
	struct iovec iov[DFI_MAX_SGE];
	void *desc[DFI_MAX_SGE];
	size_t total = 0;
	struct fi_rma_iov riov;
	struct fi_msg_rma msg = {
		.msg_iov = iov, .desc = desc, .iov_count = (size_t)n,
		.rma_iov = &riov, .rma_iov_count = 1, .context = ctx,
	};
	int rc = fill_iov(sg, n, iov, desc);

	if (rc)
		return rc;
	for (int i = 0; i < n; i++)
		total += sg[i].len;
	riov = (struct fi_rma_iov){ .addr = raddr, .len = total, .key = rkey };
	return post_rc(write ? fi_writemsg(e->ep, &msg, FI_COMPLETION) :
			       fi_readmsg(e->ep, &msg, FI_COMPLETION));
}

static int rma(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
	       uint32_t rkey, void *ctx, bool write)
{
	if (n != 1)
		return rma_msg(e, sg, n, raddr, rkey, ctx, write);
	return post_rc(write ? fi_write(e->ep, sg[0].addr, sg[0].len, sge_desc(&sg[0]), 0,
					raddr, rkey, ctx) :
			       fi_read(e->ep, sg[0].addr, sg[0].len, sge_desc(&sg[0]), 0,
				       raddr, rkey, ctx));
}

int dfi_post_write(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		   uint32_t rkey, void *ctx)
{
	return rma(e, sg, n, raddr, rkey, ctx, true);
}

int dfi_post_read(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		  uint32_t rkey, void *ctx)
{
	return rma(e, sg, n, raddr, rkey, ctx, false);
}
