/*
 * upcall-echo: an event-driven echo server and its client, over dapl-ofi's
 * kDAT upcall policies (<dat2/dat_ofi_extensions.h>, dat_evd_modify_upcall(3)),
 * reached through the stock DAT registry.  It links -ldat2 only.
 *
 *   upcall-echo [-P ia] [-p port] [-t seconds]                       server
 *   upcall-echo -c [-h host] [-P ia] [-p port] [-n messages] [-s size]
 *               [-w window] [-t seconds]                             client
 *
 * The client sends n numbered messages, never more than `window` of them
 * whose echo has not come back, and checks every echo: its length, its
 * number, its content and its order.  The server sends each message back as
 * it arrives.  Neither side has a receive loop: every completion goes to an
 * upcall, which dapl-ofi runs in one of its dispatcher threads, while the
 * main thread sleeps until the session is over.  The server serves one
 * client, then exits; both exit 0 only if every message was echoed right.
 *
 * What to copy from here (each point is marked LESSON n below):
 *   1. check that the IA offers the extension before calling it;
 *   2. create the EVDs that carry data with dat_evd_kcreate: the policy is
 *      in force before the EVD exists for anyone, so no event can slip by;
 *   3. under DAT_UPCALL_SINGLE_INSTANCE the upcalls of one EVD never
 *      overlap: state that only that upcall touches needs no lock;
 *   4. to hand an EVD that may already hold events to an upcall, enable the
 *      upcall and THEN dequeue until DAT_QUEUE_EMPTY once more (the server),
 *      or use dat_evd_arm_upcall and its npending (the client);
 *   5. an upcall may post, dequeue and read more_events, but must not block:
 *      it runs on one of a few threads shared by every EVD of the IA;
 *   6. shut down with DAT_UPCALL_TEARDOWN before freeing what upcalls use.
 *
 * The connection request and the establishment are handled with plain,
 * bounded dat_evd_wait calls: they happen once, in sequence.  The end of the
 * connection, which can come at any time, is handled by an upcall.
 */
#include <dat2/udat.h>
#include <dat2/dat_ofi_extensions.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROG		"upcall-echo"
#define DEFAULT_PORT	18600
#define SERVER_RECVS	64		/* receive buffers of the server */
/* The client never has more than `window` messages without their echo.
 * The server needs a posted receive for each, and holds each buffer a
 * little longer, until its echo's send has completed: half its buffers
 * for the window leaves room for those. */
#define MAX_WINDOW	(SERVER_RECVS / 2)
#define MIN_SIZE	4		/* a message starts with its number */
#define MAX_SIZE	(1u << 20)
#define HELLO_MAGIC	0x75656368u	/* "uech" */
#define GRACE_US	2000000u	/* cleanup waits, even past the deadline */

/* The client's connection private data: what the server must expect. */
struct hello {
	uint32_t magic, size, count, window;	/* network byte order */
};

struct app {
	/* Set up by main before any upcall can run; read-only afterwards. */
	bool client;
	char *ia_name;			/* DAT_NAME_PTR is not const */
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd, cr_evd, conn_evd, dto_evd;
	DAT_PZ_HANDLE pz;
	DAT_PSP_HANDLE psp;
	DAT_EP_HANDLE ep;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lmr_ctx;
	uint8_t *mem;			/* nrecv receive slots, then (client) window send slots */
	uint32_t size, count, window, nrecv;
	uint64_t deadline;		/* CLOCK_MONOTONIC ns: every wait ends by then */

	/*
	 * LESSON 3.  Owned by the upcall of dto_evd.  Its policy is
	 * DAT_UPCALL_SINGLE_INSTANCE, so two of its upcalls never run at the
	 * same time, even on different dispatcher threads: these fields need
	 * no lock.  main reads them only after DAT_UPCALL_TEARDOWN, which
	 * returns once the last upcall has returned.
	 */
	uint32_t sent, echoed;
	bool send_busy[MAX_WINDOW];	/* client: the send from this slot is not complete */
	bool dto_dead;			/* the upcall failed: ignore the rest */
	uint64_t t_start, t_end;

	/* Shared by both upcalls and main: under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* on CLOCK_MONOTONIC; any change below */
	bool finished;			/* client: every echo came back right */
	bool conn_ended;		/* DISCONNECTED or BROKEN seen */
	DAT_EVENT_NUMBER conn_end;
	const char *conn_end_by;	/* "the upcall" or "the final poll" */
	bool failed;
	char why[256];			/* the first failure */
};

/* ------------------------------------------------------------ helpers */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Microseconds left until the deadline, for dat_evd_wait (0: passed). */
static DAT_TIMEOUT left_us(const struct app *a)
{
	uint64_t now = now_ns(), us;

	if (now >= a->deadline)
		return 0;
	us = (a->deadline - now + 999) / 1000;
	return us < DAT_TIMEOUT_INFINITE ? (DAT_TIMEOUT)us : DAT_TIMEOUT_INFINITE - 1;
}

