/*
 * The RDM backend's connection manager (src/fabric/rdm/rcm.c): two of them
 * in one process, over TCP on 127.0.0.1 - a handshake with private data
 * both ways, reject, no listener, disconnects from either side and by a
 * peer that just closes, requests that die or never arrive whole, a peer
 * that sends garbage, arguments out of range, 200 connections at once,
 * atomics, and the goodbye a DREQ waits for.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric/rdm/rcm.h"

#define LIS_CTX ((void *)0x1111)
#define A_CTX ((void *)0xaaaa)
#define B_CTX ((void *)0xbbbb)

struct cms {
	struct dfi_rcm *a, *b;
};

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct sockaddr_in lo(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static struct dfi_rcm_end end(uint32_t id, uint16_t gen, uint16_t addr_len)
{
	struct dfi_rcm_end e = { .id = id, .gen = gen, .addr_len = addr_len };

	for (int i = 0; i < addr_len; i++)
		e.addr[i] = (uint8_t)(id + (unsigned)i);
	return e;
}

static int setup(void **state)
{
	static struct cms c;
	struct sockaddr_in self = lo(0);

	if (dfi_rcm_open(&self, 400, &c.a) || dfi_rcm_open(&self, 400, &c.b))
		return -1;
	*state = &c;
	return 0;
}

static int teardown(void **state)
{
	struct cms *c = *state;

	dfi_rcm_close(c->a);
	dfi_rcm_close(c->b);
	return 0;
}

/* Drive `on` until it gives an event (true), for at most ms. */
static bool next_event(struct cms *c, struct dfi_rcm *on, struct dfi_rcm_event *ev, unsigned ms)
{
	uint64_t end = ms_now() + ms;

	(void)c;
	for (;;) {
		struct pollfd p = { dfi_rcm_fd(on), POLLIN, 0 };
		int rc = dfi_rcm_read(on, ev);

		assert_true(rc >= 0);
		if (rc == 1)
			return true;
		if (ms_now() >= end)
			return false;
		poll(&p, 1, 10);
	}
}

/* Both sides driven; each side's events collected into its own array. */
struct seen {
	int n;
	struct dfi_rcm_event ev[1024];
};

static void drive(struct cms *c, struct seen *sa, struct seen *sb, unsigned ms,
		  bool (*done)(const struct seen *, const struct seen *))
{
	uint64_t end = ms_now() + ms;

	while (!done(sa, sb) && ms_now() < end) {
		struct pollfd p[2] = { { dfi_rcm_fd(c->a), POLLIN, 0 },
				       { dfi_rcm_fd(c->b), POLLIN, 0 } };
		int got = 0;

		/* a connecting side confirms its ESTABLISHED at once (RTU) */
		while (sa->n < 1024 && dfi_rcm_read(c->a, &sa->ev[sa->n]) == 1) {
			if (sa->ev[sa->n].type == DFI_RCM_ESTABLISHED)
				assert_int_equal(dfi_rcm_confirm(sa->ev[sa->n].conn), 0);
			sa->n++, got++;
		}
		while (sb->n < 1024 && dfi_rcm_read(c->b, &sb->ev[sb->n]) == 1) {
			if (sb->ev[sb->n].type == DFI_RCM_ESTABLISHED)
				assert_int_equal(dfi_rcm_confirm(sb->ev[sb->n].conn), 0);
			sb->n++, got++;
		}
		if (!got)
			poll(p, 2, 10);
	}
}

static int count(const struct seen *s, enum dfi_rcm_ev_type t)
{
	int n = 0;

	for (int i = 0; i < s->n; i++)
		n += s->ev[i].type == t;
	return n;
}

static struct dfi_rcm_event *first(struct seen *s, enum dfi_rcm_ev_type t)
{
	for (int i = 0; i < s->n; i++)
		if (s->ev[i].type == t)
			return &s->ev[i];
	return NULL;
}

static int want_conns = 1;
static bool b_has_req(const struct seen *a, const struct seen *b)
{
	(void)a;
	return count(b, DFI_RCM_CONNREQ) >= want_conns;
}
static bool both_up(const struct seen *a, const struct seen *b)
{
	return count(a, DFI_RCM_ESTABLISHED) >= want_conns &&
	       count(b, DFI_RCM_ESTABLISHED) >= want_conns;
}
static bool both_down(const struct seen *a, const struct seen *b)
{
	return count(a, DFI_RCM_DISCONNECTED) >= want_conns &&
	       count(b, DFI_RCM_DISCONNECTED) >= want_conns;
}
static bool a_ended(const struct seen *a, const struct seen *b)
{
	(void)b;
	return count(a, DFI_RCM_REJECTED) + count(a, DFI_RCM_BROKEN) +
	       count(a, DFI_RCM_DISCONNECTED) > 0;
}

