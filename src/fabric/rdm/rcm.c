/*
 * The RDM backend's connection manager over TCP: the handshake of
 * docs/rdm.md (REQ, REP or REJ, RTU; DREQ, DREP), one non-blocking socket
 * per DAT connection kept as its control channel and armed with the
 * kernel's keepalives (keepalive.c), all in one epoll set whose fd the
 * caller sleeps on.  A peer's bytes go through dfi_rdm_decode before
 * anything reads them; a message that breaks the protocol ends its
 * connection with a log line that says how.  Sockets are read in the
 * order the kernel finds them ready, not the order a peer wrote them: a
 * connection's end waits for the peer's REPs and RTUs sent before it
 * (docs/rdm.md, "Order across connections").
 */
#include "rcm.h"
#include "fabric/keepalive.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum sock_kind { K_LIS, K_CONN, K_TIMER, K_KICK };

/* Every fd in the epoll set starts with one: its epoll data points here. */
struct sock {
	enum sock_kind kind;
	int fd;
};

enum conn_state {
	C_CONNECTING,		/* connecting side: the TCP connect in flight */
	C_WAIT_REP,		/* connecting side: REQ sent */
	C_REP_TAKEN,		/* connecting side: REP given, RTU not sent yet */
	C_WAIT_REQ,		/* accepting side: accepted, REQ not whole yet */
	C_DELIVERED,		/* accepting side: CONNREQ given, not answered */
	C_WAIT_RTU,		/* accepting side: REP sent */
	C_ESTABLISHED,
	C_DISC_SENT,		/* DREQ sent */
	C_BYE_WAIT,		/* DREQ or DREP came: its DISCONNECTED waits (end_ready) */
	C_ENDED,		/* its last event given; the socket is closed */
};

/* A peer IA, by its instance: the REPs and RTUs (the messages that make an
 * ESTABLISHED) sent to it and taken from it.  Kept until the manager
 * closes, so that both counts only grow: 32 bytes a peer IA. */
struct rcm_peer {
	uint64_t ia;
	uint32_t est_sent, est_got;
	struct rcm_peer *next;
};

#define PEER_BUCKETS 256

struct dfi_rcm_conn {
	struct sock s;
	struct dfi_rcm *cm;
	struct dfi_rcm_lis *lis;	/* accepting side, until answered */
	struct dfi_rcm_conn *next, *prev;
	enum conn_state state;
	void *ctx;
	bool dead;			/* DELIVERED: the requester's socket ended */
	/* dfi_rcm_want_goodbye: a DREQ's DISCONNECTED waits for the peer's
	 * goodbye */
	bool bye_wanted;
	/* BYE_WAIT: whether it waits for the goodbye (a DREQ's) beside the
	 * peer's est_need REPs and RTUs; looked for until bye_until_ns,
	 * bye_poll_ns apart */
	bool end_bye;
	uint32_t est_need;
	uint64_t bye_until_ns, bye_poll_ns;
	struct rcm_peer *pp;		/* its peer IA, once known (REQ, REP) */
	uint64_t deadline_ns;		/* WAIT_REQ, WAIT_RTU, BYE_WAIT: 0 none */
	struct dfi_rcm_end self, peer;
	struct sockaddr_in from;
	struct dfi_rdm_msg req;		/* DELIVERED: the request, for its event */
	/* rx holds whole messages left for when the event queue has room
	 * (on_readable): the socket may have nothing more to wake us for */
	bool rx_held;
	size_t rx_len, tx_len, tx_off;
	uint8_t rx[DFI_RDM_MSG_MAX];
	uint8_t tx[2 * DFI_RDM_MSG_MAX];
};

struct dfi_rcm_lis {
	struct sock s;
	struct dfi_rcm *cm;
	void *ctx;
	uint16_t port;
	bool starved;		/* out of descriptors, said so (until an accept works) */
};

/* The events made by one step of I/O, handed out one per read. */
#define EVQ_LEN 64

struct dfi_rcm {
	int epfd;
	struct sock timer;
	struct sock kick;		/* an eventfd: events are queued */
	struct sockaddr_in self;
	unsigned timeout_ms;
	uint64_t instance;
	struct dfi_rcm_conn conns;	/* list head: every connection */
	int n_held;			/* connections with rx_held */
	int n_bye_wait;			/* connections in C_BYE_WAIT */
	struct rcm_peer *peers[PEER_BUCKETS];
	/* the emulated atomics this IA serves (dfi_rcm_serve_atomics) */
	dfi_rcm_atomic_fn atomic_fn;
	void *atomic_arg;
	/* whether a connection's goodbye has come (dfi_rcm_serve_goodbye) */
	dfi_rcm_bye_fn bye_fn;
	void *bye_arg;
	unsigned evq_head, evq_n;
	struct dfi_rcm_event evq[EVQ_LEN];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *ip(const struct sockaddr_in *a, char buf[INET_ADDRSTRLEN + 8])
{
	char s[INET_ADDRSTRLEN] = "?";

