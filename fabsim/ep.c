/*
 * fabsim endpoint: every data post checks the profile's rules, then
 * forwards to the core endpoint with the core's MR descriptors.
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "fabsim.h"

#define CORE_RX_FLAGS	(FI_COMPLETION | FI_MULTI_RECV | FI_PEEK | FI_CLAIM | \
			 FI_DISCARD)
#define SCRIBBLE	((void *)(uintptr_t)0x5ca1ab1eu)

static inline struct fabsim_ep *to_ep(struct fid_ep *fep)
{
	return (struct fabsim_ep *)fep;
}

size_t fabsim_iov_total(const struct iovec *iov, size_t count)
{
	size_t i, len = 0;

	for (i = 0; i < count; i++)
		len += iov[i].iov_len;
	return len;
}

/* consumer descriptors -> core descriptors */
void fabsim_xlate_desc(void **desc, size_t count, void **out)
{
	size_t i;

	for (i = 0; i < count; i++) {
		struct fabsim_mr *mr = desc ? desc[i] : NULL;

		out[i] = mr ? fi_mr_desc(mr->core) : NULL;
	}
}

bool fabsim_bounce_take(struct fabsim_domain *dom, void *ctx)
{
	struct fabsim_bounce **pp, *b;
	bool swallow;

	for (pp = &dom->bounces; *pp; pp = &(*pp)->next) {
		if ((*pp)->ctx != ctx)
			continue;
		b = *pp;
		*pp = b->next;
		swallow = b->swallow;
		free(b->buf);
		free(b);
		return swallow;
	}
	return false;
}

