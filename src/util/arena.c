/* The object arena (arena.h): size classes in aligned chunks, so a block's
 * chunk header is found by masking its address. */
#include "util/arena.h"
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define DFI_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DFI_ARENA_ASAN 1
#endif
#endif
#ifdef DFI_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n)	ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n)	ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n)	((void)(p), (void)(n))
#define UNPOISON(p, n)	((void)(p), (void)(n))
#endif

/* Under valgrind (memcheck), blocks are heap blocks of their own: a read of
 * a freed one or of uninitialised bytes is reported as for malloc.  The
 * client requests cost a few instructions outside valgrind. */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define DFI_ARENA_VG 1
#endif
#endif
#ifndef DFI_ARENA_VG
#define VALGRIND_MALLOCLIKE_BLOCK(p, n, rz, zeroed)	((void)(p), (void)(n))
#define VALGRIND_FREELIKE_BLOCK(p, rz)			((void)(p))
#define VALGRIND_MAKE_MEM_NOACCESS(p, n)		((void)(p), (void)(n))
#define VALGRIND_MAKE_MEM_DEFINED(p, n)			((void)(p), (void)(n))
#define VALGRIND_MAKE_MEM_UNDEFINED(p, n)		((void)(p), (void)(n))
#endif

/* A block of class size n is handed out, open to its first size bytes
 * (zeroed: they are known to be 0), or given back. */
static void mark_used(void *p, size_t size, size_t n, int zeroed)
{
	POISON(p, n);
	UNPOISON(p, size);
	VALGRIND_MAKE_MEM_NOACCESS(p, n);
	VALGRIND_MALLOCLIKE_BLOCK(p, size, 0, zeroed);
}

static void mark_free(void *p, size_t n)
{
	POISON(p, n);
	VALGRIND_FREELIKE_BLOCK(p, 0);
	(void)n;
}

struct block {
	struct block *next;
};

/* The free list's link in a free block's first word, opened only while
 * the arena reads or writes it. */
static struct block *link_get(struct block *b)
{
	UNPOISON(b, sizeof(*b));
	VALGRIND_MAKE_MEM_DEFINED(b, sizeof(*b));
	return b->next;
}

static void link_set(struct block *b, struct block *next)
{
	UNPOISON(b, sizeof(*b));
	VALGRIND_MAKE_MEM_UNDEFINED(b, sizeof(*b));
	b->next = next;
	POISON(b, sizeof(*b));
	VALGRIND_MAKE_MEM_NOACCESS(b, sizeof(*b));
}

#define CHUNK		((size_t)64 << 10)	/* size and alignment of a chunk */
#define HDR		((size_t)DFI_ARENA_ALIGN)	/* the header's share of it */
#define LARGE		UINT32_MAX		/* class of a block mapped alone */
#define MAGIC		0xdf1a4e4aU

struct chunk {
	uint32_t magic;
	uint32_t cls;		/* index into class_size, or LARGE */
	size_t len;		/* bytes mapped */
};
_Static_assert(sizeof(struct chunk) <= DFI_ARENA_ALIGN, "a chunk header fits its line");

/* Multiples of the line: steps of one line up to 1 KiB (a block wastes
 * less than a line), then four steps per doubling (less than a fifth). */
static const uint32_t class_size[] = {
	64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
	1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
	5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384,
};
#define NCLASS (sizeof(class_size) / sizeof(class_size[0]))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct block *free;	/* given back; reused first */
	char *bump, *end;	/* the newest chunk's untouched blocks */
} cls[NCLASS];
static size_t mapped;

/* A CHUNK-aligned mapping of len bytes, len a multiple of the page size. */
static struct chunk *map_aligned(size_t len)
{
	size_t over = len + CHUNK, head, tail;
	char *m = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t a;

	if (m == MAP_FAILED)
		return NULL;
	a = ((uintptr_t)m + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1);
	head = a - (uintptr_t)m;
	tail = over - head - len;
	if (head)
		munmap(m, head);
	if (tail)
		munmap((char *)a + len, tail);
	return (struct chunk *)a;
}

