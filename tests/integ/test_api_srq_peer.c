/*
 * dapl-ofi integration tests: an SRQ endpoint of the RDM backend
 * (src/fabric/rdm/srx.c, docs/rdm.md) against a hostile peer.
 *
 * The peer is raw libfabric in this process, an FI_EP_RDM endpoint of the
 * IA's own provider, speaking the connection manager's wire by hand over
 * TCP (src/fabric/rdm/wire.c encodes and decodes it): its REQ carries its
 * fabric address, it learns the SRQ's endpoint from the REP, says hello
 * over the fabric, confirms with RTU, and sends tagged messages of class 1
 * with a sequence, as a dapl-ofi peer does (but for the goodbye: its
 * REQ offers no goodbye word, and a DISCONNECTED after a DREQ may wait out
 * its bound) - and what a broken one might:
 *
 *  - a message with the live connection's id and another generation, one
 *    for an id nobody holds, a second hello: nothing reaches the DAT side,
 *    and the buffers the first two took are posted again (the SRQ's last
 *    buffers all take messages afterwards);
 *  - sequence 1 before 0: the receive EVD reports them in send order;
 *  - the end of a connection by a closed socket, a reset, bytes that are
 *    no message, a second RTU, a DREQ naming the generation without its
 *    SRQ bit, a proper DREQ: each EP sees its connection end within
 *    seconds, and every buffer of the SRQ is accounted for (taken by a
 *    reported message, or still there for the next connection);
 *  - a message for a connection freed since: dropped, its buffer back;
 *  - a sequence gap left open at the end: the message that waited is
 *    reported before the connection event;
 *  - a gap that lasts (DAPL_OFI_SRQ_GAP_MS, 300 ms here): the connection
 *    is BROKEN and what waited comes out with it, in order.
 *
 * The IA is DFI_TEST_IA (default ofi-shm) and must be an RDM one (ia_params
 * ep=rdm, or a provider without FI_EP_MSG); the peer asks fi_getinfo for
 * the provider the IA reports (DAPL_OFI_FABRIC_PROVIDER).  Links -ldat2,
 * -lfabric (the peer) and wire.c.  About 4 s (6 on tcp;ofi_rxm and net,
 * whose DREQ case waits out the goodbye's bound).
 *
 * `test_api_srq_peer PATTERN` runs only the tests matching PATTERN.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <dat2/udat.h>
#include <dat2/dapl_ofi.h>

#include "dat_test.h"
#include "fabric/rdm/wire.h"

#define IA_NAME		(getenv("DFI_TEST_IA") ? getenv("DFI_TEST_IA") : "ofi-shm")
#define BUF_LEN		(64u << 10)		/* the server's registered buffer */
#define NBUF		8			/* the SRQ's buffers (K) */
#define SLOT		256			/* bytes per buffer */
#define PEER_IA		0x5045455200000001ull	/* the raw peer's IA instance */
#define PEER_ID		0x4200u			/* its connection ids: PEER_ID + n */
#define PEER_GEN	0x0123u

/* Tags (docs/rdm.md, src/fabric/rdm/rdm.h): id (32 bits), generation (14),
 * class (2: 0 data, 1 an SRQ's, 2 hello), and for class 1 a 16-bit
 * sequence above; bit 14 of a REP's generation field: an SRQ endpoint. */
#define GEN_MASK	0x3fffu
#define GEN_SRQ		0x4000u
#define CLASS(c)	((uint64_t)(c) << 46)

static uint64_t tag_of(uint32_t id, uint16_t gen, unsigned cls, uint16_t seq)
{
	return (uint64_t)id | (uint64_t)(gen & GEN_MASK) << 32 | CLASS(cls) | (uint64_t)seq << 48;
}

/* ------------------------------------------------------------------ utils */

static DAT_DTO_COOKIE ck(uint64_t v)
{
	DAT_DTO_COOKIE c;

	memset(&c, 0, sizeof(c));
	c.as_64 = v;
	return c;
}

static const char *ev_name(DAT_EVENT_NUMBER n)
{
	switch (n) {
	case DAT_DTO_COMPLETION_EVENT: return "DAT_DTO_COMPLETION_EVENT";
	case DAT_CONNECTION_REQUEST_EVENT: return "DAT_CONNECTION_REQUEST_EVENT";
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "DAT_CONNECTION_EVENT_ESTABLISHED";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DAT_CONNECTION_EVENT_DISCONNECTED";
	case DAT_CONNECTION_EVENT_BROKEN: return "DAT_CONNECTION_EVENT_BROKEN";
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED:
		return "DAT_CONNECTION_EVENT_NON_PEER_REJECTED";
	case DAT_ASYNC_ERROR_EVD_OVERFLOW: return "DAT_ASYNC_ERROR_EVD_OVERFLOW";
	case DAT_ASYNC_ERROR_EP_BROKEN: return "DAT_ASYNC_ERROR_EP_BROKEN";
	case DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR:
		return "DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR";
	default: return "(other event)";
	}
}

static DAT_RETURN wait_ev(DAT_EVD_HANDLE evd, unsigned ms, DAT_EVENT *ev)
{
	DAT_COUNT nmore = 0;

	memset(ev, 0, sizeof(*ev));
	return dat_evd_wait(evd, (DAT_TIMEOUT)ms * 1000u, 1, ev, &nmore);
}

static void expect_empty(DAT_EVD_HANDLE evd, unsigned ms, const char *what)
{
	DAT_EVENT ev;
	DAT_RETURN rc = wait_ev(evd, ms, &ev);

	if (rc == DAT_SUCCESS)
		fail_msg("%s: unexpected %s (0x%x)", what, ev_name(ev.event_number),
			 (unsigned)ev.event_number);
	assert_err(rc, DAT_TIMEOUT_EXPIRED);
}

