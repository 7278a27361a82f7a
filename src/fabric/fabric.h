/*
 * dapl-ofi fabric layer: everything that calls libfabric.  No DAT types.
 * One interface, two backends behind it (fabric_int.h): msg/ maps each
 * DAT endpoint onto a libfabric FI_EP_MSG endpoint, rdm/ multiplexes them
 * over shared FI_EP_RDM endpoints (docs/rdm.md).  The caller does not
 * know which one serves a fabric, but for dfi_fabric_limits' rdm.
 * Errors are 0 / -FI_E* (negative errno); the first detector logs once.
 */
#ifndef DFI_FABRIC_H
#define DFI_FABRIC_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <stdbool.h>

struct dfi_fabric;
struct dfi_mr;

/* Which libfabric endpoint a fabric maps DAT endpoints onto (ia_params'
 * ep=): FI_EP_MSG (msg/), FI_EP_RDM (rdm/), or MSG where the provider has
 * it and RDM otherwise. */
enum dfi_ep_kind { DFI_EP_ANY, DFI_EP_MSG, DFI_EP_RDM };

struct dfi_fabric_limits {
	size_t iov_limit;		/* local IOVs per request */
	size_t rx_iov_limit;		/* and per receive (psm3: 13 and 1) */
	size_t rma_iov_limit;
	size_t tx_size, rx_size;	/* queue depths granted */
	uint64_t max_msg_size;
	size_t mr_key_size;
	size_t inject_size;		/* dfi_post_inject's limit (0: none) */
	bool acked;			/* sends complete once the peer has them (RDM) */
	size_t cq_data_size;		/* bytes of remote CQ data a post may carry */
	bool atomic;			/* FI_ATOMIC: dfi_post_atomic works */
	/* no FI_ATOMIC, but dfi_post_atomic_emul works: the peer applies
	 * it, its outcome a CM event (DFI_CM_ATOMIC_DONE) */
	bool atomic_emul;
	/* the private data a connect, accept or reject may carry: less than
	 * DFI_PDATA_MAX where the MSG backend's emulated atomics take some */
	size_t pdata_max;
	/* receive CQs carry the fabric's own completions (msg/'s emulated
	 * atomics): such a CQ must be read even while the consumer drives
	 * only the request CQ of the same endpoints */
	bool rx_cq_own;
	bool rdm;			/* the RDM backend serves it (docs/rdm.md) */
	bool ud;			/* dfi_ud_connect and the rest work */
	/* an endpoint's completions of one queue may come out of posted
	 * order (RDM providers: tcp;ofi_rxm completes a large message after a
	 * small one behind it); the DAT layer puts them back (dto.c) */
	bool unordered;
	/* each receive's completion says which message of its connection it
	 * took (dfi_comp_msgno), modulo msgno_mask + 1: the RDM backend
	 * numbers them, as a stream that may lose some underneath (docs/rdm.md,
	 * "Numbered messages"), in the tag bits the provider leaves above the
	 * 48 it matches (net keeps bit 63 for itself); msgno_mask 0: no room */
	bool numbered;
	uint16_t msgno_mask;
	/* a send may overtake an RDMA write posted before it on the same
	 * endpoint (no FI_ORDER_SAW: efa, cxi, opx, psm3): the DAT layer holds
	 * such a send until the writes have completed, and writes ask for
	 * FI_DELIVERY_COMPLETE, so that their data has landed (dto.c) */
	bool writes_unordered;
	/* its CM reports a peer's connection events across connections in
	 * the order the peer caused them (the RDM backend's rcm: docs/rdm.md,
	 * "Order across connections"); libfabric's CM does not */
	bool cm_ordered;
	/* its CQs have no wait fd (shm, efa in 1.17): they are opened with
	 * none and polled (dfi_cq_fd answers -1; progress.c, polling) */
	bool polled;
	/* its wait fds never settle (libfabric net: fi_trywait answers 0
	 * and the fd stays readable with nothing to read, libfabric #8947):
	 * its progress threads never run at real-time priority (progress.c) */
	bool unsettled;
	/* its provider writes in each operation's context while the operation
	 * is in flight (mode FI_CONTEXT or FI_CONTEXT2: psm3, opx): every ctx
	 * handed to a post or a cancel is a struct dfi_opctx (below) */
	bool op_ctx;
	unsigned prov_major, prov_minor;	/* the libfabric provider's version */
	unsigned fi_major, fi_minor;		/* libfabric's */
	char prov_name[64];
	char fabric_name[128];
	char domain_name[128];
};