/* Prints what failed; returns true if rc is an error. */
static bool dat_failed(DAT_RETURN rc, const char *what)
{
	const char *major = "", *minor = "";

	if (rc == DAT_SUCCESS)
		return false;
	dat_strerror(rc, &major, &minor);
	fprintf(stderr, PROG ": %s: %s %s (0x%x)\n", what, major, minor, (unsigned)rc);
	return true;
}

__attribute__((format(printf, 2, 3)))
static void fail(struct app *a, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&a->lock);
	if (!a->failed) {
		va_start(ap, fmt);
		vsnprintf(a->why, sizeof(a->why), fmt, ap);
		va_end(ap);
		a->failed = true;
	}
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static const char *event_name(DAT_EVENT_NUMBER n)
{
	switch (n) {
	case DAT_DTO_COMPLETION_EVENT: return "DAT_DTO_COMPLETION_EVENT";
	case DAT_CONNECTION_REQUEST_EVENT: return "DAT_CONNECTION_REQUEST_EVENT";
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "DAT_CONNECTION_EVENT_ESTABLISHED";
	case DAT_CONNECTION_EVENT_PEER_REJECTED: return "DAT_CONNECTION_EVENT_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return "DAT_CONNECTION_EVENT_NON_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR:
		return "DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DAT_CONNECTION_EVENT_DISCONNECTED";
	case DAT_CONNECTION_EVENT_BROKEN: return "DAT_CONNECTION_EVENT_BROKEN";
	case DAT_CONNECTION_EVENT_TIMED_OUT: return "DAT_CONNECTION_EVENT_TIMED_OUT";
	case DAT_CONNECTION_EVENT_UNREACHABLE: return "DAT_CONNECTION_EVENT_UNREACHABLE";
	case DAT_ASYNC_ERROR_EVD_OVERFLOW: return "DAT_ASYNC_ERROR_EVD_OVERFLOW";
	case DAT_SOFTWARE_EVENT: return "DAT_SOFTWARE_EVENT";
	default: return "an unexpected event";
	}
}

static uint8_t *slot_mem(const struct app *a, uint32_t slot)
{
	return a->mem + (size_t)slot * a->size;
}

/* Receive slots are 0..nrecv-1; the client's send slots follow them. */
static DAT_RETURN post(struct app *a, bool send, uint32_t slot, uint32_t len)
{
	DAT_LMR_TRIPLET iov;
	DAT_DTO_COOKIE cookie;

	iov.virtual_address = (DAT_VADDR)(uintptr_t)slot_mem(a, slot);
	iov.segment_length = len;
	iov.lmr_context = a->lmr_ctx;
	memset(&cookie, 0, sizeof(cookie));
	cookie.as_64 = slot;
	return send ? dat_ep_post_send(a->ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG) :
		      dat_ep_post_recv(a->ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG);
}

/* Message `seq`: its number (network order), then a pattern that depends on it. */
static uint8_t pattern(uint32_t seq, uint32_t i)
{
	return (uint8_t)(seq * 131u + i * 7u + 1u);
}

static void make_message(uint8_t *p, uint32_t seq, uint32_t size)
{
	uint32_t n = htonl(seq);

	memcpy(p, &n, sizeof(n));
	for (uint32_t i = sizeof(n); i < size; i++)
		p[i] = pattern(seq, i);
}

/* ------------------------------------------------- the connection upcall */

/*
 * Called by the connection EVD's upcall, and by main for the events it
 * dequeues itself right after enabling that upcall (LESSON 4): the two may
 * run at the same time, hence the lock.
 */
