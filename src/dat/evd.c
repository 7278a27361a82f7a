/* The DAT face of the Event Dispatcher: handle and argument checks, then the
 * event core (src/event/evd_core.c) does the work. */
#include "util/hot.h"
#include "dfi.h"
#include "util/param.h"

#include <stddef.h>
#include <string.h>

#define EVD_STREAMS (DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CR_FLAG | DAT_EVD_DTO_FLAG | \
		     DAT_EVD_CONNECTION_FLAG | DAT_EVD_RMR_BIND_FLAG | DAT_EVD_ASYNC_FLAG)
#define CM_STREAMS (DAT_EVD_CR_FLAG | DAT_EVD_CONNECTION_FLAG)

static struct dfi_evd *evd_get(DAT_EVD_HANDLE h)
{
	return dfi_obj_get(h, DFI_T_EVD);
}

#define EVD_OR_REJECT(evd, h) do {						\
		(evd) = evd_get(h);						\
		if (!(evd))							\
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1), \
					  "%p is not an EVD handle", (void *)(h)); \
	} while (0)

static struct dfi_cno_obj *cno_of(struct dfi_ia *ia, DAT_CNO_HANDLE h)
{
	struct dfi_cno_obj *c = dfi_obj_get(h, DFI_T_CNO);

	return c && c->hdr.ia == ia ? c : NULL;
}

/* Stream index in the merging matrix: bit order of DAT_EVD_FLAGS. */
static bool merge_ok(DAT_EVD_FLAGS flags)
{
	static const DAT_EVD_FLAGS bit[6] = {
		DAT_EVD_SOFTWARE_FLAG, DAT_EVD_CR_FLAG, DAT_EVD_DTO_FLAG,
		DAT_EVD_CONNECTION_FLAG, DAT_EVD_RMR_BIND_FLAG, DAT_EVD_ASYNC_FLAG,
	};

	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 6; j++)
			if ((flags & bit[i]) && (flags & bit[j]) && !dfi_merging[i][j])
				return false;
	return true;
}

DAT_RETURN dfi_evd_new(struct dfi_ia *ia, DAT_COUNT qlen, struct dfi_cno_obj *cno,
		       DAT_EVD_FLAGS flags, struct dfi_evd **out)
{
	struct dfi_evd *evd;
	bool full;

	pthread_mutex_lock(&ia->lock);
	full = ia->n_evd >= DFI_MAX_EVDS;
	if (!full)
		ia->n_evd++;
	pthread_mutex_unlock(&ia->lock);
	if (full)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD),
				  "IA already has max_evds (%d) EVDs", DFI_MAX_EVDS);
	evd = dfi_obj_new(ia, DFI_T_EVD, sizeof(*evd));
	if (!evd || dfi_evq_init(&evd->q, evd, qlen, flags,
				 ia->async_evd ? &ia->async_evd->q : NULL) != 0) {
		if (evd)
			dfi_obj_retire(evd);
		pthread_mutex_lock(&ia->lock);
		ia->n_evd--;
		pthread_mutex_unlock(&ia->lock);
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	if (cno)
		dfi_evq_modify_cno(&evd->q, &cno->core);
	dfi_dbg(DFI_SS_EVD, "EVD %p: qlen %d -> %u, flags 0x%x, CNO %p", (void *)evd, qlen,
		evd->q.qlen, (unsigned)flags, (void *)cno);
	*out = evd;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_evd_create(DAT_IA_HANDLE h, DAT_COUNT qlen, DAT_CNO_HANDLE cnoh,
			  DAT_EVD_FLAGS flags, DAT_EVD_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_cno_obj *cno = NULL;
	struct dfi_evd *evd;
	DAT_RETURN rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (qlen <= 0)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "EVD qlen %d must be positive", qlen);
	if (qlen > DFI_EVD_MAX_QLEN)
		return DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD),
				  "EVD qlen %d exceeds max_evd_qlen %d", qlen, DFI_EVD_MAX_QLEN);
	if (cnoh != DAT_HANDLE_NULL && !(cno = cno_of(ia, cnoh)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO),
				  "%p is not a CNO of this IA", (void *)cnoh);
	if (!(flags & EVD_STREAMS) || (flags & ~(DAT_EVD_FLAGS)EVD_STREAMS))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "EVD flags 0x%x: no stream, or unknown bits", (unsigned)flags);
	if (!merge_ok(flags))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "EVD flags 0x%x merge the async stream with others, which "
				  "evd_stream_merging_supported does not allow", (unsigned)flags);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5),
				  "EVD handle pointer is NULL");
	rc = dfi_evd_new(ia, qlen, cno, flags, &evd);
	if (rc == DAT_SUCCESS)
		*out = evd;
	return rc;
}

