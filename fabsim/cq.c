/*
 * fabsim completion queue: pulls the core's completions into a ring and
 * hands them to the consumer in its format; the comp_order rule holds some
 * back so that later ones overtake them (comp_order FI_ORDER_NONE).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabsim.h"

#define PULL_BATCH	16
#define PULL_MAX	256

static int q_push(struct fabsim_cq *cq, const struct fabsim_cqe *e)
{
	struct fabsim_cqe *nq;
	size_t i, cap;

	if (cq->q_len == cq->q_cap) {
		cap = cq->q_cap ? cq->q_cap * 2 : 64;
		nq = calloc(cap, sizeof(*nq));
		if (!nq)
			return -FI_ENOMEM;
		for (i = 0; i < cq->q_len; i++)
			nq[i] = cq->q[(cq->q_head + i) % cq->q_cap];
		free(cq->q);
		cq->q = nq;
		cq->q_cap = cap;
		cq->q_head = 0;
	}
	cq->q[(cq->q_head + cq->q_len) % cq->q_cap] = *e;
	cq->q_len++;
	return 0;
}

static struct fabsim_cqe *q_peek(struct fabsim_cq *cq)
{
	return cq->q_len ? &cq->q[cq->q_head] : NULL;
}

static void q_pop(struct fabsim_cq *cq)
{
	cq->q_head = (cq->q_head + 1) % cq->q_cap;
	cq->q_len--;
}

/* an error completion made by a rule (the target refused an RMA); domain
 * lock held */
int fabsim_cq_push_err(struct fabsim_cq *cq, void *ctx, uint64_t flags,
		       int err)
{
	struct fabsim_cqe e;

	memset(&e, 0, sizeof(e));
	e.is_err = true;
	e.err.op_context = ctx;
	e.err.flags = flags;
	e.err.err = err;
	e.e.op_context = ctx;
	return q_push(cq, &e);
}

/* called with the domain lock held */
void fabsim_cq_progress(struct fabsim_cq *cq)
{
	struct fi_cq_tagged_entry buf[PULL_BATCH];
	fi_addr_t src[PULL_BATCH];
	struct fabsim_cqe e;
	struct fabsim_ep *ep;
	size_t total = 0;
	ssize_t n, i;

	/* efa progresses every endpoint bound to the CQ read, either way
	 * (util_cq's ep_list, rxr_ep_progress) */
	for (ep = cq->dom->eps; ep; ep = ep->next)
		if (ep->tx_cq == cq || ep->rx_cq == cq)
			fabsim_ep_progress(ep);

	while (total < PULL_MAX) {
		n = fi_cq_readfrom(cq->core, buf, PULL_BATCH, src);
		if (n == -FI_EAVAIL) {
			memset(&e, 0, sizeof(e));
			e.is_err = true;
			n = fi_cq_readerr(cq->core, &e.err, 0);
			if (n != 1)
				break;
			e.err.err_data = NULL;
			e.err.err_data_size = 0;
			if (fabsim_bounce_take(cq->dom, e.err.op_context)) {
				FABSIM_WARN(FI_LOG_CQ, "internal send failed: %s\n",
					    fi_strerror(e.err.err));
				continue;
			}
			e.e.op_context = e.err.op_context;
			if (q_push(cq, &e))
				break;
			total++;
			continue;
		}
		if (n <= 0)
			break;
		for (i = 0; i < n; i++) {
			if (fabsim_bounce_take(cq->dom, buf[i].op_context))
				continue;
			memset(&e, 0, sizeof(e));
			e.e = buf[i];
			e.src = src[i];
			if (q_push(cq, &e))
				return;
		}
		total += (size_t)n;
	}
}

static void put_entry(struct fabsim_cq *cq, void *buf, size_t idx,
		      const struct fabsim_cqe *e, fi_addr_t *src_addr)
{
	switch (cq->format) {
	case FI_CQ_FORMAT_MSG: {
		struct fi_cq_msg_entry *m = (struct fi_cq_msg_entry *)buf + idx;

		m->op_context = e->e.op_context;
		m->flags = e->e.flags;
		m->len = e->e.len;
		break;
	}
	case FI_CQ_FORMAT_DATA: {
		struct fi_cq_data_entry *m = (struct fi_cq_data_entry *)buf + idx;

		m->op_context = e->e.op_context;
		m->flags = e->e.flags;
		m->len = e->e.len;
		m->buf = e->e.buf;
		m->data = e->e.data;
		break;
	}
	case FI_CQ_FORMAT_TAGGED:
		((struct fi_cq_tagged_entry *)buf)[idx] = e->e;
		break;
	default:
		((struct fi_cq_entry *)buf)[idx].op_context = e->e.op_context;
		break;
	}
	if (src_addr)
		src_addr[idx] = e->src;
}

