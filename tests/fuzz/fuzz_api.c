/*
 * fuzz_api: the DAT entry points driven by a byte stream, through the stock
 * registry as any consumer calls them.  One IA (ofi-lo of the build tree's
 * dat.conf, DAT_OVERRIDE) is opened once; each input is read as a sequence
 * of calls (one opcode byte, then its arguments) that create, post to,
 * wait on (timeout 0 only: nothing blocks), query and free PZs, LMRs,
 * EVDs, CNOs, EPs, PSPs, RSPs, CRs, SRQs and RMRs, connect EPs to the IA's
 * own listeners, accept and reject.  Every handle argument is picked by a
 * byte: a live handle of the right type, one freed earlier in the input
 * (stale: the library keeps freed objects poisoned in its quarantine), a
 * live handle of another type, a forged one (our provider pointer in its
 * first word, fuzz bytes after it, never a live type tag: an object forged
 * with its tag cannot be told from a real one), a misaligned one, or NULL
 * (never for the handle a call is made on: libdat2 dereferences that one
 * itself to find the provider).
 *
 * Asserted: every call returns; a call whose handle is stale, forged,
 * misaligned or of another type returns DAT_INVALID_HANDLE, and a call
 * given such a handle as another argument fails; at the end of each input
 * everything still live frees with DAT_SUCCESS; at exit the IA closes
 * gracefully (nothing of ours left in it).  ASan, UBSan and LeakSanitizer
 * watch the rest; a watchdog (alarm) turns a call that does not return
 * into a crash with its name.
 *
 * Reproduce: DAT_OVERRIDE=$PWD/build/fuzz/dat.conf build/fuzz/fuzz/fuzz_api <crash-file>
 * (tests/fuzz/README.md).  FUZZ_TRACE=1 prints each call and the handles
 * it was given; FUZZ_CLOSE_EACH=1 closes (gracefully) and reopens the IA
 * after each input, to find the input that leaves something behind.
 */
#include <dat2/udat.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NSLOT	4		/* handles kept per type */
#define MAXOPS	96		/* calls per input */
#define MEMSZ	(64 * 1024)	/* the memory LMRs register */

enum kind { K_PZ, K_LMR, K_EVD, K_CNO, K_EP, K_PSP, K_RSP, K_CR, K_SRQ, K_RMR, K_N };
static const char *const kind_name[K_N] = {
	"PZ", "LMR", "EVD", "CNO", "EP", "PSP", "RSP", "CR", "SRQ", "RMR",
};

enum state { S_EMPTY, S_LIVE, S_STALE };
struct slot {
	DAT_HANDLE h;
	enum state st;
	DAT_LMR_CONTEXT lctx;		/* LMR: its contexts and where it lies */
	DAT_RMR_CONTEXT rctx;
	uint64_t off, len;
};

/* What a picked handle is, for the return code it must get. */
enum pick { P_LIVE, P_NULL, P_BAD };

static DAT_IA_HANDLE ia;
static DAT_EVD_HANDLE async_evd;
static DAT_PZ_HANDLE anchor;		/* a PZ kept for the run: its provider word */
static struct sockaddr_in self;		/* the IA's address */
static uint16_t port_base;		/* conn quals port_base .. +3 */
static struct slot slots[K_N][NSLOT];
static _Alignas(16) unsigned char mem[MEMSZ];
static _Alignas(16) unsigned char fake[8][96];	/* forged handles, one per argument */
static unsigned nfake;
static const char *volatile current = "?";
static bool trace;			/* FUZZ_TRACE set: each call on stderr */
static bool close_each;			/* FUZZ_CLOSE_EACH set: IA closed after each input */
static unsigned agent_calls;

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

static uint32_t u32(void)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v = v << 8 | u8();
	return v;
}

/* A count: mostly small, sometimes at or past a limit, sometimes anything. */
static DAT_COUNT count(void)
{
	uint8_t b = u8();

	switch (b >> 6) {
	case 0: return b & 63;
	case 1: return (DAT_COUNT)((b & 63) * 128);
	case 2: return (DAT_COUNT)((1u << (b & 31)) - (b & 32 ? 1u : 0u));
	default: return (DAT_COUNT)u32();
	}
}

/* -------------------------------------------------------------- handles */

static void fail(const char *what, const char *a, DAT_RETURN rc)
	__attribute__((noreturn));

/* "what" names the object with "%s": a. */
static void fail(const char *what, const char *a, DAT_RETURN rc)
{
	const char *maj = "?", *min = "", *pct = strstr(what, "%s");

	dat_strerror(rc, &maj, &min);
	fprintf(stderr, "fuzz_api: %s: %.*s%s%s (returned 0x%08x %s %s)\n", current,
		pct ? (int)(pct - what) : (int)strlen(what), what, pct ? a : "",
		pct ? pct + 2 : "", (unsigned)rc, maj, min);
	abort();
}

static struct slot *free_slot(enum kind k)
{
	for (int i = 0; i < NSLOT; i++)
		if (slots[k][i].st != S_LIVE) {
			memset(&slots[k][i], 0, sizeof(slots[k][i]));
			return &slots[k][i];
		}
	return NULL;
}