struct fabsim_bounce *fabsim_bounce_new(struct fabsim_domain *dom,
					const struct iovec *iov, size_t count,
					void *ctx)
{
	struct fabsim_bounce *b = calloc(1, sizeof(*b));
	size_t i, off = 0, len = fabsim_iov_total(iov, count);

	if (!b)
		return NULL;
	b->buf = malloc(len ? len : 1);
	if (!b->buf) {
		free(b);
		return NULL;
	}
	for (i = 0; i < count; i++) {
		memcpy((char *)b->buf + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	b->ctx = ctx ? ctx : b;
	b->swallow = !ctx;
	b->next = dom->bounces;
	dom->bounces = b;
	return b;
}

void fabsim_bounce_drop(struct fabsim_domain *dom, struct fabsim_bounce *b)
{
	fabsim_bounce_take(dom, b->ctx);
}

/* the rules that apply to every data post; 0 or the error to return */
ssize_t fabsim_check_post(struct fabsim_ep *ep, const struct iovec *iov,
			  void **desc, size_t count, uint64_t flags,
			  uint64_t data, const char *op)
{
	const struct fabsim_config *cfg = &ep->dom->cfg;
	size_t i, len = fabsim_iov_total(iov, count);

	if (fabsim_rule_on(cfg, FABSIM_RULE_MSG_SIZE) && len > cfg->max_msg_size) {
		FABSIM_WARN(FI_LOG_EP_DATA, "msg_size: %s of %zu bytes > max_msg_size %zu\n",
			    op, len, cfg->max_msg_size);
		return -FI_EMSGSIZE;
	}
	if (fabsim_rule_on(cfg, FABSIM_RULE_CQ_DATA) && (flags & FI_REMOTE_CQ_DATA) &&
	    cfg->cq_data_size < 8 && data >> (8 * cfg->cq_data_size)) {
		FABSIM_WARN(FI_LOG_EP_DATA, "cq_data: %s with data 0x%llx wider than cq_data_size %zu\n",
			    op, (unsigned long long)data, cfg->cq_data_size);
		return -FI_EINVAL;
	}
	if (fabsim_rule_on(cfg, FABSIM_RULE_MR_LOCAL) &&
	    (ep->dom->mr_mode & FI_MR_LOCAL)) {
		for (i = 0; i < count; i++) {
			if (iov[i].iov_len && (!desc || !desc[i])) {
				FABSIM_WARN(FI_LOG_EP_DATA, "mr_local: %s without a descriptor under FI_MR_LOCAL\n",
					    op);
				return -FI_EINVAL;
			}
		}
	}
	if (fabsim_rule_on(cfg, FABSIM_RULE_EAGAIN) &&
	    fabsim_rng(ep->dom) % fabsim_profile->eagain_one_in == 0) {
		FABSIM_INFO(FI_LOG_EP_DATA, "eagain: %s refused with -FI_EAGAIN (queue full)\n",
			    op);
		return -FI_EAGAIN;
	}
	return 0;
}

ssize_t fabsim_check_inject(struct fabsim_ep *ep, size_t len, const char *op)
{
	if (fabsim_rule_on(&ep->dom->cfg, FABSIM_RULE_INJECT) &&
	    len > fabsim_profile->inject_size) {
		/* efa rxr_msg_inject() -FI_EINVAL, psm3 and cxi -FI_EMSGSIZE */
		FABSIM_WARN(FI_LOG_EP_DATA, "inject: %s of %zu bytes > inject_size %zu\n",
			    op, len, fabsim_profile->inject_size);
		return fabsim_profile->inject_err;
	}
	return 0;
}

/* the ctx rule: the provider owns the context while the op is in flight */
void fabsim_scribble(struct fabsim_ep *ep, void *context)
{
	void **w = context;
	size_t i, n;

	if (!fabsim_rule_on(&ep->dom->cfg, FABSIM_RULE_CTX) || !context)
		return;
	if (ep->mode & FI_CONTEXT2)
		n = sizeof(struct fi_context2) / sizeof(void *);
	else if (ep->mode & FI_CONTEXT)
		n = sizeof(struct fi_context) / sizeof(void *);
	else
		return;
	for (i = 0; i < n; i++)
		w[i] = SCRIBBLE;
}

/* send side, message and tagged */
static ssize_t tx_post(struct fabsim_ep *ep, const struct iovec *iov,
		       void **desc, size_t count, fi_addr_t dest, uint64_t tag,
		       uint64_t data, void *context, uint64_t flags, bool tagged)
{
	void *cdesc[FABSIM_MAX_IOV];
	struct fabsim_bounce *b = NULL;
	struct iovec biov;
	size_t len = fabsim_iov_total(iov, count);
	ssize_t ret;

	if (count > FABSIM_MAX_IOV || count > fabsim_profile->tx_iov_limit) {
		FABSIM_WARN(FI_LOG_EP_DATA, "send iov count %zu > iov_limit %zu\n",
			    count, fabsim_profile->tx_iov_limit);
		return -FI_EINVAL;
	}
	if (flags & FI_INJECT) {
		ret = fabsim_check_inject(ep, len, tagged ? "fi_tinject" : "fi_inject");
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&ep->dom->lock);
	ret = fabsim_check_post(ep, iov, desc, count, flags, data,
			 tagged ? "tagged send" : "send");
	if (ret)
		goto out;
	fabsim_xlate_desc(desc, count, cdesc);
	if ((flags & FI_INJECT) &&
	    (len > ep->core_inject_size || !(flags & FI_COMPLETION))) {
		/* the profile's inject is larger than the core's, and an
		 * inject makes no completion, where the core's msg form with
		 * FI_INJECT does: copy, send, swallow the completion */
		b = fabsim_bounce_new(ep->dom, iov, count,
			       (flags & FI_COMPLETION) ? context : NULL);
		if (!b) {
			ret = -FI_ENOMEM;
			goto out;
		}
		biov.iov_base = b->buf;
		biov.iov_len = len;
		iov = &biov;
		count = 1;
		cdesc[0] = NULL;
		context = b->ctx;
		flags = (flags & ~FI_INJECT) | FI_COMPLETION;
	} else if (!(flags & FI_INJECT) || (flags & FI_COMPLETION)) {
		fabsim_scribble(ep, context);
	}
	flags &= FABSIM_CORE_TX_FLAGS;
	if (tagged) {
		struct fi_msg_tagged m = {
			.msg_iov = iov, .desc = cdesc, .iov_count = count,
			.addr = dest, .tag = tag, .context = context, .data = data,
		};
		ret = fi_tsendmsg(ep->core, &m, flags);
	} else {
		struct fi_msg m = {
			.msg_iov = iov, .desc = cdesc, .iov_count = count,
			.addr = dest, .context = context, .data = data,
		};
		ret = fi_sendmsg(ep->core, &m, flags);
	}
	if (ret && b)
		fabsim_bounce_drop(ep->dom, b);
out:
	pthread_mutex_unlock(&ep->dom->lock);
	return ret;
}

static ssize_t rx_post(struct fabsim_ep *ep, const struct iovec *iov,
		       void **desc, size_t count, fi_addr_t src, uint64_t tag,
		       uint64_t ignore, void *context, uint64_t flags, bool tagged)
{
	void *cdesc[FABSIM_MAX_IOV];
	ssize_t ret;

	if (count > FABSIM_MAX_IOV || count > fabsim_profile->rx_iov_limit) {
		FABSIM_WARN(FI_LOG_EP_DATA, "recv iov count %zu > iov_limit %zu\n",
			    count, fabsim_profile->rx_iov_limit);
		return -FI_EINVAL;
	}
	pthread_mutex_lock(&ep->dom->lock);
	ret = fabsim_check_post(ep, iov, desc, count, 0, 0, tagged ? "tagged recv" : "recv");
	if (ret)
		goto out;
	fabsim_xlate_desc(desc, count, cdesc);
	fabsim_scribble(ep, context);
	flags &= CORE_RX_FLAGS;
	if (tagged) {
		struct fi_msg_tagged m = {
			.msg_iov = iov, .desc = cdesc, .iov_count = count,
			.addr = src, .tag = tag, .ignore = ignore,
			.context = context,
		};
		ret = fi_trecvmsg(ep->core, &m, flags);
	} else {
		struct fi_msg m = {
			.msg_iov = iov, .desc = cdesc, .iov_count = count,
			.addr = src, .context = context,
		};
		ret = fi_recvmsg(ep->core, &m, flags);
	}
out:
	pthread_mutex_unlock(&ep->dom->lock);
	return ret;
}

/* fi_ops_msg */
static ssize_t ep_recvmsg(struct fid_ep *fep, const struct fi_msg *msg,
			  uint64_t flags)
{
	return rx_post(to_ep(fep), msg->msg_iov, msg->desc, msg->iov_count,
		       msg->addr, 0, 0, msg->context, flags, false);
}

static ssize_t ep_recvv(struct fid_ep *fep, const struct iovec *iov,
			void **desc, size_t count, fi_addr_t src, void *context)
{
	return rx_post(to_ep(fep), iov, desc, count, src, 0, 0, context,
		       to_ep(fep)->rx_op_flags, false);
}

static ssize_t ep_recv(struct fid_ep *fep, void *buf, size_t len, void *desc,
		       fi_addr_t src, void *context)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	return ep_recvv(fep, &iov, &desc, 1, src, context);
}

static ssize_t ep_sendmsg(struct fid_ep *fep, const struct fi_msg *msg,
			  uint64_t flags)
{
	return tx_post(to_ep(fep), msg->msg_iov, msg->desc, msg->iov_count,
		       msg->addr, 0, msg->data, msg->context, flags, false);
}

static ssize_t ep_sendv(struct fid_ep *fep, const struct iovec *iov,
			void **desc, size_t count, fi_addr_t dest, void *context)
{
	return tx_post(to_ep(fep), iov, desc, count, dest, 0, 0, context,
		       to_ep(fep)->tx_op_flags, false);
}

static ssize_t ep_send(struct fid_ep *fep, const void *buf, size_t len,
		       void *desc, fi_addr_t dest, void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return ep_sendv(fep, &iov, &desc, 1, dest, context);
}

static ssize_t ep_senddata(struct fid_ep *fep, const void *buf, size_t len,
			   void *desc, uint64_t data, fi_addr_t dest,
			   void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return tx_post(to_ep(fep), &iov, &desc, 1, dest, 0, data, context,
		       to_ep(fep)->tx_op_flags | FI_REMOTE_CQ_DATA, false);
}

static ssize_t ep_inject(struct fid_ep *fep, const void *buf, size_t len,
			 fi_addr_t dest)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return tx_post(to_ep(fep), &iov, NULL, 1, dest, 0, 0, NULL, FI_INJECT,
		       false);
}

