/*
 * The RDM backend (FI_EP_RDM, docs/rdm.md): DAT endpoints multiplexed over
 * shared reliable-datagram endpoints.  Each DAT endpoint has a connection
 * id and generation from its IA; what it receives is tagged with them, what
 * it sends with its peer's, and its RMA goes to its peer's fabric address.
 * Connections are set up, torn down and watched over TCP by rcm.c.
 * Inside rdm/ only.
 */
#ifndef DFI_RDM_H
#define DFI_RDM_H

#include "fabric/fabric_int.h"
#include "rcm.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* Tags (docs/rdm.md): sequence (16 bits), class (2, 0: data), generation
 * (14), id (32).  Every message of a connection carries the sequence, its
 * place among the sender's messages (post.c); receives take any. */
#define RDM_GEN_BITS	14
#define RDM_GEN_MASK	((1u << RDM_GEN_BITS) - 1)
#define RDM_TAG(id, gen)	(((uint64_t)(gen) << 32) | (uint64_t)(id))
/* class 2: the connecting side's hello (ep.c, rdm_path_up); the context
 * of the accepting side's receive for it is its endpoint's, odd (a sink's
 * has bit 1 set as well, sink.c) */
#define RDM_TAG_HELLO(id, gen)	((2ull << 46) | RDM_TAG(id, (gen) & RDM_GEN_MASK))
#define RDM_HELLO_CTX(e)	((void *)((uintptr_t)(e) | 1u))
#define RDM_SEQ_SHIFT		DFI_MSGNO_SHIFT
/* what a receive ignores of a message's tag: its sequence, in as many bits
 * as the provider's tags have (the fabric's msgno_mask) */
#define RDM_TAG_SEQ_IGNORE(mask)	((uint64_t)(mask) << RDM_SEQ_SHIFT)
/* Class 1: a message for an SRQ endpoint, taken by any receive of its
 * SRQ's (srx.c), which ignore all but the class; the completion's tag
 * names the endpoint, and its sequence puts it in its place.  An
 * end whose tag is an SRQ's says so in its generation field's bit 14,
 * which RDM_TAG puts at the class's place. */
#define RDM_GEN_SRQ		(1u << RDM_GEN_BITS)
#define RDM_TAG_SRQ		(1ull << 46)
#define RDM_TAG_SRQ_IGNORE	(~(3ull << 46))
/* The goodbye (ep.c): what the side that disconnects writes into its
 * peer's goodbye word behind its data, the peer's generation in it. */
#define RDM_BYE_VAL(gen)	((1ull << 63) | ((gen) & RDM_GEN_MASK))
/* how long the connecting side tries to reach its peer's endpoint */
#define RDM_HELLO_MS		5000

/* Milliseconds of CLOCK_MONOTONIC: the clock of the backend's bounded
 * retries and waits. */
static inline uint64_t rdm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A post of the backend's own that the provider answered EAGAIN (its
 * transient state: full queues, a connection underneath): drive its
 * progress on cq and say whether to post again, for at most ms since t0
 * (rdm_now_ms).  A connection's posts have theirs in post.c. */
static inline bool rdm_eagain_retry(struct fid_cq *cq, uint64_t t0, uint64_t ms)
{
	if (rdm_now_ms() - t0 > ms)
		return false;
	(void)fi_cq_read(cq, NULL, 0);
	sched_yield();
	return true;
}

/* A CQ whose EVD is gone, kept open while an endpoint bound to it lives
 * (ep.c, rdm_cq_closing): nobody reads or waits on it. */
struct rdm_kept_cq {
	struct rdm_kept_cq *next;
	struct fid_cq *cq;
	int eps;		/* endpoints still bound to it */
};

/* An FI_EP_RDM endpoint per pair of CQs (a DAT EP's request and receive
 * EVDs), shared by the DAT endpoints bound to that pair as far as its
 * queues go: another opens when their depths would pass the provider's. */
struct rdm_ep {
	struct rdm_ep *next;
	struct dfi_cq *txcq, *rxcq;	/* NULL: that one's EVD is gone, */
	struct rdm_kept_cq *kept;	/* its CQ kept here */
	struct fid_ep *ep;
	int refs;
	size_t tx_used, rx_used;	/* the DAT EPs' queue depths on it */
	size_t nsinks;			/* sinks posted on it (sink.c) */
	size_t addr_len;
	uint8_t addr[DFI_RDM_ADDR_MAX];
};

/* A peer's RDM endpoint in the AV, shared by the connections to it: an
 * address goes into the AV once (shm counts every insert against its 256
 * peers, the same address included), and stays, unused, until the AV
 * needs the room (ep.c, rdm_peer_get). */