static struct slot *find(DAT_HANDLE h)
{
	for (int k = 0; k < K_N; k++)
		for (int i = 0; i < NSLOT; i++)
			if (slots[k][i].st != S_EMPTY && slots[k][i].h == h)
				return &slots[k][i];
	return NULL;
}

/* A forged handle: our provider word, then fuzz bytes that are no live
 * tag; each in a buffer of its own (a call may take several). */
static DAT_HANDLE forge(bool misalign)
{
	unsigned char *f = fake[nfake++ % 8];
	uint32_t tag;

	if (misalign)
		f += 1 + (u8() & 6);
	for (size_t i = 0; i < 64; i++)
		f[i] = u8();
	memcpy(f, (void *)anchor, sizeof(void *));
	memcpy(&tag, f + sizeof(void *), sizeof(tag));
	if (tag >= 0x0fd10001 && tag <= 0x0fd1000d) {
		tag = 0x0fd0dead;
		memcpy(f + sizeof(void *), &tag, sizeof(tag));
	}
	return (DAT_HANDLE)f;
}

/* A handle for an argument of kind k; *how says whether a call must take
 * it (a live handle of k) or reject it with DAT_INVALID_HANDLE. */
static DAT_HANDLE pick(enum kind k, enum pick *how)
{
	uint8_t b = u8();
	struct slot *s;
	enum kind other;

	*how = P_BAD;
	switch (b >> 5) {
	default:			/* 0-4: a slot of this kind */
		s = &slots[k][b & (NSLOT - 1)];
		if (s->st == S_EMPTY) {
			*how = P_NULL;
			return DAT_HANDLE_NULL;
		}
		if (s->st == S_LIVE)
			*how = P_LIVE;
		return s->h;
	case 5:				/* a handle of another kind */
		other = (enum kind)((b & 15) % K_N);
		s = &slots[other][(b >> 2) & (NSLOT - 1)];
		if (s->st == S_EMPTY) {
			*how = P_NULL;
			return DAT_HANDLE_NULL;
		}
		if (other == k && s->st == S_LIVE)
			*how = P_LIVE;
		return s->h;
	case 6:
		return forge(false);
	case 7:
		if (b & 1)
			return forge(true);
		*how = P_NULL;
		return DAT_HANDLE_NULL;
	}
}

/* The handle a call is made on (its first argument): never NULL, which
 * libdat2 dereferences to find the provider before any provider sees it
 * (dat_cr_accept(NULL, ...) crashes in libdat2 2.1.10): a forged one. */
static DAT_HANDLE on(enum kind k, enum pick *how)
{
	DAT_HANDLE h = pick(k, how);

	if (trace)
		fprintf(stderr, "  on %s %p (%s)\n", kind_name[k], (void *)h,
			*how == P_LIVE ? "live" : *how == P_NULL ? "null" : "bad");
	if (h == DAT_HANDLE_NULL) {
		*how = P_BAD;
		h = forge(false);
	}
	return h;
}

/* The handle a call is made on (its first argument) must be refused with
 * DAT_INVALID_HANDLE when it is not live: the entry points check it first. */
static void expect(enum pick how, DAT_RETURN rc, const char *arg)
{
	if (how != P_LIVE && DAT_GET_TYPE(rc) != DAT_INVALID_HANDLE)
		fail("a stale, forged, NULL or wrong-type %s handle was not refused", arg, rc);
}

/* Another handle argument: a stale, forged or wrong-type one must make the
 * call fail (with whichever error the first bad argument gets). */
static void refuse(enum pick how, DAT_RETURN rc, const char *arg)
{
	if (how == P_BAD && rc == DAT_SUCCESS)
		fail("a stale, forged or wrong-type %s handle argument was taken", arg, rc);
}

/* A successful free: the slot keeps the handle, now stale. */
static void freed(DAT_HANDLE h)
{
	struct slot *s = find(h);

	if (s)
		s->st = S_STALE;
}

static DAT_LMR_TRIPLET *triplets(DAT_COUNT *n)
{
	static DAT_LMR_TRIPLET t[8];
	uint8_t b = u8();

	*n = b & 7;
	if (b & 0x80)
		*n = count();
	for (int i = 0; i < 8; i++) {
		struct slot *s = &slots[K_LMR][u8() & (NSLOT - 1)];
		uint32_t off = u32() % MEMSZ;

		t[i].lmr_context = s->st != S_EMPTY && !(b & 0x40) ? s->lctx : u32();
		t[i].virtual_address = (DAT_VADDR)(uintptr_t)(mem + off);
		t[i].segment_length = u32() % (MEMSZ - off + 1);
		if (s->st != S_EMPTY && (b & 0x20)) {	/* inside that LMR */
			t[i].virtual_address = (DAT_VADDR)(uintptr_t)(mem + s->off);
			t[i].segment_length = s->len;
		}
	}
	return t;
}

