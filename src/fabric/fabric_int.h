/* Inside the fabric layer only. */
#ifndef DFI_FABRIC_INT_H
#define DFI_FABRIC_INT_H

#include "fabric.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_tagged.h>

/* The largest send dfi_post_inject gathers on its stack (tcp's inject
 * size is 128 in libfabric 1.17). */
#define DFI_INJECT_MAX	256

/* The bytes of CM private data that carry an endpoint's atomics mailbox,
 * where the MSG backend emulates atomics (msg/atomic.c): the consumer's
 * limit is DFI_PDATA_MAX less these. */
#define DFI_MSG_TRAILER	24

/*
 * A backend: how DAT endpoints map onto one kind of libfabric endpoint.
 * msg/ maps each onto an FI_EP_MSG endpoint of its own; rdm/ multiplexes
 * them over shared FI_EP_RDM endpoints with connection ids and tags
 * (docs/rdm.md).  The DAT layer calls fabric.h, whose functions dispatch
 * here through the object's backend, as libfabric's fids do through their
 * ops.  CQs and memory registrations are the domain's: shared (cq.c, mr.c).
 */
struct dfi_backend {
	const char *name;		/* "msg", "rdm" */
	int (*open)(struct dfi_fabric *f, const struct sockaddr_in *addr, char *err,
		    size_t errlen);
	void (*close)(struct dfi_fabric *f);
	/* cq's consumer is gone: whatever the backend bound to it goes
	 * first, or the backend keeps the libfabric CQ (true: it closes
	 * it later, and no one reads or waits on it meanwhile) */
	bool (*cq_closing)(struct dfi_fabric *f, struct dfi_cq *cq);
	/* a completion of a remote write with CQ data and no context: the
	 * backend's own (true: taken, the DAT layer never sees it) */
	bool (*cq_data)(struct dfi_fabric *f, uint64_t data);
	/* a completion c whose context is odd (dfi_cq_own_ctx): the backend's
	 * own receive (c->err 0, or libfabric's positive code).  true: c is
	 * now the DAT layer's (its ctx replaced), false: taken.  NULL:
	 * dropped. */
	bool (*own_done)(struct dfi_fabric *f, struct dfi_comp *c);

	int (*eq_open)(struct dfi_fabric *f, struct dfi_eq **eq);
	void (*eq_close)(struct dfi_eq *eq);
	int (*eq_fd)(struct dfi_eq *eq);
	int (*eq_trywait)(struct dfi_eq *eq);
	int (*eq_read)(struct dfi_eq *eq, struct dfi_cm_event *ev);
	void (*connreq_free)(void *req);
	void (*connreq_peer)(void *req, struct sockaddr_in *peer);

	int (*pep_listen)(struct dfi_fabric *f, struct dfi_eq *eq, uint16_t port, void *ctx,
			  struct dfi_pep **pep, uint16_t *bound_port);
	void (*pep_close)(struct dfi_pep *pep);
	int (*pep_reject)(struct dfi_pep *pep, void *req, const void *pdata, size_t plen);

	int (*srx_open)(struct dfi_fabric *f, size_t size, size_t iov_limit, struct dfi_srx **srx);
	void (*srx_close)(struct dfi_srx *srx);
	int (*srx_post_recv)(struct dfi_srx *srx, const struct dfi_sge *sg, int n, void *ctx);
	int (*srx_cq_open)(struct dfi_srx *srx, size_t size, struct dfi_cq **cq);
	void (*srx_progress)(struct dfi_srx *srx);	/* NULL: the provider's own */

	int (*fep_open)(struct dfi_fabric *f, struct dfi_eq *eq, void *req, struct dfi_cq *txcq,
			struct dfi_cq *rxcq, struct dfi_srx *srx, size_t tx_size, size_t rx_size,
			void *ctx, struct dfi_fep **fep);
	int (*fep_connect)(struct dfi_fep *fep, const struct sockaddr_in *dest, const void *pdata,
			   size_t plen);
	int (*fep_accept)(struct dfi_fep *fep, const void *pdata, size_t plen);
	int (*fep_shutdown)(struct dfi_fep *fep);
	void (*fep_cancel)(struct dfi_fep *fep, void *ctx);
	void (*fep_recvs_over)(struct dfi_fep *fep);	/* NULL: nothing to do */
	void (*fep_close)(struct dfi_fep *fep);
	int (*fep_peer)(struct dfi_fep *fep, struct sockaddr_in *peer);
	int (*fep_arm_liveness)(struct dfi_fep *fep, unsigned timeout_ms,
				const struct sockaddr_in *dest);
	int (*fep_aborted)(const struct dfi_fep *fep);
	int (*fep_cut)(struct dfi_fep *fep);		/* NULL: no socket */
	void (*fep_fault)(struct dfi_fep *fep, int err);	/* NULL: the provider ends it */

