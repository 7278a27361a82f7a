/*
 * fault_peer: one side of the connections that tests/hosts/faults.sh breaks.
 * A plain DAT program (links -ldat2 only): it opens an IA through the
 * registry, connects (or accepts) -C connections, moves data in one of
 * three ways, and reports in lines that the script reads:
 *
 *   ready <ms>                    every connection is established
 *   event <ms> <EVENT> <n>        the first end of a connection, and how
 *                                 many ended with that event in all
 *   dto <status> <n>              completions by DAT status
 *   verified <n> bad <n>          messages received and checked
 *   sent <n>                      sends that completed with success
 *   tick <ms> <verified> <sent>   once a second while connected
 *   end <ms> <why>                why it stopped: ended, deadline, error
 *
 * <ms> is CLOCK_REALTIME in milliseconds, to set against the moment the
 * script injected its fault.  Modes (-m):
 *   send   stream 4 KiB messages, 8 in flight per connection
 *   recv   keep 32 receives posted per connection; check every message's
 *          sequence number (exactly once, in order) and its bytes
 *   idle   keep 32 receives posted, send nothing
 * It runs until every connection has ended, or for -t seconds.  -T gives
 * dat_ep_connect's timeout in ms (0: infinite); a server with -H holds the
 * first request without answering it ("held <ms>"), until it is killed.
 */
#include "peer.h"

#include <dat2/udat.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MSG	4096
#define NRECV	32
#define NSEND	8
#define MAXC	4096

enum mode { M_SEND, M_RECV, M_IDLE };

struct conn {
	DAT_EP_HANDLE ep;
	uint64_t next_tx, next_rx;	/* sequence numbers */
	int inflight;
	bool up, ended;
};

static struct conn *conns;
static int nconn = 1;
static enum mode mode = M_RECV;
static char *buf;		/* per connection: NRECV + NSEND slots of MSG */
static DAT_LMR_CONTEXT lmr_ctx;
static DAT_EVD_HANDLE dto_evd, conn_evd, cr_evd;
static uint64_t verified, bad, sent;
static uint64_t by_status[16];
static int ended;
static bool done;	/* "end" printed: later events are the program's own */

static const char *event_name(DAT_EVENT_NUMBER n)
{
	switch (n) {
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "ESTABLISHED";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DISCONNECTED";
	case DAT_CONNECTION_EVENT_BROKEN: return "BROKEN";
	case DAT_CONNECTION_EVENT_TIMED_OUT: return "TIMED_OUT";
	case DAT_CONNECTION_EVENT_PEER_REJECTED: return "PEER_REJECTED";
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return "NON_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_UNREACHABLE: return "UNREACHABLE";
	case DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR: return "ACCEPT_COMPLETION_ERROR";
	default: return "OTHER";
	}
}

static const char *status_name(int s)
{
	static const char *names[] = {
		[DAT_DTO_SUCCESS] = "SUCCESS", [DAT_DTO_ERR_FLUSHED] = "FLUSHED",
		[DAT_DTO_ERR_LOCAL_LENGTH] = "LOCAL_LENGTH",
		[DAT_DTO_ERR_LOCAL_EP] = "LOCAL_EP",
		[DAT_DTO_ERR_LOCAL_PROTECTION] = "LOCAL_PROTECTION",
		[DAT_DTO_ERR_BAD_RESPONSE] = "BAD_RESPONSE",
		[DAT_DTO_ERR_REMOTE_ACCESS] = "REMOTE_ACCESS",
		[DAT_DTO_ERR_REMOTE_RESPONDER] = "REMOTE_RESPONDER",
		[DAT_DTO_ERR_TRANSPORT] = "TRANSPORT",
		[DAT_DTO_ERR_RECEIVER_NOT_READY] = "RECEIVER_NOT_READY",
		[DAT_DTO_ERR_PARTIAL_PACKET] = "PARTIAL_PACKET",
		[DAT_RMR_OPERATION_FAILED] = "RMR_OPERATION_FAILED",
	};

	return s >= 0 && s < (int)(sizeof(names) / sizeof(names[0])) && names[s] ? names[s] : "OTHER";
}

static char *slot(int c, int i)
{
	return buf + ((size_t)c * (NRECV + NSEND) + (size_t)i) * MSG;
}

/* Message seq of a connection: its number, then bytes that depend on both. */
static void fill(char *p, int c, uint64_t seq)
{
	memcpy(p, &seq, sizeof(seq));
	for (size_t i = sizeof(seq); i < MSG; i++)
		p[i] = (char)(seq * 131 + (uint64_t)c * 7 + i);
}

static bool check(const char *p, int c, uint64_t seq)
{
	uint64_t got;

	memcpy(&got, p, sizeof(got));
	if (got != seq)
		return false;
	for (size_t i = sizeof(seq); i < MSG; i++)
		if (p[i] != (char)(seq * 131 + (uint64_t)c * 7 + i))
			return false;
	return true;
}

