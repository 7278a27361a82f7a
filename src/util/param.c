/* The configuration table.  Add a tunable here and nowhere else. */
#include "param.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

const struct dfi_param dfi_params[DFI_P_COUNT] = {
	[DFI_P_LOG_LEVEL] = { "DAPL_OFI_LOG_LEVEL", DFI_PARAM_STR, "warn",
		"Log threshold: none, error, warn, info, debug or trace. "
		"A list such as 'warn,evd=debug,cno=trace' sets subsystems apart." },
	[DFI_P_LOG_SUBSYS] = { "DAPL_OFI_LOG_SUBSYS", DFI_PARAM_STR, "all",
		"Subsystems that log at all (comma list of ia, evd, cno, mr, ep, "
		"cm, fabric, api, or 'all')." },
	[DFI_P_LOG_FILE] = { "DAPL_OFI_LOG_FILE", DFI_PARAM_STR, "",
		"Log to this file instead of stderr; %p expands to the process "
		"id, %h to the host name." },
	[DFI_P_DBG_TYPE] = { "DAPL_DBG_TYPE", DFI_PARAM_HEX, "0",
		"Legacy OFA uDAPL debug mask, accepted as an alias: errors always "
		"show; 0x2 warn, 0x4 evd, 0x8 cm, 0x10 ep, 0x20 util (ia, mr), 0x100 api; "
		"any other bit turns on debug for every subsystem. "
		"DAPL_OFI_LOG_LEVEL wins when both are set." },
	[DFI_P_DBG_DEST] = { "DAPL_DBG_DEST", DFI_PARAM_INT, "0",
		"Legacy OFA uDAPL destination: 1 stdout, 2 syslog, 3 both "
		"(0: stderr, or DAPL_OFI_LOG_FILE)." },
	[DFI_P_QUARANTINE] = { "DAPL_OFI_QUARANTINE", DFI_PARAM_INT, "4096",
		"Freed handles kept poisoned so that a stale handle is rejected "
		"with DAT_INVALID_HANDLE instead of being followed." },
	[DFI_P_PROGRESS_RT] = { "DAPL_OFI_PROGRESS_RT", DFI_PARAM_BOOL, "1",
		"Run each IA's progress thread SCHED_FIFO (priority 1) when the "
		"process may, so that it preempts a consumer spinning on memory "
		"(dtest -W) at once instead of after a scheduler slice (about 4 ms "
		"on 2 cores).  The thread sleeps in epoll between events.  0: "
		"normal scheduling." },
	[DFI_P_PROGRESS_LEASE_US] = { "DAPL_OFI_PROGRESS_LEASE_US", DFI_PARAM_INT, "50",
		"How long, in microseconds, the progress thread stays off an EVD's "
		"completion queue after the consumer's last dequeue, wait or post "
		"on it (or after its own pass): a polling or waiting consumer "
		"drives the queue itself and pays no progress-thread wake-up per "
		"completion.  A consumer that calls less often than every 2 us "
		"(a post and a reap per message, then a spin on memory) is not held "
		"off: its incoming writes land one wake-up after they arrive.  0: "
		"the thread watches every queue all the time (one wake-up per "
		"completion for everyone)." },
	[DFI_P_UPCALL_THREADS] = { "DAPL_OFI_UPCALL_THREADS", DFI_PARAM_INT, "2",
		"Upcall dispatcher threads per IA (1-64), started with the first "
		"EVD given an upcall policy.  More than one lets DAT_UPCALL_MANY "
		"run upcalls of one EVD concurrently." },
	[DFI_P_UPCALL_BUDGET] = { "DAPL_OFI_UPCALL_BUDGET", DFI_PARAM_INT, "16",
		"Upcalls a dispatcher thread makes for one EVD before it serves the "
		"next EVD with work (fairness between busy EVDs)." },
	[DFI_P_UPCALL_SPIN_US] = { "DAPL_OFI_UPCALL_SPIN_US", DFI_PARAM_INT, "0",
		"Microseconds a dispatcher thread that ran out of work spins on its "
		"run queue before it sleeps (0 to 100000): an upcall raised meanwhile "
		"starts within a cache miss instead of a thread wake-up, at the price "
		"of a CPU kept busy that long after each burst.  0: sleep at once." },
	[DFI_P_CQ_WAIT] = { "DAPL_OFI_CQ_WAIT", DFI_PARAM_STR, "fd",
		"The wait object of the completion queues.  fd (the default): "
		"FI_WAIT_FD, the provider's own epoll set.  pollfd: FI_WAIT_UNSPEC, "
		"which tcp serves with a list of poll fds, mirrored by dapl-ofi in "
		"an epoll set for waiters and the progress thread: a polling "
		"consumer's read of an empty queue is then a poll(2) instead of an "
		"epoll_wait, about 10 % off a polling ping-pong over one connection, "
		"but poll(2) costs every EP bound to the queue: beside 1024 idle EPs "
		"the same ping-pong takes 6 times longer, and connections are set up "
		"at half the rate.  For a few connections per queue." },
	[DFI_P_EP_PREOPEN] = { "DAPL_OFI_EP_PREOPEN", DFI_PARAM_INT, "4096",
		"How many EPs of an IA (without an SRQ) get their libfabric "
		"endpoint opened at dat_ep_create instead of at dat_ep_connect, "
		"so that a connect only connects (opening one costs tens of "
		"microseconds: about 70 on a small VM).  Each holds a socket and "
		"about 18 KiB until it connects or is freed, and is visited by "
		"libfabric's progress on each read of its EVDs' queues, as a "
		"connected idle EP is; an EP that accepts instead closes it and "
		"opens the request's, so none is opened while the IA has a PSP or "
		"RSP.  Never more than a quarter of the open-file limit.  0: every "
		"endpoint is opened at dat_ep_connect or dat_cr_accept." },
	[DFI_P_INJECT] = { "DAPL_OFI_INJECT", DFI_PARAM_BOOL, "1",
		"Send a suppressed send (DAT_COMPLETION_SUPPRESS_FLAG, or "
		"UNSIGNALLED where the EP allows it) that fits the provider's "
		"inject size (128 bytes on tcp) with fi_inject: its data is copied "
		"at the post and no completion is read for it, as perftest and "
		"fi_pingpong send.  The price: a failure of that send is not "
		"reported on its own (the connection breaks, and the EP's other "
		"DTOs are flushed).  0: every send completes through the queue, "
		"and a failed suppressed send is reported." },
	[DFI_P_PEER_TIMEOUT_MS] = { "DAPL_OFI_PEER_TIMEOUT_MS", DFI_PARAM_INT, "10000",
		"How long, in milliseconds, a connected peer may stay silent "
		"(powered off, partitioned away) before its connection ends "
		"with DAT_CONNECTION_EVENT_BROKEN and its DTOs are flushed, "
		"whether data is in flight or the connection is idle, as IB "
		"reports a retry error.  On socket providers (tcp, net) the "
		"kernel does it: TCP_USER_TIMEOUT, and keepalive probes after "
		"half the time idle.  A peer back within the time (a link "
		"flap) keeps its connection, and so does a stopped process "
		"(SIGSTOP), whose kernel still answers.  0: never (a vanished "
		"peer is waited for until the consumer disconnects)." },
	[DFI_P_SRQ_GAP_MS] = { "DAPL_OFI_SRQ_GAP_MS", DFI_PARAM_INT, "5000",
		"On reliable-datagram IAs, how long, in milliseconds, an SRQ "
		"EP's receives that completed may wait for an earlier message "
		"of the same connection (tcp;ofi_rxm completes a large message "
		"after small ones behind it) before the connection ends with "
		"DAT_CONNECTION_EVENT_BROKEN: a peer that skipped a message "
		"would otherwise hold the SRQ's buffers unseen." },
};

