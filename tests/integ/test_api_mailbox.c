/*
 * dapl-ofi integration tests: the emulated atomics' mailbox of a connected
 * endpoint (src/fabric/msg/atomic.c, docs/ib-extension.md) against a
 * hostile peer.
 *
 * The peer is raw libfabric tcp in this process, speaking the mailbox's
 * wire by hand: it connects to a DAT PSP with a trailer of its own in the
 * private data, learns the server's mailbox from the accept's, and writes
 * into it what a broken or malicious peer might: CQ data with a wrong
 * check byte, an unknown endpoint id, a slot out of range, an unknown
 * operation, a key that names no atomic region, an answer for a request
 * never made.  Asserted: the first three and the last are dropped (no
 * answer: the next answer the peer sees is the next request's), an unknown
 * operation answers EINVAL and a foreign key EACCES with the memory
 * untouched, a good request answers the old value; the DAT side reports
 * nothing of it and its connection still carries a message.  A peer that
 * sends no trailer gets its private data whole, and the DAT side's atomics
 * to it are refused with DAT_NOT_IMPLEMENTED; so does an IA with ia_params
 * atomics=0 beside one that emulates them, each seeing the other's private
 * data alone (232 bytes one way, 256 the other).
 *
 * Links -ldat2 and -lfabric (the peer); the IA is ofi-lo through
 * DAT_OVERRIDE.  About 1 s.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

#include "dat_test.h"

#define IA_NAME		"ofi-lo"
#define SLOTS		32
#define REQ_BYTES	40		/* struct mbox_req */
#define REP_BYTES	24		/* struct mbox_rep */
#define REP_OFF		(SLOTS * REQ_BYTES)
#define MAGIC		0x44464941u	/* "DFIA" */
#define CHECK		0xa7u
#define ANSWER		(1ull << 63)
#define PEER_ID		0x1234u		/* the raw peer's id, as it announces it */

/* ------------------------------------------------------- the DAT side */

struct srv {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, cr, conn, req, rcv;
	DAT_PZ_HANDLE pz;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_EP_HANDLE ep;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_VADDR reg;
	uint64_t *buf;			/* [0]: the atomic target, [8..]: receives */
};

static void srv_open_ia(struct srv *s, const char *ia_name)
{
	DAT_REGION_DESCRIPTION region;
	char name[DAT_NAME_MAX_LENGTH];
	DAT_VLEN len;

	memset(s, 0, sizeof(*s));
	snprintf(name, sizeof(name), "%s", ia_name);	/* dat_ia_open takes no const */
	assert_ok(dat_ia_open(name, 8, &s->async, &s->ia));
	assert_ok(dat_pz_create(s->ia, &s->pz));
	assert_ok(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr));
	assert_ok(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn));
	assert_ok(dat_evd_create(s->ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req));
	assert_ok(dat_evd_create(s->ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv));
	assert_ok(dat_psp_create_any(s->ia, &s->port, s->cr, DAT_PSP_CONSUMER_FLAG, &s->psp));
	s->buf = aligned_alloc(4096, 4096);
	assert_non_null(s->buf);
	memset(s->buf, 0, 4096);
	memset(&region, 0, sizeof(region));
	region.for_va = s->buf;
	assert_ok(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, 4096, s->pz,
				 DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC,
				 DAT_VA_TYPE_VA, &s->lmr, &s->lctx, &s->rctx, &len, &s->reg));
	assert_ok(dat_ep_create(s->ia, s->pz, s->rcv, s->req, s->conn, NULL, &s->ep));
}

static void srv_open(struct srv *s)
{
	srv_open_ia(s, IA_NAME);
}