static struct seen sa, sb;

static void reset_seen(void)
{
	memset(&sa, 0, sizeof(sa));
	memset(&sb, 0, sizeof(sb));
	want_conns = 1;
}

static void test_handshake_pdata_disconnect(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	struct dfi_rcm_conn *ca, *cb;
	struct dfi_rcm_end ea = end(1, 2, 32), eb = end(9, 0x3fff, 8);
	struct dfi_rcm_event *e;
	uint8_t pa[256], pb[17];
	uint16_t port;

	reset_seen();
	for (int i = 0; i < 256; i++)
		pa[i] = (uint8_t)(255 - i);
	memset(pb, 0x5a, sizeof(pb));
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	struct sockaddr_in dest = lo(port);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, 0x1234560000ull | port, &ea, pa, 256, A_CTX,
					 &ca), 0);
	drive(c, &sa, &sb, 2000, b_has_req);
	e = first(&sb, DFI_RCM_CONNREQ);
	assert_non_null(e);
	assert_ptr_equal(e->ctx, LIS_CTX);
	assert_int_equal(e->qual, 0x1234560000ull | port);
	assert_int_equal(e->ia, dfi_rcm_instance(c->a));
	assert_int_equal(e->remote.id, 1);
	assert_int_equal(e->remote.gen, 2);
	assert_int_equal(e->remote.addr_len, 32);
	assert_memory_equal(e->remote.addr, ea.addr, 32);
	assert_int_equal(e->plen, 256);
	assert_memory_equal(e->pdata, pa, 256);
	assert_int_equal(e->peer.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	cb = e->conn;
	assert_int_equal(dfi_rcm_accept(cb, &eb, pb, sizeof(pb), B_CTX), 0);
	drive(c, &sa, &sb, 2000, both_up);
	e = first(&sa, DFI_RCM_ESTABLISHED);
	assert_non_null(e);
	assert_ptr_equal(e->ctx, A_CTX);
	assert_ptr_equal(e->conn, ca);
	assert_int_equal(e->remote.id, 9);
	assert_int_equal(e->remote.gen, 0x3fff);
	assert_memory_equal(e->remote.addr, eb.addr, 8);
	assert_int_equal(e->plen, sizeof(pb));
	assert_memory_equal(e->pdata, pb, sizeof(pb));
	assert_int_equal(e->ia, dfi_rcm_instance(c->b));
	e = first(&sb, DFI_RCM_ESTABLISHED);
	assert_non_null(e);
	assert_ptr_equal(e->ctx, B_CTX);

	assert_int_equal(dfi_rcm_disconnect(ca), 0);
	drive(c, &sa, &sb, 2000, both_down);
	assert_int_equal(count(&sa, DFI_RCM_DISCONNECTED), 1);
	assert_int_equal(count(&sb, DFI_RCM_DISCONNECTED), 1);
	assert_int_equal(count(&sa, DFI_RCM_BROKEN) + count(&sb, DFI_RCM_BROKEN), 0);
	dfi_rcm_conn_free(ca);
	dfi_rcm_conn_free(cb);
	dfi_rcm_unlisten(lis);
}

static void test_reject_and_no_listener(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	struct dfi_rcm_conn *ca;
	struct dfi_rcm_end ea = end(3, 1, 16);
	struct dfi_rcm_event *e;
	uint16_t port;

	reset_seen();
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	struct sockaddr_in dest = lo(port);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, A_CTX, &ca), 0);
	drive(c, &sa, &sb, 2000, b_has_req);
	e = first(&sb, DFI_RCM_CONNREQ);
	assert_non_null(e);
	assert_int_equal(e->plen, 0);
	assert_int_equal(dfi_rcm_reject(e->conn, DFI_RDM_REJ_CONSUMER, "nope", 4), 0);
	drive(c, &sa, &sb, 2000, a_ended);
	e = first(&sa, DFI_RCM_REJECTED);
	assert_non_null(e);
	assert_ptr_equal(e->ctx, A_CTX);
	assert_int_equal(e->reason, DFI_RDM_REJ_CONSUMER);
	assert_int_equal(e->plen, 4);
	assert_memory_equal(e->pdata, "nope", 4);
	dfi_rcm_conn_free(ca);
	dfi_rcm_unlisten(lis);

	/* the port is free now: nobody listens */
	reset_seen();
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, A_CTX, &ca), 0);
	drive(c, &sa, &sb, 2000, a_ended);
	e = first(&sa, DFI_RCM_BROKEN);
	assert_non_null(e);
	assert_int_equal(e->err, ECONNREFUSED);
	dfi_rcm_conn_free(ca);
}

