/*
 * The MSG backend (FI_EP_MSG): each DAT endpoint is a libfabric connected
 * endpoint of its own, and libfabric's CM (its EQ, passive endpoints,
 * fi_connect/fi_accept) carries DAT's.  Inside msg/ only.
 */
#ifndef DFI_MSG_H
#define DFI_MSG_H

#include "fabric/fabric_int.h"

struct msg_eq {
	struct dfi_eq base;
	struct fid_eq *eq;
	struct fid_fabric *fabric;
	int fd;
	/* Events read ahead by msg_pep_close (the caller's lock, as every
	 * read): stash[head..n) come before libfabric's queue. */
	struct dfi_cm_event *stash;
	int head, n, cap;
	atomic_int stashed;	/* n - head, for msg_eq_trywait (no lock) */
	/* DAPL_OFI_FAULT_LATE_CONNECTED_MS: accepting sides' FI_CONNECTED
	 * held until late[i].at (ms), oldest first (cm.c) */
	long late_ms;
	bool last_passive;	/* eq_read_fi's last: an accepting side's */
	struct msg_late {
		struct dfi_cm_event ev;
		uint64_t at;
	} *late;
	int n_late, cap_late;
};

struct msg_pep {
	struct dfi_pep base;
	struct fid_pep *pep;
	struct fi_info *info;
	struct msg_eq *eq;
	void *ctx;
};

struct msg_srx {
	struct dfi_srx base;
	struct fid_ep *srx;
	struct dfi_fabric *f;
};

struct msg_fep {
	struct dfi_fep base;
	struct fid_ep *ep;	/* its fid's context is this msg_fep */
	void *ctx;		/* the DAT layer's: its CM events name it */
	int sock;		/* its socket, once armed (liveness.c); else -1 */
	bool passive;		/* opened for a connection request */
	struct msg_atom *atom;	/* emulated atomics' mailbox (atomic.c), or NULL */
};

/* A connection request: libfabric's, and what its private data's trailer
 * says of the peer's atomics mailbox (atomic.c). */
struct msg_req {
	struct fi_info *info;
	struct msg_peer {
		uint64_t addr;
		uint32_t key, id;
		uint16_t slots;		/* 0: none */
	} peer;
};

#define MSG_EQ(q)	((struct msg_eq *)(q))
#define MSG_PEP(p)	((struct msg_pep *)(p))
#define MSG_SRX(x)	((struct msg_srx *)(x))
#define MSG_FEP(e)	((struct msg_fep *)(e))
#define MSG_REQ(r)	((struct msg_req *)(r))

/* post.c */
int dfi_msg_post_send(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx);
int dfi_msg_post_inject(struct dfi_fep *e, const struct dfi_sge *sg, int n);
int dfi_msg_post_recv(struct dfi_fep *e, const struct dfi_sge *sg, int n, void *ctx);
int dfi_msg_srx_post_recv(struct dfi_srx *x, const struct dfi_sge *sg, int n, void *ctx);
int dfi_msg_post_write(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		       uint32_t rkey, void *ctx);
int dfi_msg_post_read(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t raddr,
		      uint32_t rkey, void *ctx);
int dfi_msg_post_senddata(struct dfi_fep *e, const struct dfi_sge *sg, int n, uint64_t data,
			  void *ctx);
int dfi_msg_post_atomic(struct dfi_fep *e, enum dfi_atomic_op op, const uint64_t *operand,
			const uint64_t *compare, uint64_t *result, struct dfi_mr *result_mr,
			uint64_t raddr, uint32_t rkey, void *ctx);

/* atomic.c: emulated atomics where the provider has no FI_ATOMIC.  The
 * table of mailboxes is the fabric's (f->priv); dfi_msg_atom_new gives e
 * one if the fabric has a table (else e->atom stays NULL). */
#define DFI_MSG_MBOX_SLOTS	32	/* requests out per connection and direction */
int dfi_msg_atomics_open(struct dfi_fabric *f);
void dfi_msg_atomics_close(struct dfi_fabric *f);
int dfi_msg_atom_new(struct dfi_fabric *f, struct msg_fep *e, struct fid_eq *eq);
void dfi_msg_atom_free(struct msg_fep *e);
/* pdata and e's trailer into out (DFI_PDATA_MAX bytes): its length. */
size_t dfi_msg_atom_pdata(const struct msg_fep *e, const void *pdata, size_t plen, uint8_t *out);
/* The consumer's length of a peer's private data, its trailer into peer. */
size_t dfi_msg_atom_strip(const uint8_t *pdata, size_t plen, struct msg_peer *peer);
void dfi_msg_atom_peer(struct msg_fep *e, const struct msg_peer *peer);
int dfi_msg_post_atomic_emul(struct dfi_fep *e, enum dfi_atomic_op op, uint64_t operand,
			     uint64_t compare, uint64_t raddr, uint32_t rkey, uint64_t id);
/* A remote write's completion with CQ data (backend cq_data). */
bool dfi_msg_cq_data(struct dfi_fabric *f, uint64_t data);
/* An answer's event, as fi_eq_read gave it (FI_NOTIFY), into ev: 1, or 0
 * if it is none. */
int dfi_msg_atom_event(const void *buf, size_t len, struct dfi_cm_event *ev);

/* liveness.c */
int dfi_msg_arm_liveness(struct dfi_fep *e, unsigned timeout_ms, const struct sockaddr_in *dest);
int dfi_msg_aborted(const struct dfi_fep *e);
/* A connected endpoint's socket (found once, then kept), or -1. */
int dfi_msg_sock(struct msg_fep *e);

/* halfreq.c: the connections a tcp listener at `me` has accepted and not
 * read a request from, reset (but skip_fd); up to max, recorded in h.  0
 * when none. */
struct dfi_halfreq {
	int fd;
	dev_t dev;
	ino_t ino;
};
int dfi_halfreq_break(const struct sockaddr_in *me, int skip_fd, struct dfi_halfreq *h, int max);
/* h's socket is still open (libfabric has not closed it yet). */
bool dfi_halfreq_open(const struct dfi_halfreq *h);
/* The listening socket at `me` stops taking connections (its backlog is
 * reset), its fd and libfabric's listener staying open: that fd (which
 * dfi_halfreq_break must then skip: it no longer looks like a listener),
 * or -ENOENT. */
int dfi_halfreq_stop_listening(const struct sockaddr_in *me);

#endif