	int (*post_send)(struct dfi_fep *fep, const struct dfi_sge *sg, int n, void *ctx);
	int (*post_inject)(struct dfi_fep *fep, const struct dfi_sge *sg, int n);
	int (*post_recv)(struct dfi_fep *fep, const struct dfi_sge *sg, int n, void *ctx);
	int (*post_write)(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t raddr,
			  uint32_t rkey, void *ctx);
	int (*post_read)(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t raddr,
			 uint32_t rkey, void *ctx);
	int (*post_senddata)(struct dfi_fep *fep, const struct dfi_sge *sg, int n, uint64_t data,
			     void *ctx);
	int (*post_atomic)(struct dfi_fep *fep, enum dfi_atomic_op op, const uint64_t *operand,
			   const uint64_t *compare, uint64_t *result, struct dfi_mr *result_mr,
			   uint64_t raddr, uint32_t rkey, void *ctx);

	int (*post_atomic_emul)(struct dfi_fep *fep, enum dfi_atomic_op op, uint64_t operand,
				uint64_t compare, uint64_t raddr, uint32_t rkey, uint64_t id);

	/* unreliable datagrams (NULL: not served) */
	int (*ud_connect)(struct dfi_fep *ud, const struct sockaddr_in *dest, const void *pdata,
			  size_t plen, void *ctx, struct dfi_fep **hs);
	int (*ud_accept)(struct dfi_fep *ud, void *req, const void *pdata, size_t plen, void *ctx,
			 struct dfi_fep **hs);
	int (*post_send_ud)(struct dfi_fep *ud, const struct dfi_ah *ah, const struct dfi_sge *sg,
			    int n, void *ctx);
	void (*ah_free)(struct dfi_ah *ah);
};

extern const struct dfi_backend dfi_msg_backend;
extern const struct dfi_backend dfi_rdm_backend;

/* Each backend's objects begin with their backend (container_of style). */
struct dfi_eq { const struct dfi_backend *be; };
struct dfi_pep { const struct dfi_backend *be; };
struct dfi_fep { const struct dfi_backend *be; };
struct dfi_srx { const struct dfi_backend *be; };
struct dfi_ah { const struct dfi_backend *be; };

struct dfi_fabric {
	const struct dfi_backend *be;
	void *priv;			/* the backend's (rdm: its endpoints, AV, ids) */
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct dfi_fabric_limits lim;
	atomic_uint next_key;		/* mr.c, without FI_MR_PROV_KEY */
	/* the registrations a peer's emulated atomics may touch (mr.c) */
	pthread_mutex_t atomic_lock;
	struct dfi_mr *atomic_mrs;
};

struct dfi_mr {
	struct fid_mr *mr;
	/* registered with DFI_MR_REMOTE_ATOMIC: on the fabric's list */
	struct dfi_fabric *f;
	struct dfi_mr *next;
	uintptr_t addr;
	size_t len;
	uint32_t key;
};

/* mr.c: a peer's emulated 8-byte atomic on this fabric's memory, applied
 * if key names a registration with DFI_MR_REMOTE_ATOMIC holding
 * [addr, addr + 8): 0 and the old value in *old, or EACCES (no such key,
 * range or right) or EINVAL (not 8-byte aligned). */
uint32_t dfi_mr_atomic(struct dfi_fabric *f, enum dfi_atomic_op op, uint64_t addr, uint32_t key,
		       uint64_t operand, uint64_t compare, uint64_t *old);

/* info.c: the fi_info dfi_fabric_open opens (see dfi_fabric_probe). */
int dfi_fabric_getinfo(const char *prov, const struct sockaddr_in *addr, const char *domain,
		       enum dfi_ep_kind kind, struct fi_info **out, char *err, size_t errlen);
/* its limits; atomics false: none, native or emulated (ia_params atomics=0) */
void dfi_fabric_fill_limits(const struct fi_info *i, bool atomics, struct dfi_fabric_limits *l);

/* Bind ep to its transmit and receive CQs (one bind if they are the same
 * CQ), as the MSG backend's endpoints do (cq.c; rdm/'s rdm_ep_open binds
 * its own, an SRQ's CQ having no struct dfi_cq).  0 or -FI_E*. */
int dfi_cq_bind(struct fid_ep *ep, struct dfi_cq *txcq, struct dfi_cq *rxcq);

/* post.c, shared by both backends' posts; addr is the peer's (0 on a
 * connected endpoint).  An RDMA write or read of sg to raddr/rkey: one
 * fi_writemsg/fi_readmsg with FI_COMPLETION and flags (each backend keeps
 * the plain one-segment case apart, which builds none of this). */
int dfi_rma_msg(struct fid_ep *ep, const struct dfi_sge *sg, int n, fi_addr_t addr,
		uint64_t raddr, uint32_t rkey, void *ctx, bool write, uint64_t flags);
/* An inject's segments copied into buf: their length, or -EMSGSIZE. */
ssize_t dfi_gather(const struct dfi_sge *sg, int n, void *buf, size_t cap);
/* Its reverse: len bytes of buf into the segments, in order, as far as
 * they go (a receive received into a buffer of the backend's). */