static void *large_alloc(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len;
	struct chunk *ch;

	if (size > SIZE_MAX / 2) {
		errno = ENOMEM;
		return NULL;
	}
	len = (HDR + size + page - 1) / page * page;
	ch = map_aligned(len);
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->magic = MAGIC;
	ch->cls = LARGE;
	ch->len = len;
	pthread_mutex_lock(&lock);
	mapped += len;
	pthread_mutex_unlock(&lock);
	mark_used((char *)ch + HDR, size, len - HDR, 1);	/* fresh pages are zero */
	return (char *)ch + HDR;
}

/* fork() while another thread holds the lock must not leave it held in
 * the child (as glibc's malloc does not). */
static void atfork_lock(void)
{
	pthread_mutex_lock(&lock);
}

static void atfork_unlock(void)
{
	pthread_mutex_unlock(&lock);
}

static void arena_init(void)
{
	(void)pthread_atfork(atfork_lock, atfork_unlock, atfork_unlock);
}

void *dfi_arena_calloc(size_t size)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	size_t c = 0, n;
	char *p;

	pthread_once(&once, arena_init);

	while (c < NCLASS && class_size[c] < size)
		c++;
	if (c == NCLASS)
		return large_alloc(size);
	n = class_size[c];
	pthread_mutex_lock(&lock);
	if (cls[c].free) {
		struct block *b = cls[c].free;

		cls[c].free = link_get(b);
		mark_used(b, size, n, 0);
		memset(b, 0, size);
		p = (char *)b;
	} else {
		if ((size_t)(cls[c].end - cls[c].bump) < n) {
			struct chunk *ch = map_aligned(CHUNK);

			if (!ch) {
				pthread_mutex_unlock(&lock);
				errno = ENOMEM;
				return NULL;
			}
			ch->magic = MAGIC;
			ch->cls = (uint32_t)c;
			ch->len = CHUNK;
			mapped += CHUNK;
			cls[c].bump = (char *)ch + HDR;
			cls[c].end = cls[c].bump + (CHUNK - HDR) / n * n;
			POISON(cls[c].bump, CHUNK - HDR);
			VALGRIND_MAKE_MEM_NOACCESS(cls[c].bump, CHUNK - HDR);
		}
		p = cls[c].bump;	/* never used: still zero */
		cls[c].bump += n;
		mark_used(p, size, n, 1);
	}
	pthread_mutex_unlock(&lock);
	return p;
}

void dfi_arena_free(void *p)
{
	struct chunk *ch;
	struct block *b = p;
	size_t n;

	if (!p)
		return;
	ch = (struct chunk *)((uintptr_t)p & ~(uintptr_t)(CHUNK - 1));
	if (ch->magic != MAGIC || (ch->cls != LARGE && ch->cls >= NCLASS)) {
		dfi_err(DFI_SS_IA, "%p was not allocated here; not freed", p);
		return;
	}
	if (ch->cls == LARGE) {
		if ((char *)p != (char *)ch + HDR) {
			dfi_err(DFI_SS_IA, "%p is inside a block; not freed", p);
			return;
		}
		pthread_mutex_lock(&lock);
		mapped -= ch->len;
		pthread_mutex_unlock(&lock);
		/* unmapped, not poisoned: the next mapping at these addresses
		 * may be anyone's */
		VALGRIND_FREELIKE_BLOCK(p, 0);
		UNPOISON(ch, ch->len);
		munmap(ch, ch->len);
		return;
	}
	n = class_size[ch->cls];
	if ((char *)p < (char *)ch + HDR || (size_t)((char *)p - (char *)ch - HDR) % n != 0) {
		dfi_err(DFI_SS_IA, "%p is inside a block; not freed", p);
		return;
	}
	pthread_mutex_lock(&lock);
	mark_free(b, n);
	link_set(b, cls[ch->cls].free);
	cls[ch->cls].free = b;
	pthread_mutex_unlock(&lock);
}

size_t dfi_arena_mapped(void)
{
	size_t m;

	pthread_mutex_lock(&lock);
	m = mapped;
	pthread_mutex_unlock(&lock);
	return m;
}