/* Resolve `where` (netdev, IPv4 literal or host name) to an IPv4 address.
 * 0 or -ENOENT (nothing by that name) / -EADDRNOTAVAIL (no IPv4 on it). */
int dfi_resolve_ipv4(const char *where, struct sockaddr_in *out);

/* Open fabric + domain of provider `prov` bound to `addr`, for the backend
 * kind asks for; without atomics (ia_params atomics=0) the limits say
 * none, native or emulated, and private data keeps DFI_PDATA_MAX.  On
 * failure writes a one-line reason into err and returns -ENOENT (libfabric
 * has no such provider), -ENODEV (it has no endpoint dapl-ofi serves on
 * that address, or one it refuses, with the reason) or another negative
 * errno. */
int dfi_fabric_open(const char *prov, const struct sockaddr_in *addr, const char *domain,
		    enum dfi_ep_kind kind, bool atomics, struct dfi_fabric **out, char *err,
		    size_t errlen);
void dfi_fabric_close(struct dfi_fabric *f);
/* What dfi_fabric_open would open, found with the same fi_getinfo but not
 * opened (daplofi-info): its names and limits in *lim, or the same errors. */
int dfi_fabric_probe(const char *prov, const struct sockaddr_in *addr, const char *domain,
		     enum dfi_ep_kind kind, bool atomics, struct dfi_fabric_limits *lim, char *err,
		     size_t errlen);
/* The libfabric providers that offer an endpoint dapl-ofi serves on some
 * address: FI_EP_MSG ones, then FI_EP_RDM ones marked so, as
 * "tcp, net, shm (rdm), ...". */
void dfi_fabric_providers(char *buf, size_t len);
/* The same providers as a list, for daplofi-info --generate: FI_EP_MSG
 * ones, then FI_EP_RDM ones, each with whether it addresses its endpoints
 * by IP (a dat.conf entry per interface) or names them itself (shm: one per
 * host).  Fills at most max; returns the count. */
struct dfi_prov_desc {
	char name[64];
	bool rdm;
	bool by_ip;
};
int dfi_fabric_provider_list(struct dfi_prov_desc *out, int max);
const struct dfi_fabric_limits *dfi_fabric_limits(const struct dfi_fabric *f);

/* Access bits for dfi_mr_reg. */
#define DFI_MR_LOCAL_READ	0x1	/* source of sends and RDMA writes */
#define DFI_MR_LOCAL_WRITE	0x2	/* target of receives and RDMA reads */
#define DFI_MR_REMOTE_READ	0x4
#define DFI_MR_REMOTE_WRITE	0x8
#define DFI_MR_REMOTE_ATOMIC	0x10	/* a peer's emulated atomics may touch it */

/* Register [addr, addr+len) for virtual-address RMA.  *key is the remote
 * key (fits DAT's 32-bit rmr_context, or -ERANGE). */
int dfi_mr_reg(struct dfi_fabric *f, const void *addr, size_t len, unsigned access,
	       struct dfi_mr **mr, uint32_t *key);
void dfi_mr_dereg(struct dfi_mr *mr);

/* ------------------------------------------------------------ connections
 * One event queue per IA carries every connection-management event.  Its
 * fd and the CQ fds are watched by the IA's progress thread (progress.c):
 * libfabric's tcp provider moves connections and RMA targets only when
 * someone calls into it. */

struct dfi_eq;
struct dfi_pep;
struct dfi_fep;
struct dfi_cq;

