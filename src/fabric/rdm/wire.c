/* The RDM backend's connection-manager messages: layouts in docs/rdm.md. */
#include "wire.h"

#include <errno.h>
#include <string.h>

/* A generation field: 14 bits of generation, and above them the class of
 * the end's tag, 0 (its own receives) or 1 (an SRQ's: docs/rdm.md). */
#define GEN_MAX 0x7fffu

/* Each body's fixed part; REQ and REP are followed by an address and
 * private data, REJ by private data. */
static const uint32_t fixed_len[DFI_RDM_TYPE_END] = {
	[DFI_RDM_REQ] = 44, [DFI_RDM_REP] = 40, [DFI_RDM_REJ] = 12, [DFI_RDM_RTU] = 16,
	[DFI_RDM_DREQ] = 20, [DFI_RDM_DREP] = 20, [DFI_RDM_KEY] = 16, [DFI_RDM_KEYREP] = 24,
	[DFI_RDM_ATOMIC] = 48, [DFI_RDM_ATOMICREP] = 32,
};

static const char *const type_names[DFI_RDM_TYPE_END] = {
	[DFI_RDM_REQ] = "REQ", [DFI_RDM_REP] = "REP", [DFI_RDM_REJ] = "REJ",
	[DFI_RDM_RTU] = "RTU", [DFI_RDM_DREQ] = "DREQ", [DFI_RDM_DREP] = "DREP",
	[DFI_RDM_KEY] = "KEY", [DFI_RDM_KEYREP] = "KEYREP",
	[DFI_RDM_ATOMIC] = "ATOMIC", [DFI_RDM_ATOMICREP] = "ATOMICREP",
};

const char *dfi_rdm_type_name(unsigned type)
{
	return type > 0 && type < DFI_RDM_TYPE_END ? type_names[type] : "?";
}

/* ------------------------------------------------------ little-endian bytes */

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)v); put16(p + 2, (uint16_t)(v >> 16)); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) { return get16(p) | (uint32_t)get16(p + 2) << 16; }
static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

/* ------------------------------------------------------------------ encode */

static uint32_t body_len(const struct dfi_rdm_msg *m)
{
	uint32_t n = fixed_len[m->type];

	if (m->type == DFI_RDM_REQ || m->type == DFI_RDM_REP)
		n += m->addr_len;
	if (m->type == DFI_RDM_REQ || m->type == DFI_RDM_REP || m->type == DFI_RDM_REJ)
		n += m->plen;
	return n;
}

