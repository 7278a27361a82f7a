/* dapl-ofi logging: one logger, levels x subsystems, stderr by default.
 * Controlled by the variables of the configuration table (param.c). */
#ifndef DFI_LOG_H
#define DFI_LOG_H

#include <stdbool.h>

enum dfi_log_level {
	DFI_LOG_NONE = 0,
	DFI_LOG_ERROR,
	DFI_LOG_WARN,
	DFI_LOG_INFO,
	DFI_LOG_DEBUG,
	DFI_LOG_TRACE,
};

enum dfi_subsys {
	DFI_SS_IA,		/* provider init, IA open/close/query */
	DFI_SS_EVD,		/* event dispatchers */
	DFI_SS_CNO,		/* consumer notification objects */
	DFI_SS_MR,		/* PZ, LMR, RMR */
	DFI_SS_EP,		/* endpoints, DTOs */
	DFI_SS_CM,		/* connection management */
	DFI_SS_FABRIC,		/* libfabric calls */
	DFI_SS_API,		/* argument checks at the DAT entry points */
	DFI_SS_COUNT
};

/* Per-subsystem threshold; statically WARN so logging works before init. */
extern unsigned char dfi_log_threshold[DFI_SS_COUNT];

void dfi_log_init(void);
void dfi_log_emit(enum dfi_log_level lvl, enum dfi_subsys ss, const char *func,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
const char *dfi_log_level_name(enum dfi_log_level lvl);
const char *dfi_subsys_name(enum dfi_subsys ss);

#define dfi_log_on(lvl, ss) ((unsigned)(lvl) <= dfi_log_threshold[(ss)])

/* lvl is evaluated once: a caller may pick it with a side effect (a
 * warning once, then debug lines: dto.c). */
#define dfi_log(lvl, ss, ...) do {					\
		enum dfi_log_level dfi_log_lvl_ = (lvl);		\
									\
		if (dfi_log_on(dfi_log_lvl_, ss))			\
			dfi_log_emit(dfi_log_lvl_, ss, __func__, __VA_ARGS__); \
	} while (0)

#define dfi_err(ss, ...)   dfi_log(DFI_LOG_ERROR, ss, __VA_ARGS__)
#define dfi_warn(ss, ...)  dfi_log(DFI_LOG_WARN, ss, __VA_ARGS__)
#define dfi_info(ss, ...)  dfi_log(DFI_LOG_INFO, ss, __VA_ARGS__)
#define dfi_dbg(ss, ...)   dfi_log(DFI_LOG_DEBUG, ss, __VA_ARGS__)
#define dfi_trace(ss, ...) dfi_log(DFI_LOG_TRACE, ss, __VA_ARGS__)

/* A rejected argument at a DAT entry point: logged at WARN once per call
 * site (so a test loop of bad calls does not flood), at DEBUG after that. */
#define dfi_reject(ss, ...) do {					\
		static int dfi_once_;					\
		enum dfi_log_level l_ = __atomic_exchange_n(&dfi_once_, 1, \
			__ATOMIC_RELAXED) ? DFI_LOG_DEBUG : DFI_LOG_WARN; \
		dfi_log(l_, ss, __VA_ARGS__);				\
	} while (0)

#endif