	inet_ntop(AF_INET, &a->sin_addr, s, sizeof(s));
	snprintf(buf, INET_ADDRSTRLEN + 8, "%s:%u", s, ntohs(a->sin_port));
	return buf;
}

/* The eventfd that keeps the caller's fd readable while events are queued
 * (and the timerfd's expirations): a full counter or an empty one is not
 * an error. */
static void kick(struct dfi_rcm *cm)
{
	uint64_t one = 1;

	if (write(cm->kick.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		dfi_err(DFI_SS_CM, "RDM connection manager: eventfd write: %m");
}

static void fd_drain(int fd)
{
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		dfi_err(DFI_SS_CM, "RDM connection manager: reading fd %d: %m", fd);
}

/* ------------------------------------------------------------------ events */

static struct dfi_rcm_event *ev_new(struct dfi_rcm *cm, enum dfi_rcm_ev_type t,
				    struct dfi_rcm_conn *c)
{
	struct dfi_rcm_event *e;

	if (cm->evq_n == EVQ_LEN)
		return NULL;	/* never: every step checks has_room first */
	if (!cm->evq_n)	/* an API call's event wakes the caller's sleep too */
		kick(cm);
	e = &cm->evq[(cm->evq_head + cm->evq_n++) % EVQ_LEN];
	memset(e, 0, offsetof(struct dfi_rcm_event, pdata));
	e->type = t;
	e->conn = c;
	e->ctx = c->ctx;
	return e;
}

/* Room for n more events (a step that makes more waits for the next read). */
static bool has_room(const struct dfi_rcm *cm, unsigned n)
{
	return cm->evq_n + n <= EVQ_LEN;
}

/* ------------------------------------------------------------------ timers */

static void timer_arm(struct dfi_rcm *cm)
{
	struct itimerspec its;
	uint64_t first = 0, now = now_ns();

	memset(&its, 0, sizeof(its));
	for (struct dfi_rcm_conn *c = cm->conns.next; c != &cm->conns; c = c->next)
		if (c->deadline_ns && (!first || c->deadline_ns < first))
			first = c->deadline_ns;
	if (first) {
		uint64_t in = first > now ? first - now : 1;

		its.it_value.tv_sec = (time_t)(in / 1000000000u);
		its.it_value.tv_nsec = (long)(in % 1000000000u);
	}
	timerfd_settime(cm->timer.fd, 0, &its, NULL);
}

static void set_deadline(struct dfi_rcm_conn *c, bool on)
{
	c->deadline_ns = on && c->cm->timeout_ms ?
		now_ns() + (uint64_t)c->cm->timeout_ms * 1000000u : 0;
	timer_arm(c->cm);
}

/* ------------------------------------------------------------- connections */

static struct dfi_rcm_conn *conn_new(struct dfi_rcm *cm, int fd)
{
	struct dfi_rcm_conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev = { .events = EPOLLIN };

	if (!c)
		return NULL;
	c->s.kind = K_CONN;
	c->s.fd = fd;
	c->cm = cm;
	ev.data.ptr = &c->s;
	if (epoll_ctl(cm->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		free(c);
		return NULL;
	}
	c->next = cm->conns.next;
	c->prev = &cm->conns;
	cm->conns.next->prev = c;
	cm->conns.next = c;
	return c;
}

/* The socket goes (the object stays, for its owner to free). */
static void conn_close_sock(struct dfi_rcm_conn *c)
{
	if (c->rx_held) {	/* what it held is not for anyone now */
		c->rx_held = false;
		c->cm->n_held--;
	}
	if (c->s.fd >= 0) {
		epoll_ctl(c->cm->epfd, EPOLL_CTL_DEL, c->s.fd, NULL);
		close(c->s.fd);
		c->s.fd = -1;
	}
	c->deadline_ns = 0;
}

static void leave_bye_wait(struct dfi_rcm_conn *c)
{
	if (c->state == C_BYE_WAIT)
		c->cm->n_bye_wait--;
}

static void conn_destroy(struct dfi_rcm_conn *c)
{
	struct dfi_rcm *cm = c->cm;

	leave_bye_wait(c);
	conn_close_sock(c);
	c->prev->next = c->next;
	c->next->prev = c->prev;
	/* its queued events go with it */
	for (unsigned i = 0, n = cm->evq_n; i < n; i++) {
		struct dfi_rcm_event *e = &cm->evq[(cm->evq_head + i) % EVQ_LEN];

		if (e->conn == c)
			e->conn = NULL;
	}
	free(c);
}

/* The connection ends with event t (BROKEN: err): its last. */
static void conn_end(struct dfi_rcm_conn *c, enum dfi_rcm_ev_type t, int err)
{
	struct dfi_rcm_event *e;

	leave_bye_wait(c);
	conn_close_sock(c);
	c->state = C_ENDED;
	e = ev_new(c->cm, t, c);
	if (e)
		e->err = err;
}

/* ------------------------------------------------- order across connections */

/* The peer IA of instance ia (made at its first REQ or REP): NULL without
 * memory, and then its connections' ends wait for nothing. */
static struct rcm_peer *peer_get(struct dfi_rcm *cm, uint64_t ia)
{
	struct rcm_peer **b = &cm->peers[ia % PEER_BUCKETS], *p;

	for (p = *b; p; p = p->next)
		if (p->ia == ia)
			return p;
	if ((p = calloc(1, sizeof(*p)))) {
		p->ia = ia;
		p->next = *b;
		*b = p;
	}
	return p;
}

/* Whether d may still take a REP or an RTU from c's peer: the one it
 * awaits, on a socket still open.  A connecting side knows the peer's
 * instance only from its REP, so its address stands for it. */
static bool awaits_est(const struct dfi_rcm_conn *d, const struct dfi_rcm_conn *c)
{
	if (d == c || d->s.fd < 0)
		return false;
	switch (d->state) {
	case C_WAIT_RTU:
		return d->pp == c->pp;
	case C_CONNECTING:
	case C_WAIT_REP:
		return d->from.sin_addr.s_addr == c->from.sin_addr.s_addr;
	default:
		return false;
	}
}

/* Whether the peer's REPs and RTUs sent before its DREQ or DREP on c have
 * all been taken, or those missing can no longer come. */
static bool order_ok(const struct dfi_rcm_conn *c)
{
	if (!c->pp || (int32_t)(c->pp->est_got - c->est_need) >= 0)
		return true;
	for (const struct dfi_rcm_conn *d = c->cm->conns.next; d != &c->cm->conns; d = d->next)
		if (awaits_est(d, c))
			return false;
	return true;
}

/* The goodbye (a DREQ's): whether it came over the fabric, behind the
 * peer's data. */
static bool bye_came(struct dfi_rcm_conn *c)
{
	return !c->bye_wanted || !c->cm->bye_fn || c->cm->bye_fn(c->cm->bye_arg, c->ctx);
}

static bool end_ready(struct dfi_rcm_conn *c)
{
	return (!c->end_bye || bye_came(c)) && order_ok(c);
}

/* The peer's DREQ (bye) or DREP came, with its count of REPs and RTUs
 * (need): DISCONNECTED once end_ready or DFI_RCM_BYE_MS passed, looked for
 * at once, then from 100 us apart, doubling to 20 ms, and whenever one of
 * the peer's REPs or RTUs is taken.  The socket has no more to say. */
#define BYE_POLL_FIRST_NS	100000u
#define BYE_POLL_MAX_NS		20000000u

static void end_wait(struct dfi_rcm_conn *c, bool bye, uint32_t need)
{
	uint64_t now;

	c->end_bye = bye;
	c->est_need = need;
	if (end_ready(c)) {
		conn_end(c, DFI_RCM_DISCONNECTED, 0);
		return;
	}
	conn_close_sock(c);
	now = now_ns();
	c->state = C_BYE_WAIT;
	c->cm->n_bye_wait++;
	c->bye_until_ns = now + (uint64_t)DFI_RCM_BYE_MS * 1000000u;
	c->bye_poll_ns = BYE_POLL_FIRST_NS;
	c->deadline_ns = now + c->bye_poll_ns;
	timer_arm(c->cm);
}

/* on_timer: another look. */
static void bye_poll(struct dfi_rcm_conn *c, uint64_t now)
{
	if (end_ready(c)) {
		conn_end(c, DFI_RCM_DISCONNECTED, 0);
	} else if (now >= c->bye_until_ns) {
		dfi_dbg(DFI_SS_CM, "RDM connection manager: connection %u:%u ends without %s "
			"after %u ms", c->peer.id, c->peer.gen,
			order_ok(c) ? "the peer's goodbye" : "the peer's earlier REPs and RTUs",
			DFI_RCM_BYE_MS);
		conn_end(c, DFI_RCM_DISCONNECTED, 0);
	} else {
		if (c->bye_poll_ns < BYE_POLL_MAX_NS)
			c->bye_poll_ns *= 2;
		c->deadline_ns = now + c->bye_poll_ns;
	}
}

/* One of p's REPs or RTUs was taken (its ESTABLISHED queued): the ends
 * of p's connections that waited for it follow it, as far as the event
 * queue has room (the timer finds the others). */
static void est_taken(struct dfi_rcm *cm, struct rcm_peer *p)
{
	if (!p)
		return;
	p->est_got++;
	for (struct dfi_rcm_conn *c = cm->conns.next; cm->n_bye_wait && c != &cm->conns;
	     c = c->next) {
		if (!has_room(cm, 2))
			return;
		if (c->state == C_BYE_WAIT && c->pp == p && end_ready(c))
			conn_end(c, DFI_RCM_DISCONNECTED, 0);
	}
}

static void want_out(struct dfi_rcm_conn *c, bool on)
{
	struct epoll_event ev = { .events = EPOLLIN | (on ? EPOLLOUT : 0u), .data.ptr = &c->s };

	epoll_ctl(c->cm->epfd, EPOLL_CTL_MOD, c->s.fd, &ev);
}

/* Write what is queued; -errno if the socket failed. */
static int flush_tx(struct dfi_rcm_conn *c)
{
	while (c->tx_off < c->tx_len) {
		ssize_t n = send(c->s.fd, c->tx + c->tx_off, c->tx_len - c->tx_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			want_out(c, true);
			return 0;
		}
		if (n < 0)
			return -errno;
		c->tx_off += (size_t)n;
	}
	c->tx_off = c->tx_len = 0;
	return 0;
}

static int send_msg(struct dfi_rcm_conn *c, const struct dfi_rdm_msg *m)
{
	ssize_t n;

	if (c->tx_off) {	/* compact what is left of the last one */
		memmove(c->tx, c->tx + c->tx_off, c->tx_len - c->tx_off);
		c->tx_len -= c->tx_off;
		c->tx_off = 0;
	}
	n = dfi_rdm_encode(m, c->tx + c->tx_len, sizeof(c->tx) - c->tx_len);
	if (n < 0)
		return (int)n;
	c->tx_len += (size_t)n;
	return flush_tx(c);
}

static void fill_end(struct dfi_rdm_msg *m, const struct dfi_rcm_end *e)
{
	m->src_id = e->id;
	m->src_gen = e->gen;
	m->flags = m->type == DFI_RDM_REQ && e->ud ? DFI_RDM_REQ_UD : 0;
	m->addr_len = e->addr_len;
	memcpy(m->addr, e->addr, e->addr_len);
	m->bye_addr = e->bye_addr;
	m->bye_key = e->bye_key;
}

static void take_end(struct dfi_rcm_end *e, const struct dfi_rdm_msg *m)
{
	e->id = m->src_id;
	e->gen = m->src_gen;
	e->ud = m->flags & DFI_RDM_REQ_UD;
	e->addr_len = m->addr_len;
	memcpy(e->addr, m->addr, m->addr_len);
	e->bye_addr = m->bye_addr;
	e->bye_key = m->bye_key;
}

/* RTU, DREQ, DREP: the two ends' ids, and a DREQ's or DREP's count of
 * the REPs and RTUs sent to the peer's IA before it. */
static int send_ids(struct dfi_rcm_conn *c, enum dfi_rdm_type type)
{
	struct dfi_rdm_msg m;
	int rc;

	memset(&m, 0, sizeof(m));
	m.type = type;
	m.dst_id = c->peer.id;
	m.dst_gen = c->peer.gen;
	m.src_id = c->self.id;
	m.src_gen = c->self.gen;
	if (type != DFI_RDM_RTU && c->pp)
		m.est = c->pp->est_sent;
	rc = send_msg(c, &m);
	if (!rc && type == DFI_RDM_RTU && c->pp)
		c->pp->est_sent++;
	return rc;
}

static bool for_me(const struct dfi_rcm_conn *c, const struct dfi_rdm_msg *m)
{
	return m->dst_id == c->self.id && m->dst_gen == c->self.gen;
}

/* A peer that broke the protocol: its connection ends, or, a request not
 * yet delivered, is dropped without a word to the consumer. */
static void protocol_error(struct dfi_rcm_conn *c, const char *what)
{
	char a[INET_ADDRSTRLEN + 8];

	dfi_warn(DFI_SS_CM, "RDM connection manager: %s from %s: connection dropped", what,
		 ip(&c->from, a));
	if (c->state == C_WAIT_REQ)
		conn_destroy(c);
	else
		conn_end(c, DFI_RCM_BROKEN, EPROTO);
}

/* A peer's emulated atomic, applied now and answered (docs/rdm.md): the
 * IA's own serving function checks the key, the range and the right. */
static bool on_atomic(struct dfi_rcm_conn *c, const struct dfi_rdm_msg *m)
{
	struct dfi_rcm *cm = c->cm;
	struct dfi_rdm_msg r;

	memset(&r, 0, sizeof(r));
	r.type = DFI_RDM_ATOMICREP;
	r.dst_id = c->peer.id;
	r.dst_gen = c->peer.gen;
	r.id = m->id;
	r.status = cm->atomic_fn ?
		   cm->atomic_fn(cm->atomic_arg, m->op, m->addr64, m->rmr, m->operand, m->compare,
				 &r.value) :
		   ENOSYS;
	if (send_msg(c, &r)) {
		/* the peer reads none of its answers: it would wait for ever */
		conn_end(c, DFI_RCM_BROKEN, ECONNRESET);
		return false;
	}
	return true;
}

/* One whole message on c.  false: c is gone or ended. */
static bool on_msg(struct dfi_rcm_conn *c, const struct dfi_rdm_msg *m)
{
	struct dfi_rcm_event *e;

	switch (c->state) {
	case C_WAIT_REQ:
		if (m->type != DFI_RDM_REQ)
			break;
		c->req = *m;
		take_end(&c->peer, m);
		c->pp = peer_get(c->cm, m->ia);
		c->state = C_DELIVERED;
		set_deadline(c, false);
		e = ev_new(c->cm, DFI_RCM_CONNREQ, c);
		if (!e)
			return false;
		e->ctx = c->lis->ctx;
		e->peer = c->from;
		e->qual = m->qual;
		e->ia = m->ia;
		e->remote = c->peer;
		e->plen = m->plen;
		memcpy(e->pdata, m->pdata, m->plen);
		return true;
	case C_WAIT_REP:
		if (m->type == DFI_RDM_REJ && for_me(c, m)) {
			e = ev_new(c->cm, DFI_RCM_REJECTED, c);
			conn_close_sock(c);
			c->state = C_ENDED;
			if (e) {
				e->reason = m->reason;
				e->plen = m->plen;
				memcpy(e->pdata, m->pdata, m->plen);
			}
			return false;
		}
		if (m->type != DFI_RDM_REP || !for_me(c, m))
			break;
		take_end(&c->peer, m);
		c->pp = peer_get(c->cm, m->ia);
		c->state = C_REP_TAKEN;		/* RTU at dfi_rcm_confirm */
		e = ev_new(c->cm, DFI_RCM_ESTABLISHED, c);
		if (e) {
			e->ia = m->ia;
			e->remote = c->peer;
			e->plen = m->plen;
			memcpy(e->pdata, m->pdata, m->plen);
		}
		est_taken(c->cm, c->pp);
		return true;
	case C_WAIT_RTU:
		if (m->type != DFI_RDM_RTU || !for_me(c, m) || m->src_id != c->peer.id ||
		    m->src_gen != c->peer.gen)
			break;
		c->state = C_ESTABLISHED;
		set_deadline(c, false);
		ev_new(c->cm, DFI_RCM_ESTABLISHED, c);
		est_taken(c->cm, c->pp);
		return true;
	case C_ESTABLISHED:
	case C_DISC_SENT:
		if (!for_me(c, m))
			break;
		if (m->type == DFI_RDM_DREQ) {
			(void)send_ids(c, DFI_RDM_DREP);	/* the peer ends either way */
			end_wait(c, true, m->est);
			return false;
		}
		if (m->type == DFI_RDM_DREP && c->state == C_DISC_SENT) {
			end_wait(c, false, m->est);
			return false;
		}
		if (m->type == DFI_RDM_ATOMIC)
			return on_atomic(c, m);
		if (m->type == DFI_RDM_ATOMICREP) {
			e = ev_new(c->cm, DFI_RCM_ATOMICREP, c);
			if (e) {
				e->id = m->id;
				e->err = (int)m->status;
				e->value = m->value;
			}
			return true;
		}
		break;
	default:
		break;
	}
	{
		char what[64];

		snprintf(what, sizeof(what), "unexpected %s", dfi_rdm_type_name(m->type));
		protocol_error(c, what);
	}
	return false;
}

/* The socket ended (EOF or an error): how the connection ends. */
static void on_sock_end(struct dfi_rcm_conn *c, int err)
{
	switch (c->state) {
	case C_WAIT_REQ:
		conn_destroy(c);	/* nobody knows of it */
		return;
	case C_DELIVERED:
		conn_close_sock(c);	/* the consumer's answer finds it gone */
		c->dead = true;
		return;
	case C_CONNECTING:
	case C_WAIT_REP:
	case C_REP_TAKEN:
	case C_WAIT_RTU:
		conn_end(c, DFI_RCM_BROKEN, err ? err : ECONNRESET);
		return;
	case C_BYE_WAIT:
		return;		/* closed already */
	case C_ESTABLISHED:
	case C_DISC_SENT:
		/* the kernel gave up on a silent peer, or the peer's process
		 * ended (its kernel closed the socket): IB's retry error and
		 * its CM's disconnect of a dead process */
		if (err == ETIMEDOUT || dfi_sock_aborted(c->s.fd))
			conn_end(c, DFI_RCM_BROKEN, ETIMEDOUT);
		else
			conn_end(c, DFI_RCM_DISCONNECTED, 0);
		return;
	case C_ENDED:
		return;
	}
}

static void held(struct dfi_rcm_conn *c, bool on)
{
	if (on && c->s.fd < 0)
		on = false;	/* closed: nothing of it is read any more */
	if (c->rx_held != on)
		c->cm->n_held += on ? 1 : -1;
	c->rx_held = on;
}

/* The whole messages in c->rx.  false: c is gone or ended, or its next
 * message waits for room in the event queue (a peer's stream of atomic
 * answers can outrun the consumer: none is dropped, rx_held). */
static bool on_rx(struct dfi_rcm_conn *c)
{
	if (c->s.fd < 0)
		return false;	/* ended: its socket is closed */
	for (;;) {
		struct dfi_rdm_msg m;
		const char *why;
		ssize_t used;

		if (c->cm->evq_n + 2 >= EVQ_LEN) {	/* room for its end too */
			held(c, c->rx_len > 0);
			return false;
		}
		used = dfi_rdm_decode(c->rx, c->rx_len, &m, &why);
		if (used < 0) {
			held(c, false);
			protocol_error(c, why);
			return false;
		}
		if (used == 0) {
			held(c, false);
			return true;
		}
		memmove(c->rx, c->rx + used, c->rx_len - (size_t)used);
		c->rx_len -= (size_t)used;
		if (!on_msg(c, &m))
			return false;	/* c may be freed: its close cleared rx_held */
	}
}

static void on_readable(struct dfi_rcm_conn *c)
{
	for (;;) {
		ssize_t n;

		if (!on_rx(c))
			return;
		/* a whole message always fits: a full buffer that is not one
		 * was refused by the decoder */
		n = recv(c->s.fd, c->rx + c->rx_len, sizeof(c->rx) - c->rx_len, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			on_sock_end(c, n < 0 ? errno : 0);
			return;
		}
		c->rx_len += (size_t)n;
	}
}

/*
 * A connect to a port of this host that nobody listens on meets itself
 * when the kernel picks that very port as the connecting socket's own (TCP
 * simultaneous open): a port from dat_psp_create_any is an ephemeral one,
 * freed, then connected to.  The REQ would come back as the peer's answer;
 * nobody listened, so it is a refusal (test_connect_meets_itself).
 */
static bool self_connected(int fd)
{
	struct sockaddr_in a, b;
	socklen_t la = sizeof(a), lb = sizeof(b);

	return getsockname(fd, (struct sockaddr *)&a, &la) == 0 &&
	       getpeername(fd, (struct sockaddr *)&b, &lb) == 0 && la == lb &&
	       a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
}

static void on_connected(struct dfi_rcm_conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->s.fd, SOL_SOCKET, SO_ERROR, &err, &len))
		err = ECONNRESET;
	else if (!err && self_connected(c->s.fd))
		err = ECONNREFUSED;
	if (!err) {
		c->state = C_WAIT_REP;
		want_out(c, false);
		err = flush_tx(c);	/* the REQ, queued at the connect */
		if (!err)
			return;
		err = -err;
	}
	conn_end(c, DFI_RCM_BROKEN, err ? err : ECONNRESET);
}

static void on_conn_io(struct dfi_rcm_conn *c, uint32_t events)
{
	if (c->state == C_CONNECTING) {
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
			on_connected(c);
		return;
	}
	if (events & EPOLLOUT) {
		int rc = flush_tx(c);

		if (rc) {
			on_sock_end(c, -rc);
			return;
		}
		if (!c->tx_len)
			want_out(c, false);
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		on_readable(c);
}

/* ---------------------------------------------------------------- listeners */

static void on_listener(struct dfi_rcm_lis *l)
{
	for (int i = 0; i < 64; i++) {	/* a burst at a time: others get a turn */
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		struct dfi_rcm_conn *c;
		int fd = accept4(l->s.fd, (struct sockaddr *)&from, &len,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			/* once: a polled IA comes back every few microseconds */
			if ((errno == EMFILE || errno == ENFILE) && !l->starved)
				dfi_warn(DFI_SS_CM, "RDM connection manager: port %u: no file "
					 "descriptor for a new request: %s; it waits until "
					 "there is one", l->port, strerror(errno));
			l->starved = errno == EMFILE || errno == ENFILE;
			return;
		}
		l->starved = false;
		c = conn_new(l->cm, fd);
		if (!c) {
			close(fd);
			continue;
		}
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
		if (l->cm->timeout_ms)
			(void)dfi_sock_keepalive_idle(fd, l->cm->timeout_ms);
		c->lis = l;
		c->from = from;
		c->state = C_WAIT_REQ;
		set_deadline(c, true);
	}
}

/* --------------------------------------------------------------------- API */

int dfi_rcm_open(const struct sockaddr_in *self, unsigned timeout_ms, struct dfi_rcm **out)
{
	struct dfi_rcm *cm = calloc(1, sizeof(*cm));
	struct epoll_event ev = { .events = EPOLLIN };
	int err;

	if (!cm)
		return -ENOMEM;
	cm->conns.next = cm->conns.prev = &cm->conns;
	cm->self = *self;
	cm->self.sin_port = 0;
	cm->timeout_ms = timeout_ms;
	if (getrandom(&cm->instance, sizeof(cm->instance), 0) != sizeof(cm->instance))
		cm->instance = now_ns() ^ ((uint64_t)getpid() << 32);
	cm->timer.kind = K_TIMER;
	cm->kick.kind = K_KICK;
	cm->epfd = epoll_create1(EPOLL_CLOEXEC);
	cm->timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	cm->kick.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cm->epfd < 0 || cm->timer.fd < 0 || cm->kick.fd < 0)
		goto err;
	ev.data.ptr = &cm->timer;
	if (epoll_ctl(cm->epfd, EPOLL_CTL_ADD, cm->timer.fd, &ev))
		goto err;
	ev.data.ptr = &cm->kick;
	if (epoll_ctl(cm->epfd, EPOLL_CTL_ADD, cm->kick.fd, &ev))
		goto err;
	*out = cm;
	return 0;
err:
	err = errno;
	if (cm->epfd >= 0)
		close(cm->epfd);
	if (cm->timer.fd >= 0)
		close(cm->timer.fd);
	if (cm->kick.fd >= 0)
		close(cm->kick.fd);
	free(cm);
	return -err;
}

void dfi_rcm_close(struct dfi_rcm *cm)
{
	if (!cm)
		return;
	while (cm->conns.next != &cm->conns)
		conn_destroy(cm->conns.next);
	for (int i = 0; i < PEER_BUCKETS; i++)
		while (cm->peers[i]) {
			struct rcm_peer *p = cm->peers[i];

			cm->peers[i] = p->next;
			free(p);
		}
	close(cm->timer.fd);
	close(cm->kick.fd);
	close(cm->epfd);
	free(cm);
}

int dfi_rcm_fd(const struct dfi_rcm *cm)
{
	return cm->epfd;
}

uint64_t dfi_rcm_instance(const struct dfi_rcm *cm)
{
	return cm->instance;
}

static void on_timer(struct dfi_rcm *cm)
{
	uint64_t now = now_ns();
	struct dfi_rcm_conn *c, *next;

	fd_drain(cm->timer.fd);
	for (c = cm->conns.next; c != &cm->conns; c = next) {
		next = c->next;
		if (!c->deadline_ns || c->deadline_ns > now)
			continue;
		/* each may end with an event: those past the queue's room
		 * are found again at once (their deadline passed) */
		if (!has_room(cm, 1))
			break;
		if (c->state == C_WAIT_REQ) {
			char a[INET_ADDRSTRLEN + 8];

			dfi_info(DFI_SS_CM, "RDM connection manager: no whole request from %s "
				 "in %u ms: dropped", ip(&c->from, a), cm->timeout_ms);
			conn_destroy(c);
		} else if (c->state == C_BYE_WAIT) {
			bye_poll(c, now);
		} else {
			conn_end(c, DFI_RCM_BROKEN, ETIMEDOUT);	/* no RTU */
		}
	}
	timer_arm(cm);
}

int dfi_rcm_read(struct dfi_rcm *cm, struct dfi_rcm_event *ev)
{
	/* bounded: a step that makes no event (a partial message, an
	 * accept) does not keep the caller here */
	for (int round = 0; round < 4; round++) {
		struct epoll_event evs[16];
		bool timer = false;
		int n;

		while (cm->evq_n) {
			struct dfi_rcm_event *e = &cm->evq[cm->evq_head];

			cm->evq_head = (cm->evq_head + 1) % EVQ_LEN;
			cm->evq_n--;
			if (!e->conn)
				continue;	/* its connection was freed */
			*ev = *e;
			return 1;
		}
		/* messages held for room, which the queue has now */
		for (struct dfi_rcm_conn *c = cm->conns.next, *next; cm->n_held && c != &cm->conns;
		     c = next) {
			next = c->next;		/* on_rx may free c */
			if (c->rx_held)
				on_rx(c);
		}
		if (cm->evq_n)
			continue;
		n = epoll_wait(cm->epfd, evs, 16, 0);
		if (n < 0)
			return errno == EINTR ? 0 : -errno;
		if (n == 0)
			return 0;
		for (int i = 0; i < n; i++) {
			struct sock *s = evs[i].data.ptr;

			switch (s->kind) {
			case K_TIMER:
				timer = true;	/* last: it frees connections */
				break;
			case K_KICK:
				fd_drain(s->fd);
				break;
			case K_LIS:
				on_listener((struct dfi_rcm_lis *)s);
				break;
			case K_CONN:
				/* frees only itself, whose entry is this one */
				on_conn_io((struct dfi_rcm_conn *)s, evs[i].events);
				break;
			}
		}
		if (timer)
			on_timer(cm);
	}
	/* more to do: stay readable for the caller's next look */
	kick(cm);
	return 0;
}

int dfi_rcm_listen(struct dfi_rcm *cm, uint16_t port, void *ctx, struct dfi_rcm_lis **out,
		   uint16_t *bound)
{
	struct dfi_rcm_lis *l = calloc(1, sizeof(*l));
	struct sockaddr_in a = cm->self;
	struct epoll_event ev = { .events = EPOLLIN };
	socklen_t len = sizeof(a);
	int err;

	if (!l)
		return -ENOMEM;
	l->s.kind = K_LIS;
	l->cm = cm;
	l->ctx = ctx;
	l->s.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->s.fd < 0) {
		err = errno;
		free(l);
		return -err;
	}
	(void)setsockopt(l->s.fd, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int));
	a.sin_port = htons(port);
	ev.data.ptr = &l->s;
	if (bind(l->s.fd, (struct sockaddr *)&a, sizeof(a)) || listen(l->s.fd, 1024) ||
	    getsockname(l->s.fd, (struct sockaddr *)&a, &len) ||
	    epoll_ctl(cm->epfd, EPOLL_CTL_ADD, l->s.fd, &ev)) {
		err = errno;
		close(l->s.fd);
		free(l);
		return -err;
	}
	l->port = ntohs(a.sin_port);
	if (bound)
		*bound = l->port;
	*out = l;
	return 0;
}

