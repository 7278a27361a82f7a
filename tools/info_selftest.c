/*
 * info_selftest: daplofi-info's self-test.  An IA that opens is not yet one
 * a DAT program can use (over libfabric udp;ofi_rxd, dat_ia_open succeeded
 * and the first dat_ep_connect failed in fi_cq_open), so on each dapl-ofi IA
 * that opens, daplofi-info does what every DAT program does, through libdat2
 * only: one EP connects to another through the IA's own address, a message
 * crosses and is compared, then an abrupt disconnect and everything freed.
 * Every wait is bounded (ST_WAIT_US, ST_TOTAL_US); a call that never returns
 * is the watchdog's (watchdog_fire), which guards the entry's open and close
 * too.  What a failure means for the entry is daplofi-info.c's.
 */
#include "info_selftest.h"

#include <arpa/inet.h>
#include <dat2/udat.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ST_WAIT_US	(5u * 1000000u)		/* one wait, at most */
#define ST_TOTAL_US	(10u * 1000000u)	/* every wait of the test together */
#define ST_STR_(x)	#x
#define ST_STR(x)	ST_STR_(x)
#define ST_HALF		64			/* [0, 64) is sent, [64, 128) receives */

static const char st_msg[] = "daplofi-info self-test";

/* The test's objects and clock; what it finds goes to *r. */
struct selftest {
	struct info_selftest *r;
	DAT_IA_HANDLE ia;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lmr_ctx;
	DAT_EVD_HANDLE conn_evd, cr_evd, dto_evd;
	DAT_EP_HANDLE ep[2];		/* [0] connects, [1] accepts */
	DAT_PSP_HANDLE psp;
	DAT_CR_HANDLE cr;		/* a request not accepted yet */
	bool up[2];			/* ep[i] saw ESTABLISHED */
	char *buf;
	uint64_t start, end;		/* CLOCK_MONOTONIC, microseconds */
	DAT_IA_ADDRESS_PTR addr;	/* the IA's own, while it is open */
};

/* What the watchdog names: the IA and the call under way. */
static const char *volatile st_ia = "?";
static const char *volatile st_step = "dat_ia_open";
static volatile int st_fd = 2;		/* the real stderr, while captured */

/* SIGALRM: a call of the open, the self-test or the close did not return.
 * Say which on the real stderr, then die of the signal: the parent reports
 * it as it reports a crash (run_child, daplofi-info.c). */
static void watchdog_fire(int sig)
{
	const char *part[] = { "daplofi-info: IA '", st_ia, "': ", st_step,
			       " did not return in " ST_STR(INFO_WATCHDOG_S) " s\n" };

	for (size_t i = 0; i < sizeof(part) / sizeof(part[0]); i++)
		if (write(st_fd, part[i], strlen(part[i])) < 0)
			break;
	signal(sig, SIG_DFL);
	raise(sig);
}

void info_watchdog_step(const char *call)
{
	st_step = call;
}

void info_watchdog_arm(const char *ia, int fd)
{
	st_fd = fd;
	st_ia = ia;
	signal(SIGALRM, watchdog_fire);
	alarm(INFO_WATCHDOG_S);
}

