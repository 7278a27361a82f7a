/*
 * fabsim provider entry: fi_prov_ini, getinfo (the profile's attributes
 * over the core's fi_info), fabric, addresses.
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "fabsim.h"

static int fabsim_getinfo(uint32_t version, const char *node,
			  const char *service, uint64_t flags,
			  const struct fi_info *hints, struct fi_info **info);
static int fabsim_fabric_open(struct fi_fabric_attr *attr,
			      struct fid_fabric **fabric, void *context);
static void fabsim_cleanup(void);

struct fi_provider fabsim_prov = {
	.version = FABSIM_VERSION,
	.fi_version = FI_VERSION(1, 17),
	.getinfo = fabsim_getinfo,
	.fabric = fabsim_fabric_open,
	.cleanup = fabsim_cleanup,
};

struct fi_provider *fi_prov_ini(void);

FI_EXT_INI
{
	fabsim_prov.name = fabsim_profile->prov_name;
	return &fabsim_prov;
}

static void fabsim_cleanup(void)
{
}

int fabsim_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	(void)fid; (void)bfid; (void)flags;
	return -FI_ENOSYS;
}

int fabsim_no_control(struct fid *fid, int command, void *arg)
{
	(void)fid; (void)command; (void)arg;
	return -FI_ENOSYS;
}

int fabsim_no_ops_open(struct fid *fid, const char *name, uint64_t flags,
		       void **ops, void *context)
{
	(void)fid; (void)name; (void)flags; (void)ops; (void)context;
	return -FI_ENOSYS;
}

/*
 * A profile address carries the core's sockaddr_in.  efa and psm3 addresses
 * (32 bytes) hold it whole, zero-padded; opx and cxi addresses are 8 bytes,
 * which hold the IPv4 address and the port (bytes 0-3 and 4-5, network
 * order): enough for 127.0.0.1, the only place the simulation runs.
 */
#define PACKED_LEN	6

int fabsim_addr_to_core(const void *addr, size_t len, void *out, size_t *outlen)
{
	struct sockaddr_in sin;

	if (*outlen < sizeof(sin))
		return -FI_EINVAL;
	if (fabsim_profile->addrlen >= sizeof(sin)) {
		if (len < sizeof(sin))
			return -FI_EINVAL;
		memcpy(out, addr, sizeof(sin));
	} else {
		if (len < PACKED_LEN)
			return -FI_EINVAL;
		memset(&sin, 0, sizeof(sin));
		sin.sin_family = AF_INET;
		memcpy(&sin.sin_addr, addr, 4);
		memcpy(&sin.sin_port, (const char *)addr + 4, 2);
		memcpy(out, &sin, sizeof(sin));
	}
	*outlen = sizeof(sin);
	return 0;
}

int fabsim_addr_from_core(const void *addr, size_t len, void *out, size_t *outlen)
{
	size_t need = fabsim_profile->addrlen;
	struct sockaddr_in sin;

	if (*outlen < need) {
		*outlen = need;
		return -FI_ETOOSMALL;
	}
	memset(out, 0, need);
	if (need >= sizeof(sin)) {
		memcpy(out, addr, len < need ? len : need);
	} else {
		if (len < sizeof(sin))
			return -FI_EINVAL;
		memcpy(&sin, addr, sizeof(sin));
		memcpy(out, &sin.sin_addr, 4);
		memcpy((char *)out + 4, &sin.sin_port, 2);
	}
	*outlen = need;
	return 0;
}

static void *addr_dup_to_core(const void *addr, size_t len, size_t *outlen)
{
	void *out = calloc(1, sizeof(struct sockaddr_in));

	*outlen = sizeof(struct sockaddr_in);
	if (out && fabsim_addr_to_core(addr, len, out, outlen)) {
		free(out);
		out = NULL;
	}
	return out;
}

static void *addr_dup_from_core(const void *addr, size_t len, size_t *outlen)
{
	void *out = calloc(1, fabsim_profile->addrlen);

	*outlen = fabsim_profile->addrlen;
	if (out)
		fabsim_addr_from_core(addr, len, out, outlen);
	return out;
}

