/* The configuration table.  Add a tunable here and nowhere else. */
#include "param.h"
#include "log.h"

#include <stdio.h>
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
		"on 2 cores).  The thread sleeps in epoll between events; never "
		"on libfabric net, whose wait fds never settle.  0: normal "
		"scheduling." },
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
		"and a failed suppressed send is reported.  OFA uDAPL's "
		"DAPL_MAX_INLINE is taken for it when this is not set: 0 is 0, "
		"a size is 1 (the size stays libfabric's)." },
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
		"peer is waited for until the consumer disconnects).  OFA "
		"uDAPL's DAPL_ACK_TIMER and DAPL_ACK_RETRY are taken for it when "
		"this is not set: (retries + 1) x 4.096 us x 2^timer, as an IB "
		"RC connection breaks." },
	[DFI_P_SRQ_GAP_MS] = { "DAPL_OFI_SRQ_GAP_MS", DFI_PARAM_INT, "5000",
		"On reliable-datagram IAs, how long, in milliseconds, an SRQ "
		"EP's receives that completed may wait for an earlier message "
		"of the same connection (tcp;ofi_rxm completes a large message "
		"after small ones behind it) before the connection ends with "
		"DAT_CONNECTION_EVENT_BROKEN: a peer that skipped a message "
		"would otherwise hold the SRQ's buffers unseen." },
	[DFI_P_RDM_SINKS] = { "DAPL_OFI_RDM_SINKS", DFI_PARAM_INT, "-1",
		"On reliable-datagram IAs, how many receives per provider "
		"endpoint take the messages that arrive for connections that "
		"ended (a peer's sends still on their way), each posted at a "
		"connection's end and again at each message it takes; past "
		"the cap the oldest is cancelled.  -1: an eighth of the "
		"endpoint's receive queue (2048 on tcp;ofi_rxm and net, 128 "
		"on shm); 0: none, and such messages stay with the provider "
		"(net then stops reading from that peer)." },
	[DFI_P_RDM_TRANSMIT_COMPLETE] = { "DAPL_OFI_RDM_TRANSMIT_COMPLETE", DFI_PARAM_INT, "-1",
		"On reliable-datagram IAs over net or tcp;ofi_rxm, which carry "
		"every connection to a peer on one TCP stream: 1, a send or RDMA "
		"write completes once the peer's provider has it (libfabric's "
		"FI_TRANSMIT_COMPLETE: an acknowledgement each), not once it is "
		"in the local socket.  These providers drop the whole stream "
		"when a peer's RDMA access fails (a late write into a freed "
		"region), with the messages of other connections they had not "
		"read yet; acknowledged, such a message fails and its connection "
		"ends BROKEN instead of vanishing.  Suppressed sends then complete "
		"through the queue too (no fi_inject, whose failure nothing would "
		"report).  It costs a 64 B ping-pong about twice the time, and on "
		"tcp;ofi_rxm a target that polls memory (dtest -W) 1-5 ms a "
		"round trip.  -1: on net, off on tcp;ofi_rxm; 0: off, and such "
		"a loss is silent." },
	[DFI_P_MTU] = { "DAPL_OFI_MTU", DFI_PARAM_INT, "2048",
		"The IB transport MTU an IA reports (DAT_IB_TRANSPORT_MTU, "
		"256 or more) when its ia_params has no mtu=.  OFA uDAPL's "
		"DAPL_IB_MTU is taken for it when this is not set." },
	[DFI_P_FAULT_LATE_CONNECTED_MS] = { "DAPL_OFI_FAULT_LATE_CONNECTED_MS", DFI_PARAM_INT, "0",
		"For tests: on connected-endpoint IAs, the accepting side's "
		"FI_CONNECTED events reach dapl-ofi this many milliseconds "
		"late, the events behind them first, as libfabric tcp queues "
		"one when the thread that sent the accept is preempted before "
		"it writes the event (docs/rdm.md, \"Order across connections\").  "
		"0: off." },
	[DFI_P_FAULT_RDM_LOSE] = { "DAPL_OFI_FAULT_RDM_LOSE", DFI_PARAM_INT, "-1",
		"For tests: on reliable-datagram IAs, message N (counted from 0) "
		"that each connection sends is lost, as a provider loses the "
		"messages in a stream it tears down: its send completes, its "
		"peer never sees it (docs/rdm.md, \"Numbered messages\").  "
		"-1: off." },
	[DFI_P_FAULT_CQ_OPEN] = { "DAPL_OFI_FAULT_CQ_OPEN", DFI_PARAM_INT, "0",
		"For tests: 1, every completion queue dapl-ofi opens fails with "
		"FI_ENOSYS (Function not implemented), as fi_cq_open of "
		"udp;ofi_rxd once did: the IA opens, and the first call that "
		"needs its EVDs' queues (dat_ep_create, dat_ep_connect or "
		"dat_cr_accept) fails, as daplofi-info's self-test reports.  "
		"0: off." },
};

