/* libfabric: fabric and domain per IA, memory registration. */
#include "fabric_int.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DFI_FI_VERSION FI_VERSION(1, 17)

int dfi_resolve_ipv4(const char *where, struct sockaddr_in *out)
{
	struct ifaddrs *ifa, *i;
	struct addrinfo hints = { .ai_family = AF_INET }, *res;
	bool iface_seen = false;

	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	/* 1. a network interface, as cma does */
	if (getifaddrs(&ifa) != 0) {
		/* no descriptor for its netlink socket is not a missing
		 * interface: the caller says what it is */
		if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
			return -errno;
		ifa = NULL;
	}
	if (ifa) {
		for (i = ifa; i; i = i->ifa_next) {
			if (strcmp(i->ifa_name, where) != 0)
				continue;
			iface_seen = true;
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
				out->sin_addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
				freeifaddrs(ifa);
				return 0;
			}
		}
		freeifaddrs(ifa);
	}
	if (iface_seen)
		return -EADDRNOTAVAIL;
	/* 2. an IPv4 literal */
	if (inet_pton(AF_INET, where, &out->sin_addr) == 1)
		return 0;
	/* 3. a host name */
	if (getaddrinfo(where, NULL, &hints, &res) == 0) {
		out->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
		freeaddrinfo(res);
		return 0;
	}
	return -ENOENT;
}

static struct fi_info *make_hints(const char *prov, const char *domain)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG | FI_RMA;
	h->addr_format = FI_SOCKADDR_IN;
	/* No mode bits: the context of every post is our own descriptor, with
	 * no struct fi_context in front for a provider to write in.  A
	 * provider that needs FI_CONTEXT is not offered rather than handed
	 * memory it would scribble on (tcp, verbs and sockets MSG endpoints
	 * need none). */
	h->mode = 0;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				  FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_SAFE;
	if (prov)
		h->fabric_attr->prov_name = strdup(prov);
	if (domain && *domain)
		h->domain_attr->name = strdup(domain);
	return h;
}

/* Is `prov` a libfabric provider at all?  Tells the two ENODATA apart. */
static bool provider_exists(const char *prov)
{
	struct fi_info *h = fi_allocinfo(), *info = NULL;
	bool found;

	if (!h)
		return true;
	h->fabric_attr->prov_name = strdup(prov);
	found = fi_getinfo(DFI_FI_VERSION, NULL, NULL, 0, h, &info) == 0;
	fi_freeinfo(info);
	fi_freeinfo(h);
	return found;
}

/* The fi_info dfi_fabric_open opens: provider prov bound to addr (and
 * domain, if given), queues as deep as granted up to 1024.  Errors as
 * dfi_fabric_open's, with the reason in err. */
static int get_info(const char *prov, const struct sockaddr_in *addr, const char *domain,
		    struct fi_info **out, char *err, size_t errlen)
{
	struct fi_info *hints = make_hints(prov, domain);
	char node[INET_ADDRSTRLEN];
	int rc;