static DAT_RMR_TRIPLET rmr_triplet(void)
{
	DAT_RMR_TRIPLET r;
	struct slot *s = &slots[K_LMR][u8() & (NSLOT - 1)];
	uint32_t off = u32() % MEMSZ;

	r.rmr_context = s->st != S_EMPTY ? s->rctx : u32();
	r.virtual_address = (DAT_VADDR)(uintptr_t)(mem + off);
	r.segment_length = u32() % (MEMSZ - off + 1);
	if (u8() & 1)
		r.virtual_address = u32();	/* anywhere: the provider checks */
	return r;
}

static DAT_EP_ATTR *ep_attr(DAT_EP_ATTR *a)
{
	if (u8() & 1)
		return NULL;			/* the defaults */
	memset(a, 0, sizeof(*a));
	a->service_type = u8() & 3 ? DAT_SERVICE_TYPE_RC : u32();
	a->max_message_size = u8() & 1 ? MEMSZ : u32();
	a->max_rdma_size = u8() & 1 ? MEMSZ : u32();
	a->qos = DAT_QOS_BEST_EFFORT;
	a->recv_completion_flags = u8();
	a->request_completion_flags = u8();
	a->max_recv_dtos = count();
	a->max_request_dtos = count();
	a->max_recv_iov = count();
	a->max_request_iov = count();
	a->max_rdma_read_in = count();
	a->max_rdma_read_out = count();
	a->max_rdma_read_iov = count();
	a->max_rdma_write_iov = count();
	a->srq_soft_hw = count();
	return a;
}

static DAT_CONN_QUAL qual(void)
{
	uint8_t b = u8();

	return b & 0x80 ? (DAT_CONN_QUAL)u32() : (DAT_CONN_QUAL)(port_base + (b & 3));
}

static void agent(DAT_PVOID data, DAT_EVD_HANDLE evd)
{
	(void)data;
	(void)evd;
	__atomic_add_fetch(&agent_calls, 1, __ATOMIC_RELAXED);
}

/* A CR arrived: keep it (or refuse it when there is no room). */
static void got_event(const DAT_EVENT *ev)
{
	struct slot *s;

	if (ev->event_number != DAT_CONNECTION_REQUEST_EVENT)
		return;
	s = free_slot(K_CR);
	if (!s) {
		current = "dat_cr_reject (no slot)";
		DAT_RETURN rc = dat_cr_reject(ev->event_data.cr_arrival_event_data.cr_handle, 0,
					      NULL);
		if (rc != DAT_SUCCESS)
			fail("a fresh CR could not be rejected%s", "", rc);
		return;
	}
	s->h = ev->event_data.cr_arrival_event_data.cr_handle;
	s->st = S_LIVE;
}

/* ---------------------------------------------------------------- calls */

#define CALL(name) (current = #name, alarm(10), name)

