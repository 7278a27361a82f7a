/* Object allocation, the per-IA object list, poisoning and the quarantine. */
#include "dfi.h"
#include "util/arena.h"
#include "util/param.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define DFI_OBJ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DFI_OBJ_ASAN 1
#endif
#endif
#ifdef DFI_OBJ_ASAN
#include <sanitizer/asan_interface.h>
#endif

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dfi_obj **q_ring;		/* freed objects, oldest first */
static size_t q_cap, q_head, q_len;

/* The IB extension's IA counters of objects made and freed (ib.c): the
 * index of type's create counter (its free counter is the next one but for
 * PSPs, whose create_any comes between), or -1. */
static int obj_counter(uint32_t type)
{
	switch (type) {
	case DFI_T_PZ: return DCNT_IA_PZ_CREATE;
	case DFI_T_LMR: return DCNT_IA_LMR_CREATE;
	case DFI_T_RMR: return DCNT_IA_RMR_CREATE;
	case DFI_T_PSP: return DCNT_IA_PSP_CREATE;
	case DFI_T_RSP: return DCNT_IA_RSP_CREATE;
	case DFI_T_EVD: return DCNT_IA_EVD_CREATE;
	case DFI_T_EP: return DCNT_IA_EP_CREATE;
	case DFI_T_SRQ: return DCNT_IA_SRQ_CREATE;
	default: return -1;
	}
}

void *dfi_obj_new(struct dfi_ia *ia, enum dfi_type type, size_t size)
{
	struct dfi_obj *o = dfi_arena_calloc(size);

	if (!o)
		return NULL;
	o->type = (uint32_t)type;
	o->size = (uint32_t)size;
	o->ia = ia;
	if (ia) {
		o->provider = ia->hdr.provider;
		pthread_mutex_lock(&ia->lock);
		o->next = ia->objs.next;
		o->prev = &ia->objs;
		ia->objs.next->prev = o;
		ia->objs.next = o;
		pthread_mutex_unlock(&ia->lock);
		if (obj_counter(type) >= 0)
			dfi_cnt_add(&ia->cnt[obj_counter(type)], 1);
	}
	return o;
}

void dfi_obj_unlink(void *obj)
{
	struct dfi_obj *o = obj;

	if (o->ia && o->next) {
		pthread_mutex_lock(&o->ia->lock);
		o->prev->next = o->next;
		o->next->prev = o->prev;
		o->next = o->prev = NULL;
		pthread_mutex_unlock(&o->ia->lock);
	}
}

void dfi_obj_retire(void *obj)
{
	struct dfi_obj *o = obj, *victim = NULL;
	size_t size = o->size;

	if (o->ia && obj_counter(o->type) >= 0)
		dfi_cnt_add(&o->ia->cnt[obj_counter(o->type) +
					(o->type == DFI_T_PSP ? 2 : 1)], 1);
	dfi_obj_unlink(o);
	/* Poison: keep the provider pointer (the registry dispatches through
	 * it); everything else is garbage from now on. */
	memset((char *)o + sizeof(DAT_PROVIDER *), 0xdb, size - sizeof(DAT_PROVIDER *));
	o->type = DFI_T_DEAD;
	o->size = 0;
#ifdef DFI_OBJ_ASAN
	/* Under ASan the rest is out of bounds as well: code that follows a
	 * retired object past its tag is reported where it reads (the arena
	 * opens the block again when it is reused). */
	ASAN_POISON_MEMORY_REGION((char *)o + offsetof(struct dfi_obj, context),
				  size - offsetof(struct dfi_obj, context));
#endif

	pthread_mutex_lock(&q_lock);
	if (!q_ring) {
		long cap = dfi_param_int(DFI_P_QUARANTINE);

		q_cap = cap > 0 ? (size_t)cap : 0;
		q_ring = q_cap ? calloc(q_cap, sizeof(*q_ring)) : NULL;
		if (!q_ring)
			q_cap = 0;
	}
	if (q_cap == 0) {
		victim = o;
	} else {
		if (q_len == q_cap) {
			victim = q_ring[q_head];
			q_head = (q_head + 1) % q_cap;
			q_len--;
		}
		q_ring[(q_head + q_len) % q_cap] = o;
		q_len++;
	}
	pthread_mutex_unlock(&q_lock);
	dfi_arena_free(victim);
}

void dfi_quarantine_flush(void)
{
	pthread_mutex_lock(&q_lock);
	for (size_t i = 0; i < q_len; i++)
		dfi_arena_free(q_ring[(q_head + i) % q_cap]);
	free(q_ring);
	q_ring = NULL;
	q_cap = q_head = q_len = 0;
	pthread_mutex_unlock(&q_lock);
}

/* Any live object of ours (for the generic helpers). */
static struct dfi_obj *any_obj(DAT_HANDLE h)
{
	struct dfi_obj *o = (struct dfi_obj *)h;

	if (!o || ((uintptr_t)o & 7u))
		return NULL;
	switch (o->type) {
	case DFI_T_IA: case DFI_T_PZ: case DFI_T_LMR: case DFI_T_EVD: case DFI_T_CNO:
	case DFI_T_EP: case DFI_T_PSP: case DFI_T_RSP: case DFI_T_CR: case DFI_T_RMR:
	case DFI_T_SRQ: case DFI_T_CSP:
		return o;
	default:
		return NULL;
	}
}

DAT_RETURN dfi_set_consumer_context(DAT_HANDLE h, DAT_CONTEXT ctx)
{
	struct dfi_obj *o = any_obj(h);

	if (!o)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1),
				  "handle %p is not a live dapl-ofi object", (void *)h);
	__atomic_store(&o->context.as_64, &ctx.as_64, __ATOMIC_RELAXED);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_get_consumer_context(DAT_HANDLE h, DAT_CONTEXT *ctx)
{
	struct dfi_obj *o = any_obj(h);

	if (!o)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1),
				  "handle %p is not a live dapl-ofi object", (void *)h);
	if (!ctx)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "context pointer is NULL");
	__atomic_load(&o->context.as_64, &ctx->as_64, __ATOMIC_RELAXED);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_get_handle_type(DAT_HANDLE h, DAT_HANDLE_TYPE *type)
{
	static const struct { uint32_t tag; DAT_HANDLE_TYPE t; } map[] = {
		{ DFI_T_IA, DAT_HANDLE_TYPE_IA }, { DFI_T_PZ, DAT_HANDLE_TYPE_PZ },
		{ DFI_T_LMR, DAT_HANDLE_TYPE_LMR }, { DFI_T_EVD, DAT_HANDLE_TYPE_EVD },
		{ DFI_T_CNO, DAT_HANDLE_TYPE_CNO }, { DFI_T_EP, DAT_HANDLE_TYPE_EP },
		{ DFI_T_PSP, DAT_HANDLE_TYPE_PSP }, { DFI_T_RSP, DAT_HANDLE_TYPE_RSP },
		{ DFI_T_CR, DAT_HANDLE_TYPE_CR }, { DFI_T_RMR, DAT_HANDLE_TYPE_RMR },
		{ DFI_T_SRQ, DAT_HANDLE_TYPE_SRQ }, { DFI_T_CSP, DAT_HANDLE_TYPE_CSP },
	};
	struct dfi_obj *o = any_obj(h);

	if (!o)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1),
				  "handle %p is not a live dapl-ofi object", (void *)h);
	if (!type)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "type pointer is NULL");
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].tag == o->type)
			*type = map[i].t;
	return DAT_SUCCESS;
}
