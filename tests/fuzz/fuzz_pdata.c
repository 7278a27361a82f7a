/*
 * fuzz_pdata: connection private data, the bytes a peer controls.
 * dapl-ofi adds no header of its own, only a trailer where it emulates
 * atomics (the mailbox of msg/atomic.c, on connect and accept): the
 * consumer's private data goes to libfabric's fi_connect / fi_accept /
 * fi_reject as it is, and what
 * libfabric hands back with FI_CONNREQ, FI_CONNECTED or an error entry
 * (cm.c dfi_eq_read, at most DFI_PDATA_MAX = 256 bytes, less the trailer of
 * msg/atomic.c where atomics are emulated) is what the CR and
 * the connection events show.  One process, two IAs (ofi-lo of the build
 * tree's dat.conf, opened twice through the stock registry), a PSP on the
 * server IA, reused across inputs.  Each input is one exchange:
 *
 *   byte 0   mode: bit 0 accept (else reject), bit 1 the connect's length
 *            out of range, bit 2 the accept's or reject's, bit 3 a NULL
 *            pointer with length 0, bit 4 raw (below);
 *   2 bytes  the connect's length (0..max_private_data_size, or out of
 *            range), its bytes;
 *   2 bytes  the accept's or reject's length, its bytes.
 *
 * Asserted: a length outside 0..max (or a NULL pointer with a length) is
 * refused with DAT_INVALID_PARAMETER naming that argument (dat_ep_connect
 * ARG5, dat_cr_accept ARG3, dat_cr_reject ARG2) and reads nothing past the
 * max bytes given (ASan); the server's CR holds exactly the bytes and
 * length the client sent; the client's ESTABLISHED (accept) or
 * PEER_REJECTED (reject) event holds exactly the server's; both sides end
 * DISCONNECTED.  Every wait is bounded (5 s).
 *
 * Raw mode: a plain TCP client writes the rest of the input to the PSP's
 * port as a hostile peer would (not through libfabric) and closes; a CR
 * that comes of it must hold at most 256 bytes, and is rejected.
 *
 * Reproduce: DAT_OVERRIDE=$PWD/build/fuzz/dat.conf build/fuzz/fuzz/fuzz_pdata <crash-file>
 * (tests/fuzz/README.md).
 */
#include <dat2/udat.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The IA's max_private_data_size: libfabric tcp's 256 bytes of CM data,
 * less the 24 that announce the emulated atomics' mailbox (msg/atomic.c) */
static DAT_COUNT pdata_max = 256;
#define PDATA_MAX	pdata_max
#define RAW_MAX		256		/* what libfabric hands over at most */
#define WAIT_US		5000000		/* every wait, at most */

static DAT_IA_HANDLE ia_s, ia_c;
static DAT_EVD_HANDLE async_s, async_c;
static DAT_EVD_HANDLE cr_evd, sconn_evd, sdto_evd, cconn_evd, cdto_evd;
static DAT_PZ_HANDLE pz_s, pz_c;
static DAT_PSP_HANDLE psp;
static DAT_CONN_QUAL qual;
static struct sockaddr_in server;
static const char *volatile step = "?";

static void fail(const char *what, DAT_RETURN rc) __attribute__((noreturn));

static void fail(const char *what, DAT_RETURN rc)
{
	const char *maj = "?", *min = "";

	dat_strerror(rc, &maj, &min);
	fprintf(stderr, "fuzz_pdata: %s: %s (returned 0x%08x %s %s)\n", step, what, (unsigned)rc,
		maj, min);
	abort();
}

#define ok(expr) do {							\
		DAT_RETURN rc_ = (step = #expr, (expr));		\
		if (rc_ != DAT_SUCCESS)					\
			fail("failed", rc_);				\
	} while (0)

#define ERR(type, sub) ((DAT_RETURN)(DAT_CLASS_ERROR | (DAT_UINT32)(type) | (DAT_UINT32)(sub)))

