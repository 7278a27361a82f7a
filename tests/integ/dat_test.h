/*
 * Assertions and small helpers shared by the integration tests (they link
 * only -ldat2 and cmocka; include after <cmocka.h> and <dat2/udat.h>).
 */
#ifndef DAT_TEST_H
#define DAT_TEST_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* "0x80050016 DAT_INVALID_HANDLE DAT_INVALID_HANDLE_EVD_RECV" */
static inline const char *rc_name(DAT_RETURN rc, char *buf, size_t len)
{
	const char *major = NULL, *minor = NULL;

	if (dat_strerror(rc, &major, &minor) != DAT_SUCCESS || !major)
		major = "?";
	snprintf(buf, len, "0x%08x %s%s%s", (unsigned)rc, major,
		 minor && *minor ? " " : "", minor ? minor : "");
	return buf;
}

static inline void check_rc(DAT_RETURN got, DAT_RETURN want, bool type_only, const char *expr,
			    const char *file, int line)
{
	char g[160], w[160];
	bool ok;

	if (type_only)
		ok = DAT_GET_TYPE(got) == DAT_GET_TYPE(want) &&
		     (want == DAT_SUCCESS || (got & DAT_CLASS_ERROR));
	else
		ok = got == want;
	if (!ok) {
		print_error("%s\n    returned %s\n    expected %s%s\n", expr, rc_name(got, g, sizeof(g)),
			    rc_name(want, w, sizeof(w)),
			    type_only ? " (type, with the error class bit)" : " (exactly)");
		_fail(file, line);
	}
}

#define ERR(type, sub)	((DAT_RETURN)(DAT_CLASS_ERROR | (DAT_UINT32)(type) | (DAT_UINT32)(sub)))
/* exact value */
#define assert_rc(expr, want)	check_rc((expr), (want), false, #expr, __FILE__, __LINE__)
#define assert_ok(expr)		assert_rc(expr, DAT_SUCCESS)
/* DAT_GET_TYPE and the error class bit */
#define assert_err(expr, type)	check_rc((expr), ERR(type, 0), true, #expr, __FILE__, __LINE__)
/* DAT_INVALID_PARAMETER with the DAT_INVALID_ARGn subtype of the argument */
#define assert_arg(expr, argn) \
	check_rc((expr), ERR(DAT_INVALID_PARAMETER, argn), false, #expr, __FILE__, __LINE__)

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

#endif
