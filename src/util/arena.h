/*
 * The object arena: where dapl-ofi keeps its DAT objects and per-endpoint
 * state, apart from the malloc heap.
 *
 * Why: libfabric's tcp provider walks every endpoint bound to a CQ on each
 * fi_cq_read, touching three pages of each 18.6 KiB endpoint it allocated
 * with malloc.  When our own per-endpoint objects (the EP, its two DTO
 * pools, the fabric endpoint) come from the same heap, they lie between
 * libfabric's endpoints and that walk runs over a longer, differently laid
 * out stretch of memory than in a raw libfabric program.  Kept here, the
 * heap holds libfabric's endpoints as a raw program's heap does; measured
 * beside 1024 idle EPs it is 4-7 % off the ping-pong latency (RESULTS.md).
 *
 * Blocks are zeroed and 64-byte aligned (a cache line: no object shares a
 * line with another).  Sizes up to 16 KiB come from size classes carved out
 * of 64 KiB chunks; freed blocks are kept for reuse, the chunks are never
 * returned.  Larger blocks get a mapping of their own, unmapped when freed.
 * Thread-safe (one mutex: only object creation and destruction come here).
 * Built with AddressSanitizer or run under valgrind's memcheck, a block is
 * exactly the size asked for and a freed one is out of bounds, so overruns
 * and uses after free are reported as they are for malloc'ed memory.
 */
#ifndef DFI_UTIL_ARENA_H
#define DFI_UTIL_ARENA_H

#include <stddef.h>

#define DFI_ARENA_ALIGN 64

/* A zeroed block of at least size bytes, or NULL (errno ENOMEM). */
void *dfi_arena_calloc(size_t size);
/* Give back a block from dfi_arena_calloc; NULL is ignored. */
void dfi_arena_free(void *p);
/* Bytes the arena has mapped (chunks and large blocks), for tests and
 * memory reports. */
size_t dfi_arena_mapped(void);

#endif
