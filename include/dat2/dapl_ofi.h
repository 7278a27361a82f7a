/*
 * dapl-ofi public header: what a DAT program may use to recognise and tune
 * the dapl-ofi provider.  Plain macros; no library to link (programs link
 * -ldat2 only and reach dapl-ofi through the registry).
 */
#ifndef DAPL_OFI_H
#define DAPL_OFI_H

#define DAPL_OFI_VERSION_MAJOR	0
#define DAPL_OFI_VERSION_MINOR	1

/* DAT_PROVIDER_ATTR.provider_name of dapl-ofi IAs. */
#define DAPL_OFI_PROVIDER_NAME	"dapl-ofi"

/* Provider-specific attributes (DAT_PROVIDER_ATTR.provider_specific_attr). */
#define DAPL_OFI_ATTR_MTU	"DAT_IB_TRANSPORT_MTU"	  /* "2048", or ia_params mtu= */
#define DAPL_OFI_ATTR_RDMA_READ	"DAT_IB_RDMA_READ"	  /* "TRUE" with rdma_read=1 */
#define DAPL_OFI_ATTR_FABRIC	"DAPL_OFI_FABRIC_PROVIDER" /* libfabric provider name */
/* "msg" or "rdm": the libfabric endpoint type DAT endpoints map onto
 * (ia_params ep=, dapl-ofi(7)) */
#define DAPL_OFI_ATTR_ENDPOINT	"DAPL_OFI_ENDPOINT"
/* "native" (libfabric's FI_ATOMIC) or "emulated" (dapl-ofi's, applied by
 * the target's progress): how the IB extension's atomics are carried;
 * absent where they are not (dapl-ofi(7)) */
#define DAPL_OFI_ATTR_ATOMICS	"DAPL_OFI_ATOMICS"
/* RDM IAs: "TRUE" where a send or RDMA write completes once the peer's
 * provider has it, "FALSE" where once it is in the local provider's
 * buffers (DAPL_OFI_RDM_TRANSMIT_COMPLETE, dapl-ofi(7)) */
#define DAPL_OFI_ATTR_RDM_ACKED	"DAPL_OFI_RDM_ACKED"

#endif
