/*
 * Emulated atomics on connected endpoints (the IB extension's compare-and-
 * swap and fetch-and-add where the provider has no FI_ATOMIC: tcp and net
 * in libfabric 1.17).  The design note is docs/ib-extension.md.
 *
 * Each endpoint has a mailbox: a small registered region of request and
 * answer slots.  Its address, key, slot count and the endpoint's id (below)
 * travel to the peer in a trailer of the CM private data, both ways, so no
 * message of ours ever takes a consumer's receive.  An atomic is then one
 * fi_inject_writedata of its request into slot k of the peer's mailbox,
 * whose remote CQ data names the peer's endpoint (its id) and k.  tcp's
 * target completion of such a write takes no receive but names no endpoint
 * either, on a CQ its EVD shares with others; so dfi_cq_read hands every
 * completion of a remote write with CQ data and no context here
 * (dfi_msg_cq_data), and never to the DAT layer.  The target applies the
 * operation with dfi_mr_atomic, as rdm/ does, and writes the answer into
 * slot k of the origin's mailbox the same way; the origin's completion
 * becomes a DFI_CM_ATOMIC_DONE event on the IA's event queue (fi_eq_write),
 * where the DAT layer completes the request as it does for rdm/.
 *
 * Whoever reads the receive CQ serves the atomics: the consumer, or the
 * progress thread when the consumer does not.  The origin keeps at most
 * one request per slot of the peer's mailbox (a bit mask); more at once are
 * refused as a full queue is.  Ids are an index into the fabric's table and
 * a generation, so a completion for an endpoint closed since matches
 * nothing.  A peer's bytes are checked before use: its trailer, its CQ
 * data, its requests and answers.
 */
#include "msg.h"
#include "util/log.h"

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define MBOX_SLOTS	DFI_MSG_MBOX_SLOTS
#define TRAILER_MAGIC	0x44464941u	/* "DFIA" */
#define TRAILER_VERSION	1

/* The CQ data of a mailbox write: answer bit, the receiving endpoint's id
 * (31 bits), a check byte, the slot. */
#define CQD_ANSWER	(1ull << 63)
#define CQD_ID(d)	((uint32_t)((d) >> 32) & 0x7fffffffu)
#define CQD_CHECK	0xa7u
#define CQD_SLOT(d)	((uint32_t)(d) & 0xffffu)
#define ID_INDEX_BITS	20		/* the id: generation above, index below */
#define ID_INDEX(id)	((id) & ((1u << ID_INDEX_BITS) - 1))

/* A request, as the origin writes it (little-endian). */
struct mbox_req {
	uint64_t id;			/* the origin's: echoed in the answer */
	uint64_t addr;			/* the target's memory */
	uint64_t operand, compare;
	uint32_t key;			/* its RMR context */
	uint32_t op;			/* enum dfi_atomic_op */
};

/* An answer, as the target writes it (little-endian). */
struct mbox_rep {
	uint64_t id;
	uint64_t value;			/* the old value */
	uint32_t status;		/* 0 or a positive errno */
	uint32_t pad;
};

struct mbox {
	struct mbox_req req[MBOX_SLOTS];
	struct mbox_rep rep[MBOX_SLOTS];
};

/* The trailer of the private data (little-endian, packed by hand). */
struct trailer {
	uint64_t addr;
	uint32_t key;
	uint32_t id;
	uint16_t slots;
	uint8_t version;
	uint8_t pad;
	uint32_t magic;
};
_Static_assert(sizeof(struct trailer) == DFI_MSG_TRAILER, "the trailer's size is in fabric_int.h");

struct msg_atom {
	struct dfi_fabric *f;
	struct msg_fep *e;
	struct fid_eq *eq;		/* where answers become events */
	struct mbox *box;
	struct dfi_mr *mr;
	uint32_t key;
	uint32_t id;			/* the peer names this endpoint with it */
	/* under the table's lock: */
	struct msg_peer peer;
	uint64_t busy;			/* our requests out, by slot of the peer's mailbox */
};

/* The fabric's endpoints with a mailbox, by id (f->priv). */
struct msg_atomics {
	pthread_mutex_t lock;
	struct msg_atom **by_index;
	uint32_t *gen;			/* each index's generation */
	uint32_t *free;			/* a stack of free indexes */
	uint32_t cap, used, nfree;
};

/* The event an answer becomes (fi_eq_write); its first field is the
 * endpoint's fid, as in every libfabric EQ entry, so that closing the
 * endpoint takes it out of the queue. */