/* A peer that closes without a DREQ (its process died): DISCONNECTED. */
static void test_peer_closes(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	struct dfi_rcm_conn *ca;
	struct dfi_rcm_end ea = end(4, 1, 8), eb = end(5, 1, 8);
	uint16_t port;

	reset_seen();
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	struct sockaddr_in dest = lo(port);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, A_CTX, &ca), 0);
	drive(c, &sa, &sb, 2000, b_has_req);
	assert_int_equal(dfi_rcm_accept(first(&sb, DFI_RCM_CONNREQ)->conn, &eb, NULL, 0, B_CTX), 0);
	drive(c, &sa, &sb, 2000, both_up);
	assert_non_null(first(&sb, DFI_RCM_ESTABLISHED));
	dfi_rcm_conn_free(first(&sb, DFI_RCM_ESTABLISHED)->conn);
	drive(c, &sa, &sb, 2000, a_ended);
	assert_non_null(first(&sa, DFI_RCM_DISCONNECTED));
	assert_null(first(&sa, DFI_RCM_BROKEN));
	dfi_rcm_conn_free(ca);
	dfi_rcm_unlisten(lis);
}

/* The requester goes before the accept: the accept ends BROKEN, and the
 * event wakes a sleeper on the fd although no socket moved. */
static void test_requester_gone_before_accept(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	struct dfi_rcm_conn *ca, *cb;
	struct dfi_rcm_end ea = end(6, 1, 8), eb = end(7, 1, 8);
	struct dfi_rcm_event ev;
	uint16_t port;

	reset_seen();
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	struct sockaddr_in dest = lo(port);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, A_CTX, &ca), 0);
	drive(c, &sa, &sb, 2000, b_has_req);
	cb = first(&sb, DFI_RCM_CONNREQ)->conn;
	dfi_rcm_conn_free(ca);
	/* let b see the socket end */
	for (int i = 0; i < 20; i++) {
		struct pollfd p = { dfi_rcm_fd(c->b), POLLIN, 0 };

		poll(&p, 1, 10);
		assert_int_equal(dfi_rcm_read(c->b, &ev), 0);
	}
	assert_int_equal(dfi_rcm_accept(cb, &eb, NULL, 0, B_CTX), 0);
	{
		struct pollfd p = { dfi_rcm_fd(c->b), POLLIN, 0 };

		assert_int_equal(poll(&p, 1, 0), 1);
	}
	assert_true(next_event(c, c->b, &ev, 1000));
	assert_int_equal(ev.type, DFI_RCM_BROKEN);
	assert_ptr_equal(ev.ctx, B_CTX);
	dfi_rcm_conn_free(cb);
	dfi_rcm_unlisten(lis);
}

/* Raw TCP clients: garbage, and one that sends nothing.  Both are closed
 * by the listener's side (garbage at once, silence after the timeout),
 * and its consumer never hears of them. */
