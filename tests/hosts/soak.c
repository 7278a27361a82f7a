/*
 * soak: one side of tests/hosts/soak.sh, many connections between the two
 * test hosts that move verified traffic in every DTO kind while the script
 * breaks the network under them.  A plain DAT program (links -ldat2 only).
 *
 * The client (host a) opens -C connections to the server (host b), in
 * groups of -G connections that share a DTO EVD and a connection EVD (even
 * groups are read with dat_evd_wait, odd ones with dat_evd_dequeue).  Each
 * connection, every -i ms or so, sends a message (a sequence number and a
 * byte pattern the receiver checks: exactly once and in order within the
 * connection's life), RDMA-writes a pattern into the server's region and
 * then sends a message saying what to check there, and RDMA-reads a region
 * the server filled with a known pattern.  The server answers each message
 * with one of its own, which the client checks the same way; the client
 * keeps at most WIN messages unanswered, which also keeps it from writing
 * over a region the server has not checked yet.  The server's region of a
 * connection is an RMR bound anew for each of the connection's lives,
 * whose context and address reach the client in the accept's private data.
 *
 * A connection that ends (a fault, or the client's own disconnect of a
 * random few every few seconds, -D) is reset (dat_ep_reset) or freed and
 * created anew, by turns, once every DTO posted on it has completed, and
 * connected again with the next life number; what was in flight may be
 * lost, nothing received may be duplicated or corrupted.
 *
 * Two phases: a warm-up (-w seconds, no disconnects of its own), then
 * everything is torn down and the process's open files and RSS measured;
 * then the soak (-t seconds), torn down again and compared: the same open
 * files, RSS at most -R KiB above, no LMR or RMR left, and dat_ia_close()
 * with DAT_CLOSE_GRACEFUL_FLAG succeeds (it refuses while any object is
 * left).  RSS is read after malloc_trim(), so that it counts what the
 * process keeps, not what glibc caches (without it, one 300 s run grew
 * 24 MiB with the heap in use back to its start); the heap in use is
 * printed beside it.  The bound, 8 MiB by default: dapl-ofi keeps the
 * last DAPL_OFI_QUARANTINE (4096) freed handles poisoned, which a soak of
 * thousands of connection lives fills (at most about 2.7 MiB of EPs);
 * measured after 300 s and about 3400 lives: RSS 1.7 MiB above the
 * warm-up's, the heap in use within 2 KiB of it.  A phase ends with a BYE message on every connection, answered,
 * and the client's disconnect.  Lines the script reads:
 *
 *   phase <n> <ms>                   phase 0 (warm-up) or 1 (soak) begins
 *   allup <ms> <broken>              every connection is up again (client,
 *                                    phase 1), and how many ended BROKEN so far
 *   violation <ms> <what>            exactly once, integrity, resources
 *   baseline/final fds <n> rss_kb <n> ...   the measurements
 *   made, ended, verified <kind> <n> <bytes>, dto, faults, violations, end
 *
 * <ms> is CLOCK_REALTIME in milliseconds.  Exit status 0: no violation.
 */
#include "peer.h"

#include <dat2/udat.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MSG	1024		/* largest message */
#define HDR	48		/* its header */
#define NRECV	8		/* receives posted per connection */
#define NSEND	8		/* send slots per connection */
#define WIN	4		/* messages unanswered (client), write slots */
#define WSLOT	2048		/* an RDMA write's slot in the server's region */
#define RDLEN	4096		/* the region the client reads */
#define EXPO	(WIN * WSLOT + RDLEN)	/* the server's region of a connection */
#define CBUF	(NRECV * MSG + NSEND * MSG + WIN * WSLOT + RDLEN + EXPO)
#define MAXC	4096
#define MAGIC	0x50414f53u	/* "SOAP" */

enum kind { K_RECV, K_SEND, K_WRITE, K_READ };
enum mtype { T_DATA = 1, T_WROTE, T_REPLY, T_BYE };
enum state { S_IDLE, S_CONNECTING, S_UP, S_DRAIN, S_DONE };

struct hdr {
	uint32_t magic, conn, gen, len;
	uint16_t type, ok;
	uint32_t woff, wlen, pad;
	uint64_t seq, echo;
};
_Static_assert(sizeof(struct hdr) == HDR, "header size");

/* the connect's and the accept's private data */
struct pdata {
	uint32_t magic, conn, gen, phase;
	uint64_t raddr;
	uint32_t rctx, pad;
};

struct conn {
	DAT_EP_HANDLE ep;
	DAT_RMR_HANDLE rmr;
	enum state st;
	uint32_t gen, last_gen;		/* this life; server: the last seen */
	int outstanding;		/* DTOs posted and not reaped */
	unsigned busy;			/* send slots 0-7, write slots 8-11, read 12 */
	uint64_t tx, rx;		/* messages sent, received this life */
	uint64_t acked, wseq;		/* client: answers, writes */
	uint32_t rd_off, rd_len;	/* client: the read in flight */
	DAT_RMR_CONTEXT rctx;		/* client: the server's region */
	DAT_VADDR raddr;
	double due, since;		/* next round or connect; drain start */
	bool bye_sent, bye;		/* client: BYE posted; server: received */
	bool disc_sent;			/* client: the BYE answered, disconnected */
	bool stuck;
	bool failed;			/* the connect did not establish */
	int last_end;			/* how the last life ended (ev_names; 8: refused) */
	bool was_reset;			/* its EP was reset, not created, since */
	DAT_CR_HANDLE pending;		/* server: a request for this slot */
	double pending_since;
	uint64_t rq[16];		/* server: answers to send (echoed seqs) */
	uint16_t rq_ok[16];
	int rq_head, rq_n;
};