static ssize_t ep_injectdata(struct fid_ep *fep, const void *buf, size_t len,
			     uint64_t data, fi_addr_t dest)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return tx_post(to_ep(fep), &iov, NULL, 1, dest, 0, data, NULL,
		       FI_INJECT | FI_REMOTE_CQ_DATA, false);
}

static struct fi_ops_msg ep_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = ep_recv,
	.recvv = ep_recvv,
	.recvmsg = ep_recvmsg,
	.send = ep_send,
	.sendv = ep_sendv,
	.sendmsg = ep_sendmsg,
	.inject = ep_inject,
	.senddata = ep_senddata,
	.injectdata = ep_injectdata,
};

/* fi_ops_tagged */
static ssize_t ep_trecvmsg(struct fid_ep *fep, const struct fi_msg_tagged *msg,
			   uint64_t flags)
{
	return rx_post(to_ep(fep), msg->msg_iov, msg->desc, msg->iov_count,
		       msg->addr, msg->tag, msg->ignore, msg->context, flags,
		       true);
}

static ssize_t ep_trecvv(struct fid_ep *fep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t src, uint64_t tag,
			 uint64_t ignore, void *context)
{
	return rx_post(to_ep(fep), iov, desc, count, src, tag, ignore, context,
		       to_ep(fep)->rx_op_flags, true);
}