DAT_RETURN dfi_evd_query(DAT_EVD_HANDLE h, DAT_EVD_PARAM_MASK mask, DAT_EVD_PARAM *p)
{
	struct dfi_evd *evd;
	struct dfi_cno *cno;

	EVD_OR_REJECT(evd, h);
	if (mask & ~(DAT_EVD_PARAM_MASK)DAT_EVD_FIELD_ALL)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "EVD param mask 0x%x has unknown bits", (unsigned)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "EVD param pointer is NULL");
	p->ia_handle = evd->hdr.ia;
	dfi_evq_query(&evd->q, &p->evd_qlen, &p->evd_state, &cno);
	p->cno_handle = cno ? cno->handle : DAT_HANDLE_NULL;
	p->evd_flags = evd->q.flags;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_evd_modify_cno(DAT_EVD_HANDLE h, DAT_CNO_HANDLE cnoh)
{
	struct dfi_evd *evd;
	struct dfi_cno_obj *cno = NULL;

	EVD_OR_REJECT(evd, h);
	if (cnoh != DAT_HANDLE_NULL && !(cno = cno_of(evd->hdr.ia, cnoh)))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO),
				  "%p is not a CNO of this IA", (void *)cnoh);
	dfi_evq_modify_cno(&evd->q, cno ? &cno->core : NULL);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_evd_enable(DAT_EVD_HANDLE h)
{
	struct dfi_evd *evd;

	EVD_OR_REJECT(evd, h);
	dfi_evq_enable(&evd->q);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_evd_disable(DAT_EVD_HANDLE h)
{
	struct dfi_evd *evd;

	EVD_OR_REJECT(evd, h);
	dfi_evq_disable(&evd->q);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_evd_set_unwaitable(DAT_EVD_HANDLE h)
{
	struct dfi_evd *evd;

	EVD_OR_REJECT(evd, h);
	dfi_evq_set_waitable(&evd->q, false);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_evd_clear_unwaitable(DAT_EVD_HANDLE h)
{
	struct dfi_evd *evd;

	EVD_OR_REJECT(evd, h);
	dfi_evq_set_waitable(&evd->q, true);
	return DAT_SUCCESS;
}

DFI_HOT DAT_RETURN dfi_evd_wait(DAT_EVD_HANDLE h, DAT_TIMEOUT timeout, DAT_COUNT threshold,
				DAT_EVENT *event, DAT_COUNT *nmore)
{
	struct dfi_evd *evd;

	DAT_RETURN rc;

	EVD_OR_REJECT(evd, h);
	dfi_cnt_add_1w(&evd->cnt[DCNT_EVD_WAIT], 1);
	rc = dfi_evq_wait(&evd->q, timeout, threshold, event, nmore);
	return rc;
}

DAT_RETURN dfi_evd_resize(DAT_EVD_HANDLE h, DAT_COUNT qlen)
{
	struct dfi_evd *evd;

	EVD_OR_REJECT(evd, h);
	return dfi_evq_resize(&evd->q, qlen);
}

DAT_RETURN dfi_evd_post_se(DAT_EVD_HANDLE h, const DAT_EVENT *event)
{
	struct dfi_evd *evd;

	EVD_OR_REJECT(evd, h);
	if (!(evd->q.flags & DAT_EVD_SOFTWARE_FLAG))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1),
				  "EVD %p was not created with DAT_EVD_SOFTWARE_FLAG", (void *)evd);
	if (!event)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "event pointer is NULL");
	if (event->event_number != DAT_SOFTWARE_EVENT)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "event number 0x%x is not DAT_SOFTWARE_EVENT",
				  (unsigned)event->event_number);
	return dfi_evq_post_se(&evd->q, event);
}

DFI_HOT DAT_RETURN dfi_evd_dequeue(DAT_EVD_HANDLE h, DAT_EVENT *event)
{
	struct dfi_evd *evd;
	DAT_RETURN rc;

	EVD_OR_REJECT(evd, h);
	if (!event)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "event pointer is NULL");
	rc = dfi_evq_dequeue(&evd->q, event);
	/* Polling for connection events: read the EQ here rather than wait
	 * for the progress thread's hop (dfi_cm_pull), and keep the thread off
	 * it meanwhile (the EQ's lease, progress.c).  Not for an EVD that
	 * takes completions too: its empty polls would each cost a system
	 * call, for events that rarely come. */
	if ((evd->q.flags & CM_STREAMS) && !(evd->q.flags & DAT_EVD_DTO_FLAG)) {
		struct dfi_ia *ia = evd->hdr.ia;

		atomic_fetch_add_explicit(&ia->eq_pulls, 1, memory_order_relaxed);
		if (rc == DFI_QUEUE_EMPTY && dfi_cm_pull(ia) > 0)
			rc = dfi_evq_dequeue(&evd->q, event);
	}
	dfi_cnt_add_1w(&evd->cnt[DCNT_EVD_DEQUEUE], 1);
	dfi_cnt_add_1w(&evd->cnt[rc == DAT_SUCCESS ? DCNT_EVD_DEQUEUE_FOUND :
				 DCNT_EVD_DEQUEUE_NOT_FOUND], 1);
	return rc;
}

