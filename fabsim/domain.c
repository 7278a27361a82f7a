/*
 * fabsim domain, address vector and memory registration wrappers.
 */
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabsim.h"

/* auto progress, only when the manual rule is off */
static void *progress_thread(void *arg)
{
	struct fabsim_domain *d = arg;
	struct fabsim_cq *cq;
	bool stop = false;

	while (!stop) {
		pthread_mutex_lock(&d->lock);
		for (cq = d->cqs; cq; cq = cq->next)
			fabsim_cq_progress(cq);
		stop = d->thread_stop;
		pthread_mutex_unlock(&d->lock);
		usleep(200);
	}
	return NULL;
}

/* AV */
static int av_close(struct fid *fid)
{
	struct fabsim_av *av = (struct fabsim_av *)fid;
	int ret = fi_close(&av->core->fid);

	if (ret)
		return ret;
	free(av);
	return 0;
}

static int av_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct fabsim_av *av = (struct fabsim_av *)fid;

	return fi_av_bind(av->core, bfid, flags);
}

static int av_insert(struct fid_av *fav, const void *addr, size_t count,
		     fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	struct fabsim_av *av = (struct fabsim_av *)fav;
	struct sockaddr_in *sin;
	size_t i, len;
	int ret;

	sin = calloc(count ? count : 1, sizeof(*sin));
	if (!sin)
		return -FI_ENOMEM;
	for (i = 0; i < count; i++) {
		len = sizeof(*sin);
		ret = fabsim_addr_to_core((const char *)addr +
					  i * fabsim_profile->addrlen,
					  fabsim_profile->addrlen, &sin[i], &len);
		if (ret) {
			free(sin);
			return ret;
		}
	}
	ret = fi_av_insert(av->core, sin, count, fi_addr, flags, context);
	free(sin);
	return ret;
}

static int av_insertsvc(struct fid_av *fav, const char *node,
			const char *service, fi_addr_t *fi_addr,
			uint64_t flags, void *context)
{
	struct fabsim_av *av = (struct fabsim_av *)fav;

	return fi_av_insertsvc(av->core, node, service, fi_addr, flags, context);
}

static int av_insertsym(struct fid_av *fav, const char *node, size_t nodecnt,
			const char *service, size_t svccnt, fi_addr_t *fi_addr,
			uint64_t flags, void *context)
{
	struct fabsim_av *av = (struct fabsim_av *)fav;

	return fi_av_insertsym(av->core, node, nodecnt, service, svccnt,
			       fi_addr, flags, context);
}

static int av_remove(struct fid_av *fav, fi_addr_t *fi_addr, size_t count,
		     uint64_t flags)
{
	struct fabsim_av *av = (struct fabsim_av *)fav;

	return fi_av_remove(av->core, fi_addr, count, flags);
}

static int av_lookup(struct fid_av *fav, fi_addr_t fi_addr, void *addr,
		     size_t *addrlen)
{
	struct fabsim_av *av = (struct fabsim_av *)fav;
	struct sockaddr_in sin;
	size_t len = sizeof(sin);
	int ret;

	ret = fi_av_lookup(av->core, fi_addr, &sin, &len);
	if (ret)
		return ret;
	return fabsim_addr_from_core(&sin, sizeof(sin), addr, addrlen);
}

static const char *av_straddr(struct fid_av *fav, const void *addr, char *buf,
			      size_t *len)
{
	struct sockaddr_in sin = { 0 };
	size_t slen = sizeof(sin);
	char ip[INET_ADDRSTRLEN] = "?";
	int n;

	(void)fav;
	fabsim_addr_to_core(addr, fabsim_profile->addrlen, &sin, &slen);
	inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
	n = snprintf(buf, *len, "fi_addr_%s://sim/%s:%u", fabsim_profile->name,
		     ip, (unsigned)ntohs(sin.sin_port));
	*len = (size_t)n + 1;
	return buf;
}

static struct fi_ops av_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = av_close,
	.bind = av_bind,
	.control = fabsim_no_control,
	.ops_open = fabsim_no_ops_open,
};

static struct fi_ops_av av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = av_insert,
	.insertsvc = av_insertsvc,
	.insertsym = av_insertsym,
	.remove = av_remove,
	.lookup = av_lookup,
	.straddr = av_straddr,
};

static int av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		   struct fid_av **av_p, void *context)
{
	struct fabsim_domain *d = (struct fabsim_domain *)domain;
	struct fabsim_av *av;
	int ret;

	av = calloc(1, sizeof(*av));
	if (!av)
		return -FI_ENOMEM;
	ret = fi_av_open(d->core, attr, &av->core, context);
	if (ret) {
		free(av);
		return ret;
	}
	av->dom = d;
	av->av.fid.fclass = FI_CLASS_AV;
	av->av.fid.context = context;
	av->av.fid.ops = &av_fi_ops;
	av->av.ops = &av_ops;
	*av_p = &av->av;
	return 0;
}

/* domain */
static int domain_close(struct fid *fid)
{
	struct fabsim_domain *d = (struct fabsim_domain *)fid;
	struct fabsim_bounce *b;
	int ret;

	if (d->cqs || d->eps) {
		FABSIM_WARN(FI_LOG_DOMAIN, "domain closed with open CQs/EPs\n");
		return -FI_EBUSY;
	}
	if (d->thread_running) {
		pthread_mutex_lock(&d->lock);
		d->thread_stop = true;
		pthread_mutex_unlock(&d->lock);
		pthread_join(d->thread, NULL);
	}
	ret = fi_close(&d->core->fid);
	if (ret)
		return ret;
	while ((b = d->bounces)) {
		d->bounces = b->next;
		free(b->buf);
		free(b);
	}
	fi_freeinfo(d->core_info);
	pthread_mutex_destroy(&d->lock);
	free(d);
	return 0;
}