static bool server;
static int nconn = 256, gsize = 8, ngrp;
static int interval_ms = 250, port = 18800, phase;
static const char *host;
static struct conn *conns;
static char *bufs;
static DAT_IA_HANDLE ia;
static DAT_PZ_HANDLE pz;
static DAT_PSP_HANDLE psp;
static DAT_EVD_HANDLE cr_evd, *dto_evd, *conn_evd;
static DAT_LMR_HANDLE *lmr;
static DAT_LMR_CONTEXT *lmr_ctx;
static int lmr_live, rmr_live;
static bool finishing;
static uint64_t rng = 1;

/* what the summary reports */
static uint64_t made, ev_count[8], v_n[4], v_bytes[4], by_status[16];
static uint64_t selfdisc, resets, recreated, post_fail, violations, stale_cr;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double rnd01(void)
{
	return (double)(rnd() >> 11) / (double)(1ull << 53);
}

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
	va_list ap;

	if (violations++ >= 50)
		return;
	printf("violation %" PRIu64 " ", wall_ms());
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* opendir's own */
}

/* the heap in use (every arena's, and the large blocks mapped apart) */
static long heap_kb(void)
{
	struct mallinfo2 m = mallinfo2();

	return (long)((m.uordblks + m.hblkhd) / 1024);
}

/* RSS once malloc has given back what it holds free: what the process
 * keeps, not what glibc caches */
static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	malloc_trim(0);
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* A connection's buffers: receives, sends, write sources, read target,
 * and (server) the region the client writes and reads. */
static char *rbuf(int c, int i) { return bufs + (size_t)c * CBUF + (size_t)i * MSG; }
static char *sbuf(int c, int i) { return rbuf(c, NRECV + i); }
static char *wbuf(int c, int i) { return rbuf(c, NRECV + NSEND) + (size_t)i * WSLOT; }
static char *dbuf(int c) { return wbuf(c, WIN); }
static char *xbuf(int c) { return dbuf(c) + RDLEN; }

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* the pattern's byte i under key k: both the key and the offset show */
static inline char pat(uint64_t k, size_t i)
{
	return (char)((uint8_t)(k >> ((i & 7) * 8)) + (uint8_t)((i >> 3) * 151));
}

static uint64_t key(int c, uint32_t gen, uint64_t seq, int tag)
{
	return mix(((uint64_t)tag << 60) ^ ((uint64_t)c << 44) ^ ((uint64_t)gen << 24) ^ seq);
}

static void fill(char *p, uint64_t k, size_t from, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pat(k, from + i);
}

/* the offset of the first wrong byte, or -1 */
static long check(const char *p, uint64_t k, size_t from, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pat(k, from + i))
			return (long)i;
	return -1;
}

static DAT_DTO_COOKIE cookie(int c, enum kind k, int slot)
{
	return (DAT_DTO_COOKIE){ .as_64 = ((uint64_t)conns[c].gen << 32) | ((uint64_t)c << 16) |
				 ((uint64_t)k << 8) | (uint64_t)slot };
}

static DAT_LMR_TRIPLET liov(int c, void *p, size_t len)
{
	return (DAT_LMR_TRIPLET){ .lmr_context = lmr_ctx[c / gsize],
				  .virtual_address = (DAT_VADDR)(uintptr_t)p,
				  .segment_length = (DAT_VLEN)len };
}

static const char *ev_names[9];

static bool posted(struct conn *k, DAT_RETURN rc, const char *what)
{
	DAT_EP_STATE st = 0;

	if (rc == DAT_SUCCESS) {
		k->outstanding++;
		return true;
	}
	/* an EP whose connection is going refuses: its event follows */
	if (post_fail++ < 30) {
		dat_ep_get_status(k->ep, &st, NULL, NULL);
		printf("# conn %d life %u: post %s refused: %s (EP state %d, state %d, "
		       "outstanding %d, the last life %s, EP %s)\n", (int)(k - conns), k->gen, what,
		       dat_err(rc), (int)st, (int)k->st, k->outstanding, ev_names[k->last_end],
		       k->was_reset ? "reset" : "created");
	}
	return false;
}

static void post_recv(int c, int i)
{
	DAT_LMR_TRIPLET iov = liov(c, rbuf(c, i), MSG);

	posted(&conns[c], dat_ep_post_recv(conns[c].ep, 1, &iov, cookie(c, K_RECV, i),
					   DAT_COMPLETION_DEFAULT_FLAG), "recv");
}

/* a message of type t, its size depending on its sequence number */
static bool post_msg(int c, enum mtype t, uint64_t echo, uint16_t ok, uint32_t woff,
		     uint32_t wlen)
{
	struct conn *k = &conns[c];
	int i = (int)(k->tx % NSEND);
	char *p = sbuf(c, i);
	struct hdr h = {
		.magic = MAGIC, .conn = (uint32_t)c, .gen = k->gen, .type = (uint16_t)t,
		.ok = ok, .woff = woff, .wlen = wlen, .seq = k->tx, .echo = echo,
	};
	DAT_LMR_TRIPLET iov;

	if (k->busy & (1u << i))
		return false;
	h.len = HDR + (uint32_t)((k->tx * 97 + (uint64_t)c) % (MSG - HDR + 1));
	memcpy(p, &h, HDR);
	fill(p + HDR, key(c, k->gen, k->tx, server ? 2 : 1), HDR, h.len - HDR);
	iov = liov(c, p, h.len);
	if (!posted(k, dat_ep_post_send(k->ep, 1, &iov, cookie(c, K_SEND, i),
					DAT_COMPLETION_DEFAULT_FLAG), "send"))
		return false;
	k->busy |= 1u << i;
	k->tx++;
	return true;
}

