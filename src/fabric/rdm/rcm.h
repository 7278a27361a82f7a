/*
 * The RDM backend's connection manager (docs/rdm.md, section 3): DAT
 * connections set up over TCP between two IAs, each one's handshake socket
 * kept as its control channel and its liveness.  One per IA.  No
 * libfabric: the fabric addresses it carries are opaque bytes.
 *
 * Not thread-safe: its caller serializes every call (the DAT layer holds
 * the IA's cm_lock), and sleeps on dfi_rcm_fd between dfi_rcm_read calls.
 */
#ifndef DFI_RDM_RCM_H
#define DFI_RDM_RCM_H

#include "wire.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dfi_rcm;
struct dfi_rcm_lis;		/* a listener: a DAT service point */
struct dfi_rcm_conn;		/* one DAT connection, or a request for one */

/* What one side tells its peer about its end of a connection. */
struct dfi_rcm_end {
	uint32_t id;			/* its connection id */
	uint16_t gen;			/* and generation (14 bits; bit 14: an SRQ's tag) */
	uint16_t addr_len;		/* its fabric address (1..DFI_RDM_ADDR_MAX) */
	bool ud;			/* REQ: an unreliable-datagram endpoint's */
	/* its goodbye word (dfi_rcm_want_goodbye): where the peer writes
	 * behind its data before its DREQ; 0 and 0: none */
	uint64_t bye_addr;
	uint32_t bye_key;
	uint8_t addr[DFI_RDM_ADDR_MAX];
};

enum dfi_rcm_ev_type {
	DFI_RCM_CONNREQ,	/* a request on a listener: accept or reject ev.conn */
	DFI_RCM_ESTABLISHED,	/* connecting side on REP (then dfi_rcm_confirm),
				 * accepting side on RTU */
	DFI_RCM_REJECTED,	/* connecting side: the peer refused (reason) */
	DFI_RCM_DISCONNECTED,	/* DREQ (and, where wanted, the peer's goodbye) or
				 * DREP came, after every ESTABLISHED the peer's
				 * IA caused before it (docs/rdm.md), or the
				 * peer's socket closed */
	DFI_RCM_BROKEN,		/* err: the kernel gave up (ETIMEDOUT), the connect
				 * failed (ECONNREFUSED: nobody listens), or the peer
				 * broke the protocol (EPROTO) */
	DFI_RCM_ATOMICREP,	/* an answer to dfi_rcm_atomic: id, err, value */
};

struct dfi_rcm_event {
	enum dfi_rcm_ev_type type;
	void *ctx;			/* the listener's (CONNREQ) or the connection's */
	struct dfi_rcm_conn *conn;
	int err;			/* BROKEN: a positive errno */
	uint8_t reason;			/* REJECTED: enum dfi_rdm_reason */
	struct sockaddr_in peer;	/* CONNREQ: where the request came from */
	uint64_t qual;			/* CONNREQ: the qualifier it asked for */
	uint64_t ia;			/* CONNREQ, ESTABLISHED: the peer IA's instance */
	struct dfi_rcm_end remote;	/* CONNREQ, ESTABLISHED (connecting side) */
	uint64_t id, value;		/* ATOMICREP */
	size_t plen;			/* CONNREQ, ESTABLISHED, REJECTED */
	uint8_t pdata[DFI_RDM_PDATA_MAX];
};

/* On the IPv4 address self (its port ignored); a peer silent for
 * timeout_ms ends its connections (0: never), and a request that does not
 * arrive whole within it is dropped.  0 or -errno. */
int dfi_rcm_open(const struct sockaddr_in *self, unsigned timeout_ms, struct dfi_rcm **out);
/* Every socket closed, every object freed: no event after. */
void dfi_rcm_close(struct dfi_rcm *cm);
/* Readable when dfi_rcm_read has something to do. */
int dfi_rcm_fd(const struct dfi_rcm *cm);
/* The next event: 1, 0 if none is due now, or -errno. */
int dfi_rcm_read(struct dfi_rcm *cm, struct dfi_rcm_event *ev);
/* This IA's instance id, random at open. */
uint64_t dfi_rcm_instance(const struct dfi_rcm *cm);