struct atom_event {
	struct fid *fid;
	uint64_t id, value;
	uint32_t status;
};

int dfi_msg_atomics_open(struct dfi_fabric *f)
{
	struct msg_atomics *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	f->priv = t;
	return 0;
}

void dfi_msg_atomics_close(struct dfi_fabric *f)
{
	struct msg_atomics *t = f->priv;

	if (!t)
		return;
	pthread_mutex_destroy(&t->lock);
	free(t->by_index);
	free(t->gen);
	free(t->free);
	free(t);
	f->priv = NULL;
}

/* A free index of t, grown as needed (lock held); -1 without memory. */
static int64_t index_take(struct msg_atomics *t)
{
	uint32_t cap;
	void *p;

	if (t->nfree)
		return t->free[--t->nfree];
	if (t->used < t->cap)
		return t->used++;
	cap = t->cap ? 2 * t->cap : 64;
	if (cap > (1u << ID_INDEX_BITS))
		return -1;
	if (!(p = realloc(t->by_index, cap * sizeof(*t->by_index))))
		return -1;
	t->by_index = p;
	if (!(p = realloc(t->gen, cap * sizeof(*t->gen))))
		return -1;
	t->gen = p;
	if (!(p = realloc(t->free, cap * sizeof(*t->free))))
		return -1;
	t->free = p;
	memset(t->gen + t->cap, 0, (cap - t->cap) * sizeof(*t->gen));
	t->cap = cap;
	return t->used++;
}

/* The endpoint this id names (lock held), or NULL. */
static struct msg_atom *atom_by_id(struct msg_atomics *t, uint32_t id)
{
	uint32_t i = ID_INDEX(id);

	if (i >= t->used || !t->by_index[i] || t->by_index[i]->id != id)
		return NULL;
	return t->by_index[i];
}

int dfi_msg_atom_new(struct dfi_fabric *f, struct msg_fep *e, struct fid_eq *eq)
{
	struct msg_atomics *t = f->priv;
	struct msg_atom *a;
	int64_t i;
	int rc;

	e->atom = NULL;
	if (!t)
		return 0;		/* native atomics, or none */
	if (!(a = calloc(1, sizeof(*a))))
		return -ENOMEM;
	a->f = f;
	a->e = e;
	a->eq = eq;
	if (posix_memalign((void **)&a->box, 64, sizeof(*a->box))) {
		free(a);
		return -ENOMEM;
	}
	memset(a->box, 0, sizeof(*a->box));
	rc = dfi_mr_reg(f, a->box, sizeof(*a->box), DFI_MR_REMOTE_WRITE, &a->mr, &a->key);
	if (rc)
		goto err;
	pthread_mutex_lock(&t->lock);
	i = index_take(t);
	if (i >= 0) {
		t->gen[i] = (t->gen[i] + 1) & ((1u << (31 - ID_INDEX_BITS)) - 1);
		a->id = t->gen[i] << ID_INDEX_BITS | (uint32_t)i;
		t->by_index[i] = a;
	}
	pthread_mutex_unlock(&t->lock);
	if (i < 0) {
		dfi_err(DFI_SS_FABRIC, "no room for another endpoint's atomics mailbox");
		rc = -ENOMEM;
		goto err_mr;
	}
	e->atom = a;
	return 0;
err_mr:
	dfi_mr_dereg(a->mr);
err:
	free(a->box);
	free(a);
	return rc;
}

void dfi_msg_atom_free(struct msg_fep *e)
{
	struct msg_atom *a = e->atom;
	struct msg_atomics *t;
	uint32_t i;

	if (!a)
		return;
	t = a->f->priv;
	i = ID_INDEX(a->id);
	pthread_mutex_lock(&t->lock);
	t->by_index[i] = NULL;	/* no completion finds it from now on */
	t->free[t->nfree++] = i;
	pthread_mutex_unlock(&t->lock);
	dfi_mr_dereg(a->mr);
	free(a->box);
	free(a);
	e->atom = NULL;
}

