/*
 * Provider slots not built yet.  Each returns DAT_NOT_IMPLEMENTED and logs
 * the slot's name once at WARN (then at DEBUG).  Every slot of the 648-byte
 * DAT_PROVIDER table gets a function of its exact type, so none is ever NULL.
 * Signatures follow the typedefs of the stock <dat2/dat_redirection.h> and
 * <dat2/udat_redirection.h>.  When a slot is built, delete its stub here and
 * install the real function in fill_table() (provider.c).
 */
#include "dfi.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

static DAT_RETURN not_implemented(const char *slot, int *once)
{
	enum dfi_log_level l = __atomic_exchange_n(once, 1, __ATOMIC_RELAXED) ?
		DFI_LOG_DEBUG : DFI_LOG_WARN;

	dfi_log(l, DFI_SS_API, "dat_%s is not implemented by dapl-ofi yet", slot);
	return DFI_ERR(DAT_NOT_IMPLEMENTED, 0);
}

#define STUB(slot, params)						\
	static DAT_RETURN stub_##slot params				\
	{								\
		static int once;					\
		return not_implemented(#slot, &once);			\
	}

STUB(ep_post_send_with_invalidate, (DAT_EP_HANDLE a1, DAT_COUNT a2, DAT_LMR_TRIPLET * a3, DAT_DTO_COOKIE a4, DAT_COMPLETION_FLAGS a5, DAT_BOOLEAN a6, DAT_RMR_CONTEXT a7))

void dfi_fill_stubs(DAT_PROVIDER *p)
{
	p->ep_post_send_with_invalidate_func = stub_ep_post_send_with_invalidate;
}
