/*
 * Assertions and small helpers shared by the integration tests (they link
 * only -ldat2 and cmocka; include after <cmocka.h> and <dat2/udat.h>).
 */
#ifndef DAT_TEST_H
#define DAT_TEST_H

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/*
 * LeakSanitizer (the ASan variant runs with detect_leaks=1): libdat2 dlopens
 * and dlcloses the provider on every first open / last close, and the
 * constructors of libraries it pulls in (libdat2 itself, libfabric's
 * libinfinipath, libpsm_infinipath, libpsm2, libefa) allocate memory that
 * their unload never frees.  Those allocations are made under _dl_init;
 * dapl-ofi has no constructor, so this hides nothing of ours.  Matching
 * _dl_init needs full malloc stacks (those libraries have no frame pointers).
 * Defined here, not static: each test program is one translation unit.
 */
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

/* ---------------------------------------------------------------- watchdog */

/* A provider call that never returns (a deadlock, a lost wake-up in
 * dat_ep_free or dat_ia_close) must fail the run, not hang it: the test
 * arms watchdog(what, seconds), main() calls watchdog_install() once, and
 * SIGALRM ends the program with a TAP line that names what was stuck. */
static inline const char *volatile *watchdog_what(void)
{
	static const char *volatile what = "?";

	return &what;
}

static inline void watchdog_put(const char *s)
{
	ssize_t r = write(2, s, strlen(s));

	(void)r;
}

static inline void watchdog_fire(int sig)
{
	(void)sig;
	watchdog_put("\nnot ok - watchdog: ");
	watchdog_put(*watchdog_what());
	watchdog_put(" is stuck: a provider call did not return in time; aborting the run\n");
	_exit(3);
}

static inline void watchdog(const char *what, unsigned sec)
{
	*watchdog_what() = what;
	alarm(sec);
}

static inline void watchdog_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watchdog_fire;
	sigaction(SIGALRM, &sa, NULL);
}

/* The IA's provider-specific attribute `name` (the IA's own string), or
 * NULL where it has none. */
static inline const char *ia_prov_attr(DAT_IA_HANDLE ia, const char *name)
{
	DAT_PROVIDER_ATTR pa;

	if (dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_PROVIDER_SPECIFIC_ATTR,
			 &pa) != DAT_SUCCESS)
		return NULL;
	for (DAT_COUNT i = 0; i < pa.num_provider_specific_attr; i++)
		if (strcmp(pa.provider_specific_attr[i].name, name) == 0)
			return pa.provider_specific_attr[i].value;
	return NULL;
}

static inline bool ia_prov_attr_is(DAT_IA_HANDLE ia, const char *name, const char *value)
{
	const char *v = ia_prov_attr(ia, name);

	return v && strcmp(v, value) == 0;
}

/* Skip the test where the IA carries no 8-byte remote CQ data (psm3 and
 * opx carry 4 or none): it reports so as the IB extension's immediate
 * data, which send with invalidate needs as well. */
#define SKIP_WITHOUT_CQ_DATA(ia)						\
	do {									\
		if (!ia_prov_attr_is((ia), "DAT_IB_IMMED_DATA", "TRUE")) {	\
			print_message("# skipped: the IA carries no remote CQ "	\
				      "data (DAT_IB_IMMED_DATA is not TRUE)\n");	\
			skip();							\
		}								\
	} while (0)

/* Without DAT_OVERRIDE, use the dat.conf of the build tree the program
 * lives in (build/tests/../dat.conf).  libdat2 reads DAT_OVERRIDE in its
 * load-time constructor, before main(): setting it is not enough, so the
 * program re-executes itself once with it set (same arguments, from
 * /proc/self/cmdline).  Call it first thing in main(). */
static inline void default_dat_override(void)
{
	char self[PATH_MAX], conf[PATH_MAX + 16], args[8192], *argv[64];
	ssize_t n;
	char *slash;
	FILE *f;
	size_t len;
	int argc = 0;

	if (getenv("DAT_OVERRIDE"))
		return;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return;
	self[n] = '\0';
	snprintf(conf, sizeof(conf), "%s", self);
	slash = strrchr(conf, '/');
	if (!slash)
		return;
	snprintf(slash, sizeof(conf) - (size_t)(slash - conf), "/../dat.conf");
	if (access(conf, R_OK) != 0)
		return;
	f = fopen("/proc/self/cmdline", "r");
	if (!f)
		return;
	len = fread(args, 1, sizeof(args) - 1, f);
	fclose(f);
	args[len] = '\0';
	for (size_t i = 0; i < len && argc < 63; i += strlen(args + i) + 1)
		argv[argc++] = args + i;
	argv[argc] = NULL;
	setenv("DAT_OVERRIDE", conf, 1);
	execv(self, argv);	/* returns only on failure: go on without */
}

#endif