#define DFI_PDATA_MAX 256	/* libfabric CM data limit (FI_OPT_CM_DATA_SIZE) */

enum dfi_cm_type {
	DFI_CM_CONNREQ,		/* on a listener: ctx = the listener's; req set */
	DFI_CM_CONNECTED,	/* ctx = the endpoint's */
	DFI_CM_SHUTDOWN,	/* ctx = the endpoint's */
	DFI_CM_ERROR,		/* ctx = endpoint or listener; err = errno */
	DFI_CM_UD_RESOLVED,	/* ctx = the UD handshake's; ah, qpn set */
	DFI_CM_ATOMIC_DONE,	/* ctx = the endpoint's; id, err, value set */
};

struct dfi_cm_event {
	enum dfi_cm_type type;
	void *ctx;
	void *req;		/* CONNREQ: opaque request, for accept/reject */
	int err;		/* ERROR: positive errno (ECONNREFUSED: rejected) */
	bool ud;		/* CONNREQ: from a UD endpoint (dfi_ud_accept it) */
	struct dfi_ah *ah;	/* UD_RESOLVED: the peer's, now the caller's */
	uint32_t qpn;		/* UD_RESOLVED: the peer endpoint's number */
	uint64_t id, value;	/* ATOMIC_DONE: the post's id, the old value */
	size_t plen;
	uint8_t pdata[DFI_PDATA_MAX];
};

int dfi_eq_open(struct dfi_fabric *f, struct dfi_eq **eq);
void dfi_eq_close(struct dfi_eq *eq);
int dfi_eq_fd(struct dfi_eq *eq);
/* Before sleeping on the fd: 0 armed and empty, -EAGAIN events pending
 * (libfabric's EQ signal stays set after fi_eq_read until a try-wait). */
int dfi_eq_trywait(struct dfi_eq *eq);
/* 1: an event was read; 0: none; -errno: failure. */
int dfi_eq_read(struct dfi_eq *eq, struct dfi_cm_event *ev);
void dfi_connreq_free(struct dfi_eq *eq, void *req);
/* The requesting peer's address. */
void dfi_connreq_peer(struct dfi_eq *eq, void *req, struct sockaddr_in *peer);

/* Listen on addr:port (port 0: any).  -EADDRINUSE when taken. */
int dfi_pep_listen(struct dfi_fabric *f, struct dfi_eq *eq, uint16_t port, void *ctx,
		   struct dfi_pep **pep, uint16_t *bound_port);
void dfi_pep_close(struct dfi_pep *pep);
int dfi_pep_reject(struct dfi_pep *pep, void *req, const void *pdata, size_t plen);

/* Completion queues, FI_WAIT_FD. */
/* Completions taken per fi_cq_read.  Each call runs libfabric's progress
 * (on tcp an epoll_wait), so reading a burst in fewer, larger calls is
 * the cheapest way to empty a CQ.  The EVD core asks for as many per fill
 * (DFI_EVQ_FILL_BATCH; checked in dto.c). */
#define DFI_CQ_BATCH 64
/* Laid out as libfabric's struct fi_cq_tagged_entry (context, flags, len,
 * buf, data, tag: checked in cq.c), so that fi_cq_read fills an array of
 * these in place and err and imm take the flags' word: no bounce buffer,
 * no copy. */
struct dfi_comp {
	void *ctx;		/* the posting's context */
	int err;		/* 0 or positive errno (ECANCELED: flushed) */
	uint32_t imm;		/* 1: a receive that carried remote CQ data */
	size_t len;		/* bytes received (receives only) */
	void *buf_;
	uint64_t data;		/* the remote CQ data, if imm */
	uint64_t tag;		/* a tagged receive's: dfi_comp_msgno */
};

/* A numbered fabric's receive (dfi_fabric_limits' msgno_mask): which of
 * its connection's messages it took, counted from 0 in the order the peer
 * posted them, modulo msgno_mask + 1.  The n-th receive posted on a
 * connection must take its n-th message: another means the ones between
 * were lost. */
