/* Finding what an IA opens: its address, and the libfabric provider's
 * fi_info for the backend that serves it (msg or rdm), with the reason. */
#include "fabric_int.h"
#include "util/ia_params.h"
#include "util/log.h"
#include "util/param.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DFI_FI_VERSION FI_VERSION(1, 17)

_Static_assert(DFI_EP_ANY == (int)DFI_CFG_EP_ANY && DFI_EP_MSG == (int)DFI_CFG_EP_MSG &&
	       DFI_EP_RDM == (int)DFI_CFG_EP_RDM, "ia_params' ep= is a dfi_ep_kind");

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

/* Hints for an FI_EP_MSG endpoint (FI_MSG|FI_RMA: the MSG backend's) or
 * an FI_EP_RDM one (FI_TAGGED|FI_RMA, sends in order: the RDM backend's,
 * docs/rdm.md). */
static struct fi_info *make_hints(const char *prov, const char *domain, enum fi_ep_type type)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->ep_attr->type = type;
	if (type == FI_EP_MSG) {
		h->caps = FI_MSG | FI_RMA;
		h->addr_format = FI_SOCKADDR_IN;
	} else {
		/* receives find their DAT endpoint by tag; a DAT send must
		 * land after the sends before it */
		h->caps = FI_TAGGED | FI_RMA;
		h->tx_attr->msg_order = FI_ORDER_SAS;
		h->rx_attr->msg_order = FI_ORDER_SAS;
	}
	/* No mode bits at first: the context of every post is then our own
	 * descriptor.  A provider that needs FI_CONTEXT or FI_CONTEXT2 (psm3,
	 * opx) is asked for again with them (getinfo_type), and its posts get
	 * a struct dfi_opctx in front (fabric.h): 64 bytes more per slot, so
	 * not where a provider can do without. */
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

/* The hints of the provider lists: dapl-ofi's, the context modes allowed
 * (getinfo_type asks with them where mode 0 finds nothing). */
static struct fi_info *list_hints(enum fi_ep_type type)
{
	struct fi_info *h = make_hints(NULL, NULL, type);

	if (h)
		h->mode = FI_CONTEXT | FI_CONTEXT2;
	return h;
}

/* What `prov` offers when asked for nearly nothing: every mode bit and
 * memory mode granted, so that a provider that wants what dapl-ofi does not
 * give still answers (NULL: nothing, it is no provider here). */
static struct fi_info *provider_offer(const char *prov, const char *domain)
{
	struct fi_info *h = fi_allocinfo(), *info = NULL;

	if (!h)
		return NULL;
	h->mode = ~0ull;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				  FI_MR_PROV_KEY | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT |
				  FI_MR_ENDPOINT;
	h->fabric_attr->prov_name = strdup(prov);
	if (domain && *domain)
		h->domain_attr->name = strdup(domain);
	if (fi_getinfo(DFI_FI_VERSION, NULL, NULL, 0, h, &info))
		info = NULL;
	fi_freeinfo(h);
	return info;
}

/* One more reason into why (n bytes used of len). */
static void __attribute__((format(printf, 4, 5)))
why_add(char *why, size_t len, size_t *n, const char *fmt, ...)
{
	va_list ap;
	int k;

	k = snprintf(why + *n, len - *n, "%s", *n ? "; " : ": ");
	if (k > 0 && (size_t)k < len - *n)
		*n += (size_t)k;
	va_start(ap, fmt);
	k = vsnprintf(why + *n, len - *n, fmt, ap);
	va_end(ap);
	if (k > 0 && (size_t)k < len - *n)
		*n += (size_t)k;
}

/* Why an offer of `prov` is not one dapl-ofi takes, as far as it can say,
 * into why (": ..., not served yet", or "" if nothing it knows of): short,
 * as it ends an error line of at most 384 bytes. */
