/*
 * dapl-ofi DAT extension: kDAT 2.0 upcall policies for user-space programs.
 *
 * The kernel DAT API (kDAT 2.0) lets a consumer receive events by *upcall*,
 * under a policy it sets per EVD.  No user-space DAT provider offers that;
 * dapl-ofi does, through dat_extension_op, so a program that links only
 * -ldat2 reaches it through the stock registry.  Every call below is a thin
 * inline wrapper; see dat_evd_modify_upcall(3) for the guarantees.
 *
 *   dat_evd_kcreate(ia, qlen, policy, &upcall, flags, &evd)
 *   dat_evd_modify_upcall(evd, policy, &upcall | DAT_UPCALL_SAME, flag)
 *   dat_evd_arm_upcall(evd, policy, &upcall | DAT_UPCALL_SAME, flag, &npending)
 *   dat_evd_query_upcall(evd, &policy, &upcall, &flag)
 *
 * Upcalls run in dapl-ofi's upcall dispatcher threads (the provider's
 * "interrupt" context: DAPL_OFI_UPCALL_THREADS per IA), never inline in a
 * call of the consumer, and with no provider lock held: an upcall may
 * dequeue, post, re-arm or change the policy of its own EVD.
 *
 * Edge rule (DAT_UPCALL_INVOC_NEW, as IBTA Request Completion Notification):
 * events already queued when the upcall is enabled raise no upcall.  Correct
 * consumer: enable, then dequeue until DAT_QUEUE_EMPTY one final time - or
 * use dat_evd_arm_upcall, which says how many events were queued when the
 * arm took effect (the counterpart of IB_CQ_REPORT_MISSED_EVENTS).
 * DAT_UPCALL_INVOC_ANY is the level rule: queued events are delivered too.
 *
 * Check for the extension before use with dat_ofi_upcall_supported(ia),
 * below: a provider-specific attribute DAT_OFI_ATTR_UPCALL in dat_ia_query's
 * provider attributes.  dapl-ofi IAs report the IB extension
 * (extension_supported == DAT_EXTENSION_IB) and serve these ops as well;
 * an IA whose dat.conf entry says ext=ofi reports DAT_OFI_EXTENSION instead,
 * for programs built before dapl-ofi served both (they tested
 * extension_supported == DAT_OFI_EXTENSION).
 */
#ifndef DAT_OFI_EXTENSIONS_H
#define DAT_OFI_EXTENSIONS_H

#include <dat2/udat.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DAT_IA_ATTR.extension_supported / extension_version of dapl-ofi IAs
 * configured with ext=ofi (DAT_EXTENSION_IB is 1 and DAT_EXTENSION_IW 2:
 * no collision).  Other IAs report DAT_EXTENSION_IB. */
#define DAT_OFI_EXTENSION		((DAT_EXTENSION)0x4f46)
#define DAT_OFI_EXTENSION_VERSION	1

/* The provider-specific attribute (DAT_PROVIDER_ATTR.provider_specific_attr)
 * that says an IA serves these ops, whatever its extension_supported; its
 * value is the extension's version, in decimal. */
#define DAT_OFI_ATTR_UPCALL		"DAPL_OFI_UPCALL_EXTENSION"
#define DAT_OFI_ATTR_UPCALL_VERSION_STR	"1"

/* Op codes: the high half spells "OF"; bits 0x1000 and 0x2000, which the
 * registry reserves for open/close-by-name ops, are clear, and the IB
 * extension's ops (0..0x1d, 0x1000, 0x2000), which dapl-ofi serves on the
 * same IAs, cannot collide. */
#define DAT_OFI_EVD_KCREATE_OP		0x4f460001
#define DAT_OFI_EVD_MODIFY_UPCALL_OP	0x4f460002
#define DAT_OFI_EVD_QUERY_UPCALL_OP	0x4f460003

#ifndef DAT_UPCALL_POLICY_DEFINED	/* a kdat.h of the same values wins */
#define DAT_UPCALL_POLICY_DEFINED
typedef enum dat_upcall_policy {
	DAT_UPCALL_DISABLE		= 0,	/* no upcalls */
	DAT_UPCALL_SINGLE_INSTANCE	= 1,	/* one upcall at a time per EVD */
	DAT_UPCALL_NOTIFY		= 2,	/* single upcall, no event: dequeue */
	DAT_UPCALL_MANY			= 100,	/* concurrent upcalls allowed */
	DAT_UPCALL_TEARDOWN		= -1	/* disable, return after in-flight ones */
} DAT_UPCALL_POLICY;
#define DAT_UPCALL_NORIFY DAT_UPCALL_NOTIFY	/* the kDAT header's spelling */