static int raw_connect(uint16_t port)
{
	struct sockaddr_in a = lo(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static bool closed_within(struct cms *c, int fd, unsigned ms)
{
	uint64_t end = ms_now() + ms;
	struct dfi_rcm_event ev;

	while (ms_now() < end) {
		struct pollfd p = { fd, POLLIN, 0 };
		char buf[64];

		assert_int_equal(dfi_rcm_read(c->b, &ev), 0);	/* no event, ever */
		if (poll(&p, 1, 10) == 1) {
			ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (n == 0 || (n < 0 && errno == ECONNRESET))
				return true;
		}
	}
	return false;
}

static void test_hostile_requests(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	uint16_t port;
	int fd;
	uint64_t t0;

	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	fd = raw_connect(port);
	assert_int_equal(send(fd, "GET / HTTP/1.0\r\n\r\n", 18, 0), 18);
	assert_true(closed_within(c, fd, 1000));
	close(fd);
	/* a valid header announcing a body longer than any message */
	fd = raw_connect(port);
	{
		uint8_t h[16] = { 'D', 'F', 'I', 'R', 1, DFI_RDM_REQ, 0, 0, 0xff, 0xff, 0xff, 0x7f };

		assert_int_equal(send(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	}
	assert_true(closed_within(c, fd, 1000));
	close(fd);
	/* silence: dropped after the timeout (400 ms), not before 300 */
	fd = raw_connect(port);
	t0 = ms_now();
	assert_true(closed_within(c, fd, 3000));
	assert_true(ms_now() - t0 >= 300);
	close(fd);
	dfi_rcm_unlisten(lis);
}

static void test_bad_arguments(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis, *lis2;
	struct dfi_rcm_conn *ca;
	struct dfi_rcm_end ea = end(1, 1, 8), bad = end(1, 1, 0);
	uint8_t big[DFI_RDM_PDATA_MAX + 1] = { 0 };
	uint16_t port;

	reset_seen();
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	assert_int_equal(dfi_rcm_listen(c->b, port, LIS_CTX, &lis2, NULL), -EADDRINUSE);
	struct sockaddr_in dest = lo(port);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, big, sizeof(big), A_CTX, &ca),
			 -EINVAL);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &bad, NULL, 0, A_CTX, &ca), -EINVAL);
	bad = end(1, 0x8000, 8);	/* a tag class of 2 */
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &bad, NULL, 0, A_CTX, &ca), -EINVAL);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, A_CTX, &ca), 0);
	assert_int_equal(dfi_rcm_disconnect(ca), -ENOTCONN);
	assert_int_equal(dfi_rcm_accept(ca, &ea, NULL, 0, A_CTX), -EINVAL);
	drive(c, &sa, &sb, 2000, b_has_req);
	struct dfi_rcm_conn *cb = first(&sb, DFI_RCM_CONNREQ)->conn;
	assert_int_equal(dfi_rcm_reject(cb, 0, NULL, 0), -EINVAL);
	assert_int_equal(dfi_rcm_reject(cb, DFI_RDM_REJ_END, NULL, 0), -EINVAL);
	assert_int_equal(dfi_rcm_accept(cb, &ea, big, sizeof(big), B_CTX), -EINVAL);
	/* still answerable after the refusals */
	assert_int_equal(dfi_rcm_reject(cb, DFI_RDM_REJ_RESOURCES, NULL, 0), 0);
	drive(c, &sa, &sb, 2000, a_ended);
	assert_int_equal(first(&sa, DFI_RCM_REJECTED)->reason, DFI_RDM_REJ_RESOURCES);
	dfi_rcm_conn_free(ca);
	dfi_rcm_unlisten(lis);
}

/* 200 at once; then b disconnects them all. */
#define MANY 200
static void test_many(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	static struct dfi_rcm_conn *ca[MANY], *cb[MANY];
	uint16_t port;
	int nb = 0;

	reset_seen();
	want_conns = MANY;
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	struct sockaddr_in dest = lo(port);
	for (int i = 0; i < MANY; i++) {
		struct dfi_rcm_end ea = end((uint32_t)i, 1, 8);

		assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, &i, sizeof(i),
						 (void *)(uintptr_t)(i + 1), &ca[i]), 0);
	}
	/* accept each request as it comes */
	for (uint64_t end_ms = ms_now() + 5000; nb < MANY && ms_now() < end_ms;) {
		int before = sb.n;

		drive(c, &sa, &sb, 20, b_has_req);
		for (int i = before; i < sb.n; i++) {
			struct dfi_rcm_end eb = end(1000u + (unsigned)nb, 1, 8);
			int who;

			if (sb.ev[i].type != DFI_RCM_CONNREQ)
				continue;
			memcpy(&who, sb.ev[i].pdata, sizeof(who));
			assert_int_equal(sb.ev[i].remote.id, (uint32_t)who);
			cb[nb] = sb.ev[i].conn;
			assert_int_equal(dfi_rcm_accept(cb[nb], &eb, NULL, 0, B_CTX), 0);
			nb++;
		}
	}
	assert_int_equal(nb, MANY);
	drive(c, &sa, &sb, 5000, both_up);
	assert_int_equal(count(&sa, DFI_RCM_ESTABLISHED), MANY);
	assert_int_equal(count(&sb, DFI_RCM_ESTABLISHED), MANY);
	for (int i = 0; i < MANY; i++)
		assert_int_equal(dfi_rcm_disconnect(cb[i]), 0);
	drive(c, &sa, &sb, 5000, both_down);
	assert_int_equal(count(&sa, DFI_RCM_DISCONNECTED), MANY);
	assert_int_equal(count(&sb, DFI_RCM_DISCONNECTED), MANY);
	for (int i = 0; i < MANY; i++) {
		dfi_rcm_conn_free(ca[i]);
		dfi_rcm_conn_free(cb[i]);
	}
	dfi_rcm_unlisten(lis);
}