ssize_t dfi_rdm_encode(const struct dfi_rdm_msg *m, void *buf, size_t cap)
{
	uint8_t *p = buf, *b;
	uint32_t n;

	if (m->type <= 0 || m->type >= DFI_RDM_TYPE_END || m->addr_len > DFI_RDM_ADDR_MAX ||
	    m->plen > DFI_RDM_PDATA_MAX || m->src_gen > GEN_MAX || m->dst_gen > GEN_MAX ||
	    (m->flags & ~DFI_RDM_REQ_FLAGS) || (m->flags && m->type != DFI_RDM_REQ) ||
	    (m->type == DFI_RDM_REJ && (m->reason == 0 || m->reason >= DFI_RDM_REJ_END)) ||
	    (m->type == DFI_RDM_ATOMIC && m->op != DFI_RDM_ATOMIC_FADD &&
	     m->op != DFI_RDM_ATOMIC_CSWAP))
		return -EINVAL;
	n = body_len(m);
	if (cap < DFI_RDM_HDR_LEN + (size_t)n)
		return -ENOSPC;
	memset(p, 0, DFI_RDM_HDR_LEN + (size_t)n);
	put32(p, DFI_RDM_MAGIC);
	p[4] = DFI_RDM_VERSION;
	p[5] = (uint8_t)m->type;
	put32(p + 8, n);
	b = p + DFI_RDM_HDR_LEN;
	switch (m->type) {
	case DFI_RDM_REQ:
		put64(b, m->ia);
		put32(b + 8, m->src_id);
		put16(b + 12, m->src_gen);
		put16(b + 14, m->addr_len);
		put64(b + 16, m->qual);
		put16(b + 24, m->plen);
		put16(b + 26, m->flags);
		put64(b + 28, m->bye_addr);
		put32(b + 36, m->bye_key);
		memcpy(b + 44, m->addr, m->addr_len);
		memcpy(b + 44 + m->addr_len, m->pdata, m->plen);
		break;
	case DFI_RDM_REP:
		put64(b, m->ia);
		put32(b + 8, m->src_id);
		put16(b + 12, m->src_gen);
		put16(b + 14, m->addr_len);
		put32(b + 16, m->dst_id);
		put16(b + 20, m->dst_gen);
		put16(b + 22, m->plen);
		put64(b + 24, m->bye_addr);
		put32(b + 32, m->bye_key);
		memcpy(b + 40, m->addr, m->addr_len);
		memcpy(b + 40 + m->addr_len, m->pdata, m->plen);
		break;
	case DFI_RDM_REJ:
		put32(b, m->dst_id);
		put16(b + 4, m->dst_gen);
		b[6] = m->reason;
		put16(b + 8, m->plen);
		memcpy(b + 12, m->pdata, m->plen);
		break;
	case DFI_RDM_RTU:
	case DFI_RDM_DREQ:
	case DFI_RDM_DREP:
		put32(b, m->dst_id);
		put16(b + 4, m->dst_gen);
		put32(b + 8, m->src_id);
		put16(b + 12, m->src_gen);
		if (m->type != DFI_RDM_RTU)
			put32(b + 16, m->est);
		break;
	case DFI_RDM_KEY:
		put32(b, m->dst_id);
		put16(b + 4, m->dst_gen);
		put32(b + 8, m->rmr);
		break;
	case DFI_RDM_KEYREP:
		put32(b, m->rmr);
		put32(b + 4, m->status);
		put64(b + 8, m->base);
		put64(b + 16, m->key);
		break;
	case DFI_RDM_ATOMIC:
		put32(b, m->dst_id);
		put16(b + 4, m->dst_gen);
		b[6] = m->op;
		put64(b + 8, m->id);
		put64(b + 16, m->addr64);
		put32(b + 24, m->rmr);
		put64(b + 32, m->operand);
		put64(b + 40, m->compare);
		break;
	case DFI_RDM_ATOMICREP:
		put32(b, m->dst_id);
		put16(b + 4, m->dst_gen);
		put64(b + 8, m->id);
		put32(b + 16, m->status);
		put64(b + 24, m->value);
		break;
	default:
		return -EINVAL;
	}
	return DFI_RDM_HDR_LEN + (ssize_t)n;
}

/* ------------------------------------------------------------------ decode */

#define BAD(reason) do { *why = (reason); return -EPROTO; } while (0)

