/*
 * dapl-ofi integration test: an idle IA costs next to no CPU, on every
 * dat.conf entry of the build tree that make check uses (ofi-lo: tcp,
 * ofi-net-lo: net, ofi-lo-rr: tcp with RDMA reads, ofi-rxm-lo: tcp;ofi_rxm,
 * ofi-shm: shm, whose CQs have no wait fd and are polled, 10 us to 1 ms
 * apart), through the stock registry (libdat2).
 *
 * Two IAs in this process (server and client) are connected, move a send
 * and an RDMA write (so that every CQ and the event queue have fired
 * once), then sit idle for a second: alone, and with a consumer asleep in
 * dat_evd_wait.  The CPU time of each IA's progress thread ("dfi-progress")
 * and of the waiter over that second, read from /proc/self/task/TID
 * (schedstat, or stat's utime+stime), must stay under IDLE_MAX_PCT.  This
 * is CPU time, not wall time: a noisy machine delays the second but does
 * not charge the threads for it.  libfabric 1.17's net provider leaves its
 * wait fds readable for ever; a thread that sleeps on them spins (a
 * SCHED_FIFO progress thread took 95 % of a CPU) unless it falls back to
 * polling (progress.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dat2/udat.h>

#include "dat_test.h"

#define SEC		(1000u * 1000u)		/* DAT_TIMEOUT is in microseconds */
#define BUF_LEN		(64u * 1024u)
#define IDLE_MS		1000u
#define IDLE_MAX_PCT	5.0
#define MAX_THREADS	8

/* ------------------------------------------------------------- CPU times */

/* The CPU time (ns) thread tid has used: schedstat's first field, or
 * stat's utime + stime (clock ticks) where the kernel has no schedstat. */
static uint64_t thread_cpu_ns(pid_t tid)
{
	char path[64], buf[1024], *p;
	unsigned long long ns, ut, st;
	FILE *f;
	int field;

	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	if ((f = fopen(path, "r"))) {
		int ok = fscanf(f, "%llu", &ns) == 1;

		fclose(f);
		if (ok)
			return ns;
	}
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	if (!(f = fopen(path, "r")))
		return 0;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p || !(p = strrchr(buf, ')')))
		return 0;
	/* after "pid (comm)": field 3 is the state; utime and stime are 14, 15 */
	for (field = 2; field < 13 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %llu %llu", &ut, &st) != 2)
		return 0;
	return (ut + st) * (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK));
}

/* The tids of this process's threads named `name`. */
static int threads_named(const char *name, pid_t *tids, int max)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max) {
		char path[300], comm[64] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		if (strcmp(comm, name) == 0)
			tids[n++] = (pid_t)atoi(e->d_name);
	}
	closedir(d);
	return n;
}

/* ------------------------------------------------------------------ sides */

struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_VADDR reg_addr;
	DAT_EP_HANDLE ep;
	uint8_t *buf;
};

struct pair {
	const char *ia_name;
	struct side s, c;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
};

static DAT_RETURN side_open(struct side *x, const char *ia_name)
{
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN reg_len = 0;
	DAT_EP_ATTR a;
	char name[DAT_NAME_MAX_LENGTH];
	DAT_RETURN rc;

	memset(x, 0, sizeof(*x));
	if (!(x->buf = aligned_alloc(4096, BUF_LEN)))
		return DAT_INSUFFICIENT_RESOURCES;
	memset(x->buf, 0, BUF_LEN);
	snprintf(name, sizeof(name), "%s", ia_name);
	if ((rc = dat_ia_open(name, 8, &x->async, &x->ia)) != DAT_SUCCESS) {
		x->ia = DAT_HANDLE_NULL;
		return rc;
	}
	if ((rc = dat_pz_create(x->ia, &x->pz)))
		return rc;
	memset(&region, 0, sizeof(region));
	region.for_va = x->buf;
	if ((rc = dat_lmr_create(x->ia, DAT_MEM_TYPE_VIRTUAL, region, BUF_LEN, x->pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &x->lmr, &x->lctx,
				 &x->rctx, &reg_len, &x->reg_addr)))
		return rc;
	if ((rc = dat_evd_create(x->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->req)) ||
	    (rc = dat_evd_create(x->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &x->rcv)) ||
	    (rc = dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &x->conn)) ||
	    (rc = dat_evd_create(x->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &x->cr)))
		return rc;
	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = a.max_recv_dtos = 16;
	a.max_request_iov = a.max_recv_iov = 1;
	a.max_rdma_read_iov = a.max_rdma_write_iov = 1;
	a.max_rdma_read_in = a.max_rdma_read_out = 4;
	a.request_completion_flags = a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	return dat_ep_create(x->ia, x->pz, x->rcv, x->req, x->conn, &a, &x->ep);
}

