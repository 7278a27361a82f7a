/*
 * The psm3 profile: libfabric v1.17.0, prov/psm3/src, FI_EP_RDM with
 * FI_ADDR_PSMX3 (psm3 also offers DGRAM and FI_ADDR_STR: not simulated).
 *  caps        psmx3.h PSMX3_CAPS less what is not wrapped here: FI_ATOMIC,
 *              FI_TRIGGER, FI_NAMED_RX_CTX, FI_RMA_EVENT, FI_SOURCE_ERR,
 *              FI_SHARED_AV
 *  mode        psmx3_attr.c psmx3_prov_info .mode = FI_CONTEXT (tag64 and
 *              tag60 instances; only the RMA-only instance has 0, and
 *              psmx3_init_prov_info() offers it only without FI_MSG/FI_TAGGED)
 *  op_flags    psmx3.h PSMX3_OP_FLAGS (less FI_TRIGGER)
 *  msg_order   psmx3.h PSMX3_MSG_ORDER: FI_ORDER_SAS | OFI_ORDER_{RAR,RAW,
 *              WAR,WAW}_SET (ofi.h): no FI_ORDER_SAW
 *  comp_order  psmx3.h PSMX3_COMP_ORDER FI_ORDER_NONE
 *  mr_mode     psmx3_domain_attr FI_MR_SCALABLE|FI_MR_BASIC, through
 *              ofi_check_mr_mode() and fi_alter_domain_attr() (util_attr.c)
 *              and psmx3_alter_prov_info(): see psm3_mr_grant()
 *  mr_key_size psmx3_domain_attr sizeof(uint64_t) = 8; mr_iov_limit 65535
 *  cq_data     psmx3_init_prov_info(): tag64 instance 0 (first, only when
 *              the hints ask no cq_data_size), tag60 instance 4
 *  inject_size psmx3_tx_attr 64 (psmx3_env.inject_size default); above it
 *              psmx3_msg.c/psmx3_tagged.c/psmx3_rma.c return -FI_EMSGSIZE
 *  max_msg     psmx3_ep_attr PSMX3_MAX_MSG_SIZE & ~0x0FFF = 0xFFFFF000
 *  iov_limit   tx PSMX3_IOV_MAX_COUNT = 64/4 - 3 = 13, rx 1, rma_iov 1
 *  threading   psmx3_domain_attr FI_THREAD_SAFE
 *  progress    psmx3_alter_prov_info(): MANUAL unless the hints ask; AUTO
 *              when asked (psm3's progress thread)
 *  addr        FI_ADDR_PSMX3, sizeof(struct psmx3_ep_name) = 24-byte
 *              psm2_epid_t + 4 bytes + uint32_t service = 32 (psmx3.h)
 *  protocol    FI_PROTO_PSMX3, PSM2_VERNO 0x0300 (psm3/psm2.h)
 *  tag format  FI_TAG_GENERIC, >> 4 for tag60
 *  wait        psmx3_cq.c psmx3_cq_open(): NONE, SET, UNSPEC, FD, MUTEX_COND
 *              accepted: the simulation refuses them (see README)
 *  offset      psmx3_mr.c: offset = base - fi_mr_reg offset unless the domain
 *              is FI_MR_BASIC; psmx3_mr_validate() fails an RMA outside the
 *              region with -FI_EACCES, which psmx3_rma.c sends back as the
 *              initiator's error completion
 */
#include "fabsim.h"

/*
 * ofi_check_mr_mode(): FI_MR_BASIC or FI_MR_SCALABLE must come alone; other
 * 1.5-style hints pass, because ofi_cap_mr_mode() strips BASIC|SCALABLE from
 * psm3's mode, leaving nothing to require.  fi_alter_domain_attr() then
 * grants the hint's BASIC or SCALABLE, or else 0: offsets and the consumer's
 * keys.  dapl-ofi's hints (VIRT_ADDR|ALLOCATED|PROV_KEY|LOCAL) get 0.
 */
static int psm3_mr_grant(int hm, uint64_t caps)
{
	(void)caps;
	if (hm & FI_MR_BASIC)
		return hm == FI_MR_BASIC ? FI_MR_BASIC : -1;
	if (hm & FI_MR_SCALABLE)
		return hm == FI_MR_SCALABLE ? FI_MR_SCALABLE : -1;
	return 0;
}

