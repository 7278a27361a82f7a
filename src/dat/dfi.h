/*
 * dapl-ofi, the DAT face: objects, handle validation, DAT return codes.
 * Knows DAT; reaches libfabric only through src/fabric/fabric.h.
 *
 * Every object starts with the DAT_PROVIDER pointer (the registry
 * dispatches through the first word of a handle), then a type tag that every
 * entry point checks.  A freed object is poisoned (tag DFI_T_DEAD) and kept in
 * a bounded quarantine, so a stale handle is rejected, not followed.
 *
 * Lock order: provider list -> IA -> EVD -> CNO (event.h).  IA lock guards the
 * IA's object list, counts and the dependency references between objects.
 */
#ifndef DFI_DAT_H
#define DFI_DAT_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include <netinet/in.h>
#include <dat2/udat.h>
#include <dat2/dat_registry.h>
#include <dat2/dat_ib_extensions.h>

#include "event/event.h"
#include "fabric/fabric.h"
#include "util/daterr.h"
#include "util/ia_params.h"
#include "util/log.h"

struct dfi_fabric;
struct dfi_mr;
struct dfi_eq;
struct dfi_pep;
struct dfi_fep;
struct dfi_cq;
struct dfi_srx;

/* Type tags: distinctive values, so garbage is unlikely to pass as a tag. */
enum dfi_type {
	DFI_T_DEAD = 0x0fd0dead,
	DFI_T_IA   = 0x0fd10001,
	DFI_T_PZ   = 0x0fd10002,
	DFI_T_LMR  = 0x0fd10003,
	DFI_T_EVD  = 0x0fd10004,
	DFI_T_CNO  = 0x0fd10005,
	DFI_T_EP   = 0x0fd10006,
	DFI_T_PSP  = 0x0fd10007,
	DFI_T_RSP  = 0x0fd10008,
	DFI_T_CR   = 0x0fd10009,
	DFI_T_RMR  = 0x0fd1000a,
	DFI_T_SRQ  = 0x0fd1000b,
	DFI_T_CSP  = 0x0fd1000c,
	DFI_T_SP_GONE = 0x0fd1000d,	/* a freed PSP/RSP kept for its CRs */
	DFI_T_UD_CM = 0x0fd1000e,	/* a UD address resolution (ud.c) */
	DFI_T_AH   = 0x0fd1000f,	/* a UD address handle (ud.c) */
};

struct dfi_ia;

struct dfi_obj {
	DAT_PROVIDER *provider;		/* must stay the first word */
	uint32_t type;			/* enum dfi_type */
	uint32_t size;			/* allocation size, for the quarantine */
	DAT_CONTEXT context;		/* dat_set/get_consumer_context */
	struct dfi_ia *ia;
	struct dfi_obj *prev, *next;	/* the IA's object list */
};

/* One per IA name the registry handed us (dat_provider_init). */
struct dfi_provider {
	DAT_PROVIDER table;		/* provider->extension points back here */
	DAT_PROVIDER_INFO info;
	char ia_params[512];
	struct dfi_config cfg;
	char mtu_str[16];
	struct dfi_provider *next;
};

struct dfi_evd;

struct dfi_ia {
	struct dfi_obj hdr;
	struct dfi_provider *prov;
	struct dfi_fabric *fab;
	struct dfi_evd *async_evd;
	struct sockaddr_in addr;
	pthread_mutex_t lock;
	struct dfi_obj objs;		/* list head (sentinel) */
	int n_pz, n_lmr, n_evd, n_cno, n_srq, n_rmr;
	/* the RMRs, for a peer's send with invalidate, read under an EVD
	 * lock: a leaf lock of their own (rmr.c) */
	pthread_mutex_t rmr_lock;
	struct dfi_rmr *rmrs;
	/* the UD address handles: read-held by a UD send (then post_lock),
	 * write-held by a free, under cm_lock or none (ud.c) */
	pthread_rwlock_t ud_lock;
	int n_ep;			/* EPs, provider-created ones too: max_eps */
	DAT_NAMED_ATTR prov_attr[13];
	int n_prov_attr;

	/* Connections (conn.c) and the progress thread (progress.c), started
	 * by the first listener or connect. */
	pthread_mutex_t cm_lock;	/* serializes CM events with EP teardown */
	pthread_mutex_t eq_lock;	/* one EQ reader at a time: events posted in order */
	struct dfi_eq *eq;
	/* a peer's shutdowns read from the EQ and held back behind the
	 * ESTABLISHEDs it caused before them (conn.c, "order across
	 * connections"; eq_lock) */
	struct dfi_held_end *held_ends;
	int n_held_ends, cap_held_ends;
	atomic_bool ends_held;		/* n_held_ends > 0: the tick looks again */
	atomic_bool faults;		/* an EP's fault waits (dfi_ep_faults) */
	atomic_bool eq_open;		/* eq may be read by a consumer (dfi_cm_pull) */
	atomic_uint eq_pulls;		/* dequeues from CR and connection EVDs (the EQ's lease) */
	atomic_uint eq_touches;		/* connects, accepts, disconnects (the same) */
	unsigned n_pulling;		/* consumers inside dfi_cm_pull (IA lock) */
	int epfd, stop_fd;
	int kick_fd;			/* eventfd: stalled SRQ EPs may move (srq.c) */
	unsigned rcq_gen;		/* bumped when an SRQ EP's CQ leaves epoll (IA lock) */
	unsigned cq_gen;		/* bumped when an EVD's CQ leaves epoll (IA lock) */
	int n_rcq_watched;		/* SRQ EPs' CQs in epoll (IA lock): the thread ticks */
	atomic_bool rcq_kick_all;	/* the next kick reads every SRQ EP's CQ */
	pthread_t progress;
	bool progress_on;
	uint64_t lease_ns;		/* DAPL_OFI_PROGRESS_LEASE_US, in ns */
	int nparked;			/* DTO EVDs whose CQ is parked (IA lock) */
	atomic_bool polling;		/* the wait fds never settle: polled (progress.c) */
	/* emulated atomics in use where receive CQs carry them (fabric.h
	 * rx_cq_own): reads of a request CQ no longer drive its partner
	 * receive CQ (progress.c, dfi_progress_atomics) */
	atomic_bool atomics_on;
	unsigned batch;			/* odd while the thread handles events */
	pthread_cond_t batch_done;
	struct dfi_dto_pool *zombies;	/* pools of freed EPs with completions due */

	/* kDAT upcall dispatcher (evd.c), started by the first upcall policy */
	struct dfi_disp disp;
	bool disp_on;			/* IA lock */
	bool connect_timers;		/* a connect with a finite timeout pends (cm_lock) */
	int n_spares;			/* EPs holding a pre-opened endpoint (cm_lock) */
	int n_listening;		/* live PSPs and RSPs (cm_lock) */
	unsigned peer_timeout_ms;	/* DAPL_OFI_PEER_TIMEOUT_MS (liveness.c) */
	_Atomic uint64_t cnt[DCNT_IA_ALL_COUNTERS];	/* the IB extension's (ib.c) */
};