static void on_conn_event(struct app *a, const DAT_EVENT *ev, const char *by)
{
	pthread_mutex_lock(&a->lock);
	if (ev->event_number == DAT_CONNECTION_EVENT_DISCONNECTED ||
	    ev->event_number == DAT_CONNECTION_EVENT_BROKEN) {
		if (!a->conn_ended) {
			a->conn_ended = true;
			a->conn_end = ev->event_number;
			a->conn_end_by = by;
		}
	} else if (!a->failed) {
		snprintf(a->why, sizeof(a->why), "%s (0x%x) on the connection EVD",
			 event_name(ev->event_number), (unsigned)ev->event_number);
		a->failed = true;
	}
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

static void conn_upcall(DAT_PVOID instance_data, const DAT_EVENT *ev, DAT_BOOLEAN more_events)
{
	(void)more_events;
	on_conn_event(instance_data, ev, "the upcall");
}

/* ------------------------------------------------------ the data upcalls */

/*
 * Server: one event per call, in queue order, never two at once.
 * A receive is echoed straight from its buffer (no copy); the buffer is
 * posted as a receive again when that send has completed.  So each of the
 * SERVER_RECVS buffers holds at most one posted DTO at any time, and the
 * send queue can never overflow, whatever the client does.
 */
static void server_dto_upcall(DAT_PVOID instance_data, const DAT_EVENT *ev,
			      DAT_BOOLEAN more_events)
{
	struct app *a = instance_data;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
	uint32_t slot = (uint32_t)d->user_cookie.as_64;
	DAT_RETURN rc;

	(void)more_events;	/* the server has no use for it: see the client */
	if (a->dto_dead)
		return;
	if (ev->event_number != DAT_DTO_COMPLETION_EVENT || slot >= a->nrecv) {
		a->dto_dead = true;
		fail(a, "server: %s (0x%x, cookie %u) on the data EVD", event_name(ev->event_number),
		     (unsigned)ev->event_number, slot);
		return;
	}
	if (d->status == DAT_DTO_ERR_FLUSHED)
		return;		/* the connection is over: what was posted comes back unused */
	if (d->status != DAT_DTO_SUCCESS) {
		a->dto_dead = true;
		fail(a, "server: a %s completed with DTO status %d",
		     d->operation == DAT_DTO_SEND ? "send" : "receive", (int)d->status);
		return;
	}
	if (d->operation == DAT_DTO_RECEIVE) {
		/* Upcalls may post (no provider lock is held): send the echo. */
		rc = post(a, true, slot, d->transfered_length);
		if (rc == DAT_SUCCESS)
			a->echoed++;
	} else {
		rc = post(a, false, slot, a->size);	/* the echo left: receive again */
	}
	if (rc != DAT_SUCCESS) {
		a->dto_dead = true;
		fail(a, "server: dat_ep_post_%s from the upcall: 0x%x",
		     d->operation == DAT_DTO_RECEIVE ? "send" : "recv", (unsigned)rc);
	}
}

/* Client: post messages while the window and the send slots allow. */
static void pump(struct app *a)
{
	while (a->sent < a->count && a->sent - a->echoed < a->window) {
		uint32_t s = a->sent % a->window;
		DAT_RETURN rc;

		/* The echo of the slot's last message is back, but its send
		 * completion may still be queued behind it: that completion's
		 * upcall will pump again. */
		if (a->send_busy[s])
			return;
		make_message(slot_mem(a, a->nrecv + s), a->sent, a->size);
		rc = post(a, true, a->nrecv + s, a->size);
		if (rc != DAT_SUCCESS) {
			a->dto_dead = true;
			fail(a, "dat_ep_post_send of message %u from the upcall: 0x%x", a->sent,
			     (unsigned)rc);
			return;
		}
		a->send_busy[s] = true;
		a->sent++;
	}
}

/* Is the completed receive in `slot` the echo we expect next? */
static bool echo_ok(struct app *a, uint32_t slot, uint32_t len)
{
	uint32_t seq = a->echoed, got;
	const uint8_t *p = slot_mem(a, slot);

	/* Receives complete in the order they were posted, and each is
	 * reposted as soon as its echo is checked: echo k lands in receive
	 * slot k % window.  Another slot means a completion out of order. */
	if (slot != seq % a->window) {
		fail(a, "echo %u completed in receive slot %u, expected slot %u: completions "
		     "out of order", seq, slot, seq % a->window);
		return false;
	}
	if (len != a->size) {
		fail(a, "echo %u is %u bytes long, expected %u", seq, len, a->size);
		return false;
	}
	memcpy(&got, p, sizeof(got));
	got = ntohl(got);
	if (got != seq) {
		fail(a, "echo %u carries message number %u: echoes out of order", seq, got);
		return false;
	}
	for (uint32_t i = sizeof(got); i < len; i++)
		if (p[i] != pattern(seq, i)) {
			fail(a, "echo %u: byte %u is 0x%02x, expected 0x%02x", seq, i, p[i],
			     pattern(seq, i));
			return false;
		}
	return true;
}

/*
 * Client: the start signal (a software event that main posts), the echoes
 * and the send completions, one at a time, in queue order.
 */
static void client_dto_upcall(DAT_PVOID instance_data, const DAT_EVENT *ev,
			      DAT_BOOLEAN more_events)
{
	struct app *a = instance_data;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
	uint32_t slot = (uint32_t)d->user_cookie.as_64;

	if (a->dto_dead)
		return;
	if (ev->event_number == DAT_SOFTWARE_EVENT) {
		a->t_start = now_ns();	/* main says go: pump() sends the first window */
	} else if (ev->event_number != DAT_DTO_COMPLETION_EVENT) {
		a->dto_dead = true;
		fail(a, "%s (0x%x) on the data EVD", event_name(ev->event_number),
		     (unsigned)ev->event_number);
		return;
	} else if (d->status != DAT_DTO_SUCCESS) {
		a->dto_dead = true;
		fail(a, "a %s completed with DTO status %d%s after %u echoes",
		     d->operation == DAT_DTO_SEND ? "send" : "receive", (int)d->status,
		     d->status == DAT_DTO_ERR_FLUSHED ? " (flushed: the connection ended)" : "",
		     a->echoed);
		return;
	} else if (d->operation == DAT_DTO_SEND && slot >= a->nrecv &&
		   slot < a->nrecv + a->window) {
		a->send_busy[slot - a->nrecv] = false;
	} else if (d->operation == DAT_DTO_RECEIVE && slot < a->nrecv) {
		if (!echo_ok(a, slot, d->transfered_length)) {
			a->dto_dead = true;
			return;
		}
		if (++a->echoed == a->count) {
			a->t_end = now_ns();
			pthread_mutex_lock(&a->lock);
			a->finished = true;
			pthread_cond_broadcast(&a->cond);
			pthread_mutex_unlock(&a->lock);
			return;
		}
		if (post(a, false, slot, a->size) != DAT_SUCCESS) {
			a->dto_dead = true;
			fail(a, "dat_ep_post_recv from the upcall failed after %u echoes", a->echoed);
			return;
		}
	} else {
		a->dto_dead = true;
		fail(a, "a completion with operation %d and cookie %u", (int)d->operation, slot);
		return;
	}
	/*
	 * LESSON 5.  more_events is DAT_TRUE exactly when events are still
	 * queued behind this one (dapl-ofi reads its completion queue before
	 * answering).  Under SINGLE_INSTANCE those come to this upcall next,
	 * so new messages are posted once per burst of completions, not once
	 * per completion.  (Under DAT_UPCALL_MANY the next event may already
	 * be running in another thread: do not copy this there.)
	 */
	if (!more_events)
		pump(a);
}

/* ------------------------------------------------ setup, waits, cleanup */

/* LESSON 1: the extension is dapl-ofi's; another provider's IA would send
 * these op codes to its own extension handler.  Ask for it by its
 * provider-specific attribute (dat_ofi_upcall_supported): a dapl-ofi IA
 * reports the IB extension as extension_supported, and serves this one
 * beside it. */
static bool open_ia(struct app *a)
{
	if (dat_failed(dat_ia_open(a->ia_name, 8, &a->async_evd, &a->ia), "dat_ia_open"))
		return false;
	if (!dat_ofi_upcall_supported(a->ia, DAT_OFI_EXTENSION_VERSION)) {
		fprintf(stderr, PROG ": IA '%s' does not offer dapl-ofi's upcall extension "
			"(no provider attribute %s >= %d)\n", a->ia_name, DAT_OFI_ATTR_UPCALL,
			DAT_OFI_EXTENSION_VERSION);
		return false;
	}
	return !dat_failed(dat_pz_create(a->ia, &a->pz), "dat_pz_create");
}

/* The registered memory: nrecv receive slots and nsend send slots. */
static bool alloc_mem(struct app *a, uint32_t nsend)
{
	size_t len = (size_t)(a->nrecv + nsend) * a->size;
	DAT_REGION_DESCRIPTION region;
	DAT_RMR_CONTEXT rmr_ctx;
	DAT_VLEN reg_len;
	DAT_VADDR reg_addr;

	a->mem = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	if (!a->mem) {
		fprintf(stderr, PROG ": out of memory for %zu bytes of buffers\n", len);
		return false;
	}
	memset(a->mem, 0, len);
	memset(&region, 0, sizeof(region));
	region.for_va = a->mem;
	return !dat_failed(dat_lmr_create(a->ia, DAT_MEM_TYPE_VIRTUAL, region, len, a->pz,
					  DAT_MEM_PRIV_LOCAL_READ_FLAG |
					  DAT_MEM_PRIV_LOCAL_WRITE_FLAG, DAT_VA_TYPE_VA,
					  &a->lmr, &a->lmr_ctx, &rmr_ctx, &reg_len, &reg_addr),
			   "dat_lmr_create");
}

static bool create_ep(struct app *a, uint32_t nsend)
{
	DAT_EP_ATTR attr;

	memset(&attr, 0, sizeof(attr));
	attr.service_type = DAT_SERVICE_TYPE_RC;
	attr.max_recv_dtos = (DAT_COUNT)a->nrecv;
	attr.max_request_dtos = (DAT_COUNT)nsend;
	attr.max_recv_iov = 1;
	attr.max_request_iov = 1;
	attr.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	attr.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	/* One EVD for the receives and the sends: one upcall sees both, in
	 * order, and owns all the state of the data path. */
	return !dat_failed(dat_ep_create(a->ia, a->pz, a->dto_evd, a->dto_evd, a->conn_evd,
					 &attr, &a->ep), "dat_ep_create");
}

/* One event from an EVD without an upcall policy, by the deadline. */
static bool wait_event(struct app *a, DAT_EVD_HANDLE evd, DAT_EVENT *ev, const char *what)
{
	DAT_COUNT nmore;
	DAT_RETURN rc = dat_evd_wait(evd, left_us(a), 1, ev, &nmore);

	if (DAT_GET_TYPE(rc) == DAT_TIMEOUT_EXPIRED) {
		fprintf(stderr, PROG ": no %s by the deadline (-t)\n", what);
		return false;
	}
	return !dat_failed(rc, what);
}

/* Sleep until the upcalls say the session is over, or the deadline. */
static void wait_for_end(struct app *a)
{
	struct timespec ts = {
		.tv_sec = (time_t)(a->deadline / 1000000000u),
		.tv_nsec = (long)(a->deadline % 1000000000u),
	};

	pthread_mutex_lock(&a->lock);
	while (!a->failed && !a->conn_ended && !a->finished)
		if (pthread_cond_timedwait(&a->cond, &a->lock, &ts) == ETIMEDOUT) {
			snprintf(a->why, sizeof(a->why), "timed out (-t): the session did not "
				 "end by the deadline");
			a->failed = true;
		}
	pthread_mutex_unlock(&a->lock);
}

/*
 * LESSON 6.  Stop the upcalls first: DAT_UPCALL_TEARDOWN returns once every
 * upcall in flight has returned, and none starts afterwards (the policy is
 * then DAT_UPCALL_DISABLE).  Only then is it safe to disconnect and free
 * the EP, the buffers and the state those upcalls use.  (dat_evd_free would
 * do the teardown itself; doing it explicitly makes the order visible.)
 */
static void stop_upcalls(struct app *a)
{
	if (a->dto_evd)
		dat_failed(dat_evd_modify_upcall(a->dto_evd, DAT_UPCALL_TEARDOWN, DAT_UPCALL_SAME,
						 DAT_UPCALL_INVOC_NEW), "teardown of the data EVD");
	if (a->conn_evd)
		dat_failed(dat_evd_modify_upcall(a->conn_evd, DAT_UPCALL_TEARDOWN,
						 DAT_UPCALL_SAME, DAT_UPCALL_INVOC_NEW),
			   "teardown of the connection EVD");
}

/* After stop_upcalls: returns false if anything did not go away cleanly. */
static bool cleanup(struct app *a)
{
	bool ok = true;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	if (a->ep) {
		DAT_EP_STATE st;

		/* The upcalls are off, so dat_evd_wait is allowed again.  A
		 * connection that is still up is closed; its DISCONNECTED is
		 * waited for (bounded), so that the peer sees a clean close. */
		if (dat_ep_get_status(a->ep, &st, NULL, NULL) == DAT_SUCCESS &&
		    st == DAT_EP_STATE_CONNECTED) {
			ok &= !dat_failed(dat_ep_disconnect(a->ep, DAT_CLOSE_GRACEFUL_FLAG),
					  "dat_ep_disconnect");
			while (dat_evd_wait(a->conn_evd, GRACE_US, 1, &ev, &nmore) == DAT_SUCCESS &&
			       ev.event_number != DAT_CONNECTION_EVENT_DISCONNECTED &&
			       ev.event_number != DAT_CONNECTION_EVENT_BROKEN)
				;
		}
		ok &= !dat_failed(dat_ep_free(a->ep), "dat_ep_free");
	}
	if (a->psp)
		ok &= !dat_failed(dat_psp_free(a->psp), "dat_psp_free");
	if (a->dto_evd)
		ok &= !dat_failed(dat_evd_free(a->dto_evd), "dat_evd_free (data)");
	if (a->conn_evd)
		ok &= !dat_failed(dat_evd_free(a->conn_evd), "dat_evd_free (connection)");
	if (a->cr_evd)
		ok &= !dat_failed(dat_evd_free(a->cr_evd), "dat_evd_free (CR)");
	if (a->lmr)
		ok &= !dat_failed(dat_lmr_free(a->lmr), "dat_lmr_free");
	if (a->pz)
		ok &= !dat_failed(dat_pz_free(a->pz), "dat_pz_free");
	if (a->ia) {
		/* An overflow anywhere would have been reported here. */
		while (a->async_evd && dat_evd_dequeue(a->async_evd, &ev) == DAT_SUCCESS) {
			fprintf(stderr, PROG ": async event %s (0x%x)\n",
				event_name(ev.event_number), (unsigned)ev.event_number);
			ok = false;
		}
		if (dat_ia_close(a->ia, DAT_CLOSE_GRACEFUL_FLAG) != DAT_SUCCESS)
			ok &= !dat_failed(dat_ia_close(a->ia, DAT_CLOSE_ABRUPT_FLAG), "dat_ia_close");
	}
	free(a->mem);
	return ok;
}

/* ------------------------------------------------------------ the server */

static bool server_session(struct app *a, DAT_CONN_QUAL port)
{
	DAT_UPCALL_OBJECT dto_up = { .instance_data = a, .upcall_func = server_dto_upcall };
	DAT_UPCALL_OBJECT conn_up = { .instance_data = a, .upcall_func = conn_upcall };
	DAT_UPCALL_POLICY policy;
	DAT_CR_HANDLE cr;
	DAT_CR_PARAM crp;
	DAT_EVENT ev;
	struct hello h;

	if (!open_ia(a) ||
	    dat_failed(dat_evd_create(a->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &a->cr_evd),
		       "dat_evd_create (CR)") ||
	    dat_failed(dat_evd_create(a->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
				      &a->conn_evd), "dat_evd_create (connection)"))
		return false;
	/*
	 * LESSON 2.  The data EVD is born with its upcall.  Each buffer holds at
	 * most one posted DTO, so at most SERVER_RECVS completions are ever
	 * queued; the queue is twice that, for safety.
	 */
	if (dat_failed(dat_evd_kcreate(a->ia, 2 * SERVER_RECVS, DAT_UPCALL_SINGLE_INSTANCE,
				       &dto_up, DAT_EVD_DTO_FLAG, &a->dto_evd),
		       "dat_evd_kcreate") ||
	    dat_failed(dat_evd_query_upcall(a->dto_evd, &policy, NULL, NULL),
		       "dat_evd_query_upcall"))
		return false;
	if (policy != DAT_UPCALL_SINGLE_INSTANCE) {
		fprintf(stderr, PROG ": dat_evd_kcreate left policy %d\n", (int)policy);
		return false;
	}
	if (dat_failed(dat_psp_create(a->ia, port, a->cr_evd, DAT_PSP_CONSUMER_FLAG, &a->psp),
		       "dat_psp_create"))
		return false;
	printf(PROG ": server: IA %s, port %u: waiting for a client (up to %u s)\n", a->ia_name,
	       (unsigned)port, (unsigned)(left_us(a) / 1000000));

	/* The connection request: what the client will send. */
	if (!wait_event(a, a->cr_evd, &ev, "connection request"))
		return false;
	if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT) {
		fprintf(stderr, PROG ": %s on the CR EVD\n", event_name(ev.event_number));
		return false;
	}
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	if (dat_failed(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp), "dat_cr_query"))
		return false;
	memset(&h, 0, sizeof(h));
	if (crp.private_data && crp.private_data_size >= (DAT_COUNT)sizeof(h))
		memcpy(&h, crp.private_data, sizeof(h));
	a->size = ntohl(h.size);
	a->count = ntohl(h.count);
	if (ntohl(h.magic) != HELLO_MAGIC || a->size < MIN_SIZE || a->size > MAX_SIZE ||
	    ntohl(h.window) > MAX_WINDOW) {
		fprintf(stderr, PROG ": a connection request that is not from an upcall-echo "
			"client (or asks too much): rejected\n");
		dat_cr_reject(cr, 0, NULL);
		return false;
	}
	/* One client per run: no more requests. */
	dat_failed(dat_psp_free(a->psp), "dat_psp_free");
	a->psp = DAT_HANDLE_NULL;

	/* Buffers and the EP, every receive posted, then accept. */
	a->nrecv = SERVER_RECVS;
	if (!alloc_mem(a, 0) || !create_ep(a, SERVER_RECVS))
		return false;
	for (uint32_t i = 0; i < a->nrecv; i++)
		if (dat_failed(post(a, false, i, a->size), "dat_ep_post_recv"))
			return false;
	if (dat_failed(dat_cr_accept(cr, a->ep, 0, NULL), "dat_cr_accept") ||
	    !wait_event(a, a->conn_evd, &ev, "connection"))
		return false;
	if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED) {
		fprintf(stderr, PROG ": accept ended in %s\n", event_name(ev.event_number));
		return false;
	}

	/*
	 * LESSON 4, THE CORRECT CONSUMER LOOP, first form: enable, then poll.
	 *
	 * From now on the end of the connection is reported by upcall.  Under
	 * the edge rule (DAT_UPCALL_INVOC_NEW), events ALREADY queued raise no
	 * upcall - and a quick client may be gone already: its DISCONNECTED
	 * may sit in conn_evd right now.  So:
	 *   1. enable the upcall;
	 *   2. dequeue until DAT_QUEUE_EMPTY one final time, and handle each
	 *      event exactly as the upcall would.
	 * What was queued before step 1 is found by step 2; what arrives after
	 * step 1 raises an upcall.  The upcall may run while step 2 polls (in a
	 * dapl-ofi thread): on_conn_event takes a lock.  Each event still goes
	 * to exactly one of them.
	 * WRONG: poll first, then enable - an event that arrives between the
	 * two is seen by neither, and the server waits for a disconnect that
	 * has already happened.
	 */
	if (dat_failed(dat_evd_modify_upcall(a->conn_evd, DAT_UPCALL_SINGLE_INSTANCE, &conn_up,
					     DAT_UPCALL_INVOC_NEW), "dat_evd_modify_upcall"))
		return false;
	while (dat_evd_dequeue(a->conn_evd, &ev) == DAT_SUCCESS)	/* the final poll */
		on_conn_event(a, &ev, "the final poll");

	/* Nothing left to do here: the upcalls echo, main sleeps. */
	wait_for_end(a);
	return true;
}