void dfi_rcm_unlisten(struct dfi_rcm_lis *l)
{
	struct dfi_rcm *cm;
	struct dfi_rcm_conn *c, *next;

	if (!l)
		return;
	cm = l->cm;
	epoll_ctl(cm->epfd, EPOLL_CTL_DEL, l->s.fd, NULL);
	close(l->s.fd);
	for (c = cm->conns.next; c != &cm->conns; c = next) {
		next = c->next;
		if (c->lis != l)
			continue;
		if (c->state == C_WAIT_REQ)
			conn_destroy(c);	/* half a request: nothing to answer */
		else
			c->lis = NULL;		/* delivered: the consumer's */
	}
	free(l);
}

static bool end_ok(const struct dfi_rcm_end *e)
{
	return e->addr_len > 0 && e->addr_len <= DFI_RDM_ADDR_MAX && e->gen <= 0x7fff;
}

int dfi_rcm_connect(struct dfi_rcm *cm, const struct sockaddr_in *dest, uint64_t qual,
		    const struct dfi_rcm_end *self, const void *pdata, size_t plen, void *ctx,
		    struct dfi_rcm_conn **out)
{
	struct sockaddr_in src = cm->self;
	struct dfi_rcm_conn *c;
	struct dfi_rdm_msg m;
	ssize_t n;
	int fd, err;