#define DFI_MSGNO_SHIFT	48
static inline uint16_t dfi_comp_msgno(const struct dfi_comp *c)
{
	return (uint16_t)(c->tag >> DFI_MSGNO_SHIFT);
}
int dfi_cq_open(struct dfi_fabric *f, size_t size, struct dfi_cq **cq);
void dfi_cq_close(struct dfi_cq *cq);
/* Up to n completions (errors included).  >= 0 or -errno. */
int dfi_cq_read(struct dfi_cq *cq, struct dfi_comp *c, int n);
/* Up to n completions, without a copy: *c points at them in the CQ's
 * read-ahead, valid until the next call on cq.  The read-ahead is refilled
 * (one fi_cq_read of up to DFI_CQ_BATCH) only when it is empty, so a
 * consumer taking one completion at a time still reads the CQ in batches;
 * fewer than n means the read-ahead ran out, not that the CQ is empty.
 * A CQ is read either this way or by dfi_cq_read, never both. */
int dfi_cq_take(struct dfi_cq *cq, const struct dfi_comp **c, int n);
/* 0: armed and empty; -EAGAIN: completions pending (read ahead included). */
int dfi_cq_trywait(struct dfi_cq *cq);
/* The fd that becomes readable when cq has completions (after a trywait).
 * A poll-fd CQ's fd is a mirror of the provider's poll fds (cq.c), brought
 * up to date for whoever sleeps on it:
 *   - the progress thread: dfi_cq_watch(cq, true), then dfi_cq_fd before
 *     each arm of the fd, dfi_cq_watch(cq, false) once it is out of its set;
 *   - a waiter: dfi_cq_sleep_fd before each sleep, dfi_cq_slept after it. */
int dfi_cq_fd(struct dfi_cq *cq);
int dfi_cq_sleep_fd(struct dfi_cq *cq);
void dfi_cq_slept(struct dfi_cq *cq);
void dfi_cq_watch(struct dfi_cq *cq, bool on);
/* Nobody is to sleep on cq's fd for a while (its consumer polls): empty a
 * mirror that neither a waiter nor the progress thread holds, so that the
 * consumer's packets no longer wake an epoll set in the kernel.  The next
 * sleeper fills it again. */
void dfi_cq_quiet(struct dfi_cq *cq);
/* For a poll-fd CQ, a pass without reading completions, and the fd brought
 * up to date: after an EP bound to cq connected (its socket joins the
 * CQ's poll fds at the next pass of this CQ, and a sleeper must see it). */
void dfi_cq_progress(struct dfi_cq *cq);

/* Shared receive contexts (DAT SRQs).  Receives posted to one are taken
 * by whichever endpoint bound to it gets a message first; the completion
 * goes to the CQ that endpoint bound with FI_RECV (libfabric tcp 1.17, as
 * fi_endpoint(3) says), with the posting's ctx.  Closing one releases what
 * is still posted without completions.  size: how many may be posted. */
struct dfi_srx;
int dfi_srx_open(struct dfi_fabric *f, size_t size, size_t iov_limit, struct dfi_srx **srx);
void dfi_srx_close(struct dfi_srx *srx);
/* The private receive CQ of an endpoint to be opened on srx (its rxcq):
 * a read of it gives that endpoint's completions of srx's receives.
 * Read, try-waited and closed as any CQ; closed after its endpoint. */
int dfi_srx_cq_open(struct dfi_srx *srx, size_t size, struct dfi_cq **cq);
/* Progress srx with no endpoint's CQ to pull it: on a polled fabric whose
 * target progress answers a message (rxd), the sender of one that came
 * for an ended connection waits for it.  Any thread. */
void dfi_srx_progress(struct dfi_srx *srx);

/* Active endpoints.  Created from a connection request (passive side, req)
 * or to connect (active side, req NULL: the peer is dfi_fep_connect's),
 * bound to the EQ and CQs (and to srx, if not NULL: its receives then come
 * from there), enabled.  The endpoint owns the request once it is open; on
 * failure it stays the caller's. */