static ssize_t ep_trecv(struct fid_ep *fep, void *buf, size_t len, void *desc,
			fi_addr_t src, uint64_t tag, uint64_t ignore,
			void *context)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	return ep_trecvv(fep, &iov, &desc, 1, src, tag, ignore, context);
}

static ssize_t ep_tsendmsg(struct fid_ep *fep, const struct fi_msg_tagged *msg,
			   uint64_t flags)
{
	return tx_post(to_ep(fep), msg->msg_iov, msg->desc, msg->iov_count,
		       msg->addr, msg->tag, msg->data, msg->context, flags, true);
}

static ssize_t ep_tsendv(struct fid_ep *fep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t dest,
			 uint64_t tag, void *context)
{
	return tx_post(to_ep(fep), iov, desc, count, dest, tag, 0, context,
		       to_ep(fep)->tx_op_flags, true);
}

static ssize_t ep_tsend(struct fid_ep *fep, const void *buf, size_t len,
			void *desc, fi_addr_t dest, uint64_t tag, void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return ep_tsendv(fep, &iov, &desc, 1, dest, tag, context);
}

static ssize_t ep_tsenddata(struct fid_ep *fep, const void *buf, size_t len,
			    void *desc, uint64_t data, fi_addr_t dest,
			    uint64_t tag, void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return tx_post(to_ep(fep), &iov, &desc, 1, dest, tag, data, context,
		       to_ep(fep)->tx_op_flags | FI_REMOTE_CQ_DATA, true);
}

static ssize_t ep_tinject(struct fid_ep *fep, const void *buf, size_t len,
			  fi_addr_t dest, uint64_t tag)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return tx_post(to_ep(fep), &iov, NULL, 1, dest, tag, 0, NULL, FI_INJECT,
		       true);
}

static ssize_t ep_tinjectdata(struct fid_ep *fep, const void *buf, size_t len,
			      uint64_t data, fi_addr_t dest, uint64_t tag)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return tx_post(to_ep(fep), &iov, NULL, 1, dest, tag, data, NULL,
		       FI_INJECT | FI_REMOTE_CQ_DATA, true);
}

static struct fi_ops_tagged ep_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = ep_trecv,
	.recvv = ep_trecvv,
	.recvmsg = ep_trecvmsg,
	.send = ep_tsend,
	.sendv = ep_tsendv,
	.sendmsg = ep_tsendmsg,
	.inject = ep_tinject,
	.senddata = ep_tsenddata,
	.injectdata = ep_tinjectdata,
};

/* CM: names are the profile's addresses (init.c) */
static int ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct fabsim_ep *ep = (struct fabsim_ep *)fid;
	struct sockaddr_in sin;
	size_t len = sizeof(sin);
	int ret;

	ret = fi_getname(&ep->core->fid, &sin, &len);
	if (ret)
		return ret;
	return fabsim_addr_from_core(&sin, len, addr, addrlen);
}

static int ep_setname(fid_t fid, void *addr, size_t addrlen)
{
	struct fabsim_ep *ep = (struct fabsim_ep *)fid;
	struct sockaddr_in sin;
	size_t len = sizeof(sin);
	int ret;

	ret = fabsim_addr_to_core(addr, addrlen, &sin, &len);
	return ret ? ret : fi_setname(&ep->core->fid, &sin, len);
}

static int ep_getpeer(struct fid_ep *fep, void *addr, size_t *addrlen)
{
	(void)fep; (void)addr; (void)addrlen;
	return -FI_ENOSYS;
}

static int ep_connect(struct fid_ep *fep, const void *addr, const void *param,
		      size_t paramlen)
{
	(void)fep; (void)addr; (void)param; (void)paramlen;
	return -FI_ENOSYS;
}