/* client: an RDMA write into the server's write slot, then the message
 * that tells the server what to check there */
static void post_write(int c)
{
	struct conn *k = &conns[c];
	int s = (int)(k->wseq % WIN);
	uint32_t len = 1 + (uint32_t)(rnd() % WSLOT), off = (uint32_t)(rnd() % (WSLOT - len + 1));
	DAT_LMR_TRIPLET iov = liov(c, wbuf(c, s), len);
	DAT_RMR_TRIPLET r = {
		.virtual_address = k->raddr + (DAT_VADDR)s * WSLOT + off,
		.segment_length = len, .rmr_context = k->rctx,
	};

	if (k->busy & (1u << (8 + s)) || k->busy & (1u << (k->tx % NSEND)))
		return;
	fill(wbuf(c, s), key(c, k->gen, k->wseq, 3), 0, len);
	if (!posted(k, dat_ep_post_rdma_write(k->ep, 1, &iov, cookie(c, K_WRITE, s), &r,
					      DAT_COMPLETION_DEFAULT_FLAG), "rdma write"))
		return;
	k->busy |= 1u << (8 + s);
	if (post_msg(c, T_WROTE, k->wseq, 0, off, len))
		k->wseq++;
}

static void post_read(int c)
{
	struct conn *k = &conns[c];
	uint32_t len = 1 + (uint32_t)(rnd() % RDLEN), off = (uint32_t)(rnd() % (RDLEN - len + 1));
	DAT_LMR_TRIPLET iov = liov(c, dbuf(c), len);
	DAT_RMR_TRIPLET r = {
		.virtual_address = k->raddr + WIN * WSLOT + off,
		.segment_length = len, .rmr_context = k->rctx,
	};

	if (k->busy & (1u << 12))
		return;
	memset(dbuf(c), 0, len);
	if (!posted(k, dat_ep_post_rdma_read(k->ep, 1, &iov, cookie(c, K_READ, 0), &r,
					     DAT_COMPLETION_DEFAULT_FLAG), "rdma read"))
		return;
	k->busy |= 1u << 12;
	k->rd_off = off;
	k->rd_len = len;
}

/* server: the answers queued, as send slots allow */
static void flush_answers(int c)
{
	struct conn *k = &conns[c];

	while (k->rq_n && k->st == S_UP &&
	       post_msg(c, T_REPLY, k->rq[k->rq_head], k->rq_ok[k->rq_head], 0, 0)) {
		k->rq_head = (k->rq_head + 1) % 16;
		k->rq_n--;
	}
}

static void on_message(int c, const char *p, DAT_COUNT len)
{
	struct conn *k = &conns[c];
	struct hdr h;
	long bad;
	uint16_t ok = 1;

	if (len < HDR) {
		violation("conn %d life %u: a message of %d bytes", c, k->gen, len);
		return;
	}
	memcpy(&h, p, HDR);
	if (h.magic != MAGIC || h.conn != (uint32_t)c || h.gen != k->gen || h.len != (uint32_t)len) {
		violation("conn %d life %u: a message of conn %u life %u, %u bytes, arrived with %d",
			  c, k->gen, h.conn, h.gen, h.len, len);
		return;
	}
	if (h.seq != k->rx) {
		violation("conn %d life %u: message %" PRIu64 " arrived, %" PRIu64 " expected (%s)",
			  c, k->gen, h.seq, k->rx, h.seq < k->rx ? "a duplicate" : "one lost");
		k->rx = h.seq;
	}
	k->rx++;
	bad = check(p + HDR, key(c, k->gen, h.seq, server ? 1 : 2), HDR, (size_t)len - HDR);
	if (bad >= 0) {
		violation("conn %d life %u: message %" PRIu64 " corrupt at byte %ld", c, k->gen,
			  h.seq, bad + HDR);
		ok = 0;
	} else {
		v_n[K_SEND]++;
		v_bytes[K_SEND] += (uint64_t)len;
	}
	if (h.type == T_WROTE) {
		char *w = xbuf(c) + (size_t)(h.echo % WIN) * WSLOT + h.woff;

		if (h.woff + h.wlen > WSLOT) {
			violation("conn %d: write %u+%u out of its slot", c, h.woff, h.wlen);
		} else if ((bad = check(w, key(c, k->gen, h.echo, 3), 0, h.wlen)) >= 0) {
			violation("conn %d life %u: RDMA write %" PRIu64 " (%u bytes) wrong at byte %ld",
				  c, k->gen, h.echo, h.wlen, bad);
			ok = 0;
		} else {
			v_n[K_WRITE]++;
			v_bytes[K_WRITE] += h.wlen;
		}
	}
	if (server) {
		if (h.type == T_BYE)
			k->bye = true;
		if (h.type == T_DATA || h.type == T_WROTE || h.type == T_BYE) {
			if (k->rq_n == 16) {
				violation("conn %d: more than 16 messages unanswered", c);
				return;
			}
			k->rq[(k->rq_head + k->rq_n) % 16] = h.seq;
			k->rq_ok[(k->rq_head + k->rq_n) % 16] = ok;
			k->rq_n++;
			flush_answers(c);
		} else {
			violation("conn %d: the client sent type %u", c, h.type);
		}
		return;
	}
	if (h.type != T_REPLY)
		violation("conn %d: the server sent type %u", c, h.type);
	else if (h.echo != k->acked)
		violation("conn %d life %u: answer to %" PRIu64 ", %" PRIu64 " expected", c, k->gen,
			  h.echo, k->acked);
	else if (!h.ok)
		violation("conn %d life %u: the server found message %" PRIu64 " bad", c, k->gen,
			  h.echo);
	k->acked = h.echo + 1;
}