void info_watchdog_disarm(void)
{
	alarm(0);
	st_fd = 2;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A wait's timeout: ST_WAIT_US, or what is left of the test's time. */
static DAT_TIMEOUT st_left(const struct selftest *t)
{
	uint64_t now = now_us();

	if (now >= t->end)
		return 0;
	return t->end - now < ST_WAIT_US ? (DAT_TIMEOUT)(t->end - now) : ST_WAIT_US;
}

static bool st_fail(struct selftest *t, const char *call, DAT_RETURN rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Record the test's first failure; false. */
static bool st_fail(struct selftest *t, const char *call, DAT_RETURN rc, const char *fmt, ...)
{
	va_list ap;

	if (t->r->call[0])
		return false;
	snprintf(t->r->call, sizeof(t->r->call), "%s", call);
	t->r->rc = rc;
	va_start(ap, fmt);
	vsnprintf(t->r->what, sizeof(t->r->what), fmt, ap);
	va_end(ap);
	return false;
}

/* rc of the call `name`: true for DAT_SUCCESS, else the failure recorded. */
static bool st_ok(struct selftest *t, DAT_RETURN rc, const char *name)
{
	if (rc != DAT_SUCCESS && !t->r->call[0]) {
		snprintf(t->r->call, sizeof(t->r->call), "%s", name);
		t->r->rc = rc;
	}
	return rc == DAT_SUCCESS;
}

/* One DAT call of the self-test: the watchdog knows it is under way, and
 * its failure is recorded. */
#define ST_CALL(t, name, call) (st_step = (name), st_ok((t), (call), (name)))

static const char *event_name(DAT_EVENT_NUMBER n)
{
	static char other[32];
	static const struct { DAT_EVENT_NUMBER n; const char *name; } names[] = {
#define EV(x) { x, #x }
		EV(DAT_DTO_COMPLETION_EVENT), EV(DAT_CONNECTION_REQUEST_EVENT),
		EV(DAT_CONNECTION_EVENT_ESTABLISHED), EV(DAT_CONNECTION_EVENT_PEER_REJECTED),
		EV(DAT_CONNECTION_EVENT_NON_PEER_REJECTED),
		EV(DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR),
		EV(DAT_CONNECTION_EVENT_DISCONNECTED), EV(DAT_CONNECTION_EVENT_BROKEN),
		EV(DAT_CONNECTION_EVENT_TIMED_OUT), EV(DAT_CONNECTION_EVENT_UNREACHABLE),
		EV(DAT_ASYNC_ERROR_EVD_OVERFLOW), EV(DAT_ASYNC_ERROR_IA_CATASTROPHIC),
		EV(DAT_ASYNC_ERROR_EP_BROKEN), EV(DAT_ASYNC_ERROR_TIMED_OUT),
		EV(DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR),
#undef EV
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].n == n)
			return names[i].name;
	snprintf(other, sizeof(other), "event 0x%x", (unsigned)n);
	return other;
}

static const char *dto_status_name(DAT_DTO_COMPLETION_STATUS s)
{
	static char other[32];
	static const char *const names[] = {
		[DAT_DTO_SUCCESS] = "DAT_DTO_SUCCESS",
		[DAT_DTO_ERR_FLUSHED] = "DAT_DTO_ERR_FLUSHED",
		[DAT_DTO_ERR_LOCAL_LENGTH] = "DAT_DTO_ERR_LOCAL_LENGTH",
		[DAT_DTO_ERR_LOCAL_EP] = "DAT_DTO_ERR_LOCAL_EP",
		[DAT_DTO_ERR_LOCAL_PROTECTION] = "DAT_DTO_ERR_LOCAL_PROTECTION",
		[DAT_DTO_ERR_BAD_RESPONSE] = "DAT_DTO_ERR_BAD_RESPONSE",
		[DAT_DTO_ERR_REMOTE_ACCESS] = "DAT_DTO_ERR_REMOTE_ACCESS",
		[DAT_DTO_ERR_REMOTE_RESPONDER] = "DAT_DTO_ERR_REMOTE_RESPONDER",
		[DAT_DTO_ERR_TRANSPORT] = "DAT_DTO_ERR_TRANSPORT",
		[DAT_DTO_ERR_RECEIVER_NOT_READY] = "DAT_DTO_ERR_RECEIVER_NOT_READY",
		[DAT_DTO_ERR_PARTIAL_PACKET] = "DAT_DTO_ERR_PARTIAL_PACKET",
	};

	if ((unsigned)s < sizeof(names) / sizeof(names[0]) && names[s])
		return names[s];
	snprintf(other, sizeof(other), "status %d", (int)s);
	return other;
}

/* One event from evd in the test's time; false (recorded) if none. */
static bool st_wait(struct selftest *t, DAT_EVD_HANDLE evd, const char *evd_name,
		    const char *awaited, DAT_EVENT *ev)
{
	char call[64];
	DAT_COUNT nmore;
	DAT_TIMEOUT left = st_left(t);
	DAT_RETURN rc;

	st_step = "dat_evd_wait";
	rc = dat_evd_wait(evd, left, 1, ev, &nmore);
	if (rc == DAT_SUCCESS)
		return true;
	snprintf(call, sizeof(call), "dat_evd_wait (%s EVD)", evd_name);
	if (DAT_GET_TYPE(rc) == DAT_TIMEOUT_EXPIRED)
		return st_fail(t, call, rc, "no %s in %.1f s", awaited, left / 1e6);
	return st_fail(t, call, rc, "for %s", awaited);
}

/* The side of a connection event's EP: 0 connects, 1 accepts, -1 neither. */
static int st_side(const struct selftest *t, const DAT_EVENT *ev)
{
	DAT_EP_HANDLE ep = ev->event_data.connect_event_data.ep_handle;

	return ep == t->ep[0] ? 0 : ep == t->ep[1] ? 1 : -1;
}

static const char *const side_name[] = { "the connecting EP", "the accepting EP" };

/* Everything made and the connection up: a PZ, an LMR, a connection, a CR
 * and a DTO EVD, two EPs and a PSP, one EP connected to the other through
 * the IA's own address; false at the first failure. */
static bool st_build(struct selftest *t)
{
	DAT_REGION_DESCRIPTION region;
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR prov_attr;
	DAT_RMR_CONTEXT rmr_ctx;
	DAT_VLEN reg_len;
	DAT_VADDR reg_addr;
	DAT_EP_ATTR attr;
	DAT_EVENT ev;

	if (!ST_CALL(t, "dat_ia_query", dat_ia_query(t->ia, NULL, DAT_IA_FIELD_IA_ADDRESS_PTR,
						     &ia_attr, DAT_PROVIDER_FIELD_NONE,
						     &prov_attr)))
		return false;
	t->addr = ia_attr.ia_address_ptr;
	if (!t->addr)
		return st_fail(t, "dat_ia_query", DAT_SUCCESS, "no IA address");
	if (t->addr->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)t->addr)->sin_addr, t->r->addr_text,
			  sizeof(t->r->addr_text));
	else
		snprintf(t->r->addr_text, sizeof(t->r->addr_text), "family %d", t->addr->sa_family);
	if (!ST_CALL(t, "dat_pz_create", dat_pz_create(t->ia, &t->pz)))
		return false;
	t->buf = calloc(2, ST_HALF);
	if (!t->buf)
		return st_fail(t, "malloc", DAT_SUCCESS, "out of memory");
	memset(&region, 0, sizeof(region));
	region.for_va = t->buf;
	if (!ST_CALL(t, "dat_lmr_create",
		     dat_lmr_create(t->ia, DAT_MEM_TYPE_VIRTUAL, region, 2 * ST_HALF, t->pz,
				    DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG |
				    DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA, &t->lmr,
				    &t->lmr_ctx, &rmr_ctx, &reg_len, &reg_addr)) ||
	    !ST_CALL(t, "dat_evd_create (connection EVD)",
		     dat_evd_create(t->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
				    &t->conn_evd)) ||
	    !ST_CALL(t, "dat_evd_create (CR EVD)",
		     dat_evd_create(t->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &t->cr_evd)) ||
	    !ST_CALL(t, "dat_evd_create (DTO EVD)",
		     dat_evd_create(t->ia, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &t->dto_evd)))
		return false;
	memset(&attr, 0, sizeof(attr));	/* 0: the provider's default */
	attr.service_type = DAT_SERVICE_TYPE_RC;
	attr.max_recv_dtos = 2;
	attr.max_request_dtos = 2;
	attr.max_recv_iov = 1;
	attr.max_request_iov = 1;
	attr.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	attr.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	for (int i = 0; i < 2; i++)
		if (!ST_CALL(t, "dat_ep_create", dat_ep_create(t->ia, t->pz, t->dto_evd, t->dto_evd,
							       t->conn_evd, &attr, &t->ep[i])))
			return false;
	if (!ST_CALL(t, "dat_psp_create_any",
		     dat_psp_create_any(t->ia, &t->r->port, t->cr_evd, DAT_PSP_CONSUMER_FLAG,
					&t->psp)) ||
	    !ST_CALL(t, "dat_ep_connect",
		     dat_ep_connect(t->ep[0], t->addr, t->r->port, st_left(t), 0, NULL,
				    DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG)) ||
	    !st_wait(t, t->cr_evd, "CR", "connection request", &ev))
		return false;
	if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT)
		return st_fail(t, "dat_evd_wait (CR EVD)", DAT_SUCCESS,
			       "%s, not DAT_CONNECTION_REQUEST_EVENT", event_name(ev.event_number));
	t->cr = ev.event_data.cr_arrival_event_data.cr_handle;
	if (!ST_CALL(t, "dat_cr_accept", dat_cr_accept(t->cr, t->ep[1], 0, NULL)))
		return false;
	t->cr = DAT_HANDLE_NULL;
	while (!t->up[0] || !t->up[1]) {
		int side;

		if (!st_wait(t, t->conn_evd, "connection",
			     t->up[0] ? "ESTABLISHED for the accepting EP" :
			     t->up[1] ? "ESTABLISHED for the connecting EP" : "ESTABLISHED", &ev))
			return false;
		side = st_side(t, &ev);
		if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED || side < 0 || t->up[side])
			return st_fail(t, "dat_evd_wait (connection EVD)", DAT_SUCCESS,
				       "%s for %s, not DAT_CONNECTION_EVENT_ESTABLISHED",
				       event_name(ev.event_number),
				       side < 0 ? "an EP of neither side" : side_name[side]);
		t->up[side] = true;
	}
	return true;
}