/*
 * OFA uDAPL 2.1.10's variables, as its three providers read them (the
 * names its libdaplofa/scm/ucm.so.2 hold).  A launch file written for OFA
 * keeps working: the ones with a meaning over libfabric are honoured, the
 * others each draw one warning instead of silence.
 */
#define IGN(n, w) { n, DFI_OFA_IGNORED, DFI_P_COUNT, w }
const struct dfi_ofa_var dfi_ofa_vars[] = {
	{ "DAPL_DBG_TYPE", DFI_OFA_SAME, DFI_P_DBG_TYPE, "debug mask" },
	{ "DAPL_DBG_DEST", DFI_OFA_SAME, DFI_P_DBG_DEST, "debug destination" },
	{ "DAPL_IB_MTU", DFI_OFA_AS, DFI_P_MTU, "IB path MTU" },
	{ "DAPL_ACK_TIMER", DFI_OFA_AS, DFI_P_PEER_TIMEOUT_MS,
	  "IB RC ACK timeout, 4.096 us * 2^n" },
	{ "DAPL_ACK_RETRY", DFI_OFA_AS, DFI_P_PEER_TIMEOUT_MS, "IB RC ACK retries" },
	{ "DAPL_MAX_INLINE", DFI_OFA_AS, DFI_P_INJECT, "inline send size" },
	IGN("DAPL_DBG_LEVEL", "a debug level of OFA's own; DAPL_OFI_LOG_LEVEL sets ours"),
	IGN("DAPL_DBG_SYS_MEM", "OFA's memory-use report; none here"),
	IGN("DAPL_WR_MAX", "a cap on IB work requests per QP; libfabric sizes the queues"),
	IGN("DAPL_IB_PKEY", "the IB partition key; a libfabric provider's own setting"),
	IGN("DAPL_IB_SL", "the IB service level; a libfabric provider's own setting"),
	IGN("DAPL_GLOBAL_ROUTING", "IB global routing (GRH); a libfabric provider's own setting"),
	IGN("DAPL_HOP_LIMIT", "the IB GRH hop limit; a libfabric provider's own setting"),
	IGN("DAPL_TCLASS", "the IB GRH traffic class; a libfabric provider's own setting"),
	IGN("DAPL_RNR_TIMER", "the IB receiver-not-ready timer; DAT receives are flow-"
	    "controlled by dapl-ofi"),
	IGN("DAPL_RNR_RETRY", "the IB receiver-not-ready retries; DAT receives are flow-"
	    "controlled by dapl-ofi"),
	IGN("DAPL_LOOPBACK", "OFA's loopback switch; 127.0.0.1 and shm serve it here"),
	IGN("DAPL_SCM_NETDEV", "the socket CM's interface; ia_params names it here"),
	IGN("DAPL_CM_TOS", "the rdma_cm type of service; no rdma_cm here"),
	IGN("DAPL_CM_ARP_TIMEOUT_MS", "rdma_cm address resolution; no rdma_cm here"),
	IGN("DAPL_CM_ARP_RETRY_COUNT", "rdma_cm address resolution; no rdma_cm here"),
	IGN("DAPL_CM_ROUTE_TIMEOUT_MS", "rdma_cm route resolution; no rdma_cm here"),
	IGN("DAPL_CM_ROUTE_RETRY_COUNT", "rdma_cm route resolution; no rdma_cm here"),
	IGN("DAPL_MAX_CM_RESPONSE_TIME", "the IB CM's response time; libfabric connects"),
	IGN("DAPL_MAX_CM_RETRIES", "the IB CM's retries; libfabric connects"),
	IGN("DAPL_UCM_ARRAY_BITS", "the ucm UD CM's tables; not used here"),
	IGN("DAPL_UCM_ENTRY_BITS", "the ucm UD CM's tables; not used here"),
	IGN("DAPL_UCM_CQ_SIZE", "the ucm UD CM's queues; not used here"),
	IGN("DAPL_UCM_QP_SIZE", "the ucm UD CM's queues; not used here"),
	IGN("DAPL_UCM_TX_BURST", "the ucm UD CM's send burst; not used here"),
	IGN("DAPL_UCM_REP_TIME", "a ucm UD CM timer; libfabric connects"),
	IGN("DAPL_UCM_RTU_TIME", "a ucm UD CM timer; libfabric connects"),
	IGN("DAPL_UCM_DREP_TIME", "a ucm UD CM timer; libfabric connects"),
	IGN("DAPL_UCM_DREQ_RETRY", "a ucm UD CM retry count; libfabric connects"),
	IGN("DAPL_UCM_RETRY", "a ucm UD CM retry count; libfabric connects"),
	IGN("DAPL_UCM_TIMER", "a ucm UD CM timer; libfabric connects"),
	IGN("DAPL_UCM_WAIT_TIME", "a ucm UD CM timer; libfabric connects"),
	IGN("DAPL_NETWORK_NODES", "ucm's job-size hint; not used here"),
	IGN("DAPL_NETWORK_PPN", "ucm's job-size hint; not used here"),
	IGN("DAPL_NETWORK_PROCESS_NUM", "ucm's job-size hint; not used here"),
	IGN("DAPL_NETWORK_TRESHOLD", "ucm's job-size hint; not used here"),
};
#undef IGN
const int dfi_ofa_nvars = sizeof(dfi_ofa_vars) / sizeof(dfi_ofa_vars[0]);

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* OFA's defaults (scm, ucm): ACK timer 16 (268 ms), 7 retries. */
#define OFA_ACK_TIMER	16
#define OFA_ACK_RETRY	7