static void on_dto(const DAT_EVENT *ev)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
	uint64_t ck = d->user_cookie.as_64;
	int c = (int)((ck >> 16) & 0xffff), slot = (int)(ck & 0xff);
	enum kind kd = (enum kind)((ck >> 8) & 0xff);
	struct conn *k;

	if (ev->event_number != DAT_DTO_COMPLETION_EVENT) {
		violation("event 0x%x on a DTO EVD", ev->event_number);
		return;
	}
	if (c >= nconn) {
		violation("a completion with cookie 0x%" PRIx64, ck);
		return;
	}
	k = &conns[c];
	by_status[d->status < 16 ? d->status : 15]++;
	if (k->outstanding-- <= 0)
		violation("conn %d: a completion more than was posted (cookie 0x%" PRIx64 ")", c, ck);
	if (kd == K_SEND)
		k->busy &= ~(1u << slot);
	else if (kd == K_WRITE)
		k->busy &= ~(1u << (8 + slot));
	else if (kd == K_READ)
		k->busy &= ~(1u << 12);
	if (d->status != DAT_DTO_SUCCESS)
		return;
	if ((uint32_t)(ck >> 32) != k->gen) {
		violation("conn %d: a completion of life %u in life %u", c, (uint32_t)(ck >> 32),
			  k->gen);
		return;
	}
	switch (kd) {
	case K_RECV:
		on_message(c, rbuf(c, slot), (DAT_COUNT)d->transfered_length);
		if (k->st == S_UP || k->st == S_CONNECTING)
			post_recv(c, slot);
		break;
	case K_SEND:
		if (server)
			flush_answers(c);
		break;
	case K_WRITE:
		break;
	case K_READ: {
		long bad = check(dbuf(c), key(c, k->gen, 0, 4), k->rd_off, k->rd_len);

		if (d->transfered_length != k->rd_len || bad >= 0) {
			violation("conn %d life %u: RDMA read %u+%u (%u bytes) wrong at byte %ld", c,
				  k->gen, k->rd_off, k->rd_len, (unsigned)d->transfered_length, bad);
		} else {
			v_n[K_READ]++;
			v_bytes[K_READ] += k->rd_len;
		}
		break;
	}
	}
}

static const char *status_names[12] = {
	[DAT_DTO_SUCCESS] = "success", [DAT_DTO_ERR_FLUSHED] = "flushed",
	[DAT_DTO_ERR_LOCAL_LENGTH] = "local_length", [DAT_DTO_ERR_LOCAL_EP] = "local_ep",
	[DAT_DTO_ERR_LOCAL_PROTECTION] = "local_protection",
	[DAT_DTO_ERR_BAD_RESPONSE] = "bad_response",
	[DAT_DTO_ERR_REMOTE_ACCESS] = "remote_access",
	[DAT_DTO_ERR_REMOTE_RESPONDER] = "remote_responder",
	[DAT_DTO_ERR_TRANSPORT] = "transport",
	[DAT_DTO_ERR_RECEIVER_NOT_READY] = "receiver_not_ready",
	[DAT_DTO_ERR_PARTIAL_PACKET] = "partial_packet",
	[DAT_RMR_OPERATION_FAILED] = "rmr_operation_failed",
};

static int conn_of(DAT_EP_HANDLE ep)
{
	for (int c = 0; c < nconn; c++)
		if (conns[c].ep == ep && ep)
			return c;
	return -1;
}

static int ev_index(DAT_EVENT_NUMBER n)
{
	switch (n) {
	case DAT_CONNECTION_EVENT_ESTABLISHED: return 0;
	case DAT_CONNECTION_EVENT_DISCONNECTED: return 1;
	case DAT_CONNECTION_EVENT_BROKEN: return 2;
	case DAT_CONNECTION_EVENT_TIMED_OUT: return 3;
	case DAT_CONNECTION_EVENT_PEER_REJECTED: return 4;
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return 5;
	case DAT_CONNECTION_EVENT_UNREACHABLE: return 6;
	default: return 7;
	}
}

static const char *ev_names[9] = {
	"established", "disconnected", "broken", "timed_out", "peer_rejected",
	"non_peer_rejected", "unreachable", "other", "refused",
};

/* A connection's end: its EP reset (client, every other time) or freed,
 * which flushes what was still posted; it is used again once all of that
 * has been reaped. */
static void end_conn(int c, bool failed, int how)
{
	struct conn *k = &conns[c];
	DAT_RETURN rc;

	k->last_end = how;
	k->was_reset = !server && (k->gen & 1);
	if (k->was_reset) {
		if ((rc = dat_ep_reset(k->ep)))
			violation("conn %d: dat_ep_reset: %s", c, dat_err(rc));
		resets++;
	} else {
		if ((rc = dat_ep_free(k->ep)))
			violation("conn %d: dat_ep_free: %s", c, dat_err(rc));
		k->ep = DAT_HANDLE_NULL;
		recreated++;
	}
	if (k->rmr) {
		if ((rc = dat_rmr_free(k->rmr)))
			violation("conn %d: dat_rmr_free: %s", c, dat_err(rc));
		else
			rmr_live--;
		k->rmr = DAT_HANDLE_NULL;
	}
	k->st = S_DRAIN;
	k->failed = failed;
	k->since = mono_s();
	k->rq_n = 0;
}

static bool all_up(void)
{
	for (int c = 0; c < nconn; c++)
		if (conns[c].st != S_UP)
			return false;
	return true;
}

