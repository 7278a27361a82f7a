/*
 * bench/pagewalk: what a system call costs on this host, and what the code
 * after it pays per page it touches.  On a kernel with page-table
 * isolation and no PCID every system call empties the user TLB, so a chain
 * of dependent loads each on a new page pays a page walk per load; the same
 * chain within a few pages does not.  bench/HISTORY.md (415d6f2) explains
 * why this matters for the DAT path between two of libfabric's calls.
 *
 *   build/pagewalk        prints ns per iteration of getppid() + N loads
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHAIN 256

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* A cyclic chain of CHAIN pointers `stride` bytes apart, in shuffled order. */
static void **chain(size_t stride)
{
	char *m = aligned_alloc(4096, (CHAIN * stride + 4095) / 4096 * 4096);
	void **p[CHAIN];
	int ord[CHAIN];

	if (!m)
		return NULL;
	for (int i = 0; i < CHAIN; i++)
		ord[i] = i;
	srand(1);
	for (int i = CHAIN - 1; i > 0; i--) {
		int j = rand() % (i + 1), t = ord[i];

		ord[i] = ord[j];
		ord[j] = t;
	}
	for (int i = 0; i < CHAIN; i++)
		p[i] = (void **)(m + (size_t)ord[i] * stride);
	for (int i = 0; i < CHAIN; i++)
		*p[i] = p[(i + 1) % CHAIN];
	return p[0];
}

int main(void)
{
	static const size_t strides[] = { 64, 4096 + 64 };

	printf("ns per iteration: one getppid() system call, then n dependent loads\n");
	printf("%6s %14s %14s\n", "n", "64 B apart", "a page apart");
	void **head[2] = { chain(strides[0]), chain(strides[1]) };

	if (!head[0] || !head[1])
		return 1;
	for (int n = 0; n <= 128; n = n < 8 ? n + 4 : n * 2) {
		printf("%6d", n);
		for (int s = 0; s < 2; s++) {
			double best = 1e18;

			for (int rep = 0; rep < 5; rep++) {
				double t0 = now_ns();
				void **q = head[s];

				for (int it = 0; it < 100000; it++) {
					syscall(SYS_getppid);
					q = head[s];
					for (int k = 0; k < n; k++)
						q = (void **)*q;
					if (!q)
						return 1;
				}
				double t = (now_ns() - t0) / 100000;

				if (t < best)
					best = t;
			}
			printf(" %14.1f", best);
		}
		printf("\n");
	}
	return 0;
}
