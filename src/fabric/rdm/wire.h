/*
 * The RDM backend's connection-manager messages (docs/rdm.md, "Wire
 * format"): encoded into and decoded from the bytes of a TCP stream.  A
 * peer's bytes are bad input until decoded: the decoder checks every
 * length and reserved field, and a message it returns holds nothing
 * beyond its limits.  No libfabric, no DAT: tests and fuzzers link it
 * alone.
 */
#ifndef DFI_RDM_WIRE_H
#define DFI_RDM_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DFI_RDM_MAGIC		0x52494644u	/* "DFIR" in the stream's byte order */
/* 2: REQ and REP carry the goodbye word; 3: DREQ and DREP their sender's
 * count of REPs and RTUs (docs/rdm.md, "Order across connections"); 4:
 * every data message's tag carries its sequence ("Numbered messages") */
#define DFI_RDM_VERSION		4
#define DFI_RDM_HDR_LEN		16
#define DFI_RDM_ADDR_MAX	64	/* a fabric address (efa's is 32 bytes) */
#define DFI_RDM_PDATA_MAX	256	/* DAT private data, as the MSG backend's */
/* the longest message: a REQ with the longest address and private data */
#define DFI_RDM_MSG_MAX		(DFI_RDM_HDR_LEN + 44 + DFI_RDM_ADDR_MAX + DFI_RDM_PDATA_MAX)

enum dfi_rdm_type {
	DFI_RDM_REQ = 1,	/* connect: the requester's id, address, private data */
	DFI_RDM_REP,		/* accept: the accepter's id, address, private data */
	DFI_RDM_REJ,		/* reject, with a reason and private data */
	DFI_RDM_RTU,		/* the requester is ready: the accepter may report it */
	DFI_RDM_DREQ,		/* disconnect */
	DFI_RDM_DREP,		/* disconnect done */
	DFI_RDM_KEY,		/* what base an RMR context has (no FI_MR_VIRT_ADDR) */
	DFI_RDM_KEYREP,
	DFI_RDM_ATOMIC,		/* an emulated 8-byte atomic on the receiver's memory */
	DFI_RDM_ATOMICREP,	/* its outcome: a status and the old value */
	DFI_RDM_TYPE_END
};

enum dfi_rdm_reason {		/* REJ */
	DFI_RDM_REJ_CONSUMER = 1,	/* dat_cr_reject */
	DFI_RDM_REJ_NO_LISTENER,	/* no service point on that qualifier */
	DFI_RDM_REJ_RESOURCES,		/* the accepting IA is out of something */
	DFI_RDM_REJ_STALE,		/* a REP for a connect that timed out */
	DFI_RDM_REJ_END
};

/* REQ flags: the requesting endpoint is an unreliable-datagram one (the IB
 * extension's UD): the handshake resolves addresses, no connection stays. */
#define DFI_RDM_REQ_UD		0x1u
#define DFI_RDM_REQ_FLAGS	DFI_RDM_REQ_UD

/* ATOMIC ops (the IB extension's): fetch-and-add, compare-and-swap */
enum { DFI_RDM_ATOMIC_FADD = 1, DFI_RDM_ATOMIC_CSWAP = 2 };

struct dfi_rdm_msg {
	enum dfi_rdm_type type;
	uint64_t ia;			/* REQ, REP: the sender's IA instance */
	uint32_t src_id, dst_id;	/* connection ids: the sender's, the receiver's */
	uint16_t src_gen, dst_gen;	/* their generations (14 bits, bit 14: SRQ) */
	uint64_t qual;			/* REQ: the connection qualifier */
	uint16_t flags;			/* REQ: DFI_RDM_REQ_* */
	/* REQ, REP: the sender's goodbye word, which its peer writes behind
	 * its data before its DREQ (docs/rdm.md, "The goodbye") */
	uint64_t bye_addr;
	uint32_t bye_key;
	/* DREQ, DREP: the REPs and RTUs the sender had sent to the
	 * receiver's IA when it sent this one (docs/rdm.md) */
	uint32_t est;
	uint8_t reason;			/* REJ */
	uint32_t rmr;			/* KEY, KEYREP, ATOMIC: the RMR context */
	uint32_t status;		/* KEYREP, ATOMICREP: 0, or a positive errno */
	uint64_t base, key;		/* KEYREP */
	uint8_t op;			/* ATOMIC: DFI_RDM_ATOMIC_* */
	uint64_t id;			/* ATOMIC, ATOMICREP: the requester's */
	uint64_t addr64;		/* ATOMIC: the target's virtual address */
	uint64_t operand, compare;	/* ATOMIC; compare for CSWAP only */
	uint64_t value;			/* ATOMICREP: the old value */
	uint16_t addr_len;		/* REQ, REP */
	uint16_t plen;			/* REQ, REP, REJ */
	uint8_t addr[DFI_RDM_ADDR_MAX];
	uint8_t pdata[DFI_RDM_PDATA_MAX];
};

/* m as bytes into buf: their count, or -EINVAL (a field beyond its limit:
 * an address, private data, a generation, a type or reason) or -ENOSPC. */
ssize_t dfi_rdm_encode(const struct dfi_rdm_msg *m, void *buf, size_t cap);

/* The first message of buf[0..len): the bytes it took; 0 if buf holds only
 * a valid beginning of one (read more); -EPROTO if the bytes cannot be a
 * message, with *why saying which rule they broke (a static string). */
ssize_t dfi_rdm_decode(const void *buf, size_t len, struct dfi_rdm_msg *m, const char **why);

const char *dfi_rdm_type_name(unsigned type);

#endif
