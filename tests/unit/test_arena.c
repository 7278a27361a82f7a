/*
 * The object arena (src/util/arena.c): where DAT objects and per-endpoint
 * state live, apart from the malloc heap.  Each test breaks if one of the
 * arena's promises does: zeroed, line-aligned, non-overlapping blocks,
 * reuse of freed blocks (zeroed again), large blocks mapped and unmapped,
 * stray pointers refused, concurrent use, fork() beside a thread that
 * allocates; under AddressSanitizer, overruns and freed blocks poisoned.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/arena.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

static void assert_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			fail_msg("byte %zu of %zu is %#x, not 0", i, n, p[i]);
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;

	return x < y ? -1 : x > y;
}

/* Sizes from 1 byte to past the largest class: aligned, zeroed, writable. */
static void test_sizes_aligned_zeroed(void **state)
{
	static const size_t sizes[] = { 1, 8, 63, 64, 65, 632, 672, 1000, 4096,
					16383, 16384, 16385, 40000, 1 << 20 };
	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		unsigned char *p = dfi_arena_calloc(sizes[i]);

		assert_non_null(p);
		assert_int_equal((uintptr_t)p % DFI_ARENA_ALIGN, 0);
		assert_zero(p, sizes[i]);
		memset(p, 0xa5, sizes[i]);
		dfi_arena_free(p);
	}
	dfi_arena_free(NULL);	/* ignored, like free(NULL) */
}

/* Many blocks of one class, across several chunks: no two overlap, and each
 * keeps what was written into it. */
static void test_blocks_disjoint(void **state)
{
	enum { N = 400, SZ = 600 };	/* 600 B blocks: about 100 per chunk */
	unsigned char **b = calloc(N, sizeof(*b));
	void **sorted = calloc(N, sizeof(*sorted));

	(void)state;
	assert_non_null(b);
	assert_non_null(sorted);
	for (int i = 0; i < N; i++) {
		b[i] = dfi_arena_calloc(SZ);
		assert_non_null(b[i]);
		memset(b[i], i & 0xff, SZ);
		sorted[i] = b[i];
	}
	qsort(sorted, N, sizeof(*sorted), cmp_ptr);
	for (int i = 1; i < N; i++)
		assert_true((uintptr_t)sorted[i] >= (uintptr_t)sorted[i - 1] + SZ);
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < SZ; j++)
			if (b[i][j] != (unsigned char)(i & 0xff))
				fail_msg("block %d byte %d overwritten", i, j);
		dfi_arena_free(b[i]);
	}
	free(sorted);
	free(b);
}

/* A freed block is the next one handed out in its class, and zeroed again. */
static void test_reuse_zeroed(void **state)
{
	unsigned char *a, *b;

	(void)state;
	a = dfi_arena_calloc(300);
	assert_non_null(a);
	memset(a, 0xff, 300);
	dfi_arena_free(a);
	b = dfi_arena_calloc(290);	/* same class (320) */
	assert_ptr_equal(a, b);
	assert_zero(b, 290);
	dfi_arena_free(b);
}

/* Large blocks have a mapping of their own: counted while they live,
 * unmapped when freed. */
static void test_large_mapped_and_unmapped(void **state)
{
	size_t before = dfi_arena_mapped();
	unsigned char *p = dfi_arena_calloc(100000);

	(void)state;
	assert_non_null(p);
	assert_true(dfi_arena_mapped() >= before + 100000);
	assert_zero(p, 100000);
	p[99999] = 1;
	dfi_arena_free(p);
	assert_int_equal(dfi_arena_mapped(), before);
}

/* A pointer into the middle of a block is refused (logged, not freed): the
 * block is not handed out twice. */
static void test_interior_pointer_refused(void **state)
{
	char *a = dfi_arena_calloc(128), *b, *c;

	(void)state;
	assert_non_null(a);
	dfi_arena_free(a + 8);
	b = dfi_arena_calloc(128);
	c = dfi_arena_calloc(128);
	assert_ptr_not_equal(b, a);
	assert_ptr_not_equal(c, a);
	dfi_arena_free(c);
	dfi_arena_free(b);
	dfi_arena_free(a);
}

