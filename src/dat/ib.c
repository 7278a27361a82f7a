/*
 * The IB extension of DAT 2.0 (<dat2/dat_ib_extensions.h>, the stock
 * header): the ops a consumer reaches through dat_extension_op when
 * dat_ia_query says extension_supported == DAT_EXTENSION_IB.
 *
 * Served: RDMA write with immediate data (dto.c, post_write_imm), atomics
 * (native, or emulated on RDM IAs: dto.c), UD endpoints on RDM IAs (ud.c), the
 * counters of IAs, EPs and EVDs (counted where things happen), and the
 * open/close query by IA name.  Refused with DAT_NOT_IMPLEMENTED and a log
 * line: atomics on MSG IAs without FI_ATOMIC, and the collectives.
 * docs/ib-extension.md says how and why.
 */
#include "dfi.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

bool dfi_ib_op(DAT_EXTENDED_OP op)
{
	return (op >= DAT_IB_FETCH_AND_ADD_OP && op <= DAT_IB_UD_AH_FREE_OP) ||
	       op == DAT_IB_OPEN_QUERY_OP || op == DAT_IB_CLOSE_QUERY_OP;
}

static const char *op_name(DAT_EXTENDED_OP op)
{
	switch (op) {
	case DAT_IB_FETCH_AND_ADD_OP: return "fetch and add";
	case DAT_IB_CMP_AND_SWAP_OP: return "compare and swap";
	case DAT_IB_UD_SEND_OP: return "UD send";
	case DAT_IB_UD_CM_FREE_OP: return "UD CM free";
	case DAT_IB_UD_AH_FREE_OP: return "UD address handle free";
	default: return "collective";
	}
}

/* ---------------------------------------------------------------- counters */

/* The counters of handle h: IA, EP or EVD; NULL if it is none of those. */
static _Atomic uint64_t *counters(DAT_HANDLE h, int *n, const char **what)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
	struct dfi_evd *evd = dfi_obj_get(h, DFI_T_EVD);

	if (ia) {
		*n = DCNT_IA_ALL_COUNTERS;
		*what = "IA";
		return ia->cnt;
	}
	if (ep) {
		*n = DCNT_EP_ALL_COUNTERS;
		*what = "EP";
		return ep->cnt;
	}
	if (evd) {
		*n = DCNT_EVD_ALL_COUNTERS;
		*what = "EVD";
		return evd->cnt;
	}
	return NULL;
}

/* cntr: one counter's index, or the ..._ALL_COUNTERS of the handle's kind
 * for all of them (out then holds that many). */
static DAT_RETURN query_counters(DAT_HANDLE h, int cntr, DAT_UINT64 *out, int reset)
{
	const char *what;
	int n;
	_Atomic uint64_t *c = counters(h, &n, &what);

	if (!c)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1),
				  "%p is not an IA, EP or EVD handle", (void *)h);
	if (cntr < 0 || cntr > n)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "%s counter %d: there are %d", what, cntr, n);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "output pointer is NULL");
	for (int i = cntr == n ? 0 : cntr; i < (cntr == n ? n : cntr + 1); i++) {
		*out++ = reset ? atomic_exchange_explicit(&c[i], 0, memory_order_relaxed) :
				 atomic_load_explicit(&c[i], memory_order_relaxed);
	}
	return DAT_SUCCESS;
}

/* On stdout, as OFA's provider prints them: the counters that are not 0. */
static DAT_RETURN print_counters(DAT_HANDLE h, int cntr, int reset)
{
	const char *what;
	int n, shown = 0;
	_Atomic uint64_t *c = counters(h, &n, &what);

	if (!c)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1),
				  "%p is not an IA, EP or EVD handle", (void *)h);
	if (cntr < 0 || cntr > n)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "%s counter %d: there are %d", what, cntr, n);
	for (int i = cntr == n ? 0 : cntr; i < (cntr == n ? n : cntr + 1); i++) {
		uint64_t v = reset ? atomic_exchange_explicit(&c[i], 0, memory_order_relaxed) :
				     atomic_load_explicit(&c[i], memory_order_relaxed);

		if (v || cntr != n) {
			printf("%s %p counter[%d] = %" PRIu64 "\n", what, (void *)h, i, v);
			shown++;
		}
	}
	if (!shown)
		printf("%s %p: all %d counters are 0\n", what, (void *)h, n);
	fflush(stdout);
	return DAT_SUCCESS;
}