/* B's memory for A's emulated atomics: one word, key 77. */
static uint64_t served_word;

static uint32_t serve(void *arg, uint8_t op, uint64_t addr, uint32_t key, uint64_t operand,
		      uint64_t compare, uint64_t *old)
{
	(void)arg;
	if (key != 77 || addr != (uint64_t)(uintptr_t)&served_word)
		return EACCES;
	*old = served_word;
	if (op == DFI_RDM_ATOMIC_FADD)
		served_word += operand;
	else if (served_word == compare)
		served_word = operand;
	return 0;
}

/* A UD request says so; 300 atomics asked at once all come back, each
 * old value once, though the answers outnumber the event queue (held, not
 * dropped); a refused one says why; none goes on a connection not up. */
static void test_atomics_and_ud_flag(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	struct dfi_rcm_conn *ca, *cb;
	struct dfi_rcm_end ea = end(3, 4, 16), eb = end(5, 6, 16);
	struct dfi_rcm_event *e;
	static struct seen big;
	uint8_t got[300] = { 0 };
	uint64_t addr = (uint64_t)(uintptr_t)&served_word;
	uint16_t port;
	int n = 0;

	reset_seen();
	ea.ud = true;
	served_word = 0;
	dfi_rcm_serve_atomics(c->b, serve, NULL);
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	struct sockaddr_in dest = lo(port);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, A_CTX, &ca), 0);
	assert_int_equal(dfi_rcm_atomic(ca, DFI_RDM_ATOMIC_FADD, 1, addr, 77, 1, 0), -ENOTCONN);
	drive(c, &sa, &sb, 2000, b_has_req);
	e = first(&sb, DFI_RCM_CONNREQ);
	assert_non_null(e);
	assert_true(e->remote.ud);
	cb = e->conn;
	assert_int_equal(dfi_rcm_accept(cb, &eb, NULL, 0, B_CTX), 0);
	drive(c, &sa, &sb, 2000, both_up);

	for (uint64_t i = 0; i < 300; i++)
		assert_int_equal(dfi_rcm_atomic(ca, DFI_RDM_ATOMIC_FADD, 1000 + i, addr, 77, 1, 0),
				 0);
	assert_int_equal(dfi_rcm_atomic(ca, DFI_RDM_ATOMIC_CSWAP, 2000, addr, 78, 1, 0), 0);
	memset(&big, 0, sizeof(big));
	for (uint64_t end_ms = ms_now() + 5000; n < 301 && ms_now() < end_ms;) {
		struct dfi_rcm_event ev;

		if (!next_event(c, c->a, &ev, 50)) {
			struct dfi_rcm_event evb;

			while (dfi_rcm_read(c->b, &evb) == 1)
				;
			continue;
		}
		assert_int_equal(ev.type, DFI_RCM_ATOMICREP);
		assert_ptr_equal(ev.ctx, A_CTX);
		if (ev.id == 2000) {
			assert_int_equal(ev.err, EACCES);
		} else {
			assert_true(ev.id >= 1000 && ev.id < 1300);
			assert_int_equal(ev.err, 0);
			assert_true(ev.value < 300);
			assert_int_equal(got[ev.value], 0);
			got[ev.value] = 1;
		}
		n++;
	}
	assert_int_equal(n, 301);
	assert_int_equal(served_word, 300);
	dfi_rcm_serve_atomics(c->b, NULL, NULL);
	dfi_rcm_conn_free(ca);
	dfi_rcm_conn_free(cb);
	dfi_rcm_unlisten(lis);
}

/* The goodbye: each end's word travels in REQ and REP; the DISCONNECTED of
 * a DREQ waits until the caller's check says the peer's goodbye landed,
 * or DFI_RCM_BYE_MS; the side that sent the DREQ, and a peer that only
 * closes its socket, are not waited for. */
static bool bye_landed;
static int bye_asked;

static bool bye_check(void *arg, void *ctx)
{
	assert_null(arg);
	assert_ptr_equal(ctx, B_CTX);
	bye_asked++;
	return bye_landed;
}

