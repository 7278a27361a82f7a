/*
 * The kernel's own detection of a silent TCP peer, on one socket: a user
 * timeout and keepalive probes (docs/liveness.md).  No libfabric: the MSG
 * backend arms the sockets of libfabric's endpoints with it (liveness.c),
 * the RDM backend its connection manager's own.
 */
#ifndef DFI_KEEPALIVE_H
#define DFI_KEEPALIVE_H

#include <stdbool.h>

/* End the connection when the peer stays silent for timeout_ms, data in
 * flight or not.  0 or -errno (logged). */
int dfi_sock_keepalive(int fd, unsigned timeout_ms);
/* The same for a socket that carries little but probes (the RDM backend's
 * control channels): ended one probe interval later, so that a probe sent
 * after an outage shorter than the timeout gets its answer. */
int dfi_sock_keepalive_idle(int fd, unsigned timeout_ms);
/* After the socket ended: the kernel gave up on a silent peer (segments
 * or probes unanswered, or a window shut for the whole timeout), rather
 * than the peer closing or resetting it. */
bool dfi_sock_aborted(int fd);

#endif
