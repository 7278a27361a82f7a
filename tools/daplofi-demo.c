/*
 * daplofi-demo: opens an IA through the stock DAT registry and shows what a
 * user wants to see first: the adapter, its limits, and the event core at
 * work (software events through an EVD, a CNO wake-up, a timed wait).
 * Every line says what happened and, when something is off, what to try.
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

static const char *conf_name(void)
{
	const char *c = getenv("DAT_OVERRIDE");

	return c && *c ? c : "/etc/dat.conf";
}

/* A failed call: what failed, then what to try. */
static int check(DAT_RETURN rc, const char *what)
{
	const char *major = "", *minor = "";

	if (rc == DAT_SUCCESS)
		return 0;
	dat_strerror(rc, &major, &minor);
	fprintf(stderr, "daplofi-demo: %s failed: %s %s (0x%x)\n", what, major, minor,
		(unsigned)rc);
	fprintf(stderr, "daplofi-demo: unexpected once the IA is open: run again with "
		"DAPL_OFI_LOG_LEVEL=debug and report the output\n");
	return 1;
}

/* "1 GiB", "64 KiB", "100 bytes" */
static const char *bytes(unsigned long long b, char *buf, size_t len)
{
	if (b >= (1ull << 30) && b % (1ull << 30) == 0)
		snprintf(buf, len, "%llu GiB", b >> 30);
	else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
		snprintf(buf, len, "%llu MiB", b >> 20);
	else if (b >= 1024 && b % 1024 == 0)
		snprintf(buf, len, "%llu KiB", b >> 10);
	else
		snprintf(buf, len, "%llu bytes", b);
	return buf;
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
	char *name = "ofi-lo", *end;
	long n = 1000000;
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL, evd, hint;
	DAT_CNO_HANDLE cno;
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_RETURN rc;
	struct poster post;
	pthread_t thr;
	double t0, t1, ms;
	char addr[INET_ADDRSTRLEN] = "?", lmr[32];
	const char *fabric = "?";
	int c;

	while ((c = getopt(argc, argv, "P:n:h")) != -1) {
		switch (c) {
		case 'P': name = optarg; break;
		case 'n':
			n = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || n < 1 || n > 1000000000) {
				fprintf(stderr, "daplofi-demo: -n takes a number of events from 1 "
					"to 1000000000, not '%s'\n", optarg);
				return 1;
			}
			break;
		case 'h':
			printf("usage: %s [-P ia_name] [-n events]\n", argv[0]);
			return 0;
		default:
			fprintf(stderr, "usage: %s [-P ia_name] [-n events]\n", argv[0]);
			return 1;
		}
	}

	rc = dat_ia_open(name, 8, &async, &ia);
	if (rc != DAT_SUCCESS) {
		const char *major = "", *minor = "";

		dat_strerror(rc, &major, &minor);
		fprintf(stderr, "daplofi-demo: dat_ia_open of IA '%s' failed: %s %s (0x%x)\n",
			name, major, minor, (unsigned)rc);
		fprintf(stderr, "daplofi-demo: why, and how to fix it: daplofi-info -f %s\n",
			conf_name());
		return 1;
	}
	if (check(dat_ia_query(ia, NULL, DAT_IA_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pr_attr),
		  "dat_ia_query"))
		return 1;
	if (ia_attr.ia_address_ptr && ia_attr.ia_address_ptr->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)ia_attr.ia_address_ptr)->sin_addr,
			  addr, sizeof(addr));
	for (int i = 0; i < pr_attr.num_provider_specific_attr; i++)
		if (strcmp(pr_attr.provider_specific_attr[i].name, "DAPL_OFI_FABRIC_PROVIDER") == 0)
			fabric = pr_attr.provider_specific_attr[i].value;

	printf("dapl-ofi demo: IA '%s' of %s opened through the stock DAT registry\n", name,
	       conf_name());
	printf("  adapter        %s\n", ia_attr.adapter_name);
	printf("  versions       %s %u.%u (DAT %u.%u) over libfabric %u.%u, its %s provider "
	       "%u.%u\n", pr_attr.provider_name, pr_attr.provider_version_major,
	       pr_attr.provider_version_minor, pr_attr.dapl_version_major,
	       pr_attr.dapl_version_minor, ia_attr.firmware_version_major,
	       ia_attr.firmware_version_minor, fabric, ia_attr.hardware_version_major,
	       ia_attr.hardware_version_minor);
	printf("  address        %s\n", addr);
	printf("  limits         %d EPs of %d DTOs each, %d IOVs per DTO, LMRs up to %s,\n"
	       "                 %d EVDs of up to %d events\n", ia_attr.max_eps,
	       ia_attr.max_dto_per_ep, ia_attr.max_iov_segments_per_dto,
	       bytes(ia_attr.max_lmr_block_size, lmr, sizeof(lmr)), ia_attr.max_evds,
	       ia_attr.max_evd_qlen);
	for (int i = 0; i < pr_attr.num_provider_specific_attr; i++)
		printf("  %-14s %s = %s\n", i ? "" : "attributes",
		       pr_attr.provider_specific_attr[i].name,
		       pr_attr.provider_specific_attr[i].value);

	/* EVD + CNO round trip */
	if (check(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), "dat_cno_create") ||
	    check(dat_evd_create(ia, 1024, cno, DAT_EVD_SOFTWARE_FLAG, &evd), "dat_evd_create"))
		return 1;

	printf("\nEvent core (a second thread posts a software event 20 ms after the main "
	       "thread starts to wait;\nmuch later than 20 ms means a busy machine, not a "
	       "slow provider)\n");
	post.evd = evd;
	post.delay = 20000;
	t0 = now_us();
	if (pthread_create(&thr, NULL, post_later, &post) != 0) {
		fprintf(stderr, "daplofi-demo: pthread_create failed\n");
		return 1;
	}
	rc = dat_cno_wait(cno, 2000000, &hint);
	t1 = now_us();
	pthread_join(thr, NULL);
	if (check(rc, "dat_cno_wait (2 s)"))
		return 1;
	printf("  CNO wake-up    dat_cno_wait returned after %.1f ms, %s\n", (t1 - t0) / 1000,
	       hint == evd ? "naming the EVD that has the event (its hint)" :
	       "but its hint is not the EVD that has the event: a dapl-ofi bug, please report");
	if (check(dat_evd_dequeue(evd, &ev), "dat_evd_dequeue"))
		return 1;

	t0 = now_us();
	if (pthread_create(&thr, NULL, post_later, &post) != 0) {
		fprintf(stderr, "daplofi-demo: pthread_create failed\n");
		return 1;
	}
	rc = dat_evd_wait(evd, 2000000, 1, &ev, &nmore);
	t1 = now_us();
	pthread_join(thr, NULL);
	if (check(rc, "dat_evd_wait (threshold 1, 2 s)"))
		return 1;
	printf("  EVD wait       dat_evd_wait (threshold 1) returned the event after %.1f ms, "
	       "%d more queued\n", (t1 - t0) / 1000, nmore);

	t0 = now_us();
	rc = dat_evd_wait(evd, 1500, 1, &ev, &nmore);
	t1 = now_us();
	if (DAT_GET_TYPE(rc) != DAT_TIMEOUT_EXPIRED) {
		check(rc == DAT_SUCCESS ? DAT_INTERNAL_ERROR : rc,
		      "dat_evd_wait (1500 us) on an empty EVD: it did not time out, and");
		return 1;
	}
	printf("  EVD timeout    dat_evd_wait (1500 us) on the empty EVD timed out after %.0f us\n",
	       t1 - t0);

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	if (check(dat_evd_modify_cno(evd, DAT_HANDLE_NULL), "dat_evd_modify_cno"))
		return 1;
	t0 = now_us();
	for (long i = 0; i < n; i++) {
		DAT_EVENT out;

		if (check(dat_evd_post_se(evd, &ev), "dat_evd_post_se") ||
		    check(dat_evd_dequeue(evd, &out), "dat_evd_dequeue"))
			return 1;
	}
	t1 = now_us();
	ms = (t1 - t0) / 1000;
	printf("  throughput     %ld dat_evd_post_se + dat_evd_dequeue pairs in %.1f ms: %.1f "
	       "million pairs/s\n", n, ms, n / (t1 - t0));

	if (check(dat_evd_free(evd), "dat_evd_free") || check(dat_cno_free(cno), "dat_cno_free") ||
	    check(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), "dat_ia_close"))
		return 1;
	printf("\nIA closed.  Next: daplofi-perf(1) moves data over connections (in make demo, "
	       "bench/demo runs\nit now); daplofi-info checks every IA of a dat.conf; "
	       "dat_evd_modify_upcall(3) shows upcalls.\n");
	return 0;
}
