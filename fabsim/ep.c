/*
 * fabsim endpoint: every data post checks the profile's rules, then
 * forwards to the core endpoint with the core's MR descriptors.
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "fabsim.h"

#define CORE_TX_FLAGS	(FI_COMPLETION | FI_REMOTE_CQ_DATA | FI_INJECT)
#define CORE_RX_FLAGS	(FI_COMPLETION | FI_MULTI_RECV | FI_PEEK | FI_CLAIM | \
			 FI_DISCARD)
#define SCRIBBLE	((void *)(uintptr_t)0x5ca1ab1eu)

static inline struct fabsim_ep *to_ep(struct fid_ep *fep)
{
	return (struct fabsim_ep *)fep;
}

static size_t iov_total(const struct iovec *iov, size_t count)
{
	size_t i, len = 0;

	for (i = 0; i < count; i++)
		len += iov[i].iov_len;
	return len;
}

/* consumer descriptors -> core descriptors */
static void xlate_desc(void **desc, size_t count, void **out)
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

static struct fabsim_bounce *bounce_new(struct fabsim_domain *dom,
					const struct iovec *iov, size_t count,
					void *ctx)
{
	struct fabsim_bounce *b = calloc(1, sizeof(*b));
	size_t i, off = 0, len = iov_total(iov, count);

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

static void bounce_drop(struct fabsim_domain *dom, struct fabsim_bounce *b)
{
	fabsim_bounce_take(dom, b->ctx);
}

/* the rules that apply to every data post; 0 or the error to return */
static ssize_t check_post(struct fabsim_ep *ep, const struct iovec *iov,
			  void **desc, size_t count, uint64_t flags,
			  uint64_t data, const char *op)
{
	const struct fabsim_config *cfg = &ep->dom->cfg;
	size_t i, len = iov_total(iov, count);

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

static ssize_t check_inject(struct fabsim_ep *ep, size_t len, const char *op)
{
	if (fabsim_rule_on(&ep->dom->cfg, FABSIM_RULE_INJECT) &&
	    len > fabsim_profile->inject_size) {
		/* rxr_msg.c rxr_msg_inject(): len > inject_size -> -FI_EINVAL */
		FABSIM_WARN(FI_LOG_EP_DATA, "inject: %s of %zu bytes > inject_size %zu\n",
			    op, len, fabsim_profile->inject_size);
		return -FI_EINVAL;
	}
	return 0;
}

/* the ctx rule: the provider owns the context while the op is in flight */
static void scribble(struct fabsim_ep *ep, void *context)
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
	size_t len = iov_total(iov, count);
	ssize_t ret;

	if (count > FABSIM_MAX_IOV || count > fabsim_profile->tx_iov_limit) {
		FABSIM_WARN(FI_LOG_EP_DATA, "send iov count %zu > iov_limit %zu\n",
			    count, fabsim_profile->tx_iov_limit);
		return -FI_EINVAL;
	}
	if (flags & FI_INJECT) {
		ret = check_inject(ep, len, tagged ? "fi_tinject" : "fi_inject");
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&ep->dom->lock);
	ret = check_post(ep, iov, desc, count, flags, data,
			 tagged ? "tagged send" : "send");
	if (ret)
		goto out;
	xlate_desc(desc, count, cdesc);
	if ((flags & FI_INJECT) &&
	    (len > ep->core_inject_size || !(flags & FI_COMPLETION))) {
		/* efa's inject is larger than the core's, and an inject makes
		 * no completion, where the core's msg form with FI_INJECT
		 * does: copy, send, swallow */
		b = bounce_new(ep->dom, iov, count,
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
		scribble(ep, context);
	}
	flags &= CORE_TX_FLAGS;
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
		bounce_drop(ep->dom, b);
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
	ret = check_post(ep, iov, desc, count, 0, 0, tagged ? "tagged recv" : "recv");
	if (ret)
		goto out;
	xlate_desc(desc, count, cdesc);
	scribble(ep, context);
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

/* RMA */
static ssize_t wr_issue(struct fabsim_ep *ep, struct fabsim_wr *wr)
{
	return fi_writemsg(ep->core, &wr->msg, wr->flags);
}

/* release writes delayed by the saw rule; domain lock held */
void fabsim_ep_progress(struct fabsim_ep *ep)
{
	struct fabsim_wr *wr;
	uint64_t now = fabsim_now_usec();

	for (wr = ep->wr_head; wr; wr = wr->next)
		wr->progress++;
	while ((wr = ep->wr_head)) {
		if (wr->progress < FABSIM_SAW_PROGRESS ||
		    now - wr->t_post < FABSIM_SAW_USEC)
			break;
		ssize_t rc = wr_issue(ep, wr);

		if (rc == -FI_EAGAIN)
			break;
		if (rc)
			FABSIM_WARN(FI_LOG_EP_DATA, "saw: a delayed write failed: %s\n",
				    fi_strerror((int)-rc));
		ep->wr_head = wr->next;
		if (!ep->wr_head)
			ep->wr_tail = NULL;
		free(wr);
	}
}

static ssize_t rma_post(struct fabsim_ep *ep, const struct fi_msg_rma *msg,
			uint64_t flags, bool write)
{
	struct fabsim_wr *wr;
	size_t len = iov_total(msg->msg_iov, msg->iov_count);
	bool delay;
	ssize_t ret;

	if (msg->iov_count > FABSIM_MAX_IOV || msg->iov_count > fabsim_profile->tx_iov_limit ||
	    msg->rma_iov_count > fabsim_profile->rma_iov_limit) {
		FABSIM_WARN(FI_LOG_EP_DATA, "rma iov count %zu/%zu > iov_limit %zu/rma_iov_limit %zu\n",
			    msg->iov_count, msg->rma_iov_count,
			    fabsim_profile->tx_iov_limit, fabsim_profile->rma_iov_limit);
		return -FI_EINVAL;
	}
	if (write && (flags & FI_INJECT)) {
		ret = check_inject(ep, len, "fi_inject_write");
		if (ret)
			return ret;
	}
	wr = calloc(1, sizeof(*wr));
	if (!wr)
		return -FI_ENOMEM;
	memcpy(wr->iov, msg->msg_iov, msg->iov_count * sizeof(*wr->iov));
	memcpy(wr->rma_iov, msg->rma_iov, msg->rma_iov_count * sizeof(*wr->rma_iov));
	wr->msg = *msg;
	wr->msg.msg_iov = wr->iov;
	wr->msg.desc = wr->desc;
	wr->msg.rma_iov = wr->rma_iov;

	pthread_mutex_lock(&ep->dom->lock);
	ret = check_post(ep, msg->msg_iov, msg->desc, msg->iov_count, flags,
			 msg->data, write ? "rma write" : "rma read");
	if (ret)
		goto err;
	xlate_desc(msg->desc, msg->iov_count, wr->desc);
	delay = write && fabsim_rule_on(&ep->dom->cfg, FABSIM_RULE_SAW);
	if ((flags & FI_INJECT) &&
	    (delay || len > ep->core_inject_size || !(flags & FI_COMPLETION))) {
		wr->bounce = bounce_new(ep->dom, msg->msg_iov, msg->iov_count,
					(flags & FI_COMPLETION) ? msg->context : NULL);
		if (!wr->bounce) {
			ret = -FI_ENOMEM;
			goto err;
		}
		wr->iov[0].iov_base = wr->bounce->buf;
		wr->iov[0].iov_len = len;
		wr->msg.iov_count = 1;
		wr->desc[0] = NULL;
		wr->msg.context = wr->bounce->ctx;
		flags = (flags & ~FI_INJECT) | FI_COMPLETION;
	} else {
		scribble(ep, msg->context);
	}
	wr->flags = flags & CORE_TX_FLAGS;
	if (delay) {
		/* no send-after-write: later sends go first */
		wr->t_post = fabsim_now_usec();
		if (ep->wr_tail)
			ep->wr_tail->next = wr;
		else
			ep->wr_head = wr;
		ep->wr_tail = wr;
		FABSIM_INFO(FI_LOG_EP_DATA, "saw: write of %zu bytes delayed\n", len);
		pthread_mutex_unlock(&ep->dom->lock);
		return 0;
	}
	ret = write ? wr_issue(ep, wr) : fi_readmsg(ep->core, &wr->msg, wr->flags);
	if (ret && wr->bounce)
		bounce_drop(ep->dom, wr->bounce);
err:
	pthread_mutex_unlock(&ep->dom->lock);
	free(wr);
	return ret;
}

static ssize_t ep_readmsg(struct fid_ep *fep, const struct fi_msg_rma *msg,
			  uint64_t flags)
{
	return rma_post(to_ep(fep), msg, flags, false);
}

static ssize_t ep_readv(struct fid_ep *fep, const struct iovec *iov,
			void **desc, size_t count, fi_addr_t src, uint64_t addr,
			uint64_t key, void *context)
{
	struct fi_rma_iov r = { .addr = addr, .len = iov_total(iov, count), .key = key };
	struct fi_msg_rma m = {
		.msg_iov = iov, .desc = desc, .iov_count = count, .addr = src,
		.rma_iov = &r, .rma_iov_count = 1, .context = context,
	};

	return rma_post(to_ep(fep), &m, to_ep(fep)->tx_op_flags, false);
}

static ssize_t ep_read(struct fid_ep *fep, void *buf, size_t len, void *desc,
		       fi_addr_t src, uint64_t addr, uint64_t key, void *context)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	return ep_readv(fep, &iov, &desc, 1, src, addr, key, context);
}

static ssize_t ep_writemsg(struct fid_ep *fep, const struct fi_msg_rma *msg,
			   uint64_t flags)
{
	return rma_post(to_ep(fep), msg, flags, true);
}

static ssize_t write_common(struct fid_ep *fep, const struct iovec *iov,
			    void **desc, size_t count, fi_addr_t dest,
			    uint64_t addr, uint64_t key, uint64_t data,
			    void *context, uint64_t flags)
{
	struct fi_rma_iov r = { .addr = addr, .len = iov_total(iov, count), .key = key };
	struct fi_msg_rma m = {
		.msg_iov = iov, .desc = desc, .iov_count = count, .addr = dest,
		.rma_iov = &r, .rma_iov_count = 1, .context = context,
		.data = data,
	};

	return rma_post(to_ep(fep), &m, flags, true);
}

static ssize_t ep_writev(struct fid_ep *fep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t dest,
			 uint64_t addr, uint64_t key, void *context)
{
	return write_common(fep, iov, desc, count, dest, addr, key, 0, context,
			    to_ep(fep)->tx_op_flags);
}

static ssize_t ep_write(struct fid_ep *fep, const void *buf, size_t len,
			void *desc, fi_addr_t dest, uint64_t addr, uint64_t key,
			void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return ep_writev(fep, &iov, &desc, 1, dest, addr, key, context);
}

static ssize_t ep_writedata(struct fid_ep *fep, const void *buf, size_t len,
			    void *desc, uint64_t data, fi_addr_t dest,
			    uint64_t addr, uint64_t key, void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return write_common(fep, &iov, &desc, 1, dest, addr, key, data, context,
			    to_ep(fep)->tx_op_flags | FI_REMOTE_CQ_DATA);
}

static ssize_t ep_inject_write(struct fid_ep *fep, const void *buf, size_t len,
			       fi_addr_t dest, uint64_t addr, uint64_t key)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return write_common(fep, &iov, NULL, 1, dest, addr, key, 0, NULL,
			    FI_INJECT);
}

static ssize_t ep_inject_writedata(struct fid_ep *fep, const void *buf,
				   size_t len, uint64_t data, fi_addr_t dest,
				   uint64_t addr, uint64_t key)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return write_common(fep, &iov, NULL, 1, dest, addr, key, data, NULL,
			    FI_INJECT | FI_REMOTE_CQ_DATA);
}

static struct fi_ops_rma ep_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = ep_read,
	.readv = ep_readv,
	.readmsg = ep_readmsg,
	.write = ep_write,
	.writev = ep_writev,
	.writemsg = ep_writemsg,
	.inject = ep_inject_write,
	.writedata = ep_writedata,
	.injectdata = ep_inject_writedata,
};

/* CM: names are 32-byte efa addresses */
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
				bounce_drop(d, wr->bounce);
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
	case FI_CLASS_AV:
		return fi_ep_bind(ep->core, &((struct fabsim_av *)bfid)->core->fid,
				  flags);
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
	ep->ep.rma = &ep_rma_ops;
	ep->ep.tagged = &ep_tagged_ops;
	pthread_mutex_lock(&d->lock);
	ep->next = d->eps;
	d->eps = ep;
	pthread_mutex_unlock(&d->lock);
	*ep_p = &ep->ep;
	return 0;
}
