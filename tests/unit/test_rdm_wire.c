/*
 * The RDM backend's wire format (src/fabric/rdm/wire.c, docs/rdm.md):
 * every message type round-trips; a stream delivered a byte at a time
 * yields each message once whole; and each rule of the decoder refuses the
 * bytes that break it, with its reason, at the first byte that shows it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "fabric/rdm/wire.h"

static struct dfi_rdm_msg sample(enum dfi_rdm_type t)
{
	struct dfi_rdm_msg m;

	memset(&m, 0, sizeof(m));
	m.type = t;
	switch (t) {
	case DFI_RDM_REQ:
	case DFI_RDM_REP:
		m.ia = 0x1122334455667788ull;
		m.src_id = 7;
		m.src_gen = 0x7fff;	/* the largest generation, an SRQ's tag class */
		m.addr_len = 32;
		for (int i = 0; i < 32; i++)
			m.addr[i] = (uint8_t)(0xa0 + i);
		m.plen = 256;
		for (int i = 0; i < 256; i++)
			m.pdata[i] = (uint8_t)i;
		m.bye_addr = 0x7f00deadbee8ull;
		m.bye_key = 0x55aa0001;
		if (t == DFI_RDM_REQ) {
			m.qual = 45248;
			m.flags = DFI_RDM_REQ_UD;
		} else {
			m.dst_id = 0xfffffffe;
			m.dst_gen = 1;
		}
		break;
	case DFI_RDM_REJ:
		m.dst_id = 9;
		m.dst_gen = 2;
		m.reason = DFI_RDM_REJ_CONSUMER;
		m.plen = 3;
		memcpy(m.pdata, "no!", 3);
		break;
	case DFI_RDM_KEY:
		m.dst_id = 4;
		m.dst_gen = 5;
		m.rmr = 0xdeadbeef;
		break;
	case DFI_RDM_ATOMIC:
		m.dst_id = 6;
		m.dst_gen = 7;
		m.op = DFI_RDM_ATOMIC_CSWAP;
		m.id = 0x0000000500000003ull;
		m.addr64 = 0x7f0000002008ull;
		m.rmr = 0x1234;
		m.operand = 0x98765;
		m.compare = 0x12345;
		break;
	case DFI_RDM_ATOMICREP:
		m.dst_id = 8;
		m.dst_gen = 9;
		m.id = 0x0000000500000003ull;
		m.status = 13;
		m.value = 0xffffffffffffffffull;
		break;
	case DFI_RDM_KEYREP:
		m.rmr = 0xdeadbeef;
		m.status = 0;
		m.base = 0x7f0000001000ull;
		m.key = 0x123456789abcull;
		break;
	default:
		m.dst_id = 1;
		m.dst_gen = 2;
		m.src_id = 3;
		m.src_gen = 4;
		if (t == DFI_RDM_DREQ || t == DFI_RDM_DREP)
			m.est = 0x89abcdef;	/* all 32 bits travel */
	}
	return m;
}

static void test_round_trip_every_type(void **state)
{
	(void)state;
	for (int t = DFI_RDM_REQ; t < DFI_RDM_TYPE_END; t++) {
		struct dfi_rdm_msg in = sample((enum dfi_rdm_type)t), out;
		uint8_t buf[DFI_RDM_MSG_MAX];
		const char *why;
		ssize_t n = dfi_rdm_encode(&in, buf, sizeof(buf)), got;

		assert_true(n >= DFI_RDM_HDR_LEN);
		assert_true(n <= DFI_RDM_MSG_MAX);
		got = dfi_rdm_decode(buf, (size_t)n, &out, &why);
		if (got != n)
			fail_msg("%s: decoded %zd of %zd bytes (%s)", dfi_rdm_type_name((unsigned)t),
				 got, n, why ? why : "");
		assert_memory_equal(&in, &out, sizeof(in));
	}
}

/* A stream cut anywhere: "read more" until the last byte, then the whole
 * message; two messages back to back come out one at a time. */