static int run_server(struct app *a, DAT_CONN_QUAL port)
{
	bool ok = server_session(a, port), clean;

	stop_upcalls(a);	/* before reading what the upcalls own */
	if (ok) {
		pthread_mutex_lock(&a->lock);
		ok = !a->failed && a->echoed == a->count;
		if (ok)
			printf(PROG ": server: echoed %u of %u messages of %u bytes, all by upcall; "
			       "the client %s (seen by %s)\n", a->echoed, a->count, a->size,
			       a->conn_end == DAT_CONNECTION_EVENT_DISCONNECTED ? "disconnected" :
			       "broke the connection", a->conn_end_by);
		else
			printf(PROG ": server: FAILED: echoed %u of %u messages: %s\n", a->echoed,
			       a->count, a->failed ? a->why : "the client left early");
		pthread_mutex_unlock(&a->lock);
	}
	clean = cleanup(a);
	return ok && clean ? 0 : 1;
}

/* ------------------------------------------------------------ the client */

static bool client_session(struct app *a, struct sockaddr_in *srv, DAT_CONN_QUAL port)
{
	DAT_UPCALL_OBJECT dto_up = { .instance_data = a, .upcall_func = client_dto_upcall };
	DAT_UPCALL_OBJECT conn_up = { .instance_data = a, .upcall_func = conn_upcall };
	DAT_EVENT ev;
	DAT_COUNT npending;
	struct hello h;

	a->nrecv = a->window;
	if (!open_ia(a) ||
	    dat_failed(dat_evd_create(a->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
				      &a->conn_evd), "dat_evd_create (connection)"))
		return false;
	/* LESSON 2: born with its upcall.  DAT_EVD_SOFTWARE_FLAG too, for the
	 * start signal.  At most window receives, window sends and the start
	 * signal are ever queued. */
	if (dat_failed(dat_evd_kcreate(a->ia, 2 * (DAT_COUNT)a->window + 1,
				       DAT_UPCALL_SINGLE_INSTANCE, &dto_up,
				       DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG, &a->dto_evd),
		       "dat_evd_kcreate"))
		return false;
	if (!alloc_mem(a, a->window) || !create_ep(a, a->window))
		return false;
	/* Receives may be posted before the connection exists. */
	for (uint32_t i = 0; i < a->nrecv; i++)
		if (dat_failed(post(a, false, i, a->size), "dat_ep_post_recv"))
			return false;

	h.magic = htonl(HELLO_MAGIC);
	h.size = htonl(a->size);
	h.count = htonl(a->count);
	h.window = htonl(a->window);
	if (dat_failed(dat_ep_connect(a->ep, (DAT_IA_ADDRESS_PTR)srv, port, left_us(a),
				      (DAT_COUNT)sizeof(h), &h, DAT_QOS_BEST_EFFORT,
				      DAT_CONNECT_DEFAULT_FLAG), "dat_ep_connect") ||
	    !wait_event(a, a->conn_evd, &ev, "connection"))
		return false;
	if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED) {
		fprintf(stderr, PROG ": connecting to %s port %u: %s\n", inet_ntoa(srv->sin_addr),
			(unsigned)port, event_name(ev.event_number));
		return false;
	}

	/*
	 * LESSON 4, THE CORRECT CONSUMER LOOP, second form: dat_evd_arm_upcall.
	 *
	 * The same rule as the server's, with a count: npending is the number of
	 * events queued at the instant the arm took effect.  Under
	 * DAT_UPCALL_INVOC_NEW those raise no upcall: they are ours to dequeue.
	 * npending == 0, the usual case, means there is nothing to poll.  Stop
	 * at DAT_QUEUE_EMPTY: if a newer event arrives meanwhile, its upcall
	 * delivers the older queued ones first (upcalls keep queue order), so
	 * some of the npending may already have gone to the upcall.
	 */
	if (dat_failed(dat_evd_arm_upcall(a->conn_evd, DAT_UPCALL_SINGLE_INSTANCE, &conn_up,
					  DAT_UPCALL_INVOC_NEW, &npending), "dat_evd_arm_upcall"))
		return false;
	for (DAT_COUNT i = 0; i < npending; i++) {
		if (dat_evd_dequeue(a->conn_evd, &ev) != DAT_SUCCESS)
			break;
		on_conn_event(a, &ev, "the npending poll");
	}

	/* Go: a software event raises the data upcall in a dapl-ofi thread,
	 * never in this one, and from then on the upcall owns the data path. */
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	if (dat_failed(dat_evd_post_se(a->dto_evd, &ev), "dat_evd_post_se"))
		return false;
	wait_for_end(a);
	return true;
}