static int refuse(const struct fi_info *hints, const char *why)
{
	if (hints && hints->fabric_attr && hints->fabric_attr->prov_name)
		FABSIM_WARN(FI_LOG_CORE, "hints refused: %s\n", why);
	else
		FABSIM_INFO(FI_LOG_CORE, "hints refused: %s\n", why);
	return -FI_ENODATA;
}

static size_t max_cq_data(void)
{
	const struct fabsim_profile *p = fabsim_profile;
	size_t i, m = 0;

	for (i = 0; i < p->n_variants; i++)
		if (p->variants[i].cq_data_size > m)
			m = p->variants[i].cq_data_size;
	return m;
}

/* the real providers' getinfo checks (ofi_check_info() as efa and psm3 call
 * it, fi_opx_check_info(), cxip_getinfo()); the profile's mr_grant decides
 * the MR mode */
static int check_hints(const struct fi_info *h, const struct fabsim_config *cfg)
{
	const struct fabsim_profile *p = fabsim_profile;

	if (!h)
		return 0;
	if (h->caps & ~p->caps)
		return refuse(h, "caps beyond the profile's");
	if ((h->mode & cfg->mode) != cfg->mode)
		return refuse(h, "mode bits the profile needs are not granted");
	if (h->addr_format != FI_FORMAT_UNSPEC && h->addr_format != p->addr_format)
		return refuse(h, "address format");
	if (h->ep_attr) {
		if (h->ep_attr->type != FI_EP_UNSPEC && h->ep_attr->type != FI_EP_RDM)
			return refuse(h, "endpoint type (only FI_EP_RDM simulated)");
		if (h->ep_attr->max_msg_size > cfg->max_msg_size)
			return refuse(h, "max_msg_size");
		if (h->ep_attr->protocol != FI_PROTO_UNSPEC &&
		    h->ep_attr->protocol != p->protocol)
			return refuse(h, "protocol");
		if (h->ep_attr->tx_ctx_cnt > 1 || h->ep_attr->rx_ctx_cnt > 1)
			return refuse(h, "scalable endpoints");
	}
	if (h->domain_attr) {
		if (p->mr_grant(h->domain_attr->mr_mode, h->caps) < 0)
			return refuse(h, "mr_mode: the hints do not grant what the provider needs");
		if (h->domain_attr->cq_data_size > cfg->cq_data_size ||
		    h->domain_attr->cq_data_size > max_cq_data())
			return refuse(h, "cq_data_size");
		if (h->domain_attr->mr_key_size > p->mr_key_size)
			return refuse(h, "mr_key_size");
	}
	if (h->tx_attr) {
		if (h->tx_attr->caps & ~p->tx_caps)
			return refuse(h, "tx caps");
		if ((h->tx_attr->mode & cfg->mode) != cfg->mode &&
		    (h->mode & cfg->mode) != cfg->mode)
			return refuse(h, "tx mode");
		if (h->tx_attr->msg_order & ~p->msg_order)
			return refuse(h, "tx msg_order beyond the profile's");
		if (h->tx_attr->comp_order & ~p->comp_order)
			return refuse(h, "tx comp_order beyond the profile's");
		if (h->tx_attr->inject_size > p->inject_size)
			return refuse(h, "inject_size");
		if (h->tx_attr->iov_limit > p->tx_iov_limit)
			return refuse(h, "tx iov_limit");
		if (h->tx_attr->rma_iov_limit > p->rma_iov_limit)
			return refuse(h, "rma_iov_limit");
	}
	if (h->rx_attr) {
		if (h->rx_attr->caps & ~p->rx_caps)
			return refuse(h, "rx caps");
		if (h->rx_attr->msg_order & ~p->msg_order)
			return refuse(h, "rx msg_order beyond the profile's");
		if (h->rx_attr->comp_order & ~p->comp_order)
			return refuse(h, "rx comp_order beyond the profile's");
		if (h->rx_attr->iov_limit > p->rx_iov_limit)
			return refuse(h, "rx iov_limit");
		if (h->rx_attr->total_buffered_recv)
			return refuse(h, "total_buffered_recv");
	}
	return 0;
}