/* ------------------------------------------------------- the DAT side */

struct srv {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, cr, conn, req, rcv;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_SRQ_HANDLE srq;
	struct sockaddr_in addr;	/* the IA's: its PSPs listen there */
	char prov[64];			/* its libfabric provider */
	bool rdm;
	uint8_t *buf;
};

static bool port_avoided(DAT_CONN_QUAL p)
{
	/* the stock-client runs of the same CI job (test_api_srq.c) */
	return p == 15828 || p == 45248 || p >= 62000;
}

static DAT_RETURN psp_any(struct srv *s)
{
	DAT_PSP_HANDLE held[8];
	int nheld = 0;
	DAT_RETURN rc;

	for (;;) {
		rc = dat_psp_create_any(s->ia, &s->port, s->cr, DAT_PSP_CONSUMER_FLAG, &s->psp);
		if (rc != DAT_SUCCESS || !port_avoided(s->port) || nheld == 8)
			break;
		held[nheld++] = s->psp;	/* keep it, so the next one differs */
	}
	while (nheld > 0)
		dat_psp_free(held[--nheld]);
	return rc;
}

/* The IA's address and what it runs on (dat_ia_query). */
static void srv_query(struct srv *s)
{
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pa;
	DAT_EVD_HANDLE async;

	memset(&ia_attr, 0, sizeof(ia_attr));
	memset(&pa, 0, sizeof(pa));
	assert_ok(dat_ia_query(s->ia, &async, DAT_IA_FIELD_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL,
			       &pa));
	assert_non_null(ia_attr.ia_address_ptr);
	assert_int_equal(ia_attr.ia_address_ptr->sa_family, AF_INET);
	memcpy(&s->addr, ia_attr.ia_address_ptr, sizeof(s->addr));
	for (DAT_COUNT i = 0; i < pa.num_provider_specific_attr; i++) {
		const DAT_NAMED_ATTR *a = &pa.provider_specific_attr[i];

		if (strcmp(a->name, DAPL_OFI_ATTR_FABRIC) == 0)
			snprintf(s->prov, sizeof(s->prov), "%s", a->value);
		if (strcmp(a->name, DAPL_OFI_ATTR_ENDPOINT) == 0)
			s->rdm = strcmp(a->value, "rdm") == 0;
	}
}

/* IA, PZ, LMR, EVDs, a PSP, and an SRQ with NBUF buffers of SLOT bytes
 * posted, cookie = buffer number.  Returns false (nothing opened) if the
 * IA is not an RDM one. */
static bool srv_open(struct srv *s)
{
	DAT_REGION_DESCRIPTION region;
	char name[DAT_NAME_MAX_LENGTH];
	DAT_SRQ_ATTR sa;
	DAT_RMR_CONTEXT rctx;
	DAT_VLEN reg_len;
	DAT_VADDR reg_addr;

	memset(s, 0, sizeof(*s));
	snprintf(name, sizeof(name), "%s", IA_NAME);	/* dat_ia_open takes no const */
	assert_ok(dat_ia_open(name, 16, &s->async, &s->ia));
	srv_query(s);
	if (!s->rdm || !s->prov[0]) {
		assert_ok(dat_ia_close(s->ia, DAT_CLOSE_ABRUPT_FLAG));
		s->ia = DAT_HANDLE_NULL;
		return false;
	}
	s->buf = aligned_alloc(4096, BUF_LEN);
	assert_non_null(s->buf);
	memset(s->buf, 0, BUF_LEN);
	assert_ok(dat_pz_create(s->ia, &s->pz));
	memset(&region, 0, sizeof(region));
	region.for_va = s->buf;
	assert_ok(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, BUF_LEN, s->pz,
				 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &s->lmr, &s->lctx, &rctx,
				 &reg_len, &reg_addr));
	assert_ok(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr));
	assert_ok(dat_evd_create(s->ia, 16, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn));
	assert_ok(dat_evd_create(s->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req));
	assert_ok(dat_evd_create(s->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv));
	assert_ok(psp_any(s));
	memset(&sa, 0, sizeof(sa));
	sa.max_recv_dtos = NBUF;
	sa.max_recv_iov = 1;
	sa.low_watermark = DAT_SRQ_LW_DEFAULT;
	assert_ok(dat_srq_create(s->ia, s->pz, &sa, &s->srq));
	for (unsigned i = 0; i < NBUF; i++) {
		DAT_LMR_TRIPLET t = { .lmr_context = s->lctx, .segment_length = SLOT };

		t.virtual_address = (DAT_VADDR)(uintptr_t)(s->buf + i * SLOT);
		assert_ok(dat_srq_post_recv(s->srq, 1, &t, ck(i)));
	}
	return true;
}

/* Every object freed, then a graceful close: it fails if one was left. */
static void srv_close(struct srv *s)
{
	assert_ok(dat_srq_free(s->srq));
	assert_ok(dat_psp_free(s->psp));
	assert_ok(dat_evd_free(s->rcv));
	assert_ok(dat_evd_free(s->req));
	assert_ok(dat_evd_free(s->conn));
	assert_ok(dat_evd_free(s->cr));
	assert_ok(dat_lmr_free(s->lmr));
	assert_ok(dat_pz_free(s->pz));
	assert_ok(dat_ia_close(s->ia, DAT_CLOSE_GRACEFUL_FLAG));
	s->ia = DAT_HANDLE_NULL;
	free(s->buf);
	s->buf = NULL;
}

