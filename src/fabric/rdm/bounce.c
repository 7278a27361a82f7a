/*
 * Receives of more segments than the provider takes (psm3: one a receive,
 * 13 a send).  DAT programs post several (dapltest's transaction mixes:
 * 4), so the receive goes into a buffer of ours as long as its segments
 * together, and its completion scatters what came into them before the
 * DAT layer sees it.  The copy is the price of such a receive only; a
 * provider that also wants its receive buffers registered (FI_MR_LOCAL)
 * gets no bounce, and its limit is the DAT limit (info.c).
 *
 * The bounce's context is odd (cq.c hands its completion to the backend,
 * ep.c's rdm_own_done), of kind 5: a hello's is 1, a sink's 3.  Each
 * endpoint lists its bounces, so that a cancel of the DAT layer's context
 * finds the bounce posted for it; one whose endpoint closed first stays
 * until its completion, which frees it.
 */
#include "rdm.h"

#include <stdlib.h>
#include <string.h>

#define BOUNCE_CTX(b)	((void *)((uintptr_t)(b) | 5u))
#define BOUNCE_OF(ctx)	((struct rdm_bounce *)((uintptr_t)(ctx) & ~(uintptr_t)7))

bool rdm_is_bounce_ctx(const void *ctx)
{
	return ((uintptr_t)ctx & 7u) == 5u;
}

struct rdm_bounce *rdm_bounce_new(struct rdm_fep *e, const struct dfi_sge *sg, int n, void *ctx)
{
	struct rdm_fabric *rf = e->rf;
	struct rdm_bounce *b;
	size_t len = 0;

	for (int i = 0; i < n; i++)
		len += sg[i].len;
	b = malloc(sizeof(*b) + (len ? len : 1));
	if (!b)
		return NULL;
	b->e = e;
	b->ctx = dfi_opctx_of(rf->f, ctx);
	b->posted = dfi_opctx_own(rf->f, &b->o, BOUNCE_CTX(b));
	b->n = n;
	memcpy(b->sg, sg, (size_t)n * sizeof(*sg));
	b->len = len;
	pthread_mutex_lock(&rf->lock);
	b->next = e->bounces;
	b->prev = &e->bounces;
	if (e->bounces)
		e->bounces->prev = &b->next;
	e->bounces = b;
	pthread_mutex_unlock(&rf->lock);
	return b;
}

/* rf->lock held */
static void unlink_bounce(struct rdm_bounce *b)
{
	if (!b->e)
		return;
	if ((*b->prev = b->next))
		b->next->prev = b->prev;
	b->e = NULL;
}

void rdm_bounce_drop(struct rdm_fabric *rf, struct rdm_bounce *b)
{
	pthread_mutex_lock(&rf->lock);
	unlink_bounce(b);
	pthread_mutex_unlock(&rf->lock);
	free(b);
}

void rdm_bounce_done(struct rdm_fabric *rf, struct dfi_comp *c)
{
	struct rdm_bounce *b = BOUNCE_OF(c->ctx);

	pthread_mutex_lock(&rf->lock);
	unlink_bounce(b);
	pthread_mutex_unlock(&rf->lock);
	if (!c->err)
		dfi_scatter(b->buf, c->len < b->len ? c->len : b->len, b->sg, b->n);
	c->ctx = b->ctx;
	free(b);
}

void rdm_bounce_cancel(struct rdm_fep *e, void *ctx)
{
	struct rdm_fabric *rf = e->rf;
	void *posted = NULL;

	ctx = dfi_opctx_of(rf->f, ctx);
	/* under the lock: once it is released, b may complete, be freed and
	 * its memory posted again for another receive */
	pthread_mutex_lock(&rf->lock);
	for (struct rdm_bounce *b = e->bounces; b; b = b->next)
		if (b->ctx == ctx) {
			posted = b->posted;
			break;
		}
	if (posted)
		(void)fi_cancel(&e->ep->fid, posted);
	pthread_mutex_unlock(&rf->lock);
}

/* rf->lock held: e closes */
void rdm_bounces_orphan(struct rdm_fep *e)
{
	while (e->bounces)
		unlink_bounce(e->bounces);
}