ssize_t dfi_rdm_decode(const void *buf, size_t len, struct dfi_rdm_msg *m, const char **why)
{
	const uint8_t *p = buf, *b;
	uint32_t n, var;
	unsigned type;

	*why = NULL;
	/* what can be judged from a prefix is judged at once: a stream of
	 * garbage is refused at its first bytes, not after 4 GiB */
	if (len >= 4 && get32(p) != DFI_RDM_MAGIC)
		BAD("not a dapl-ofi RDM message (magic)");
	if (len >= 5 && p[4] != DFI_RDM_VERSION)
		BAD("unknown version");
	if (len >= 6 && (p[5] == 0 || p[5] >= DFI_RDM_TYPE_END))
		BAD("unknown message type");
	if (len < DFI_RDM_HDR_LEN)
		return 0;
	type = p[5];
	n = get32(p + 8);
	if (get16(p + 6) || get32(p + 12))
		BAD("reserved header bits set");
	if (n < fixed_len[type])
		BAD("body shorter than its type's");
	var = n - fixed_len[type];
	if ((type == DFI_RDM_REQ || type == DFI_RDM_REP) ? var > DFI_RDM_ADDR_MAX + DFI_RDM_PDATA_MAX :
	    type == DFI_RDM_REJ ? var > DFI_RDM_PDATA_MAX : var != 0)
		BAD("body longer than its type allows");
	if (len - DFI_RDM_HDR_LEN < n)
		return 0;
	b = p + DFI_RDM_HDR_LEN;
	memset(m, 0, sizeof(*m));
	m->type = (enum dfi_rdm_type)type;
	switch (type) {
	case DFI_RDM_REQ:
	case DFI_RDM_REP: {
		uint32_t fixed = fixed_len[type];

		m->ia = get64(b);
		m->src_id = get32(b + 8);
		m->src_gen = get16(b + 12);
		m->addr_len = get16(b + 14);
		if (type == DFI_RDM_REQ) {
			m->qual = get64(b + 16);
			m->plen = get16(b + 24);
			m->flags = get16(b + 26);
			if (m->flags & ~DFI_RDM_REQ_FLAGS)
				BAD("unknown REQ flags");
		} else {
			m->dst_id = get32(b + 16);
			m->dst_gen = get16(b + 20);
			m->plen = get16(b + 22);
		}
		m->bye_addr = get64(b + fixed - 16);
		m->bye_key = get32(b + fixed - 8);
		if (get32(b + fixed - 4))
			BAD("reserved bytes set");
		if (m->addr_len == 0 || m->addr_len > DFI_RDM_ADDR_MAX)
			BAD("fabric address length out of range");
		if (m->plen > DFI_RDM_PDATA_MAX)
			BAD("private data longer than 256 bytes");
		if ((uint32_t)m->addr_len + m->plen != var)
			BAD("address and private data lengths disagree with the body's");
		memcpy(m->addr, b + fixed, m->addr_len);
		memcpy(m->pdata, b + fixed + m->addr_len, m->plen);
		break;
	}
	case DFI_RDM_REJ:
		m->dst_id = get32(b);
		m->dst_gen = get16(b + 4);
		m->reason = b[6];
		m->plen = get16(b + 8);
		if (b[7] || get16(b + 10))
			BAD("reserved bytes set");
		if (m->reason == 0 || m->reason >= DFI_RDM_REJ_END)
			BAD("unknown reject reason");
		if (m->plen != var)
			BAD("private data length disagrees with the body's");
		memcpy(m->pdata, b + 12, m->plen);
		break;
	case DFI_RDM_RTU:
	case DFI_RDM_DREQ:
	case DFI_RDM_DREP:
		m->dst_id = get32(b);
		m->dst_gen = get16(b + 4);
		m->src_id = get32(b + 8);
		m->src_gen = get16(b + 12);
		if (type != DFI_RDM_RTU)
			m->est = get32(b + 16);
		if (get16(b + 6) || get16(b + 14))
			BAD("reserved bytes set");
		break;
	case DFI_RDM_KEY:
		m->dst_id = get32(b);
		m->dst_gen = get16(b + 4);
		m->rmr = get32(b + 8);
		if (get16(b + 6) || get32(b + 12))
			BAD("reserved bytes set");
		break;
	case DFI_RDM_KEYREP:
		m->rmr = get32(b);
		m->status = get32(b + 4);
		m->base = get64(b + 8);
		m->key = get64(b + 16);
		break;
	case DFI_RDM_ATOMIC:
		m->dst_id = get32(b);
		m->dst_gen = get16(b + 4);
		m->op = b[6];
		m->id = get64(b + 8);
		m->addr64 = get64(b + 16);
		m->rmr = get32(b + 24);
		m->operand = get64(b + 32);
		m->compare = get64(b + 40);
		if (b[7] || get32(b + 28))
			BAD("reserved bytes set");
		if (m->op != DFI_RDM_ATOMIC_FADD && m->op != DFI_RDM_ATOMIC_CSWAP)
			BAD("unknown atomic op");
		if (m->op == DFI_RDM_ATOMIC_FADD && m->compare)
			BAD("a fetch-and-add with a compare value");
		break;
	case DFI_RDM_ATOMICREP:
		m->dst_id = get32(b);
		m->dst_gen = get16(b + 4);
		m->id = get64(b + 8);
		m->status = get32(b + 16);
		m->value = get64(b + 24);
		if (get16(b + 6) || get32(b + 20))
			BAD("reserved bytes set");
		break;
	}
	if (m->src_gen > GEN_MAX || m->dst_gen > GEN_MAX)
		BAD("generation wider than 14 bits and a tag class of 0 or 1");
	return DFI_RDM_HDR_LEN + (ssize_t)n;
}