static void offer_explain(const struct fi_info *offer, char *why, size_t len)
{
	const struct fi_info *i;
	uint64_t mode;
	size_t n = 0;

	why[0] = '\0';
	for (i = offer; i && i->ep_attr->type != FI_EP_RDM && i->ep_attr->type != FI_EP_MSG;
	     i = i->next)
		;
	if (!i)
		return;
	mode = i->mode | i->tx_attr->mode | i->rx_attr->mode;
	if (i->ep_attr->type == FI_EP_RDM && !(i->tx_attr->msg_order & FI_ORDER_SAS))
		why_add(why, len, &n, "no FI_ORDER_SAS (messages out of order)");
	if (i->domain_attr->mr_mode & FI_MR_ENDPOINT)
		why_add(why, len, &n, "FI_MR_ENDPOINT registrations");
	if (!(i->domain_attr->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_BASIC)) &&
	    (i->domain_attr->mr_mode & FI_MR_SCALABLE))
		why_add(why, len, &n, "remote memory by offset only (FI_MR_SCALABLE)");
	if (mode & FI_ASYNC_IOV)
		why_add(why, len, &n, "mode FI_ASYNC_IOV");
	else if (mode & ~(uint64_t)(FI_CONTEXT | FI_CONTEXT2 | FI_LOCAL_MR))
		why_add(why, len, &n, "mode 0x%llx", (unsigned long long)mode);
	if (n && n + 32 < len)
		snprintf(why + n, len - n, ", not served yet");
}

/* Providers that carry every connection to a peer on one TCP stream and
 * drop it whole, with what it held of other connections, when a peer's
 * RDMA access fails: net's RDM endpoints, and rxm over tcp or net
 * (docs/rdm.md, "A late RDMA access").  Their sends and writes are asked
 * to complete once the peer has them (DAPL_OFI_RDM_TRANSMIT_COMPLETE). */
static bool acked_prov(const char *prov)
{
	long v = dfi_param_int(DFI_P_RDM_TRANSMIT_COMPLETE);
	bool net = prov && !strcmp(prov, "net");
	bool rxm = prov && (!strcmp(prov, "tcp;ofi_rxm") || !strcmp(prov, "net;ofi_rxm"));

	/* by default not on rxm: there a target that polls memory leaves
	 * the acknowledgements to its progress thread, and dtest -W takes
	 * milliseconds a round trip (docs/rdm.md) */
	return v < 0 ? net : v > 0 && (net || rxm);
}

/* One fi_getinfo of endpoint type `type`, atomics and deep queues asked
 * for first: tcp and net 1.17 answer ENODATA to FI_ATOMIC, and are asked
 * again without; queues are what the provider grants otherwise.  node
 * NULL: the provider's own addressing (shm names its endpoints). */
static int getinfo_type(const char *prov, const char *node, const char *domain,
			enum fi_ep_type type, struct fi_info **out)
{
	struct fi_info *hints = make_hints(prov, domain, type);
	int rc = -FI_ENODATA;

	if (!hints)
		return -FI_ENOMEM;
	/* rxm hands the core endpoints it opens the hints' flags, net its
	 * connections the endpoint's (set again below) */
	if (type == FI_EP_RDM && acked_prov(prov))
		hints->tx_attr->op_flags = FI_TRANSMIT_COMPLETE;
	/* An RDM provider that can progress by itself is asked to first:
	 * tcp;ofi_rxm makes its connections underneath at the first send,
	 * and with automatic progress a thread of its own answers the peer's
	 * half even while that peer's consumer calls nothing.  Without
	 * atomics: with FI_ATOMIC, rxm 1.17's thread polls fds that its close
	 * never signals (rxm_cm_atomic_progress), and fi_close hangs. */
	static const struct { bool rdm_only, atomic; enum fi_progress progress; } tries[] = {
		{ true, false, FI_PROGRESS_AUTO },
		{ false, true, FI_PROGRESS_UNSPEC },
		{ false, false, FI_PROGRESS_UNSPEC },
	};