/* ------------------------------------------------------------ the input */

static const uint8_t *in;
static size_t in_len;

static uint8_t u8(void)
{
	if (!in_len)
		return 0;
	in_len--;
	return *in++;
}

/* A length: 0..max, or (bad) one outside that range, negative included. */
static DAT_COUNT length(bool bad)
{
	unsigned v = (unsigned)u8() << 8 | u8();

	if (!bad)
		return (DAT_COUNT)(v % (PDATA_MAX + 1));
	switch (v & 3) {
	case 0: return PDATA_MAX + 1;
	case 1: return -1;
	case 2: return PDATA_MAX + 1 + (DAT_COUNT)(v >> 2);
	default: return v & 4 ? INT32_MIN : INT32_MAX;
	}
}

/* Exactly max bytes on the heap, so that ASan sees any read past them. */
static uint8_t *bytes(DAT_COUNT n)
{
	uint8_t *b = malloc(PDATA_MAX);

	if (!b)
		abort();
	for (DAT_COUNT i = 0; i < PDATA_MAX; i++)
		b[i] = i < n ? u8() : (uint8_t)(0xa5 ^ i);
	return b;
}

/* ------------------------------------------------------------- helpers */

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The next event of evd within WAIT_US.  libFuzzer's timer signal
 * (SIGALRM, every second) may interrupt the wait: DAT_INTERRUPTED_CALL,
 * and the wait goes on for the time left. */
static void next_event(DAT_EVD_HANDLE evd, DAT_EVENT *ev, const char *what)
{
	uint64_t end = now_us() + WAIT_US, now;
	DAT_COUNT n;
	DAT_RETURN rc;

	step = what;
	do {
		now = now_us();
		rc = dat_evd_wait(evd, now < end ? (DAT_TIMEOUT)(end - now) : 0, 1, ev, &n);
	} while (DAT_GET_TYPE(rc) == DAT_INTERRUPTED_CALL && now < end);
	if (rc != DAT_SUCCESS)
		fail("no event within 5 s", rc);
}

static void same(const char *what, DAT_COUNT got_len, const void *got, DAT_COUNT len,
		 const void *want)
{
	if (got_len != len) {
		fprintf(stderr, "fuzz_pdata: %s: %d bytes of private data, %d sent\n", what,
			got_len, len);
		abort();
	}
	if (len && (!got || memcmp(got, want, (size_t)len) != 0)) {
		fprintf(stderr, "fuzz_pdata: %s: private data differs from what was sent\n",
			what);
		abort();
	}
}

/* A conn EVD's events until the EP's DISCONNECTED. */
static void until_disconnected(DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep, const char *what)
{
	for (int i = 0; i < 4; i++) {
		DAT_EVENT ev;

		next_event(evd, &ev, what);
		if (ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED &&
		    ev.event_data.connect_event_data.ep_handle == ep)
			return;
	}
	fprintf(stderr, "fuzz_pdata: %s: no DISCONNECTED among 4 events\n", what);
	abort();
}

static DAT_EP_HANDLE new_ep(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE dto,
			    DAT_EVD_HANDLE conn)
{
	DAT_EP_HANDLE ep;

	ok(dat_ep_create(ia, pz, dto, dto, conn, NULL, &ep));
	return ep;
}

/* ------------------------------------------------------------ raw peer */

