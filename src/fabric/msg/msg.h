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
};

struct msg_fep {
	struct dfi_fep base;
	struct fid_ep *ep;
	int sock;		/* its socket, once armed (liveness.c); else -1 */
};

#define MSG_EQ(q)	((struct msg_eq *)(q))
#define MSG_PEP(p)	((struct msg_pep *)(p))
#define MSG_SRX(x)	((struct msg_srx *)(x))
#define MSG_FEP(e)	((struct msg_fep *)(e))

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

/* liveness.c */
int dfi_msg_arm_liveness(struct dfi_fep *e, unsigned timeout_ms, const struct sockaddr_in *dest);
bool dfi_msg_aborted(const struct dfi_fep *e);

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