/* Listen on port (0: any, *bound says which).  -EADDRINUSE when taken. */
int dfi_rcm_listen(struct dfi_rcm *cm, uint16_t port, void *ctx, struct dfi_rcm_lis **out,
		   uint16_t *bound);
/* The listener goes; requests it had not delivered yet are refused
 * (REJ, no listener).  Delivered ones stay the caller's to answer. */
void dfi_rcm_unlisten(struct dfi_rcm_lis *lis);

/* Connect to dest (its port: the qualifier's low 16 bits) for qual.
 * Events for it carry ctx.  0 or -errno (-EINVAL: plen or self's
 * address out of range). */
int dfi_rcm_connect(struct dfi_rcm *cm, const struct sockaddr_in *dest, uint64_t qual,
		    const struct dfi_rcm_end *self, const void *pdata, size_t plen, void *ctx,
		    struct dfi_rcm_conn **out);
/* Answer a CONNREQ.  Accept: its events carry ctx from now on, and
 * ESTABLISHED follows the peer's RTU (or BROKEN, if the peer went).
 * Reject: the request is answered and freed. */
int dfi_rcm_accept(struct dfi_rcm_conn *req, const struct dfi_rcm_end *self, const void *pdata,
		   size_t plen, void *ctx);
int dfi_rcm_reject(struct dfi_rcm_conn *req, enum dfi_rdm_reason reason, const void *pdata,
		   size_t plen);
/* The connecting side, after its ESTABLISHED: its end is ready (the
 * caller made its fabric path to the peer, docs/rdm.md), and the peer may
 * report the connection: RTU goes.  0 (also when already confirmed),
 * -ECONNRESET (the peer went: BROKEN follows) or -ENOTCONN. */
int dfi_rcm_confirm(struct dfi_rcm_conn *c);
/* Ask the peer to disconnect: DISCONNECTED follows (its DREP, or its
 * socket's end).  -ENOTCONN if not established. */
int dfi_rcm_disconnect(struct dfi_rcm_conn *c);
/* Emulated 8-byte atomics (docs/rdm.md): an IA serves its peers' with fn,
 * which applies one to its memory and returns 0 or a positive errno (the
 * answer's status), the old value in *old.  Called inside dfi_rcm_read. */
typedef uint32_t (*dfi_rcm_atomic_fn)(void *arg, uint8_t op, uint64_t addr, uint32_t key,
				      uint64_t operand, uint64_t compare, uint64_t *old);
void dfi_rcm_serve_atomics(struct dfi_rcm *cm, dfi_rcm_atomic_fn fn, void *arg);
/* Ask the peer of an established connection to apply one (op: DFI_RDM_
 * ATOMIC_*); ATOMICREP with id follows, or the connection's end.  0,
 * -EAGAIN (the peer is not reading) or -ENOTCONN. */
int dfi_rcm_atomic(struct dfi_rcm_conn *c, uint8_t op, uint64_t id, uint64_t addr,
		   uint32_t key, uint64_t operand, uint64_t compare);
/* The goodbye (docs/rdm.md, "The goodbye"): a DREQ travels the socket,
 * not behind the data on the fabric, so the caller writes the peer's
 * goodbye word over the fabric behind its data before its DREQ.  On a
 * connection it wants that for (dfi_rcm_want_goodbye), the DISCONNECTED of
 * the peer's DREQ waits until fn(arg, the connection's ctx) says the
 * peer's write has landed in its own word, or DFI_RCM_BYE_MS.  fn is
 * called inside dfi_rcm_read.  A socket that ends without DREQ (the peer's
 * process is gone) does not wait, nor does the side that sent the DREQ. */
#define DFI_RCM_BYE_MS	2000
typedef bool (*dfi_rcm_bye_fn)(void *arg, void *ctx);
void dfi_rcm_serve_goodbye(struct dfi_rcm *cm, dfi_rcm_bye_fn fn, void *arg);
void dfi_rcm_want_goodbye(struct dfi_rcm_conn *c);
/* The caller found the peer breaking the protocol on the fabric: BROKEN
 * (EPROTO) follows, and the peer sees the socket close. */
void dfi_rcm_break(struct dfi_rcm_conn *c);
/* Close and free: no event for c after this one (queued ones are
 * dropped). */
void dfi_rcm_conn_free(struct dfi_rcm_conn *c);

#endif