struct dfi_pz {
	struct dfi_obj hdr;
	int refs;			/* LMRs, EPs, SRQs, RMRs in it (IA lock) */
};

struct dfi_lmr {
	struct dfi_obj hdr;
	struct dfi_pz *pz;
	DAT_MEM_TYPE mem_type;
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN length;
	DAT_MEM_PRIV_FLAGS priv;
	DAT_VA_TYPE va_type;
	struct dfi_mr *mr;
	DAT_LMR_CONTEXT lmr_context;
	DAT_RMR_CONTEXT rmr_context;
	DAT_VADDR addr;
	int refs;			/* LMRs registered on top of it (IA lock) */
	struct dfi_lmr *base;		/* DAT_MEM_TYPE_LMR: the LMR it shares */
};

/* A posted operation, the context libfabric hands back in its completion.
 * Every EP has one per queue slot, so it stays small (48 bytes): the
 * segments of a receive posted before the connection wait beside it, in
 * the EP's `early` list, not here. */
struct dfi_dto {
	struct dfi_ep *ep;
	struct dfi_dto_pool *pool;
	DAT_DTO_COOKIE cookie;
	DAT_SEG_LENGTH len;
	DAT_DTOS op;
	bool suppress;			/* no event, the slot is freed */
	bool ud;			/* a UD EP's (ud.c) */
	/* a write with immediate data's write, on a fabric whose sends may
	 * overtake writes: not a slot, its completion lets the notice go
	 * (dto.c, post_write_imm) */
	bool companion;
	/* taken and its completion not read yet: a completion of a
	 * descriptor not live is a provider's second one (dto.c) */
	_Atomic bool live;
	int next;			/* free list */
	unsigned seq;			/* its place among its pool's posts (ordered pools) */
};

/* An unordered fabric's pool (dto.c, "completion order"): its completions
 * are reported in the order of its posts. */
struct dfi_dto_order {
	_Atomic unsigned posted;	/* seqs handed out (post_lock) */
	unsigned done;			/* the next seq to report (its EVD's lock) */
	bool listed;			/* on its EVD's ready list */
	bool off;			/* no memory for early: reported as they come */
	/* a numbered fabric's receive pool: the mask of its message numbers
	 * (0: not numbered), and the seq of its connection's first receive
	 * (dto.c, "numbered messages"; post_lock) */
	_Atomic unsigned msgno_mask;
	_Atomic unsigned base;
	_Atomic bool lost_said;		/* its connection's gap logged */
	struct dfi_dto_pool *next_ready;
	/* [slot]: read before its turn (ctx NULL: none); allocated with the
	 * first such completion */
	struct dfi_comp *early;
	_Atomic int slot[];		/* [seq % n]: the slot posted with it */
};

/* A receive posted before its EP had a libfabric endpoint: its descriptor
 * and segments, posted at the connect or accept (conn.c, ep_post_early). */
struct dfi_early {
	int idx;			/* in the EP's recvq */
	int nsg;
	struct dfi_sge sg[DFI_MAX_SGE];	/* as the post built them */
};

/* An EP's descriptors of one direction, without a lock.  The posts on the
 * EP take descriptors (always under the EP's post_lock: one taker at a
 * time); CQ reads, from any thread, give them back.  A slot is a credit:
 * taken at the post, given back when the completion is read if it is not
 * reported, else when the consumer reaps its event (a verbs QP's slot is
 * busy until then too).  Taker-side fields are written by the taker only;
 * everyone else adds to the atomic counts and pushes onto `returned`. */
/* A request slot's atomic (dto.c): a native one's operands, which the
 * provider reads until the completion; an emulated one's id while it is
 * out (0: none) and where its old value goes (post_lock). */
struct dfi_atom {
	uint64_t operand, compare;
	uint64_t id;
	uint64_t *result;
};

struct dfi_dto_pool {
	int n;
	int free_head;			/* the taker's free list (post_lock) */
	/* descriptors given back, a stack pushed by CQ readers (CAS) and taken
	 * whole by the taker (exchange), so no pop can meet a recycled head */
	_Atomic int returned;
	/* counts that only grow (unsigned, so they may wrap): slots in use =
	 * taken - released; posted and not yet read from a CQ = taken - read */
	_Atomic unsigned taken;		/* written by the taker only */
	_Atomic unsigned released;
	_Atomic unsigned read;
	/* its EP is freed: completions read from now on are dropped, and
	 * nothing of them reaches the EP (dfi_ep_dto_orphan) */
	atomic_bool orphan;
	/* a request queue's barrier fence (dto.c): RDMA reads posted to
	 * libfabric and not read from the CQ yet; requests held behind a
	 * fence; a release of them is due (the post lock was busy) */
	_Atomic int reads_out;
	_Atomic int fence_held;
	atomic_bool fence_due;
	/* on a fabric whose sends may overtake writes (writes_unordered):
	 * RDMA writes posted and not read from the CQ yet, which a send
	 * waits for as a fenced request waits for reads */
	bool writes_ahead;
	_Atomic int writes_out;
	/* atomics' state, one per slot (allocated by the first, dto.c) */
	struct dfi_atom *atom;
	unsigned atom_seq;		/* emulated ones' ids (post_lock) */
	struct dfi_dto_order *order;	/* NULL: the fabric completes in order */
	/* where the provider writes in contexts (lim.op_ctx): two per slot,
	 * [2i] what d[i]'s posts hand libfabric, [2i + 1] a write with
	 * immediate data's write, which completes unreported (dto.c) */
	struct dfi_opctx *octx;
	/* on a fabric whose sends may overtake writes (writes_ahead): one per
	 * slot, the write of a write with immediate data, and how many of them
	 * are out (the pool stays while any is) */
	struct dfi_dto *wimm;
	_Atomic unsigned wimm_out;
	struct dfi_dto_pool *next_zombie;
	/* in the same allocation as the counts: a completion touches both */
	struct dfi_dto d[];
};

/* The context d's posts and cancels hand the fabric (fabric.h); and the
 * one of the write of a write with immediate data, whose completion is
 * skipped (NULL) or, where sends may overtake writes, counted (wimm). */
static inline void *dfi_dto_fctx(struct dfi_dto *d)
{
	struct dfi_dto_pool *p = d->pool;

	if (__builtin_expect(!p->octx, 1))
		return d;
	return &p->octx[2 * (d - p->d)];
}

static inline void *dfi_dto_wimm_fctx(struct dfi_dto *d)
{
	struct dfi_dto_pool *p = d->pool;
	long i = d - p->d;

	if (p->octx)
		return &p->octx[2 * i + 1];
	return p->wimm ? &p->wimm[i] : NULL;
}

/* A receive posted to an SRQ: the context the libfabric completion hands
 * back on the private receive CQ of the EP that consumed it (srq.c). */