static void op(uint8_t code)
{
	enum pick how, h2, h3, h4, h5;
	DAT_HANDLE h, a, b, c, d;
	DAT_RETURN rc = DAT_SUCCESS;
	struct slot *s;
	DAT_COUNT n;
	DAT_EVENT ev;
	uint8_t pdata[300];
	union {
		DAT_EP_PARAM ep; DAT_EVD_PARAM evd; DAT_CNO_PARAM cno; DAT_LMR_PARAM lmr;
		DAT_RMR_PARAM rmr; DAT_PSP_PARAM psp; DAT_RSP_PARAM rsp; DAT_CR_PARAM cr;
		DAT_SRQ_PARAM srq; DAT_PZ_PARAM pz; DAT_IA_ATTR ia; DAT_EP_ATTR attr;
	} p;
	DAT_PROVIDER_ATTR pattr;

	memset(&p, 0, sizeof(p));
	for (size_t i = 0; i < sizeof(pdata); i++)
		pdata[i] = (uint8_t)i;
	switch (code % 56) {
	/* ----- PZ */
	case 0:
		if (!(s = free_slot(K_PZ)))
			break;
		if (CALL(dat_pz_create)(ia, &s->h) == DAT_SUCCESS)
			s->st = S_LIVE;
		break;
	case 1:
		h = on(K_PZ, &how);
		rc = CALL(dat_pz_query)(h, u8() & 1 ? DAT_PZ_FIELD_ALL : u32(), u8() & 7 ? &p.pz : NULL);
		expect(how, rc, "PZ");
		break;
	case 2:
		h = on(K_PZ, &how);
		rc = CALL(dat_pz_free)(h);
		expect(how, rc, "PZ");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	/* ----- LMR */
	case 3: {
		DAT_REGION_DESCRIPTION r;
		DAT_MEM_TYPE mt = u8() & 7 ? DAT_MEM_TYPE_VIRTUAL : u8() & 1 ? DAT_MEM_TYPE_LMR : u32();
		uint64_t off = u32() % MEMSZ, len = u32() % (MEMSZ - off + 1);
		DAT_VLEN rlen;
		DAT_VADDR raddr;

		if (!(s = free_slot(K_LMR)))
			break;
		a = pick(K_PZ, &how);
		if (mt == DAT_MEM_TYPE_LMR)
			r.for_lmr_handle = pick(K_LMR, &h2);
		else
			r.for_va = mem + off;
		rc = CALL(dat_lmr_create)(ia, mt, r, len, a, u8() & 3 ? DAT_MEM_PRIV_ALL_FLAG : u32(),
					  u8() & 3 ? DAT_VA_TYPE_VA : u32(), &s->h, &s->lctx, &s->rctx,
					  &rlen, &raddr);
		refuse(how, rc, "PZ");
		if (mt == DAT_MEM_TYPE_LMR)
			refuse(h2, rc, "LMR (region)");
		if (rc == DAT_SUCCESS) {
			s->st = S_LIVE;
			s->off = off;
			s->len = len;
		}
		break;
	}
	case 4:
		h = on(K_LMR, &how);
		rc = CALL(dat_lmr_query)(h, u8() & 1 ? DAT_LMR_FIELD_ALL : u32(), u8() & 7 ? &p.lmr : NULL);
		expect(how, rc, "LMR");
		break;
	case 5:
		h = on(K_LMR, &how);
		rc = CALL(dat_lmr_free)(h);
		expect(how, rc, "LMR");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	case 6: {
		DAT_LMR_TRIPLET *t = triplets(&n);

		if (u8() & 1)
			CALL(dat_lmr_sync_rdma_read)(ia, t, (DAT_VLEN)n);
		else
			CALL(dat_lmr_sync_rdma_write)(ia, t, (DAT_VLEN)n);
		break;
	}
	/* ----- EVD */
	case 7: {
		DAT_EVD_FLAGS fl = u8() & 7 ? (u8() & 0x3f) : u32();

		if (!(s = free_slot(K_EVD)))
			break;
		a = u8() & 3 ? DAT_HANDLE_NULL : pick(K_CNO, &how);
		rc = CALL(dat_evd_create)(ia, count(), a, fl, &s->h);
		if (a != DAT_HANDLE_NULL)
			refuse(how, rc, "CNO");
		if (rc == DAT_SUCCESS)
			s->st = S_LIVE;
		break;
	}
	case 8:
	case 9:
		h = on(K_EVD, &how);
		rc = CALL(dat_evd_dequeue)(h, &ev);
		expect(how, rc, "EVD");
		if (rc == DAT_SUCCESS)
			got_event(&ev);
		break;
	case 10:
		h = on(K_EVD, &how);
		rc = CALL(dat_evd_wait)(h, 0, u8() & 3 ? 1 : count(), &ev, &n);
		expect(how, rc, "EVD");
		if (rc == DAT_SUCCESS)
			got_event(&ev);
		break;
	case 11:
		h = on(K_EVD, &how);
		memset(&ev, 0, sizeof(ev));
		ev.event_number = u8() & 3 ? DAT_SOFTWARE_EVENT : u32();
		ev.evd_handle = h;
		ev.event_data.software_event_data.pointer = mem;
		rc = CALL(dat_evd_post_se)(h, &ev);
		expect(how, rc, "EVD");
		break;
	case 12:
		h = on(K_EVD, &how);
		rc = CALL(dat_evd_resize)(h, count());
		expect(how, rc, "EVD");
		break;
	case 13:
		h = on(K_EVD, &how);
		rc = CALL(dat_evd_query)(h, u8() & 1 ? DAT_EVD_FIELD_ALL : u32(), u8() & 7 ? &p.evd : NULL);
		expect(how, rc, "EVD");
		break;
	case 14:
		h = on(K_EVD, &how);
		switch (u8() & 3) {
		case 0: rc = CALL(dat_evd_enable)(h); break;
		case 1: rc = CALL(dat_evd_disable)(h); break;
		case 2: rc = CALL(dat_evd_set_unwaitable)(h); break;
		default: rc = CALL(dat_evd_clear_unwaitable)(h); break;
		}
		expect(how, rc, "EVD");
		break;
	case 15:
		h = on(K_EVD, &how);
		a = u8() & 1 ? DAT_HANDLE_NULL : pick(K_CNO, &h2);
		rc = CALL(dat_evd_modify_cno)(h, a);
		expect(how, rc, "EVD");
		if (a != DAT_HANDLE_NULL)
			refuse(h2, rc, "CNO");
		break;
	case 16:
		h = on(K_EVD, &how);
		rc = CALL(dat_evd_free)(h);
		expect(how, rc, "EVD");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	/* ----- CNO */
	case 17: {
		DAT_OS_WAIT_PROXY_AGENT ag = { mem, u8() & 1 ? agent : NULL };

		if (!(s = free_slot(K_CNO)))
			break;
		rc = CALL(dat_cno_create)(ia, ag, &s->h);
		if (rc == DAT_SUCCESS)
			s->st = S_LIVE;
		break;
	}
	case 18: {
		DAT_EVD_HANDLE e;

		h = on(K_CNO, &how);
		rc = CALL(dat_cno_wait)(h, 0, &e);
		expect(how, rc, "CNO");
		break;
	}
	case 19: {
		DAT_OS_WAIT_PROXY_AGENT ag = { mem, u8() & 1 ? agent : NULL };

		h = on(K_CNO, &how);
		rc = u8() & 1 ? CALL(dat_cno_modify_agent)(h, ag) :
			CALL(dat_cno_query)(h, u8() & 1 ? DAT_CNO_FIELD_ALL : u32(),
					    u8() & 7 ? &p.cno : NULL);
		expect(how, rc, "CNO");
		break;
	}
	case 20:
		h = on(K_CNO, &how);
		rc = CALL(dat_cno_free)(h);
		expect(how, rc, "CNO");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	/* ----- EP */
	case 21:
	case 22: {
		bool srq = code % 56 == 22;

		if (!(s = free_slot(K_EP)))
			break;
		a = pick(K_PZ, &how);
		b = pick(K_EVD, &h2);
		c = pick(K_EVD, &h3);
		d = pick(K_EVD, &h4);
		h5 = P_NULL;
		if (srq)
			rc = CALL(dat_ep_create_with_srq)(ia, a, b, c, d, pick(K_SRQ, &h5),
							  ep_attr(&p.attr), &s->h);
		else
			rc = CALL(dat_ep_create)(ia, a, b, c, d, ep_attr(&p.attr), &s->h);
		refuse(how, rc, "PZ");
		refuse(h2, rc, "recv EVD");
		refuse(h3, rc, "request EVD");
		refuse(h4, rc, "connect EVD");
		refuse(h5, rc, "SRQ");
		if (rc == DAT_SUCCESS)
			s->st = S_LIVE;
		break;
	}
	case 23:
		h = on(K_EP, &how);
		rc = CALL(dat_ep_query)(h, u8() & 1 ? DAT_EP_FIELD_ALL : u32(), u8() & 7 ? &p.ep : NULL);
		expect(how, rc, "EP");
		break;
	case 24:
		h = on(K_EP, &how);
		p.ep.pz_handle = pick(K_PZ, &h2);
		p.ep.recv_evd_handle = pick(K_EVD, &h2);
		p.ep.request_evd_handle = pick(K_EVD, &h2);
		p.ep.connect_evd_handle = pick(K_EVD, &h2);
		if (ep_attr(&p.ep.ep_attr) == NULL)
			memset(&p.ep.ep_attr, 0, sizeof(p.ep.ep_attr));
		rc = CALL(dat_ep_modify)(h, u32(), u8() & 7 ? &p.ep : NULL);
		expect(how, rc, "EP");
		break;
	case 25: {
		DAT_EP_STATE st;
		DAT_BOOLEAN ri, qi;
		DAT_COUNT x, y;

		h = on(K_EP, &how);
		switch (u8() & 3) {
		case 0: rc = CALL(dat_ep_get_status)(h, &st, &ri, &qi); break;
		case 1: rc = CALL(dat_ep_recv_query)(h, &x, &y); break;
		case 2: rc = CALL(dat_ep_set_watermark)(h, count(), count()); break;
		default: rc = CALL(dat_ep_reset)(h); break;
		}
		expect(how, rc, "EP");
		break;
	}
	case 26:
	case 27: {
		DAT_LMR_TRIPLET *t;
		DAT_DTO_COOKIE ck = { .as_64 = u32() };
		DAT_COMPLETION_FLAGS fl = u8() & 3 ? u8() & 0x3f : u32();

		h = on(K_EP, &how);
		t = triplets(&n);
		if (code % 56 == 26)
			rc = CALL(dat_ep_post_recv)(h, n, t, ck, fl);
		else
			rc = CALL(dat_ep_post_send)(h, n, t, ck, fl);
		expect(how, rc, "EP");
		break;
	}
	case 28:
	case 29: {
		DAT_LMR_TRIPLET *t;
		DAT_RMR_TRIPLET r;
		DAT_DTO_COOKIE ck = { .as_64 = u32() };
		DAT_COMPLETION_FLAGS fl = u8() & 3 ? u8() & 0x3f : u32();

		h = on(K_EP, &how);
		t = triplets(&n);
		r = rmr_triplet();
		if (code % 56 == 28)
			rc = CALL(dat_ep_post_rdma_write)(h, n, t, ck, &r, fl);
		else
			rc = CALL(dat_ep_post_rdma_read)(h, n, t, ck, &r, fl);
		expect(how, rc, "EP");
		break;
	}
	case 30:
	case 31:
	case 32: {
		struct sockaddr_in to = self;
		DAT_TIMEOUT tmo = u8() & 1 ? DAT_TIMEOUT_INFINITE : u32() % 2000000;
		DAT_COUNT plen = u8() & 3 ? u8() : count();

		h = on(K_EP, &how);
		rc = CALL(dat_ep_connect)(h, (DAT_IA_ADDRESS_PTR)&to, qual(), tmo, plen,
					  u8() & 7 ? pdata : NULL, DAT_QOS_BEST_EFFORT,
					  DAT_CONNECT_DEFAULT_FLAG);
		expect(how, rc, "EP");
		break;
	}
	case 33:
		h = on(K_EP, &how);
		a = pick(K_EP, &h2);
		rc = CALL(dat_ep_dup_connect)(h, a, u8() & 1 ? DAT_TIMEOUT_INFINITE : u32(), u8(),
					      pdata, DAT_QOS_BEST_EFFORT);
		expect(how, rc, "EP");
		refuse(h2, rc, "dup EP");
		break;
	case 34:
		h = on(K_EP, &how);
		rc = CALL(dat_ep_disconnect)(h, u8() & 1 ? DAT_CLOSE_ABRUPT_FLAG :
					     u8() & 1 ? DAT_CLOSE_GRACEFUL_FLAG : u32());
		expect(how, rc, "EP");
		break;
	case 35:
		h = on(K_EP, &how);
		rc = CALL(dat_ep_free)(h);
		expect(how, rc, "EP");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	/* ----- PSP, RSP, CR */
	case 36: {
		DAT_PSP_FLAGS fl = u8() & 3 ? DAT_PSP_CONSUMER_FLAG :
			u8() & 1 ? DAT_PSP_PROVIDER_FLAG : u32();
		DAT_CONN_QUAL q;

		if (!(s = free_slot(K_PSP)))
			break;
		a = pick(K_EVD, &how);
		if (u8() & 1) {
			rc = CALL(dat_psp_create_any)(ia, &q, a, fl, &s->h);
		} else {
			rc = CALL(dat_psp_create)(ia, qual(), a, fl, &s->h);
		}
		refuse(how, rc, "EVD");
		if (rc == DAT_SUCCESS)
			s->st = S_LIVE;
		break;
	}
	case 37:
		h = on(K_PSP, &how);
		rc = CALL(dat_psp_query)(h, u8() & 1 ? DAT_PSP_FIELD_ALL : u32(), u8() & 7 ? &p.psp : NULL);
		expect(how, rc, "PSP");
		break;
	case 38:
		h = on(K_PSP, &how);
		rc = CALL(dat_psp_free)(h);
		expect(how, rc, "PSP");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	case 39:
		if (!(s = free_slot(K_RSP)))
			break;
		a = pick(K_EP, &how);
		b = pick(K_EVD, &h2);
		rc = CALL(dat_rsp_create)(ia, qual(), a, b, &s->h);
		refuse(how, rc, "EP");
		refuse(h2, rc, "EVD");
		if (rc == DAT_SUCCESS)
			s->st = S_LIVE;
		break;
	case 40:
		h = on(K_RSP, &how);
		rc = CALL(dat_rsp_query)(h, u8() & 1 ? DAT_RSP_FIELD_ALL : u32(), u8() & 7 ? &p.rsp : NULL);
		expect(how, rc, "RSP");
		break;
	case 41:
		h = on(K_RSP, &how);
		rc = CALL(dat_rsp_free)(h);
		expect(how, rc, "RSP");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	case 42:
		h = on(K_CR, &how);
		rc = CALL(dat_cr_query)(h, u8() & 1 ? DAT_CR_FIELD_ALL : u32(), u8() & 7 ? &p.cr : NULL);
		expect(how, rc, "CR");
		break;
	case 43: {
		DAT_COUNT plen = u8() & 3 ? u8() : count();

		h = on(K_CR, &how);
		h2 = P_NULL;
		a = u8() & 3 ? pick(K_EP, &h2) : DAT_HANDLE_NULL;
		rc = CALL(dat_cr_accept)(h, a, plen, u8() & 7 ? pdata : NULL);
		expect(how, rc, "CR");
		refuse(h2, rc, "EP");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	}
	case 44: {
		DAT_COUNT plen = u8() & 3 ? u8() : count();

		h = on(K_CR, &how);
		rc = CALL(dat_cr_reject)(h, plen, u8() & 7 ? pdata : NULL);
		expect(how, rc, "CR");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	}
	case 45:
		h = on(K_CR, &how);
		rc = CALL(dat_cr_handoff)(h, qual());
		expect(how, rc, "CR");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	/* ----- SRQ */
	case 46: {
		DAT_SRQ_ATTR sa = { count(), count(), count() };

		if (!(s = free_slot(K_SRQ)))
			break;
		a = pick(K_PZ, &how);
		rc = CALL(dat_srq_create)(ia, a, u8() & 7 ? &sa : NULL, &s->h);
		refuse(how, rc, "PZ");
		if (rc == DAT_SUCCESS)
			s->st = S_LIVE;
		break;
	}
	case 47: {
		DAT_LMR_TRIPLET *t;
		DAT_DTO_COOKIE ck = { .as_64 = u32() };

		h = on(K_SRQ, &how);
		t = triplets(&n);
		rc = CALL(dat_srq_post_recv)(h, n, t, ck);
		expect(how, rc, "SRQ");
		break;
	}
	case 48:
		h = on(K_SRQ, &how);
		switch (u8() & 3) {
		case 0: rc = CALL(dat_srq_resize)(h, count()); break;
		case 1: rc = CALL(dat_srq_set_lw)(h, count()); break;
		default:
			rc = CALL(dat_srq_query)(h, u8() & 1 ? DAT_SRQ_FIELD_ALL : u32(),
						 u8() & 7 ? &p.srq : NULL);
			break;
		}
		expect(how, rc, "SRQ");
		break;
	case 49:
		h = on(K_SRQ, &how);
		rc = CALL(dat_srq_free)(h);
		expect(how, rc, "SRQ");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	/* ----- RMR */
	case 50:
		if (!(s = free_slot(K_RMR)))
			break;
		a = pick(K_PZ, &how);
		rc = CALL(dat_rmr_create)(a, &s->h);
		refuse(how, rc, "PZ");
		if (rc == DAT_SUCCESS)
			s->st = S_LIVE;
		break;
	case 51: {
		DAT_LMR_TRIPLET *t;
		DAT_RMR_CONTEXT ctx;
		DAT_RMR_COOKIE ck = { .as_64 = u32() };

		h = on(K_RMR, &how);
		a = pick(K_LMR, &h2);
		t = triplets(&n);
		b = pick(K_EP, &h3);
		rc = CALL(dat_rmr_bind)(h, a, t, u8() & 1 ? DAT_MEM_PRIV_ALL_FLAG : u32(),
					u8() & 3 ? DAT_VA_TYPE_VA : u32(), b, ck, u8(), &ctx);
		expect(how, rc, "RMR");
		if (t[0].segment_length)	/* an unbind ignores the LMR */
			refuse(h2, rc, "LMR");
		refuse(h3, rc, "EP");
		break;
	}
	case 52:
		h = on(K_RMR, &how);
		rc = CALL(dat_rmr_query)(h, u8() & 1 ? DAT_RMR_FIELD_ALL : u32(), u8() & 7 ? &p.rmr : NULL);
		expect(how, rc, "RMR");
		break;
	case 53:
		h = on(K_RMR, &how);
		rc = CALL(dat_rmr_free)(h);
		expect(how, rc, "RMR");
		if (rc == DAT_SUCCESS)
			freed(h);
		break;
	/* ----- any handle */
	case 54: {
		enum kind k = (enum kind)(u8() % K_N);
		DAT_CONTEXT ctx = { .as_64 = u32() };
		DAT_HANDLE_TYPE t;

		h = on(k, &how);
		if (find(h) && find(h)->st == S_LIVE)
			how = P_LIVE;	/* these take a live handle of any type */
		switch (u8() % 3) {
		case 0: rc = CALL(dat_set_consumer_context)(h, ctx); break;
		case 1: rc = CALL(dat_get_consumer_context)(h, &ctx); break;
		default: rc = CALL(dat_get_handle_type)(h, &t); break;
		}
		expect(how, rc, kind_name[k]);
		break;
	}
	default:
		rc = CALL(dat_ia_query)(ia, &a, u8() & 1 ? DAT_IA_FIELD_ALL : u32(), &p.ia,
					u8() & 1 ? DAT_PROVIDER_FIELD_ALL : u32(), &pattr);
		if (rc != DAT_SUCCESS && DAT_GET_TYPE(rc) != DAT_INVALID_PARAMETER)
			fail("dat_ia_query on the live IA failed%s", "", rc);
		break;
	}
	alarm(0);
	if (trace)
		fprintf(stderr, "%s -> 0x%08x\n", current, (unsigned)rc);
}