static void srv_close(struct srv *s)
{
	DAT_EVENT ev;
	DAT_COUNT n;

	dat_ep_disconnect(s->ep, DAT_CLOSE_ABRUPT_FLAG);
	dat_evd_wait(s->conn, 2000000, 1, &ev, &n);
	assert_ok(dat_ep_free(s->ep));
	assert_ok(dat_lmr_free(s->lmr));
	assert_ok(dat_psp_free(s->psp));
	assert_ok(dat_ia_close(s->ia, DAT_CLOSE_ABRUPT_FLAG));
	free(s->buf);
}

static DAT_RETURN next(DAT_EVD_HANDLE evd, unsigned ms, DAT_EVENT *ev)
{
	DAT_COUNT n;

	memset(ev, 0, sizeof(*ev));
	return dat_evd_wait(evd, (DAT_TIMEOUT)ms * 1000u, 1, ev, &n);
}

/* ------------------------------------------------------ the raw peer */

struct peer {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *mr;
	uint8_t *box;			/* its mailbox: answers land in box[REP_OFF..] */
	uint8_t *src;			/* what it writes from */
	void *src_desc;
	struct fid_mr *src_mr;
	/* the server's mailbox, from the accept's trailer */
	uint64_t addr;
	uint64_t key;
	uint32_t id;
};

static void put_trailer(uint8_t *out, uint64_t addr, uint32_t key, uint32_t id)
{
	uint64_t a = htole64(addr);
	uint32_t k = htole32(key), i = htole32(id), m = htole32(MAGIC);
	uint16_t slots = htole16(SLOTS);

	memcpy(out, &a, 8);
	memcpy(out + 8, &k, 4);
	memcpy(out + 12, &i, 4);
	memcpy(out + 16, &slots, 2);
	out[18] = 1;
	out[19] = 0;
	memcpy(out + 20, &m, 4);
}