struct dfi_srq_dto {
	struct dfi_srq *srq;
	DAT_DTO_COOKIE cookie;
	/* the completion, filled by srq.c from that EP's private CQ */
	struct dfi_ep *ep;
	size_t len;
	int err;
	bool imm;			/* an RDMA write with immediate data took it */
	uint64_t data;			/* then: its remote CQ data (dfi_imm_*) */
	struct dfi_srq_dto *next;	/* free list, or the recv EVD's staged list */
	/* what its post hands the fabric where the provider writes in
	 * contexts (lim.op_ctx; NULL: itself) */
	struct dfi_opctx *octx;
};

/* A shared receive queue: a libfabric shared receive context plus the
 * descriptors and counts DAT asks for.  A slot is taken from the post until
 * the consumer has reaped the completion (posted + undequeued <= max). */
struct dfi_srq {
	struct dfi_obj hdr;
	struct dfi_pz *pz;
	struct dfi_srx *srx;
	pthread_mutex_t lock;		/* everything below */
	DAT_COUNT max_recv_dtos, max_recv_iov, low_watermark;
	bool lw_armed;			/* the low watermark event may fire once */
	bool freeing;			/* dat_srq_free won: no more attaches */
	bool pulled;			/* the polling thread pulls srx (IA lock) */
	int posted;			/* in the shared context, not completed */
	int undequeued;			/* completed, not yet reaped */
	int neps;			/* EPs attached */
	int n_stalled;			/* attached EPs whose data waits for a buffer */
	struct dfi_srq_dto *free;	/* descriptors not posted */
	struct dfi_srq_chunk *chunks;	/* every descriptor allocation */
	int nalloc;
};

/* An endpoint.  The libfabric endpoint is created when it connects or
 * accepts; receives posted before that wait in `early`. */
struct dfi_ep {
	struct dfi_obj hdr;
	struct dfi_pz *pz;
	struct dfi_evd *recv_evd, *req_evd, *conn_evd;
	/* What a post reads (attr, state, fep, the DTO EVDs, sendq, recvq,
	 * early) changes only under both the IA's cm_lock and post_lock,
	 * and is read under either: a post takes post_lock alone, so posts on
	 * different EPs, and the CM, never wait for one another.  Lock order:
	 * cm_lock -> IA lock -> post_lock -> EVD lock (a DTO pool has none). */
	pthread_mutex_t post_lock;
	DAT_EP_ATTR attr;
	DAT_EP_STATE state;
	/* state is CONNECTED, for the CQ readers, who hold neither lock */
	atomic_bool up;
	/* a request failed in the provider while up (its errno): the
	 * progress thread ends the connection (dfi_ep_faults) */
	atomic_int fault;
	struct dfi_fep *fep;
	/* its connection's socket was cut under the provider
	 * (dfi_ep_cut_reads): what fails on it from then on was flushed;
	 * cleared when a connection is established */
	_Atomic bool cut;
	uint32_t inject_max;		/* a suppressed send this long or shorter is injected */
	/* opened at dat_ep_create for a connect to take (cm_lock): bound to
	 * the EVDs' CQs and the EQ, never connected, nothing posted */
	struct dfi_fep *spare;
	uint64_t connect_deadline;	/* dat_ep_connect's timeout, ns; 0: none (cm_lock) */
	struct dfi_dto_pool *sendq, *recvq;
	/* receives posted before fep, in order: allocated at the first, freed
	 * once they are posted or flushed */
	struct dfi_early *early;		/* dfi_ep_early_take */
	int n_early, early_cap;
	/* requests held behind a barrier fence, in posting order (dto.c;
	 * post_lock): the first is fenced, the rest may not overtake it */
	struct dfi_held *held, **held_tail;
	struct sockaddr_in remote;
	DAT_CONN_QUAL remote_port;	/* the qualifier it connected to; 0: accepted */
	uint8_t pdata[256];		/* private data of the last connection event */
	struct dfi_sp *rsp;		/* the RSP this EP is reserved for */
	/* A provider-created EP (DAT_PSP_PROVIDER_FLAG): the CR it was made
	 * for, until that is accepted, rejected or handed off (cm_lock). */
	struct dfi_cr *cr;

	/* SRQ EPs (srq.c): receives come from srq's shared context and complete
	 * on rcq, this EP's own CQ, so that each completion names its EP. */
	struct dfi_srq *srq;
	struct dfi_cq *rcq;		/* created by the first connect/accept */
	bool rcq_watched;		/* in the progress thread's epoll set (IA lock) */
	bool rcq_stalled;		/* data waits for an SRQ buffer (IA lock) */
	bool established;		/* connected since the last EP_BROKEN (cm_lock) */
	pthread_mutex_t drain_lock;	/* one reader of rcq at a time, in order */
	int srq_held;			/* SRQ buffers completed here, not reaped (srq lock) */
	DAT_COUNT soft_hw, hard_hw;	/* dat_ep_set_watermark (srq lock; cm_lock
					 * for an EP without SRQ: only stored) */
	bool soft_armed;		/* the soft one may fire once (srq lock) */
	_Atomic uint64_t cnt[DCNT_EP_ALL_COUNTERS];	/* the IB extension's (ib.c) */

	/* A UD EP (the IB extension's DAT_IB_SERVICE_TYPE_UD; ud.c): fep is
	 * its datagram endpoint, opened at its first address resolution */
	bool ud;
	struct dfi_ud_cm *ud_cms;	/* its resolutions, until freed (cm_lock) */
	struct dfi_ud_ah *ud_ahs;	/* the handles they gave (ud_lock) */
};

/* A UD address resolution of ep (ud.c): the DAT_CONTEXT of its
 * DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED, kept until dat_ib_ud_cm_free or
 * the EP's free, with the private data the event points at. */
struct dfi_ud_cm {
	struct dfi_obj hdr;
	struct dfi_ep *ep;
	struct dfi_fep *hs;		/* the handshake, until its event */
	uint64_t deadline;		/* DAT's connect timeout, ns; 0: none */
	struct dfi_ud_cm *next;
	struct sockaddr_in peer;
	bool passive;
	DAT_COUNT plen;
	uint8_t pdata[256];
};

/* A UD address handle (DAT_IB_ADDR_HANDLE's ah): the peer's endpoint, kept
 * until dat_ib_ud_ah_free or the free of the EP that resolved it. */
struct dfi_ud_ah {
	struct dfi_obj hdr;
	struct dfi_ep *ep;
	struct dfi_ah *ah;
	struct dfi_ud_ah *next;
};

/* A public (PSP), reserved (RSP) or common (CSP) service point: a
 * libfabric listener.  A CSP is a PSP addressed by IP address and port
 * (the qualifier is the port). */