/* cookie: connection << 8 | slot */
static DAT_RETURN post(int c, int i, bool send)
{
	DAT_LMR_TRIPLET iov = {
		.lmr_context = lmr_ctx,
		.virtual_address = (DAT_VADDR)(uintptr_t)slot(c, i),
		.segment_length = MSG,
	};
	DAT_DTO_COOKIE ck = { .as_64 = ((uint64_t)c << 8) | (uint64_t)i };

	if (send)
		return dat_ep_post_send(conns[c].ep, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG);
	return dat_ep_post_recv(conns[c].ep, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG);
}

static void pump(int c)
{
	struct conn *k = &conns[c];

	while (mode == M_SEND && k->up && k->inflight < NSEND) {
		int i = NRECV + (int)(k->next_tx % NSEND);

		fill(slot(c, i), c, k->next_tx);
		if (post(c, i, true) != DAT_SUCCESS)
			return;		/* the connection is going: its event follows */
		k->next_tx++;
		k->inflight++;
	}
}

static void on_dto(const DAT_DTO_COMPLETION_EVENT_DATA *d)
{
	int c = (int)(d->user_cookie.as_64 >> 8), i = (int)(d->user_cookie.as_64 & 0xff);
	struct conn *k;

	if (c < 0 || c >= nconn)
		return;
	k = &conns[c];
	by_status[d->status < 16 ? d->status : 15]++;
	if (i >= NRECV) {
		k->inflight--;
		if (d->status == DAT_DTO_SUCCESS) {
			sent++;
			pump(c);
		}
		return;
	}
	if (d->status != DAT_DTO_SUCCESS)
		return;
	if (d->transfered_length != MSG || !check(slot(c, i), c, k->next_rx))
		bad++;
	else
		verified++;
	k->next_rx++;
	if (k->up)
		(void)post(c, i, false);
}

static void on_conn(const DAT_EVENT *ev)
{
	static int n_first;
	static DAT_EVENT_NUMBER first;
	DAT_EP_HANDLE ep = ev->event_data.connect_event_data.ep_handle;

	for (int c = 0; c < nconn; c++) {
		if (conns[c].ep != ep)
			continue;
		if (ev->event_number == DAT_CONNECTION_EVENT_ESTABLISHED) {
			conns[c].up = true;
			pump(c);
			return;
		}
		conns[c].up = false;
		if (conns[c].ended)
			return;
		conns[c].ended = true;
		ended++;
		if (done)
			return;
		if (!n_first++) {
			first = ev->event_number;
			printf("event %" PRIu64 " %s\n", wall_ms(), event_name(first));
			fflush(stdout);
		}
		if (ended == nconn)
			printf("ended %d, %d of them %s\n", ended, n_first, event_name(first));
		return;
	}
}

/* The connection events, and the completions that come within us
 * microseconds. */