/* Connects to the server's PSP; with_trailer: announces its mailbox. */
static void peer_connect(struct peer *p, struct srv *s, bool with_trailer)
{
	struct fi_info *hints = fi_allocinfo();
	char port[16];
	uint8_t pdata[64];
	size_t plen = 0;

	memset(p, 0, sizeof(*p));
	assert_non_null(hints);
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->fabric_attr->prov_name = strdup("tcp");
	snprintf(port, sizeof(port), "%u", (unsigned)s->port);
	assert_int_equal(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", port, 0, hints, &p->info), 0);
	fi_freeinfo(hints);
	/* virtual addresses and provider keys, as dapl-ofi forces them
	 * (tcp 1.17 answers 0, offsets, otherwise: fabric.c) */
	p->info->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	assert_int_equal(fi_fabric(p->info->fabric_attr, &p->fabric, NULL), 0);
	assert_int_equal(fi_domain(p->fabric, p->info, &p->domain, NULL), 0);
	assert_int_equal(fi_eq_open(p->fabric, &(struct fi_eq_attr){ .size = 16,
							   .wait_obj = FI_WAIT_UNSPEC },
				    &p->eq, NULL), 0);
	assert_int_equal(fi_cq_open(p->domain, &(struct fi_cq_attr){ .size = 64,
							     .format = FI_CQ_FORMAT_DATA,
							     .wait_obj = FI_WAIT_NONE },
				    &p->cq, NULL), 0);
	assert_int_equal(fi_endpoint(p->domain, p->info, &p->ep, NULL), 0);
	assert_int_equal(fi_ep_bind(p->ep, &p->eq->fid, 0), 0);
	assert_int_equal(fi_ep_bind(p->ep, &p->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	assert_int_equal(fi_enable(p->ep), 0);
	p->box = aligned_alloc(4096, 4096);
	p->src = aligned_alloc(4096, 4096);
	assert_non_null(p->box);
	assert_non_null(p->src);
	memset(p->box, 0, 4096);
	memset(p->src, 0, 4096);
	assert_int_equal(fi_mr_reg(p->domain, p->box, 4096, FI_REMOTE_WRITE, 0, 0, 0, &p->mr,
				   NULL), 0);
	assert_int_equal(fi_mr_reg(p->domain, p->src, 4096, FI_WRITE | FI_SEND, 0, 0, 0,
				   &p->src_mr, NULL), 0);
	p->src_desc = fi_mr_desc(p->src_mr);
	memcpy(pdata, "hostile", 7);
	plen = 7;
	if (with_trailer) {
		put_trailer(pdata + plen, (uintptr_t)p->box, (uint32_t)fi_mr_key(p->mr), PEER_ID);
		plen += 24;
	}
	assert_int_equal(fi_connect(p->ep, p->info->dest_addr, pdata, plen), 0);
}

/* The peer's FI_CONNECTED, and the server's mailbox from its trailer. */
static void peer_connected(struct peer *p, bool want_trailer)
{
	uint8_t raw[sizeof(struct fi_eq_cm_entry) + 256];
	uint32_t event;
	ssize_t n = -FI_EAGAIN;

	for (int k = 0; k < 5000 && n == -FI_EAGAIN; k++) {
		n = fi_eq_read(p->eq, &event, raw, sizeof(raw), 0);
		if (n == -FI_EAGAIN)
			sleep_ms(1);
	}
	assert_true(n > 0);
	assert_int_equal(event, FI_CONNECTED);
	n -= (ssize_t)sizeof(struct fi_eq_cm_entry);
	if (!want_trailer)
		return;
	assert_int_equal(n, 24);	/* an accept with no data of the consumer's */
	{
		const uint8_t *t = raw + sizeof(struct fi_eq_cm_entry);
		uint64_t a;
		uint32_t k, i, m;

		memcpy(&a, t, 8);
		memcpy(&k, t + 8, 4);
		memcpy(&i, t + 12, 4);
		memcpy(&m, t + 20, 4);
		assert_int_equal(le32toh(m), MAGIC);
		assert_int_equal(t[18], 1);
		p->addr = le64toh(a);
		p->key = le32toh(k);
		p->id = le32toh(i);
	}
}

static void peer_close(struct peer *p)
{
	fi_close(&p->ep->fid);
	fi_close(&p->mr->fid);
	fi_close(&p->src_mr->fid);
	fi_close(&p->cq->fid);
	fi_close(&p->eq->fid);
	fi_close(&p->domain->fid);
	fi_close(&p->fabric->fid);
	fi_freeinfo(p->info);
	free(p->box);
	free(p->src);
}

/* The next completion of the peer's CQ within ms (0: none came). */
static int peer_comp(struct peer *p, struct fi_cq_data_entry *c, unsigned ms)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;

	do {
		ssize_t n = fi_cq_read(p->cq, c, 1);

		if (n == 1)
			return 1;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry e = { 0 };

			fi_cq_readerr(p->cq, &e, 0);
			fail_msg("peer: completion error %d", e.err);
		}
		sleep_ms(1);
	} while (now_ns() < end);
	return 0;
}

/* Writes len bytes of src into the server's mailbox at off, with CQ data. */
static void peer_write(struct peer *p, const void *buf, size_t len, size_t off, uint64_t data)
{
	struct fi_cq_data_entry c;

	memcpy(p->src, buf, len);
	assert_int_equal(fi_writedata(p->ep, p->src, len, p->src_desc, data, 0, p->addr + off,
				      p->key, p->src), 0);
	assert_int_equal(peer_comp(p, &c, 5000), 1);
	assert_ptr_equal(c.op_context, p->src);
}

static void peer_request(struct peer *p, uint32_t slot, uint64_t id, uint32_t op, uint64_t addr,
			 uint32_t key, uint64_t operand, uint64_t data)
{
	uint8_t r[REQ_BYTES];
	uint64_t v;
	uint32_t w;

	v = htole64(id); memcpy(r, &v, 8);
	v = htole64(addr); memcpy(r + 8, &v, 8);
	v = htole64(operand); memcpy(r + 16, &v, 8);
	v = 0; memcpy(r + 24, &v, 8);
	w = htole32(key); memcpy(r + 32, &w, 4);
	w = htole32(op); memcpy(r + 36, &w, 4);
	peer_write(p, r, sizeof(r), (size_t)slot * REQ_BYTES, data);
}

static uint64_t cqd(uint32_t id, uint32_t check, uint32_t slot)
{
	return (uint64_t)id << 32 | (uint64_t)check << 16 | slot;
}

/* The next answer in the peer's mailbox: its slot, id, old value, status. */
static void expect_answer(struct peer *p, uint32_t slot, uint64_t id, uint64_t value,
			  uint32_t status)
{
	struct fi_cq_data_entry c;
	const uint8_t *a = p->box + REP_OFF + (size_t)slot * REP_BYTES;
	uint64_t got_id, got_value;
	uint32_t got_status;

	if (!peer_comp(p, &c, 5000))
		fail_msg("no answer for slot %u within 5 s", slot);
	assert_true(c.flags & FI_REMOTE_CQ_DATA);
	assert_int_equal(c.data, ANSWER | cqd(PEER_ID, CHECK, slot));
	memcpy(&got_id, a, 8);
	memcpy(&got_value, a + 8, 8);
	memcpy(&got_status, a + 16, 4);
	assert_int_equal(le64toh(got_id), id);
	assert_int_equal(le64toh(got_value), value);
	assert_int_equal(le32toh(got_status), status);
}

/* ------------------------------------------------------------- tests */

static void accept_peer(struct srv *s, struct peer *p, size_t want_plen)
{
	DAT_EVENT ev;
	DAT_CR_PARAM crp;
	DAT_CR_HANDLE cr;
	DAT_RETURN rc = DAT_TIMEOUT_EXPIRED;

	/* tcp sends the peer's request from inside its EQ reads: a peek
	 * drives it without taking an event */
	for (int k = 0; k < 500 && rc != DAT_SUCCESS; k++) {
		uint32_t event;

		(void)fi_eq_read(p->eq, &event, NULL, 0, FI_PEEK);
		rc = next(s->cr, 10, &ev);
	}
	assert_ok(rc);
	assert_int_equal(ev.event_number, DAT_CONNECTION_REQUEST_EVENT);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	assert_ok(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp));
	/* the trailer stripped, the consumer's bytes whole */
	assert_int_equal(crp.private_data_size, want_plen);
	assert_memory_equal(crp.private_data, "hostile", 7);
	assert_ok(dat_cr_accept(cr, s->ep, 0, NULL));
}

