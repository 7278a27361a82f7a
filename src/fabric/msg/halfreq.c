/*
 * The connection requests that libfabric 1.17's tcp provider has accepted
 * on a listener and not yet read whole, found among the process's sockets
 * and broken, so that closing the listener leaves none of them pointing at
 * it.
 *
 * The bug (libfabric 1.17 prov/tcp/src/tcpx_conn_mgr.c, tcpx_accept and
 * tcpx_cm_recv_req; the same in prov/net, where xnet_pep_close carries a
 * TODO saying so): an accepted socket becomes a struct tcpx_conn_handle
 * with a pointer to its tcpx_pep, watched in the EQ's wait set until its
 * CM header arrives.  tcpx_pep_fi_close frees the pep and leaves the
 * handles where they are: the next fi_eq_read that finds one's request
 * complete reads handle->pep->info (use after free), and fi_close of the
 * EQ leaks each handle with its cm context (376 bytes) and its socket.
 * On its error path (the socket fails or ends before a whole header)
 * tcpx_cm_recv_req frees the handle and touches no pep: dfi_pep_close
 * (cm.c) puts each of these sockets there with connect(AF_UNSPEC), which
 * resets the connection and drops what it had received, then runs the EQ.
 * Only on libfabric before 1.18: from 1.18 on, tcp is the net code, whose
 * error path (xnet_recv_conn_req) reads the listener as well.
 */
#include "msg.h"
#include "util/log.h"

#include <errno.h>
#include <linux/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* libfabric's CM header (struct ofi_ctrl_hdr, include/ofi_proto.h): a
 * socket from which fewer bytes were read has not given its request. */
#define HALFREQ_HDR 32

/* fd is an accepted TCP socket of the listener at `me` that has sent
 * nothing and from which less than a CM header was read: a request that
 * tcp has accepted and not read (pending CRs and accepted EPs have read
 * theirs; an EP has sent too). */
static bool halfreq_is(int fd, const struct sockaddr_in *me)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	struct tcp_info ti;
	int v, unread;

	if (getsockname(fd, (struct sockaddr *)&a, &len) || len != sizeof(a) ||
	    a.sin_family != AF_INET || a.sin_port != me->sin_port ||
	    (me->sin_addr.s_addr != htonl(INADDR_ANY) && a.sin_addr.s_addr != me->sin_addr.s_addr))
		return false;
	len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) || v)
		return false;		/* the listener itself (or another's) */
	len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) || v != IPPROTO_TCP)
		return false;
	memset(&ti, 0, sizeof(ti));
	len = sizeof(ti);
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ||
	    len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
		return false;
	if (len >= offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof(ti.tcpi_bytes_sent) &&
	    ti.tcpi_bytes_sent)
		return false;
	if (ioctl(fd, FIONREAD, &unread) || unread < 0)
		return false;
	return ti.tcpi_bytes_received - (uint64_t)unread < HALFREQ_HDR;
}

struct breaking {
	const struct sockaddr_in *me;
	int skip_fd;
	struct dfi_halfreq *h;
	int n, max;
};

static bool break_one(int fd, void *arg)
{
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };
	struct breaking *b = arg;
	struct stat st;

	if (fd == b->skip_fd || !halfreq_is(fd, b->me) || fstat(fd, &st) ||
	    connect(fd, &unspec, sizeof(unspec)))
		return false;
	b->h[b->n].fd = fd;
	b->h[b->n].dev = st.st_dev;
	b->h[b->n].ino = st.st_ino;
	return ++b->n == b->max;
}

int dfi_halfreq_break(const struct sockaddr_in *me, int skip_fd, struct dfi_halfreq *h, int max)
{
	struct breaking b = { me, skip_fd, h, 0, max };
	int rc;

	if (max <= 0)
		return 0;
	rc = dfi_fd_walk(break_one, &b);
	if (rc < -1) {
		errno = -rc;
		dfi_warn(DFI_SS_FABRIC, "/proc/self/fd: %m: requests half received on port %u "
			 "left to libfabric", ntohs(me->sin_port));
		return 0;
	}
	if (b.n)
		dfi_dbg(DFI_SS_FABRIC, "listener on port %u closed with %d request(s) half "
			"received: reset", ntohs(me->sin_port), b.n);
	return b.n;
}

bool dfi_halfreq_open(const struct dfi_halfreq *h)
{
	struct stat st;

	return fstat(h->fd, &st) == 0 && st.st_dev == h->dev && st.st_ino == h->ino;
}

static bool is_listener(int fd, void *arg)
{
	const struct sockaddr_in *me = arg;
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int v = 0;

	if (getsockname(fd, (struct sockaddr *)&a, &len) || len != sizeof(a) ||
	    !dfi_same_in(&a, me))
		return false;
	len = sizeof(v);
	return !getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) && v;
}

/* shutdown(2) of a listening TCP socket stops it listening on Linux: the
 * connections in its backlog are reset, a new one is refused, and the
 * port may be bound again while the fd stays open. */
int dfi_halfreq_stop_listening(const struct sockaddr_in *me)
{
	int fd = dfi_fd_walk(is_listener, (void *)me);

	if (fd < 0 || shutdown(fd, SHUT_RD))
		return -ENOENT;
	return fd;
}