static int ep_listen(struct fid_pep *pep)
{
	(void)pep;
	return -FI_ENOSYS;
}

static int ep_accept(struct fid_ep *fep, const void *param, size_t paramlen)
{
	(void)fep; (void)param; (void)paramlen;
	return -FI_ENOSYS;
}

static int ep_reject(struct fid_pep *pep, fid_t handle, const void *param,
		     size_t paramlen)
{
	(void)pep; (void)handle; (void)param; (void)paramlen;
	return -FI_ENOSYS;
}

static int ep_shutdown(struct fid_ep *fep, uint64_t flags)
{
	(void)fep; (void)flags;
	return -FI_ENOSYS;
}

static int ep_join(struct fid_ep *fep, const void *addr, uint64_t flags,
		   struct fid_mc **mc, void *context)
{
	(void)fep; (void)addr; (void)flags; (void)mc; (void)context;
	return -FI_ENOSYS;
}

static struct fi_ops_cm ep_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = ep_setname,
	.getname = ep_getname,
	.getpeer = ep_getpeer,
	.connect = ep_connect,
	.listen = ep_listen,
	.accept = ep_accept,
	.reject = ep_reject,
	.shutdown = ep_shutdown,
	.join = ep_join,
};

/* fi_ops_ep */
static ssize_t ep_cancel(fid_t fid, void *context)
{
	struct fabsim_ep *ep = (struct fabsim_ep *)fid;

	return fi_cancel(&ep->core->fid, context);
}

static int ep_getopt(fid_t fid, int level, int optname, void *optval,
		     size_t *optlen)
{
	struct fabsim_ep *ep = (struct fabsim_ep *)fid;

	return fi_getopt(&ep->core->fid, level, optname, optval, optlen);
}

static int ep_setopt(fid_t fid, int level, int optname, const void *optval,
		     size_t optlen)
{
	struct fabsim_ep *ep = (struct fabsim_ep *)fid;

	return fi_setopt(&ep->core->fid, level, optname, optval, optlen);
}

static int ep_no_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr,
		     struct fid_ep **tx_ep, void *context)
{
	(void)sep; (void)index; (void)attr; (void)tx_ep; (void)context;
	return -FI_ENOSYS;
}

static int ep_no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr,
			struct fid_ep **rx_ep, void *context)
{
	(void)sep; (void)index; (void)attr; (void)rx_ep; (void)context;
	return -FI_ENOSYS;
}

static ssize_t ep_rx_size_left(struct fid_ep *fep)
{
	(void)fep;
	return -FI_ENOSYS;	/* deprecated; efa: util's fi_no_rx_size_left */
}

static ssize_t ep_tx_size_left(struct fid_ep *fep)
{
	(void)fep;
	return -FI_ENOSYS;
}

static struct fi_ops_ep ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = ep_no_ctx,
	.rx_ctx = ep_no_rx_ctx,
	.rx_size_left = ep_rx_size_left,
	.tx_size_left = ep_tx_size_left,
};

