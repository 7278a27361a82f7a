/*
 * libfabric shm keeps each endpoint's region in a file, /dev/shm/<pid>:<uid>:<n>
 * (its own names: info.c never gives it a node), and unlinks it at fi_close
 * or, through handlers of its own, at SIGTERM, SIGINT, SIGSEGV and SIGBUS.
 * A process that exits without closing its IA (a DAT program's error path,
 * dtest's among them) left 16 MiB of tmpfs behind for good.  At exit, the
 * files named after this process go: the process and its regions go with
 * them, and a peer that still writes to one gets an error, as it would from
 * a closed endpoint.
 */
#include "rdm.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void unlink_own_regions(void)
{
	char prefix[48], path[300];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	size_t n;

	if (!d)
		return;
	n = (size_t)snprintf(prefix, sizeof(prefix), "%ld:%ld:", (long)getpid(),
			     (long)getuid());
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, n) != 0)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		unlink(path);
	}
	closedir(d);
}

static void register_once(void)
{
	atexit(unlink_own_regions);
}

void dfi_rdm_shm_unlink_at_exit(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, register_once);
}