void dfi_scatter(const void *buf, size_t len, const struct dfi_sge *sg, int n);
/* A native 8-byte atomic (dfi_post_atomic's), libfabric's result. */
ssize_t dfi_atomic(struct fid_ep *ep, fi_addr_t addr, enum dfi_atomic_op op,
		   const uint64_t *operand, const uint64_t *compare, uint64_t *result,
		   struct dfi_mr *result_mr, uint64_t raddr, uint32_t rkey, void *ctx);

/* A posting's context with its low bit set is the backend's own (rdm/'s
 * hello receives and sinks): dfi_cq_read hands its completion to the
 * backend's own_done, and the DAT layer, whose contexts are pointers to
 * its descriptors, never sees it. */
static inline bool dfi_cq_own_ctx(const void *ctx)
{
	return ((uintptr_t)ctx & 1u) != 0;
}

/* What a completion of a post with context ctx carries (fabric.h, struct
 * dfi_opctx): ctx itself, or on an op_ctx fabric the context it wraps. */
static inline void *dfi_opctx_of(const struct dfi_fabric *f, void *ctx)
{
	if (__builtin_expect(!f->lim.op_ctx || !ctx, 1))
		return ctx;
	return ((struct dfi_opctx *)ctx)->ctx;
}

/* The context to post for a context of the backend's own: o, wrapping it,
 * where the fabric's provider writes in contexts (o->ctx set once). */
static inline void *dfi_opctx_own(const struct dfi_fabric *f, struct dfi_opctx *o, void *ctx)
{
	if (!f->lim.op_ctx)
		return ctx;
	o->ctx = ctx;
	return o;
}

/* Shared by the posts of both backends. */
static inline int dfi_post_rc(ssize_t rc)
{
	return rc == -FI_EAGAIN ? -EAGAIN : (int)rc;
}

static inline void *dfi_sge_desc(const struct dfi_sge *sg)
{
	return sg->mr ? fi_mr_desc(sg->mr->mr) : NULL;
}

static inline int dfi_fill_iov(const struct dfi_sge *sg, int n, struct iovec *iov, void **desc)
{
	if (n > DFI_MAX_SGE)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		iov[i].iov_base = sg[i].addr;
		iov[i].iov_len = sg[i].len;
		desc[i] = dfi_sge_desc(&sg[i]);
	}
	return 0;
}

struct dfi_cq {
	struct fid_cq *cq;
	struct fid_fabric *fabric;	/* for fi_trywait */
	struct dfi_fabric *owner;	/* its backend hears of its close */
	int fd;
	/* A CQ with a poll-fd wait object (FI_WAIT_POLLFD, tcp's for
	 * FI_WAIT_UNSPEC) has no fd of its own: fd is then an epoll set of
	 * ours that mirrors its poll fds (cq.c, mirror_sync).  NULL: fd is
	 * the provider's (FI_WAIT_FD). */
	struct dfi_cq_mirror *mirror;
	/* The progress thread has fd in its epoll set (dfi_cq_watch): a
	 * consumer's pass, which may change the poll fds (an EP's socket
	 * added, write interest set), re-syncs the mirror for it. */
	atomic_bool watched;
	/* dfi_cq_take's read-ahead: ahead[pos..n) were read from the CQ and
	 * not handed out yet (the reader's lock, as every read of the CQ) */
	int ahead_pos, ahead_n;
	struct dfi_comp ahead[DFI_CQ_BATCH];
	/* not NULL: a software CQ (cq_soft.c), cq NULL and fd its own */
	struct dfi_cq_soft *soft;
};

/* cq_soft.c: a CQ the fabric layer fills itself, fed by a provider CQ it
 * shares with others (rdm/srx.c).  pull moves what that CQ holds to the
 * software CQs it names; trywait arms it (0) or says it holds some
 * (-EAGAIN).  feed_fd: its fd (-1: polled).  size: the initial depth (the
 * queue grows: a push fails only for memory). */
struct dfi_cq_feed {
	void (*pull)(void *arg);
	int (*trywait)(void *arg);
};
int dfi_cq_soft_open(struct dfi_fabric *f, size_t size, int feed_fd,
		     const struct dfi_cq_feed *feed, void *arg, struct dfi_cq **out);
int dfi_cq_soft_push(struct dfi_cq *c, const struct dfi_comp *comp);
int dfi_cq_soft_read(struct dfi_cq *c, struct dfi_comp *out, int n);
int dfi_cq_soft_trywait(struct dfi_cq *c);
void dfi_cq_soft_close(struct dfi_cq *c);

/* Call visit(fd, arg) on each open descriptor of the process (but the
 * walk's own) until it returns true: that fd, -1 if none did, or -errno
 * when /proc/self/fd cannot be read (fdwalk.c). */
int dfi_fd_walk(bool (*visit)(int fd, void *arg), void *arg);

/* a names the IPv4 address and port b does (what the walks above compare
 * a socket's ends with). */
static inline bool dfi_same_in(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_family == AF_INET && a->sin_port == b->sin_port &&
	       a->sin_addr.s_addr == b->sin_addr.s_addr;
}

#endif
