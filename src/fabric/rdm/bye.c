/*
 * The goodbye (docs/rdm.md, "The goodbye").  A DREQ travels rcm's socket,
 * not behind the data on the fabric, and could overtake a message still on
 * its way.  So the side that disconnects first writes its peer's goodbye
 * word, an RDMA write behind its sends (the providers served order a write
 * after a send), and the side that gets the DREQ reports DISCONNECTED once
 * the write has landed in its word (rdm_bye_came, polled by rcm), or after
 * DFI_RCM_BYE_MS.  A write, not a message: a message's completion would
 * wait in the receive CQ behind whatever the consumer has not reaped.
 * Not the other way: the peer that got the DREQ may be writing to an
 * endpoint closed already.  Not on shm: it puts a message into its peer's
 * queue before the post returns, so a DREQ cannot overtake it (the peer's
 * drain places it), and a write to an endpoint of this process that
 * closed meanwhile (the DREQ not read yet) crashes shm 1.17.
 *
 * The words: one per connection id, on pages registered for the peers'
 * writes (boards), a page each RDM_BOARD_WORDS ids, made when an id on it
 * is first handed out.  The word of id is set to 0 by each new holder;
 * what a peer writes names the holder's generation.
 */
#include "rdm.h"
#include "util/log.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

uint64_t *rdm_bye_word(struct rdm_fabric *rf, uint32_t id, uint32_t *key)
{
	uint32_t b = (id - 1) / RDM_BOARD_WORDS;
	struct rdm_board *bd;

	if (b >= rf->nboards) {
		uint32_t n = b + 1;
		struct rdm_board *more = realloc(rf->boards, n * sizeof(*more));

		if (!more)
			return NULL;
		memset(more + rf->nboards, 0, (n - rf->nboards) * sizeof(*more));
		rf->boards = more;
		rf->nboards = n;
	}
	bd = &rf->boards[b];
	if (!bd->words) {
		size_t len = RDM_BOARD_WORDS * sizeof(uint64_t);

		if (!(bd->words = aligned_alloc(4096, len)))
			return NULL;
		memset(bd->words, 0, len);
		if (dfi_mr_reg(rf->f, bd->words, len, DFI_MR_REMOTE_WRITE, &bd->mr, &bd->key)) {
			dfi_warn(DFI_SS_FABRIC, "the goodbye words of connections %u..%u not "
				 "registered: their DREQs do not wait for the data before them",
				 b * RDM_BOARD_WORDS + 1, (b + 1) * RDM_BOARD_WORDS);
			free(bd->words);
			bd->words = NULL;
			return NULL;
		}
	}
	*key = bd->key;
	return &bd->words[(id - 1) % RDM_BOARD_WORDS];
}

void rdm_bye_boards_free(struct rdm_fabric *rf)
{
	for (uint32_t b = 0; b < rf->nboards; b++) {
		if (!rf->boards[b].words)
			continue;
		dfi_mr_dereg(rf->boards[b].mr);
		free(rf->boards[b].words);
	}
	free(rf->boards);
}

/* Lock held.  Not written (the provider's queue full for
 * RDM_BYE_SEND_MS): the peer waits out its bound. */
#define RDM_BYE_SEND_MS	100

void rdm_bye_send(struct rdm_fep *e)
{
	uint64_t v = RDM_BYE_VAL(e->stag >> 32), t0 = rdm_now_ms();
	ssize_t rc;

	if (!e->peer_bye_addr)
		return;		/* the peer has no word */
	for (;;) {
		rc = fi_inject_write(e->ep, &v, sizeof(v), e->peer, e->peer_bye_addr,
				     e->peer_bye_key);
		if (rc != -FI_EAGAIN || !rdm_eagain_retry(e->rep->txcq->cq, t0, RDM_BYE_SEND_MS))
			break;
	}
	if (rc)
		dfi_info(DFI_SS_FABRIC, "connection %u: its goodbye not written: %s", e->id,
			 fi_strerror((int)-rc));
}

/* rcm's question, inside dfi_rcm_read (lock held): has the peer's
 * goodbye landed?  The provider's progress first: its target places
 * incoming writes there. */
bool rdm_bye_came(void *arg, void *ctx)
{
	struct rdm_fep *e = ctx;

	(void)arg;
	if (!e->bye_word)
		return true;
	rdm_drain(e);
	return __atomic_load_n(e->bye_word, __ATOMIC_ACQUIRE) == RDM_BYE_VAL(e->gen);
}

