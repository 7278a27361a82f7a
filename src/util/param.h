/* dapl-ofi configuration: every tunable in one table (name, type, default, help).
 * daplofi-info prints it; man/dapl-ofi.7 lists it. */
#ifndef DFI_PARAM_H
#define DFI_PARAM_H

#include <stdbool.h>

enum dfi_param_type { DFI_PARAM_STR, DFI_PARAM_INT, DFI_PARAM_BOOL, DFI_PARAM_HEX };

struct dfi_param {
	const char *name;
	enum dfi_param_type type;
	const char *def;	/* default, as text */
	const char *help;
};

enum dfi_param_id {
	DFI_P_LOG_LEVEL,
	DFI_P_LOG_SUBSYS,
	DFI_P_LOG_FILE,
	DFI_P_DBG_TYPE,		/* legacy alias */
	DFI_P_DBG_DEST,		/* legacy alias */
	DFI_P_QUARANTINE,
	DFI_P_PROGRESS_RT,
	DFI_P_PROGRESS_LEASE_US,
	DFI_P_UPCALL_THREADS,
	DFI_P_UPCALL_BUDGET,
	DFI_P_UPCALL_SPIN_US,
	DFI_P_CQ_WAIT,
	DFI_P_EP_PREOPEN,
	DFI_P_INJECT,
	DFI_P_PEER_TIMEOUT_MS,
	DFI_P_SRQ_GAP_MS,
	DFI_P_RDM_SINKS,
	DFI_P_RDM_TRANSMIT_COMPLETE,
	DFI_P_MTU,
	DFI_P_FAULT_LATE_CONNECTED_MS,
	DFI_P_FAULT_RDM_LOSE,
	DFI_P_FAULT_CQ_OPEN,
	DFI_P_COUNT
};

extern const struct dfi_param dfi_params[DFI_P_COUNT];

/* The value in force: the environment's, else what an OFA uDAPL variable
 * this one stands for says (dfi_ofa_vars: DAPL_IB_MTU for DAPL_OFI_MTU, ...),
 * else the default.  The DAPL_OFI_ name wins when both are set. */
const char *dfi_param_str(enum dfi_param_id id);
long dfi_param_int(enum dfi_param_id id);
bool dfi_param_set(enum dfi_param_id id);	/* given in the environment */
/* Called once, when logging starts: a warning for each DAPL_OFI_* variable
 * that is not in the table and for each OFA uDAPL variable dapl-ofi
 * ignores, an info line for each OFA variable it honours (and which name
 * won); one line per variable. */
void dfi_param_check_unknown(void);

/* OFA uDAPL 2.1.10's variables (its providers cma, scm and ucm) and what
 * dapl-ofi does with each: man/dapl-ofi.7, MIGRATING FROM OFA uDAPL. */
enum dfi_ofa_use {
	DFI_OFA_SAME,		/* read as OFA reads it (in the table) */
	DFI_OFA_AS,		/* honoured as the DAPL_OFI_ variable `as` */
	DFI_OFA_IGNORED,	/* no meaning over libfabric: one warning */
};

struct dfi_ofa_var {
	const char *name;
	enum dfi_ofa_use use;
	enum dfi_param_id as;	/* DFI_OFA_AS, DFI_OFA_SAME */
	const char *why;	/* what it did in OFA uDAPL, why not here */
};

extern const struct dfi_ofa_var dfi_ofa_vars[];
extern const int dfi_ofa_nvars;

#endif
