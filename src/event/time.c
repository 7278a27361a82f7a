/* Deadlines and sleeping: one absolute CLOCK_MONOTONIC deadline per call,
 * nanosecond ppoll, microseconds never truncated (fixes OFA D2, D3, D14). */
#include "event.h"

#include <errno.h>
#include <poll.h>
#include <time.h>

uint64_t dfi_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t dfi_deadline(DAT_TIMEOUT timeout_us)
{
	if (timeout_us == DAT_TIMEOUT_INFINITE)
		return UINT64_MAX;
	return dfi_now_ns() + (uint64_t)timeout_us * 1000u;
}

uint64_t dfi_remaining(uint64_t deadline)
{
	uint64_t now;

	if (deadline == UINT64_MAX)
		return UINT64_MAX;
	now = dfi_now_ns();
	return deadline > now ? deadline - now : 0;
}

/* Where a cancelled waiter leaves from (evd_core.c, cno_core.c): the
 * unwinder skips this frame, and AddressSanitizer would find its redzones
 * still poisoned under the cleanup handler's stack (a false stack overflow
 * in __asan_handle_no_return): no redzones here. */
__attribute__((no_sanitize_address))
int dfi_sleep_fds(const int *fds, int nfds, uint64_t deadline)
{
	struct pollfd pfd[4];
	int which[4];
	struct timespec ts, *tsp = NULL;
	uint64_t left = dfi_remaining(deadline);
	int n = 0, rc, mask = 0;

	for (int i = 0; i < nfds && n < 4; i++)
		if (fds[i] >= 0) {
			which[n] = i;
			pfd[n++] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		}
	if (left != UINT64_MAX) {
		ts.tv_sec = (time_t)(left / 1000000000u);
		ts.tv_nsec = (long)(left % 1000000000u);
		tsp = &ts;
	}
	/* The caller's cancellation point.  poll consumes nothing: a cancel
	 * that acts as the call returns loses no event. */
	rc = ppoll(pfd, (nfds_t)n, tsp, NULL);
	if (rc < 0)
		return errno == EINTR ? -EINTR : -errno;
	for (int k = 0; k < n; k++)
		if (pfd[k].revents)
			mask |= 1 << which[k];
	return mask;
}