static void evd_release(struct dfi_evd *evd)
{
	struct dfi_ia *ia = evd->hdr.ia;

	dfi_evd_cq_close(evd);
	dfi_evq_fini(&evd->q);
	pthread_mutex_lock(&ia->lock);
	ia->n_evd--;
	pthread_mutex_unlock(&ia->lock);
	dfi_obj_retire(evd);
}

/* The connection requests still queued on an EVD being freed (FREEING:
 * nothing posts to it any more): no consumer can reach them now, and each
 * would keep its listener (a freed PSP stays for its CRs) and the IA busy,
 * the peer's connect pending.  Refused, as when a CR EVD overflows. */
static void evd_refuse_crs(struct dfi_evd *evd)
{
	for (uint32_t n = 0; n <= evd->q.qlen; n++) {
		DAT_EVENT ev;
		struct dfi_cr *cr;

		if (dfi_evq_dequeue(&evd->q, &ev) != DAT_SUCCESS)
			break;
		if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT)
			continue;
		cr = dfi_obj_get(ev.event_data.cr_arrival_event_data.cr_handle, DFI_T_CR);
		if (cr)
			dfi_cr_destroy(cr);
	}
}

DAT_RETURN dfi_evd_free(DAT_EVD_HANDLE h)
{
	struct dfi_evd *evd;
	DAT_RETURN rc;

	EVD_OR_REJECT(evd, h);
	if (dfi_upcall_current() == &evd->q)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE),
				  "EVD %p: dat_evd_free from inside its own upcall would wait "
				  "for itself", (void *)evd);
	rc = dfi_evq_free_begin(&evd->q);
	if (rc != DAT_SUCCESS) {
		dfi_reject(DFI_SS_API, "EVD %p: free refused: %s", (void *)evd,
			   DAT_GET_SUBTYPE(rc) == DAT_INVALID_STATE_EVD_WAITER ?
			   "a thread is waiting on it" :
			   evd == evd->hdr.ia->async_evd ? "it is the IA's async EVD" :
			   "EPs or service points still feed it");
		return rc;
	}
	if (evd->q.flags & DAT_EVD_CR_FLAG)
		evd_refuse_crs(evd);
	evd_release(evd);
	return DAT_SUCCESS;
}

void dfi_evd_destroy(struct dfi_evd *evd)
{
	if (!dfi_evq_abort(&evd->q)) {
		/* Its waiter is this thread, interrupted by a signal handler
		 * that closes the IA (exit() and an atexit handler): leave the
		 * EVD, out of the IA's list, for the wait below to return from. */
		dfi_warn(DFI_SS_EVD, "EVD %p: closed from a signal handler on top of its own "
			 "dat_evd_wait: left allocated", (void *)evd);
		dfi_obj_unlink(evd);
		return;
	}
	evd_release(evd);
}

/* ------------------------------------------------- kDAT upcalls (extension) */

/* The IA's dispatcher, started on first use. */
static struct dfi_disp *ia_disp(struct dfi_ia *ia)
{
	struct dfi_disp *d = NULL;

	pthread_mutex_lock(&ia->lock);
	if (!ia->disp_on) {
		long n = dfi_param_int(DFI_P_UPCALL_THREADS);
		long b = dfi_param_int(DFI_P_UPCALL_BUDGET);
		long spin = dfi_param_int(DFI_P_UPCALL_SPIN_US);
		int rc;

		if (n < 1 || n > 64) {
			dfi_warn(DFI_SS_EVD, "DAPL_OFI_UPCALL_THREADS=%ld out of range 1..64: "
				 "using 2", n);
			n = 2;
		}
		if (b < 1) {
			dfi_warn(DFI_SS_EVD, "DAPL_OFI_UPCALL_BUDGET=%ld must be positive: "
				 "using 16", b);
			b = 16;
		}
		if (spin < 0 || spin > 100000) {
			dfi_warn(DFI_SS_EVD, "DAPL_OFI_UPCALL_SPIN_US=%ld out of range 0..100000: "
				 "using 0", spin);
			spin = 0;
		}
		rc = dfi_disp_start(&ia->disp, (int)n, (int)b);
		if (rc) {
			dfi_err(DFI_SS_EVD, "IA '%s': cannot start the upcall dispatcher: %s",
				ia->prov->info.ia_name, strerror(-rc));
		} else {
			dfi_disp_set_spin(&ia->disp, (uint64_t)spin * 1000u);
			ia->disp_on = true;
		}
	}
	if (ia->disp_on)
		d = &ia->disp;
	pthread_mutex_unlock(&ia->lock);
	return d;
}