static void on_conn_event(const DAT_EVENT *ev)
{
	const DAT_CONNECTION_EVENT_DATA *d = &ev->event_data.connect_event_data;
	int c = conn_of(d->ep_handle), e = ev_index(ev->event_number);
	struct conn *k;
	static bool was_all_up;

	if (c < 0) {
		printf("# event 0x%x for no connection of ours\n", ev->event_number);
		return;
	}
	k = &conns[c];
	ev_count[e]++;
	if (ev->event_number == DAT_CONNECTION_EVENT_ESTABLISHED) {
		if (k->st != S_CONNECTING) {
			violation("conn %d: ESTABLISHED in state %d", c, k->st);
			return;
		}
		if (!server) {
			struct pdata pd;

			if (d->private_data_size < (DAT_COUNT)sizeof(pd) || !d->private_data) {
				violation("conn %d: %d bytes of private data", c, d->private_data_size);
				dat_ep_disconnect(k->ep, DAT_CLOSE_ABRUPT_FLAG);
				return;
			}
			memcpy(&pd, d->private_data, sizeof(pd));
			if (pd.magic != MAGIC || pd.conn != (uint32_t)c || pd.gen != k->gen) {
				violation("conn %d life %u: accepted as conn %u life %u", c, k->gen,
					  pd.conn, pd.gen);
				dat_ep_disconnect(k->ep, DAT_CLOSE_ABRUPT_FLAG);
				return;
			}
			k->rctx = pd.rctx;
			k->raddr = pd.raddr;
			k->due = mono_s() + rnd01() * interval_ms / 1000.0;
		}
		k->st = S_UP;
		made++;
		if (server)
			flush_answers(c);	/* messages that came before this event */
		if (!server && phase == 1 && !was_all_up && all_up()) {
			printf("allup %" PRIu64 " %" PRIu64 "\n", wall_ms(), ev_count[2]);
			was_all_up = true;
		}
		return;
	}
	if (k->st != S_UP && k->st != S_CONNECTING) {
		violation("conn %d: event %s in state %d", c, ev_names[e], k->st);
		return;
	}
	was_all_up = false;
	end_conn(c, k->st == S_CONNECTING, e);
}

static void accept_now(int c, DAT_CR_HANDLE cr, uint32_t gen);

static void on_cr(const DAT_EVENT *ev)
{
	DAT_CR_HANDLE cr = ev->event_data.cr_arrival_event_data.cr_handle;
	DAT_CR_PARAM p;
	struct pdata pd;
	DAT_RETURN rc;
	struct conn *k;

	if (ev->event_number != DAT_CONNECTION_REQUEST_EVENT) {
		violation("event 0x%x on the CR EVD", ev->event_number);
		return;
	}
	if ((rc = dat_cr_query(cr, DAT_CR_FIELD_ALL, &p)) ||
	    p.private_data_size < (DAT_COUNT)sizeof(pd)) {
		violation("a request without private data (%s)", dat_err(rc));
		dat_cr_reject(cr, 0, NULL);
		return;
	}
	memcpy(&pd, p.private_data, sizeof(pd));
	if (pd.magic == MAGIC && pd.phase == (uint32_t)phase + 1) {
		/* the client has begun the next phase before we ended this one */
		dat_cr_reject(cr, 0, NULL);
		stale_cr++;
		return;
	}
	if (pd.magic != MAGIC || pd.conn >= (uint32_t)nconn || pd.phase != (uint32_t)phase) {
		violation("a request for conn %u phase %u", pd.conn, pd.phase);
		dat_cr_reject(cr, 0, NULL);
		return;
	}
	k = &conns[pd.conn];
	if (pd.gen <= k->last_gen) {
		violation("conn %u: a request for life %u after life %u", pd.conn, pd.gen, k->last_gen);
		dat_cr_reject(cr, 0, NULL);
		return;
	}
	if (k->pending) {	/* an older request the client gave up on */
		dat_cr_reject(k->pending, 0, NULL);
		stale_cr++;
	}
	k->pending = cr;
	k->pending_since = mono_s();
	k->last_gen = pd.gen;
	if (k->st == S_IDLE)
		accept_now((int)pd.conn, cr, pd.gen);
}

static DAT_EP_HANDLE new_ep(int c)
{
	DAT_EP_ATTR a;
	DAT_EP_HANDLE ep;
	DAT_RETURN rc;
	int g = c / gsize;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_mtu_size = MSG;
	a.max_rdma_size = RDLEN;
	a.qos = DAT_QOS_BEST_EFFORT;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.max_recv_dtos = NRECV;
	a.max_request_dtos = NSEND + WIN + 1;
	a.max_recv_iov = 1;
	a.max_request_iov = 1;
	a.max_rdma_read_in = 1;
	a.max_rdma_read_out = 1;
	a.max_rdma_read_iov = 1;
	a.max_rdma_write_iov = 1;
	if ((rc = dat_ep_create(ia, pz, dto_evd[g], dto_evd[g], conn_evd[g], &a, &ep)))
		die("dat_ep_create", rc);
	return ep;
}