	if (plen > DFI_RDM_PDATA_MAX || (plen && !pdata) || !end_ok(self))
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	/* from the IA's address: its interface, as the MSG backend's */
	if (bind(fd, (struct sockaddr *)&src, sizeof(src)) ||
	    (cm->timeout_ms && dfi_sock_keepalive_idle(fd, cm->timeout_ms) < 0)) {
		err = errno;
		close(fd);
		return -err;
	}
	c = conn_new(cm, fd);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->ctx = ctx;
	c->self = *self;
	c->from = *dest;
	memset(&m, 0, sizeof(m));
	m.type = DFI_RDM_REQ;
	m.ia = cm->instance;
	m.qual = qual;
	fill_end(&m, self);
	m.plen = (uint16_t)plen;
	if (plen)
		memcpy(m.pdata, pdata, plen);
	n = dfi_rdm_encode(&m, c->tx, sizeof(c->tx));
	if (n < 0) {
		conn_destroy(c);
		return (int)n;
	}
	c->tx_len = (size_t)n;
	c->state = C_CONNECTING;
	if (connect(fd, (const struct sockaddr *)dest, sizeof(*dest)) && errno != EINPROGRESS) {
		err = errno;
		conn_destroy(c);
		return -err;
	}
	want_out(c, true);
	*out = c;
	return 0;
}