struct rdm_peer {
	struct rdm_peer *next;
	fi_addr_t addr;
	int refs;			/* connections using it */
	uint16_t len;
	uint8_t name[DFI_RDM_ADDR_MAX];
	int armed_fd;			/* a provider socket to it, armed (liveness.c) */
};

/* The goodbye words of RDM_BOARD_WORDS connection ids, one page
 * registered for the peers' RDMA writes (ep.c). */
#define RDM_BOARD_WORDS	512
struct rdm_board {
	uint64_t *words;
	struct dfi_mr *mr;
	uint32_t key;
};

/* A connection-id slot: its generation, and the endpoint holding it. */
struct rdm_slot {
	uint16_t gen;
	uint32_t next_free;	/* free list: the next free id, 0 none */
	struct rdm_fep *fep;
};

struct rdm_fabric {
	struct dfi_fabric *f;
	/* rcm (not thread-safe), the slots and the endpoint list: held
	 * briefly, never across a call out of the backend */
	pthread_mutex_t lock;
	struct fid_av *av;
	struct dfi_rcm *cm;
	struct rdm_ep *eps;
	struct rdm_kept_cq *kept;
	struct rdm_peer *peers;
	struct rdm_slot *slots;		/* slots[id - 1] */
	/* free ids, oldest first: an id comes back only after every other
	 * free one, so its 14-bit generation wraps that much later */
	uint32_t nslots, free_head, free_tail;
	bool bye;			/* its connections have goodbye words */
	struct rdm_board *boards;	/* boards[(id - 1) / RDM_BOARD_WORDS] */
	uint32_t nboards;
	/* sinks of ended connections (sink.c), oldest first, and the
	 * scratch region they receive into */
	struct rdm_sink *sinks, **sinks_tail;
	size_t sink_cap;		/* per endpoint (DAPL_OFI_RDM_SINKS) */
	void *scratch;
	size_t scratch_len;
	uint64_t sunk;			/* messages they took */
	/* segments the provider takes a receive: more go through a bounce
	 * buffer (bounce.c) */
	size_t rx_iov;
	int lose;			/* DAPL_OFI_FAULT_RDM_LOSE */
};

/* A DAT SRQ (srx.c): an FI_EP_RDM endpoint of its own, bound to the AV
 * and to a tagged CQ of its own, holding the SRQ's receives.  Its
 * endpoints' private CQs are software ones it fills. */
struct rdm_srx_rec;
struct rdm_srx {
	struct dfi_srx base;
	struct rdm_fabric *rf;
	struct fid_ep *ep;
	struct fid_cq *cq;
	int fd;				/* cq's wait fd; -1: polled */
	/* the reads of cq and the records; taken before rf->lock */
	pthread_mutex_t lock;
	struct rdm_srx_rec *free, *all;
	size_t posted, cap;		/* buffers posted, and how many may be */
	/* its endpoints holding completions that came before an earlier
	 * message (rf->lock): one whose gap lasts is broken */
	struct rdm_fep *gapped;
	size_t addr_len;
	uint8_t addr[DFI_RDM_ADDR_MAX];
};

#define RDM_SRX(x)	((struct rdm_srx *)(x))

struct rdm_eq {
	struct dfi_eq base;
	struct rdm_fabric *rf;
};

struct rdm_pep {
	struct dfi_pep base;
	struct rdm_fabric *rf;
	struct dfi_rcm_lis *lis;
};

/* A connection request handed to the DAT layer (its CONNREQ's req). */
struct rdm_req {
	struct rdm_fabric *rf;
	struct dfi_rcm_conn *conn;
	struct sockaddr_in peer;
	struct dfi_rcm_end remote;
};

struct rdm_fep {
	struct dfi_fep base;
	/* the data path's: set before the endpoint is reported connected */
	struct fid_ep *ep;		/* rep->ep */
	fi_addr_t peer;			/* the peer's RDM endpoint (peer_ref's) */
	uint64_t stag;			/* the peer's tag: what this one sends with */
	uint64_t rtag;			/* its own: what its receives match */
	bool acked;			/* the fabric's limits' acked (post.c) */
	bool delivered;			/* writes complete once landed (post.c) */