static void test_stream_in_pieces(void **state)
{
	struct dfi_rdm_msg a = sample(DFI_RDM_REQ), b = sample(DFI_RDM_DREQ), out;
	uint8_t buf[2 * DFI_RDM_MSG_MAX];
	ssize_t na, nb;
	const char *why;

	(void)state;
	na = dfi_rdm_encode(&a, buf, sizeof(buf));
	nb = dfi_rdm_encode(&b, buf + na, sizeof(buf) - (size_t)na);
	assert_true(na > 0 && nb > 0);
	for (ssize_t len = 0; len < na; len++)
		assert_int_equal(dfi_rdm_decode(buf, (size_t)len, &out, &why), 0);
	assert_int_equal(dfi_rdm_decode(buf, (size_t)(na + nb), &out, &why), na);
	assert_int_equal(out.type, DFI_RDM_REQ);
	assert_int_equal(dfi_rdm_decode(buf + na, (size_t)nb, &out, &why), nb);
	assert_int_equal(out.type, DFI_RDM_DREQ);
	assert_int_equal(out.src_id, 3);
}

/* Decode bytes edited by `edit` after encoding m; expect -EPROTO whose
 * reason contains `want`. */
static void expect_bad(struct dfi_rdm_msg m, void (*edit)(uint8_t *, ssize_t *), const char *want)
{
	uint8_t buf[DFI_RDM_MSG_MAX + 64];
	struct dfi_rdm_msg out;
	const char *why = NULL;
	ssize_t n = dfi_rdm_encode(&m, buf, sizeof(buf)), got;

	assert_true(n > 0);
	edit(buf, &n);
	got = dfi_rdm_decode(buf, (size_t)n, &out, &why);
	if (got != -EPROTO || !why || !strstr(why, want))
		fail_msg("expected -EPROTO (%s), got %zd (%s)", want, got, why ? why : "no reason");
}

static void set_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void e_magic(uint8_t *b, ssize_t *n) { b[0] ^= 1; *n = 4; }	/* at once */
static void e_version(uint8_t *b, ssize_t *n) { b[4] = DFI_RDM_VERSION + 1; *n = 5; }
/* version 1 had no goodbye word in REQ and REP */
static void e_version1(uint8_t *b, ssize_t *n) { b[4] = 1; *n = 5; }
static void e_type0(uint8_t *b, ssize_t *n) { b[5] = 0; *n = 6; }
static void e_type_hi(uint8_t *b, ssize_t *n) { b[5] = DFI_RDM_TYPE_END; (void)n; }
static void e_flags(uint8_t *b, ssize_t *n) { b[6] = 1; (void)n; }
static void e_reserved(uint8_t *b, ssize_t *n) { b[15] = 1; (void)n; }
/* a body length claiming 4 GiB: refused from the header alone */
static void e_huge(uint8_t *b, ssize_t *n) { set_u32(b + 8, 0xffffffffu); *n = DFI_RDM_HDR_LEN; }
static void e_short(uint8_t *b, ssize_t *n) { set_u32(b + 8, 4); (void)n; }
static void e_addr0(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 14] = 0; b[DFI_RDM_HDR_LEN + 15] = 0; (void)n; }
static void e_addr_big(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 14] = 65; (void)n; }
static void e_plen_big(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 24] = 0x01; b[DFI_RDM_HDR_LEN + 25] = 0x01; (void)n; }
static void e_plen_off(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 24] = 255; b[DFI_RDM_HDR_LEN + 25] = 0; (void)n; }
static void e_reason(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 6] = 0; (void)n; }
static void e_rej_pad(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 7] = 1; (void)n; }
static void e_rtu_pad(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 14] = 1; (void)n; }
static void e_gen(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 5] = 0x80; (void)n; }
static void e_req_pad(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 27] = 1; (void)n; }
static void e_req_bye_pad(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 40] = 1; (void)n; }
static void e_rep_bye_pad(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 39] = 1; (void)n; }
static void e_rtu_long(uint8_t *b, ssize_t *n) { set_u32(b + 8, 20); *n += 4; }
static void e_atomic_op(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 6] = 3; (void)n; }
static void e_atomic_pad(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 29] = 1; (void)n; }
static void e_fadd_cmp(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 6] = DFI_RDM_ATOMIC_FADD; (void)n; }
static void e_arep_pad(uint8_t *b, ssize_t *n) { b[DFI_RDM_HDR_LEN + 21] = 1; (void)n; }

