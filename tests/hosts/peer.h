/*
 * What the test hosts' DAT programs (fault_peer.c, soak.c) share: their
 * clocks, how a DAT error reads, how they die, and the sanitizer settings
 * that every program going through libdat2 needs (as tests/integ/
 * dat_test.h).  Each program includes it once.
 */
#ifndef DFI_TESTS_HOSTS_PEER_H
#define DFI_TESTS_HOSTS_PEER_H

#include <dat2/udat.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_REALTIME in ms: what the scripts set against the time of a fault */
static inline uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* "MAJOR MINOR" of a DAT return code (a static buffer) */
static inline const char *dat_err(DAT_RETURN rc)
{
	static char s[128];
	const char *major = "?", *minor = "";

	dat_strerror(rc, &major, &minor);
	snprintf(s, sizeof(s), "%s %s", major, minor ? minor : "");
	return s;
}

/* The "end" line the scripts read, then out at once: what is open stays
 * open, and no leak report is made for it. */
static inline void die(const char *what, DAT_RETURN rc)
{
	printf("end %" PRIu64 " error %s: %s\n", wall_ms(), what, dat_err(rc));
	fflush(stdout);
	_exit(1);
}

/* LeakSanitizer: what libdat2's dlopen of the provider and the libraries
 * it pulls in allocate under _dl_init and never free; dapl-ofi has no
 * constructor.  Matching _dl_init needs full malloc stacks. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:_dl_init\n";
}

const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "fast_unwind_on_malloc=0";
}

#endif