const char *dfi_param_str(enum dfi_param_id id)
{
	const char *v = getenv(dfi_params[id].name);

	return (v && *v) ? v : dfi_params[id].def;
}

long dfi_param_int(enum dfi_param_id id)
{
	const char *v = dfi_param_str(id);
	char *end;
	long n = strtol(v, &end, dfi_params[id].type == DFI_PARAM_HEX ? 0 : 10);

	if (*v == '\0' || *end != '\0') {
		dfi_warn(DFI_SS_IA, "%s=%s is not a number; using %s",
			 dfi_params[id].name, v, dfi_params[id].def);
		n = strtol(dfi_params[id].def, NULL, 0);
	}
	return n;
}

bool dfi_param_set(enum dfi_param_id id)
{
	const char *v = getenv(dfi_params[id].name);

	return v && *v;
}

void dfi_param_check_unknown(void)
{
	extern char **environ;
	static const char prefix[] = "DAPL_OFI_";

	for (char **e = environ; e && *e; e++) {
		const char *eq;
		size_t n;
		bool known = false;

		if (strncmp(*e, prefix, sizeof(prefix) - 1) != 0)
			continue;
		eq = strchr(*e, '=');
		n = eq ? (size_t)(eq - *e) : strlen(*e);
		for (int i = 0; i < DFI_P_COUNT; i++)
			if (strlen(dfi_params[i].name) == n &&
			    strncmp(dfi_params[i].name, *e, n) == 0)
				known = true;
		if (!known)
			dfi_warn(DFI_SS_IA, "unknown variable %.*s ignored "
				 "(daplofi-info lists the known ones)", (int)n, *e);
	}
}