static void drain(DAT_TIMEOUT us)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	while (dat_evd_dequeue(conn_evd, &ev) == DAT_SUCCESS)
		on_conn(&ev);
	/* a bounded batch: a connection's end is seen (and timed) between
	 * the flushes of 1000 others */
	if (dat_evd_wait(dto_evd, us, 1, &ev, &nmore) == DAT_SUCCESS) {
		on_dto(&ev.event_data.dto_completion_event_data);
		for (int i = 0; i < 256 && dat_evd_dequeue(dto_evd, &ev) == DAT_SUCCESS; i++)
			on_dto(&ev.event_data.dto_completion_event_data);
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: fault_peer -n IA (-s | -c HOST) [-p PORT] [-m send|recv|idle] "
		"[-C CONNS] [-t SECONDS] [-T CONNECT_MS] [-H]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	char *ia_name = NULL;
	const char *host = NULL;
	int port = 18700, secs = 60, opt;
	long connect_ms = 10000;
	bool server = false, hold = false;
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_RMR_CONTEXT rmr_ctx;
	DAT_VLEN reg_len;
	DAT_VADDR reg_addr;
	DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
	DAT_RETURN rc;
	size_t len;
	double deadline;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "n:sc:p:m:C:t:T:H")) != -1) {
		switch (opt) {
		case 'n': ia_name = optarg; break;
		case 's': server = true; break;
		case 'c': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'm':
			mode = !strcmp(optarg, "send") ? M_SEND : !strcmp(optarg, "idle") ? M_IDLE :
			       !strcmp(optarg, "recv") ? M_RECV : (usage(), M_RECV);
			break;
		case 'C': nconn = atoi(optarg); break;
		case 't': secs = atoi(optarg); break;
		case 'T': connect_ms = atol(optarg); break;
		case 'H': hold = true; break;
		default: usage();
		}
	}
	if (!ia_name || server == !!host || nconn < 1 || nconn > MAXC || secs < 1)
		usage();
	deadline = mono_s() + secs;
	conns = calloc((size_t)nconn, sizeof(*conns));
	len = (size_t)nconn * (NRECV + NSEND) * MSG;
	buf = calloc(1, len);
	if (!conns || !buf)
		die("calloc", DAT_INSUFFICIENT_RESOURCES);
	if ((rc = dat_ia_open(ia_name, 64, &async, &ia)))
		die("dat_ia_open", rc);
	if ((rc = dat_pz_create(ia, &pz)))
		die("dat_pz_create", rc);
	if ((rc = dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, (DAT_REGION_DESCRIPTION){ .for_va = buf },
				 len, pz, DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lmr_ctx,
				 &rmr_ctx, &reg_len, &reg_addr)))
		die("dat_lmr_create", rc);
	if ((rc = dat_evd_create(ia, nconn * (NRECV + NSEND) + 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG,
				 &dto_evd)))
		die("dat_evd_create(dto)", rc);
	if ((rc = dat_evd_create(ia, 2 * nconn + 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
				 &conn_evd)))
		die("dat_evd_create(conn)", rc);
	if (server) {
		if ((rc = dat_evd_create(ia, nconn + 16, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd)))
			die("dat_evd_create(cr)", rc);
		if ((rc = dat_psp_create(ia, (DAT_CONN_QUAL)port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp)))
			die("dat_psp_create", rc);
		printf("listening %d\n", port);
	}
	for (int c = 0; c < nconn; c++) {
		DAT_EP_ATTR attr;

		memset(&attr, 0, sizeof(attr));
		attr.service_type = DAT_SERVICE_TYPE_RC;
		attr.max_mtu_size = MSG;
		attr.qos = DAT_QOS_BEST_EFFORT;
		attr.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
		attr.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
		attr.max_recv_dtos = NRECV;
		attr.max_request_dtos = NSEND;
		attr.max_recv_iov = 1;
		attr.max_request_iov = 1;
		if ((rc = dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, &attr, &conns[c].ep)))
			die("dat_ep_create", rc);
		for (int i = 0; i < NRECV; i++)
			if ((rc = post(c, i, false)))
				die("dat_ep_post_recv", rc);
	}
	for (int c = 0, up = 0; up < nconn;) {
		DAT_EVENT ev;
		DAT_COUNT nmore;

		if (mono_s() > deadline)
			die("connecting", DAT_TIMEOUT_EXPIRED);
		if (server) {
			if (c < nconn && dat_evd_wait(cr_evd, 10000, 1, &ev, &nmore) == DAT_SUCCESS &&
			    ev.event_number == DAT_CONNECTION_REQUEST_EVENT) {
				if (hold) {
					printf("held %" PRIu64 "\n", wall_ms());
					while (mono_s() < deadline)
						sleep(1);
					die("holding", DAT_TIMEOUT_EXPIRED);
				}
				rc = dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle,
						   conns[c++].ep, 0, NULL);
				if (rc)
					die("dat_cr_accept", rc);
			}
		} else if (c < nconn) {
			struct sockaddr_in sin = { .sin_family = AF_INET };

			if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
				usage();
			rc = dat_ep_connect(conns[c++].ep, (DAT_IA_ADDRESS_PTR)&sin, (DAT_CONN_QUAL)port,
					    connect_ms ? (DAT_TIMEOUT)connect_ms * 1000 :
					    DAT_TIMEOUT_INFINITE, 0, NULL, DAT_QOS_BEST_EFFORT,
					    DAT_CONNECT_DEFAULT_FLAG);
			if (rc)
				die("dat_ep_connect", rc);
		}
		while (dat_evd_wait(conn_evd, (c < nconn) ? 0 : 10000, 1, &ev, &nmore) ==
		       DAT_SUCCESS) {
			if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED) {
				printf("event %" PRIu64 " %s\n", wall_ms(), event_name(ev.event_number));
				die("connecting", DAT_ABORT);
			}
			on_conn(&ev);
			up++;
			if (c < nconn)
				break;
		}
	}
	printf("ready %" PRIu64 " %d\n", wall_ms(), nconn);
	for (double tick = mono_s() + 1; ended < nconn && mono_s() < deadline;) {
		drain(100000);
		if (mono_s() >= tick) {
			printf("tick %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", wall_ms(), verified, sent);
			tick += 1;
		}
	}
	/* the flushes of what was posted, and the rest of the events */
	for (double t = mono_s() + 2; mono_s() < t;)
		drain(100000);
	for (int s = 0; s < 16; s++)
		if (by_status[s])
			printf("dto %s %" PRIu64 "\n", status_name(s), by_status[s]);
	printf("verified %" PRIu64 " bad %" PRIu64 "\n", verified, bad);
	printf("sent %" PRIu64 "\n", sent);
	printf("end %" PRIu64 " %s\n", wall_ms(), ended == nconn ? "ended" : "deadline");
	done = true;
	for (int c = 0; c < nconn; c++) {
		if (!conns[c].ended)
			dat_ep_disconnect(conns[c].ep, DAT_CLOSE_ABRUPT_FLAG);
	}
	/* a short grace for the disconnects' events, then everything goes */
	for (double t = mono_s() + 1; mono_s() < t;)
		drain(50000);
	for (int c = 0; c < nconn; c++)
		dat_ep_free(conns[c].ep);
	if (psp)
		dat_psp_free(psp);
	dat_lmr_free(lmr);
	dat_evd_free(dto_evd);
	dat_evd_free(conn_evd);
	if (cr_evd)
		dat_evd_free(cr_evd);
	dat_pz_free(pz);
	dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	free(buf);
	free(conns);
	return ended == nconn ? 0 : 3;
}