static DAT_EP_HANDLE srv_ep(struct srv *s)
{
	DAT_EP_ATTR a;
	DAT_EP_HANDLE ep;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_request_dtos = 16;
	a.max_recv_dtos = 16;
	a.max_request_iov = 1;
	a.max_recv_iov = 1;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	assert_ok(dat_ep_create_with_srq(s->ia, s->pz, s->rcv, s->req, s->conn, s->srq, &a, &ep));
	return ep;
}

static DAT_SRQ_PARAM srq_param(DAT_SRQ_HANDLE srq)
{
	DAT_SRQ_PARAM sp;

	memset(&sp, 0xee, sizeof(sp));
	assert_ok(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp));
	return sp;
}

/* Poll dat_srq_query until the SRQ reports avail buffers (its completions
 * are read by the progress thread, asynchronously). */
static void wait_available(DAT_SRQ_HANDLE srq, DAT_COUNT avail, unsigned ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
	DAT_SRQ_PARAM sp;

	do {
		sp = srq_param(srq);
		if (sp.available_dto_count == avail)
			return;
		sleep_ms(1);
	} while (now_ns() < end);
	fail_msg("SRQ reports %d buffers available after %u ms, expected %d",
		 sp.available_dto_count, ms, avail);
}

/* ------------------------------------------------------ the raw peer */

struct peer {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *mr;
	void *desc;
	uint8_t *buf;
	/* its one send's context, which a provider whose mode asks for
	 * FI_CONTEXT2 writes in while the send is out */
	struct fi_context2 ctx;
	size_t name_len;
	uint8_t name[DFI_RDM_ADDR_MAX];
	/* the SRQ's endpoint, from the first REP (all its EPs give the same) */
	bool have_srq;
	fi_addr_t srq;
	uint16_t srq_len;
	uint8_t srq_name[DFI_RDM_ADDR_MAX];
	uint32_t next_id;
};

/* The hints dapl-ofi gives for an RDM endpoint (src/fabric/info.c), with
 * FI_MSG for FI_RMA: tagged sends, in order; the peer's contexts are
 * struct fi_context2, whatever the provider asks. */
static struct fi_info *peer_hints(const char *prov)
{
	struct fi_info *h = fi_allocinfo();

	assert_non_null(h);
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_TAGGED | FI_MSG;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->fabric_attr->prov_name = strdup(prov);
	return h;
}

static void peer_open(struct peer *p, const struct srv *s)
{
	struct fi_info *hints = peer_hints(s->prov);
	struct fi_av_attr aa = { .type = FI_AV_UNSPEC };
	struct fi_cq_attr ca = { .size = 64, .format = FI_CQ_FORMAT_TAGGED,
				 .wait_obj = FI_WAIT_NONE };
	char node[INET_ADDRSTRLEN];
	int rc;

	memset(p, 0, sizeof(*p));
	p->next_id = PEER_ID;
	/* bound to the IA's address where the provider addresses by IP, its
	 * own names otherwise (shm), as dapl-ofi does */
	inet_ntop(AF_INET, &s->addr.sin_addr, node, sizeof(node));
	rc = fi_getinfo(FI_VERSION(1, 17), node, NULL, FI_SOURCE, hints, &p->info);
	if (rc == 0 && p->info->addr_format != FI_SOCKADDR_IN &&
	    p->info->addr_format != FI_SOCKADDR) {
		fi_freeinfo(p->info);
		p->info = NULL;
		rc = -FI_ENODATA;
	}
	if (rc == -FI_ENODATA)
		rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &p->info);
	fi_freeinfo(hints);
	if (rc)
		fail_msg("peer: fi_getinfo for an FI_EP_RDM endpoint of '%s': %s", s->prov,
			 fi_strerror(-rc));
	assert_int_equal(fi_fabric(p->info->fabric_attr, &p->fabric, NULL), 0);
	assert_int_equal(fi_domain(p->fabric, p->info, &p->domain, NULL), 0);
	assert_int_equal(fi_av_open(p->domain, &aa, &p->av, NULL), 0);
	assert_int_equal(fi_cq_open(p->domain, &ca, &p->cq, NULL), 0);
	assert_int_equal(fi_endpoint(p->domain, p->info, &p->ep, NULL), 0);
	assert_int_equal(fi_ep_bind(p->ep, &p->av->fid, 0), 0);
	assert_int_equal(fi_ep_bind(p->ep, &p->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	assert_int_equal(fi_enable(p->ep), 0);
	p->name_len = sizeof(p->name);
	assert_int_equal(fi_getname(&p->ep->fid, p->name, &p->name_len), 0);
	p->buf = aligned_alloc(4096, 4096);
	assert_non_null(p->buf);
	memset(p->buf, 0, 4096);
	if (p->info->domain_attr->mr_mode & FI_MR_LOCAL) {
		assert_int_equal(fi_mr_reg(p->domain, p->buf, 4096, FI_SEND | FI_RECV, 0, 0, 0,
					   &p->mr, NULL), 0);
		p->desc = fi_mr_desc(p->mr);
	}
}

static void peer_close(struct peer *p)
{
	if (p->ep)
		fi_close(&p->ep->fid);
	if (p->mr)
		fi_close(&p->mr->fid);
	if (p->cq)
		fi_close(&p->cq->fid);
	if (p->av)
		fi_close(&p->av->fid);
	if (p->domain)
		fi_close(&p->domain->fid);
	if (p->fabric)
		fi_close(&p->fabric->fid);
	if (p->info)
		fi_freeinfo(p->info);
	free(p->buf);
	memset(p, 0, sizeof(*p));
}

/* One pass of the peer's progress; a completion it finds is returned
 * (1), an error one fails the test. */
static int peer_poll(struct peer *p, struct fi_cq_tagged_entry *c)
{
	ssize_t n = fi_cq_read(p->cq, c, 1);

	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry e;

		memset(&e, 0, sizeof(e));
		fi_cq_readerr(p->cq, &e, 0);
		fail_msg("peer: completion error %d (%s)", e.err, fi_strerror(e.err));
	}
	return n == 1;
}