/* server: a new life of connection c on a new EP and RMR */
static void accept_now(int c, DAT_CR_HANDLE cr, uint32_t gen)
{
	struct conn *k = &conns[c];
	DAT_LMR_TRIPLET t = liov(c, xbuf(c), EXPO);
	struct pdata pd = { .magic = MAGIC, .conn = (uint32_t)c, .gen = gen, .phase = (uint32_t)phase };
	DAT_RETURN rc;

	k->pending = DAT_HANDLE_NULL;
	k->ep = new_ep(c);
	k->gen = gen;
	k->tx = k->rx = 0;
	k->bye = false;
	k->rq_n = k->rq_head = 0;
	if ((rc = dat_rmr_create(pz, &k->rmr)))
		die("dat_rmr_create", rc);
	rmr_live++;
	if ((rc = dat_rmr_bind(k->rmr, lmr[c / gsize], &t,
			       DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG,
			       DAT_VA_TYPE_VA, k->ep, (DAT_RMR_COOKIE){ .as_64 = 0 },
			       DAT_COMPLETION_SUPPRESS_FLAG, &pd.rctx)))
		die("dat_rmr_bind", rc);
	pd.raddr = (uint64_t)(uintptr_t)xbuf(c);
	fill(xbuf(c) + WIN * WSLOT, key(c, gen, 0, 4), 0, RDLEN);
	for (int i = 0; i < NRECV; i++)
		post_recv(c, i);
	k->st = S_CONNECTING;
	k->since = mono_s();
	k->stuck = false;
	if ((rc = dat_cr_accept(cr, k->ep, sizeof(pd), &pd))) {
		printf("# conn %d: dat_cr_accept: %s\n", c, dat_err(rc));
		end_conn(c, true, 8);
	}
}

/* client: a new life of connection c */
static void connect_now(int c)
{
	struct conn *k = &conns[c];
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct pdata pd = { .magic = MAGIC, .conn = (uint32_t)c, .phase = (uint32_t)phase };
	DAT_RETURN rc;

	if (!k->ep)
		k->ep = new_ep(c);
	k->gen++;
	pd.gen = k->gen;
	k->tx = k->rx = k->acked = k->wseq = 0;
	k->bye_sent = k->disc_sent = false;
	for (int i = 0; i < NRECV; i++)
		post_recv(c, i);
	inet_pton(AF_INET, host, &sin.sin_addr);
	k->st = S_CONNECTING;
	k->since = mono_s();
	k->stuck = false;
	rc = dat_ep_connect(k->ep, (DAT_IA_ADDRESS_PTR)&sin, (DAT_CONN_QUAL)port, 3000 * 1000,
			    sizeof(pd), &pd, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
	if (rc) {
		/* no route (a link down) is refused at once; anything else
		 * must come as a connection event */
		if (DAT_GET_TYPE(rc) != DAT_INVALID_ADDRESS)
			violation("conn %d: dat_ep_connect: %s", c, dat_err(rc));
		end_conn(c, true, 8);
	}
}

/* what each connection does now: connect, finish draining, a round */
static void tend(int c, double now)
{
	struct conn *k = &conns[c];

	switch (k->st) {
	case S_DRAIN:
		if (k->outstanding > 0) {
			if (!k->stuck && now - k->since > 20) {
				violation("conn %d: %d DTOs still not completed 20 s after its end "
					  "(busy slots %#x: sends 0-7, writes 8-11, read 12; the rest "
					  "receives; the life ended %s)", c, k->outstanding, k->busy,
					  ev_names[k->last_end]);
				k->stuck = true;
			}
			return;
		}
		k->busy = 0;
		k->st = S_IDLE;
		if (server) {
			if (k->pending)
				accept_now(c, k->pending, k->last_gen);
			return;
		}
		if (finishing && k->bye_sent && k->acked == k->tx) {
			k->st = S_DONE;
			return;
		}
		k->due = now + (k->failed ? 0.2 + 0.3 * rnd01() : 0.01 + 0.05 * rnd01());
		return;
	case S_IDLE:
		if (!server && now >= k->due)
			connect_now(c);
		return;
	case S_CONNECTING:
		/* the connect's timeout is 3 s, the peer timeout 3 s: a
		 * connection neither up nor ended 15 s on is stuck */
		if (!k->stuck && now - k->since > 15) {
			violation("conn %d life %u: %s 15 s ago, neither established nor ended", c,
				  k->gen, server ? "accepted" : "connected");
			k->stuck = true;
			dat_ep_disconnect(k->ep, DAT_CLOSE_ABRUPT_FLAG);
		}
		return;
	case S_UP:
		if (server) {
			/* a new request for a connection still up here: the
			 * client saw its end first; ours follows, or we end it */
			if (k->pending && now - k->pending_since > 15) {
				printf("# conn %d: ended for a new request\n", c);
				dat_ep_disconnect(k->ep, DAT_CLOSE_ABRUPT_FLAG);
				k->pending_since = now;
			}
			return;
		}
		if (finishing) {
			if (!k->bye_sent && k->acked == k->tx && k->busy == 0)
				k->bye_sent = post_msg(c, T_BYE, 0, 0, 0, 0);
			else if (k->bye_sent && k->acked == k->tx && k->busy == 0 && !k->disc_sent) {
				dat_ep_disconnect(k->ep, DAT_CLOSE_GRACEFUL_FLAG);
				k->disc_sent = true;
			}
			return;
		}
		if (now < k->due)
			return;
		k->due = now + (0.5 + rnd01()) * interval_ms / 1000.0;
		if (k->tx - k->acked < WIN)
			post_msg(c, T_DATA, 0, 0, 0, 0);
		if (k->tx - k->acked < WIN)
			post_write(c);
		post_read(c);
		return;
	default:
		return;
	}
}

static void poll_events(void)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	if (server)
		while (dat_evd_dequeue(cr_evd, &ev) == DAT_SUCCESS)
			on_cr(&ev);
	for (int g = 0; g < ngrp; g++)
		while (dat_evd_dequeue(conn_evd[g], &ev) == DAT_SUCCESS)
			on_conn_event(&ev);
	for (int g = 0; g < ngrp; g++) {
		int n = 0;

		/* even groups sleep for their completions, odd ones poll */
		if (g % 2 == 0) {
			if (dat_evd_wait(dto_evd[g], 500, 1, &ev, &nmore) != DAT_SUCCESS)
				continue;
			on_dto(&ev);
		}
		while (n++ < 64 && dat_evd_dequeue(dto_evd[g], &ev) == DAT_SUCCESS)
			on_dto(&ev);
	}
}

