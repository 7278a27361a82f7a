/*
 * dapl-ofi fabric layer: everything that calls libfabric.  No DAT types.
 * Errors are 0 / -FI_E* (negative errno); the first detector logs once.
 */
#ifndef DFI_FABRIC_H
#define DFI_FABRIC_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

struct dfi_fabric;
struct dfi_mr;

struct dfi_fabric_limits {
	size_t iov_limit;		/* local IOVs per message */
	size_t rma_iov_limit;
	size_t tx_size, rx_size;	/* queue depths granted */
	uint64_t max_msg_size;
	size_t mr_key_size;
	unsigned prov_major, prov_minor;	/* the libfabric provider's version */
	unsigned fi_major, fi_minor;		/* libfabric's */
	char prov_name[64];
	char fabric_name[128];
	char domain_name[128];
};

/* Resolve `where` (netdev, IPv4 literal or host name) to an IPv4 address.
 * 0 or -ENOENT (nothing by that name) / -EADDRNOTAVAIL (no IPv4 on it). */
int dfi_resolve_ipv4(const char *where, struct sockaddr_in *out);

/* Open fabric + domain of provider `prov` bound to `addr`.  On failure
 * writes a one-line reason into err and returns -ENOENT (libfabric has no
 * such provider), -ENODEV (it has no MSG endpoint on that address) or
 * another negative errno. */
int dfi_fabric_open(const char *prov, const struct sockaddr_in *addr, const char *domain,
		    struct dfi_fabric **out, char *err, size_t errlen);
void dfi_fabric_close(struct dfi_fabric *f);
const struct dfi_fabric_limits *dfi_fabric_limits(const struct dfi_fabric *f);

/* Access bits for dfi_mr_reg. */
#define DFI_MR_LOCAL_READ	0x1	/* source of sends and RDMA writes */
#define DFI_MR_LOCAL_WRITE	0x2	/* target of receives and RDMA reads */
#define DFI_MR_REMOTE_READ	0x4
#define DFI_MR_REMOTE_WRITE	0x8

/* Register [addr, addr+len) for virtual-address RMA.  *key is the remote
 * key (fits DAT's 32-bit rmr_context, or -ERANGE). */
int dfi_mr_reg(struct dfi_fabric *f, const void *addr, size_t len, unsigned access,
	       struct dfi_mr **mr, uint32_t *key);
void dfi_mr_dereg(struct dfi_mr *mr);

#endif