/* Counting never stops: the CM type is on from the start, and the link
 * and diagnostic counters of an IB port have no libfabric counterpart. */
static DAT_RETURN start_stop_counters(DAT_HANDLE h, int type, bool start)
{
	if (!dfi_obj_get(h, DFI_T_IA))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%s counters: %p is not an IA handle", start ? "start" : "stop",
				  (void *)h);
	if (type < DCNT_IA_CM || type > DCNT_IA_DIAG)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "%s counters: type %d is not DCNT_IA_CM, _LNK or _DIAG",
				  start ? "start" : "stop", type);
	if (type != DCNT_IA_CM)
		dfi_info(DFI_SS_API, "%s counters: type %d: no such counters over libfabric "
			 "(they stay 0)", start ? "start" : "stop", type);
	return DAT_SUCCESS;
}

/* ------------------------------------------------------- open/close query */

/* dat_ib_open_query: the registry loads us by name and hands the name as
 * the handle; an IA opened only to be queried, closed by the close op. */
static DAT_RETURN open_query(const char *name, va_list args)
{
	DAT_IA_HANDLE *iap = va_arg(args, DAT_IA_HANDLE *);
	DAT_IA_ATTR_MASK ia_mask = va_arg(args, DAT_IA_ATTR_MASK);
	DAT_IA_ATTR *ia_attr = va_arg(args, DAT_IA_ATTR *);
	DAT_PROVIDER_ATTR_MASK pr_mask = va_arg(args, DAT_PROVIDER_ATTR_MASK);
	DAT_PROVIDER_ATTR *pr_attr = va_arg(args, DAT_PROVIDER_ATTR *);
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_IA_HANDLE ia;
	DAT_RETURN rc;

	if (!name)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1),
				  "open query: IA name is NULL");
	if (!iap)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "open query: IA handle pointer is NULL");
	rc = dfi_ia_open((const DAT_NAME_PTR)name, 8, &async, &ia);
	if (rc != DAT_SUCCESS)
		return rc;
	rc = dfi_ia_query(ia, NULL, ia_mask, ia_attr, pr_mask, pr_attr);
	if (rc != DAT_SUCCESS) {
		dfi_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
		return rc;
	}
	*iap = ia;
	return DAT_SUCCESS;
}

/* -------------------------------------------------------------- dispatch */

