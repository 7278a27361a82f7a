/*
 * fabsim profiles: what every profile shares (rule names, the environment,
 * the core's MR mode).  Each profile's attributes are in its own file,
 * fabsim/profile_<name>.c, linked into libsim_<name>-fi.so.
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
	[FABSIM_RULE_MR_ENDPOINT] = "mr_endpoint",
	[FABSIM_RULE_OFFSET] = "offset",
};


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

/*
 * The core's MR mode for the mode granted to the consumer.  Without
 * FI_MR_VIRT_ADDR the core's util MR map (ofi_mr_map_insert()) stores the
 * region's base and ofi_mr_map_verify() adds it to the remote address: the
 * core itself then takes offsets, across processes.  Without FI_MR_PROV_KEY
 * it keeps the consumer's requested_key (-FI_ENOKEY when taken).
 */
int fabsim_core_mr_mode(int granted)
{
	int core = FI_MR_ALLOCATED;

	if (granted & (FI_MR_BASIC | FI_MR_VIRT_ADDR))
		core |= FI_MR_VIRT_ADDR;
	if (granted & (FI_MR_BASIC | FI_MR_PROV_KEY))
		core |= FI_MR_PROV_KEY;
	return core;
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