/* ------------------------------------------------------------- teardown */

/* Take every event out of the live EVDs (CRs among them get a slot, or
 * are refused). */
static void drain(void)
{
	for (int i = 0; i < NSLOT; i++) {
		struct slot *s = &slots[K_EVD][i];
		DAT_EVENT ev;

		for (int n = 0; s->st == S_LIVE && n < 4096; n++) {
			current = "dat_evd_dequeue (teardown)";
			if (dat_evd_dequeue(s->h, &ev) != DAT_SUCCESS)
				break;
			got_event(&ev);
		}
	}
}

/* Free every live object of kind k; one may hold another of its kind (an
 * LMR created from an LMR), so in rounds, as many as there are slots.  An
 * EVD the progress thread is posting an event to at that moment (a late
 * connection event of an EP freed just before: conn.c holds a reference
 * on the EVD from the event's translation to its post) refuses
 * dat_evd_free with DAT_INVALID_STATE_EVD_IN_USE for that moment: EVDs get
 * up to a second of further rounds. */
static void free_all(enum kind k, DAT_RETURN (*fn)(DAT_HANDLE), const char *what)
{
	DAT_RETURN rc = DAT_SUCCESS;
	int rounds = k == K_EVD ? 500 : NSLOT;

	for (int round = 0; round < rounds; round++) {
		bool left = false;

		if (round >= NSLOT)
			usleep(2000);
		for (int i = 0; i < NSLOT; i++) {
			struct slot *s = &slots[k][i];

			if (s->st != S_LIVE)
				continue;
			current = what;
			alarm(10);
			rc = fn(s->h);
			alarm(0);
			if (rc == DAT_SUCCESS)
				s->st = S_STALE;
			else
				left = true;
		}
		if (!left)
			break;
	}
	for (int i = 0; i < NSLOT; i++)
		if (slots[k][i].st == S_LIVE)
			fail("a live %s did not free at the end of the input", kind_name[k], rc);
}