static void setup(void)
{
	DAT_RETURN rc;

	ngrp = (nconn + gsize - 1) / gsize;
	conns = calloc((size_t)nconn, sizeof(*conns));
	bufs = calloc((size_t)nconn, CBUF);
	dto_evd = calloc((size_t)ngrp, sizeof(*dto_evd));
	conn_evd = calloc((size_t)ngrp, sizeof(*conn_evd));
	lmr = calloc((size_t)ngrp, sizeof(*lmr));
	lmr_ctx = calloc((size_t)ngrp, sizeof(*lmr_ctx));
	if (!conns || !bufs || !dto_evd || !conn_evd || !lmr || !lmr_ctx)
		die("calloc", DAT_INSUFFICIENT_RESOURCES);
	if ((rc = dat_pz_create(ia, &pz)))
		die("dat_pz_create", rc);
	for (int g = 0; g < ngrp; g++) {
		int n = (g + 1) * gsize > nconn ? nconn - g * gsize : gsize;
		DAT_RMR_CONTEXT rctx;
		DAT_VLEN rlen;
		DAT_VADDR raddr;

		if ((rc = dat_evd_create(ia, n * (NRECV + NSEND + WIN + 2) + 16, DAT_HANDLE_NULL,
					 DAT_EVD_DTO_FLAG, &dto_evd[g])))
			die("dat_evd_create(dto)", rc);
		if ((rc = dat_evd_create(ia, 4 * n + 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
					 &conn_evd[g])))
			die("dat_evd_create(conn)", rc);
		if ((rc = dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL,
					 (DAT_REGION_DESCRIPTION){ .for_va = rbuf(g * gsize, 0) },
					 (DAT_VLEN)n * CBUF, pz, DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA,
					 &lmr[g], &lmr_ctx[g], &rctx, &rlen, &raddr)))
			die("dat_lmr_create", rc);
		lmr_live++;
	}
	if (server) {
		if ((rc = dat_evd_create(ia, nconn + 16, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd)))
			die("dat_evd_create(cr)", rc);
		if ((rc = dat_psp_create(ia, (DAT_CONN_QUAL)port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp)))
			die("dat_psp_create", rc);
	}
	for (int c = 0; c < nconn; c++)
		conns[c].due = mono_s() + rnd01() * 0.5;
	finishing = false;
}

static void check_rc(const char *what, DAT_RETURN rc)
{
	if (rc)
		violation("teardown: %s: %s", what, dat_err(rc));
}

static void teardown(void)
{
	DAT_EVENT ev;

	for (int c = 0; c < nconn; c++) {
		if (conns[c].ep)
			check_rc("dat_ep_free", dat_ep_free(conns[c].ep));
		if (conns[c].rmr) {
			check_rc("dat_rmr_free", dat_rmr_free(conns[c].rmr));
			rmr_live--;
		}
		if (conns[c].pending)
			check_rc("dat_cr_reject", dat_cr_reject(conns[c].pending, 0, NULL));
	}
	if (psp)
		check_rc("dat_psp_free", dat_psp_free(psp));
	psp = DAT_HANDLE_NULL;
	if (cr_evd) {
		while (dat_evd_dequeue(cr_evd, &ev) == DAT_SUCCESS)
			if (ev.event_number == DAT_CONNECTION_REQUEST_EVENT)
				dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, 0, NULL);
		check_rc("dat_evd_free(cr)", dat_evd_free(cr_evd));
	}
	cr_evd = DAT_HANDLE_NULL;
	for (int g = 0; g < ngrp; g++) {
		while (dat_evd_dequeue(dto_evd[g], &ev) == DAT_SUCCESS)
			;
		while (dat_evd_dequeue(conn_evd[g], &ev) == DAT_SUCCESS)
			;
		check_rc("dat_evd_free(dto)", dat_evd_free(dto_evd[g]));
		check_rc("dat_evd_free(conn)", dat_evd_free(conn_evd[g]));
		if (dat_lmr_free(lmr[g]) == DAT_SUCCESS)
			lmr_live--;
		else
			violation("teardown: dat_lmr_free failed");
	}
	check_rc("dat_pz_free", dat_pz_free(pz));
	free(conns);
	free(bufs);
	free(dto_evd);
	free(conn_evd);
	free(lmr);
	free(lmr_ctx);
}

/* a phase: secs of traffic (client), then every connection says BYE and
 * ends; false if it did not end in time */