static void side_close(struct side *x)
{
	if (x->ia)
		assert_ok(dat_ia_close(x->ia, DAT_CLOSE_ABRUPT_FLAG));
	x->ia = DAT_HANDLE_NULL;
	free(x->buf);
	x->buf = NULL;
}

static DAT_RETURN wait_ev(DAT_EVD_HANDLE evd, unsigned ms, DAT_EVENT *ev)
{
	DAT_COUNT nmore = 0;

	memset(ev, 0, sizeof(*ev));
	return dat_evd_wait(evd, (DAT_TIMEOUT)ms * 1000u, 1, ev, &nmore);
}

static void expect_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, const char *what)
{
	DAT_EVENT ev;

	assert_ok(wait_ev(evd, 5000, &ev));
	if (ev.event_number != want)
		fail_msg("%s: event 0x%x, expected 0x%x", what, (unsigned)ev.event_number,
			 (unsigned)want);
	if (want == DAT_DTO_COMPLETION_EVENT &&
	    ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
		fail_msg("%s: completion status %d", what,
			 (int)ev.event_data.dto_completion_event_data.status);
}

static DAT_LMR_TRIPLET seg(const struct side *x, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = { .lmr_context = x->lctx, .segment_length = (DAT_SEG_LENGTH)len,
			      .virtual_address = (DAT_VADDR)(uintptr_t)(x->buf + off) };

	return t;
}

static DAT_DTO_COOKIE ck(uint64_t v)
{
	DAT_DTO_COOKIE c;

	memset(&c, 0, sizeof(c));
	c.as_64 = v;
	return c;
}

/* A message from the client (cookie v) to a receive posted on the server. */
static void send_one(struct pair *p, uint64_t v)
{
	DAT_LMR_TRIPLET r = seg(&p->s, 0, 64), t = seg(&p->c, 0, 8);

	assert_ok(dat_ep_post_recv(p->s.ep, 1, &r, ck(v), DAT_COMPLETION_DEFAULT_FLAG));
	assert_ok(dat_ep_post_send(p->c.ep, 1, &t, ck(v), DAT_COMPLETION_DEFAULT_FLAG));
	expect_event(p->s.rcv, DAT_DTO_COMPLETION_EVENT, "server receive");
	expect_event(p->c.req, DAT_DTO_COMPLETION_EVENT, "client send");
}

/* Open both IAs, connect them and move a message and an RDMA write. */
static int pair_setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct sockaddr_in a;
	DAT_RMR_TRIPLET r;
	DAT_LMR_TRIPLET l;
	DAT_EVENT ev;
	DAT_RETURN rc;

	if (!p)
		return -1;
	p->ia_name = *state;
	watchdog(__func__, 60);
	if ((rc = side_open(&p->s, p->ia_name)) || (rc = side_open(&p->c, p->ia_name)) ||
	    (rc = dat_psp_create_any(p->s.ia, &p->port, p->s.cr, DAT_PSP_CONSUMER_FLAG,
				     &p->psp))) {
		char b[160];

		print_error("setup: two '%s' IAs with EVDs, EP and a PSP: %s\n", p->ia_name,
			    rc_name(rc, b, sizeof(b)));
		side_close(&p->c);
		side_close(&p->s);
		free(p);
		return -1;
	}
	*state = p;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_ok(dat_ep_connect(p->c.ep, (DAT_IA_ADDRESS_PTR)&a, p->port, 5 * SEC, 0, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
	assert_ok(wait_ev(p->s.cr, 5000, &ev));
	assert_int_equal(ev.event_number, DAT_CONNECTION_REQUEST_EVENT);
	assert_ok(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, p->s.ep, 0,
				NULL));
	expect_event(p->s.conn, DAT_CONNECTION_EVENT_ESTABLISHED, "server connection");
	expect_event(p->c.conn, DAT_CONNECTION_EVENT_ESTABLISHED, "client connection");
	send_one(p, 1);
	l = seg(&p->c, 4096, 4096);
	r = (DAT_RMR_TRIPLET){ .rmr_context = p->s.rctx, .segment_length = 4096,
			       .virtual_address = p->s.reg_addr + 8192 };
	assert_ok(dat_ep_post_rdma_write(p->c.ep, 1, &l, ck(2), &r, DAT_COMPLETION_DEFAULT_FLAG));
	expect_event(p->c.req, DAT_DTO_COMPLETION_EVENT, "client RDMA write");
	send_one(p, 3);
	alarm(0);
	return 0;
}

static int pair_teardown(void **state)
{
	struct pair *p = *state;

	watchdog(__func__, 30);
	side_close(&p->c);
	side_close(&p->s);
	free(p);
	alarm(0);
	return 0;
}

/* --------------------------------------------------------------- the test */

struct waiter {
	DAT_EVD_HANDLE evd;
	_Atomic pid_t tid;
	DAT_RETURN rc;
	DAT_EVENT ev;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	w->tid = (pid_t)syscall(SYS_gettid);
	w->rc = wait_ev(w->evd, 10000, &w->ev);
	return NULL;
}

/* Sit idle IDLE_MS (with a waiter asleep on the server's receive EVD if
 * `waiter`), then check the CPU time of both progress threads (and the
 * waiter's). */
static void idle_second(struct pair *p, bool waiter)
{
	pid_t tids[MAX_THREADS];
	uint64_t t0[MAX_THREADS], w0 = 0, start;
	double pct[MAX_THREADS] = { 0 }, wpct = 0, wall;
	struct waiter w = { .evd = p->s.rcv };
	pthread_t th;
	bool bad = false;
	int n;

	watchdog(__func__, 30);
	n = threads_named("dfi-progress", tids, MAX_THREADS);
	if (n != 2)
		fail_msg("%s: %d progress threads (\"dfi-progress\") in /proc/self/task, "
			 "expected one per IA, 2", p->ia_name, n);
	if (waiter) {
		DAT_LMR_TRIPLET r = seg(&p->s, 0, 64);

		assert_ok(dat_ep_post_recv(p->s.ep, 1, &r, ck(0x77), DAT_COMPLETION_DEFAULT_FLAG));
		assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
		while (!w.tid)
			sleep_ms(1);
		sleep_ms(50);		/* inside dat_evd_wait */
		w0 = thread_cpu_ns(w.tid);
	}
	start = now_ns();
	for (int i = 0; i < n; i++)
		t0[i] = thread_cpu_ns(tids[i]);
	sleep_ms(IDLE_MS);
	wall = (double)(now_ns() - start) / 1e6;
	for (int i = 0; i < n; i++) {
		pct[i] = (double)(thread_cpu_ns(tids[i]) - t0[i]) / 1e4 / IDLE_MS;
		bad = bad || pct[i] > IDLE_MAX_PCT;
	}
	if (waiter) {
		wpct = (double)(thread_cpu_ns(w.tid) - w0) / 1e4 / IDLE_MS;
		bad = bad || wpct > IDLE_MAX_PCT;
		DAT_LMR_TRIPLET t = seg(&p->c, 0, 8);

		/* the waiter wakes with the receive 0x77 */
		assert_ok(dat_ep_post_send(p->c.ep, 1, &t, ck(0x78), DAT_COMPLETION_DEFAULT_FLAG));
		expect_event(p->c.req, DAT_DTO_COMPLETION_EVENT, "client send");
		pthread_join(th, NULL);
		assert_ok(w.rc);
		assert_int_equal(w.ev.event_data.dto_completion_event_data.user_cookie.as_64, 0x77);
	}
	print_message("# %s, %s: progress threads %.2f %% and %.2f %% of a CPU over %u ms "
		      "(%.0f ms of wall time)\n", p->ia_name,
		      waiter ? "a consumer in dat_evd_wait" : "idle", pct[0], pct[1], IDLE_MS, wall);
	if (waiter)
		print_message("# %s: the waiter in dat_evd_wait %.2f %% of a CPU\n", p->ia_name,
			      wpct);
	if (bad)
		fail_msg("%s: over an idle second a thread used more than %.0f %% of a CPU "
			 "(progress threads %.2f %% and %.2f %%, waiter %.2f %%): a wait that spins",
			 p->ia_name, IDLE_MAX_PCT, pct[0], pct[1], wpct);
	alarm(0);
}

static void test_idle(void **state)
{
	idle_second(*state, false);
}

static void test_idle_waiter(void **state)
{
	idle_second(*state, true);
}

#define IDLE_CASES(ia) \
	{ "test_idle(" ia ")", test_idle, pair_setup, pair_teardown, (void *)(ia) }, \
	{ "test_idle_waiter(" ia ")", test_idle_waiter, pair_setup, pair_teardown, (void *)(ia) }

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		IDLE_CASES("ofi-lo"),
		IDLE_CASES("ofi-net-lo"),
		IDLE_CASES("ofi-lo-rr"),
		IDLE_CASES("ofi-rxm-lo"),
		IDLE_CASES("ofi-shm"),
	};
	watchdog_install();
	default_dat_override();
	if (argc == 2)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
