/* Inside the fabric layer only. */
#ifndef DFI_FABRIC_INT_H
#define DFI_FABRIC_INT_H

#include "fabric.h"

#include <stdatomic.h>
#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>

/* The largest send dfi_post_inject gathers on its stack (tcp's inject
 * size is 128 in libfabric 1.17). */
#define DFI_INJECT_MAX	256

struct dfi_fabric {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct dfi_fabric_limits lim;
};

struct dfi_mr {
	struct fid_mr *mr;
};

struct dfi_fep {
	struct fid_ep *ep;
	int sock;		/* its socket, once armed (liveness.c); else -1 */
};

struct dfi_cq {
	struct fid_cq *cq;
	struct fid_fabric *fabric;	/* for fi_trywait */
	int fd;
	/* A CQ with a poll-fd wait object (FI_WAIT_POLLFD, tcp's for
	 * FI_WAIT_UNSPEC) has no fd of its own: fd is then an epoll set of
	 * ours that mirrors its poll fds (cm.c, mirror_sync).  NULL: fd is
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
};

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

/* Call visit(fd, arg) on each open descriptor of the process (but the
 * walk's own) until it returns true: that fd, -1 if none did, or -errno
 * when /proc/self/fd cannot be read (fdwalk.c). */
int dfi_fd_walk(bool (*visit)(int fd, void *arg), void *arg);

#endif
