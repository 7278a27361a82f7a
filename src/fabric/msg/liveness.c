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
 * detection: TCP_USER_TIMEOUT for data left unacknowledged, keepalive
 * probes for a connection that is idle or only waits to receive.  The kernel aborts the socket when the peer stays
 * silent that long; the provider then reports a shutdown, and
 * dfi_fep_aborted tells that apart from the peer's close.  Nothing runs
 * on the data path; the design note is docs/liveness.md.
 */
#include "msg.h"
#include "fabric/keepalive.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>

/* The fd of the last socket found: the next connection's is usually a
 * few numbers away (the kernel hands out the lowest free one). */
static atomic_int sock_hint = -1;

/* fd's socket has these ends.  connecting: peer is where a connect in
 * flight goes, which a socket still in SYN_SENT cannot name yet; its local
 * address and port, bound by the connect, then have to do.  (Two connects
 * to different peers may share a local port: the one found is checked
 * again once connected, dfi_fep_arm_liveness.) */
static bool sock_is(int fd, const struct sockaddr_in *self, const struct sockaddr_in *peer,
		    bool connecting)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &len) || len != sizeof(a) || !dfi_same_in(&a, self))
		return false;
	len = sizeof(a);
	if (getpeername(fd, (struct sockaddr *)&a, &len))
		return connecting && errno == ENOTCONN;
	return len == sizeof(a) && dfi_same_in(&a, peer);
}

struct ends {
	const struct sockaddr_in *self, *peer;
	bool connecting;
};

static bool has_ends(int fd, void *arg)
{
	const struct ends *e = arg;

	return sock_is(fd, e->self, e->peer, e->connecting);
}

/* The fd whose socket has these ends, or -1.  Around the hint first, then
 * every fd of the process. */
static int find_sock(const struct sockaddr_in *self, const struct sockaddr_in *peer,
		     bool connecting)
{
	int hint = atomic_load_explicit(&sock_hint, memory_order_relaxed);
	struct ends e = { self, peer, connecting };
	int fd;

	/* above the hint first: sockets opened in a row connect in a row */
	if (hint >= 0) {
		for (int i = hint + 1; i <= hint + 64; i++)
			if (sock_is(i, self, peer, connecting))
				return i;
		for (int i = hint; i >= 0 && i >= hint - 16; i--)
			if (sock_is(i, self, peer, connecting))
				return i;
	}
	fd = dfi_fd_walk(has_ends, &e);
	return fd < 0 ? -1 : fd;
}

int dfi_msg_arm_liveness(struct dfi_fep *fe, unsigned timeout_ms, const struct sockaddr_in *dest)
{
	struct msg_fep *e = MSG_FEP(fe);
	struct sockaddr_in self, peer;
	size_t len = sizeof(self);
	int fd;

	if (!timeout_ms)
		return 0;
	if (fi_getname(&e->ep->fid, &self, &len) || len != sizeof(self) ||
	    self.sin_family != AF_INET || !self.sin_port)
		return -ENOENT;
	if (dest) {
		peer = *dest;
	} else {
		len = sizeof(peer);
		if (fi_getpeer(e->ep, &peer, &len) || len != sizeof(peer))
			return -ENOENT;
		/* armed at the connect: that socket, if it is this one */
		if (e->sock >= 0 && sock_is(e->sock, &self, &peer, false))
			return 0;
		e->sock = -1;
	}
	fd = find_sock(&self, &peer, dest != NULL);
	if (fd < 0)
		return -ENOENT;	/* not a socket provider: verbs has its own */
	atomic_store_explicit(&sock_hint, fd, memory_order_relaxed);
	if (dfi_sock_keepalive(fd, timeout_ms))
		return -EIO;
	e->sock = fd;
	return 0;
}

int dfi_msg_sock(struct msg_fep *e)
{
	struct sockaddr_in self, peer;
	size_t len = sizeof(self);
	int fd;

	if (e->sock >= 0)
		return e->sock;
	if (fi_getname(&e->ep->fid, &self, &len) || len != sizeof(self) ||
	    self.sin_family != AF_INET)
		return -1;
	len = sizeof(peer);
	if (fi_getpeer(e->ep, &peer, &len) || len != sizeof(peer))
		return -1;
	fd = find_sock(&self, &peer, false);
	if (fd >= 0)
		e->sock = fd;
	return fd;
}

int dfi_msg_aborted(const struct dfi_fep *fe)
{
	const struct msg_fep *e = (const struct msg_fep *)fe;

	return e->sock >= 0 && dfi_sock_aborted(e->sock) ? ETIMEDOUT : 0;
}