/* hints for the core, from the consumer's (NULL: none) */
int fabsim_core_hints(const struct fi_info *hints, struct fi_info **core_hints_p)
{
	struct fi_info *c = fi_allocinfo();

	if (!c)
		return -FI_ENOMEM;
	c->caps = (hints && hints->caps ? hints->caps : fabsim_profile->caps) &
		  fabsim_profile->caps;
	c->mode = ~0ull;
	c->addr_format = FI_SOCKADDR_IN;
	c->ep_attr->type = FI_EP_RDM;
	c->domain_attr->mr_mode = FI_MR_UNSPEC;
	c->domain_attr->threading = FI_THREAD_SAFE;
	c->fabric_attr->prov_name = strdup(FABSIM_CORE_PROV);
	if (hints) {
		if (hints->src_addr)
			c->src_addr = addr_dup_to_core(hints->src_addr,
						       hints->src_addrlen,
						       &c->src_addrlen);
		if (hints->dest_addr)
			c->dest_addr = addr_dup_to_core(hints->dest_addr,
							hints->dest_addrlen,
							&c->dest_addrlen);
		if (hints->fabric_attr && hints->fabric_attr->name)
			c->fabric_attr->name = strdup(hints->fabric_attr->name);
		if (hints->domain_attr && hints->domain_attr->name)
			c->domain_attr->name = strdup(hints->domain_attr->name);
		if (hints->domain_attr)
			c->domain_attr->av_type = hints->domain_attr->av_type;
	}
	*core_hints_p = c;
	return 0;
}