/* A receive on the accepting EP, a send from the connecting one, both
 * completions, and the bytes compared. */
static bool st_message(struct selftest *t)
{
	DAT_LMR_TRIPLET send = { .virtual_address = (DAT_VADDR)(uintptr_t)t->buf,
				 .segment_length = sizeof(st_msg), .lmr_context = t->lmr_ctx };
	DAT_LMR_TRIPLET recv = { .virtual_address = (DAT_VADDR)(uintptr_t)(t->buf + ST_HALF),
				 .segment_length = ST_HALF, .lmr_context = t->lmr_ctx };
	DAT_DTO_COOKIE send_ck = { .as_64 = 1 }, recv_ck = { .as_64 = 2 };
	bool sent = false, received = false;
	DAT_EVENT ev;

	memcpy(t->buf, st_msg, sizeof(st_msg));
	if (!ST_CALL(t, "dat_ep_post_recv", dat_ep_post_recv(t->ep[1], 1, &recv, recv_ck,
							     DAT_COMPLETION_DEFAULT_FLAG)) ||
	    !ST_CALL(t, "dat_ep_post_send", dat_ep_post_send(t->ep[0], 1, &send, send_ck,
							     DAT_COMPLETION_DEFAULT_FLAG)))
		return false;
	while (!sent || !received) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		bool is_recv;

		if (!st_wait(t, t->dto_evd, "DTO", !sent && !received ?
			     "completion of the send or the receive" : sent ?
			     "completion of the receive" : "completion of the send", &ev))
			return false;
		is_recv = d->user_cookie.as_64 == recv_ck.as_64;
		if (ev.event_number != DAT_DTO_COMPLETION_EVENT ||
		    (!is_recv && d->user_cookie.as_64 != send_ck.as_64) ||
		    (is_recv ? received : sent))
			return st_fail(t, "dat_evd_wait (DTO EVD)", DAT_SUCCESS,
				       "%s (cookie %llu), not the completion of the send or "
				       "the receive",
				       event_name(ev.event_number),
				       (unsigned long long)d->user_cookie.as_64);
		if (d->status != DAT_DTO_SUCCESS)
			return st_fail(t, "dat_evd_wait (DTO EVD)", DAT_SUCCESS,
				       "the %s completed with %s", is_recv ? "receive" : "send",
				       dto_status_name(d->status));
		if (is_recv && (d->transfered_length != sizeof(st_msg) ||
				memcmp(t->buf + ST_HALF, st_msg, sizeof(st_msg)) != 0))
			return st_fail(t, "dat_evd_wait (DTO EVD)", DAT_SUCCESS,
				       "the receive holds %llu bytes '%.*s', not the %zu sent",
				       (unsigned long long)d->transfered_length, ST_HALF,
				       t->buf + ST_HALF, sizeof(st_msg));
		if (is_recv)
			received = true;
		else
			sent = true;
	}
	return true;
}