static struct dfi_rcm_conn *bye_pair(struct cms *c, uint16_t port, struct dfi_rcm_conn **ca)
{
	struct dfi_rcm_end ea = end(11, 12, 8), eb = end(13, 14, 8);
	struct sockaddr_in dest = lo(port);
	struct dfi_rcm_event *e;
	struct dfi_rcm_conn *cb;

	ea.bye_addr = 0x7f0000001008ull;
	ea.bye_key = 21;
	eb.bye_addr = 0x7f0000002010ull;
	eb.bye_key = 22;
	reset_seen();
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, A_CTX, ca), 0);
	drive(c, &sa, &sb, 2000, b_has_req);
	e = first(&sb, DFI_RCM_CONNREQ);
	assert_non_null(e);
	assert_int_equal(e->remote.bye_addr, ea.bye_addr);
	assert_int_equal(e->remote.bye_key, 21);
	cb = e->conn;
	assert_int_equal(dfi_rcm_accept(cb, &eb, NULL, 0, B_CTX), 0);
	dfi_rcm_want_goodbye(cb);
	drive(c, &sa, &sb, 2000, both_up);
	e = first(&sa, DFI_RCM_ESTABLISHED);
	assert_non_null(e);
	assert_int_equal(e->remote.bye_addr, eb.bye_addr);
	assert_int_equal(e->remote.bye_key, 22);
	return cb;
}

static bool b_down(const struct seen *a, const struct seen *b)
{
	(void)a;
	return count(b, DFI_RCM_DISCONNECTED) > 0;
}

static void test_goodbye(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	struct dfi_rcm_conn *ca, *cb;
	uint16_t port;
	uint64_t t0;

	dfi_rcm_serve_goodbye(c->b, bye_check, NULL);
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);

	/* it lands after 200 ms */
	cb = bye_pair(c, port, &ca);
	bye_landed = false;
	bye_asked = 0;
	assert_int_equal(dfi_rcm_disconnect(ca), 0);
	drive(c, &sa, &sb, 200, both_down);
	assert_int_equal(count(&sa, DFI_RCM_DISCONNECTED), 1);	/* at DREP */
	assert_int_equal(count(&sb, DFI_RCM_DISCONNECTED), 0);
	assert_true(bye_asked >= 2);
	bye_landed = true;
	t0 = ms_now();
	drive(c, &sa, &sb, 1000, b_down);
	assert_int_equal(count(&sb, DFI_RCM_DISCONNECTED), 1);
	assert_true(ms_now() - t0 < 1000);	/* at its next look, not the bound */
	dfi_rcm_conn_free(ca);
	dfi_rcm_conn_free(cb);

	/* it never does: the bound */
	cb = bye_pair(c, port, &ca);
	bye_landed = false;
	t0 = ms_now();
	assert_int_equal(dfi_rcm_disconnect(ca), 0);
	drive(c, &sa, &sb, DFI_RCM_BYE_MS + 2000, b_down);
	assert_int_equal(count(&sb, DFI_RCM_DISCONNECTED), 1);
	assert_true(ms_now() - t0 >= DFI_RCM_BYE_MS - 50);
	dfi_rcm_conn_free(ca);
	dfi_rcm_conn_free(cb);

	/* the peer's socket closes without a DREQ: no wait */
	cb = bye_pair(c, port, &ca);
	t0 = ms_now();
	dfi_rcm_conn_free(ca);
	drive(c, &sa, &sb, 1000, b_down);
	assert_int_equal(count(&sb, DFI_RCM_DISCONNECTED), 1);
	assert_true(ms_now() - t0 < 1000);
	dfi_rcm_conn_free(cb);

	dfi_rcm_serve_goodbye(c->b, NULL, NULL);
	dfi_rcm_unlisten(lis);
}

/* ------------------------------------------------- order across connections */

/* Every event `on` has now, without confirming an ESTABLISHED (no RTU):
 * the caller orders each step. */
static void pump(struct dfi_rcm *on, struct seen *s, unsigned ms)
{
	uint64_t end_ms = ms_now() + ms;

	while (ms_now() < end_ms && s->n < 1024) {
		struct pollfd p = { dfi_rcm_fd(on), POLLIN, 0 };

		if (dfi_rcm_read(on, &s->ev[s->n]) == 1)
			s->n++;
		else
			poll(&p, 1, 1);
	}
}

static int index_of(const struct seen *s, enum dfi_rcm_ev_type t, const void *ctx)
{
	for (int i = 0; i < s->n; i++)
		if (s->ev[i].type == t && s->ev[i].ctx == ctx)
			return i;
	return -1;
}