int dfi_rcm_accept(struct dfi_rcm_conn *c, const struct dfi_rcm_end *self, const void *pdata,
		   size_t plen, void *ctx)
{
	struct dfi_rdm_msg m;

	if (c->state != C_DELIVERED)
		return -EINVAL;
	if (plen > DFI_RDM_PDATA_MAX || (plen && !pdata) || !end_ok(self))
		return -EINVAL;
	c->ctx = ctx;
	c->self = *self;
	c->lis = NULL;
	if (c->dead) {	/* the requester went: the accept's outcome says so */
		conn_end(c, DFI_RCM_BROKEN, ECONNRESET);
		return 0;
	}
	memset(&m, 0, sizeof(m));
	m.type = DFI_RDM_REP;
	m.ia = c->cm->instance;
	fill_end(&m, self);
	m.dst_id = c->peer.id;
	m.dst_gen = c->peer.gen;
	m.plen = (uint16_t)plen;
	if (plen)
		memcpy(m.pdata, pdata, plen);
	c->state = C_WAIT_RTU;
	set_deadline(c, true);
	if (send_msg(c, &m))
		conn_end(c, DFI_RCM_BROKEN, ECONNRESET);
	else if (c->pp)
		c->pp->est_sent++;
	return 0;
}

int dfi_rcm_reject(struct dfi_rcm_conn *c, enum dfi_rdm_reason reason, const void *pdata,
		   size_t plen)
{
	struct dfi_rdm_msg m;

	if (c->state != C_DELIVERED)
		return -EINVAL;
	if (plen > DFI_RDM_PDATA_MAX || (plen && !pdata) || !reason ||
	    reason >= DFI_RDM_REJ_END)
		return -EINVAL;
	if (!c->dead) {
		memset(&m, 0, sizeof(m));
		m.type = DFI_RDM_REJ;
		m.dst_id = c->peer.id;
		m.dst_gen = c->peer.gen;
		m.reason = (uint8_t)reason;
		m.plen = (uint16_t)plen;
		if (plen)
			memcpy(m.pdata, pdata, plen);
		/* one small message on a fresh socket: the kernel takes it
		 * whole, and the close that follows sends it before its FIN */
		(void)send_msg(c, &m);
	}
	conn_destroy(c);
	return 0;
}

