/*
 * The opx profile: libfabric v1.17.0, prov/opx (Omni-Path, FI_EP_RDM only).
 *  caps        fi_opx.h FI_OPX_DEFAULT_{TX,RX}_CAPS less FI_ATOMIC and
 *              FI_NAMED_RX_CTX (not wrapped here)
 *  mode        fi_opx.h FI_OPX_DEFAULT_MODE FI_CONTEXT2|FI_ASYNC_IOV;
 *              fi_opx_init.c fi_opx_fillinfo() refuses hints with FI_CONTEXT
 *              and without FI_CONTEXT2
 *  op_flags    fi_opx_info.c fi_opx_set_info(): tx FI_TRANSMIT_COMPLETE, rx
 *              FI_MULTI_RECV
 *  msg_order   fi_opx.h FI_OPX_DEFAULT_MSG_ORDER: FI_ORDER_ATOMIC_{RAR,RAW,
 *              WAR,WAW} only (not even FI_ORDER_SAS)
 *  comp_order  fi_opx_set_info() FI_ORDER_NONE
 *  mr_mode     configure.m4 OPX_MR default FI_MR_SCALABLE, set whatever the
 *              hints say by fi_opx_domain.c fi_opx_choose_domain()
 *  mr_key_size fi_opx_set_info() 2; mr_iov_limit 1
 *  cq_data     fi_opx.h FI_OPX_REMOTE_CQ_DATA_SIZE 4 (hints asking more:
 *              fi_opx_check_domain_attr() fails)
 *  inject_size fi_opx_hfi1_packet.h FI_OPX_HFI1_PACKET_IMM 16
 *  max_msg     fi_opx.h FI_OPX_MAX_MSG_SIZE UINT64_MAX
 *  iov_limit   fi_opx_set_info() tx/rx SIZE_MAX (ours: FABSIM_MAX_IOV),
 *              rma_iov_limit 0 (advertised so; one rma_iov is accepted)
 *  threading   configure.m4 OPX_THREAD FI_THREAD_ENDPOINT
 *  progress    fi_opx_set_default_info(): a MANUAL info, then an AUTO one;
 *              fi_opx_getinfo() takes AUTO from the hints
 *  av_type     configure.m4 OPX_AV default FI_AV_MAP
 *  addr        FI_ADDR_OPX, sizeof(union fi_opx_addr) = 8
 *  protocol    FI_PROTO_OPX, fi_opx.h FI_OPX_PROTOCOL_VERSION 1
 *  tag format  fi_opx.h FI_OPX_MEM_TAG_FORMAT all ones
 *  wait        fi_opx_cq.c fi_opx_cq_open() never reads attr->wait_obj;
 *              fi_opx_cq_ops_table.h fi_opx_cq_sread() abort()s;
 *              fi_opx_control_cq() -FI_ENOSYS
 *  inject      fi_opx_endpoint.h fi_opx_ep_tx_inject(): above 16 bytes an
 *              FI_MSG inject is quietly sent as an eager send ("workaround
 *              for some versions of MPI"), a tagged one hits an assert;
 *              the simulation refuses both with -FI_EINVAL
 *  offset      fi_opx_endpoint.h: the target writes at opx_mr->buf + offset
 *              with no range check ("Permissions (TODO) ... nack on failed
 *              lookup", assert(opx_mr != NULL)); the simulation gives
 *              -FI_EINVAL instead of writing out of bounds
 */
#include "fabsim.h"

static int opx_mr_grant(int hm, uint64_t caps)
{
	(void)hm; (void)caps;
	return FI_MR_SCALABLE;
}

static const struct fabsim_variant opx_variants[] = {
	{ .cq_data_size = 4, .mem_tag_format = 0xFFFFFFFFFFFFFFFFull },
};

static const struct fabsim_profile profile_opx = {
	.name = "opx",
	.prov_name = "sim_opx",
	.caps = FI_MSG | FI_TAGGED | FI_RMA | FI_SEND | FI_RECV | FI_READ |
		FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SOURCE |
		FI_MULTI_RECV | FI_DIRECTED_RECV | FI_LOCAL_COMM |
		FI_REMOTE_COMM,
	/* as fi_opx.h has them: REMOTE_WRITE among the tx caps */
	.tx_caps = FI_MSG | FI_TAGGED | FI_RMA | FI_SOURCE | FI_SEND |
		   FI_READ | FI_WRITE | FI_REMOTE_WRITE,
	.rx_caps = FI_MSG | FI_TAGGED | FI_RMA | FI_SOURCE | FI_RECV |
		   FI_DIRECTED_RECV | FI_MULTI_RECV | FI_REMOTE_READ |
		   FI_REMOTE_WRITE,
	.domain_caps = FI_LOCAL_COMM | FI_REMOTE_COMM,
	.mode = FI_CONTEXT2 | FI_ASYNC_IOV,
	.tx_op_flags = FI_TRANSMIT_COMPLETE,
	.rx_op_flags = FI_MULTI_RECV,
	.msg_order = FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW |
		     FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW,
	.comp_order = FI_ORDER_NONE,
	.mr_grant = opx_mr_grant,
	.mr_key_size = 2,
	.cq_data_size = 4,
	.variants = opx_variants,
	.n_variants = 1,
	.inject_size = 16,
	.max_msg_size = UINT64_MAX,
	.tx_iov_limit = FABSIM_MAX_IOV,
	.rx_iov_limit = FABSIM_MAX_IOV,
	.rma_iov_limit = 0,
	.mr_iov_limit = 1,
	.threading = FI_THREAD_ENDPOINT,
	.progress = FI_PROGRESS_MANUAL,
	.rma_progress = FI_PROGRESS_MANUAL,
	.auto_ok = true,
	.av_type = FI_AV_MAP,
	.addr_format = FI_ADDR_OPX,
	.addrlen = 8,
	.protocol = FI_PROTO_OPX,
	.protocol_version = 1,
	.mem_tag_format = 0xFFFFFFFFFFFFFFFFull,
	.wait_style = FABSIM_WAIT_IGNORED,
	.wait_err = -FI_ENOSYS,
	.inject_err = -FI_EINVAL,
	.offset_err = FI_EINVAL,
	.eagain_one_in = 64,
	.rules = FABSIM_BIT(FABSIM_RULE_WAIT) | FABSIM_BIT(FABSIM_RULE_INJECT) |
		 FABSIM_BIT(FABSIM_RULE_MSG_SIZE) |
		 FABSIM_BIT(FABSIM_RULE_CQ_DATA) |
		 FABSIM_BIT(FABSIM_RULE_COMP_ORDER) |
		 FABSIM_BIT(FABSIM_RULE_SAW) | FABSIM_BIT(FABSIM_RULE_EAGAIN) |
		 FABSIM_BIT(FABSIM_RULE_MANUAL) | FABSIM_BIT(FABSIM_RULE_CTX) |
		 FABSIM_BIT(FABSIM_RULE_OFFSET),
};
const struct fabsim_profile *fabsim_profile = &profile_opx;