/* What the OFA variables that stand for DAPL_OFI_ variable id say, as
 * that variable's text in buf; NULL when none is set (or it is not a
 * number, which the info line reports). */
static const char *ofa_value(enum dfi_param_id id, char *buf, size_t len)
{
	const char *a, *b;
	char *end;
	long v, r;

	switch (id) {
	case DFI_P_MTU:
		/* OFA reads any number and falls back to 1024 for one that is
		 * not an IB MTU; the IA reports what was asked for */
		if (!(a = env("DAPL_IB_MTU")) || (v = strtol(a, &end, 10), *end) || v < 256)
			return NULL;
		snprintf(buf, len, "%ld", v);
		return buf;
	case DFI_P_PEER_TIMEOUT_MS:
		/* an IB RC QP errors after (retries + 1) ACK timeouts of
		 * 4.096 us * 2^timer each; timer 0 waits for ever, as
		 * DAPL_OFI_PEER_TIMEOUT_MS=0 */
		a = env("DAPL_ACK_TIMER");
		b = env("DAPL_ACK_RETRY");
		if (!a && !b)
			return NULL;
		v = a ? strtol(a, &end, 10) : OFA_ACK_TIMER;
		if (a && (*end || v < 0 || v > 31))
			return NULL;
		r = b ? strtol(b, &end, 10) : OFA_ACK_RETRY;
		if (b && (*end || r < 0 || r > 7))
			return NULL;
		snprintf(buf, len, "%lld", v == 0 ? 0LL :
			 ((4096LL << v) * (r + 1) + 999999) / 1000000);
		return buf;
	case DFI_P_INJECT:
		/* no inline sends, or some: the size is the provider's */
		if (!(a = env("DAPL_MAX_INLINE")) || (v = strtol(a, &end, 10), *end) || v < 0)
			return NULL;
		snprintf(buf, len, "%d", v > 0);
		return buf;
	default:
		return NULL;
	}
}

/* Per thread: dfi_param_str's answer stays valid while other threads ask. */
static _Thread_local char ofa_buf[DFI_P_COUNT][24];


const char *dfi_param_str(enum dfi_param_id id)
{
	const char *v = env(dfi_params[id].name);

	if (!v)
		v = ofa_value(id, ofa_buf[id], sizeof(ofa_buf[id]));
	return v ? v : dfi_params[id].def;
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
	char buf[24];

	return env(dfi_params[id].name) || ofa_value(id, buf, sizeof(buf));
}

/* The OFA variables' lines: an info line per honoured one that is set
 * (which name won), a warning per ignored one. */
static void check_ofa(void)
{
	for (int i = 0; i < dfi_ofa_nvars; i++) {
		const struct dfi_ofa_var *o = &dfi_ofa_vars[i];
		const char *v = env(o->name), *ofi;
		char buf[24];

		if (!v)
			continue;
		switch (o->use) {
		case DFI_OFA_SAME:
			/* log.c: DAPL_OFI_LOG_LEVEL wins over the mask */
			if (o->as == DFI_P_DBG_TYPE && env(dfi_params[DFI_P_LOG_LEVEL].name))
				dfi_info(DFI_SS_IA, "%s=%s used, not OFA uDAPL's %s=%s (%s)",
					 dfi_params[DFI_P_LOG_LEVEL].name,
					 env(dfi_params[DFI_P_LOG_LEVEL].name), o->name, v, o->why);
			else
				dfi_info(DFI_SS_IA, "%s=%s (OFA uDAPL: %s) honoured as OFA "
					 "reads it", o->name, v, o->why);
			break;
		case DFI_OFA_AS:
			ofi = env(dfi_params[o->as].name);
			if (ofi)
				dfi_info(DFI_SS_IA, "%s=%s used, not OFA uDAPL's %s=%s (%s)",
					 dfi_params[o->as].name, ofi, o->name, v, o->why);
			else if (ofa_value(o->as, buf, sizeof(buf)))
				dfi_info(DFI_SS_IA, "%s=%s (OFA uDAPL: %s) honoured as %s=%s",
					 o->name, v, o->why, dfi_params[o->as].name, buf);
			else
				dfi_warn(DFI_SS_IA, "%s=%s (OFA uDAPL: %s) is not a value OFA "
					 "takes: ignored, %s=%s", o->name, v, o->why,
					 dfi_params[o->as].name, dfi_params[o->as].def);
			break;
		case DFI_OFA_IGNORED:
			dfi_warn(DFI_SS_IA, "%s=%s ignored (OFA uDAPL: %s; "
				 "dapl-ofi(7), MIGRATING FROM OFA uDAPL)", o->name, v, o->why);
			break;
		}
	}
}

void dfi_param_check_unknown(void)
{
	check_ofa();

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