static ssize_t cq_readfrom(struct fid_cq *fcq, void *buf, size_t count,
			   fi_addr_t *src_addr)
{
	struct fabsim_cq *cq = (struct fabsim_cq *)fcq;
	struct fabsim_domain *d = cq->dom;
	bool reorder = fabsim_rule_on(&d->cfg, FABSIM_RULE_COMP_ORDER);
	struct fabsim_cqe *e;
	size_t out = 0, i;
	ssize_t ret;

	pthread_mutex_lock(&d->lock);
	if (cq->err_pending) {
		ret = -FI_EAVAIL;
		goto unlock;
	}
	fabsim_cq_progress(cq);

	/* held completions come out after the ones that overtook them */
	for (i = 0; i < cq->n_held && out < count;) {
		if (++cq->held[i].age < FABSIM_HOLD_READS && cq->q_len) {
			i++;
			continue;
		}
		put_entry(cq, buf, out++, &cq->held[i], src_addr);
		cq->held[i] = cq->held[--cq->n_held];
	}
	while (out < count && (e = q_peek(cq))) {
		if (e->is_err) {
			if (!out) {
				cq->err = *e;
				cq->err_pending = true;
				q_pop(cq);
			}
			break;
		}
		if (reorder && cq->q_len > 1 && cq->n_held < FABSIM_MAX_HELD &&
		    fabsim_rng(d) % 4 == 0) {
			cq->held[cq->n_held] = *e;
			cq->held[cq->n_held++].age = 0;
			q_pop(cq);
			FABSIM_INFO(FI_LOG_CQ, "comp_order: holding completion %p\n",
				    e->e.op_context);
			continue;
		}
		put_entry(cq, buf, out++, e, src_addr);
		q_pop(cq);
	}
	ret = out ? (ssize_t)out : cq->err_pending ? -FI_EAVAIL : -FI_EAGAIN;
unlock:
	pthread_mutex_unlock(&d->lock);
	return ret;
}

static ssize_t cq_read(struct fid_cq *fcq, void *buf, size_t count)
{
	return cq_readfrom(fcq, buf, count, NULL);
}

static ssize_t cq_readerr(struct fid_cq *fcq, struct fi_cq_err_entry *buf,
			  uint64_t flags)
{
	struct fabsim_cq *cq = (struct fabsim_cq *)fcq;
	ssize_t ret = -FI_EAGAIN;

	(void)flags;
	pthread_mutex_lock(&cq->dom->lock);
	if (cq->err_pending) {
		*buf = cq->err.err;
		cq->err_pending = false;
		ret = 1;
	}
	pthread_mutex_unlock(&cq->dom->lock);
	return ret;
}

static ssize_t cq_sreadfrom(struct fid_cq *fcq, void *buf, size_t count,
			    fi_addr_t *src_addr, const void *cond, int timeout)
{
	struct fabsim_cq *cq = (struct fabsim_cq *)fcq;
	uint64_t end = fabsim_now_usec() + (uint64_t)(timeout < 0 ? 0 : timeout) * 1000u;
	ssize_t ret;

	(void)cond;
	/* efa: rxr_cq.c fi_no_cq_sread; opx: fi_opx_cq_sread() abort()s */
	if (fabsim_rule_on(&cq->dom->cfg, FABSIM_RULE_WAIT)) {
		FABSIM_WARN(FI_LOG_CQ, "wait: fi_cq_sread refused: %s's CQ cannot block\n",
			    fabsim_profile->name);
		return -FI_ENOSYS;
	}
	for (;;) {
		ret = cq_readfrom(fcq, buf, count, src_addr);
		if (ret != -FI_EAGAIN)
			return ret;
		if (timeout >= 0 && fabsim_now_usec() >= end)
			return -FI_EAGAIN;
		usleep(50);
	}
}

static ssize_t cq_sread(struct fid_cq *fcq, void *buf, size_t count,
			const void *cond, int timeout)
{
	return cq_sreadfrom(fcq, buf, count, NULL, cond, timeout);
}

static int cq_signal(struct fid_cq *fcq)
{
	(void)fcq;
	return -FI_ENOSYS;
}

