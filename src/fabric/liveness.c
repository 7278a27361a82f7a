/* Liveness of a connection whose peer vanished.
 *
 * libfabric's socket providers (tcp and net in 1.17) set neither keepalives
 * nor a user timeout on their sockets, and offer no option to: a peer that
 * loses power or falls behind a partition is never noticed, and both sides
 * wait for ever.  IB's RC transport ends such a connection with a retry
 * error within seconds, and DAT consumers fail over on it.
 *
 * So, once a connect is under way (or a connection up, on the accepting
 * side), we find its socket among the process's and arm the kernel's own
 * detection: TCP_USER_TIMEOUT for data left
 * unacknowledged, keepalive probes for a connection that is idle or only
 * waits to receive.  The kernel aborts the socket when the peer stays
 * silent that long; the provider then reports a shutdown, and
 * dfi_fep_aborted tells that apart from the peer's close.  Nothing runs
 * on the data path; the design note is docs/liveness.md.
 */
#include "fabric_int.h"
#include "util/log.h"

#include <errno.h>
#include <linux/tcp.h>		/* tcp_info with tcpi_snd_wnd; not <netinet/tcp.h> */
#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The fd of the last socket found: the next connection's is usually a
 * few numbers away (the kernel hands out the lowest free one). */
static atomic_int sock_hint = -1;

static bool same_in(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_family == AF_INET && a->sin_port == b->sin_port &&
	       a->sin_addr.s_addr == b->sin_addr.s_addr;
}

/* peer NULL: a connect in progress, which has no peer name yet; its local
 * address and port, bound by the connect, are its own. */
static bool sock_is(int fd, const struct sockaddr_in *self, const struct sockaddr_in *peer)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &len) || len != sizeof(a) || !same_in(&a, self))
		return false;
	if (!peer)
		return true;
	len = sizeof(a);
	return !getpeername(fd, (struct sockaddr *)&a, &len) && len == sizeof(a) &&
	       same_in(&a, peer);
}

struct ends {
	const struct sockaddr_in *self, *peer;
};

static bool has_ends(int fd, void *arg)
{
	const struct ends *e = arg;

	return sock_is(fd, e->self, e->peer);
}

/* The fd whose socket has these ends, or -1.  Around the hint first, then
 * every fd of the process. */
static int find_sock(const struct sockaddr_in *self, const struct sockaddr_in *peer)
{
	int hint = atomic_load_explicit(&sock_hint, memory_order_relaxed);
	struct ends e = { self, peer };
	int fd;

	/* above the hint first: sockets opened in a row connect in a row */
	if (hint >= 0) {
		for (int i = hint + 1; i <= hint + 64; i++)
			if (sock_is(i, self, peer))
				return i;
		for (int i = hint; i >= 0 && i >= hint - 16; i--)
			if (sock_is(i, self, peer))
				return i;
	}
	fd = dfi_fd_walk(has_ends, &e);
	return fd < 0 ? -1 : fd;
}

static int set_opt(int fd, int level, int name, int val)
{
	return setsockopt(fd, level, name, &val, sizeof(val));
}

int dfi_fep_arm_liveness(struct dfi_fep *e, unsigned timeout_ms, bool connecting)
{
	struct sockaddr_in self, peer;
	size_t len = sizeof(self);
	int fd, idle, intvl;

	if (e->sock >= 0 || !timeout_ms)
		return 0;	/* armed at the connect */
	if (fi_getname(&e->ep->fid, &self, &len) || len != sizeof(self) ||
	    self.sin_family != AF_INET || !self.sin_port)
		return -ENOENT;
	len = sizeof(peer);
	if (!connecting && (fi_getpeer(e->ep, &peer, &len) || len != sizeof(peer)))
		return -ENOENT;
	fd = find_sock(&self, connecting ? NULL : &peer);
	if (fd < 0)
		return -ENOENT;	/* not a socket provider: verbs has its own */
	atomic_store_explicit(&sock_hint, fd, memory_order_relaxed);
	/* The first probe after half the timeout of silence, then one a
	 * tenth apart: the user timeout ends it (once a probe is out) at most
	 * a tenth past the timeout.  Whole seconds, at least one. */
	idle = (int)(timeout_ms / 2000);
	intvl = (int)(timeout_ms / 10000);
	if (idle < 1)
		idle = 1;
	if (intvl < 1)
		intvl = 1;
	/* no TCP_KEEPCNT: with a user timeout the kernel counts time, not
	 * probes */
	if (set_opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, (int)timeout_ms) ||
	    set_opt(fd, IPPROTO_TCP, TCP_KEEPIDLE, idle) ||
	    set_opt(fd, IPPROTO_TCP, TCP_KEEPINTVL, intvl) ||
	    set_opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1)) {
		dfi_warn(DFI_SS_FABRIC, "arming keepalives on fd %d: %s", fd, strerror(errno));
		return -errno;
	}
	e->sock = fd;
	return 0;
}

/* The kernel's TCP_CLOSE (include/net/tcp_states.h), which no user
 * header names beside <linux/tcp.h>'s tcp_info. */
#define DFI_TCP_CLOSE 7

bool dfi_fep_aborted(const struct dfi_fep *e)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (e->sock < 0 || getsockopt(e->sock, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return false;
	if (ti.tcpi_state != DFI_TCP_CLOSE)
		return false;	/* the peer's FIN: LAST_ACK until it acknowledges ours */
	/* The kernel aborts a socket whose segments or keepalive probes went
	 * unanswered (it keeps their count), or whose peer kept its window
	 * shut for the whole timeout (since Linux 5.11: a stopped process
	 * with data waiting for it).  A close leaves none of these. */
	if (ti.tcpi_retransmits || ti.tcpi_probes || ti.tcpi_backoff)
		return true;
	return len >= offsetof(struct tcp_info, tcpi_snd_wnd) + sizeof(ti.tcpi_snd_wnd) &&
	       ti.tcpi_snd_wnd == 0;
}
