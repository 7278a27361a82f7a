/* The ia_params of a dapl-ofi dat.conf entry:
 *   "<libfabric provider> <netdev | IPv4 address | host name> [key=value ...]"
 * keys: mtu=<bytes> (DAT_IB_TRANSPORT_MTU), rdma_read=0|1 (DAT_IB_RDMA_READ),
 *       domain=<libfabric domain name>, ext=ib|ofi (what the IA reports as
 *       extension_supported: DAT_EXTENSION_IB, the default, or the upcall
 *       extension's DAT_OFI_EXTENSION for programs built before both were
 *       served at once; both extensions' ops work either way),
 *       ep=msg|rdm (the libfabric endpoint type DAT endpoints map onto; by
 *       default FI_EP_MSG where the provider has it, FI_EP_RDM otherwise),
 *       atomics=0|1 (the IB extension's atomics, native or emulated; 0: none,
 *       and tcp's and net's connected endpoints keep 256 bytes of private
 *       data and no mailbox).
 * One parser for the library (dat_provider_init) and daplofi-info. */
#ifndef DFI_IA_PARAMS_H
#define DFI_IA_PARAMS_H

#include <stdbool.h>

/* What is wrong with ia_params, so that a tool can say how to fix it. */
enum dfi_cfg_err {
	DFI_CFG_OK = 0,
	DFI_CFG_TOO_LONG,	/* missing (NULL) or 512 characters or more */
	DFI_CFG_PROVIDER,	/* bad: the first word, not a provider name */
	DFI_CFG_ADDRESS,	/* bad: the address word, too long */
	DFI_CFG_SHAPE,		/* no provider, or no address after it */
	DFI_CFG_WORD,		/* bad: a third word that is not key=value */
	DFI_CFG_VALUE,		/* bad: the key whose value is wrong */
	DFI_CFG_KEY,		/* bad: an unknown key */
};

struct dfi_config {
	char prov_name[64];		/* libfabric provider */
	char where[128];		/* netdev, IPv4 literal or host name */
	char domain[64];		/* optional libfabric domain name */
	unsigned mtu;			/* exported as DAT_IB_TRANSPORT_MTU */
	bool rdma_read;			/* exported as DAT_IB_RDMA_READ */
	bool ext_ofi;			/* ext=ofi: report DAT_OFI_EXTENSION */
	bool atomics;			/* atomics=1, the default */
	enum { DFI_CFG_EP_ANY, DFI_CFG_EP_MSG, DFI_CFG_EP_RDM } ep;	/* ep= */
	enum dfi_cfg_err err;		/* the first problem found */
	char bad[128];			/* the word it is about, if any */
	char error[256];		/* non-empty: ia_params did not parse */
};

/* ep= as the fabric layer's enum dfi_ep_kind (the same order). */
#define dfi_cfg_ep_kind(c) ((enum dfi_ep_kind)(c)->ep)

/* Parse params into c (defaults first); c->error says why on failure. */
void dfi_ia_params_parse(const char *params, struct dfi_config *c);

#endif
