/*
 * The provider's own TCP sockets to a peer.  net and tcp;ofi_rxm carry
 * every connection to a peer on sockets of their own, with the kernel's
 * default retries (about 15 minutes) and no keepalive.  When the peer's
 * host goes silent, a request in flight on them (an RDMA read, a send or
 * write waiting for its acknowledgement, one a full socket holds) stayed
 * with the provider long after the DAT connection ended BROKEN: the EP
 * could not be reset or freed, and a partition that healed handed the
 * stream back with its retransmissions backed off for seconds.  And where
 * only one end's socket is gone, net keeps a half-open connection that
 * refuses the peer's new one as "simultaneous" for as long as it sends
 * nothing.  Two things, both found by the soak (bench/RESULTS.md):
 *
 * - armed: at a connection's establishment each socket to the peer gets
 *   the control channel's user timeout and keepalives (keepalive.c,
 *   docs/liveness.md), so the kernel ends it when the peer stays silent;
 * - cut: once the control channel of an established connection timed out
 *   (the kernel gave up on the host), its sockets to the peer are shut
 *   both ways at once, sockets the provider opened since the arming too.
 *
 * Either way the provider fails what the socket held (flushed), the DAT
 * layer ends the connections whose requests failed (dto.c's faults), and
 * the next send opens a new socket.  A socket is the peer's when it is
 * connected to the peer endpoint's address, or was accepted on one of
 * this fabric's endpoints from the peer's host (then every process of that
 * host: it went silent as a whole).  Providers without IPv4 addresses
 * (shm) have none.
 */
#include "rdm.h"
#include "fabric/keepalive.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

struct walk {
	struct rdm_fabric *rf;
	const struct rdm_fep *e;
	struct sockaddr_in peer;	/* the peer endpoint's address */
	unsigned timeout_ms;
	int first;			/* the first socket armed; -1: none */
	int n;				/* sockets cut */
};

static bool as_in(const uint8_t *addr, size_t len, struct sockaddr_in *out)
{
	if (len != sizeof(*out))
		return false;
	memcpy(out, addr, sizeof(*out));
	return out->sin_family == AF_INET;
}

/* Accepted by one of the fabric's endpoints: its local address is one's. */
static bool accepted_here(const struct walk *w, const struct sockaddr_in *local)
{
	struct sockaddr_in a;

	for (const struct rdm_ep *rep = w->rf->eps; rep; rep = rep->next)
		if (as_in(rep->addr, rep->addr_len, &a) && dfi_same_in(&a, local))
			return true;
	return w->e->srx && as_in(w->e->srx->addr, w->e->srx->addr_len, &a) &&
	       dfi_same_in(&a, local);
}

static bool peer_sock(const struct walk *w, int fd)
{
	struct sockaddr_in local, remote;
	socklen_t llen = sizeof(local), rlen = sizeof(remote);
	int type;
	socklen_t tlen = sizeof(type);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) || type != SOCK_STREAM ||
	    getsockname(fd, (struct sockaddr *)&local, &llen) || llen != sizeof(local) ||
	    local.sin_family != AF_INET ||
	    getpeername(fd, (struct sockaddr *)&remote, &rlen) || rlen != sizeof(remote) ||
	    remote.sin_addr.s_addr != w->peer.sin_addr.s_addr)
		return false;
	return dfi_same_in(&remote, &w->peer) || accepted_here(w, &local);
}

static bool cut_one(int fd, void *arg)
{
	struct walk *w = arg;

	if (peer_sock(w, fd) && shutdown(fd, SHUT_RDWR) == 0)
		w->n++;
	return false;		/* every one */
}

static bool arm_one(int fd, void *arg)
{
	struct walk *w = arg;

	if (peer_sock(w, fd) && dfi_sock_keepalive(fd, w->timeout_ms) == 0 && w->first < 0)
		w->first = fd;
	return false;		/* every one */
}

void rdm_arm_peer(struct rdm_fep *e, unsigned timeout_ms)
{
	struct walk w = { .rf = e->rf, .e = e, .timeout_ms = timeout_ms, .first = -1 };
	struct rdm_peer *p = e->peer_ref;

	if (!timeout_ms || !p || !as_in(p->name, p->len, &w.peer))
		return;
	if (p->armed_fd >= 0 && peer_sock(&w, p->armed_fd))
		return;		/* (a socket the provider reopened since has the fd
				 * of one it closed, or another: walked again) */
	dfi_fd_walk(arm_one, &w);
	p->armed_fd = w.first;
}

void rdm_cut_peer(struct rdm_fep *e)
{
	struct walk w = { .rf = e->rf, .e = e, .first = -1 };
	char a[INET_ADDRSTRLEN];

	if (!e->peer_ref || !as_in(e->peer_ref->name, e->peer_ref->len, &w.peer))
		return;
	dfi_fd_walk(cut_one, &w);
	if (!w.n)
		return;
	inet_ntop(AF_INET, &w.peer.sin_addr, a, sizeof(a));
	dfi_info(DFI_SS_FABRIC, "connection %u: its peer's host %s went silent: %d of the "
		 "provider's sockets to it cut, what they held flushed", e->id, a, w.n);
}
