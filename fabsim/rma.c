/*
 * fabsim RMA: the rules of a data post (ep.c), then the saw rule's delayed
 * writes and the target checks of the offset and mr_endpoint rules (mr.c).
 */
#include <stdlib.h>
#include <string.h>

#include "fabsim.h"

static inline struct fabsim_ep *to_ep(struct fid_ep *fep)
{
	return (struct fabsim_ep *)fep;
}

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
	size_t len = fabsim_iov_total(msg->msg_iov, msg->iov_count);
	/* opx advertises rma_iov_limit 0 and takes one rma_iov */
	size_t rma_max = fabsim_profile->rma_iov_limit ?
			 fabsim_profile->rma_iov_limit : 1;
	bool delay;
	ssize_t ret;
	int terr;

	if (msg->iov_count > FABSIM_MAX_IOV || msg->iov_count > fabsim_profile->tx_iov_limit ||
	    msg->rma_iov_count > rma_max || msg->rma_iov_count > FABSIM_MAX_IOV) {
		FABSIM_WARN(FI_LOG_EP_DATA, "rma iov count %zu/%zu > iov_limit %zu/rma_iov_limit %zu\n",
			    msg->iov_count, msg->rma_iov_count,
			    fabsim_profile->tx_iov_limit, fabsim_profile->rma_iov_limit);
		return -FI_EINVAL;
	}
	if (write && (flags & FI_INJECT)) {
		ret = fabsim_check_inject(ep, len, "fi_inject_write");
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
	ret = fabsim_check_post(ep, msg->msg_iov, msg->desc, msg->iov_count, flags,
			 msg->data, write ? "rma write" : "rma read");
	if (ret)
		goto err;
	terr = fabsim_rma_target_check(ep, msg->addr, msg->rma_iov,
				      msg->rma_iov_count,
				      write ? FI_REMOTE_WRITE : FI_REMOTE_READ);
	if (terr) {
		/* the target refuses: an error completion, memory untouched */
		if (ep->tx_cq)
			fabsim_cq_push_err(ep->tx_cq, msg->context,
					   FI_RMA | (write ? FI_WRITE : FI_READ),
					   terr);
		goto err;
	}
	fabsim_xlate_desc(msg->desc, msg->iov_count, wr->desc);
	delay = write && fabsim_rule_on(&ep->dom->cfg, FABSIM_RULE_SAW);
	if ((flags & FI_INJECT) &&
	    (delay || len > ep->core_inject_size || !(flags & FI_COMPLETION))) {
		wr->bounce = fabsim_bounce_new(ep->dom, msg->msg_iov, msg->iov_count,
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
		fabsim_scribble(ep, msg->context);
	}
	wr->flags = flags & FABSIM_CORE_TX_FLAGS;
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
		fabsim_bounce_drop(ep->dom, wr->bounce);
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
	struct fi_rma_iov r = { .addr = addr, .len = fabsim_iov_total(iov, count), .key = key };
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
	struct fi_rma_iov r = { .addr = addr, .len = fabsim_iov_total(iov, count), .key = key };
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

struct fi_ops_rma fabsim_rma_ops = {
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