static struct fi_info *profile_info(const struct fi_info *core,
				    const struct fi_info *hints,
				    const struct fabsim_config *cfg,
				    const struct fabsim_variant *v)
{
	const struct fabsim_profile *p = fabsim_profile;
	struct fi_info *i = fi_allocinfo();
	enum fi_progress prog;
	bool rma;

	if (!i)
		return NULL;
	i->caps = hints && hints->caps ?
		  (hints->caps & p->caps) | p->domain_caps | FI_SOURCE : p->caps;
	if (hints && hints->caps && !(hints->caps & FI_SOURCE))
		i->caps &= ~FI_SOURCE;
	rma = !!(i->caps & FI_RMA);
	i->mode = cfg->mode;
	i->addr_format = p->addr_format;
	if (core->src_addr)
		i->src_addr = addr_dup_from_core(core->src_addr, core->src_addrlen,
						 &i->src_addrlen);
	if (core->dest_addr)
		i->dest_addr = addr_dup_from_core(core->dest_addr,
						  core->dest_addrlen,
						  &i->dest_addrlen);

	i->tx_attr->caps = p->tx_caps & (i->caps | FI_SEND | FI_READ | FI_WRITE);
	i->tx_attr->mode = cfg->mode;
	i->tx_attr->op_flags = hints && hints->tx_attr && hints->tx_attr->op_flags ?
			       hints->tx_attr->op_flags : p->tx_op_flags;
	i->tx_attr->msg_order = p->msg_order;
	i->tx_attr->comp_order = p->comp_order;
	i->tx_attr->inject_size = p->inject_size;
	i->tx_attr->size = core->tx_attr->size;
	i->tx_attr->iov_limit = p->tx_iov_limit;
	i->tx_attr->rma_iov_limit = p->rma_iov_limit;

	i->rx_attr->caps = p->rx_caps & (i->caps | FI_RECV | FI_REMOTE_READ |
					 FI_REMOTE_WRITE);
	i->rx_attr->mode = cfg->mode;
	i->rx_attr->op_flags = hints && hints->rx_attr && hints->rx_attr->op_flags ?
			       hints->rx_attr->op_flags : p->rx_op_flags;
	i->rx_attr->msg_order = p->msg_order;
	i->rx_attr->comp_order = p->comp_order;
	i->rx_attr->size = core->rx_attr->size;
	i->rx_attr->iov_limit = p->rx_iov_limit;

	i->ep_attr->type = FI_EP_RDM;
	i->ep_attr->protocol = p->protocol;
	i->ep_attr->protocol_version = p->protocol_version;
	i->ep_attr->max_msg_size = cfg->max_msg_size;
	i->ep_attr->mem_tag_format = v->mem_tag_format;
	i->ep_attr->tx_ctx_cnt = 1;
	i->ep_attr->rx_ctx_cnt = 1;

	i->domain_attr->name = strdup(core->domain_attr->name);
	i->domain_attr->caps = p->domain_caps;
	i->domain_attr->threading = p->threading;
	prog = rma ? p->rma_progress : p->progress;
	/* psm3 (psmx3_alter_prov_info()) and opx (fi_opx_getinfo()) give
	 * FI_PROGRESS_AUTO when asked: they have a progress thread */
	if (p->auto_ok && hints && hints->domain_attr &&
	    hints->domain_attr->data_progress == FI_PROGRESS_AUTO)
		prog = FI_PROGRESS_AUTO;
	i->domain_attr->control_progress = prog;
	i->domain_attr->data_progress = prog;
	i->domain_attr->resource_mgmt = FI_RM_ENABLED;
	i->domain_attr->av_type = hints && hints->domain_attr &&
				  hints->domain_attr->av_type != FI_AV_UNSPEC ?
				  hints->domain_attr->av_type : p->av_type;
	i->domain_attr->mr_mode = p->mr_grant(hints && hints->domain_attr ?
					      hints->domain_attr->mr_mode :
					      FI_MR_UNSPEC, i->caps);
	i->domain_attr->mr_key_size = p->mr_key_size;
	i->domain_attr->cq_data_size = v->cq_data_size < cfg->cq_data_size ?
				       v->cq_data_size : cfg->cq_data_size;
	i->domain_attr->cq_cnt = core->domain_attr->cq_cnt;
	i->domain_attr->ep_cnt = core->domain_attr->ep_cnt;
	i->domain_attr->tx_ctx_cnt = core->domain_attr->tx_ctx_cnt;
	i->domain_attr->rx_ctx_cnt = core->domain_attr->rx_ctx_cnt;
	i->domain_attr->max_ep_tx_ctx = 1;
	i->domain_attr->max_ep_rx_ctx = 1;
	i->domain_attr->mr_iov_limit = p->mr_iov_limit;

	i->fabric_attr->name = strdup(core->fabric_attr->name);
	i->fabric_attr->prov_version = FABSIM_VERSION;
	if (!i->domain_attr->name || !i->fabric_attr->name) {
		fi_freeinfo(i);
		return NULL;
	}
	return i;
}

/* The simulated device: the core's domain on FABSIM_DOMAIN (default lo).
 * A real efa device has no IP address of its own, so a consumer asks it
 * without a node and takes the first answer: that must not be the core
 * on another interface, whose traffic would leave the host. */
static bool sim_device(const struct fi_info *core)
{
	const char *want = getenv("FABSIM_DOMAIN");

	if (!want || !*want)
		want = "lo";
	return core->domain_attr->name && strcmp(core->domain_attr->name, want) == 0;
}

static int fabsim_getinfo(uint32_t version, const char *node,
			  const char *service, uint64_t flags,
			  const struct fi_info *hints, struct fi_info **info)
{
	const struct fabsim_profile *p = fabsim_profile;
	struct fabsim_config cfg;
	struct fi_info *ch, *core = NULL, *c, *head = NULL, **tail = &head, *i;
	size_t k, hint_data;
	int ret;

	fabsim_config_load(&cfg);
	ret = check_hints(hints, &cfg);
	if (ret)
		return ret;
	ret = fabsim_core_hints(hints, &ch);
	if (ret)
		return ret;
	ret = fi_getinfo(version, node, service, flags, ch, &core);
	fi_freeinfo(ch);
	if (ret)
		return ret;
	hint_data = hints && hints->domain_attr ? hints->domain_attr->cq_data_size : 0;
	for (c = core; c && !ret; c = c->next) {
		if (c->addr_format != FI_SOCKADDR_IN || !sim_device(c))
			continue;
		/* psm3: the tag64 instance (no CQ data) only when the hints
		 * ask no cq_data_size (psmx3_init_prov_info()) */
		for (k = 0; k < p->n_variants; k++) {
			if (hint_data > p->variants[k].cq_data_size)
				continue;
			i = profile_info(c, hints, &cfg, &p->variants[k]);
			if (!i) {
				ret = -FI_ENOMEM;
				break;
			}
			*tail = i;
			tail = &i->next;
		}
	}
	fi_freeinfo(core);
	if (ret) {
		fi_freeinfo(head);
		return ret;
	}
	*info = head;
	return head ? 0 : -FI_ENODATA;
}

