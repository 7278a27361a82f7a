/*
 * fabsim memory registration: the consumer's descriptor is the wrapper, the
 * key is the core's.  A registry of this process's MRs and enabled
 * endpoints lets an RMA whose target is in the same process be checked as
 * the hardware checks it at the target (offset range, FI_MR_ENDPOINT
 * enable), and fail with the provider's error completion.  A target in
 * another process is not seen here: the core's util MR map then refuses an
 * out-of-range offset itself, and rxd drops the packet (the RMA stalls).
 * Lock order: a domain lock, then reg_lock.
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "fabsim.h"

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fabsim_mr *reg_mrs;
static struct fabsim_ep *reg_eps;

void fabsim_ep_register(struct fabsim_ep *ep)
{
	struct sockaddr_in sin;
	size_t len = sizeof(sin);

	if (ep->registered || fi_getname(&ep->core->fid, &sin, &len) ||
	    len != sizeof(sin))
		return;
	pthread_mutex_lock(&reg_lock);
	memcpy(ep->name, &sin, sizeof(sin));
	ep->reg_next = reg_eps;
	reg_eps = ep;
	ep->registered = true;
	pthread_mutex_unlock(&reg_lock);
}

void fabsim_ep_unregister(struct fabsim_ep *ep)
{
	struct fabsim_ep **pp;

	pthread_mutex_lock(&reg_lock);
	for (pp = &reg_eps; *pp; pp = &(*pp)->reg_next) {
		if (*pp == ep) {
			*pp = ep->reg_next;
			break;
		}
	}
	ep->registered = false;
	pthread_mutex_unlock(&reg_lock);
}

static bool same_sin(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_port == b->sin_port &&
	       a->sin_addr.s_addr == b->sin_addr.s_addr;
}

/* reg_lock held */
static struct fabsim_mr *find_target_mr(const struct sockaddr_in *sin,
					uint64_t key)
{
	struct fabsim_domain *tdom = NULL;
	struct fabsim_ep *t;
	struct fabsim_mr *mr;
	struct sockaddr_in tsin;

	for (t = reg_eps; t && !tdom; t = t->reg_next) {
		memcpy(&tsin, t->name, sizeof(tsin));
		if (same_sin(&tsin, sin))
			tdom = t->dom;
	}
	for (mr = reg_mrs; tdom && mr; mr = mr->reg_next)
		if (mr->dom == tdom && mr->mr.key == key)
			return mr;
	return NULL;
}

/*
 * 0, or the error the provider's initiator would see in its completion.
 * Called with the initiator's domain lock held.
 */