/* A zero-byte hello (dapl-ofi's rdm_path_up): fi_tinject, retried while
 * the provider sets up its path to the SRQ's endpoint (5 s at most). */
static void peer_hello(struct peer *p, uint64_t tag)
{
	uint64_t end = now_ns() + 5000000000ull;
	struct fi_cq_tagged_entry c;
	ssize_t rc;

	for (;;) {
		rc = fi_tinject(p->ep, NULL, 0, p->srq, tag);
		if (rc != -FI_EAGAIN || now_ns() > end)
			break;
		(void)peer_poll(p, &c);
		sched_yield();
	}
	if (rc)
		fail_msg("peer: hello to the SRQ's endpoint: %s", fi_strerror((int)-rc));
}

/* len bytes of data to the SRQ's endpoint with tag, and its completion
 * (5 s at most for each). */
static void peer_send(struct peer *p, uint64_t tag, const void *data, size_t len)
{
	uint64_t end = now_ns() + 5000000000ull;
	struct fi_cq_tagged_entry c;
	ssize_t rc;

	assert_true(len <= 4096);
	memcpy(p->buf, data, len);
	for (;;) {
		rc = fi_tsend(p->ep, p->buf, len, p->desc, p->srq, tag, &p->ctx);
		if (rc != -FI_EAGAIN || now_ns() > end)
			break;
		(void)peer_poll(p, &c);
		sched_yield();
	}
	if (rc)
		fail_msg("peer: fi_tsend of %zu bytes, tag 0x%016llx: %s", len,
			 (unsigned long long)tag, fi_strerror((int)-rc));
	end = now_ns() + 5000000000ull;
	while (!peer_poll(p, &c)) {
		if (now_ns() > end)
			fail_msg("peer: no completion for its send (tag 0x%016llx) in 5 s",
				 (unsigned long long)tag);
		sched_yield();
	}
	assert_ptr_equal(c.op_context, &p->ctx);
}

/* -------------------------------------------- the peer's TCP channel */

/* One connection of the peer: its TCP channel, the DAT EP that accepted
 * it, the SRQ end's id and generation (from the REP, with GEN_SRQ), and
 * the next sequence of its messages. */
struct chan {
	int fd;
	DAT_EP_HANDLE ep;
	uint32_t my_id;
	uint32_t sid;
	uint16_t sgen;
	uint16_t seq;
	size_t rx_len;
	uint8_t rx[2 * DFI_RDM_MSG_MAX];
};

/* The peer's sockets still open: what a failed test left goes at its
 * teardown. */
#define MAX_FDS 16
static int open_fds[MAX_FDS];
static int n_open_fds;

static void fd_forget(int fd)
{
	for (int i = 0; i < n_open_fds; i++)
		if (open_fds[i] == fd) {
			open_fds[i] = open_fds[--n_open_fds];
			return;
		}
}

static void fds_close(void)
{
	while (n_open_fds > 0)
		close(open_fds[--n_open_fds]);
}