static int run_client(struct app *a, struct sockaddr_in *srv, DAT_CONN_QUAL port)
{
	bool ok = client_session(a, srv, port), clean;

	stop_upcalls(a);	/* before reading what the upcalls own */
	if (ok) {
		pthread_mutex_lock(&a->lock);
		ok = !a->failed && a->finished;
		if (ok) {
			double s = (double)(a->t_end - a->t_start) / 1e9;

			printf(PROG ": %u of %u echoes right (%u bytes, window %u) in %.3f s: "
			       "%.0f round trips/s\n", a->echoed, a->count, a->size, a->window, s,
			       s > 0 ? a->count / s : 0.0);
		} else {
			printf(PROG ": FAILED: %u of %u echoes right: %s\n", a->echoed, a->count,
			       a->failed ? a->why :
			       a->conn_end == DAT_CONNECTION_EVENT_BROKEN ?
			       "the connection broke" : "the server disconnected");
		}
		pthread_mutex_unlock(&a->lock);
	}
	clean = cleanup(a);
	return ok && clean ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

static bool parse_u32(const char *s, unsigned long lo, unsigned long hi, const char *what,
		      uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || end == s || *end || *s == '-' || v < lo || v > hi) {
		fprintf(stderr, PROG ": %s must be a number from %lu to %lu, not '%s'\n", what,
			lo, hi, s);
		return false;
	}
	*out = (uint32_t)v;
	return true;
}

