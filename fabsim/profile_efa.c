/*
 * The efa profile (libfabric v1.17.0, RDM endpoint over rxr).
 */
#include "fabsim.h"

/*
 * efa RDM endpoint, libfabric v1.17.0 (prov/efa/src):
 *  caps        efa_prov_info.c EFA_RDM_CAPS + efa_prov_info_alloc_for_rxr()
 *              rxr_added_{tx,rx}_caps (FI_ATOMIC left out: not wrapped here)
 *  mode        efa_rdm_{tx,rx}_attr .mode = 0 (EFA_RX_MODE 0): no FI_CONTEXT
 *  op_flags    efa_prov_info_alloc_for_rxr(): tx FI_INJECT|FI_COMPLETION|
 *              FI_TRANSMIT_COMPLETE|FI_DELIVERY_COMPLETE; rx FI_COMPLETION|
 *              FI_MULTI_RECV
 *  msg_order   efa_prov_info_alloc_for_rxr(): FI_ORDER_SAS|ATOMIC_{RAR,RAW,
 *              WAR,WAW} (no SAW, RAW, WAW for RMA)
 *  comp_order  efa_rdm_{tx,rx}_attr: FI_ORDER_NONE
 *  mr_mode     efa_domain_attr OFI_MR_BASIC_MAP|FI_MR_LOCAL, FI_MR_LOCAL
 *              cleared by efa_prov_info_alloc_for_rxr(), set again by
 *              efa_user_info_alter_rxr() when the hints ask for it
 *  mr_key_size efa_domain_attr: sizeof(ibv_sge.lkey) = 4
 *  cq_data     rxr.h RXR_CQ_DATA_SIZE 8
 *  inject_size efa_prov_info_alloc_for_rxr(): MIN(device max_msg_sz,
 *              shm_max_medium_size 4096) - rxr_pkt_max_hdr_size() (168, from
 *              rdm_proto_v4.h header sizes) = 3928 with shm on (the default)
 *  max_msg     efa_prov_info_alloc_for_rxr(): UINT64_MAX (segmentation)
 *  iov_limit   rxr_op_entry.h RXR_IOV_LIMIT 4 (tx and rx); rma_iov_limit 1
 *              (efa_rdm_tx_attr); mr_iov_limit EFA_MR_IOV_LIMIT 1
 *  threading   efa_prov_info_alloc_for_rxr(): FI_THREAD_SAFE
 *  progress    efa_domain_attr AUTO, MANUAL when FI_RMA is asked
 *              (efa_user_info_alter_rxr()); fi_efa(7): really manual
 *  addr        FI_ADDR_EFA, EFA_EP_ADDR_LEN 32 (efa_prov_info_alloc())
 *  protocol    FI_PROTO_EFA, RXR_PROTOCOL_VERSION 4, FI_TAG_GENERIC
 *  wait        rxr_cq.c rxr_cq_open(): wait_obj != FI_WAIT_NONE -> -FI_ENOSYS
 *  eagain      rxr_msg.c / rxr_rma.c: -FI_EAGAIN when tx entries or packets
 *              run out; the 1-in-64 rate is ours
 *  inject_err  rxr_msg.c rxr_msg_inject(): -FI_EINVAL
 */

/* efa_user_info.c (ofi_check_info) with efa's OFI_MR_BASIC_MAP: FI_MR_BASIC
 * alone is accepted, FI_MR_SCALABLE is not, 1.5-style hints must grant
 * VIRT_ADDR|ALLOCATED|PROV_KEY when RMA is asked; FI_MR_LOCAL is kept when
 * hinted (efa_user_info_alter_rxr()) */
static int efa_mr_grant(int hm, uint64_t caps)
{
	int need = (!caps || caps & (FI_RMA | FI_ATOMIC)) ?
		   FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY : 0;

	if (hm & FI_MR_SCALABLE)
		return -1;
	if (hm & FI_MR_BASIC)
		return FI_MR_BASIC | (hm & FI_MR_LOCAL);
	if (hm != FI_MR_UNSPEC && (hm & need) != need)
		return -1;
	return need | (hm & FI_MR_LOCAL);
}

static const struct fabsim_variant efa_variants[] = {
	{ .cq_data_size = 8, .mem_tag_format = 0xAAAAAAAAAAAAAAAAull },
};

static const struct fabsim_profile profile_efa = {
	.name = "efa",
	.prov_name = "sim_efa",
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
	.tx_op_flags = FI_INJECT | FI_COMPLETION | FI_TRANSMIT_COMPLETE |
		       FI_DELIVERY_COMPLETE,
	.rx_op_flags = FI_COMPLETION | FI_MULTI_RECV,
	.msg_order = FI_ORDER_SAS | FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW |
		     FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW,
	.comp_order = FI_ORDER_NONE,
	.mr_grant = efa_mr_grant,
	.mr_key_size = 4,
	.cq_data_size = 8,
	.variants = efa_variants,
	.n_variants = 1,
	.inject_size = 3928,
	.max_msg_size = UINT64_MAX,
	.tx_iov_limit = 4,
	.rx_iov_limit = 4,
	.rma_iov_limit = 1,
	.mr_iov_limit = 1,
	.threading = FI_THREAD_SAFE,
	.progress = FI_PROGRESS_AUTO,
	.rma_progress = FI_PROGRESS_MANUAL,
	.av_type = FI_AV_TABLE,
	.addr_format = FI_ADDR_EFA,
	.addrlen = 32,
	.protocol = FI_PROTO_EFA,
	.protocol_version = 4,
	.mem_tag_format = 0xAAAAAAAAAAAAAAAAull,	/* FI_TAG_GENERIC (ofi internal) */
	.wait_style = FABSIM_WAIT_REFUSED,
	.wait_err = -FI_ENOSYS,
	.inject_err = -FI_EINVAL,
	.eagain_one_in = 64,
	/* mr_local and ctx are not efa 1.17 behaviour: FABSIM_ON= turns them on */
	.rules = FABSIM_BIT(FABSIM_RULE_WAIT) | FABSIM_BIT(FABSIM_RULE_INJECT) |
		 FABSIM_BIT(FABSIM_RULE_MSG_SIZE) |
		 FABSIM_BIT(FABSIM_RULE_CQ_DATA) |
		 FABSIM_BIT(FABSIM_RULE_COMP_ORDER) |
		 FABSIM_BIT(FABSIM_RULE_SAW) | FABSIM_BIT(FABSIM_RULE_EAGAIN) |
		 FABSIM_BIT(FABSIM_RULE_MANUAL),
};
const struct fabsim_profile *fabsim_profile = &profile_efa;