static void chan_write(struct chan *l, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	while (len) {
		ssize_t n = send(l->fd, b, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail_msg("peer: TCP send: %s", n < 0 ? strerror(errno) : "0 bytes");
		b += n;
		len -= (size_t)n;
	}
}

static void chan_send(struct chan *l, const struct dfi_rdm_msg *m)
{
	uint8_t buf[DFI_RDM_MSG_MAX];
	ssize_t n = dfi_rdm_encode(m, buf, sizeof(buf));

	if (n < 0)
		fail_msg("peer: encoding a %s: %s", dfi_rdm_type_name(m->type), strerror((int)-n));
	chan_write(l, buf, (size_t)n);
}

/* The next message from the DAT side within ms: 1; 0 if its end closed
 * (EOF or a reset), -1 if nothing came. */
static int chan_recv(struct chan *l, struct dfi_rdm_msg *m, unsigned ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;

	for (;;) {
		const char *why;
		ssize_t used = dfi_rdm_decode(l->rx, l->rx_len, m, &why);
		struct pollfd pfd = { .fd = l->fd, .events = POLLIN };
		uint64_t now = now_ns();
		ssize_t n;

		if (used < 0)
			fail_msg("peer: the DAT side sent bytes that are no message: %s", why);
		if (used > 0) {
			memmove(l->rx, l->rx + used, l->rx_len - (size_t)used);
			l->rx_len -= (size_t)used;
			return 1;
		}
		if (now >= end)
			return -1;
		if (poll(&pfd, 1, (int)((end - now) / 1000000u) + 1) <= 0)
			continue;
		n = recv(l->fd, l->rx + l->rx_len, sizeof(l->rx) - l->rx_len, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return 0;
		l->rx_len += (size_t)n;
	}
}

static void expect_closed(struct chan *l, const char *what)
{
	struct dfi_rdm_msg m;
	int rc = chan_recv(l, &m, 5000);

	if (rc == 1)
		fail_msg("%s: the DAT side sent a %s, expected it to close its end", what,
			 dfi_rdm_type_name(m.type));
	if (rc < 0)
		fail_msg("%s: the DAT side kept its end open for 5 s", what);
}

/* The peer's REQ to the PSP, the DAT side's CR accepted onto a new SRQ
 * EP, the REP read and the SRQ's endpoint in the peer's AV: what remains
 * is the hello and the RTU. */
static void chan_open(struct chan *l, struct srv *s, struct peer *p)
{
	struct sockaddr_in a = s->addr;
	struct dfi_rdm_msg m;
	struct timeval tv = { .tv_sec = 5 };
	DAT_CR_PARAM crp;
	DAT_EVENT ev;
	DAT_CR_HANDLE cr;

	memset(l, 0, sizeof(*l));
	l->my_id = p->next_id++;
	l->ep = srv_ep(s);
	l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(l->fd >= 0);
	assert_true(n_open_fds < MAX_FDS);
	open_fds[n_open_fds++] = l->fd;
	(void)setsockopt(l->fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	(void)setsockopt(l->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	a.sin_port = htons((uint16_t)s->port);
	if (connect(l->fd, (struct sockaddr *)&a, sizeof(a)))
		fail_msg("peer: TCP connect to the PSP's port %u: %s", (unsigned)s->port,
			 strerror(errno));

	memset(&m, 0, sizeof(m));
	m.type = DFI_RDM_REQ;
	m.ia = PEER_IA;
	m.src_id = l->my_id;
	m.src_gen = PEER_GEN;
	m.qual = s->port;
	m.addr_len = (uint16_t)p->name_len;
	memcpy(m.addr, p->name, p->name_len);
	m.plen = 8;
	memcpy(m.pdata, "srq-peer", 8);
	chan_send(l, &m);

	if (wait_ev(s->cr, 5000, &ev) != DAT_SUCCESS)
		fail_msg("server: no connection request within 5 s of the peer's REQ");
	assert_int_equal(ev.event_number, DAT_CONNECTION_REQUEST_EVENT);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	assert_ok(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp));
	assert_int_equal(crp.private_data_size, 8);
	assert_memory_equal(crp.private_data, "srq-peer", 8);
	assert_ok(dat_cr_accept(cr, l->ep, 0, NULL));

	if (chan_recv(l, &m, 5000) != 1)
		fail_msg("peer: no REP within 5 s of the accept");
	if (m.type != DFI_RDM_REP)
		fail_msg("peer: a %s came for its REQ, expected a REP", dfi_rdm_type_name(m.type));
	assert_int_equal(m.dst_id, l->my_id);
	assert_int_equal(m.dst_gen, PEER_GEN);
	if (!(m.src_gen & GEN_SRQ))
		fail_msg("peer: the REP of an SRQ EP has generation field 0x%x, without bit 14",
			 m.src_gen);
	assert_int_equal(m.plen, 0);
	l->sid = m.src_id;
	l->sgen = m.src_gen;
	if (!p->have_srq) {
		assert_int_equal(fi_av_insert(p->av, m.addr, 1, &p->srq, 0, NULL), 1);
		p->srq_len = m.addr_len;
		memcpy(p->srq_name, m.addr, m.addr_len);
		p->have_srq = true;
	} else if (m.addr_len != p->srq_len || memcmp(m.addr, p->srq_name, m.addr_len)) {
		fail_msg("peer: two EPs of one SRQ gave different fabric addresses");
	}
}

static void chan_rtu(struct chan *l, struct srv *s)
{
	struct dfi_rdm_msg m;
	DAT_EVENT ev;

	memset(&m, 0, sizeof(m));
	m.type = DFI_RDM_RTU;
	m.dst_id = l->sid;
	m.dst_gen = l->sgen;
	m.src_id = l->my_id;
	m.src_gen = PEER_GEN;
	chan_send(l, &m);
	if (wait_ev(s->conn, 5000, &ev) != DAT_SUCCESS)
		fail_msg("server: not ESTABLISHED within 5 s of the peer's RTU");
	if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED)
		fail_msg("server: %s after the peer's RTU, expected ESTABLISHED",
			 ev_name(ev.event_number));
	assert_ptr_equal(ev.event_data.connect_event_data.ep_handle, l->ep);
}

static void chan_connect(struct chan *l, struct srv *s, struct peer *p)
{
	chan_open(l, s, p);
	peer_hello(p, tag_of(l->sid, l->sgen, 2, 0));
	chan_rtu(l, s);
}

static void chan_close(struct chan *l)
{
	if (l->fd >= 0) {
		fd_forget(l->fd);
		close(l->fd);
	}
	l->fd = -1;
}

/* --------------------------------------------------------- messages */

/* Message seq of channel c: "SRQP", c's id, seq, then a fill byte; its length
 * differs from one seq to the next. */
static size_t msg_len(uint16_t seq)
{
	return 24 + 8u * (seq % 16u);
}

static void msg_send(struct peer *p, struct chan *l, uint16_t seq)
{
	uint8_t b[4096];
	uint32_t w[2] = { htonl(l->my_id), htonl(seq) };

	memcpy(b, "SRQP", 4);
	memcpy(b + 4, w, sizeof(w));
	memset(b + 12, 0x40 + (seq & 0x3f), msg_len(seq) - 12);
	peer_send(p, tag_of(l->sid, l->sgen, 1, seq), b, msg_len(seq));
}

/* A message no live EP of the SRQ may report: its content says so. */
static void msg_send_stale(struct peer *p, uint64_t tag)
{
	uint8_t b[40];

	memset(b, 0xee, sizeof(b));
	memcpy(b, "STALE", 5);
	peer_send(p, tag, b, sizeof(b));
}

/* The next receive completion of the server is channel l's message seq: on
 * l's EP, in one of the SRQ's buffers, its length and bytes.  Returns the
 * buffer's number.  missing: what it means if none comes. */
static unsigned msg_expect_or(struct srv *s, const struct chan *l, uint16_t seq,
			      const char *missing)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	const uint8_t *b;
	uint32_t w[2];
	char rb[160];
	DAT_RETURN rc = wait_ev(s->rcv, 5000, &ev);
	unsigned slot;

	if (rc != DAT_SUCCESS)
		fail_msg("server: no receive completion for message %u within 5 s (%s)%s%s", seq,
			 rc_name(rc, rb, sizeof(rb)), missing ? ": " : "", missing ? missing : "");
	if (ev.event_number != DAT_DTO_COMPLETION_EVENT)
		fail_msg("server: %s on the receive EVD", ev_name(ev.event_number));
	assert_int_equal(d->operation, DAT_DTO_RECEIVE);
	if (d->status != DAT_DTO_SUCCESS)
		fail_msg("server: a receive completed with status %d", (int)d->status);
	assert_true(d->user_cookie.as_64 < NBUF);
	slot = (unsigned)d->user_cookie.as_64;
	b = s->buf + (size_t)slot * SLOT;
	if (memcmp(b, "SRQP", 4) != 0)
		fail_msg("server: buffer %u holds '%.5s...', not a good message: a stale "
			 "message was reported", slot, (const char *)b);
	memcpy(w, b + 4, sizeof(w));
	if (ntohl(w[0]) != l->my_id || ntohl(w[1]) != seq)
		fail_msg("server: message %u of connection 0x%x came where message %u of 0x%x "
			 "was expected", ntohl(w[1]), ntohl(w[0]), seq, l->my_id);
	if (d->ep_handle != l->ep)
		fail_msg("server: message %u names EP %p, not %p", seq, (void *)d->ep_handle,
			 (void *)l->ep);
	if (d->transfered_length != msg_len(seq))
		fail_msg("server: message %u of %zu bytes completed with length %u", seq,
			 msg_len(seq), (unsigned)d->transfered_length);
	for (size_t i = 12; i < msg_len(seq); i++)
		if (b[i] != (uint8_t)(0x40 + (seq & 0x3f)))
			fail_msg("server: message %u: byte %zu differs", seq, i);
	return slot;
}

static unsigned msg_expect(struct srv *s, const struct chan *l, uint16_t seq)
{
	return msg_expect_or(s, l, seq, NULL);
}

/* ------------------------------------------------------------ state */

struct fix {
	struct srv s;
	struct peer p;
	bool skip;
};

static int setup(void **state)
{
	struct fix *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	*state = t;
	return 0;
}

/* What a failed test left: the peer's sockets, the DAT side with its IA,
 * the peer's objects with their fids. */
static int teardown(void **state)
{
	struct fix *t = *state;

	watchdog("teardown", 30);
	fds_close();
	if (t->s.ia)
		dat_ia_close(t->s.ia, DAT_CLOSE_ABRUPT_FLAG);
	free(t->s.buf);
	peer_close(&t->p);
	free(t);
	alarm(0);
	return 0;
}

/* The server and the peer, or a skip if the IA is not an RDM one. */
static void open_both(struct fix *t)
{
	if (!srv_open(&t->s)) {
		print_message("# IA '%s' has no RDM endpoints (%s): nothing to test\n", IA_NAME,
			      t->s.prov[0] ? t->s.prov : "?");
		skip();
	}
	peer_open(&t->p, &t->s);
}

/* The DAT side ends l's connection gracefully: its DREQ, answered. */
static void chan_disconnect(struct chan *l, struct srv *s)
{
	struct dfi_rdm_msg m;
	DAT_EVENT ev;

	assert_ok(dat_ep_disconnect(l->ep, DAT_CLOSE_GRACEFUL_FLAG));
	if (chan_recv(l, &m, 5000) != 1)
		fail_msg("peer: no DREQ within 5 s of dat_ep_disconnect");
	assert_int_equal(m.type, DFI_RDM_DREQ);
	assert_int_equal(m.dst_id, l->my_id);
	assert_int_equal(m.dst_gen, PEER_GEN);
	assert_int_equal(m.src_id, l->sid);
	assert_int_equal(m.src_gen, l->sgen);
	memset(&m, 0, sizeof(m));
	m.type = DFI_RDM_DREP;
	m.dst_id = l->sid;
	m.dst_gen = l->sgen;
	m.src_id = l->my_id;
	m.src_gen = PEER_GEN;
	chan_send(l, &m);
	if (wait_ev(s->conn, 5000, &ev) != DAT_SUCCESS)
		fail_msg("server: no DISCONNECTED within 5 s of the peer's DREP");
	assert_int_equal(ev.event_number, DAT_CONNECTION_EVENT_DISCONNECTED);
	assert_ptr_equal(ev.event_data.connect_event_data.ep_handle, l->ep);
	chan_close(l);
}

/* The async EP_BROKEN an SRQ EP's end of connection brings (srq.c), and
 * nothing else. */
static void expect_ep_broken(struct srv *s, DAT_EP_HANDLE ep)
{
	DAT_EVENT ev;

	if (wait_ev(s->async, 5000, &ev) != DAT_SUCCESS)
		fail_msg("server: no async EP_BROKEN within 5 s of the SRQ EP's disconnect");
	if (ev.event_number != DAT_ASYNC_ERROR_EP_BROKEN)
		fail_msg("server: %s on the async EVD, expected EP_BROKEN",
			 ev_name(ev.event_number));
	assert_ptr_equal(ev.event_data.asynch_error_event_data.dat_handle, ep);
	expect_empty(s->async, 50, "server async EVD after EP_BROKEN");
}

/* ============================================ 1. stale and out of order */

static void test_srq_peer_stale_and_order(void **state)
{
	struct fix *t = *state;
	struct srv *s = &t->s;
	struct peer *p = &t->p;
	struct chan l;
	uint16_t seq;

	watchdog(__func__, 60);
	open_both(t);
	chan_connect(&l, s, p);
	expect_empty(s->async, 0, "server async EVD after connecting");

	/* the live id with another generation; an id nobody holds: both
	 * take a buffer, which the SRQ posts again */
	msg_send_stale(p, tag_of(l.sid, (uint16_t)((l.sgen & GEN_MASK) ^ 1), 1, 0));
	msg_send_stale(p, tag_of(0x7fffff, l.sgen, 1, 0));
	/* a hello again: no SRQ receive matches it, it takes no buffer */
	peer_hello(p, tag_of(l.sid, l.sgen, 2, 0));
	/* sequence 1 before 0, then 2: reported 0, 1, 2 */
	msg_send(p, &l, 1);
	msg_send(p, &l, 0);
	msg_send(p, &l, 2);
	for (seq = 0; seq < 3; seq++)
		msg_expect(s, &l, seq);
	expect_empty(s->rcv, 200, "server receive EVD after the three good messages");
	wait_available(s->srq, NBUF - 3, 5000);

	/* the stale messages' buffers are there again: the SRQ's last
	 * NBUF - 3 all take a message (were one lost, the last would wait) */
	for (seq = 3; seq < NBUF; seq++)
		msg_send(p, &l, seq);
	for (seq = 3; seq < NBUF; seq++)
		msg_expect_or(s, &l, seq, "a buffer a stale message took was not posted again");
	wait_available(s->srq, 0, 5000);
	expect_empty(s->rcv, 100, "server receive EVD with every buffer taken");
	expect_empty(s->async, 0, "server async EVD after the messages");

	chan_disconnect(&l, s);
	expect_ep_broken(s, l.ep);
	assert_ok(dat_ep_free(l.ep));
	srv_close(s);
	peer_close(p);
	alarm(0);
}

/* ================================================ 2. the peer goes away */

enum leave {
	LEAVE_CLOSE,		/* its TCP socket closed (FIN) */
	LEAVE_RESET,		/* closed with SO_LINGER 0 (RST) */
	LEAVE_GARBAGE,		/* bytes that are no message */
	LEAVE_RTU_AGAIN,	/* a second RTU */
	LEAVE_DREQ_NOSRQ,	/* a DREQ for the generation without GEN_SRQ */
	LEAVE_DREQ,		/* a proper DREQ: DREP, DISCONNECTED */
	LEAVE_END
};

static const char *const leave_name[LEAVE_END] = {
	[LEAVE_CLOSE] = "socket closed", [LEAVE_RESET] = "socket reset",
	[LEAVE_GARBAGE] = "garbage bytes", [LEAVE_RTU_AGAIN] = "second RTU",
	[LEAVE_DREQ_NOSRQ] = "DREQ without the SRQ bit", [LEAVE_DREQ] = "DREQ",
};

static void leave(struct chan *l, enum leave how)
{
	struct dfi_rdm_msg m;

	memset(&m, 0, sizeof(m));
	m.dst_id = l->sid;
	m.dst_gen = l->sgen;
	m.src_id = l->my_id;
	m.src_gen = PEER_GEN;
	switch (how) {
	case LEAVE_CLOSE:
		chan_close(l);
		return;
	case LEAVE_RESET: {
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };

		assert_int_equal(setsockopt(l->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
		chan_close(l);
		return;
	}
	case LEAVE_GARBAGE: {
		uint8_t junk[32];

		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (uint8_t)(0xa5 ^ (i * 29));
		chan_write(l, junk, sizeof(junk));
		expect_closed(l, leave_name[how]);
		return;
	}
	case LEAVE_RTU_AGAIN:
		m.type = DFI_RDM_RTU;
		chan_send(l, &m);
		expect_closed(l, leave_name[how]);
		return;
	case LEAVE_DREQ_NOSRQ:
		m.type = DFI_RDM_DREQ;
		m.dst_gen = l->sgen & GEN_MASK;
		chan_send(l, &m);
		expect_closed(l, leave_name[how]);
		return;
	case LEAVE_DREQ:
		m.type = DFI_RDM_DREQ;
		chan_send(l, &m);
		if (chan_recv(l, &m, 5000) != 1)
			fail_msg("peer: no DREP within 5 s of its DREQ");
		assert_int_equal(m.type, DFI_RDM_DREP);
		assert_int_equal(m.dst_id, l->my_id);
		assert_int_equal(m.src_id, l->sid);
		assert_int_equal(m.src_gen, l->sgen);
		return;
	case LEAVE_END:
		break;
	}
}

/* Each way of leaving on an EP of its own, after one message: the EP sees
 * its connection end (DISCONNECTED or BROKEN) within 5 s, and the async
 * EVD the EP_BROKEN of an SRQ EP; then a message for the freed connection
 * is dropped, and the SRQ's buffers left all take messages. */
static void test_srq_peer_leaves(void **state)
{
	struct fix *t = *state;
	struct srv *s = &t->s;
	struct peer *p = &t->p;
	struct chan l, last;
	uint32_t old_id = 0;
	uint16_t old_gen = 0;

	watchdog(__func__, 90);
	open_both(t);
	for (int how = 0; how < LEAVE_END; how++) {
		uint64_t t0;
		DAT_EVENT ev;

		chan_connect(&l, s, p);
		msg_send(p, &l, 0);
		msg_expect(s, &l, 0);
		t0 = now_ns();
		leave(&l, (enum leave)how);
		if (wait_ev(s->conn, 5000, &ev) != DAT_SUCCESS)
			fail_msg("%s: the EP saw no connection event within 5 s",
				 leave_name[how]);
		if (ev.event_number != DAT_CONNECTION_EVENT_DISCONNECTED &&
		    ev.event_number != DAT_CONNECTION_EVENT_BROKEN)
			fail_msg("%s: %s, expected DISCONNECTED or BROKEN", leave_name[how],
				 ev_name(ev.event_number));
		assert_ptr_equal(ev.event_data.connect_event_data.ep_handle, l.ep);
		print_message("# %-28s -> %s in %u ms\n", leave_name[how],
			      ev_name(ev.event_number), (unsigned)((now_ns() - t0) / 1000000u));
		expect_ep_broken(s, l.ep);
		expect_empty(s->rcv, 0, "server receive EVD after the connection's end");
		chan_close(&l);
		assert_ok(dat_ep_free(l.ep));
		old_id = l.sid;
		old_gen = l.sgen;
	}
	wait_available(s->srq, NBUF - LEAVE_END, 5000);

	/* a message for a connection freed: dropped, its buffer back */
	msg_send_stale(p, tag_of(old_id, old_gen, 1, 1));
	expect_empty(s->rcv, 100, "server receive EVD after a message for a freed EP");
	chan_connect(&last, s, p);
	for (uint16_t seq = 0; seq < NBUF - LEAVE_END; seq++)
		msg_send(p, &last, seq);
	for (uint16_t seq = 0; seq < NBUF - LEAVE_END; seq++)
		msg_expect_or(s, &last, seq, "a buffer was lost with a connection's end, or "
			      "the message for a freed connection kept its buffer");
	wait_available(s->srq, 0, 5000);
	chan_disconnect(&last, s);
	expect_ep_broken(s, last.ep);
	assert_ok(dat_ep_free(last.ep));
	srv_close(s);
	peer_close(p);
	alarm(0);
}

/* ====================================== 3. a sequence gap left open */

/* Message 0, then 2 (1 never comes), then the socket closes: 0 is reported
 * at once, 2 waits for 1.  The connection's end must not lose it: as DAT
 * wants, the buffer the EP took is on its receive EVD when the consumer
 * learns of the end, and the SRQ counts it taken. */
static void test_srq_peer_gap_then_close(void **state)
{
	struct fix *t = *state;
	struct srv *s = &t->s;
	struct peer *p = &t->p;
	struct chan l;
	DAT_EVENT ev;

	watchdog(__func__, 60);
	open_both(t);
	chan_connect(&l, s, p);
	msg_send(p, &l, 0);
	msg_send(p, &l, 2);
	msg_expect(s, &l, 0);
	expect_empty(s->rcv, 100, "server receive EVD: message 2 waits for 1");
	chan_close(&l);
	if (wait_ev(s->conn, 5000, &ev) != DAT_SUCCESS)
		fail_msg("the EP saw no connection event within 5 s of the socket's close");
	assert_true(ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED ||
		    ev.event_number == DAT_CONNECTION_EVENT_BROKEN);
	expect_ep_broken(s, l.ep);
	msg_expect(s, &l, 2);
	wait_available(s->srq, NBUF - 2, 5000);
	assert_ok(dat_ep_free(l.ep));
	expect_empty(s->rcv, 50, "server receive EVD after message 2");
	srv_close(s);
	peer_close(p);
	alarm(0);
}

/* ========================================= 4. a sequence gap that lasts */

/* Messages 1..4 and never 0: each takes an SRQ buffer and waits for 0.
 * After DAPL_OFI_SRQ_GAP_MS the connection is broken, and the four come
 * out with its end, in order: a peer that skips a message cannot hold the
 * SRQ's buffers unseen. */
static void test_srq_peer_gap_lasts(void **state)
{
	struct fix *t = *state;
	struct srv *s = &t->s;
	struct peer *p = &t->p;
	struct chan l;
	DAT_EVENT ev;
	uint64_t t0;

	watchdog(__func__, 60);
	setenv("DAPL_OFI_SRQ_GAP_MS", "300", 1);
	open_both(t);
	chan_connect(&l, s, p);
	for (uint16_t seq = 1; seq <= 4; seq++)
		msg_send(p, &l, seq);
	t0 = now_ns();
	expect_empty(s->rcv, 100, "server receive EVD: 1..4 wait for 0");
	if (wait_ev(s->conn, 5000, &ev) != DAT_SUCCESS)
		fail_msg("no connection event within 5 s of a gap of 300 ms");
	assert_int_equal(ev.event_number, DAT_CONNECTION_EVENT_BROKEN);
	print_message("# BROKEN %u ms after the gap opened\n",
		      (unsigned)((now_ns() - t0) / 1000000u));
	expect_ep_broken(s, l.ep);
	for (uint16_t seq = 1; seq <= 4; seq++)
		msg_expect(s, &l, seq);
	wait_available(s->srq, NBUF - 4, 5000);
	expect_closed(&l, "the peer's channel after its connection broke");
	assert_ok(dat_ep_free(l.ep));
	unsetenv("DAPL_OFI_SRQ_GAP_MS");
	srv_close(s);
	peer_close(p);
	alarm(0);
}

/* ================================================================= main */

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(test_srq_peer_stale_and_order),
		T(test_srq_peer_leaves),
		T(test_srq_peer_gap_then_close),
		T(test_srq_peer_gap_lasts),
	};

	default_dat_override();		/* may re-execute this program */
	watchdog_install();
	if (argc == 2)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