int dfi_rcm_confirm(struct dfi_rcm_conn *c)
{
	if (c->state != C_REP_TAKEN)
		return c->state == C_ESTABLISHED || c->state == C_DISC_SENT ? 0 : -ENOTCONN;
	if (send_ids(c, DFI_RDM_RTU)) {
		conn_end(c, DFI_RCM_BROKEN, ECONNRESET);
		return -ECONNRESET;
	}
	c->state = C_ESTABLISHED;
	return 0;
}

void dfi_rcm_serve_atomics(struct dfi_rcm *cm, dfi_rcm_atomic_fn fn, void *arg)
{
	cm->atomic_fn = fn;
	cm->atomic_arg = arg;
}

int dfi_rcm_atomic(struct dfi_rcm_conn *c, uint8_t op, uint64_t id, uint64_t addr,
		   uint32_t key, uint64_t operand, uint64_t compare)
{
	struct dfi_rdm_msg m;

	if (c->state != C_ESTABLISHED)
		return -ENOTCONN;
	memset(&m, 0, sizeof(m));
	m.type = DFI_RDM_ATOMIC;
	m.dst_id = c->peer.id;
	m.dst_gen = c->peer.gen;
	m.op = op;
	m.id = id;
	m.addr64 = addr;
	m.rmr = key;
	m.operand = operand;
	m.compare = op == DFI_RDM_ATOMIC_CSWAP ? compare : 0;
	switch (send_msg(c, &m)) {
	case 0:
		return 0;
	case -ENOSPC:
		return -EAGAIN;		/* the peer reads slower than we ask */
	default:
		conn_end(c, DFI_RCM_BROKEN, ECONNRESET);
		return -ENOTCONN;
	}
}

int dfi_rcm_disconnect(struct dfi_rcm_conn *c)
{
	if (c->state == C_DISC_SENT || c->state == C_BYE_WAIT || c->state == C_ENDED)
		return 0;
	if (c->state != C_ESTABLISHED)
		return -ENOTCONN;
	c->state = C_DISC_SENT;
	if (send_ids(c, DFI_RDM_DREQ))
		conn_end(c, DFI_RCM_DISCONNECTED, 0);	/* the peer is gone already */
	return 0;
}

void dfi_rcm_break(struct dfi_rcm_conn *c)
{
	if (c->state != C_ENDED)
		conn_end(c, DFI_RCM_BROKEN, EPROTO);
}

void dfi_rcm_want_goodbye(struct dfi_rcm_conn *c)
{
	c->bye_wanted = true;
}

void dfi_rcm_serve_goodbye(struct dfi_rcm *cm, dfi_rcm_bye_fn fn, void *arg)
{
	cm->bye_fn = fn;
	cm->bye_arg = arg;
}

void dfi_rcm_conn_free(struct dfi_rcm_conn *c)
{
	if (c)
		conn_destroy(c);
}
