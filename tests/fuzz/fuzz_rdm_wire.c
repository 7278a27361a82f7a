/*
 * fuzz_rdm_wire: the RDM connection manager's decoder (src/fabric/rdm/
 * wire.c), fed a peer's byte stream as a socket delivers it: message after
 * message until the bytes end or break a rule.  Asserts what the decoder
 * promises: a message it returns holds nothing beyond the limits, encodes
 * back to exactly the bytes it took (reserved fields are zero, so a
 * message has one encoding), and every prefix of it is "read more", never
 * an error; a refusal always says why.
 *
 * Reproduce a crash: build/fuzz/fuzz/fuzz_rdm_wire <crash-file>.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/fabric/rdm/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) do {						\
		if (!(cond)) {						\
			fprintf(stderr, "fuzz_rdm_wire: %s:%d: check failed: %s\n", \
				__FILE__, __LINE__, #cond);		\
			abort();					\
		}							\
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* bounded: a message is at least a header long */
	for (int msgs = 0; msgs < 64 && size; msgs++) {
		struct dfi_rdm_msg m, again;
		uint8_t out[DFI_RDM_MSG_MAX];
		const char *why = NULL;
		ssize_t n = dfi_rdm_decode(data, size, &m, &why), e;

		if (n < 0) {
			check(why && *why);
			return 0;
		}
		if (n == 0)
			return 0;
		check((size_t)n <= size && n >= DFI_RDM_HDR_LEN && n <= DFI_RDM_MSG_MAX);
		check(m.type > 0 && m.type < DFI_RDM_TYPE_END);
		check(m.addr_len <= DFI_RDM_ADDR_MAX && m.plen <= DFI_RDM_PDATA_MAX);
		check(m.src_gen <= 0x7fff && m.dst_gen <= 0x7fff);
		e = dfi_rdm_encode(&m, out, sizeof(out));
		check(e == n && memcmp(out, data, (size_t)n) == 0);
		for (ssize_t k = 0; k < n; k += 1 + k / 4)
			check(dfi_rdm_decode(data, (size_t)k, &again, &why) == 0);
		data += n;
		size -= (size_t)n;
	}
	return 0;
}