DAT_RETURN dfi_ib_extension(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args)
{
	switch ((int)op) {
	case DAT_IB_RDMA_WRITE_IMMED_OP: {
		struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
		DAT_COUNT n = va_arg(args, DAT_COUNT);
		DAT_LMR_TRIPLET *iov = va_arg(args, DAT_LMR_TRIPLET *);
		DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
		const DAT_RMR_TRIPLET *r = va_arg(args, const DAT_RMR_TRIPLET *);
		DAT_UINT32 imm = va_arg(args, DAT_UINT32);
		DAT_COMPLETION_FLAGS flags = va_arg(args, DAT_COMPLETION_FLAGS);

		if (ep && dfi_fabric_limits(ep->hdr.ia->fab)->cq_data_size < 8)
			return DFI_REJECT(DFI_ERR(DAT_NOT_IMPLEMENTED, 0),
					  "RDMA write with immediate data: libfabric provider "
					  "'%s' carries %zu bytes of CQ data, 8 needed",
					  dfi_fabric_limits(ep->hdr.ia->fab)->prov_name,
					  dfi_fabric_limits(ep->hdr.ia->fab)->cq_data_size);
		return dfi_ep_post_rdma_write_immed(h, n, iov, cookie, r, imm, flags);
	}
	case DAT_IB_QUERY_COUNTERS_OP: {
		int cntr = va_arg(args, int);
		DAT_UINT64 *out = va_arg(args, DAT_UINT64 *);
		int reset = va_arg(args, int);

		return query_counters(h, cntr, out, reset);
	}
	case DAT_IB_PRINT_COUNTERS_OP: {
		int cntr = va_arg(args, int);
		int reset = va_arg(args, int);

		return print_counters(h, cntr, reset);
	}
	case DAT_IB_START_COUNTERS_OP:
	case DAT_IB_STOP_COUNTERS_OP:
		return start_stop_counters(h, va_arg(args, int), op == DAT_IB_START_COUNTERS_OP);
	case DAT_IB_FETCH_AND_ADD_OP:
	case DAT_IB_CMP_AND_SWAP_OP: {
		struct dfi_ep *ep = dfi_obj_get(h, DFI_T_EP);
		bool cswap = op == DAT_IB_CMP_AND_SWAP_OP;
		DAT_UINT64 a = va_arg(args, DAT_UINT64);
		DAT_UINT64 b = cswap ? va_arg(args, DAT_UINT64) : 0;
		const DAT_LMR_TRIPLET *l = va_arg(args, const DAT_LMR_TRIPLET *);
		DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
		const DAT_RMR_TRIPLET *r = va_arg(args, const DAT_RMR_TRIPLET *);
		DAT_COMPLETION_FLAGS flags = va_arg(args, DAT_COMPLETION_FLAGS);

		if (ep && !dfi_fabric_limits(ep->hdr.ia->fab)->atomic &&
		    !dfi_fabric_limits(ep->hdr.ia->fab)->atomic_emul)
			return DFI_REJECT(DFI_ERR(DAT_NOT_IMPLEMENTED, 0),
					  !ep->hdr.ia->prov->cfg.atomics ?
					  "%s: atomics are off on this IA (ia_params atomics=0; "
					  "provider '%s')" :
					  "%s: libfabric provider '%s' has no FI_ATOMIC, nor the "
					  "RMA with remote CQ data that dapl-ofi emulates them "
					  "with (dapl-ofi(7))", op_name(op),
					  dfi_fabric_limits(ep->hdr.ia->fab)->prov_name);
		/* compare-and-swap: a is the value compared, b the one swapped in */
		return dfi_ep_post_atomic(h, cswap, cswap ? a : 0, cswap ? b : a, l, cookie, r,
					  flags);
	}
	case DAT_IB_UD_SEND_OP: {
		DAT_COUNT n = va_arg(args, DAT_COUNT);
		DAT_LMR_TRIPLET *iov = va_arg(args, DAT_LMR_TRIPLET *);
		const DAT_IB_ADDR_HANDLE *ah = va_arg(args, const DAT_IB_ADDR_HANDLE *);
		DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
		DAT_COMPLETION_FLAGS flags = va_arg(args, DAT_COMPLETION_FLAGS);

		return dfi_ep_post_send_ud(h, n, iov, ah, cookie, flags);
	}
	case DAT_IB_UD_CM_FREE_OP:
		return dfi_ud_cm_free(h, va_arg(args, DAT_CONTEXT));
	case DAT_IB_UD_AH_FREE_OP:
		return dfi_ud_ah_free(h, va_arg(args, const DAT_IB_ADDR_HANDLE *));
	case DAT_IB_OPEN_QUERY_OP:
		return open_query((const char *)h, args);
	case DAT_IB_CLOSE_QUERY_OP:
		if (!dfi_obj_get(h, DFI_T_IA))
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
					  "close query: %p is not an IA handle", (void *)h);
		return dfi_ia_close(h, DAT_CLOSE_ABRUPT_FLAG);
	default:
		dfi_reject(DFI_SS_API, "IB extension op %d (%s) on handle %p: not implemented "
			   "by dapl-ofi (dapl-ofi(7), 'The IB extension')", (int)op,
			   op_name(op), (void *)h);
		return DFI_ERR(DAT_NOT_IMPLEMENTED, 0);
	}
}