int dfi_fep_open(struct dfi_fabric *f, struct dfi_eq *eq, void *req,
		 struct dfi_cq *txcq, struct dfi_cq *rxcq,
		 struct dfi_srx *srx, size_t tx_size, size_t rx_size, void *ctx,
		 struct dfi_fep **fep);
int dfi_fep_connect(struct dfi_fep *fep, const struct sockaddr_in *dest, const void *pdata,
		    size_t plen);
int dfi_fep_accept(struct dfi_fep *fep, const void *pdata, size_t plen);
int dfi_fep_shutdown(struct dfi_fep *fep);
/* Cancel the receive posted with context ctx, if libfabric still queues it
 * (it then completes with ECANCELED); any other ctx is ignored. */
void dfi_fep_cancel(struct dfi_fep *fep, void *ctx);
/* The DAT layer posts no more receives on fep (its connection ended and
 * they were cancelled): what still arrives for it may be discarded
 * (rdm/sink.c).  Its close says the same. */
void dfi_fep_recvs_over(struct dfi_fep *fep);
void dfi_fep_close(struct dfi_fep *fep);
/* The same for an endpoint bound to the CQs cqs[0..n) (NULLs allowed, at
 * most 4): their fds stop watching its socket before its number is free. */
void dfi_fep_close_bound(struct dfi_fep *fep, struct dfi_cq *const *cqs, int n);
int dfi_fep_peer(struct dfi_fep *fep, struct sockaddr_in *peer);
/* Once connecting (active side, right after dfi_fep_connect to dest) and
 * once connected (dest NULL): have the kernel end the connection when the
 * peer stays silent for timeout_ms (0: never), data in flight or not
 * (liveness.c).  Connected, it checks the socket armed at the connect is
 * the endpoint's.  -ENOENT: the endpoint has no socket of its own to arm. */
int dfi_fep_arm_liveness(struct dfi_fep *fep, unsigned timeout_ms, const struct sockaddr_in *dest);
/* After its shutdown: why the connection was broken rather than closed by
 * the peer.  ETIMEDOUT: the kernel gave up on a silent peer (an armed
 * endpoint only); EPROTO: a request failed, here or at the peer, or the
 * peer broke the protocol (the backend said which); 0: not broken. */
int dfi_fep_aborted(const struct dfi_fep *fep);
/* A connected endpoint's socket, under the provider, shut both ways: the
 * provider's next pass over it ends what it was receiving through its
 * own receive path (an RDMA read's response: once), and disables the
 * endpoint.  0, or -ENOTSUP where the endpoint has no socket of its own
 * (the RDM backend, verbs). */
int dfi_fep_cut(struct dfi_fep *fep);
/* A request of the endpoint failed in the provider while its connection
 * was up: the connection ends, at both ends, as a broken IB QP's does
 * (the RDM backend breaks it; a connected endpoint's provider has ended
 * it already, and its own event follows).  The progress thread's call,
 * under the IA's CM lock (dfi_ep_faults). */
void dfi_fep_fault(struct dfi_fep *fep, int err);

struct dfi_sge {
	void *addr;
	size_t len;
	struct dfi_mr *mr;	/* NULL: none needed */
};
/* Segments per post, at most: the EP and IA limits are capped here
 * (ep.c, ia.c), and every segment array of a post is this long. */
#define DFI_MAX_SGE	16
/* The context of a post on a fabric whose limits say op_ctx: the provider's
 * scratch first, as FI_CONTEXT2 asks (FI_CONTEXT's is its first half), and
 * the caller's context, which the completion carries instead of this.
 * It must stay put from the post until its completion is read; `ctx` is
 * set once, when it is made (the provider writes only `prov`). */
struct dfi_opctx {
	void *prov[8];		/* struct fi_context2 */
	void *ctx;
};
/* Post operations; ctx comes back in the completion.  -EAGAIN: queue full.
 * Where the limits say op_ctx, ctx is a struct dfi_opctx and the
 * completion carries its `ctx`. */