static void raw_peer(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	DAT_EVENT ev;
	DAT_COUNT n;

	step = "raw peer";
	if (fd < 0 || connect(fd, (struct sockaddr *)&server, sizeof(server)) != 0) {
		perror("fuzz_pdata: raw peer: connect");
		abort();
	}
	if (in_len && write(fd, in, in_len) < 0) {
		/* the listener may have refused it already: fine */
	}
	shutdown(fd, SHUT_WR);
	/* a whole request becomes a CR within a moment; anything else is
	 * dropped by libfabric when the socket closes */
	if (dat_evd_wait(cr_evd, 20000, 1, &ev, &n) == DAT_SUCCESS) {
		DAT_CR_PARAM p;
		DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;

		if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT) {
			fprintf(stderr, "fuzz_pdata: raw peer: event 0x%x on the CR EVD\n",
				(unsigned)ev.event_number);
			abort();
		}
		ok(dat_cr_query(cr, DAT_CR_FIELD_ALL, &p));
		if (p.private_data_size < 0 || p.private_data_size > RAW_MAX) {
			fprintf(stderr, "fuzz_pdata: raw peer: CR with %d bytes of private data\n",
				p.private_data_size);
			abort();
		}
		ok(dat_cr_reject(cr, 0, NULL));
	}
	close(fd);
}

/* ------------------------------------------------------------- exchange */

static void exchange(uint8_t mode)
{
	bool accept = mode & 1, bad1 = mode & 2, bad2 = mode & 4, null0 = mode & 8;
	DAT_COUNT len1 = length(bad1), len2;
	uint8_t *d1 = bytes(bad1 ? 0 : len1), *d2;
	DAT_EP_HANDLE ep_c = new_ep(ia_c, pz_c, cdto_evd, cconn_evd);
	DAT_EP_HANDLE ep_s;
	DAT_CR_HANDLE cr;
	DAT_CR_PARAM crp;
	DAT_EVENT ev;
	DAT_RETURN rc;

	if (bad1) {
		step = "dat_ep_connect (length out of range)";
		rc = dat_ep_connect(ep_c, (DAT_IA_ADDRESS_PTR)&server, qual, WAIT_US, len1, d1,
				    DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
		if (rc != ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5))
			fail("not refused with DAT_INVALID_PARAMETER DAT_INVALID_ARG5", rc);
		len1 = (DAT_COUNT)((unsigned)len1 % (PDATA_MAX + 1));	/* then a good one */
	}
	if (null0 && len1) {
		step = "dat_ep_connect (NULL private data)";
		rc = dat_ep_connect(ep_c, (DAT_IA_ADDRESS_PTR)&server, qual, WAIT_US, len1, NULL,
				    DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
		if (rc != ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5))
			fail("not refused with DAT_INVALID_PARAMETER DAT_INVALID_ARG5", rc);
	}
	ok(dat_ep_connect(ep_c, (DAT_IA_ADDRESS_PTR)&server, qual, WAIT_US, len1,
			  null0 && !len1 ? NULL : d1, DAT_QOS_BEST_EFFORT,
			  DAT_CONNECT_DEFAULT_FLAG));

	next_event(cr_evd, &ev, "server: the connection request");
	if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT)
		fail("not a connection request", (DAT_RETURN)ev.event_number);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	ok(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp));
	same("server's CR", crp.private_data_size, crp.private_data, len1, d1);

	len2 = length(bad2);
	d2 = bytes(bad2 ? 0 : len2);
	ep_s = accept ? new_ep(ia_s, pz_s, sdto_evd, sconn_evd) : DAT_HANDLE_NULL;
	if (bad2) {
		step = "dat_cr_accept / dat_cr_reject (length out of range)";
		if (accept) {
			rc = dat_cr_accept(cr, ep_s, len2, d2);
			if (rc != ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3))
				fail("accept not refused with DAT_INVALID_PARAMETER "
				     "DAT_INVALID_ARG3", rc);
		}
		rc = dat_cr_reject(cr, len2, d2);
		if (rc != ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2))
			fail("reject not refused with DAT_INVALID_PARAMETER DAT_INVALID_ARG2", rc);
		len2 = (DAT_COUNT)((unsigned)len2 % (PDATA_MAX + 1));
	}
	if (accept) {
		ok(dat_cr_accept(cr, ep_s, len2, null0 && !len2 ? NULL : d2));
		next_event(cconn_evd, &ev, "client: accepted");
		if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED)
			fail("client: not ESTABLISHED", (DAT_RETURN)ev.event_number);
		same("client's ESTABLISHED", ev.event_data.connect_event_data.private_data_size,
		     ev.event_data.connect_event_data.private_data, len2, d2);
		next_event(sconn_evd, &ev, "server: established");
		if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED)
			fail("server: not ESTABLISHED", (DAT_RETURN)ev.event_number);
		ok(dat_ep_disconnect(ep_c, DAT_CLOSE_ABRUPT_FLAG));
		until_disconnected(cconn_evd, ep_c, "client: disconnected");
		until_disconnected(sconn_evd, ep_s, "server: disconnected");
		ok(dat_ep_free(ep_s));
	} else {
		ok(dat_cr_reject(cr, len2, null0 && !len2 ? NULL : d2));
		next_event(cconn_evd, &ev, "client: rejected");
		if (ev.event_number != DAT_CONNECTION_EVENT_PEER_REJECTED)
			fail("client: not PEER_REJECTED", (DAT_RETURN)ev.event_number);
		same("client's PEER_REJECTED", ev.event_data.connect_event_data.private_data_size,
		     ev.event_data.connect_event_data.private_data, len2, d2);
	}
	ok(dat_ep_free(ep_c));
	free(d1);
	free(d2);
}

