/* The process's open descriptors, walked: libfabric's socket providers
 * give no access to their sockets, and a few things need them
 * (liveness.c, halfreq.c). */
#include "fabric_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int dfi_fd_walk(bool (*visit)(int fd, void *arg), void *arg)
{
	struct dirent *d;
	DIR *dir = opendir("/proc/self/fd");
	int found = -1;

	if (!dir)
		return -errno;
	while ((d = readdir(dir)) != NULL) {
		char *end;
		long fd = strtol(d->d_name, &end, 10);

		if (*end || end == d->d_name || fd < 0 || fd > INT32_MAX || fd == dirfd(dir))
			continue;
		if (visit((int)fd, arg)) {
			found = (int)fd;
			break;
		}
	}
	closedir(dir);
	return found;
}