struct dfi_sp {
	struct dfi_obj hdr;
	struct dfi_evd *cr_evd;
	struct dfi_pep *pep;
	DAT_CONN_QUAL conn_qual;
	DAT_PSP_FLAGS flags;
	DAT_COMM comm;			/* CSP: the communicator */
	struct sockaddr_in addr;	/* CSP: the address listened on */
	struct dfi_ep *ep;		/* RSP: the reserved EP */
	bool used;			/* RSP: single use */
	/* Its CRs not yet accepted or rejected, and whether the consumer
	 * freed it meanwhile (cm_lock): a freed SP keeps its listener for
	 * them, refusing new requests, and goes with the last (conn.c). */
	int ncr;
	bool freed;
};

/* A connection request, until accepted or rejected. */
struct dfi_cr {
	struct dfi_obj hdr;
	struct dfi_sp *sp;
	struct dfi_ep *ep;		/* the provider-created EP, or NULL (cm_lock) */
	void *req;
	struct sockaddr_in remote;
	bool ud;			/* from a UD EP: a UD EP accepts it (ud.c) */
	DAT_COUNT plen;
	uint8_t pdata[256];
};

struct dfi_cno_obj {
	struct dfi_obj hdr;
	struct dfi_cno core;
};

struct dfi_evd {
	struct dfi_obj hdr;
	struct dfi_evq q;
	struct dfi_cq *cq;		/* DTO EVDs, once an EP connects (IA lock) */
	/* The progress thread's lease (progress.c; IA lock): the CQ fd stays
	 * out of epoll while the consumer drives the CQ itself. */
	bool parked;
	bool unwatched;			/* its CQ is closing: out of every pass (IA lock) */
	uint32_t calls_seen;		/* consumer calls at the last look */
	uint64_t calls_moved;		/* when the last look saw them move (ns) */
	/* Whether the consumer polls the CQ, by its call rate over the last
	 * window (progress.c, consumer_polls), and the thread's last pass */
	bool polls;
	uint8_t slow;			/* slow windows in a row (two make a non-poller) */
	uint32_t rate_calls, rate_waits;	/* calls and waits at the window's start */
	uint64_t rate_at, pass_end;	/* the window's start; the pass's end (ns) */
	uint64_t park_until, park_step;	/* next look; the current backoff (ns) */
	/* The other DTO EVD of the EPs feeding this one: reading either CQ
	 * drives those EPs (NULL: none yet, or not one EVD: partner_mixed). */
	struct dfi_evd *partner;
	bool partner_mixed;
	bool receives;			/* some EP's receive EVD */
	/* SRQ receive completions read from EPs' private CQs, oldest first,
	 * waiting for ring slots: part of the EVD's source (q.lock) */
	struct dfi_srq_dto *staged, *staged_tail;
	/* ordered pools whose next completion was read before its turn,
	 * waiting for ring slots: part of the source too (q.lock; dto.c) */
	struct dfi_dto_pool *ready;
	_Atomic uint64_t cnt[DCNT_EVD_ALL_COUNTERS];	/* the IB extension's (ib.c) */
};

/* One of the IB extension's counters (dat_ib_query_counters): counted
 * wherever it happens, relaxed, read without a lock. */
static inline void dfi_cnt_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* The same on the data path, where one writer at a time holds a lock
 * (post_lock, the EVD lock) or races are rare (consumers dequeuing one EVD
 * together): a load and a store, no locked instruction, which cost 0.1 us
 * of a 4 us ping-pong.  A count may be lost to a concurrent writer or
 * reset; none is invented. */
static inline void dfi_cnt_add_1w(_Atomic uint64_t *c, uint64_t v)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
			      memory_order_relaxed);
}

/* ---------------------------------------------------------------- handles */

static inline void *dfi_obj_get(const void *h, enum dfi_type type)
{
	const struct dfi_obj *o = h;

	if (!o || ((uintptr_t)o & 7u) || o->type != (uint32_t)type)
		return NULL;
	return (void *)o;
}

/* The EP's early receives, detached (the caller frees them); *n of them.
 * Under both cm_lock and post_lock, as every change of the list. */
static inline struct dfi_early *dfi_ep_early_take(struct dfi_ep *ep, int *n)
{
	struct dfi_early *e = ep->early;

	*n = ep->n_early;
	ep->early = NULL;
	ep->n_early = ep->early_cap = 0;
	return e;
}

/* An EVD of `ia` fed by (one of) the `need` streams, or NULL. */
static inline struct dfi_evd *dfi_evd_of(struct dfi_ia *ia, DAT_EVD_HANDLE h, DAT_EVD_FLAGS need)
{
	struct dfi_evd *e = dfi_obj_get(h, DFI_T_EVD);

	return e && e->hdr.ia == ia && (e->q.flags & need) ? e : NULL;
}

/* A PZ of `ia`, or NULL. */
static inline struct dfi_pz *dfi_pz_of(struct dfi_ia *ia, DAT_PZ_HANDLE h)
{
	struct dfi_pz *pz = dfi_obj_get(h, DFI_T_PZ);

	return pz && pz->hdr.ia == ia ? pz : NULL;
}

/* post_lock held (and cm_lock, as for every write of state) */
static inline void dfi_ep_state_locked(struct dfi_ep *ep, DAT_EP_STATE st)
{
	ep->state = st;
	atomic_store_explicit(&ep->up, st == DAT_EP_STATE_CONNECTED, memory_order_relaxed);
}

/* cm_lock held: see struct dfi_ep. */
static inline void dfi_ep_set_state(struct dfi_ep *ep, DAT_EP_STATE st)
{
	pthread_mutex_lock(&ep->post_lock);
	dfi_ep_state_locked(ep, st);
	pthread_mutex_unlock(&ep->post_lock);
}

/* Allocate a zeroed object of `size` bytes, tagged, linked into ia's list. */
void *dfi_obj_new(struct dfi_ia *ia, enum dfi_type type, size_t size);
/* Unlink (IA lock taken inside), poison and quarantine. */
void dfi_obj_retire(void *obj);
/* Take an object out of its IA's list without freeing it. */
void dfi_obj_unlink(void *obj);
/* Free every quarantined object (library unload). */
void dfi_quarantine_flush(void);

/* ------------------------------------------------------------ the objects */

extern const DAT_BOOLEAN dfi_merging[6][6];

DAT_RETURN dfi_ia_open(const DAT_NAME_PTR name, DAT_COUNT async_qlen,
		       DAT_EVD_HANDLE *async_evd, DAT_IA_HANDLE *ia);
DAT_RETURN dfi_ia_query(DAT_IA_HANDLE ia, DAT_EVD_HANDLE *async_evd,
			DAT_IA_ATTR_MASK ia_mask, DAT_IA_ATTR *ia_attr,
			DAT_PROVIDER_ATTR_MASK pr_mask, DAT_PROVIDER_ATTR *pr_attr);
DAT_RETURN dfi_ia_close(DAT_IA_HANDLE ia, DAT_CLOSE_FLAGS flags);