static DAT_RETURN cr_reject0(DAT_HANDLE h) { return dat_cr_reject(h, 0, NULL); }
static DAT_RETURN rsp_free(DAT_HANDLE h) { return dat_rsp_free(h); }
static DAT_RETURN psp_free(DAT_HANDLE h) { return dat_psp_free(h); }
static DAT_RETURN rmr_free(DAT_HANDLE h) { return dat_rmr_free(h); }
static DAT_RETURN ep_free(DAT_HANDLE h) { return dat_ep_free(h); }
static DAT_RETURN srq_free(DAT_HANDLE h) { return dat_srq_free(h); }
static DAT_RETURN lmr_free(DAT_HANDLE h) { return dat_lmr_free(h); }
static DAT_RETURN evd_free(DAT_HANDLE h) { return dat_evd_free(h); }
static DAT_RETURN cno_free(DAT_HANDLE h) { return dat_cno_free(h); }
static DAT_RETURN pz_free(DAT_HANDLE h) { return dat_pz_free(h); }

static void teardown(void)
{
	drain();
	free_all(K_CR, cr_reject0, "dat_cr_reject (teardown)");
	free_all(K_RSP, rsp_free, "dat_rsp_free (teardown)");
	free_all(K_PSP, psp_free, "dat_psp_free (teardown)");
	free_all(K_RMR, rmr_free, "dat_rmr_free (teardown)");
	free_all(K_EP, ep_free, "dat_ep_free (teardown)");
	drain();		/* CRs that came meanwhile */
	free_all(K_CR, cr_reject0, "dat_cr_reject (teardown)");
	free_all(K_SRQ, srq_free, "dat_srq_free (teardown)");
	free_all(K_LMR, lmr_free, "dat_lmr_free (teardown)");
	free_all(K_EVD, evd_free, "dat_evd_free (teardown)");
	free_all(K_CNO, cno_free, "dat_cno_free (teardown)");
	free_all(K_PZ, pz_free, "dat_pz_free (teardown)");
	memset(slots, 0, sizeof(slots));
}