typedef void (*DAT_UPCALL_FUNC)(DAT_PVOID instance_data, const DAT_EVENT *event,
				DAT_BOOLEAN more_events);

typedef struct dat_upcall_object {
	DAT_PVOID instance_data;
	DAT_UPCALL_FUNC upcall_func;
} DAT_UPCALL_OBJECT;

/* kDAT: DAT_UPCALL_NULL names no function; DAT_UPCALL_SAME keeps the current
 * object in a modify call. */
#define DAT_UPCALL_NULL	((DAT_UPCALL_OBJECT){ NULL, NULL })
#define DAT_UPCALL_SAME	((const DAT_UPCALL_OBJECT *)NULL)

typedef enum dat_upcall_flag {
	DAT_UPCALL_INVOC_NEW = 0,	/* edge: only events arriving after the arm */
	DAT_UPCALL_INVOC_ANY = 1	/* level: queued events are delivered too */
} DAT_UPCALL_FLAG;
#endif

/* Whether ia serves this extension at version `version` or later. */
static inline DAT_BOOLEAN dat_ofi_upcall_supported(DAT_IA_HANDLE ia, int version)
{
	DAT_PROVIDER_ATTR pa;
	DAT_COUNT i;

	if (dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_PROVIDER_SPECIFIC_ATTR,
			 &pa) != DAT_SUCCESS)
		return DAT_FALSE;
	for (i = 0; i < pa.num_provider_specific_attr; i++) {
		const DAT_NAMED_ATTR *a = &pa.provider_specific_attr[i];
		const char *v = a->value;
		int n = 0;

		if (!a->name || !v)
			continue;
		if (__builtin_strcmp(a->name, DAT_OFI_ATTR_UPCALL) != 0)
			continue;
		while (*v >= '0' && *v <= '9' && n < 100000)
			n = n * 10 + (*v++ - '0');
		return n >= version ? DAT_TRUE : DAT_FALSE;
	}
	return DAT_FALSE;
}

/* Create an EVD whose upcall policy is set before any event can arrive. */
static inline DAT_RETURN dat_evd_kcreate(DAT_IA_HANDLE ia, DAT_COUNT evd_min_qlen,
					 DAT_UPCALL_POLICY policy,
					 const DAT_UPCALL_OBJECT *upcall,
					 DAT_EVD_FLAGS evd_flags, DAT_EVD_HANDLE *evd)
{
	return dat_extension_op(ia, DAT_OFI_EVD_KCREATE_OP, evd_min_qlen, (int)policy,
				upcall, (int)evd_flags, evd);
}

/* Change the policy (and the upcall object, unless DAT_UPCALL_SAME).
 * DISABLE: no upcall passes the policy check after the return (one that had
 * passed it may still be entering or running).  TEARDOWN: also waits for the
 * upcalls in flight; from inside this EVD's own upcall it fails with
 * DAT_INVALID_STATE instead of deadlocking. */
static inline DAT_RETURN dat_evd_modify_upcall(DAT_EVD_HANDLE evd, DAT_UPCALL_POLICY policy,
					       const DAT_UPCALL_OBJECT *upcall,
					       DAT_UPCALL_FLAG flag)
{
	return dat_extension_op(evd, DAT_OFI_EVD_MODIFY_UPCALL_OP, (int)policy, upcall,
				(int)flag, (DAT_COUNT *)NULL);
}

/* dat_evd_modify_upcall that also stores in *npending the number of events
 * queued at the instant the arm took effect (under the EVD lock): with
 * DAT_UPCALL_INVOC_NEW those are the consumer's to dequeue, and every later
 * event raises an upcall.  Nothing can fall between the two. */
static inline DAT_RETURN dat_evd_arm_upcall(DAT_EVD_HANDLE evd, DAT_UPCALL_POLICY policy,
					    const DAT_UPCALL_OBJECT *upcall,
					    DAT_UPCALL_FLAG flag, DAT_COUNT *npending)
{
	return dat_extension_op(evd, DAT_OFI_EVD_MODIFY_UPCALL_OP, (int)policy, upcall,
				(int)flag, npending);
}

/* Current policy, object and invocation flag (any pointer may be NULL). */
static inline DAT_RETURN dat_evd_query_upcall(DAT_EVD_HANDLE evd, DAT_UPCALL_POLICY *policy,
					      DAT_UPCALL_OBJECT *upcall, DAT_UPCALL_FLAG *flag)
{
	return dat_extension_op(evd, DAT_OFI_EVD_QUERY_UPCALL_OP, policy, upcall, flag);
}

#ifdef __cplusplus
}
#endif

#endif
