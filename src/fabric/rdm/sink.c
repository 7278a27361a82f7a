/*
 * Sinks: receives that take what arrives for a connection that ended
 * (docs/rdm.md, section 2, "Stale messages").
 *
 * A peer's message that was on its way when this side's connection ended
 * matches none of the DAT EP's receives, which the end cancelled, and a
 * provider keeps it for ever: net 1.17 holds four such messages of at
 * most 128 bytes per peer, and at the next one stops reading the socket
 * it shares with every other connection to that peer; tcp;ofi_rxm and
 * shm keep a large one's sender waiting for a receive that never comes.
 * So once the DAT layer posts no more receives for a connection (its end
 * flushed them, or its endpoint closes) a sink, a receive of the
 * connection's own tag into a scratch region as large as a message may
 * be, takes them one by one, posted again at each completion; posted
 * behind every receive of the EP's, it never takes one of their
 * messages.  The sinks of an endpoint are capped (DAPL_OFI_RDM_SINKS):
 * past the cap the oldest is cancelled.
 *
 * Inside rdm/ only; rf->lock guards the list and each sink.
 */
#include "rdm.h"
#include "util/log.h"
#include "util/param.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct rdm_sink {
	struct rdm_sink *next, **prev;	/* rf->sinks, oldest first */
	struct rdm_ep *rep;
	uint64_t tag;
	bool cancelling;		/* freed at its receive's last completion */
	struct dfi_opctx o;		/* its receive's context on an op_ctx fabric */
};

/* A sink's receive context: odd, so that cq.c hands its completion to
 * the backend (dfi_backend.own_done), and with bit 1 set, unlike a
 * hello's (rdm.h, RDM_HELLO_CTX: a pointer with bit 1 clear). */
#define SINK_CTX(s)		((void *)((uintptr_t)(s) | 3u))
#define SINK_OF(ctx)		((struct rdm_sink *)((uintptr_t)(ctx) & ~(uintptr_t)3))
#define IS_SINK_CTX(ctx)	(((uintptr_t)(ctx) & 3u) == 3u)

/* What a message may be: the DAT layer's max_message_size (ia.c) */
#define SINK_SCRATCH_MAX	0x80000000ull
/* A message this large leaves its pages to the kernel after it */
#define SINK_GIVE_BACK		(1u << 20)

void rdm_sinks_init(struct rdm_fabric *rf)
{
	long v = dfi_param_int(DFI_P_RDM_SINKS);

	rf->sinks_tail = &rf->sinks;
	if (v >= 0)
		rf->sink_cap = (size_t)v;
	else
		rf->sink_cap = rf->f->lim.rx_size ? rf->f->lim.rx_size / 8 : 1024;
}

/* The scratch region every sink receives into, reserved at the first
 * sink: untouched pages cost nothing.  false: none. */
static bool scratch_get(struct rdm_fabric *rf)
{
	size_t len = rf->f->lim.max_msg_size && rf->f->lim.max_msg_size < SINK_SCRATCH_MAX ?
		     (size_t)rf->f->lim.max_msg_size : (size_t)SINK_SCRATCH_MAX;
	void *p;

	if (rf->scratch)
		return true;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (p == MAP_FAILED) {
		dfi_warn(DFI_SS_FABRIC, "no scratch region of %zu bytes for messages of ended "
			 "connections (%s): they stay with the provider", len, strerror(errno));
		return false;
	}
	rf->scratch = p;
	rf->scratch_len = len;
	return true;
}

static void unlink_free(struct rdm_fabric *rf, struct rdm_sink *s)
{
	*s->prev = s->next;
	if (s->next)
		s->next->prev = s->prev;
	else
		rf->sinks_tail = s->prev;
	if (!s->cancelling)
		s->rep->nsinks--;
	free(s);
}