DAT_RETURN dfi_set_consumer_context(DAT_HANDLE h, DAT_CONTEXT ctx);
DAT_RETURN dfi_get_consumer_context(DAT_HANDLE h, DAT_CONTEXT *ctx);
DAT_RETURN dfi_get_handle_type(DAT_HANDLE h, DAT_HANDLE_TYPE *type);

DAT_RETURN dfi_pz_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE *pz);
DAT_RETURN dfi_pz_query(DAT_PZ_HANDLE pz, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM *param);
DAT_RETURN dfi_pz_free(DAT_PZ_HANDLE pz);
void dfi_pz_destroy(struct dfi_pz *pz);

DAT_RETURN dfi_lmr_create(DAT_IA_HANDLE ia, DAT_MEM_TYPE type, DAT_REGION_DESCRIPTION desc,
			  DAT_VLEN len, DAT_PZ_HANDLE pz, DAT_MEM_PRIV_FLAGS priv,
			  DAT_VA_TYPE va_type, DAT_LMR_HANDLE *lmr, DAT_LMR_CONTEXT *lctx,
			  DAT_RMR_CONTEXT *rctx, DAT_VLEN *reg_len, DAT_VADDR *reg_addr);
DAT_RETURN dfi_lmr_query(DAT_LMR_HANDLE lmr, DAT_LMR_PARAM_MASK mask, DAT_LMR_PARAM *param);
DAT_RETURN dfi_lmr_free(DAT_LMR_HANDLE lmr);
DAT_RETURN dfi_lmr_sync_rdma_read(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *iov, DAT_VLEN n);
DAT_RETURN dfi_lmr_sync_rdma_write(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *iov, DAT_VLEN n);
void dfi_lmr_destroy(struct dfi_lmr *lmr);

DAT_RETURN dfi_evd_create(DAT_IA_HANDLE ia, DAT_COUNT qlen, DAT_CNO_HANDLE cno,
			  DAT_EVD_FLAGS flags, DAT_EVD_HANDLE *evd);
DAT_RETURN dfi_evd_query(DAT_EVD_HANDLE evd, DAT_EVD_PARAM_MASK mask, DAT_EVD_PARAM *param);
DAT_RETURN dfi_evd_modify_cno(DAT_EVD_HANDLE evd, DAT_CNO_HANDLE cno);
DAT_RETURN dfi_evd_enable(DAT_EVD_HANDLE evd);
DAT_RETURN dfi_evd_disable(DAT_EVD_HANDLE evd);
DAT_RETURN dfi_evd_wait(DAT_EVD_HANDLE evd, DAT_TIMEOUT timeout, DAT_COUNT threshold,
			DAT_EVENT *event, DAT_COUNT *nmore);
DAT_RETURN dfi_evd_resize(DAT_EVD_HANDLE evd, DAT_COUNT qlen);
DAT_RETURN dfi_evd_post_se(DAT_EVD_HANDLE evd, const DAT_EVENT *event);
DAT_RETURN dfi_evd_dequeue(DAT_EVD_HANDLE evd, DAT_EVENT *event);
/* The DAT_OFI_EVD_*_OP extension ops (kDAT upcalls). */
DAT_RETURN dfi_evd_extension(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args);
DAT_RETURN dfi_evd_free(DAT_EVD_HANDLE evd);
DAT_RETURN dfi_evd_set_unwaitable(DAT_EVD_HANDLE evd);
DAT_RETURN dfi_evd_clear_unwaitable(DAT_EVD_HANDLE evd);
/* Create an EVD object (no argument checks); used for the async EVD. */
DAT_RETURN dfi_evd_new(struct dfi_ia *ia, DAT_COUNT qlen, struct dfi_cno_obj *cno,
		       DAT_EVD_FLAGS flags, struct dfi_evd **out);
/* IA close: wake and wait out the waiter, then free. */
void dfi_evd_destroy(struct dfi_evd *evd);

DAT_RETURN dfi_cno_create(DAT_IA_HANDLE ia, DAT_OS_WAIT_PROXY_AGENT agent, DAT_CNO_HANDLE *cno);
DAT_RETURN dfi_cno_fd_create(DAT_IA_HANDLE ia, DAT_FD *fd, DAT_CNO_HANDLE *cno);
DAT_RETURN dfi_cno_modify_agent(DAT_CNO_HANDLE cno, DAT_OS_WAIT_PROXY_AGENT agent);
DAT_RETURN dfi_cno_query(DAT_CNO_HANDLE cno, DAT_CNO_PARAM_MASK mask, DAT_CNO_PARAM *param);
DAT_RETURN dfi_cno_free(DAT_CNO_HANDLE cno);
/* cancel.c: point the table's setup, teardown and connection calls at
 * wrappers that hold thread cancellation off. */
void dfi_nocancel_table(DAT_PROVIDER *t);
DAT_RETURN dfi_cno_wait_api(DAT_CNO_HANDLE cno, DAT_TIMEOUT timeout, DAT_EVD_HANDLE *evd);
DAT_RETURN dfi_cno_trigger_api(DAT_CNO_HANDLE cno, DAT_EVD_HANDLE *evd);
void dfi_cno_destroy(struct dfi_cno_obj *cno);

struct dfi_provider *dfi_provider_find(const char *ia_name);

DAT_RETURN dfi_ep_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv_evd,
			 DAT_EVD_HANDLE req_evd, DAT_EVD_HANDLE conn_evd,
			 const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep);
DAT_RETURN dfi_ep_query(DAT_EP_HANDLE ep, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM *param);
DAT_RETURN dfi_ep_modify(DAT_EP_HANDLE ep, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM *param);
DAT_RETURN dfi_ep_get_status(DAT_EP_HANDLE ep, DAT_EP_STATE *state, DAT_BOOLEAN *recv_idle,
			     DAT_BOOLEAN *req_idle);
DAT_RETURN dfi_ep_reset(DAT_EP_HANDLE ep);
DAT_RETURN dfi_ep_free(DAT_EP_HANDLE ep);
void dfi_ep_destroy(struct dfi_ep *ep);
/* The EP a DAT_PSP_PROVIDER_FLAG PSP makes for a request (cm_lock held):
 * the IA's default attributes, no PZ and no EVDs (dat_ep_modify gives them
 * before the accept), TENTATIVE_CONNECTION_PENDING.  NULL without memory. */
struct dfi_ep *dfi_ep_new_tentative(struct dfi_ia *ia);
DAT_RETURN dfi_ep_create_with_srq(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE,
				  DAT_EVD_HANDLE, DAT_SRQ_HANDLE, const DAT_EP_ATTR *,
				  DAT_EP_HANDLE *);

/* dto.c */
DAT_DTO_COMPLETION_STATUS dfi_dto_status(int err);
int dfi_evd_cq(struct dfi_evd *evd, struct dfi_cq **cq);
void dfi_evd_cq_close(struct dfi_evd *evd);
struct dfi_dto_pool *dfi_dto_pool_new(int n, const struct dfi_fabric_limits *lim);