static int domain_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
			    struct fid_cntr **cntr, void *context)
{
	(void)domain; (void)attr; (void)cntr; (void)context;
	FABSIM_WARN(FI_LOG_DOMAIN, "counters are not simulated (%s has them)\n",
		    fabsim_profile->name);
	return -FI_ENOSYS;
}

static int domain_no_sep(struct fid_domain *domain, struct fi_info *info,
			 struct fid_ep **sep, void *context)
{
	(void)domain; (void)info; (void)sep; (void)context;
	return -FI_ENOSYS;
}

static int domain_no_poll(struct fid_domain *domain, struct fi_poll_attr *attr,
			  struct fid_poll **pollset)
{
	(void)domain; (void)attr; (void)pollset;
	return -FI_ENOSYS;
}

static int domain_no_stx(struct fid_domain *domain, struct fi_tx_attr *attr,
			 struct fid_stx **stx, void *context)
{
	(void)domain; (void)attr; (void)stx; (void)context;
	return -FI_ENOSYS;
}

static int domain_no_srx(struct fid_domain *domain, struct fi_rx_attr *attr,
			 struct fid_ep **rx_ep, void *context)
{
	(void)domain; (void)attr; (void)rx_ep; (void)context;
	FABSIM_WARN(FI_LOG_DOMAIN, "shared receive contexts are not simulated\n");
	return -FI_ENOSYS;
}

static int domain_no_atomic(struct fid_domain *domain, enum fi_datatype dt,
			    enum fi_op op, struct fi_atomic_attr *attr,
			    uint64_t flags)
{
	(void)domain; (void)dt; (void)op; (void)attr; (void)flags;
	return -FI_ENOSYS;
}

static int domain_no_coll(struct fid_domain *domain, enum fi_collective_op coll,
			  struct fi_collective_attr *attr, uint64_t flags)
{
	(void)domain; (void)coll; (void)attr; (void)flags;
	return -FI_ENOSYS;
}

static int domain_endpoint2(struct fid_domain *domain, struct fi_info *info,
			    struct fid_ep **ep, uint64_t flags, void *context)
{
	if (flags)
		return -FI_ENOSYS;
	return fabsim_ep_open(domain, info, ep, context);
}

static struct fi_ops domain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = domain_close,
	.bind = fabsim_no_bind,
	.control = fabsim_no_control,
	.ops_open = fabsim_no_ops_open,
};

static struct fi_ops_domain domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = av_open,
	.cq_open = fabsim_cq_open,
	.endpoint = fabsim_ep_open,
	.scalable_ep = domain_no_sep,
	.cntr_open = domain_cntr_open,
	.poll_open = domain_no_poll,
	.stx_ctx = domain_no_stx,
	.srx_ctx = domain_no_srx,
	.query_atomic = domain_no_atomic,
	.query_collective = domain_no_coll,
	.endpoint2 = domain_endpoint2,
};

int fabsim_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		       struct fid_domain **dom, void *context)
{
	struct fabsim_fabric *f = (struct fabsim_fabric *)fabric;
	struct fabsim_domain *d;
	struct fi_info *h, *core = NULL;
	int mr_mode, ret;

	ret = fabsim_core_hints(info, &h);
	if (ret)
		return ret;
	ret = fi_getinfo(fabsim_prov.fi_version, NULL, NULL, 0, h, &core);
	fi_freeinfo(h);
	if (ret) {
		FABSIM_WARN(FI_LOG_DOMAIN, "no core domain %s: %s\n",
			    info->domain_attr->name, fi_strerror(-ret));
		return ret;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		fi_freeinfo(core);
		return -FI_ENOMEM;
	}
	/* the core's util MR map takes virtual addresses or offsets, makes
	 * keys or takes the consumer's, as the profile grants */
	mr_mode = fabsim_profile->mr_at_domain ?
		  fabsim_profile->mr_at_domain(info->domain_attr->mr_mode) :
		  info->domain_attr->mr_mode;
	core->domain_attr->mr_mode = fabsim_core_mr_mode(mr_mode);
	ret = fi_domain(f->core, core, &d->core, context);
	if (ret) {
		FABSIM_WARN(FI_LOG_DOMAIN, "core fi_domain: %s\n", fi_strerror(-ret));
		fi_freeinfo(core);
		free(d);
		return ret;
	}
	d->core_info = core;
	d->fab = f;
	fabsim_config_load(&d->cfg);
	d->mr_mode = mr_mode;
	d->offset = !(d->mr_mode & (FI_MR_BASIC | FI_MR_VIRT_ADDR));
	if (info->domain_attr->cq_data_size < d->cfg.cq_data_size)
		d->cfg.cq_data_size = info->domain_attr->cq_data_size;
	pthread_mutex_init(&d->lock, NULL);
	d->domain.fid.fclass = FI_CLASS_DOMAIN;
	d->domain.fid.context = context;
	d->domain.fid.ops = &domain_fi_ops;
	d->domain.ops = &domain_ops;
	d->domain.mr = &fabsim_mr_ops;
	/* psm3 and opx run a progress thread when FI_PROGRESS_AUTO was asked */
	if (!fabsim_rule_on(&d->cfg, FABSIM_RULE_MANUAL) ||
	    (fabsim_profile->auto_ok &&
	     info->domain_attr->data_progress == FI_PROGRESS_AUTO)) {
		ret = pthread_create(&d->thread, NULL, progress_thread, d);
		d->thread_running = !ret;
	}
	*dom = &d->domain;
	return 0;
}