static void test_bad_input_refused(void **state)
{
	(void)state;
	expect_bad(sample(DFI_RDM_REQ), e_magic, "magic");
	expect_bad(sample(DFI_RDM_REQ), e_version, "version");
	expect_bad(sample(DFI_RDM_REQ), e_version1, "version");
	expect_bad(sample(DFI_RDM_REQ), e_type0, "type");
	expect_bad(sample(DFI_RDM_REQ), e_type_hi, "type");
	expect_bad(sample(DFI_RDM_REQ), e_flags, "reserved header");
	expect_bad(sample(DFI_RDM_REQ), e_reserved, "reserved header");
	expect_bad(sample(DFI_RDM_REQ), e_huge, "longer");
	expect_bad(sample(DFI_RDM_REQ), e_short, "shorter");
	expect_bad(sample(DFI_RDM_REQ), e_addr0, "address length");
	expect_bad(sample(DFI_RDM_REQ), e_addr_big, "address length");
	expect_bad(sample(DFI_RDM_REQ), e_plen_big, "256");
	expect_bad(sample(DFI_RDM_REQ), e_plen_off, "disagree");
	expect_bad(sample(DFI_RDM_REQ), e_req_pad, "unknown REQ flags");
	expect_bad(sample(DFI_RDM_REQ), e_req_bye_pad, "reserved");
	expect_bad(sample(DFI_RDM_REP), e_rep_bye_pad, "reserved");
	expect_bad(sample(DFI_RDM_REJ), e_reason, "reason");
	expect_bad(sample(DFI_RDM_REJ), e_rej_pad, "reserved");
	expect_bad(sample(DFI_RDM_RTU), e_rtu_pad, "reserved");
	expect_bad(sample(DFI_RDM_RTU), e_gen, "14 bits");
	expect_bad(sample(DFI_RDM_RTU), e_rtu_long, "longer");
	expect_bad(sample(DFI_RDM_ATOMIC), e_atomic_op, "unknown atomic op");
	expect_bad(sample(DFI_RDM_ATOMIC), e_atomic_pad, "reserved");
	expect_bad(sample(DFI_RDM_ATOMIC), e_fadd_cmp, "compare value");
	expect_bad(sample(DFI_RDM_ATOMICREP), e_arep_pad, "reserved");
}

/* What cannot be encoded is refused, not truncated. */
static void test_encode_limits(void **state)
{
	struct dfi_rdm_msg m = sample(DFI_RDM_REQ);
	uint8_t buf[DFI_RDM_MSG_MAX];

	(void)state;
	m.addr_len = DFI_RDM_ADDR_MAX + 1;
	assert_int_equal(dfi_rdm_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = sample(DFI_RDM_REQ);
	m.plen = DFI_RDM_PDATA_MAX + 1;
	assert_int_equal(dfi_rdm_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = sample(DFI_RDM_REQ);
	m.src_gen = 0x8000;	/* a tag class of 2 */
	assert_int_equal(dfi_rdm_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = sample(DFI_RDM_REJ);
	m.reason = DFI_RDM_REJ_END;
	assert_int_equal(dfi_rdm_encode(&m, buf, sizeof(buf)), -EINVAL);
	/* flags: a REQ's, and only those defined */
	m = sample(DFI_RDM_REQ);
	m.flags = 0x2;
	assert_int_equal(dfi_rdm_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = sample(DFI_RDM_REP);
	m.flags = DFI_RDM_REQ_UD;
	assert_int_equal(dfi_rdm_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = sample(DFI_RDM_ATOMIC);
	m.op = 0;
	assert_int_equal(dfi_rdm_encode(&m, buf, sizeof(buf)), -EINVAL);
	m = sample(DFI_RDM_REQ);
	assert_int_equal(dfi_rdm_encode(&m, buf, 100), -ENOSPC);
	m.type = DFI_RDM_TYPE_END;
	assert_int_equal(dfi_rdm_encode(&m, buf, sizeof(buf)), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip_every_type),
		cmocka_unit_test(test_stream_in_pieces),
		cmocka_unit_test(test_bad_input_refused),
		cmocka_unit_test(test_encode_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