	for (size_t k = 0; k < 2 * sizeof(tries) / sizeof(tries[0]) && rc == -FI_ENODATA; k++) {
		size_t t = k % (sizeof(tries) / sizeof(tries[0]));

		/* every try without mode bits first, then again with them */
		hints->mode = k == t ? 0 : FI_CONTEXT | FI_CONTEXT2;
		if (tries[t].rdm_only && type != FI_EP_RDM)
			continue;
		hints->domain_attr->data_progress = tries[t].progress;
		hints->caps = tries[t].atomic ? hints->caps | FI_ATOMIC : hints->caps & ~FI_ATOMIC;
		/* an RDM endpoint's receive queue holds the receives of every
		 * DAT EP that shares it (rdm/ep.c, rep_fits): deeper first */
		for (size_t q = type == FI_EP_RDM ? 0 : 1; q < 3 && rc == -FI_ENODATA; q++) {
			static const size_t depth[] = { 16384, 1024, 0 };

			hints->tx_attr->size = depth[q] > 1024 ? 1024 : depth[q];
			hints->rx_attr->size = depth[q];
			rc = fi_getinfo(DFI_FI_VERSION, node, NULL, node ? FI_SOURCE : 0, hints,
					out);
		}
	}
	if (rc)
		*out = NULL;
	else if (hints->tx_attr->op_flags)
		(*out)->tx_attr->op_flags |= hints->tx_attr->op_flags;
	fi_freeinfo(hints);
	return rc;
}

/* The fi_info dfi_fabric_open opens: provider prov bound to addr (and
 * domain, if given), the backend chosen by kind.  DFI_EP_ANY: an FI_EP_MSG
 * endpoint where the provider has one (each DAT endpoint its own
 * libfabric endpoint, as verbs RC), FI_EP_RDM otherwise.  Errors as
 * dfi_fabric_open's, with the reason in err. */
int dfi_fabric_getinfo(const char *prov, const struct sockaddr_in *addr, const char *domain,
		       enum dfi_ep_kind kind, struct fi_info **out, char *err, size_t errlen)
{
	char node[INET_ADDRSTRLEN];
	int rc = -FI_ENODATA;

	*out = NULL;
	inet_ntop(AF_INET, &addr->sin_addr, node, sizeof(node));
	if (kind != DFI_EP_RDM)
		rc = getinfo_type(prov, node, domain, FI_EP_MSG, out);
	if (rc == -FI_ENODATA && kind != DFI_EP_MSG) {
		/* bound to the IA's address where the provider addresses by
		 * IP (tcp;ofi_rxm); else its own names: shm takes the node as
		 * the name of its endpoints' regions, the same in every
		 * process ("127.0.0.1:uid:n"), where its own has the pid */
		rc = getinfo_type(prov, node, domain, FI_EP_RDM, out);
		if (rc == 0 && (*out)->addr_format != FI_SOCKADDR_IN &&
		    (*out)->addr_format != FI_SOCKADDR) {
			fi_freeinfo(*out);
			rc = -FI_ENODATA;
		}
		if (rc == -FI_ENODATA)
			rc = getinfo_type(prov, NULL, domain, FI_EP_RDM, out);
	}
	if (rc == 0)
		return 0;
	struct fi_info *offer = rc == -FI_ENODATA ? provider_offer(prov, domain) : NULL;
	char why[384];

	if (rc == -FI_ENODATA && !offer) {
		/* dapl-ofi's simulated hardware providers (fabsim/) load from
		 * the build tree only */
		snprintf(err, errlen, "libfabric has no provider '%s' (fi_info -l "
			 "lists them%s): fi_getinfo: %s", prov,
			 strncmp(prov, "sim_", 4) == 0 ? "; the simulated ones load with "
			 "FI_PROVIDER_PATH=<build dir>/fabsim" : "", fi_strerror(-rc));
		return -ENOENT;
	}
	offer_explain(offer, why, sizeof(why));
	fi_freeinfo(offer);
	snprintf(err, errlen, "libfabric provider '%s' offers %s on %s%s%s%s (fi_getinfo: %s)",
		 prov, kind == DFI_EP_MSG ? "no FI_EP_MSG endpoint with FI_MSG|FI_RMA" :
		 kind == DFI_EP_RDM ? "no FI_EP_RDM endpoint with FI_TAGGED|FI_RMA and "
		 "ordered sends" : "neither an FI_EP_MSG endpoint with FI_MSG|FI_RMA nor an "
		 "FI_EP_RDM endpoint with FI_TAGGED|FI_RMA and ordered sends",
		 node, domain && *domain ? " in domain " : "", domain ? domain : "", why,
		 fi_strerror(-rc));
	return rc == -FI_ENODATA ? -ENODEV : rc;
}

