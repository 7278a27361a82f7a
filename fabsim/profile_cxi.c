/*
 * The cxi profile.  cxi is not in libfabric 1.17 (upstream from 1.21): the
 * values are from the newest release in the mirror, v2.6.0, prov/cxi.
 *  caps        cxip.h CXIP_EP_CAPS less what is not wrapped here: FI_ATOMIC,
 *              FI_HMEM, FI_COLLECTIVE, FI_NAMED_RX_CTX, FI_FENCE, FI_TRIGGER,
 *              FI_RMA_EVENT, FI_SOURCE_ERR, FI_AV_USER_ID, FI_PEER
 *  mode        cxip_info.c cxip_infos[]: no .mode, 0
 *  op_flags    cxip.h CXIP_TX_OP_FLAGS / CXIP_RX_OP_FLAGS (less FI_MORE)
 *  msg_order   cxip.h CXIP_MSG_ORDER: SAS, WAW, RMA_WAW, RMA_RAR, ATOMIC_*;
 *              fi_cxi(7) "Any FI_ORDER_*_{WAR,RAW} are not supported": no SAW
 *  comp_order  unset in cxip_tx_attr: FI_ORDER_NONE
 *  mr_mode     cxip_infos[] in order: PROV_KEY|ALLOCATED|ENDPOINT, then
 *              ALLOCATED|ENDPOINT (client keys), then the ODP ones without
 *              ALLOCATED; every one has FI_MR_ENDPOINT, none VIRT_ADDR
 *  mr_key_size cxip.h CXIP_MR_PROV_KEY_SIZE sizeof(struct cxip_mr_key) 8,
 *              CXIP_MR_KEY_SIZE 4 for client keys; mr_iov_limit 1
 *  cq_data     cxip.h CXIP_REMOTE_CQ_DATA_SZ 8
 *  inject_size cxip.h CXIP_INJECT_SIZE = C_MAX_IDC_PAYLOAD_UNR, 192 in HPE's
 *              cassini headers (not in libfabric); above it cxip_msg_hpc.c
 *              and cxip_rma.c return -FI_EMSGSIZE
 *  max_msg     cxip.h CXIP_EP_MAX_MSG_SZ 2^32 - 1
 *  iov_limit   cxip_tx_attr/cxip_rx_attr 1, rma_iov_limit 1
 *  threading   cxip_*_domain_attr FI_THREAD_SAFE
 *  progress    FI_PROGRESS_MANUAL only (domain attrs; fi_cxi(7) "Progress")
 *  addr        FI_ADDR_CXI, sizeof(struct cxip_addr) 8 (cxip.h)
 *  protocol    FI_PROTO_CXI, CXIP_WIRE_PROTO_VERSION 1
 *  tag format  FI_TAG_GENERIC >> (64 - CXIP_TAG_WIDTH 48)
 *  wait        cxip_cq.c cxip_cq_open(): FD, POLLFD, UNSPEC (-> FD) accepted:
 *              the simulation refuses them (see README)
 *  mr_endpoint cxip_mr.c: FI_ENABLE without fi_mr_bind() -FI_EINVAL; an MR
 *              with remote access has no target entry before
 *              cxip_mr_enable(), so an RMA to it fails at the initiator,
 *              the NIC's return code through proverr2errno() (cxip_cq.c):
 *              FI_EIO
 *  offset      no FI_MR_VIRT_ADDR: addresses are offsets; beyond the region
 *              the NIC fails the RMA, again FI_EIO
 */
#include "fabsim.h"

#define CXI_E	FI_MR_ENDPOINT
#define CXI_A	FI_MR_ALLOCATED
#define CXI_P	FI_MR_PROV_KEY

/* ofi_check_mr_mode() over cxip_infos[] in order: the first whose mode the
 * hints grant; BASIC and SCALABLE are never cxi's */