int fabsim_rma_target_check(struct fabsim_ep *ep, fi_addr_t dest,
			    const struct fi_rma_iov *rma, size_t count,
			    uint64_t access)
{
	const struct fabsim_config *cfg = &ep->dom->cfg;
	bool off_rule = fabsim_rule_on(cfg, FABSIM_RULE_OFFSET);
	bool ep_rule = fabsim_rule_on(cfg, FABSIM_RULE_MR_ENDPOINT);
	struct sockaddr_in sin;
	size_t i, len = sizeof(sin);
	struct fabsim_mr *mr;
	int err = 0;

	(void)access;
	if ((!off_rule && !ep_rule) || !ep->av ||
	    fi_av_lookup(ep->av->core, dest, &sin, &len) || len != sizeof(sin))
		return 0;
	pthread_mutex_lock(&reg_lock);
	for (i = 0; i < count && !err; i++) {
		mr = find_target_mr(&sin, rma[i].key);
		if (!mr)
			continue;	/* another process: the core's check */
		if (ep_rule && (mr->dom->mr_mode & FI_MR_ENDPOINT) &&
		    !mr->enabled) {
			FABSIM_WARN(FI_LOG_EP_DATA, "mr_endpoint: RMA to key 0x%llx, an MR not bound and enabled\n",
				    (unsigned long long)rma[i].key);
			err = fabsim_profile->mr_endpoint_err;
		} else if (off_rule && mr->dom->offset &&
			   (rma[i].addr > mr->len ||
			    rma[i].len > mr->len - rma[i].addr)) {
			FABSIM_WARN(FI_LOG_EP_DATA, "offset: RMA at offset 0x%llx+%zu beyond the %zu-byte MR (a virtual address?)\n",
				    (unsigned long long)rma[i].addr, rma[i].len,
				    mr->len);
			err = fabsim_profile->offset_err;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return err;
}

static int mr_close(struct fid *fid)
{
	struct fabsim_mr *mr = (struct fabsim_mr *)fid, **pp;
	int ret = fi_close(&mr->core->fid);

	if (ret)
		return ret;
	pthread_mutex_lock(&reg_lock);
	for (pp = &reg_mrs; *pp; pp = &(*pp)->reg_next) {
		if (*pp == mr) {
			*pp = mr->reg_next;
			break;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	free(mr);
	return 0;
}

/* FI_MR_ENDPOINT (cxi): bound to one endpoint, then enabled */
static int mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct fabsim_mr *mr = (struct fabsim_mr *)fid;

	(void)flags;
	if (!(mr->dom->mr_mode & FI_MR_ENDPOINT)) {
		FABSIM_WARN(FI_LOG_MR, "fi_mr_bind: %s has no FI_MR_ENDPOINT\n",
			    fabsim_profile->name);
		return -FI_ENOSYS;
	}
	if (bfid->fclass != FI_CLASS_EP ||
	    ((struct fabsim_ep *)bfid)->dom != mr->dom) {
		FABSIM_WARN(FI_LOG_MR, "fi_mr_bind: not an endpoint of the MR's domain\n");
		return -FI_EINVAL;
	}
	pthread_mutex_lock(&reg_lock);
	if (mr->enabled) {
		pthread_mutex_unlock(&reg_lock);
		return -FI_EINVAL;	/* cxip_mr_bind(): mr->enabled */
	}
	mr->bound = (struct fabsim_ep *)bfid;
	pthread_mutex_unlock(&reg_lock);
	return 0;
}

static int mr_control(struct fid *fid, int command, void *arg)
{
	struct fabsim_mr *mr = (struct fabsim_mr *)fid;
	int ret = 0;

	(void)arg;
	if (command != FI_ENABLE || !(mr->dom->mr_mode & FI_MR_ENDPOINT))
		return -FI_ENOSYS;
	pthread_mutex_lock(&reg_lock);
	if (!mr->bound) {
		FABSIM_WARN(FI_LOG_MR, "fi_mr_enable before fi_mr_bind (cxip_mr_control: -FI_EINVAL)\n");
		ret = -FI_EINVAL;
	} else {
		mr->enabled = true;
	}
	pthread_mutex_unlock(&reg_lock);
	return ret;
}

static struct fi_ops mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mr_close,
	.bind = mr_bind,
	.control = mr_control,
	.ops_open = fabsim_no_ops_open,
};

static int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr,
		      uint64_t flags, struct fid_mr **mr_p)
{
	struct fabsim_domain *d = (struct fabsim_domain *)fid;
	size_t ksize = fabsim_profile->mr_key_size;
	struct fabsim_mr *mr;
	size_t i;
	int ret;

	if (attr->iov_count > fabsim_profile->mr_iov_limit) {
		FABSIM_WARN(FI_LOG_MR, "mr iov_count %zu > mr_iov_limit %zu\n",
			    attr->iov_count, fabsim_profile->mr_iov_limit);
		return -FI_EINVAL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -FI_ENOMEM;
	ret = fi_mr_regattr(d->core, attr, flags, &mr->core);
	if (ret) {
		free(mr);
		return ret;
	}
	mr->mr.fid.fclass = FI_CLASS_MR;
	mr->mr.fid.context = attr->context;
	mr->mr.fid.ops = &mr_fi_ops;
	mr->mr.mem_desc = mr;
	mr->mr.key = fi_mr_key(mr->core);
	mr->dom = d;
	mr->access = attr->access;
	for (i = 0; i < attr->iov_count; i++)
		mr->len += attr->mr_iov[i].iov_len;
	/* an MR is usable at once unless FI_MR_ENDPOINT was granted */
	mr->enabled = !(d->mr_mode & FI_MR_ENDPOINT);
	if (ksize < 8 && mr->mr.key >> (8 * ksize))
		FABSIM_WARN(FI_LOG_MR, "key 0x%llx exceeds %s's %zu-byte key\n",
			    (unsigned long long)mr->mr.key,
			    fabsim_profile->name, ksize);
	pthread_mutex_lock(&reg_lock);
	mr->reg_next = reg_mrs;
	reg_mrs = mr;
	pthread_mutex_unlock(&reg_lock);
	*mr_p = &mr->mr;
	return 0;
}

static int mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
		   uint64_t access, uint64_t offset, uint64_t requested_key,
		   uint64_t flags, struct fid_mr **mr, void *context)
{
	struct fi_mr_attr attr = {
		.mr_iov = iov,
		.iov_count = count,
		.access = access,
		.offset = offset,
		.requested_key = requested_key,
		.context = context,
	};

	return mr_regattr(fid, &attr, flags, mr);
}

static int mr_reg(struct fid *fid, const void *buf, size_t len,
		  uint64_t access, uint64_t offset, uint64_t requested_key,
		  uint64_t flags, struct fid_mr **mr, void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return mr_regv(fid, &iov, 1, access, offset, requested_key, flags, mr,
		       context);
}

struct fi_ops_mr fabsim_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = mr_reg,
	.regv = mr_regv,
	.regattr = mr_regattr,
};