#define X_CTX ((void *)0x1001)
#define Y_CTX ((void *)0x1002)

/* Two connections x and y between A and B, requested and accepted, their
 * REPs not read by A yet. */
static void two_accepted(struct cms *c, uint16_t port, struct dfi_rcm_conn *ca[2],
			 struct dfi_rcm_conn *cb[2], void *bctx[2])
{
	struct sockaddr_in dest = lo(port);

	for (int i = 0; i < 2; i++) {
		struct dfi_rcm_end ea = end(40u + (unsigned)i, 1, 8);

		assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0,
						 i ? Y_CTX : X_CTX, &ca[i]), 0);
		want_conns = i + 1;
		drive(c, &sa, &sb, 2000, b_has_req);
		cb[i] = sb.ev[sb.n - 1].conn;
		assert_int_equal(sb.ev[sb.n - 1].type, DFI_RCM_CONNREQ);
	}
	for (int i = 0; i < 2; i++) {
		struct dfi_rcm_end eb = end(50u + (unsigned)i, 1, 8);

		assert_int_equal(dfi_rcm_accept(cb[i], &eb, NULL, 0, bctx[i]), 0);
	}
}

/* A confirms x and y (RTUs) and disconnects x (DREQ) before B reads any
 * of it: B finds x's socket ready first and reads its RTU and DREQ
 * together, yet reports x's end after y's ESTABLISHED, which A's RTU sent
 * before its DREQ (dtestcm's server takes the first c events of its
 * connection EVD for the ESTABLISHEDs). */
static void test_end_waits_for_earlier_rtu(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	struct dfi_rcm_conn *ca[2], *cb[2];
	void *bctx[2] = { X_CTX, Y_CTX };
	uint16_t port;
	int est_y, disc_x;

	reset_seen();
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	two_accepted(c, port, ca, cb, bctx);
	pump(c->a, &sa, 200);
	assert_int_equal(count(&sa, DFI_RCM_ESTABLISHED), 2);
	assert_int_equal(dfi_rcm_confirm(ca[0]), 0);
	assert_int_equal(dfi_rcm_confirm(ca[1]), 0);
	assert_int_equal(dfi_rcm_disconnect(ca[0]), 0);
	pump(c->b, &sb, 300);
	est_y = index_of(&sb, DFI_RCM_ESTABLISHED, Y_CTX);
	disc_x = index_of(&sb, DFI_RCM_DISCONNECTED, X_CTX);
	assert_true(index_of(&sb, DFI_RCM_ESTABLISHED, X_CTX) >= 0);
	assert_true(est_y >= 0 && disc_x >= 0);
	if (disc_x < est_y)
		fail_msg("B reported x's end (event %d) before y's ESTABLISHED (event %d)",
			 disc_x, est_y);
	for (int i = 0; i < 2; i++) {
		dfi_rcm_conn_free(ca[i]);
		dfi_rcm_conn_free(cb[i]);
	}
	dfi_rcm_unlisten(lis);
}

/* The other way: B accepts y (REP) and then answers A's DREQ on x (DREP),
 * and A finds x's socket ready first (an atomic of B's on x, unread): A
 * reports x's end after y's ESTABLISHED. */