void dfi_fabric_fill_limits(const struct fi_info *i, bool atomics, struct dfi_fabric_limits *l)
{
	l->rdm = i->ep_attr->type == FI_EP_RDM;
	l->unordered = l->rdm;
	l->msgno_mask = 0;
	if (l->rdm) {
		/* the provider's tag bits: its mem_tag_format's highest bit */
		uint64_t fmt = i->ep_attr->mem_tag_format;
		int bits = fmt ? 64 - __builtin_clzll(fmt) : 64;

		bits = bits - DFI_MSGNO_SHIFT > 16 ? 16 : bits - DFI_MSGNO_SHIFT;
		l->msgno_mask = bits >= 8 ? (uint16_t)((1u << bits) - 1) : 0;
	}
	l->cm_ordered = l->rdm;
	l->ud = l->rdm;		/* rdm/ud.c */
	l->op_ctx = ((i->mode | i->tx_attr->mode | i->rx_attr->mode) &
		     (FI_CONTEXT | FI_CONTEXT2)) != 0;
	l->iov_limit = i->tx_attr->iov_limit;
	/* the RDM backend receives into a buffer of its own what has more
	 * segments than the provider takes (rdm/bounce.c; psm3 takes 1),
	 * but for a provider that wants receive buffers registered */
	l->rx_iov_limit = l->rdm && !(i->domain_attr->mr_mode & FI_MR_LOCAL) ?
			  i->tx_attr->iov_limit : i->rx_attr->iov_limit;
	l->rma_iov_limit = i->tx_attr->rma_iov_limit;
	l->tx_size = i->tx_attr->size;
	l->rx_size = i->rx_attr->size;
	l->max_msg_size = i->ep_attr->max_msg_size;
	l->mr_key_size = i->domain_attr->mr_key_size;
	l->cq_data_size = i->domain_attr->cq_data_size;
	/* rxd 1.17's fetching atomics complete without effect (a raw
	 * fi_fetch_atomic on an offset reports success, changes nothing and
	 * fetches 0), and on a virtual address crash the target's progress:
	 * emulated there, as where FI_ATOMIC is missing */
	l->atomic = atomics && (i->caps & FI_ATOMIC) &&
		    !strstr(i->fabric_attr->prov_name, "ofi_rxd");
	/* rdm/ emulates over its control channel (rdm/ep.c); msg/ over RMA
	 * writes with CQ data into mailboxes that the CM exchange announces
	 * in a trailer of the private data (msg/atomic.c) */
	l->atomic_emul = atomics && !l->atomic &&
			 (l->rdm || ((i->caps & FI_RMA) && l->cq_data_size >= 8));
	l->pdata_max = l->atomic_emul && !l->rdm ? DFI_PDATA_MAX - DFI_MSG_TRAILER : DFI_PDATA_MAX;
	l->rx_cq_own = l->atomic_emul && !l->rdm;
	l->inject_size = i->tx_attr->inject_size < DFI_INJECT_MAX ? i->tx_attr->inject_size :
								      DFI_INJECT_MAX;
	/* an acknowledged provider's failed inject would go unheard of */
	l->acked = l->rdm && (i->tx_attr->op_flags & FI_TRANSMIT_COMPLETE);
	if (l->acked)
		l->inject_size = 0;
	l->prov_major = FI_MAJOR(i->fabric_attr->prov_version);
	l->prov_minor = FI_MINOR(i->fabric_attr->prov_version);
	l->fi_major = FI_MAJOR(fi_version());
	l->fi_minor = FI_MINOR(fi_version());
	snprintf(l->prov_name, sizeof(l->prov_name), "%s", i->fabric_attr->prov_name);
	l->unsettled = strcmp(l->prov_name, "net") == 0;
	/* shm 1.17 matches a receive against the messages that came before it
	 * by their exact tag, not the receive's ignore mask (smr_generic_recv,
	 * smr_match_tagged): a numbered message that came first would match
	 * none.  shm loses no message underneath, so its connections are not
	 * numbered; an SRQ's still are (rdm/srx.c). */
	l->numbered = l->msgno_mask && strcmp(l->prov_name, "shm") != 0;
	/* shm answers SAS alone when asked for it, but writes a peer's memory
	 * inside the post itself (smr_rma_fast, process_vm_writev): a send
	 * posted after cannot overtake */
	l->writes_unordered = l->rdm && !(i->tx_attr->msg_order & FI_ORDER_SAW) &&
			      strcmp(l->prov_name, "shm") != 0;
	snprintf(l->fabric_name, sizeof(l->fabric_name), "%s", i->fabric_attr->name);
	snprintf(l->domain_name, sizeof(l->domain_name), "%s", i->domain_attr->name);
}

