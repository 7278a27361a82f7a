/*
 * fabsim profiles: the published attributes of a hardware provider and the
 * rules it enforces.  One profile per built library (-DFABSIM_PROFILE_EFA).
 * Every value names its source in libfabric v1.17.0.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fabsim.h"

static const char *const rule_names[FABSIM_RULE_COUNT] = {
	[FABSIM_RULE_WAIT] = "wait",
	[FABSIM_RULE_MR_LOCAL] = "mr_local",
	[FABSIM_RULE_INJECT] = "inject",
	[FABSIM_RULE_MSG_SIZE] = "msg_size",
	[FABSIM_RULE_CQ_DATA] = "cq_data",
	[FABSIM_RULE_COMP_ORDER] = "comp_order",
	[FABSIM_RULE_SAW] = "saw",
	[FABSIM_RULE_EAGAIN] = "eagain",
	[FABSIM_RULE_MANUAL] = "manual",
	[FABSIM_RULE_CTX] = "ctx",
};

#if defined(FABSIM_PROFILE_EFA)
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
 */
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
	.mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY,
	.mr_key_size = 4,
	.cq_data_size = 8,
	.inject_size = 3928,
	.max_msg_size = UINT64_MAX,
	.tx_iov_limit = 4,
	.rx_iov_limit = 4,
	.rma_iov_limit = 1,
	.mr_iov_limit = 1,
	.threading = FI_THREAD_SAFE,
	.progress = FI_PROGRESS_AUTO,
	.rma_progress = FI_PROGRESS_MANUAL,
	.addr_format = FI_ADDR_EFA,
	.addrlen = 32,
	.protocol = FI_PROTO_EFA,
	.protocol_version = 4,
	.mem_tag_format = 0xAAAAAAAAAAAAAAAAull,	/* FI_TAG_GENERIC (ofi internal) */
	.wait_err = -FI_ENOSYS,
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
#else
#error "set FABSIM_PROFILE (efa is the only profile so far)"
#endif

const char *fabsim_rule_name(enum fabsim_rule r)
{
	return r < FABSIM_RULE_COUNT ? rule_names[r] : "?";
}

static unsigned parse_rules(const char *s)
{
	unsigned mask = 0;
	char *dup, *tok, *save = NULL;
	int r;

	if (!s || !*s)
		return 0;
	dup = strdup(s);
	if (!dup)
		return 0;
	for (tok = strtok_r(dup, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "all")) {
			mask = FABSIM_BIT(FABSIM_RULE_COUNT) - 1;
			continue;
		}
		for (r = 0; r < FABSIM_RULE_COUNT; r++) {
			if (!strcmp(tok, rule_names[r])) {
				mask |= FABSIM_BIT(r);
				break;
			}
		}
		if (r == FABSIM_RULE_COUNT)
			FABSIM_WARN(FI_LOG_CORE, "unknown rule %s in FABSIM_OFF/FABSIM_ON\n",
				    tok);
	}
	free(dup);
	return mask;
}

static size_t env_size(const char *name, size_t def)
{
	const char *v = getenv(name);

	return v && *v ? (size_t)strtoull(v, NULL, 0) : def;
}

/*
 * FABSIM_OFF=rule,...|all   rules switched off
 * FABSIM_ON=rule,...        rules outside the profile switched on (mr_local, ctx)
 * FABSIM_SEED=n             seed of eagain/comp_order choices
 * FABSIM_CQ_DATA_SIZE=n, FABSIM_MAX_MSG_SIZE=n   what-if attribute values
 */
void fabsim_config_load(struct fabsim_config *cfg)
{
	cfg->rules = (fabsim_profile->rules | parse_rules(getenv("FABSIM_ON"))) &
		     ~parse_rules(getenv("FABSIM_OFF"));
	cfg->seed = env_size("FABSIM_SEED", 1);
	cfg->mode = fabsim_profile->mode;
	if (cfg->rules & FABSIM_BIT(FABSIM_RULE_CTX) && !cfg->mode)
		cfg->mode = FI_CONTEXT;
	cfg->cq_data_size = env_size("FABSIM_CQ_DATA_SIZE",
				     fabsim_profile->cq_data_size);
	cfg->max_msg_size = env_size("FABSIM_MAX_MSG_SIZE",
				     fabsim_profile->max_msg_size);
}

bool fabsim_rule_on(const struct fabsim_config *cfg, enum fabsim_rule r)
{
	return cfg->rules & FABSIM_BIT(r);
}

uint64_t fabsim_now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* splitmix64 of (seed, call count): deterministic for a given call sequence */
uint64_t fabsim_rng(struct fabsim_domain *dom)
{
	uint64_t z = dom->cfg.seed + 0x9e3779b97f4a7c15ull * ++dom->rng_count;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