/* post_lock held: d goes to libfabric now; it did not after all (the post
 * failed: no completion comes).  Its pool's next seq (dto.c). */
static inline void dfi_dto_order_take(struct dfi_dto *d)
{
	struct dfi_dto_order *o = d->pool->order;
	unsigned s;

	if (!o)
		return;
	s = atomic_load_explicit(&o->posted, memory_order_relaxed);
	d->seq = s;
	atomic_store_explicit(&o->slot[s % (unsigned)d->pool->n], (int)(d - d->pool->d),
			      memory_order_relaxed);
	atomic_store_explicit(&o->posted, s + 1, memory_order_release);
}

/* post_lock held: p's next post is its connection's first receive; its
 * messages are numbered modulo msgno_mask + 1, or not (0; dto.c, "numbered
 * messages"). */
static inline void dfi_dto_order_base(struct dfi_dto_pool *p, unsigned msgno_mask)
{
	struct dfi_dto_order *o = p->order;

	if (!o)
		return;
	atomic_store_explicit(&o->base, atomic_load_explicit(&o->posted, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&o->msgno_mask, msgno_mask, memory_order_relaxed);
	atomic_store_explicit(&o->lost_said, false, memory_order_relaxed);
}

static inline void dfi_dto_order_untake(struct dfi_dto *d)
{
	struct dfi_dto_order *o = d->pool->order;

	if (o)
		atomic_store_explicit(&o->posted, d->seq, memory_order_release);
}
void dfi_dto_pool_release(struct dfi_ia *ia, struct dfi_dto_pool *p);
/* Descriptors of p posted (early receives included) and not yet read
 * from the CQ; whether there are any. */
int dfi_dto_pool_posted(struct dfi_dto_pool *p);
bool dfi_dto_pool_busy(struct dfi_dto_pool *p);
/* Whether no slot of p is in use: nothing posted, nothing left to reap. */
bool dfi_dto_pool_idle(struct dfi_dto_pool *p);
void dfi_zombies_free(struct dfi_ia *ia);
void dfi_ep_flush_pending(struct dfi_ep *ep);
/* The shutdowns held back behind an accept of the same host (conn.c): the
 * IA's EQ is closed, they go with it. */
void dfi_cm_held_free(struct dfi_ia *ia);
/* Before a connected EP's endpoint is shut down or closed (without
 * cm_lock): RDMA reads it has out are ended by the provider itself first,
 * for at most a second (dto.c). */
void dfi_ep_cut_reads(struct dfi_ep *ep);
/* ep_destroy, before the EP's pools go: what the EP left in its EVDs and
 * CQs no longer touches it (or an EP later in its memory). */
void dfi_ep_dto_orphan(struct dfi_ep *ep);
DAT_RETURN dfi_ep_post_send(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
			    DAT_COMPLETION_FLAGS);
DAT_RETURN dfi_ep_post_recv(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
			    DAT_COMPLETION_FLAGS);
DAT_RETURN dfi_ep_post_rdma_write(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
				  const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN dfi_ep_post_rdma_read(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
				 const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN dfi_ep_post_send_with_invalidate(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *,
					    DAT_DTO_COOKIE, DAT_COMPLETION_FLAGS, DAT_BOOLEAN,
					    DAT_RMR_CONTEXT);
DAT_RETURN dfi_ep_post_rdma_write_immed(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *,
					DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *, DAT_UINT32,
					DAT_COMPLETION_FLAGS);
/* dat_ib_post_fetch_and_add (cswap false: compare unused) and
 * dat_ib_post_cmp_and_swap, natively (ib.c checked the IA can). */
DAT_RETURN dfi_ep_post_atomic(DAT_EP_HANDLE, bool cswap, DAT_UINT64 compare, DAT_UINT64 value,
			      const DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *,
			      DAT_COMPLETION_FLAGS);

/* ib.c: the IB extension's ops (<dat2/dat_ib_extensions.h>). */
bool dfi_ib_op(DAT_EXTENDED_OP op);
DAT_RETURN dfi_ib_extension(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args);

/* conn.c */
DAT_RETURN dfi_psp_create(DAT_IA_HANDLE, DAT_CONN_QUAL, DAT_EVD_HANDLE, DAT_PSP_FLAGS,
			  DAT_PSP_HANDLE *);
DAT_RETURN dfi_psp_create_any(DAT_IA_HANDLE, DAT_CONN_QUAL *, DAT_EVD_HANDLE, DAT_PSP_FLAGS,
			      DAT_PSP_HANDLE *);
DAT_RETURN dfi_psp_query(DAT_PSP_HANDLE, DAT_PSP_PARAM_MASK, DAT_PSP_PARAM *);
DAT_RETURN dfi_psp_free(DAT_PSP_HANDLE);
DAT_RETURN dfi_rsp_create(DAT_IA_HANDLE, DAT_CONN_QUAL, DAT_EP_HANDLE, DAT_EVD_HANDLE,
			  DAT_RSP_HANDLE *);
DAT_RETURN dfi_rsp_query(DAT_RSP_HANDLE, DAT_RSP_PARAM_MASK, DAT_RSP_PARAM *);
DAT_RETURN dfi_rsp_free(DAT_RSP_HANDLE);
DAT_RETURN dfi_cr_query(DAT_CR_HANDLE, DAT_CR_PARAM_MASK, DAT_CR_PARAM *);
DAT_RETURN dfi_cr_accept(DAT_CR_HANDLE, DAT_EP_HANDLE, DAT_COUNT, const DAT_PVOID);
DAT_RETURN dfi_cr_reject(DAT_CR_HANDLE, DAT_COUNT, const DAT_PVOID);
DAT_RETURN dfi_cr_handoff(DAT_CR_HANDLE, DAT_CONN_QUAL);
DAT_RETURN dfi_csp_create(DAT_IA_HANDLE, DAT_COMM *, DAT_IA_ADDRESS_PTR, DAT_EVD_HANDLE,
			  DAT_CSP_HANDLE *);
DAT_RETURN dfi_csp_query(DAT_CSP_HANDLE, DAT_CSP_PARAM_MASK, DAT_CSP_PARAM *);
DAT_RETURN dfi_csp_free(DAT_CSP_HANDLE);
DAT_RETURN dfi_ep_dup_connect(DAT_EP_HANDLE, DAT_EP_HANDLE, DAT_TIMEOUT, DAT_COUNT,
			      const DAT_PVOID, DAT_QOS);
DAT_RETURN dfi_ep_common_connect(DAT_EP_HANDLE, DAT_IA_ADDRESS_PTR, DAT_TIMEOUT, DAT_COUNT,
				 const DAT_PVOID);
DAT_RETURN dfi_ep_connect(DAT_EP_HANDLE, DAT_IA_ADDRESS_PTR, DAT_CONN_QUAL, DAT_TIMEOUT,
			  DAT_COUNT, const DAT_PVOID, DAT_QOS, DAT_CONNECT_FLAGS);
DAT_RETURN dfi_ep_disconnect(DAT_EP_HANDLE, DAT_CLOSE_FLAGS);
void dfi_sp_destroy(struct dfi_sp *sp);
void dfi_cr_destroy(struct dfi_cr *cr);
/* Close the EP's libfabric endpoint (IA cm_lock taken inside). */
void dfi_ep_close_fep(struct dfi_ep *ep);
/* Open a new EP's libfabric endpoint ahead of its connect, within the IA's
 * budget (DAPL_OFI_EP_PREOPEN); nothing happens if it cannot.  Called
 * without locks. */
void dfi_ep_preopen(struct dfi_ep *ep);
/* Close the endpoint opened ahead, if any (cm_lock held). */
void dfi_ep_drop_spare(struct dfi_ep *ep);
/* Handle every pending CM event (ia->eq_lock held); returns how many there
 * were. */
int dfi_cm_handle(struct dfi_ia *ia);
/* A consumer polling a CR or connection EVD found it empty: read the EQ
 * itself unless another thread is at it.  Returns how many CM events were
 * handled (for any EVD), -EBUSY if another thread is reading, -ENOTCONN
 * before the IA's first listener or connect. */
int dfi_cm_pull(struct dfi_ia *ia);
/* Whether the calling thread is inside dfi_cm_pull (a CNO agent run from
 * it): it must not wait for pulls to end. */
bool dfi_cm_pulling(void);
/* Progress thread: connects past their DAT timeout end with TIMED_OUT.
 * Returns whether a timed connect is still pending (keep ticking). */
bool dfi_connect_timeouts(struct dfi_ia *ia);
/* The progress thread ends the connections whose requests failed in the
 * provider while connected (dto.c's faults; cm_lock taken). */
void dfi_ep_faults(struct dfi_ia *ia);

/* rmr.c */
struct dfi_rmr;
DAT_RETURN dfi_rmr_create(DAT_PZ_HANDLE, DAT_RMR_HANDLE *);
DAT_RETURN dfi_rmr_create_for_ep(DAT_PZ_HANDLE, DAT_RMR_HANDLE *);
DAT_RETURN dfi_ep_post_rdma_read_to_rmr(DAT_EP_HANDLE, const DAT_RMR_TRIPLET *, DAT_DTO_COOKIE,
					const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
DAT_RETURN dfi_ia_ha_related(DAT_IA_HANDLE, const DAT_NAME_PTR, DAT_BOOLEAN *);
DAT_RETURN dfi_rmr_query(DAT_RMR_HANDLE, DAT_RMR_PARAM_MASK, DAT_RMR_PARAM *);
DAT_RETURN dfi_rmr_bind(DAT_RMR_HANDLE, DAT_LMR_HANDLE, const DAT_LMR_TRIPLET *,
			DAT_MEM_PRIV_FLAGS, DAT_VA_TYPE, DAT_EP_HANDLE, DAT_RMR_COOKIE,
			DAT_COMPLETION_FLAGS, DAT_RMR_CONTEXT *);
DAT_RETURN dfi_rmr_free(DAT_RMR_HANDLE);
void dfi_rmr_destroy(struct dfi_rmr *rmr);

/* progress.c */
int dfi_progress_start(struct dfi_ia *ia);
void dfi_progress_stop(struct dfi_ia *ia);
int dfi_progress_watch_cq(struct dfi_ia *ia, struct dfi_evd *evd);
void dfi_progress_unwatch_cq(struct dfi_ia *ia, struct dfi_evd *evd);
/* An SRQ EP's private CQ, watched for the EP's life (IA lock held). */
int dfi_progress_watch_rcq(struct dfi_ia *ia, struct dfi_ep *ep);
void dfi_progress_unwatch_rcq(struct dfi_ia *ia, struct dfi_ep *ep);
void dfi_progress_unpull_srq(struct dfi_ia *ia, struct dfi_srq *srq);
/* After a pass over ep's private CQ (progress thread): watch it again; a
 * stalled one is also retried on the tick. */
void dfi_progress_rearm_rcq(struct dfi_ep *ep, bool stalled);
/* ep's data may wait for an SRQ buffer: a post kicks the thread. */
void dfi_progress_mark_stalled(struct dfi_ep *ep, bool stalled);
/* Wake the thread to look at stalled SRQ EPs again (a buffer was posted). */
void dfi_progress_kick(struct dfi_ia *ia);
/* The same from a CQ reader, without the IA lock (an EP's fault, dto.c). */
void dfi_progress_kick_cq(struct dfi_ia *ia);
/* The same for every SRQ EP: a buffer was posted to a dry SRQ. */
void dfi_progress_kick_all_rcqs(struct dfi_ia *ia);
/* ep's libfabric endpoint reports to the CQs of both EVDs (IA lock taken). */
void dfi_progress_pair(struct dfi_evd *req, struct dfi_evd *recv);
/* ia posts or serves emulated atomics (an atomic, or memory with the
 * remote-atomic right): where they arrive on receive CQs, those CQs are
 * read even while the consumer drives only the request CQ. */
void dfi_progress_atomics(struct dfi_ia *ia);

/* srq.c */
DAT_RETURN dfi_srq_create(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_SRQ_ATTR *, DAT_SRQ_HANDLE *);
DAT_RETURN dfi_srq_free(DAT_SRQ_HANDLE);
DAT_RETURN dfi_srq_post_recv(DAT_SRQ_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE);
DAT_RETURN dfi_srq_query(DAT_SRQ_HANDLE, DAT_SRQ_PARAM_MASK, DAT_SRQ_PARAM *);
DAT_RETURN dfi_srq_resize(DAT_SRQ_HANDLE, DAT_COUNT);
DAT_RETURN dfi_srq_set_lw(DAT_SRQ_HANDLE, DAT_COUNT);
DAT_RETURN dfi_ep_recv_query(DAT_EP_HANDLE, DAT_COUNT *, DAT_COUNT *);
DAT_RETURN dfi_ep_set_watermark(DAT_EP_HANDLE, DAT_COUNT, DAT_COUNT);
void dfi_srq_destroy(struct dfi_srq *srq);
/* EP side, called with no lock held unless said otherwise. */
DAT_RETURN dfi_srq_attach(struct dfi_srq *srq, struct dfi_ep *ep);
int dfi_srq_ep_open_cq(struct dfi_ep *ep);		/* cm_lock held */
void dfi_srq_ep_detach(struct dfi_ep *ep);		/* ep_destroy, after the fep */
void dfi_srq_release(struct dfi_srq *srq);		/* ep_destroy, after the retire */
void dfi_srq_ep_settle(struct dfi_ep *ep);		/* completions in before a conn event */
bool dfi_srq_ep_idle(struct dfi_ep *ep);
/* The consumer reaped an SRQ receive completion of ep (recv EVD lock held). */
void dfi_srq_consumed(struct dfi_ep *ep);
/* Source of the recv EVD: move staged SRQ completions into ev[] (q.lock). */
int dfi_srq_take_staged(struct dfi_evd *evd, DAT_EVENT *ev, int max);
/* Progress thread: read ep's private CQ; true if it stays stalled. */
bool dfi_srq_ep_progress(struct dfi_ep *ep);
/* An async event naming h (only its value: h may be gone by then). */
void dfi_post_async(struct dfi_ia *ia, DAT_EVENT_NUMBER num, DAT_HANDLE h, DAT_COUNT reason);

/* The remote CQ data a receive completes with (docs/ib-extension.md): an
 * RDMA write with immediate data's notice carries (length + 1) << 32 | its
 * value, a send with invalidate 0 << 32 | the RMR context it invalidates. */
static inline uint64_t dfi_imm_write(uint32_t len, uint32_t value)
{
	return ((uint64_t)len + 1) << 32 | value;
}

static inline bool dfi_imm_invalidates(uint64_t data)
{
	return !(data >> 32);
}

static inline uint32_t dfi_imm_write_len(uint64_t data)
{
	return (uint32_t)((data >> 32) - 1);
}

/* rmr.c: a peer's send with invalidate took a receive of ep (for the log)
 * on ia: the RMR bound with context ctx is unbound, or, none being bound,
 * DAT_DTO_ERR_LOCAL_PROTECTION (as IB's).  Takes only rmr_lock. */
DAT_DTO_COMPLETION_STATUS dfi_rmr_invalidate(struct dfi_ia *ia, const void *ep,
					     DAT_RMR_CONTEXT ctx);

/* ud.c: the IB extension's UD endpoints (docs/ib-extension.md).  A UD
 * receive leaves its first DFI_UD_GRH bytes to IB's global route header,
 * as IB's does: the message lands after them, and counts them. */
#define DFI_UD_GRH	40
/* cm_lock held: an address resolution of UD EP ep with a peer, as a connect
 * (req NULL) to peer, given up at deadline (ns, 0: never; the progress
 * thread's dfi_connect_timeouts), or the accept of req from peer (whose
 * private data the passive event carries). */
DAT_RETURN dfi_ud_start(struct dfi_ep *ep, void *req, const struct sockaddr_in *peer,
			const void *pdata, size_t plen, const void *req_pdata, size_t req_plen,
			uint64_t deadline);
/* cm_lock held: a CM event of a resolution as its DAT event into *ev; the
 * connection EVD to post it on (held), or NULL: nothing to post.  An
 * ERROR takes no DAT lock but the EVD's (the IA lock may be held). */
struct dfi_evd *dfi_ud_event(struct dfi_ia *ia, struct dfi_cm_event *e, DAT_EVENT *ev);
/* cm_lock held: the EP's resolutions and address handles go, before its
 * endpoint (dat_ep_free, dat_ep_reset). */
void dfi_ud_ep_release(struct dfi_ep *ep);
DAT_RETURN dfi_ud_cm_free(DAT_EP_HANDLE ep, DAT_CONTEXT cm);
DAT_RETURN dfi_ud_ah_free(DAT_EP_HANDLE ep, const DAT_IB_ADDR_HANDLE *ah);
/* ud_lock held (read): h's backend handle, if h is one of ia's; or NULL. */
struct dfi_ah *dfi_ud_ah_get(struct dfi_ia *ia, const DAT_IB_ADDR_HANDLE *h);
/* dto.c */
DAT_RETURN dfi_ep_post_send_ud(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			       const DAT_IB_ADDR_HANDLE *ah, DAT_DTO_COOKIE cookie,
			       DAT_COMPLETION_FLAGS flags);
/* dto.c, emulated atomics (docs/ib-extension.md).  cm_lock held: the
 * outcome e (DFI_CM_ATOMIC_DONE) of one of ep's as its DTO event into *ev;
 * the request EVD to post it on (held), or NULL (suppressed, or no such
 * atomic out: a stale or forged id is dropped with a log line). */
struct dfi_evd *dfi_dto_atomic_done(struct dfi_ep *ep, const struct dfi_cm_event *e,
				    DAT_EVENT *ev);
/* ep's emulated atomics still out complete flushed (the connection ended,
 * or the EP is reset or freed): their events in *evs (malloc'ed, the
 * caller posts them on *evd, held, and frees them); how many. */
int dfi_dto_atomic_flush(struct dfi_ep *ep, DAT_EVENT **evs, struct dfi_evd **evd);
/* Then, no lock held: they are posted, evd unheld, evs freed (evd NULL:
 * nothing to do). */
void dfi_dto_atomic_post(struct dfi_evd *evd, DAT_EVENT *evs, int n);

/* conn.c: cm_lock held; ep's datagram endpoint, opened if it has none */
int dfi_ep_open_ud(struct dfi_ep *ep);

/* IA limits we report and enforce. */
#define DFI_MAX_PZS		1024
#define DFI_MAX_LMRS		65536
#define DFI_MAX_EVDS		4096
#define DFI_MAX_CNOS		4096
#define DFI_MAX_RMRS		65536
#define DFI_MAX_SRQS		1024
#define DFI_MAX_RECV_PER_SRQ	65536	/* the shared context's size */
#define DFI_MAX_EP_PER_SRQ	4096
#define DFI_MAX_LMR_BLOCK	(1u << 30)
#define DFI_MAX_LMR_VA		UINT64_C(0x00007fffffffffff)	/* max_lmr_virtual_address */
/* Endpoint defaults, for NULL or zero attributes (dat-clients.md 3.1). */
#define DFI_EP_DEFAULT_DTOS	16
#define DFI_EP_DEFAULT_IOV	4
#define DFI_EP_DEFAULT_RDMA_RD	4
#define DFI_MAX_RDMA_READ	16

/* Descriptors run out (EMFILE, ENFILE): asked after a failure whose code
 * may not say so (libfabric's fi_getinfo answers FI_ENODATA when its own
 * socket fails); 0, or the -errno of a probe eventfd. */
int dfi_fds_gone(void);
/* What a failure (-errno) is at the API edge: descriptors run out name
 * `resource`, memory DAT_RESOURCE_MEMORY, anything else is internal.  The
 * first two are logged once here ("no file descriptor left"), with what
 * failed and the limit. */
DAT_RETURN dfi_resource_err(int rc, DAT_UINT32 resource, const char *what);
/* How many EPs an IA may have (dat_ia_query's max_eps): each takes a
 * socket when it connects, so the open-file limit, less room for the
 * rest, and at most 65536. */
DAT_COUNT dfi_max_eps(void);

/* Convenience for argument rejections: log why, return the code. */
#define DFI_REJECT(code, ...) ({ dfi_reject(DFI_SS_API, __VA_ARGS__); (code); })

#endif