static int cxi_mr_grant(int hm, uint64_t caps)
{
	static const int modes[] = {
		CXI_P | CXI_A | CXI_E, CXI_A | CXI_E, CXI_P | CXI_E, CXI_E,
	};
	size_t i;

	if (hm == FI_MR_UNSPEC)
		return modes[0];
	if (hm & (FI_MR_BASIC | FI_MR_SCALABLE))
		return -1;
	if (caps && !(caps & (FI_RMA | FI_ATOMIC)))
		return 0;	/* ofi_cap_mr_mode(): no RMA target bits */
	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if ((hm & modes[i]) == modes[i])
			return modes[i];
	return -1;
}

static const struct fabsim_variant cxi_variants[] = {
	{ .cq_data_size = 8, .mem_tag_format = 0xAAAAAAAAAAAAAAAAull >> 16 },
};

static const struct fabsim_profile profile_cxi = {
	.name = "cxi",
	.prov_name = "sim_cxi",
	.caps = FI_MSG | FI_TAGGED | FI_RMA | FI_SEND | FI_RECV | FI_READ |
		FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SOURCE |
		FI_MULTI_RECV | FI_DIRECTED_RECV | FI_LOCAL_COMM |
		FI_REMOTE_COMM,
	.tx_caps = FI_MSG | FI_TAGGED | FI_RMA | FI_SEND | FI_READ | FI_WRITE,
	.rx_caps = FI_MSG | FI_TAGGED | FI_RMA | FI_RECV | FI_REMOTE_READ |
		   FI_REMOTE_WRITE | FI_SOURCE | FI_MULTI_RECV |
		   FI_DIRECTED_RECV,
	.domain_caps = FI_LOCAL_COMM | FI_REMOTE_COMM,
	.mode = 0,
	.tx_op_flags = FI_INJECT | FI_COMPLETION | FI_INJECT_COMPLETE |
		       FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE |
		       FI_REMOTE_CQ_DATA,
	.rx_op_flags = FI_COMPLETION | FI_MULTI_RECV,
	.msg_order = FI_ORDER_SAS | FI_ORDER_WAW | FI_ORDER_RMA_WAW |
		     FI_ORDER_RMA_RAR | FI_ORDER_ATOMIC_WAW |
		     FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_RAW |
		     FI_ORDER_ATOMIC_RAR,
	.comp_order = FI_ORDER_NONE,
	.mr_grant = cxi_mr_grant,
	.mr_key_size = 8,
	.cq_data_size = 8,
	.variants = cxi_variants,
	.n_variants = 1,
	.inject_size = 192,
	.max_msg_size = (1ull << 32) - 1,
	.tx_iov_limit = 1,
	.rx_iov_limit = 1,
	.rma_iov_limit = 1,
	.mr_iov_limit = 1,
	.threading = FI_THREAD_SAFE,
	.progress = FI_PROGRESS_MANUAL,
	.rma_progress = FI_PROGRESS_MANUAL,
	.av_type = FI_AV_TABLE,
	.addr_format = FI_ADDR_CXI,
	.addrlen = 8,
	.protocol = FI_PROTO_CXI,
	.protocol_version = 1,
	.mem_tag_format = 0xAAAAAAAAAAAAAAAAull >> 16,
	.wait_style = FABSIM_WAIT_UNSIMULATED,
	.wait_err = -FI_ENOSYS,
	.inject_err = -FI_EMSGSIZE,
	.offset_err = FI_EIO,
	.mr_endpoint_err = FI_EIO,
	.eagain_one_in = 64,
	.rules = FABSIM_BIT(FABSIM_RULE_INJECT) |
		 FABSIM_BIT(FABSIM_RULE_MSG_SIZE) |
		 FABSIM_BIT(FABSIM_RULE_CQ_DATA) |
		 FABSIM_BIT(FABSIM_RULE_COMP_ORDER) |
		 FABSIM_BIT(FABSIM_RULE_SAW) | FABSIM_BIT(FABSIM_RULE_EAGAIN) |
		 FABSIM_BIT(FABSIM_RULE_MANUAL) |
		 FABSIM_BIT(FABSIM_RULE_MR_ENDPOINT) |
		 FABSIM_BIT(FABSIM_RULE_OFFSET),
};
const struct fabsim_profile *fabsim_profile = &profile_cxi;