/* ---------------------------------------------------------------- setup */

static void close_all(void)
{
	ok(dat_psp_free(psp));
	ok(dat_evd_free(cr_evd));
	ok(dat_pz_free(pz_s));
	ok(dat_pz_free(pz_c));
	ok(dat_evd_free(sconn_evd));
	ok(dat_evd_free(sdto_evd));
	ok(dat_evd_free(cconn_evd));
	ok(dat_evd_free(cdto_evd));
	ok(dat_ia_close(ia_s, DAT_CLOSE_GRACEFUL_FLAG));
	ok(dat_ia_close(ia_c, DAT_CLOSE_GRACEFUL_FLAG));
}

const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:_dl_init\n";	/* libdat2's dlopen (tests/integ/dat_test.h) */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char *name = getenv("FUZZ_IA") ? getenv("FUZZ_IA") : "ofi-lo";
	DAT_IA_ATTR attr;
	DAT_PROVIDER_ATTR pattr;

	(void)argc;
	(void)argv;
	if (!getenv("DAT_OVERRIDE")) {
		fprintf(stderr, "fuzz_pdata: set DAT_OVERRIDE to the build tree's dat.conf "
			"(build/fuzz/dat.conf)\n");
		exit(2);
	}
	ok(dat_ia_open(name, 8, &async_s, &ia_s));
	ok(dat_ia_open(name, 8, &async_c, &ia_c));
	ok(dat_pz_create(ia_s, &pz_s));
	ok(dat_pz_create(ia_c, &pz_c));
	ok(dat_evd_create(ia_s, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd));
	ok(dat_evd_create(ia_s, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &sconn_evd));
	ok(dat_evd_create(ia_s, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &sdto_evd));
	ok(dat_evd_create(ia_c, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &cconn_evd));
	ok(dat_evd_create(ia_c, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &cdto_evd));
	ok(dat_psp_create_any(ia_s, &qual, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));
	ok(dat_ia_query(ia_s, NULL, DAT_IA_FIELD_IA_ADDRESS_PTR, &attr, DAT_PROVIDER_FIELD_ALL,
			&pattr));
	memcpy(&server, attr.ia_address_ptr, sizeof(server));
	pdata_max = pattr.max_private_data_size;
	if (pdata_max < 48 || pdata_max > RAW_MAX) {
		fprintf(stderr, "fuzz_pdata: max_private_data_size %d\n", pdata_max);
		exit(2);
	}
	server.sin_port = htons((uint16_t)qual);
	atexit(close_all);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t mode;

	in = data;
	in_len = size;
	mode = u8();
	if (mode & 16)
		raw_peer();
	else
		exchange(mode);
	return 0;
}
