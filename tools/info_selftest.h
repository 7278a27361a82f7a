/*
 * daplofi-info's self-test (info_selftest.c): on an IA that opens, a
 * connection to itself and a message over it, through the DAT API only;
 * and the watchdog that bounds every DAT call of an entry's open, test and
 * close.  What is made of a failure (the entry's reason and fix) is
 * daplofi-info.c's.
 */
#ifndef INFO_SELFTEST_H
#define INFO_SELFTEST_H

#include <dat2/udat.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INFO_WATCHDOG_S	30	/* one entry's open, test and close, at most */

/* What the self-test found. */
struct info_selftest {
	/* the first failure: the call ("": none, the test passed), its
	 * DAT_RETURN (DAT_SUCCESS: it returned, and what it gave was wrong)
	 * and what was wrong */
	char call[64];
	DAT_RETURN rc;
	char what[256];
	uint64_t took;			/* microseconds, for -v */
	char addr_text[INET_ADDRSTRLEN];	/* the IA's address, connected to */
	DAT_CONN_QUAL port;		/* the PSP's */
	size_t msg_len;			/* bytes of the message sent */
};

/* The self-test on the open IA ia, into *r; true if it passed. */
bool info_selftest_run(DAT_IA_HANDLE ia, struct info_selftest *r);

/*
 * The watchdog: from info_watchdog_arm to info_watchdog_disarm, a DAT call
 * that does not return in INFO_WATCHDOG_S ends the process by SIGALRM,
 * after a line on fd that names IA ia and the call under way (the last
 * info_watchdog_step, or one of the self-test's).
 */
void info_watchdog_step(const char *call);
void info_watchdog_arm(const char *ia, int fd);
void info_watchdog_disarm(void);

#endif