int dfi_post_send(struct dfi_fep *fep, const struct dfi_sge *sg, int n, void *ctx);
/* A send of at most the limits' inject_size bytes, copied out before the
 * call returns, that completes with no CQ entry: its delivery is never
 * reported, failed or not (a failure ends the connection).  0, -EAGAIN
 * (queue full) or a negative errno. */
int dfi_post_inject(struct dfi_fep *fep, const struct dfi_sge *sg, int n);
int dfi_post_recv(struct dfi_fep *fep, const struct dfi_sge *sg, int n, void *ctx);
int dfi_srx_post_recv(struct dfi_srx *srx, const struct dfi_sge *sg, int n, void *ctx);
int dfi_post_write(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t raddr,
		   uint32_t rkey, void *ctx);
/* A message (of sg, n: none may be 0) carrying `data` as remote CQ data:
 * it takes a posted receive at the peer, whose completion has imm set
 * (only where the limits' cq_data_size is 8 or more). */
int dfi_post_senddata(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t data,
		      void *ctx);
/* A native 8-byte atomic at raddr/rkey (only where the limits say atomic):
 * fetch-and-add of *operand, or compare-and-swap (*compare, then *operand
 * as the new value); the old value lands in *result.  operand and compare
 * must stay valid until the completion. */
enum dfi_atomic_op { DFI_ATOMIC_FADD, DFI_ATOMIC_CSWAP };
int dfi_post_atomic(struct dfi_fep *fep, enum dfi_atomic_op op, const uint64_t *operand,
		    const uint64_t *compare, uint64_t *result, struct dfi_mr *result_mr,
		    uint64_t raddr, uint32_t rkey, void *ctx);
int dfi_post_read(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t raddr,
		  uint32_t rkey, void *ctx);
/* An emulated one (where the limits say atomic_emul): the operands go to
 * the peer, which applies the operation to memory registered with
 * DFI_MR_REMOTE_ATOMIC; no completion comes from a CQ, but a CM event,
 * DFI_CM_ATOMIC_DONE with id: err 0 and the old value, or EACCES (no such
 * key, range or right at the peer).  Not ordered with the endpoint's
 * other posts.  0, -EAGAIN or -ENOTCONN. */
int dfi_post_atomic_emul(struct dfi_fep *fep, enum dfi_atomic_op op, uint64_t operand,
			 uint64_t compare, uint64_t raddr, uint32_t rkey, uint64_t id);

/* ------------------------------------------------ unreliable datagrams
 * The IB extension's UD endpoints, where the limits say ud (the RDM
 * backend): an endpoint from dfi_fep_open, never connected, sends to
 * address handles, each resolved by a handshake with a peer's UD endpoint
 * over the CM: a connect to the peer's listener, or the accept of a
 * CONNREQ with ud set.  A handshake reports once, with its ctx:
 * DFI_CM_UD_RESOLVED (the peer's address handle; the accepting side's
 * private data on the connecting side) or DFI_CM_ERROR (ECONNREFUSED:
 * rejected).  *hs is closed with dfi_fep_close, reported or not; ud
 * outlives its handshakes.  Messages travel as the endpoint's own sends
 * (reliable, in order), and land in the peer's posted receives. */
struct dfi_ah;
int dfi_ud_connect(struct dfi_fep *ud, const struct sockaddr_in *dest, const void *pdata,
		   size_t plen, void *ctx, struct dfi_fep **hs);
int dfi_ud_accept(struct dfi_fep *ud, void *req, const void *pdata, size_t plen, void *ctx,
		  struct dfi_fep **hs);
/* A send from ud to ah's endpoint; -EAGAIN: queue full. */
int dfi_post_send_ud(struct dfi_fep *ud, const struct dfi_ah *ah, const struct dfi_sge *sg,
		     int n, void *ctx);
void dfi_ah_free(struct dfi_ah *ah);

#endif
