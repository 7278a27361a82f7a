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
	DFI_P_COUNT
};

extern const struct dfi_param dfi_params[DFI_P_COUNT];

/* The value in force: the environment's, else the default. */
const char *dfi_param_str(enum dfi_param_id id);
long dfi_param_int(enum dfi_param_id id);
bool dfi_param_set(enum dfi_param_id id);	/* given in the environment */
/* Warn once about DAPL_OFI_* variables that are not in the table. */
void dfi_param_check_unknown(void);

#endif