/* Huge requests fail with NULL, not a wrapped size. */
static void test_huge_refused(void **state)
{
	(void)state;
	assert_null(dfi_arena_calloc(SIZE_MAX));
	assert_null(dfi_arena_calloc(SIZE_MAX - 32));
}

/* Threads allocating and freeing at once never get the same block (TSan
 * runs this too). */
#define THREADS 4
#define ROUNDS 2000
struct worker {
	pthread_t t;
	int id;
	int bad;
};

static void *churn(void *arg)
{
	struct worker *w = arg;
	unsigned char *held[16] = { 0 };

	for (int r = 0; r < ROUNDS; r++) {
		int k = r % 16;
		size_t sz = 64 + (size_t)((r * 37 + w->id * 11) % 900);

		if (held[k]) {
			for (size_t j = 0; j < 64; j++)
				if (held[k][j] != (unsigned char)w->id)
					w->bad++;
			dfi_arena_free(held[k]);
		}
		held[k] = dfi_arena_calloc(sz);
		if (!held[k]) {
			w->bad++;
			continue;
		}
		memset(held[k], w->id, sz);
	}
	for (int k = 0; k < 16; k++)
		dfi_arena_free(held[k]);
	return NULL;
}

static void test_threads(void **state)
{
	struct worker w[THREADS];

	(void)state;
	for (int i = 0; i < THREADS; i++) {
		w[i].id = i + 1;
		w[i].bad = 0;
		assert_int_equal(pthread_create(&w[i].t, NULL, churn, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(w[i].t, NULL);
		assert_int_equal(w[i].bad, 0);
	}
}

/* fork() while another thread allocates: the child's allocations must not
 * find the arena's lock held by a thread that does not exist there (each
 * child has 10 s, then SIGALRM ends it and the test fails at once). */
static atomic_bool churning;

static void *churn_until_stopped(void *arg)
{
	(void)arg;
	while (atomic_load(&churning))
		dfi_arena_free(dfi_arena_calloc(100));
	return NULL;
}

static void test_fork_beside_allocating_thread(void **state)
{
	pthread_t t;
	int hung = 0, failed = 0;

	(void)state;
	atomic_store(&churning, true);
	assert_int_equal(pthread_create(&t, NULL, churn_until_stopped, NULL), 0);
	for (int i = 0; i < 40; i++) {
		int st = 0;
		pid_t pid = fork();

		if (pid == 0) {
			void *p;

			alarm(10);
			p = dfi_arena_calloc(100);
			dfi_arena_free(p);
			_exit(p ? 0 : 1);
		}
		if (pid < 0 || waitpid(pid, &st, 0) != pid) {
			failed++;
			continue;
		}
		if (WIFSIGNALED(st)) {
			hung++;
			break;
		} else if (WEXITSTATUS(st) != 0)
			failed++;
	}
	atomic_store(&churning, false);
	pthread_join(t, NULL);
	assert_int_equal(hung, 0);
	assert_int_equal(failed, 0);
}

#ifdef TEST_ASAN
/* Built with ASan: a handed-out block is addressable up to the size asked
 * for and no further; a freed one not at all. */
static void test_asan_poisons_free_blocks(void **state)
{
	char *p = dfi_arena_calloc(200);

	(void)state;
	assert_non_null(p);
	assert_false(__asan_address_is_poisoned(p));
	assert_false(__asan_address_is_poisoned(p + 199));
	assert_true(__asan_address_is_poisoned(p + 200));	/* its class is 256 */
	dfi_arena_free(p);
	assert_true(__asan_address_is_poisoned(p));
	assert_true(__asan_address_is_poisoned(p + 100));
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_aligned_zeroed),
		cmocka_unit_test(test_blocks_disjoint),
		cmocka_unit_test(test_reuse_zeroed),
		cmocka_unit_test(test_large_mapped_and_unmapped),
		cmocka_unit_test(test_interior_pointer_refused),
		cmocka_unit_test(test_huge_refused),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_fork_beside_allocating_thread),
#ifdef TEST_ASAN
		cmocka_unit_test(test_asan_poisons_free_blocks),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
