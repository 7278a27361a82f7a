/*
 * daplofi-demo: opens an IA through the stock DAT registry and shows what a
 * user wants to see first: the adapter, its limits, and the event core at
 * work (software events through an EVD, a CNO wake-up, a timed wait).
 *
 *   daplofi-demo [-P ia_name] [-n events]
 */
#include <dat2/udat.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int check(DAT_RETURN rc, const char *what)
{
	const char *major = "", *minor = "";

	if (rc == DAT_SUCCESS)
		return 0;
	dat_strerror(rc, &major, &minor);
	fprintf(stderr, "daplofi-demo: %s: %s %s (0x%x)\n", what, major, minor, (unsigned)rc);
	return 1;
}

struct poster {
	DAT_EVD_HANDLE evd;
	useconds_t delay;
};

static void *post_later(void *arg)
{
	struct poster *p = arg;
	DAT_EVENT ev;

	usleep(p->delay);
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = p;
	dat_evd_post_se(p->evd, &ev);
	return NULL;
}

int main(int argc, char **argv)
{
	char *name = "ofi-lo";
	long n = 1000000;
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL, evd, hint;
	DAT_CNO_HANDLE cno;
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	struct poster post;
	pthread_t thr;
	double t0, t1;
	char addr[INET_ADDRSTRLEN] = "?";
	int c;

	while ((c = getopt(argc, argv, "P:n:h")) != -1) {
		switch (c) {
		case 'P': name = optarg; break;
		case 'n': n = atol(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-P ia_name] [-n events]\n", argv[0]);
			return c == 'h' ? 0 : 1;
		}
	}

	if (check(dat_ia_open(name, 8, &async, &ia), "dat_ia_open"))
		return 1;
	if (check(dat_ia_query(ia, NULL, DAT_IA_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pr_attr),
		  "dat_ia_query"))
		return 1;
	if (ia_attr.ia_address_ptr && ia_attr.ia_address_ptr->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)ia_attr.ia_address_ptr)->sin_addr,
			  addr, sizeof(addr));

	printf("dapl-ofi demo: IA '%s' opened through the stock DAT registry\n", name);
	printf("  adapter        %s\n", ia_attr.adapter_name);
	printf("  provider       %s %u.%u, DAT %u.%u, libfabric %u.%u (provider %u.%u)\n",
	       pr_attr.provider_name, pr_attr.provider_version_major,
	       pr_attr.provider_version_minor, pr_attr.dapl_version_major,
	       pr_attr.dapl_version_minor, ia_attr.firmware_version_major,
	       ia_attr.firmware_version_minor, ia_attr.hardware_version_major,
	       ia_attr.hardware_version_minor);
	printf("  address        %s\n", addr);
	printf("  limits         %d EPs, %d DTOs/EP, %d IOVs, %d EVDs of up to %d events, "
	       "LMR up to %u bytes\n", ia_attr.max_eps, ia_attr.max_dto_per_ep,
	       ia_attr.max_iov_segments_per_dto, ia_attr.max_evds, ia_attr.max_evd_qlen,
	       ia_attr.max_lmr_block_size);
	for (int i = 0; i < pr_attr.num_provider_specific_attr; i++)
		printf("  %-14s %s = %s\n", i ? "" : "attributes",
		       pr_attr.provider_specific_attr[i].name,
		       pr_attr.provider_specific_attr[i].value);

	/* EVD + CNO round trip */
	if (check(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), "dat_cno_create") ||
	    check(dat_evd_create(ia, 1024, cno, DAT_EVD_SOFTWARE_FLAG, &evd), "dat_evd_create"))
		return 1;

	post.evd = evd;
	post.delay = 20000;
	t0 = now_us();
	pthread_create(&thr, NULL, post_later, &post);
	if (check(dat_cno_wait(cno, 2000000, &hint), "dat_cno_wait"))
		return 1;
	t1 = now_us();
	pthread_join(thr, NULL);
	printf("\nEvent core\n");
	printf("  CNO wake-up    a software event posted after 20 ms woke dat_cno_wait in %.1f ms "
	       "(hint is the EVD: %s)\n", (t1 - t0) / 1000, hint == evd ? "yes" : "NO");
	if (check(dat_evd_dequeue(evd, &ev), "dat_evd_dequeue"))
		return 1;

	t0 = now_us();
	pthread_create(&thr, NULL, post_later, &post);
	if (check(dat_evd_wait(evd, 2000000, 1, &ev, &nmore), "dat_evd_wait"))
		return 1;
	t1 = now_us();
	pthread_join(thr, NULL);
	printf("  EVD wait       dat_evd_wait(threshold 1) returned the event after %.1f ms, "
	       "%d more queued\n", (t1 - t0) / 1000, nmore);

	t0 = now_us();
	if (dat_evd_wait(evd, 1500, 1, &ev, &nmore) != DAT_SUCCESS)
		t1 = now_us();
	else
		t1 = t0;
	printf("  EVD timeout    dat_evd_wait(1500 us) on an empty EVD expired after %.0f us\n",
	       t1 - t0);

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	dat_evd_modify_cno(evd, DAT_HANDLE_NULL);
	t0 = now_us();
	for (long i = 0; i < n; i++) {
		DAT_EVENT out;

		dat_evd_post_se(evd, &ev);
		dat_evd_dequeue(evd, &out);
	}
	t1 = now_us();
	printf("  throughput     %ld post_se + dequeue pairs in %.1f ms: %.1f million/s\n",
	       n, (t1 - t0) / 1000, n / (t1 - t0));

	if (check(dat_evd_free(evd), "dat_evd_free") || check(dat_cno_free(cno), "dat_cno_free") ||
	    check(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), "dat_ia_close"))
		return 1;
	printf("\nIA closed gracefully.  (Connections and data: daplofi-perf(1); upcalls: "
	       "dat_evd_modify_upcall(3).)\n");
	return 0;
}