int dfi_fabric_probe(const char *prov, const struct sockaddr_in *addr, const char *domain,
		     enum dfi_ep_kind kind, bool atomics, struct dfi_fabric_limits *lim, char *err,
		     size_t errlen)
{
	struct fi_info *info;
	int rc = dfi_fabric_getinfo(prov, addr, domain, kind, &info, err, errlen);

	if (rc == 0)
		dfi_fabric_fill_limits(info, atomics, lim);
	fi_freeinfo(info);
	return rc;
}

/* Append to buf[*used..len) each provider with an endpoint of type `type`
 * (once: libfabric gives one fi_info per interface), marked by tag. */
static void providers_of(enum fi_ep_type type, const char *tag, char *buf, size_t len,
			 size_t *used)
{
	struct fi_info *hints = list_hints(type), *info = NULL, *i, *j;

	if (!hints || fi_getinfo(DFI_FI_VERSION, NULL, NULL, 0, hints, &info) != 0)
		info = NULL;
	for (i = info; i && *used < len; i = i->next) {
		const char *name = i->fabric_attr->prov_name;
		int n;

		for (j = info; j != i; j = j->next)
			if (strcmp(j->fabric_attr->prov_name, name) == 0)
				break;
		if (j != i)
			continue;
		n = snprintf(buf + *used, len - *used, "%s%s%s", *used ? ", " : "", name, tag);
		*used += n > 0 ? (size_t)n : 0;
	}
	fi_freeinfo(info);
	fi_freeinfo(hints);
}

void dfi_fabric_providers(char *buf, size_t len)
{
	size_t used = 0;

	if (len)
		buf[0] = '\0';
	providers_of(FI_EP_MSG, "", buf, len, &used);
	providers_of(FI_EP_RDM, " (rdm)", buf, len, &used);
}

int dfi_fabric_provider_list(struct dfi_prov_desc *out, int max)
{
	static const enum fi_ep_type types[] = { FI_EP_MSG, FI_EP_RDM };
	int n = 0;

	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		struct fi_info *hints = list_hints(types[t]), *info = NULL, *i;

		if (!hints || fi_getinfo(DFI_FI_VERSION, NULL, NULL, 0, hints, &info) != 0)
			info = NULL;
		for (i = info; i && n < max; i = i->next) {
			const char *name = i->fabric_attr->prov_name;
			bool rdm = types[t] == FI_EP_RDM, seen = false;

			/* libfabric gives one fi_info per interface */
			for (int k = 0; k < n; k++)
				if (out[k].rdm == rdm && strcmp(out[k].name, name) == 0)
					seen = true;
			if (seen || strlen(name) >= sizeof(out[n].name))
				continue;
			snprintf(out[n].name, sizeof(out[n].name), "%s", name);
			out[n].rdm = rdm;
			/* shm names its endpoints itself (FI_ADDR_STR):
			 * one IA serves the host, whatever address */
			out[n].by_ip = i->addr_format == FI_SOCKADDR_IN ||
				       i->addr_format == FI_SOCKADDR;
			n++;
		}
		fi_freeinfo(info);
		fi_freeinfo(hints);
	}
	return n;
}
