/* A silent TCP peer, detected by the kernel: docs/liveness.md. */
#include "keepalive.h"
#include "util/log.h"

#include <errno.h>
#include <linux/tcp.h>		/* tcp_info with tcpi_snd_wnd; not <netinet/tcp.h> */
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

static int set_opt(int fd, int level, int name, int val)
{
	return setsockopt(fd, level, name, &val, sizeof(val));
}

static int arm(int fd, unsigned timeout_ms, bool idle_socket)
{
	/* The first probe after half the timeout of silence, then one a
	 * tenth apart: the user timeout ends it (once a probe is out) at most
	 * a tenth past the timeout.  Whole seconds, at least one. */
	int idle = (int)(timeout_ms / 2000), intvl = (int)(timeout_ms / 10000);

	if (idle < 1)
		idle = 1;
	if (intvl < 1)
		intvl = 1;
	/* An idle socket's last word from the peer may be the answer to a
	 * probe before an outage: the kernel kills it at the first probe
	 * time past the timeout, before that probe goes, so one that would
	 * find the peer back is never sent (a link down for 1 s, over two
	 * probes of a 3 s timeout, ended idle connections).  There the
	 * user timeout is one interval later: the peer is silent for the
	 * timeout, and a probe after it went unanswered. */
	if (idle_socket)
		timeout_ms += (unsigned)intvl * 1000u;
	/* no TCP_KEEPCNT: with a user timeout the kernel counts time, not
	 * probes */
	if (set_opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, (int)timeout_ms) ||
	    set_opt(fd, IPPROTO_TCP, TCP_KEEPIDLE, idle) ||
	    set_opt(fd, IPPROTO_TCP, TCP_KEEPINTVL, intvl) ||
	    set_opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1)) {
		int err = errno;

		dfi_warn(DFI_SS_FABRIC, "arming keepalives on fd %d: %s", fd, strerror(err));
		return -err;
	}
	return 0;
}

int dfi_sock_keepalive(int fd, unsigned timeout_ms)
{
	return arm(fd, timeout_ms, false);
}

int dfi_sock_keepalive_idle(int fd, unsigned timeout_ms)
{
	return arm(fd, timeout_ms, true);
}

/* The kernel's TCP_CLOSE (include/net/tcp_states.h), which no user
 * header names beside <linux/tcp.h>'s tcp_info. */
#define DFI_TCP_CLOSE 7

bool dfi_sock_aborted(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
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