/* An abrupt disconnect, both ends seen gone, then every object freed in
 * reverse order.  After a failure, the same without the disconnect's
 * events: only the first failure is reported, and the IA's close takes
 * what remains. */
static void st_teardown(struct selftest *t)
{
	bool down[2] = { false, false };
	DAT_EVENT ev;

	if (t->cr) {
		st_step = "dat_cr_reject";
		dat_cr_reject(t->cr, 0, NULL);
	}
	if (t->up[0] && t->up[1] && !t->r->call[0] &&
	    ST_CALL(t, "dat_ep_disconnect", dat_ep_disconnect(t->ep[0], DAT_CLOSE_ABRUPT_FLAG)))
		while ((!down[0] || !down[1]) &&
		       st_wait(t, t->conn_evd, "connection", down[0] ?
			       "DAT_CONNECTION_EVENT_DISCONNECTED for the accepting EP" : down[1] ?
			       "DAT_CONNECTION_EVENT_DISCONNECTED for the connecting EP" :
			       "DAT_CONNECTION_EVENT_DISCONNECTED", &ev)) {
			int side = st_side(t, &ev);

			if ((ev.event_number != DAT_CONNECTION_EVENT_DISCONNECTED &&
			     ev.event_number != DAT_CONNECTION_EVENT_BROKEN) || side < 0 ||
			    down[side]) {
				st_fail(t, "dat_evd_wait (connection EVD)", DAT_SUCCESS,
					"%s for %s after dat_ep_disconnect, not "
					"DAT_CONNECTION_EVENT_DISCONNECTED",
					event_name(ev.event_number),
					side < 0 ? "an EP of neither side" : side_name[side]);
				break;
			}
			down[side] = true;
		}
#define ST_FREE(name, h, call) do {			\
		if (h) {				\
			ST_CALL(t, name, call);		\
			h = DAT_HANDLE_NULL;		\
		}					\
	} while (0)
	ST_FREE("dat_psp_free", t->psp, dat_psp_free(t->psp));
	ST_FREE("dat_ep_free", t->ep[1], dat_ep_free(t->ep[1]));
	ST_FREE("dat_ep_free", t->ep[0], dat_ep_free(t->ep[0]));
	ST_FREE("dat_evd_free (DTO EVD)", t->dto_evd, dat_evd_free(t->dto_evd));
	ST_FREE("dat_evd_free (CR EVD)", t->cr_evd, dat_evd_free(t->cr_evd));
	ST_FREE("dat_evd_free (connection EVD)", t->conn_evd, dat_evd_free(t->conn_evd));
	ST_FREE("dat_lmr_free", t->lmr, dat_lmr_free(t->lmr));
	ST_FREE("dat_pz_free", t->pz, dat_pz_free(t->pz));
#undef ST_FREE
	free(t->buf);
	t->buf = NULL;
}

bool info_selftest_run(DAT_IA_HANDLE ia, struct info_selftest *r)
{
	struct selftest test, *t = &test;

	memset(r, 0, sizeof(*r));
	memset(t, 0, sizeof(*t));
	r->msg_len = sizeof(st_msg);
	t->r = r;
	t->ia = ia;
	t->start = now_us();
	t->end = t->start + ST_TOTAL_US;
	if (st_build(t))
		st_message(t);
	st_teardown(t);
	r->took = now_us() - t->start;
	return !r->call[0];
}