static DAT_RETURN set_upcall(struct dfi_evd *evd, int policy, const DAT_UPCALL_OBJECT *obj,
			     int flag, DAT_COUNT *npending)
{
	struct dfi_disp *d = NULL;
	DAT_RETURN rc;

	if (policy != DAT_UPCALL_DISABLE && policy != DAT_UPCALL_TEARDOWN &&
	    !(d = ia_disp(evd->hdr.ia)))
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	rc = dfi_evq_set_upcall(&evd->q, d, policy, obj, flag, npending);
	if (rc == DAT_SUCCESS)
		dfi_dbg(DFI_SS_EVD, "EVD %p: upcall policy %d, flag %d, function %p",
			(void *)evd, policy, flag, obj ? (void *)(uintptr_t)obj->upcall_func : NULL);
	return rc;
}

/* dat_evd_kcreate(ia, qlen, policy, upcall, flags, &evd) */
static DAT_RETURN evd_kcreate(DAT_IA_HANDLE h, va_list args)
{
	DAT_COUNT qlen = va_arg(args, DAT_COUNT);
	int policy = va_arg(args, int);
	const DAT_UPCALL_OBJECT *obj = va_arg(args, const DAT_UPCALL_OBJECT *);
	DAT_EVD_FLAGS flags = (DAT_EVD_FLAGS)va_arg(args, int);
	DAT_EVD_HANDLE *out = va_arg(args, DAT_EVD_HANDLE *);
	DAT_EVD_HANDLE evh;
	DAT_RETURN rc;

	if (!dfi_obj_get(h, DFI_T_IA))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "dat_evd_kcreate: %p is not an IA handle", (void *)h);
	if (policy != DAT_UPCALL_DISABLE && policy != DAT_UPCALL_SINGLE_INSTANCE &&
	    policy != DAT_UPCALL_NOTIFY && policy != DAT_UPCALL_MANY)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "dat_evd_kcreate: policy %d is not one to create an EVD with "
				  "(DISABLE, SINGLE_INSTANCE, NOTIFY or MANY)", policy);
	if (policy != DAT_UPCALL_DISABLE && (!obj || !obj->upcall_func))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4),
				  "dat_evd_kcreate: policy %d needs an upcall object with a "
				  "function", policy);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6),
				  "dat_evd_kcreate: EVD handle pointer is NULL");
	rc = dfi_evd_create(h, qlen, DAT_HANDLE_NULL, flags, &evh);
	if (rc == DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4))
		return DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);	/* evd_flags */
	if (rc != DAT_SUCCESS)
		return rc;
	/* The policy is in force before the handle is returned, so before
	 * any event can arrive (evd-contract 1.3 rule 4). */
	rc = set_upcall(evh, policy, obj, DAT_UPCALL_INVOC_NEW, NULL);
	if (rc != DAT_SUCCESS) {
		dfi_evd_free(evh);
		return rc;
	}
	*out = evh;
	return DAT_SUCCESS;
}

/* dat_evd_modify_upcall / dat_evd_arm_upcall(evd, policy, upcall, flag, &npending) */
static DAT_RETURN evd_modify_upcall(struct dfi_evd *evd, va_list args)
{
	int policy = va_arg(args, int);
	const DAT_UPCALL_OBJECT *obj = va_arg(args, const DAT_UPCALL_OBJECT *);
	int flag = va_arg(args, int);
	DAT_COUNT *npending = va_arg(args, DAT_COUNT *);

	return set_upcall(evd, policy, obj, flag, npending);
}

/* dat_evd_query_upcall(evd, &policy, &upcall, &flag) */
static DAT_RETURN evd_query_upcall(struct dfi_evd *evd, va_list args)
{
	DAT_UPCALL_POLICY *policy = va_arg(args, DAT_UPCALL_POLICY *);
	DAT_UPCALL_OBJECT *obj = va_arg(args, DAT_UPCALL_OBJECT *);
	DAT_UPCALL_FLAG *flag = va_arg(args, DAT_UPCALL_FLAG *);
	int p, f;

	dfi_evq_get_upcall(&evd->q, &p, obj, &f);
	if (policy)
		*policy = (DAT_UPCALL_POLICY)p;
	if (flag)
		*flag = (DAT_UPCALL_FLAG)f;
	return DAT_SUCCESS;
}

DAT_RETURN dfi_evd_extension(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args)
{
	struct dfi_evd *evd;

	if (op == DAT_OFI_EVD_KCREATE_OP)
		return evd_kcreate(h, args);
	EVD_OR_REJECT(evd, h);
	if (op == DAT_OFI_EVD_MODIFY_UPCALL_OP)
		return evd_modify_upcall(evd, args);
	return evd_query_upcall(evd, args);
}