/* 0, or libfabric's error: s is then freed */
static int sink_post(struct rdm_fabric *rf, struct rdm_sink *s)
{
	ssize_t rc;

	for (int i = 0; i < 3; i++) {
		rc = fi_trecv(s->rep->ep, rf->scratch, rf->scratch_len, NULL, FI_ADDR_UNSPEC,
			      s->tag, RDM_TAG_SEQ_IGNORE(rf->f->lim.msgno_mask),
			      dfi_opctx_own(rf->f, &s->o, SINK_CTX(s)));
		if (rc != -FI_EAGAIN)
			break;
	}
	if (rc) {
		dfi_info(DFI_SS_FABRIC, "no sink for the ended connection of tag %#llx: %s",
			 (unsigned long long)s->tag, fi_strerror((int)-rc));
		unlink_free(rf, s);
	}
	return (int)rc;
}

/* The oldest sink of rep still posted: cancelled, freed at its completion */
static void sink_retire_oldest(struct rdm_ep *rep, struct rdm_fabric *rf)
{
	for (struct rdm_sink *s = rf->sinks; s; s = s->next) {
		if (s->rep != rep || s->cancelling)
			continue;
		s->cancelling = true;
		rep->nsinks--;
		(void)fi_cancel(&rep->ep->fid, rf->f->lim.op_ctx ? (void *)&s->o : SINK_CTX(s));
		return;
	}
}

void rdm_sink_open(struct rdm_fep *e)
{
	struct rdm_fabric *rf = e->rf;
	struct rdm_sink *s;

	if (e->sunk)
		return;
	e->sunk = true;
	/* an SRQ's stale messages go back to it (srx.c); a handshake's
	 * endpoint is a UD one's; a peer that never had this end sent
	 * nothing; FI_MR_LOCAL would want the scratch registered */
	if (!rf->sink_cap || e->srx || e->ud_hs || !e->rep || e->peer == FI_ADDR_UNSPEC ||
	    (rf->f->info->domain_attr->mr_mode & FI_MR_LOCAL))
		return;
	if (!scratch_get(rf))
		return;
	if (e->rep->nsinks >= rf->sink_cap)
		sink_retire_oldest(e->rep, rf);
	s = calloc(1, sizeof(*s));
	if (!s)
		return;
	s->rep = e->rep;
	s->tag = e->rtag;
	s->prev = rf->sinks_tail;
	*rf->sinks_tail = s;
	rf->sinks_tail = &s->next;
	e->rep->nsinks++;
	(void)sink_post(rf, s);
}

bool rdm_sink_done(struct rdm_fabric *rf, void *ctx, int err, size_t len)
{
	struct rdm_sink *s;

	if (!IS_SINK_CTX(ctx))
		return false;	/* a hello's */
	s = SINK_OF(ctx);
	if (s->cancelling || err == FI_ECANCELED) {
		unlink_free(rf, s);
	} else {
		rf->sunk++;
		dfi_dbg(DFI_SS_FABRIC, "a message of %zu bytes for the ended connection of tag "
			"%#llx taken%s%s", len, (unsigned long long)s->tag, err ? ": " : "",
			err ? fi_strerror(err) : "");
		if (len >= SINK_GIVE_BACK)
			(void)madvise(rf->scratch, len < rf->scratch_len ? len : rf->scratch_len,
				      MADV_DONTNEED);
		(void)sink_post(rf, s);
	}
	return true;
}

void rdm_sinks_drop(struct rdm_fabric *rf, const struct rdm_ep *rep)
{
	for (struct rdm_sink *s = rf->sinks, *next; s; s = next) {
		next = s->next;
		if (!rep || s->rep == rep)
			unlink_free(rf, s);
	}
	if (!rep && rf->sunk)
		dfi_info(DFI_SS_FABRIC, "%llu messages of ended connections were taken by sinks",
			 (unsigned long long)rf->sunk);
	if (!rep && rf->scratch) {
		munmap(rf->scratch, rf->scratch_len);
		rf->scratch = NULL;
	}
}