/*
 * psmx3_domain_open(): mr_mode = (info mr_mode & FI_MR_BASIC) ? FI_MR_BASIC
 * : 0.  Whatever else the consumer writes into the info (VIRT_ADDR,
 * PROV_KEY) is ignored: without BASIC, remote addresses are offsets and
 * keys the consumer's (psmx3_mr_reserve_key(): the requested key).
 */
static int psm3_mr_at_domain(int info_mode)
{
	return (info_mode & FI_MR_BASIC) ? FI_MR_BASIC : 0;
}

#define PSM3_TAG_GENERIC	0xAAAAAAAAAAAAAAAAull

static const struct fabsim_variant psm3_variants[] = {
	{ .cq_data_size = 0, .mem_tag_format = PSM3_TAG_GENERIC },	/* tag64 */
	{ .cq_data_size = 4, .mem_tag_format = PSM3_TAG_GENERIC >> 4 },	/* tag60 */
};

static const struct fabsim_profile profile_psm3 = {
	.name = "psm3",
	.prov_name = "sim_psm3",
	.caps = FI_MSG | FI_TAGGED | FI_RMA | FI_SEND | FI_RECV | FI_READ |
		FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SOURCE |
		FI_MULTI_RECV | FI_DIRECTED_RECV | FI_LOCAL_COMM |
		FI_REMOTE_COMM,
	.tx_caps = FI_MSG | FI_TAGGED | FI_RMA | FI_SEND | FI_READ | FI_WRITE,
	.rx_caps = FI_MSG | FI_TAGGED | FI_RMA | FI_RECV | FI_REMOTE_READ |
		   FI_REMOTE_WRITE | FI_SOURCE | FI_MULTI_RECV |
		   FI_DIRECTED_RECV,
	.domain_caps = FI_LOCAL_COMM | FI_REMOTE_COMM,
	.mode = FI_CONTEXT,
	.tx_op_flags = FI_INJECT | FI_COMPLETION | FI_INJECT_COMPLETE |
		       FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE,
	.rx_op_flags = FI_COMPLETION | FI_MULTI_RECV,
	.msg_order = FI_ORDER_SAS | FI_ORDER_RAR | FI_ORDER_RMA_RAR |
		     FI_ORDER_ATOMIC_RAR | FI_ORDER_RAW | FI_ORDER_RMA_RAW |
		     FI_ORDER_ATOMIC_RAW | FI_ORDER_WAR | FI_ORDER_RMA_WAR |
		     FI_ORDER_ATOMIC_WAR | FI_ORDER_WAW | FI_ORDER_RMA_WAW |
		     FI_ORDER_ATOMIC_WAW,
	.comp_order = FI_ORDER_NONE,
	.mr_grant = psm3_mr_grant,
	.mr_at_domain = psm3_mr_at_domain,
	.mr_key_size = 8,
	.cq_data_size = 4,
	.variants = psm3_variants,
	.n_variants = 2,
	.inject_size = 64,
	.max_msg_size = 0xFFFFF000ull,
	.tx_iov_limit = 13,
	.rx_iov_limit = 1,
	.rma_iov_limit = 1,
	.mr_iov_limit = 65535,
	.threading = FI_THREAD_SAFE,
	.progress = FI_PROGRESS_MANUAL,
	.rma_progress = FI_PROGRESS_MANUAL,
	.auto_ok = true,
	.av_type = FI_AV_TABLE,
	.addr_format = FI_ADDR_PSMX3,
	.addrlen = 32,
	.protocol = FI_PROTO_PSMX3,
	.protocol_version = 0x0300,
	.mem_tag_format = PSM3_TAG_GENERIC,
	.wait_style = FABSIM_WAIT_UNSIMULATED,
	.wait_err = -FI_ENOSYS,
	.inject_err = -FI_EMSGSIZE,
	.offset_err = FI_EACCES,
	.eagain_one_in = 64,
	.rules = FABSIM_BIT(FABSIM_RULE_INJECT) |
		 FABSIM_BIT(FABSIM_RULE_MSG_SIZE) |
		 FABSIM_BIT(FABSIM_RULE_CQ_DATA) |
		 FABSIM_BIT(FABSIM_RULE_COMP_ORDER) |
		 FABSIM_BIT(FABSIM_RULE_SAW) | FABSIM_BIT(FABSIM_RULE_EAGAIN) |
		 FABSIM_BIT(FABSIM_RULE_MANUAL) | FABSIM_BIT(FABSIM_RULE_CTX) |
		 FABSIM_BIT(FABSIM_RULE_OFFSET),
};
const struct fabsim_profile *fabsim_profile = &profile_psm3;