	*out = NULL;
	if (!hints) {
		snprintf(err, errlen, "out of memory");
		return -FI_ENOMEM;
	}
	inet_ntop(AF_INET, &addr->sin_addr, node, sizeof(node));
	/* Native atomics where the provider has them (the IB extension's
	 * compare-and-swap and fetch-and-add): tcp and net 1.17 answer
	 * ENODATA, and are asked again without.  Deep queues too; what the
	 * provider grants otherwise. */
	rc = -FI_ENODATA;
	for (int atomic = 1; atomic >= 0 && rc == -FI_ENODATA; atomic--) {
		hints->caps = atomic ? hints->caps | FI_ATOMIC : hints->caps & ~FI_ATOMIC;
		hints->tx_attr->size = 1024;
		hints->rx_attr->size = 1024;
		rc = fi_getinfo(DFI_FI_VERSION, node, NULL, FI_SOURCE, hints, out);
		if (rc == -FI_ENODATA) {
			hints->tx_attr->size = 0;
			hints->rx_attr->size = 0;
			rc = fi_getinfo(DFI_FI_VERSION, node, NULL, FI_SOURCE, hints, out);
		}
	}
	if (rc) {
		*out = NULL;
		if (rc == -FI_ENODATA && !provider_exists(prov)) {
			snprintf(err, errlen, "libfabric has no provider '%s' (fi_info -l "
				 "lists them): fi_getinfo: %s", prov, fi_strerror(-rc));
			rc = -ENOENT;
		} else {
			snprintf(err, errlen, "libfabric provider '%s' offers no FI_EP_MSG "
				 "endpoint with FI_MSG|FI_RMA on %s%s%s: fi_getinfo: %s",
				 prov, node, domain && *domain ? " in domain " : "",
				 domain ? domain : "", fi_strerror(-rc));
			rc = rc == -FI_ENODATA ? -ENODEV : rc;
		}
	}
	fi_freeinfo(hints);
	return rc;
}

static void fill_limits(const struct fi_info *i, struct dfi_fabric_limits *l)
{
	l->iov_limit = i->tx_attr->iov_limit;
	l->rma_iov_limit = i->tx_attr->rma_iov_limit;
	l->tx_size = i->tx_attr->size;
	l->rx_size = i->rx_attr->size;
	l->max_msg_size = i->ep_attr->max_msg_size;
	l->mr_key_size = i->domain_attr->mr_key_size;
	l->cq_data_size = i->domain_attr->cq_data_size;
	l->atomic = (i->caps & FI_ATOMIC) != 0;
	l->inject_size = i->tx_attr->inject_size < DFI_INJECT_MAX ? i->tx_attr->inject_size :
								      DFI_INJECT_MAX;
	l->prov_major = FI_MAJOR(i->fabric_attr->prov_version);
	l->prov_minor = FI_MINOR(i->fabric_attr->prov_version);
	l->fi_major = FI_MAJOR(fi_version());
	l->fi_minor = FI_MINOR(fi_version());
	snprintf(l->prov_name, sizeof(l->prov_name), "%s", i->fabric_attr->prov_name);
	snprintf(l->fabric_name, sizeof(l->fabric_name), "%s", i->fabric_attr->name);
	snprintf(l->domain_name, sizeof(l->domain_name), "%s", i->domain_attr->name);
}

int dfi_fabric_probe(const char *prov, const struct sockaddr_in *addr, const char *domain,
		     struct dfi_fabric_limits *lim, char *err, size_t errlen)
{
	struct fi_info *info;
	int rc = get_info(prov, addr, domain, &info, err, errlen);

	if (rc == 0)
		fill_limits(info, lim);
	fi_freeinfo(info);
	return rc;
}

void dfi_fabric_providers(char *buf, size_t len)
{
	struct fi_info *hints = make_hints(NULL, NULL), *info = NULL, *i, *j;
	size_t used = 0;

	if (len)
		buf[0] = '\0';
	if (!hints || fi_getinfo(DFI_FI_VERSION, NULL, NULL, 0, hints, &info) != 0)
		info = NULL;
	for (i = info; i && used < len; i = i->next) {
		const char *name = i->fabric_attr->prov_name;
		int n;

		for (j = info; j != i; j = j->next)	/* one fi_info per interface */
			if (strcmp(j->fabric_attr->prov_name, name) == 0)
				break;
		if (j != i)
			continue;
		n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
		used += n > 0 ? (size_t)n : 0;
	}
	fi_freeinfo(info);
	fi_freeinfo(hints);
}

int dfi_fabric_open(const char *prov, const struct sockaddr_in *addr, const char *domain,
		    struct dfi_fabric **out, char *err, size_t errlen)
{
	struct dfi_fabric *f;
	int rc;