/* ----------------------------------------------------------- the driver */

static void watchdog_fire(int sig)
{
	static const char m[] = "\nfuzz_api: watchdog: a call did not return in 10 s: ";

	(void)sig;
	if (write(2, m, sizeof(m) - 1) < 0 ||
	    write(2, current, strlen(current)) < 0 || write(2, "\n", 1) < 0)
		_exit(3);
	abort();		/* libFuzzer reports it as a crash, with the input */
}

static void open_ia(void);

static void close_ia(void)
{
	DAT_RETURN rc;

	current = "dat_pz_free (anchor)";
	alarm(10);
	rc = dat_pz_free(anchor);
	if (rc != DAT_SUCCESS)
		fail("the anchor PZ did not free%s", "", rc);
	current = "dat_ia_close (graceful, at exit)";
	rc = dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG);
	if (rc != DAT_SUCCESS)
		fail("the IA did not close gracefully at exit: something was left in it%s", "", rc);
	alarm(0);
}

/* LeakSanitizer: libdat2's dlopen of the provider, and the constructors of
 * the libraries it pulls in, allocate what no unload frees (dat_test.h). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:_dl_init\n";
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sigaction sa;

	(void)argc;
	(void)argv;
	trace = getenv("FUZZ_TRACE") != NULL;
	if (!getenv("DAT_OVERRIDE")) {
		fprintf(stderr, "fuzz_api: set DAT_OVERRIDE to the build tree's dat.conf "
			"(build/fuzz/dat.conf)\n");
		exit(2);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watchdog_fire;
	sigaction(SIGALRM, &sa, NULL);
	close_each = getenv("FUZZ_CLOSE_EACH") != NULL;
	open_ia();
	atexit(close_ia);
	return 0;
}

/* The IA and the anchor PZ, and the IA's address. */
static void open_ia(void)
{
	char *name = getenv("FUZZ_IA") ? getenv("FUZZ_IA") : "ofi-lo";
	DAT_IA_ATTR attr;
	DAT_RETURN rc;
	int fd;

	async_evd = DAT_HANDLE_NULL;	/* in and out: NULL asks for a new one */
	rc = dat_ia_open(name, 8, &async_evd, &ia);
	if (rc != DAT_SUCCESS)
		fail("dat_ia_open(%s) failed", name, rc);
	rc = dat_pz_create(ia, &anchor);
	if (rc != DAT_SUCCESS)
		fail("dat_pz_create%s failed", "", rc);
	rc = dat_ia_query(ia, NULL, DAT_IA_FIELD_IA_ADDRESS_PTR, &attr, 0, NULL);
	if (rc != DAT_SUCCESS)
		fail("dat_ia_query%s failed", "", rc);
	memcpy(&self, attr.ia_address_ptr, sizeof(self));
	/* four connection qualifiers: a port the kernel just had free, and
	 * the three after it */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd >= 0) {
		struct sockaddr_in a = { .sin_family = AF_INET };
		socklen_t al = sizeof(a);

		a.sin_addr = self.sin_addr;
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		    getsockname(fd, (struct sockaddr *)&a, &al) == 0)
			port_base = ntohs(a.sin_port);
		close(fd);
	}
	if (port_base == 0 || port_base > 65530)
		port_base = 40000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	in = data;
	in_len = size;
	for (int i = 0; i < MAXOPS && in_len; i++)
		op(u8());
	teardown();
	if (close_each) {	/* FUZZ_CLOSE_EACH: which input leaves something */
		close_ia();
		open_ia();
	}
	return 0;
}