static const char *cq_strerror(struct fid_cq *fcq, int prov_errno,
			       const void *err_data, char *buf, size_t len)
{
	struct fabsim_cq *cq = (struct fabsim_cq *)fcq;

	return fi_cq_strerror(cq->core, prov_errno, err_data, buf, len);
}

static int cq_close(struct fid *fid)
{
	struct fabsim_cq *cq = (struct fabsim_cq *)fid;
	struct fabsim_domain *d = cq->dom;
	struct fabsim_cq **pp;
	int ret;

	pthread_mutex_lock(&d->lock);
	ret = fi_close(&cq->core->fid);
	if (!ret) {
		for (pp = &d->cqs; *pp; pp = &(*pp)->next) {
			if (*pp == cq) {
				*pp = cq->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (ret)
		return ret;
	free(cq->q);
	free(cq);
	return 0;
}

static int cq_control(struct fid *fid, int command, void *arg)
{
	struct fabsim_cq *cq = (struct fabsim_cq *)fid;

	/* opx: fi_opx_control_cq() is "unimplemented", no FI_GETWAIT */
	if (fabsim_profile->wait_style == FABSIM_WAIT_IGNORED &&
	    fabsim_rule_on(&cq->dom->cfg, FABSIM_RULE_WAIT))
		return -FI_ENOSYS;
	return fi_control(&cq->core->fid, command, arg);
}

static struct fi_ops cq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = cq_close,
	.bind = fabsim_no_bind,
	.control = cq_control,
	.ops_open = fabsim_no_ops_open,
};

static struct fi_ops_cq cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = cq_sread,
	.sreadfrom = cq_sreadfrom,
	.signal = cq_signal,
	.strerror = cq_strerror,
};

int fabsim_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		   struct fid_cq **cq_p, void *context)
{
	struct fabsim_domain *d = (struct fabsim_domain *)domain;
	struct fi_cq_attr core_attr = *attr;
	struct fabsim_cq *cq;
	int ret;

	switch (fabsim_profile->wait_style) {
	case FABSIM_WAIT_REFUSED:
		/* efa: rxr_cq.c rxr_cq_open(): if (attr->wait_obj !=
		 * FI_WAIT_NONE) return -FI_ENOSYS; (FI_WAIT_UNSPEC included) */
		if (attr->wait_obj != FI_WAIT_NONE &&
		    fabsim_rule_on(&d->cfg, FABSIM_RULE_WAIT)) {
			FABSIM_WARN(FI_LOG_CQ, "wait: fi_cq_open with wait object %d refused: %s CQs have none\n",
				    attr->wait_obj, fabsim_profile->name);
			return fabsim_profile->wait_err;
		}
		break;
	case FABSIM_WAIT_IGNORED:
		/* opx: fi_opx_cq_open() never reads wait_obj; the rule
		 * refuses what needs it (sread, FI_GETWAIT) */
		if (fabsim_rule_on(&d->cfg, FABSIM_RULE_WAIT))
			core_attr.wait_obj = FI_WAIT_NONE;
		break;
	case FABSIM_WAIT_UNSIMULATED:
		/* psm3 and cxi give an fd; ours would have to follow the
		 * held completions and the manual progress: refused */
		if (attr->wait_obj != FI_WAIT_NONE) {
			FABSIM_WARN(FI_LOG_CQ, "fi_cq_open with wait object %d: %s has it, the simulation does not\n",
				    attr->wait_obj, fabsim_profile->name);
			return -FI_ENOSYS;
		}
		break;
	}
	if (attr->format == FI_CQ_FORMAT_UNSPEC)
		attr->format = FI_CQ_FORMAT_CONTEXT;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -FI_ENOMEM;
	core_attr.format = FI_CQ_FORMAT_TAGGED;
	core_attr.flags &= ~FI_AFFINITY;
	ret = fi_cq_open(d->core, &core_attr, &cq->core, context);
	if (ret) {
		free(cq);
		return ret;
	}
	cq->dom = d;
	cq->format = attr->format;
	cq->cq.fid.fclass = FI_CLASS_CQ;
	cq->cq.fid.context = context;
	cq->cq.fid.ops = &cq_fi_ops;
	cq->cq.ops = &cq_ops;
	pthread_mutex_lock(&d->lock);
	cq->next = d->cqs;
	d->cqs = cq;
	pthread_mutex_unlock(&d->lock);
	*cq_p = &cq->cq;
	return 0;
}