	f = calloc(1, sizeof(*f));
	if (!f) {
		snprintf(err, errlen, "out of memory");
		return -FI_ENOMEM;
	}
	rc = get_info(prov, addr, domain, &f->info, err, errlen);
	if (rc)
		goto err_info;
	/* Virtual-address RMA with provider keys, as DAT peers expect: tcp in
	 * libfabric 1.17 returns mr_mode 0 (offsets) unless forced. */
	f->info->domain_attr->mr_mode |= FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL);
	if (rc) {
		snprintf(err, errlen, "fi_fabric(%s): %s", f->info->fabric_attr->name,
			 fi_strerror(-rc));
		goto err_info;
	}
	rc = fi_domain(f->fabric, f->info, &f->domain, NULL);
	if (rc) {
		snprintf(err, errlen, "fi_domain(%s): %s", f->info->domain_attr->name,
			 fi_strerror(-rc));
		goto err_fabric;
	}
	fill_limits(f->info, &f->lim);
	dfi_info(DFI_SS_FABRIC, "opened %s fabric %s domain %s: iov %zu, queues %zu/%zu",
		 f->lim.prov_name, f->lim.fabric_name, f->lim.domain_name,
		 f->lim.iov_limit, f->lim.tx_size, f->lim.rx_size);
	*out = f;
	return 0;

err_fabric:
	fi_close(&f->fabric->fid);
err_info:
	fi_freeinfo(f->info);
	free(f);
	return rc;
}

void dfi_fabric_close(struct dfi_fabric *f)
{
	int rc;

	if (!f)
		return;
	rc = fi_close(&f->domain->fid);
	if (rc)
		dfi_err(DFI_SS_FABRIC, "fi_close(domain): %s", fi_strerror(-rc));
	rc = fi_close(&f->fabric->fid);
	if (rc)
		dfi_err(DFI_SS_FABRIC, "fi_close(fabric): %s", fi_strerror(-rc));
	fi_freeinfo(f->info);
	free(f);
}

const struct dfi_fabric_limits *dfi_fabric_limits(const struct dfi_fabric *f)
{
	return &f->lim;
}

int dfi_mr_reg(struct dfi_fabric *f, const void *addr, size_t len, unsigned access,
	       struct dfi_mr **out, uint32_t *key)
{
	struct dfi_mr *m = calloc(1, sizeof(*m));
	uint64_t acc = 0, k;
	int rc;

	if (!m)
		return -FI_ENOMEM;
	if (access & DFI_MR_LOCAL_READ)
		acc |= FI_SEND | FI_WRITE;
	if (access & DFI_MR_LOCAL_WRITE)
		acc |= FI_RECV | FI_READ;
	if (access & DFI_MR_REMOTE_READ)
		acc |= FI_REMOTE_READ;
	if (access & DFI_MR_REMOTE_WRITE)
		acc |= FI_REMOTE_WRITE;
	rc = fi_mr_reg(f->domain, addr, len, acc, 0, 0, 0, &m->mr, NULL);
	if (rc) {
		dfi_err(DFI_SS_FABRIC, "fi_mr_reg(%p, %zu): %s", addr, len, fi_strerror(-rc));
		free(m);
		return rc;
	}
	k = fi_mr_key(m->mr);
	if (k == FI_KEY_NOTAVAIL || k > UINT32_MAX) {
		dfi_err(DFI_SS_FABRIC, "fi_mr_reg(%p, %zu): key 0x%llx does not fit DAT's "
			"32-bit rmr_context", addr, len, (unsigned long long)k);
		fi_close(&m->mr->fid);
		free(m);
		return -ERANGE;
	}
	*key = (uint32_t)k;
	*out = m;
	return 0;
}

void dfi_mr_dereg(struct dfi_mr *m)
{
	int rc;

	if (!m)
		return;
	rc = fi_close(&m->mr->fid);
	if (rc)
		dfi_err(DFI_SS_FABRIC, "fi_close(mr): %s", fi_strerror(-rc));
	free(m);
}