size_t dfi_msg_atom_pdata(const struct msg_fep *e, const void *pdata, size_t plen,
			  uint8_t *out)
{
	const struct msg_atom *a = e->atom;
	struct trailer tr;

	if (plen)
		memcpy(out, pdata, plen);
	if (!a)
		return plen;
	tr = (struct trailer){
		.addr = htole64((uintptr_t)a->box),
		.key = htole32(a->key),
		.id = htole32(a->id),
		.slots = htole16(MBOX_SLOTS),
		.version = TRAILER_VERSION,
		.magic = htole32(TRAILER_MAGIC),
	};
	memcpy(out + plen, &tr, sizeof(tr));
	return plen + sizeof(tr);
}

/* Every MSG IA strips a trailer it finds, whether it emulates atomics or
 * not (ia_params atomics=0): a peer configured otherwise still sees the
 * consumer's bytes alone.  Found: the magic, and a version and slot count
 * that make sense; a consumer's private data that ends so by chance is cut
 * short (odds of 2^-32). */
size_t dfi_msg_atom_strip(const uint8_t *pdata, size_t plen, struct msg_peer *peer)
{
	struct trailer tr;

	memset(peer, 0, sizeof(*peer));
	if (plen < sizeof(tr))
		return plen;
	memcpy(&tr, pdata + plen - sizeof(tr), sizeof(tr));
	if (le32toh(tr.magic) != TRAILER_MAGIC)
		return plen;		/* a peer that emulates none */
	if (tr.version != TRAILER_VERSION || !le16toh(tr.slots)) {
		dfi_warn(DFI_SS_FABRIC, "a peer's atomics mailbox of version %u with %u slots: "
			 "not understood, its atomics are off", tr.version, le16toh(tr.slots));
		return plen - sizeof(tr);
	}
	peer->addr = le64toh(tr.addr);
	peer->key = le32toh(tr.key);
	peer->id = le32toh(tr.id) & 0x7fffffffu;
	peer->slots = le16toh(tr.slots) < MBOX_SLOTS ? le16toh(tr.slots) : MBOX_SLOTS;
	return plen - sizeof(tr);
}

void dfi_msg_atom_peer(struct msg_fep *e, const struct msg_peer *peer)
{
	struct msg_atom *a = e->atom;
	struct msg_atomics *t;

	if (!a)
		return;
	t = a->f->priv;
	pthread_mutex_lock(&t->lock);
	a->peer = *peer;
	pthread_mutex_unlock(&t->lock);
	if (!peer->slots)
		dfi_info(DFI_SS_FABRIC, "endpoint %p: the peer gave no atomics mailbox: atomics "
			 "to it are refused", (void *)e);
}

/* One write into slot k of the peer's mailbox, a request or an answer
 * (table lock held), retried a bounded while on a full queue (tcp's
 * injects leave its queue as the socket takes them). */
static int mbox_write(struct msg_atom *a, bool answer, uint32_t k, const void *buf, size_t len)
{
	uint64_t data = (answer ? CQD_ANSWER : 0) | (uint64_t)a->peer.id << 32 |
			CQD_CHECK << 16 | k;
	uint64_t raddr = a->peer.addr +
			 (answer ? offsetof(struct mbox, rep) + k * sizeof(struct mbox_rep) :
				   offsetof(struct mbox, req) + k * sizeof(struct mbox_req));
	ssize_t rc;

	for (int n = 0; n < 1000; n++) {
		rc = fi_inject_writedata(a->e->ep, buf, len, data, 0, raddr, a->peer.key);
		if (rc != -FI_EAGAIN)
			break;
		sched_yield();
	}
	return dfi_post_rc(rc);
}