static bool run_phase(int secs, int disc_s, double limit_s)
{
	double now = mono_s(), stop = now + secs, limit = now + limit_s;
	double next_disc = now + disc_s * (0.5 + rnd01()), next_mem = now + 30;

	printf("phase %d %" PRIu64 "\n", phase, wall_ms());
	for (;;) {
		int done = 0, byes = 0;

		poll_events();
		now = mono_s();
		if (now >= next_mem) {	/* the heap's course, for a leak's shape */
			printf("mem %" PRIu64 " heap_kb %ld made %" PRIu64 "\n", wall_ms(), heap_kb(),
			       made);
			next_mem = now + 30;
		}
		if (!server && !finishing && now >= stop) {
			finishing = true;
			printf("finishing %" PRIu64 "\n", wall_ms());
		}
		if (!server && !finishing && disc_s > 0 && now >= next_disc) {
			int n = 1 + (int)(rnd() % (uint64_t)(nconn / 16 + 1));

			for (int i = 0; i < n; i++) {
				int c = (int)(rnd() % (uint64_t)nconn);

				if (conns[c].st != S_UP)
					continue;
				dat_ep_disconnect(conns[c].ep, rnd() & 1 ? DAT_CLOSE_ABRUPT_FLAG :
						  DAT_CLOSE_GRACEFUL_FLAG);
				selfdisc++;
			}
			next_disc = now + disc_s * (0.5 + rnd01());
		}
		for (int c = 0; c < nconn; c++) {
			tend(c, now);
			done += conns[c].st == S_DONE;
			byes += conns[c].st == S_IDLE && conns[c].bye && !conns[c].pending;
		}
		if (!server && done == nconn)
			return true;
		if (server && byes == nconn)
			return true;
		if (now > limit) {
			int st[5] = { 0 };

			for (int c = 0; c < nconn; c++)
				st[conns[c].st]++;
			violation("phase %d did not end in time: idle %d connecting %d up %d "
				  "draining %d done %d", phase, st[0], st[1], st[2], st[3], st[4]);
			return false;
		}
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: soak -n IA (-s | -c HOST) [-p PORT] [-C CONNS] [-G PER_GROUP] "
		"[-i ROUND_MS] [-t SECONDS] [-w WARMUP_S] [-D DISCONNECT_S] [-S SEED] [-R RSS_KB]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	char *ia_name = NULL;
	int secs = 60, warm = 3, disc_s = 5, opt, fds0, fds_base, fds_end, fds_closed;
	long rss_bound = 8192, rss_base, rss_end;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_RETURN rc;
	bool ok;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "n:sc:p:C:G:i:t:w:D:S:R:")) != -1) {
		switch (opt) {
		case 'n': ia_name = optarg; break;
		case 's': server = true; break;
		case 'c': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'C': nconn = atoi(optarg); break;
		case 'G': gsize = atoi(optarg); break;
		case 'i': interval_ms = atoi(optarg); break;
		case 't': secs = atoi(optarg); break;
		case 'w': warm = atoi(optarg); break;
		case 'D': disc_s = atoi(optarg); break;
		case 'S': rng = strtoull(optarg, NULL, 0) * 2654435761u + 1; break;
		case 'R': rss_bound = atol(optarg); break;
		default: usage();
		}
	}
	if (!ia_name || server == !!host || nconn < 1 || nconn > MAXC || gsize < 1 || secs < 1 ||
	    interval_ms < 1 || warm < 1)
		usage();
	if (server)
		rng ^= 0x5eed;
	fds0 = open_fds();
	if ((rc = dat_ia_open(ia_name, 64, &async, &ia)))
		die("dat_ia_open", rc);

	/* the warm-up: every object and path once, then the baseline */
	phase = 0;
	setup();
	ok = run_phase(warm, 0, server ? warm + secs + 180 : warm + 60);
	teardown();
	fds_base = open_fds();
	rss_base = rss_kb();
	printf("baseline fds %d rss_kb %ld heap_kb %ld\n", fds_base, rss_base, heap_kb());

	phase = 1;
	if (ok) {
		setup();
		ok = run_phase(secs, disc_s, server ? secs + 180 : secs + 90);
		teardown();
	}
	fds_end = open_fds();
	rss_end = rss_kb();
	printf("final fds %d rss_kb %ld heap_kb %ld lmr %d rmr %d\n", fds_end, rss_end, heap_kb(),
	       lmr_live, rmr_live);
	if (ok && fds_end != fds_base)
		violation("open files: %d after the soak, %d before", fds_end, fds_base);
	if (ok && rss_end > rss_base + rss_bound)
		violation("RSS grew by %ld KiB (bound %ld)", rss_end - rss_base, rss_bound);
	if (lmr_live || rmr_live)
		violation("%d LMRs and %d RMRs left", lmr_live, rmr_live);
	if ((rc = dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG))) {
		violation("dat_ia_close(graceful): %s", dat_err(rc));
		dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	}
	fds_closed = open_fds();
	printf("closed fds %d (before the IA opened: %d)\n", fds_closed, fds0);

	printf("made %" PRIu64 "\n", made);
	printf("ended");
	for (int e = 1; e < 8; e++)
		printf(" %s %" PRIu64, ev_names[e], ev_count[e]);
	printf("\n");
	printf("verified send %" PRIu64 " %" PRIu64 "\n", v_n[K_SEND], v_bytes[K_SEND]);
	printf("verified write %" PRIu64 " %" PRIu64 "\n", v_n[K_WRITE], v_bytes[K_WRITE]);
	printf("verified read %" PRIu64 " %" PRIu64 "\n", v_n[K_READ], v_bytes[K_READ]);
	printf("dto");	/* completions by DAT_DTO_COMPLETION_STATUS */
	for (int i = 0; i < 16; i++)
		if (by_status[i])
			printf(" %s %" PRIu64, i < 12 ? status_names[i] : "other", by_status[i]);
	printf("\n");
	printf("faults selfdisc %" PRIu64 " resets %" PRIu64 " recreated %" PRIu64
	       " stale_requests %" PRIu64 " refused_posts %" PRIu64 "\n",
	       selfdisc, resets, recreated, stale_cr, post_fail);
	printf("violations %" PRIu64 "\n", violations);
	printf("end %" PRIu64 " %s\n", wall_ms(), violations ? "fail" : "ok");
	return violations ? 1 : 0;
}