	struct rdm_fabric *rf;
	struct rdm_ep *rep;
	size_t tx_need, rx_need;	/* its share of rep's queues */
	struct rdm_peer *peer_ref;
	void *ctx;			/* the DAT layer's, for its events */
	uint32_t id;
	uint16_t gen;
	struct dfi_rcm_conn *conn;	/* its control channel; NULL once ended */
	struct sockaddr_in peer_in;
	/* the connection ended: a post retrying EAGAIN (post.c) stops, and
	 * the DAT layer's flush gets the EP's post lock */
	atomic_bool ended;
	int aborted;			/* why it broke (dfi_fep_aborted) */
	bool established;
	/* a UD endpoint's handshake (ud.c): its id, tags and endpoint are
	 * the UD endpoint's, it holds no id or queue share of its own, and
	 * it ends at its first event */
	bool ud_hs;
	bool hello_posted;		/* the hello's receive (rdm_hello_recv) */
	struct rdm_hello_ctx *hello_ctx;	/* its context on an op_ctx fabric (ep.c) */
	struct rdm_bounce *bounces;	/* its receives posted through a bounce (rf->lock) */
	bool sunk;			/* its sink posted (sink.c) */
	/* its goodbye word (NULL: none), and its peer's */
	uint64_t *bye_word;
	uint32_t bye_key, peer_bye_key;
	uint64_t peer_bye_addr;
	/* its messages are numbered (peer_tag): the sequence of its next
	 * (post_lock), modulo seq_mask + 1 (the fabric's msgno_mask), and
	 * the one DAPL_OFI_FAULT_RDM_LOSE loses (-1: none) */
	bool sseq_on;
	uint16_t sseq, seq_mask;
	int lose;
	/* an SRQ endpoint (srx.c; rf->lock): its completions go to scq in
	 * its peer's send order, rseq the next, those that came early wait */
	uint16_t rseq;
	struct rdm_srx *srx;
	struct dfi_cq *scq;
	struct rdm_early *early;
	/* on its SRQ's list of endpoints waiting for a message (srx.c) */
	struct rdm_fep *gap_next, **gap_prev;
	uint64_t gap_since_ms;
};

#define RDM_FEP(e)	((struct rdm_fep *)(e))

/* A UD peer's endpoint (ud.c): where its sends go, and its tag; the AV
 * entry is held while the handle lives. */
struct rdm_ah {
	struct dfi_ah base;
	struct rdm_fabric *rf;
	struct rdm_peer *peer;
	fi_addr_t addr;			/* peer's */
	uint64_t stag;
};

/* ep.c, shared with ud.c (lock held) */
int rdm_peer_get(struct rdm_fabric *rf, struct rdm_fep *e, const struct dfi_rcm_end *remote);
void rdm_self_end(const struct rdm_fep *e, struct dfi_rcm_end *end);
void rdm_conn_gone(struct rdm_fep *e);
int rdm_path_up(struct rdm_fep *e, const struct dfi_rcm_end *remote);
int rdm_hello_recv(struct rdm_fep *e);

/* liveness.c: the provider's sockets to e's peer get the peer timeout, or
 * are shut once its host went silent (lock held) */
void rdm_arm_peer(struct rdm_fep *e, unsigned timeout_ms);
void rdm_cut_peer(struct rdm_fep *e);

/* ud.c: unreliable datagrams */
void rdm_ud_resolved(struct rdm_fep *hs, struct dfi_cm_event *ev);
int dfi_rdm_ud_connect(struct dfi_fep *ud, const struct sockaddr_in *dest, const void *pdata,
		       size_t plen, void *ctx, struct dfi_fep **hs);
int dfi_rdm_ud_accept(struct dfi_fep *ud, void *req, const void *pdata, size_t plen, void *ctx,
		      struct dfi_fep **hs);
int dfi_rdm_post_send_ud(struct dfi_fep *ud, const struct dfi_ah *ah, const struct dfi_sge *sg,
			 int n, void *ctx);
void dfi_rdm_ah_free(struct dfi_ah *ah);

/* ep.c: an FI_EP_RDM endpoint bound to the IA's AV and to tx and rx (one
 * bind if they are one CQ), enabled, its name in addr (*len: its room in,
 * the name's length out).  0 or libfabric's error, logged; nothing stays
 * open.  Lock held. */
int rdm_ep_open(struct rdm_fabric *rf, struct fid_cq *tx, struct fid_cq *rx, struct fid_ep **ep,
		uint8_t *addr, size_t *len);
/* ep.c: a few passes of e's provider progress, reading no completion
 * (lock held) */
void rdm_drain(struct rdm_fep *e);