int dfi_msg_post_atomic_emul(struct dfi_fep *fe, enum dfi_atomic_op op, uint64_t operand,
			     uint64_t compare, uint64_t raddr, uint32_t rkey, uint64_t id)
{
	struct msg_atom *a = MSG_FEP(fe)->atom;
	struct msg_atomics *t;
	struct mbox_req r;
	int k, rc;

	if (!a)
		return -ENOPROTOOPT;
	t = a->f->priv;
	pthread_mutex_lock(&t->lock);
	if (!a->peer.slots) {
		pthread_mutex_unlock(&t->lock);
		return -ENOPROTOOPT;	/* logged when the connection came up */
	}
	for (k = 0; k < a->peer.slots && (a->busy >> k & 1); k++)
		;
	if (k == a->peer.slots) {
		pthread_mutex_unlock(&t->lock);
		return -EAGAIN;
	}
	r = (struct mbox_req){
		.id = htole64(id), .addr = htole64(raddr), .operand = htole64(operand),
		.compare = htole64(compare), .key = htole32(rkey), .op = htole32(op),
	};
	rc = mbox_write(a, false, (uint32_t)k, &r, sizeof(r));
	if (!rc)
		a->busy |= 1ull << k;
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* A request in our slot k (lock held): applied, answered. */
static void serve(struct msg_atom *a, uint32_t k)
{
	struct mbox_req r;
	struct mbox_rep rep = { 0 };
	uint32_t status, op;
	uint64_t old = 0;
	int rc;

	memcpy(&r, &a->box->req[k], sizeof(r));
	if (!a->peer.slots) {
		dfi_warn(DFI_SS_FABRIC, "endpoint %p: an atomic from a peer that gave no mailbox "
			 "to answer into: dropped", (void *)a->e);
		return;
	}
	op = le32toh(r.op);
	if (op != DFI_ATOMIC_FADD && op != DFI_ATOMIC_CSWAP) {
		dfi_warn(DFI_SS_FABRIC, "endpoint %p: an atomic of unknown operation %u: refused",
			 (void *)a->e, op);
		status = EINVAL;
	} else {
		status = dfi_mr_atomic(a->f, (enum dfi_atomic_op)op, le64toh(r.addr),
				       le32toh(r.key), le64toh(r.operand), le64toh(r.compare),
				       &old);
	}
	rep.id = r.id;
	rep.value = htole64(old);
	rep.status = htole32(status);
	rc = mbox_write(a, true, k, &rep, sizeof(rep));
	if (rc) {
		/* the origin's request would wait for ever: end the connection,
		 * which completes it flushed there */
		dfi_err(DFI_SS_FABRIC, "endpoint %p: an atomic's answer could not go (%s): the "
			"connection is shut down", (void *)a->e, fi_strerror(-rc));
		fi_shutdown(a->e->ep, 0);
	}
}

/* An answer in our slot k (lock held): the request's slot free, its
 * outcome an event. */
static void answered(struct msg_atom *a, uint32_t k)
{
	struct mbox_rep rep;
	struct atom_event ev;
	ssize_t rc;

	memcpy(&rep, &a->box->rep[k], sizeof(rep));
	if (!(a->busy >> k & 1)) {
		dfi_warn(DFI_SS_FABRIC, "endpoint %p: an atomic's answer in slot %u, where none "
			 "was out: dropped", (void *)a->e, k);
		return;
	}
	a->busy &= ~(1ull << k);
	ev = (struct atom_event){ .fid = &a->e->ep->fid, .id = le64toh(rep.id),
				  .value = le64toh(rep.value), .status = le32toh(rep.status) };
	rc = fi_eq_write(a->eq, FI_NOTIFY, &ev, sizeof(ev), 0);
	if (rc != (ssize_t)sizeof(ev))
		dfi_err(DFI_SS_FABRIC, "endpoint %p: an atomic's answer lost (fi_eq_write: %s): "
			"its request completes when the connection ends", (void *)a->e,
			fi_strerror((int)-rc));
}

bool dfi_msg_cq_data(struct dfi_fabric *f, uint64_t data)
{
	struct msg_atomics *t = f->priv;
	struct msg_atom *a;
	uint32_t k = CQD_SLOT(data);

	if (!t)
		return false;	/* no mailboxes: not ours */
	if ((uint32_t)(data >> 16 & 0xff) != CQD_CHECK || k >= MBOX_SLOTS) {
		dfi_warn(DFI_SS_FABRIC, "a remote write with CQ data 0x%llx that names no "
			 "mailbox slot: dropped", (unsigned long long)data);
		return true;
	}
	pthread_mutex_lock(&t->lock);
	a = atom_by_id(t, CQD_ID(data));
	if (!a)
		dfi_dbg(DFI_SS_FABRIC, "a mailbox write for endpoint id 0x%x, closed since: dropped",
			CQD_ID(data));
	else if (data & CQD_ANSWER)
		answered(a, k);
	else
		serve(a, k);
	pthread_mutex_unlock(&t->lock);
	return true;
}

int dfi_msg_atom_event(const void *buf, size_t len, struct dfi_cm_event *ev)
{
	struct atom_event a;

	if (len != sizeof(a))
		return 0;
	memcpy(&a, buf, sizeof(a));
	ev->type = DFI_CM_ATOMIC_DONE;
	ev->ctx = MSG_FEP(a.fid->context)->ctx;
	ev->id = a.id;
	ev->value = a.value;
	ev->err = (int)a.status;
	return 1;
}