static void test_end_waits_for_earlier_rep(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	struct dfi_rcm_conn *ca[2], *cb[2];
	struct sockaddr_in dest;
	struct dfi_rcm_end ea, eb;
	uint16_t port;
	int est_y, disc_x;

	reset_seen();
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	dest = lo(port);
	/* x up both ways */
	ea = end(60, 1, 8);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, X_CTX, &ca[0]), 0);
	drive(c, &sa, &sb, 2000, b_has_req);
	cb[0] = first(&sb, DFI_RCM_CONNREQ)->conn;
	eb = end(70, 1, 8);
	assert_int_equal(dfi_rcm_accept(cb[0], &eb, NULL, 0, X_CTX), 0);
	drive(c, &sa, &sb, 2000, both_up);
	/* y requested, B holds its request */
	ea = end(61, 1, 8);
	assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, Y_CTX, &ca[1]), 0);
	want_conns = 2;
	drive(c, &sa, &sb, 2000, b_has_req);
	cb[1] = sb.ev[sb.n - 1].conn;
	/* x's socket ready at A first, then y's REP, then A's DREQ on x is
	 * answered after it */
	assert_int_equal(dfi_rcm_atomic(cb[0], DFI_RDM_ATOMIC_FADD, 1, 0x1000, 1, 1, 0), 0);
	eb = end(71, 1, 8);
	assert_int_equal(dfi_rcm_accept(cb[1], &eb, NULL, 0, Y_CTX), 0);
	assert_int_equal(dfi_rcm_disconnect(ca[0]), 0);
	/* B takes the DREQ and answers; A has read nothing since */
	for (uint64_t end_ms = ms_now() + 2000; index_of(&sb, DFI_RCM_DISCONNECTED, X_CTX) < 0;) {
		assert_true(ms_now() < end_ms);
		pump(c->b, &sb, 10);
	}
	memset(&sa, 0, sizeof(sa));
	pump(c->a, &sa, 300);
	est_y = index_of(&sa, DFI_RCM_ESTABLISHED, Y_CTX);
	disc_x = index_of(&sa, DFI_RCM_DISCONNECTED, X_CTX);
	assert_true(est_y >= 0 && disc_x >= 0);
	if (disc_x < est_y)
		fail_msg("A reported x's end (event %d) before y's ESTABLISHED (event %d)",
			 disc_x, est_y);
	for (int i = 0; i < 2; i++) {
		dfi_rcm_conn_free(ca[i]);
		dfi_rcm_conn_free(cb[i]);
	}
	dfi_rcm_unlisten(lis);
}

/* 200 ends waiting for their goodbyes, all due on one tick of the timer
 * (nothing read for 50 ms after the goodbyes land): more than the event
 * queue holds, and every one is reported. */
static void test_many_ends_on_one_tick(void **state)
{
	struct cms *c = *state;
	struct dfi_rcm_lis *lis;
	static struct dfi_rcm_conn *ca[MANY], *cb[MANY];
	struct sockaddr_in dest;
	uint16_t port;

	reset_seen();
	dfi_rcm_serve_goodbye(c->b, bye_check, NULL);
	assert_int_equal(dfi_rcm_listen(c->b, 0, LIS_CTX, &lis, &port), 0);
	dest = lo(port);
	for (int i = 0; i < MANY; i++) {
		struct dfi_rcm_end ea = end(100u + (unsigned)i, 1, 8);

		assert_int_equal(dfi_rcm_connect(c->a, &dest, port, &ea, NULL, 0, A_CTX, &ca[i]),
				 0);
	}
	want_conns = MANY;
	drive(c, &sa, &sb, 5000, b_has_req);
	for (int i = 0, n = 0; i < sb.n; i++) {
		struct dfi_rcm_end eb = end(1000u + (unsigned)n, 1, 8);

		if (sb.ev[i].type != DFI_RCM_CONNREQ)
			continue;
		cb[n++] = sb.ev[i].conn;
		assert_int_equal(dfi_rcm_accept(sb.ev[i].conn, &eb, NULL, 0, B_CTX), 0);
		dfi_rcm_want_goodbye(sb.ev[i].conn);
	}
	drive(c, &sa, &sb, 5000, both_up);
	bye_landed = false;
	for (int i = 0; i < MANY; i++)
		assert_int_equal(dfi_rcm_disconnect(ca[i]), 0);
	drive(c, &sa, &sb, 300, both_down);
	assert_int_equal(count(&sb, DFI_RCM_DISCONNECTED), 0);
	bye_landed = true;
	usleep(50000);
	drive(c, &sa, &sb, 1000, both_down);
	assert_int_equal(count(&sa, DFI_RCM_DISCONNECTED), MANY);
	assert_int_equal(count(&sb, DFI_RCM_DISCONNECTED), MANY);
	for (int i = 0; i < MANY; i++) {
		dfi_rcm_conn_free(ca[i]);
		dfi_rcm_conn_free(cb[i]);
	}
	dfi_rcm_serve_goodbye(c->b, NULL, NULL);
	dfi_rcm_unlisten(lis);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handshake_pdata_disconnect),
		cmocka_unit_test(test_reject_and_no_listener),
		cmocka_unit_test(test_peer_closes),
		cmocka_unit_test(test_requester_gone_before_accept),
		cmocka_unit_test(test_hostile_requests),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_many),
		cmocka_unit_test(test_atomics_and_ud_flag),
		cmocka_unit_test(test_goodbye),
		cmocka_unit_test(test_end_waits_for_earlier_rtu),
		cmocka_unit_test(test_end_waits_for_earlier_rep),
		cmocka_unit_test(test_many_ends_on_one_tick),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