/* sink.c: what arrives for a connection that ended.  rdm_sinks_init: at
 * the fabric's open.  The rest with the lock held.  rdm_sink_open: once e
 * gets no more receives, a sink for its tag (once).  rdm_sink_done: a
 * completion of the backend's own receive (cq.c's own_done, through
 * ep.c): false if it is not a sink's.  rdm_sinks_drop: rep's sinks freed as it
 * closes, or all (rep NULL) and the scratch region, at the fabric's
 * close. */
struct rdm_sink;
void rdm_sinks_init(struct rdm_fabric *rf);
void rdm_sink_open(struct rdm_fep *e);
bool rdm_sink_done(struct rdm_fabric *rf, void *ctx, int err, size_t len);
/* bounce.c: a receive of more segments than the provider takes, into a
 * buffer of ours, scattered at its completion.  rdm_bounce_new: listed on
 * e (NULL: no memory), then posted with its `posted` context;
 * rdm_bounce_drop: one whose post failed.  rdm_bounce_done: the completion
 * c of a bounce's context (rdm_is_bounce_ctx), scattered, becomes the DAT
 * layer's.  rdm_bounce_cancel: the bounce posted for the DAT layer's ctx,
 * cancelled.  rdm_bounces_orphan: e closes (rf->lock held); its bounces
 * are freed at their completions. */
struct rdm_bounce {
	struct dfi_opctx o;		/* its context on an op_ctx fabric */
	struct rdm_bounce *next, **prev;	/* its endpoint's (rf->lock) */
	struct rdm_fep *e;		/* NULL once its endpoint closed */
	void *ctx;			/* the DAT layer's, unwrapped */
	void *posted;			/* what the provider was handed */
	int n;
	struct dfi_sge sg[DFI_MAX_SGE];
	size_t len;
	uint8_t buf[];
};
bool rdm_is_bounce_ctx(const void *ctx);
struct rdm_bounce *rdm_bounce_new(struct rdm_fep *e, const struct dfi_sge *sg, int n, void *ctx);
void rdm_bounce_drop(struct rdm_fabric *rf, struct rdm_bounce *b);
void rdm_bounce_done(struct rdm_fabric *rf, struct dfi_comp *c);
void rdm_bounce_cancel(struct rdm_fep *e, void *ctx);
void rdm_bounces_orphan(struct rdm_fep *e);

/* rf->lock held: the completion of a hello's receive (ep.c), whose
 * context, on an op_ctx fabric, is freed now */
void rdm_hello_done(struct rdm_fabric *rf, void *ctx);
void rdm_sinks_drop(struct rdm_fabric *rf, const struct rdm_ep *rep);

/* bye.c: the goodbye (lock held) */
uint64_t *rdm_bye_word(struct rdm_fabric *rf, uint32_t id, uint32_t *key);
void rdm_bye_boards_free(struct rdm_fabric *rf);
void rdm_bye_send(struct rdm_fep *e);
bool rdm_bye_came(void *arg, void *ctx);

/* srx.c: shared receive queues */
int dfi_rdm_srx_open(struct dfi_fabric *f, size_t size, size_t iov_limit, struct dfi_srx **srx);
void dfi_rdm_srx_close(struct dfi_srx *srx);
int dfi_rdm_srx_post_recv(struct dfi_srx *srx, const struct dfi_sge *sg, int n, void *ctx);
int dfi_rdm_srx_cq_open(struct dfi_srx *srx, size_t size, struct dfi_cq **cq);
void dfi_rdm_srx_progress(struct dfi_srx *srx);
/* an SRQ endpoint's connection ended or it closes (lock held): what waits
 * for an earlier message goes to its CQ now */
void rdm_srx_fep_gone(struct rdm_fep *e);

/* shmexit.c: shm's region files of this process go at its exit */
void dfi_rdm_shm_unlink_at_exit(void);

/* post.c */
int dfi_rdm_post_send(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx);
int dfi_rdm_post_inject(struct dfi_fep *e, const struct dfi_sge *sg, int n);
int dfi_rdm_post_recv(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx);
int dfi_rdm_post_write(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		       uint32_t rkey, void *ctx);
int dfi_rdm_post_read(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		      uint32_t rkey, void *ctx);
int dfi_rdm_post_senddata(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t data,
			  void *ctx);
int dfi_rdm_post_atomic(struct dfi_fep *e, enum dfi_atomic_op op, const uint64_t *operand,
			const uint64_t *compare, uint64_t *result, struct dfi_mr *result_mr,
			uint64_t raddr, uint32_t rkey, void *ctx);
int dfi_rdm_post_atomic_emul(struct dfi_fep *e, enum dfi_atomic_op op, uint64_t operand,
			     uint64_t compare, uint64_t raddr, uint32_t rkey, uint64_t id);

#endif
