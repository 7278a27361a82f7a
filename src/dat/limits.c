/* What runs out: file descriptors and endpoints, as DAT names them. */
#include "dfi.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

int dfi_fds_gone(void)
{
	int fd = eventfd(0, EFD_CLOEXEC);

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return errno == EMFILE || errno == ENFILE ? -errno : 0;
}

DAT_RETURN dfi_resource_err(int rc, DAT_UINT32 resource, const char *what)
{
	struct rlimit rl;

	if (rc == -EMFILE || rc == -ENFILE) {
		if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
			rl.rlim_cur = RLIM_INFINITY;
		if (rl.rlim_cur == RLIM_INFINITY)
			dfi_err(DFI_SS_API, "%s: no file descriptor left (%s: %s)", what,
				rc == -EMFILE ? "EMFILE" : "ENFILE", strerror(-rc));
		else
			dfi_err(DFI_SS_API, "%s: no file descriptor left (%s: %s; ulimit -n is "
				"%llu)", what, rc == -EMFILE ? "EMFILE" : "ENFILE", strerror(-rc),
				(unsigned long long)rl.rlim_cur);
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, resource);
	}
	if (rc == -ENOMEM) {
		dfi_err(DFI_SS_API, "%s: out of memory", what);
		return DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	return DFI_ERR(DAT_INTERNAL_ERROR, 0);
}

DAT_COUNT dfi_max_eps(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 65536 + 64)
		return 65536;
	return rl.rlim_cur > 64 + 1 ? (DAT_COUNT)rl.rlim_cur - 64 : 1;
}