/* fi_ops */
static int ep_close(struct fid *fid)
{
	struct fabsim_ep *ep = (struct fabsim_ep *)fid;
	struct fabsim_domain *d = ep->dom;
	struct fabsim_ep **pp;
	struct fabsim_wr *wr;
	int ret;

	fabsim_ep_unregister(ep);
	pthread_mutex_lock(&d->lock);
	ret = fi_close(&ep->core->fid);
	if (!ret) {
		for (pp = &d->eps; *pp; pp = &(*pp)->next) {
			if (*pp == ep) {
				*pp = ep->next;
				break;
			}
		}
		if (ep->wr_head)
			FABSIM_WARN(FI_LOG_EP_CTRL, "saw: endpoint closed with delayed writes\n");
		while ((wr = ep->wr_head)) {
			ep->wr_head = wr->next;
			if (wr->bounce)
				fabsim_bounce_drop(d, wr->bounce);
			free(wr);
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (ret)
		return ret;
	free(ep);
	return 0;
}

static int ep_bind_locked(struct fabsim_ep *ep, struct fid *bfid,
			  uint64_t flags)
{
	switch (bfid->fclass) {
	case FI_CLASS_CQ: {
		struct fabsim_cq *cq = (struct fabsim_cq *)bfid;
		int ret = fi_ep_bind(ep->core, &cq->core->fid, flags);

		if (ret)
			return ret;
		if (flags & FI_TRANSMIT)
			ep->tx_cq = cq;
		if (flags & FI_RECV)
			ep->rx_cq = cq;
		return 0;
	}
	case FI_CLASS_AV: {
		struct fabsim_av *av = (struct fabsim_av *)bfid;
		int ret = fi_ep_bind(ep->core, &av->core->fid, flags);

		if (!ret)
			ep->av = av;
		return ret;
	}
	case FI_CLASS_EQ:
		return fi_ep_bind(ep->core, bfid, flags);
	default:
		FABSIM_WARN(FI_LOG_EP_CTRL, "bind of class %zu refused\n", bfid->fclass);
		return -FI_ENOSYS;
	}
}

/* under the domain lock: the auto-progress thread (manual rule off) reads
 * the core CQs while the consumer binds and enables */
static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct fabsim_ep *ep = (struct fabsim_ep *)fid;
	int ret;

	pthread_mutex_lock(&ep->dom->lock);
	ret = ep_bind_locked(ep, bfid, flags);
	pthread_mutex_unlock(&ep->dom->lock);
	return ret;
}

static int ep_control(struct fid *fid, int command, void *arg)
{
	struct fabsim_ep *ep = (struct fabsim_ep *)fid;
	int ret;

	pthread_mutex_lock(&ep->dom->lock);
	ret = fi_control(&ep->core->fid, command, arg);
	if (!ret && command == FI_ENABLE)
		fabsim_ep_register(ep);		/* an RMA target from now on */
	pthread_mutex_unlock(&ep->dom->lock);
	return ret;
}

static struct fi_ops ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ep_close,
	.bind = ep_bind,
	.control = ep_control,
	.ops_open = fabsim_no_ops_open,
};

int fabsim_ep_open(struct fid_domain *domain, struct fi_info *info,
		   struct fid_ep **ep_p, void *context)
{
	struct fabsim_domain *d = (struct fabsim_domain *)domain;
	struct fi_info *ci;
	struct fabsim_ep *ep;
	int ret;

	if (info->ep_attr && info->ep_attr->type != FI_EP_RDM) {
		FABSIM_WARN(FI_LOG_EP_CTRL, "only FI_EP_RDM is simulated\n");
		return -FI_ENOSYS;
	}
	ci = fi_dupinfo(d->core_info);
	if (!ci)
		return -FI_ENOMEM;
	free(ci->src_addr);
	ci->src_addr = NULL;
	ci->src_addrlen = 0;
	if (info->src_addr) {
		ci->src_addr = calloc(1, sizeof(struct sockaddr_in));
		ci->src_addrlen = sizeof(struct sockaddr_in);
		if (!ci->src_addr ||
		    fabsim_addr_to_core(info->src_addr, info->src_addrlen,
					ci->src_addr, &ci->src_addrlen)) {
			fi_freeinfo(ci);
			return -FI_EINVAL;
		}
	}
	ep = calloc(1, sizeof(*ep));
	if (!ep) {
		fi_freeinfo(ci);
		return -FI_ENOMEM;
	}
	ret = fi_endpoint(d->core, ci, &ep->core, context);
	ep->core_inject_size = ci->tx_attr->inject_size;
	fi_freeinfo(ci);
	if (ret) {
		free(ep);
		return ret;
	}
	ep->dom = d;
	ep->mode = info->mode & d->cfg.mode;
	ep->tx_op_flags = (info->tx_attr ? info->tx_attr->op_flags : 0) &
			  ~(FI_INJECT | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE);
	ep->rx_op_flags = (info->rx_attr ? info->rx_attr->op_flags : 0) &
			  ~FI_MULTI_RECV;
	ep->ep.fid.fclass = FI_CLASS_EP;
	ep->ep.fid.context = context;
	ep->ep.fid.ops = &ep_fi_ops;
	ep->ep.ops = &ep_ops;
	ep->ep.cm = &ep_cm_ops;
	ep->ep.msg = &ep_msg_ops;
	ep->ep.rma = &fabsim_rma_ops;
	ep->ep.tagged = &ep_tagged_ops;
	pthread_mutex_lock(&d->lock);
	ep->next = d->eps;
	d->eps = ep;
	pthread_mutex_unlock(&d->lock);
	*ep_p = &ep->ep;
	return 0;
}