/* fabric */
static int fabsim_fabric_close(struct fid *fid)
{
	struct fabsim_fabric *f = (struct fabsim_fabric *)fid;
	int ret = fi_close(&f->core->fid);

	if (ret)
		return ret;
	free(f);
	return 0;
}

static int fabsim_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
			  struct fid_eq **eq, void *context)
{
	struct fabsim_fabric *f = (struct fabsim_fabric *)fabric;

	/* EQs are the core's own (efa, psm3 and cxi: util EQ, as here) */
	return fi_eq_open(f->core, attr, eq, context);
}

static int fabsim_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
			    struct fid_wait **waitset)
{
	(void)fabric; (void)attr; (void)waitset;
	FABSIM_WARN(FI_LOG_FABRIC, "wait sets refused: not simulated (%s)\n",
		    fabsim_profile->name);
	return -FI_ENOSYS;
}

static int fabsim_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	(void)fabric; (void)fids; (void)count;
	return -FI_ENOSYS;
}

static int fabsim_pep(struct fid_fabric *fabric, struct fi_info *info,
		      struct fid_pep **pep, void *context)
{
	(void)fabric; (void)info; (void)pep; (void)context;
	return -FI_ENOSYS;
}

static int fabsim_domain2(struct fid_fabric *fabric, struct fi_info *info,
			  struct fid_domain **dom, uint64_t flags, void *context)
{
	if (flags)
		return -FI_ENOSYS;
	return fabsim_domain_open(fabric, info, dom, context);
}

static struct fi_ops fabsim_fabric_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = fabsim_fabric_close,
	.bind = fabsim_no_bind,
	.control = fabsim_no_control,
	.ops_open = fabsim_no_ops_open,
};

static struct fi_ops_fabric fabsim_fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = fabsim_domain_open,
	.passive_ep = fabsim_pep,
	.eq_open = fabsim_eq_open,
	.wait_open = fabsim_wait_open,
	.trywait = fabsim_trywait,
	.domain2 = fabsim_domain2,
};

static int fabsim_fabric_open(struct fi_fabric_attr *attr,
			      struct fid_fabric **fabric, void *context)
{
	struct fabsim_fabric *f;
	struct fi_info *h, *core = NULL;
	int ret;

	h = fi_allocinfo();
	if (!h)
		return -FI_ENOMEM;
	h->fabric_attr->prov_name = strdup(FABSIM_CORE_PROV);
	if (attr->name)
		h->fabric_attr->name = strdup(attr->name);
	h->ep_attr->type = FI_EP_RDM;
	h->addr_format = FI_SOCKADDR_IN;
	ret = fi_getinfo(fabsim_prov.fi_version, NULL, NULL, 0, h, &core);
	fi_freeinfo(h);
	if (ret) {
		FABSIM_WARN(FI_LOG_FABRIC, "no core fabric %s: %s\n",
			    attr->name ? attr->name : "(any)", fi_strerror(-ret));
		return ret;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		fi_freeinfo(core);
		return -FI_ENOMEM;
	}
	ret = fi_fabric(core->fabric_attr, &f->core, context);
	fi_freeinfo(core);
	if (ret) {
		free(f);
		return ret;
	}
	f->fabric.fid.fclass = FI_CLASS_FABRIC;
	f->fabric.fid.context = context;
	f->fabric.fid.ops = &fabsim_fabric_fi_ops;
	f->fabric.ops = &fabsim_fabric_ops;
	*fabric = &f->fabric;
	return 0;
}