/* A server and the raw peer, connected (with_trailer: the peer announces
 * a mailbox). */
static void connect_pair(struct srv *s, struct peer *p, bool with_trailer)
{
	DAT_EVENT ev;

	srv_open(s);
	peer_connect(p, s, with_trailer);
	accept_peer(s, p, 7);
	peer_connected(p, with_trailer);
	assert_ok(next(s->conn, 5000, &ev));
	assert_int_equal(ev.event_number, DAT_CONNECTION_EVENT_ESTABLISHED);
}

static void test_hostile_mailbox_writes(void **state)
{
	struct srv s;
	struct peer p;
	struct fi_cq_data_entry c;
	DAT_LMR_TRIPLET l;
	DAT_EVENT ev;
	uint64_t target;

	(void)state;
	watchdog(__func__, 60);
	connect_pair(&s, &p, true);
	target = (uint64_t)s.reg;
	s.buf[0] = 40;

	/* dropped, unanswered: a wrong check byte, an unknown id, a slot
	 * beyond the mailbox, an answer for a request never made */
	peer_request(&p, 0, 1, 0, target, s.rctx, 1, cqd(p.id, 0x00, 0));
	peer_request(&p, 0, 2, 0, target, s.rctx, 1, cqd(p.id ^ 0x100000u, CHECK, 0));
	peer_request(&p, 0, 3, 0, target, s.rctx, 1, cqd(p.id, CHECK, 40));
	peer_write(&p, "\0\0\0\0\0\0\0\0", 8, REP_OFF, ANSWER | cqd(p.id, CHECK, 0));
	/* an unknown operation: EINVAL; a key of no atomic region: EACCES */
	peer_request(&p, 1, 0x11, 7, target, s.rctx, 1, cqd(p.id, CHECK, 1));
	expect_answer(&p, 1, 0x11, 0, EINVAL);
	peer_request(&p, 2, 0x22, 0, target, s.rctx ^ 0x5a5a, 1, cqd(p.id, CHECK, 2));
	expect_answer(&p, 2, 0x22, 0, EACCES);
	/* beyond the region: EACCES */
	peer_request(&p, 3, 0x33, 0, target + 4096, s.rctx, 1, cqd(p.id, CHECK, 3));
	expect_answer(&p, 3, 0x33, 0, EACCES);
	assert_int_equal(s.buf[0], 40);		/* none of them touched it */
	/* a good fetch-and-add: the old value, the memory added to */
	peer_request(&p, 4, 0x44, 0, target, s.rctx, 2, cqd(p.id, CHECK, 4));
	expect_answer(&p, 4, 0x44, 40, 0);
	assert_int_equal(s.buf[0], 42);
	assert_int_equal(peer_comp(&p, &c, 100), 0);	/* nothing else came */

	/* the DAT side saw none of it, and its connection still works */
	assert_err(next(s.rcv, 50, &ev), DAT_TIMEOUT_EXPIRED);
	assert_err(next(s.req, 50, &ev), DAT_TIMEOUT_EXPIRED);
	l = (DAT_LMR_TRIPLET){ .lmr_context = s.lctx, .virtual_address = s.reg + 64,
			       .segment_length = 64 };
	assert_ok(dat_ep_post_recv(s.ep, 1, &l, (DAT_DTO_COOKIE){ .as_64 = 5 },
				   DAT_COMPLETION_DEFAULT_FLAG));
	memcpy(p.src, "still here", 10);
	assert_int_equal(fi_send(p.ep, p.src, 10, p.src_desc, 0, p.src), 0);
	assert_ok(next(s.rcv, 5000, &ev));
	assert_int_equal(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	assert_int_equal(ev.event_data.dto_completion_event_data.transfered_length, 10);
	assert_memory_equal((char *)s.buf + 64, "still here", 10);
	srv_close(&s);
	peer_close(&p);
	alarm(0);
}

static void test_peer_without_mailbox(void **state)
{
	struct srv s;
	struct peer p;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
	DAT_EVENT ev;

	(void)state;
	watchdog(__func__, 60);
	connect_pair(&s, &p, false);
	l = (DAT_LMR_TRIPLET){ .lmr_context = s.lctx, .virtual_address = s.reg + 8,
			       .segment_length = 8 };
	r = (DAT_RMR_TRIPLET){ .rmr_context = 1, .virtual_address = 0, .segment_length = 8 };
	assert_err(dat_ib_post_fetch_and_add(s.ep, 1, &l, (DAT_DTO_COOKIE){ .as_64 = 1 }, &r,
					     DAT_COMPLETION_DEFAULT_FLAG), DAT_NOT_IMPLEMENTED);
	assert_err(next(s.req, 50, &ev), DAT_TIMEOUT_EXPIRED);
	srv_close(&s);
	peer_close(&p);
	alarm(0);
}

static DAT_COUNT pdata_max(DAT_IA_HANDLE ia)
{
	DAT_PROVIDER_ATTR pa;

	memset(&pa, 0, sizeof(pa));
	assert_ok(dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
	return pa.max_private_data_size;
}

static bool has_attr(DAT_IA_HANDLE ia, const char *name)
{
	DAT_PROVIDER_ATTR pa;

	memset(&pa, 0, sizeof(pa));
	assert_ok(dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
	for (DAT_COUNT i = 0; i < pa.num_provider_specific_attr; i++)
		if (strcmp(pa.provider_specific_attr[i].name, name) == 0)
			return true;
	return false;
}

/* A fetch-and-add of from's on to's word is DAT_NOT_IMPLEMENTED. */
static void fetch_add_refused(struct srv *from, struct srv *to)
{
	DAT_LMR_TRIPLET l = { .lmr_context = from->lctx, .virtual_address = from->reg + 8,
			      .segment_length = 8 };
	DAT_RMR_TRIPLET r = { .rmr_context = to->rctx, .virtual_address = to->reg,
			      .segment_length = 8 };

	assert_err(dat_ib_post_fetch_and_add(from->ep, 1, &l, (DAT_DTO_COOKIE){ .as_64 = 1 },
					     &r, DAT_COMPLETION_DEFAULT_FLAG), DAT_NOT_IMPLEMENTED);
}

/* An IA with ia_params atomics=0 (ofi-lo-noatomics) announces no atomics
 * and keeps 256 bytes of private data; against an IA that emulates them
 * (ofi-lo) each side sees the other's bytes alone, and atomics either way
 * are DAT_NOT_IMPLEMENTED. */
static void test_atomics_off_beside_on(void **state)
{
	struct srv off, on;
	struct sockaddr_in a = { .sin_family = AF_INET };
	uint8_t cpd[232], spd[256];
	DAT_CR_PARAM crp;
	DAT_EVENT ev;

	(void)state;
	watchdog(__func__, 60);
	srv_open_ia(&off, "ofi-lo-noatomics");
	srv_open(&on);
	assert_int_equal(pdata_max(off.ia), 256);
	assert_int_equal(pdata_max(on.ia), 232);
	assert_false(has_attr(off.ia, DAT_IB_ATTR_FETCH_AND_ADD));
	assert_true(has_attr(on.ia, DAT_IB_ATTR_FETCH_AND_ADD));
	for (size_t i = 0; i < sizeof(cpd); i++)
		cpd[i] = (uint8_t)(i * 7 + 1);
	for (size_t i = 0; i < sizeof(spd); i++)
		spd[i] = (uint8_t)(i * 13 + 5);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_ok(dat_ep_connect(on.ep, (DAT_IA_ADDRESS_PTR)&a, off.port, 5000000, sizeof(cpd),
				 cpd, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
	assert_ok(next(off.cr, 5000, &ev));
	assert_int_equal(ev.event_number, DAT_CONNECTION_REQUEST_EVENT);
	assert_ok(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL,
			       &crp));
	assert_int_equal(crp.private_data_size, sizeof(cpd));	/* the trailer stripped */
	assert_memory_equal(crp.private_data, cpd, sizeof(cpd));
	assert_ok(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, off.ep,
				sizeof(spd), spd));
	assert_ok(next(on.conn, 5000, &ev));
	assert_int_equal(ev.event_number, DAT_CONNECTION_EVENT_ESTABLISHED);
	assert_int_equal(ev.event_data.connect_event_data.private_data_size, sizeof(spd));
	assert_memory_equal(ev.event_data.connect_event_data.private_data, spd, sizeof(spd));
	assert_ok(next(off.conn, 5000, &ev));
	assert_int_equal(ev.event_number, DAT_CONNECTION_EVENT_ESTABLISHED);

	fetch_add_refused(&on, &off);
	fetch_add_refused(&off, &on);
	assert_int_equal(off.buf[0], 0);
	assert_int_equal(on.buf[0], 0);
	srv_close(&on);
	srv_close(&off);
	alarm(0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_mailbox_writes),
		cmocka_unit_test(test_peer_without_mailbox),
		cmocka_unit_test(test_atomics_off_beside_on),
	};

	default_dat_override();
	watchdog_install();
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