static bool resolve(const char *host, struct sockaddr_in *out)
{
	struct addrinfo hints, *res;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc) {
		fprintf(stderr, PROG ": %s: %s\n", host, gai_strerror(rc));
		return false;
	}
	memcpy(out, res->ai_addr, sizeof(*out));
	freeaddrinfo(res);
	return true;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [-P ia] [-p port] [-t seconds]                  (server)\n"
		"       " PROG " -c [-h host] [-P ia] [-p port] [-n messages] [-s size]\n"
		"                   [-w window] [-t seconds]                     (client)\n"
		"  -P  IA name in dat.conf (default ofi-lo)\n"
		"  -p  port, the connection qualifier (default %u)\n"
		"  -c  client mode; -h the server's host (default 127.0.0.1)\n"
		"  -n  messages (default 1000), -s their size in bytes (%u..%u, default 64)\n"
		"  -w  messages in flight (1..%u, default 16)\n"
		"  -t  the whole run must end within this many seconds (default 60)\n",
		DEFAULT_PORT, MIN_SIZE, MAX_SIZE, MAX_WINDOW);
}

int main(int argc, char **argv)
{
	static struct app a;
	pthread_condattr_t ca;
	struct sockaddr_in srv;
	const char *host = "127.0.0.1";
	uint32_t port = DEFAULT_PORT, seconds = 60;
	int c;

	a.ia_name = "ofi-lo";
	a.count = 1000;
	a.size = 64;
	a.window = 16;
	while ((c = getopt(argc, argv, "cP:p:n:s:w:t:h:")) != -1) {
		bool ok = true;

		switch (c) {
		case 'c': a.client = true; break;
		case 'P': a.ia_name = optarg; break;
		case 'h': host = optarg; break;
		case 'p': ok = parse_u32(optarg, 1, 65535, "-p", &port); break;
		case 'n': ok = parse_u32(optarg, 1, 1000000000, "-n", &a.count); break;
		case 's': ok = parse_u32(optarg, MIN_SIZE, MAX_SIZE, "-s", &a.size); break;
		case 'w': ok = parse_u32(optarg, 1, MAX_WINDOW, "-w", &a.window); break;
		case 't': ok = parse_u32(optarg, 1, 86400, "-t", &seconds); break;
		default:
			usage(stderr);
			return 2;
		}
		if (!ok)
			return 2;
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (a.client && !resolve(host, &srv))
		return 1;

	setvbuf(stdout, NULL, _IOLBF, 0);	/* the test waits for the server's line */
	pthread_mutex_init(&a.lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&a.cond, &ca);
	pthread_condattr_destroy(&ca);
	a.deadline = now_ns() + (uint64_t)seconds * 1000000000u;

	return a.client ? run_client(&a, &srv, port) : run_server(&a, port);
}
