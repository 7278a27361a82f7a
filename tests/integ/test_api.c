/*
 * dapl-ofi integration tests through the stock registry (libdat2).
 *
 * Links -ldat2 only: every call below goes dat_*() -> libdat2 -> the
 * provider table of build/libdaplofi.so.2, found through DAT_OVERRIDE
 * (build/dat.conf).  If DAT_OVERRIDE is unset, <dir of this binary>/../dat.conf
 * is used, so `build/tests/test_api` runs as it is.
 *
 * What the registry does itself (dat-clients.md 1.4, 1.6) shapes the tests:
 *  - the IA handle the consumer holds is a small index; the registry
 *    translates it, and rejects a non-index with DAT_INVALID_HANDLE;
 *  - every other call only checks for NULL (DAT_INVALID_HANDLE) and jumps
 *    through the first word of the handle, so an IA *index* must never be
 *    passed where another handle is expected (libdat2 dereferences address
 *    0x1: dapltest queryinfo case13/case15);
 *  - after a failed dat_ia_open, libdat2 2.1.10 runs dat_provider_fini and
 *    dlclose on that entry.
 *
 * The bad-entry tests re-execute this binary (--open-child NAME) so that the
 * provider logs into a pipe with a known log level.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dat2/udat.h>
#include <dat2/udat_redirection.h>	/* struct dat_provider: slots libdat2 does not export */

#include "dat_test.h"
#include "dat2/dapl_ofi.h"

extern char **environ;

#define IA_NAME		"ofi-lo"
#define ASYNC_QLEN	8
#define SEC		(1000u * 1000u)		/* DAT_TIMEOUT is in microseconds */

/* ------------------------------------------------------------------ utils */

static DAT_RETURN open_ia(const char *name, DAT_IA_HANDLE *ia, DAT_EVD_HANDLE *async)
{
	char buf[DAT_NAME_MAX_LENGTH];

	snprintf(buf, sizeof(buf), "%s", name);
	*ia = DAT_HANDLE_NULL;
	*async = DAT_HANDLE_NULL;
	return dat_ia_open(buf, ASYNC_QLEN, async, ia);
}

static DAT_EVENT sw_event(void *ptr)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = ptr;
	return ev;
}

static DAT_RETURN make_lmr(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, void *buf, DAT_VLEN len,
			   DAT_MEM_PRIV_FLAGS priv, DAT_LMR_HANDLE *lmr,
			   DAT_LMR_CONTEXT *lctx, DAT_RMR_CONTEXT *rctx)
{
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN reg_len = 0;
	DAT_VADDR reg_addr = 0;

	memset(&region, 0, sizeof(region));
	region.for_va = buf;
	return dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, len, pz, priv, DAT_VA_TYPE_VA,
			      lmr, lctx, rctx, &reg_len, &reg_addr);
}

static const char *find_attr(const DAT_PROVIDER_ATTR *pa, const char *name)
{
	for (DAT_COUNT i = 0; i < pa->num_provider_specific_attr; i++)
		if (pa->provider_specific_attr[i].name &&
		    strcmp(pa->provider_specific_attr[i].name, name) == 0)
			return pa->provider_specific_attr[i].value;
	return NULL;
}

/* ---------------------------------------------------------------- fixture */

struct fx {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_EVD_HANDLE evd;		/* software EVD, qlen 8, no CNO */
	DAT_CNO_HANDLE cno;
	uint64_t forged[16];		/* provider pointer + garbage */
	char buf[8192];
};

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	if (open_ia(IA_NAME, &f->ia, &f->async) != DAT_SUCCESS) {
		print_error("dat_ia_open(%s) failed; is DAT_OVERRIDE=%s right?\n", IA_NAME,
			    getenv("DAT_OVERRIDE") ? getenv("DAT_OVERRIDE") : "(unset)");
		free(f);
		return -1;
	}
	if (dat_pz_create(f->ia, &f->pz) != DAT_SUCCESS ||
	    make_lmr(f->ia, f->pz, f->buf, sizeof(f->buf), DAT_MEM_PRIV_ALL_FLAG, &f->lmr,
		     &f->lctx, NULL) != DAT_SUCCESS ||
	    dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &f->evd) != DAT_SUCCESS ||
	    dat_cno_create(f->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &f->cno) != DAT_SUCCESS) {
		print_error("fixture: creating PZ/LMR/EVD/CNO failed\n");
		dat_ia_close(f->ia, DAT_CLOSE_ABRUPT_FLAG);
		free(f);
		return -1;
	}
	/* Looks like a handle to the registry (first word: our provider
	 * table), but is no object of the provider's. */
	memset(f->forged, 0x5a, sizeof(f->forged));
	memcpy(&f->forged[0], f->pz, sizeof(void *));
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	DAT_RETURN rc;

	rc = dat_ia_close(f->ia, DAT_CLOSE_ABRUPT_FLAG);
	free(f);
	if (rc != DAT_SUCCESS) {
		print_error("teardown: dat_ia_close(ABRUPT) returned 0x%08x\n", (unsigned)rc);
		return -1;
	}
	return 0;
}

/* ========================================================== IA open/close */

static void test_ia_open_close_graceful(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;

	(void)state;
	assert_ok(open_ia(IA_NAME, &ia, &async));
	assert_non_null(ia);
	assert_non_null(async);
	assert_ok(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
	/* the index is gone: the registry rejects it */
	assert_err(dat_ia_query(ia, NULL, 0, NULL, 0, NULL), DAT_INVALID_HANDLE);
}

static void test_ia_reopen_three_times(void **state)
{
	DAT_IA_HANDLE ia[3];
	DAT_EVD_HANDLE async[3];
	DAT_PZ_HANDLE pz;

	(void)state;
	for (int round = 0; round < 3; round++) {
		assert_ok(open_ia(IA_NAME, &ia[0], &async[0]));
		assert_ok(dat_pz_create(ia[0], &pz));
		assert_ok(dat_pz_free(pz));
		assert_ok(dat_ia_close(ia[0], DAT_CLOSE_GRACEFUL_FLAG));
	}
	/* three at once (dapltest limit_ia): distinct IAs and async EVDs */
	for (int i = 0; i < 3; i++)
		assert_ok(open_ia(IA_NAME, &ia[i], &async[i]));
	assert_true(ia[0] != ia[1] && ia[1] != ia[2] && ia[0] != ia[2]);
	assert_true(async[0] != async[1] && async[1] != async[2] && async[0] != async[2]);
	for (int i = 0; i < 3; i++) {
		assert_ok(dat_pz_create(ia[i], &pz));
		assert_ok(dat_pz_free(pz));
	}
	for (int i = 2; i >= 0; i--)
		assert_ok(dat_ia_close(ia[i], DAT_CLOSE_GRACEFUL_FLAG));
}

static void test_ia_close_graceful_refused_with_pz(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_PZ_HANDLE pz;

	(void)state;
	assert_ok(open_ia(IA_NAME, &ia, &async));
	assert_ok(dat_pz_create(ia, &pz));
	assert_err(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_INVALID_STATE);
	/* refused means untouched: the IA and the PZ still work */
	assert_ok(dat_ia_query(ia, NULL, 0, NULL, 0, NULL));
	assert_ok(dat_pz_free(pz));
	assert_ok(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
}

static void test_ia_close_abrupt_frees_everything(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd, evd2;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr, lmr2;
	DAT_CNO_HANDLE cno;
	DAT_LMR_CONTEXT lctx;
	DAT_REGION_DESCRIPTION region;
	DAT_EVENT ev = sw_event(NULL);
	static char buf[4096];

	(void)state;
	for (int round = 0; round < 2; round++) {
		assert_ok(open_ia(IA_NAME, &ia, &async));
		assert_ok(dat_pz_create(ia, &pz));
		assert_ok(make_lmr(ia, pz, buf, sizeof(buf), DAT_MEM_PRIV_ALL_FLAG, &lmr, &lctx, NULL));
		memset(&region, 0, sizeof(region));
		region.for_lmr_handle = lmr;
		assert_ok(dat_lmr_create(ia, DAT_MEM_TYPE_LMR, region, 0, pz, DAT_MEM_PRIV_ALL_FLAG,
					 DAT_VA_TYPE_VA, &lmr2, &lctx, NULL, NULL, NULL));
		assert_ok(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
		assert_ok(dat_evd_create(ia, 16, cno, DAT_EVD_SOFTWARE_FLAG, &evd));
		assert_ok(dat_evd_create(ia, 4, DAT_HANDLE_NULL,
					 DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, &evd2));
		assert_ok(dat_evd_post_se(evd, &ev));	/* queued event, triggered CNO */
		assert_ok(dat_evd_post_se(evd2, &ev));
		assert_ok(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
	}
	/* and the provider is usable afterwards */
	assert_ok(open_ia(IA_NAME, &ia, &async));
	assert_ok(dat_pz_create(ia, &pz));
	assert_ok(dat_pz_free(pz));
	assert_ok(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
}

static void test_ia_close_bad_flags(void **state)
{
	struct fx *f = *state;

	assert_arg(dat_ia_close(f->ia, (DAT_CLOSE_FLAGS)7), DAT_INVALID_ARG2);
	assert_ok(dat_ia_query(f->ia, NULL, 0, NULL, 0, NULL));	/* still open */
}

static void test_ia_open_async_evd_created(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE q = DAT_HANDLE_NULL;
	DAT_HANDLE_TYPE t = (DAT_HANDLE_TYPE)-1;
	DAT_EVD_PARAM p;
	DAT_EVENT ev;

	assert_non_null(f->async);
	assert_ok(dat_ia_query(f->ia, &q, 0, NULL, 0, NULL));
	assert_ptr_equal(q, f->async);
	assert_ok(dat_get_handle_type(f->async, &t));
	assert_int_equal(t, DAT_HANDLE_TYPE_EVD);
	memset(&p, 0, sizeof(p));
	assert_ok(dat_evd_query(f->async, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_flags & DAT_EVD_ASYNC_FLAG);
	assert_true(p.evd_qlen >= ASYNC_QLEN);
	assert_rc(dat_evd_dequeue(f->async, &ev), DAT_QUEUE_EMPTY);
}

static void test_ia_async_evd_free_refused(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE q = DAT_HANDLE_NULL;
	DAT_EVD_PARAM p;

	assert_err(dat_evd_free(f->async), DAT_INVALID_STATE);
	assert_ok(dat_ia_query(f->ia, &q, 0, NULL, 0, NULL));
	assert_ptr_equal(q, f->async);
	assert_ok(dat_evd_query(f->async, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_flags & DAT_EVD_ASYNC_FLAG);
}

static void test_ia_open_bad_arguments(void **state)
{
	DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	char name[] = IA_NAME;

	(void)state;
	assert_arg(dat_ia_open(name, 0, &async, &ia), DAT_INVALID_ARG2);
	async = DAT_HANDLE_NULL;
	assert_arg(dat_ia_open(name, -1, &async, &ia), DAT_INVALID_ARG2);
	assert_arg(dat_ia_open(name, ASYNC_QLEN, NULL, &ia), DAT_INVALID_ARG3);
	async = DAT_HANDLE_NULL;
	/* libdat2 itself rejects a NULL IA pointer and a NULL name */
	assert_err(dat_ia_open(name, ASYNC_QLEN, &async, NULL), DAT_INVALID_HANDLE);
	assert_err(dat_ia_open(NULL, ASYNC_QLEN, &async, &ia), DAT_INVALID_PARAMETER);
}

/* ================================================================ ia_query */

static void test_ia_query_null_combinations(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR pa;
	DAT_EVD_HANDLE q;

	/* what libdat2 does inside dat_ia_close and dat_ia_openv */
	assert_ok(dat_ia_query(f->ia, NULL, 0, NULL, 0, NULL));
	assert_ok(dat_ia_query(f->ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
	assert_int_equal(pa.dapl_version_major, 2);
	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &a, 0, NULL));
	assert_non_null(a.ia_address_ptr);
	q = DAT_HANDLE_NULL;
	assert_ok(dat_ia_query(f->ia, &q, 0, NULL, 0, NULL));
	assert_ptr_equal(q, f->async);
	q = DAT_HANDLE_NULL;
	assert_ok(dat_ia_query(f->ia, &q, DAT_IA_ALL, &a, DAT_PROVIDER_FIELD_ALL, &pa));
	assert_ptr_equal(q, f->async);
}

/* dapltest -T F -f queryinfo case10 (DT_queryinfo_basic): a NULL ia_attr with
 * a non-zero mask must give DAT_INVALID_PARAMETER (reference uDAPL
 * dapl_ia_query: ARG4).  A zero mask with NULL stays valid (libdat2). */
static void test_ia_query_null_ia_attr_with_mask(void **state)
{
	struct fx *f = *state;
	DAT_PROVIDER_ATTR pa;
	DAT_EVD_HANDLE q = DAT_HANDLE_NULL;

	assert_arg(dat_ia_query(f->ia, &q, DAT_IA_ALL, NULL, DAT_PROVIDER_FIELD_ALL, &pa),
		   DAT_INVALID_ARG4);
	assert_arg(dat_ia_query(f->ia, NULL, DAT_IA_FIELD_IA_ADDRESS_PTR, NULL, 0, NULL),
		   DAT_INVALID_ARG4);
}

/* The same for provider_attr (reference uDAPL dapl_ia_query: ARG6). */
static void test_ia_query_null_provider_attr_with_mask(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR a;

	assert_arg(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &a, DAT_PROVIDER_FIELD_ALL, NULL),
		   DAT_INVALID_ARG6);
}

static void test_ia_query_unknown_ia_mask_bits(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR a;

	assert_arg(dat_ia_query(f->ia, NULL, DAT_IA_ALL | (UINT64_C(1) << 50), &a, 0, NULL),
		   DAT_INVALID_ARG3);
	assert_arg(dat_ia_query(f->ia, NULL, UINT64_C(1) << 63, &a, 0, NULL), DAT_INVALID_ARG3);
}

static void test_ia_query_provider_attr(void **state)
{
	struct fx *f = *state;
	DAT_PROVIDER_ATTR pa;

	memset(&pa, 0xa5, sizeof(pa));
	assert_ok(dat_ia_query(f->ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
	/* libdat2 rebuilds its lookup key from these in dat_ia_close (1.4) */
	assert_int_equal(pa.dapl_version_major, 2);
	assert_int_equal(pa.dapl_version_minor, 0);
	assert_int_equal(pa.is_thread_safe, DAT_FALSE);
	assert_string_equal(pa.provider_name, DAPL_OFI_PROVIDER_NAME);
	assert_true(pa.max_private_data_size >= 48);
	assert_true(pa.lmr_mem_types_supported & DAT_MEM_TYPE_LMR);	/* VIRTUAL is 0 */
}

static void test_ia_query_address_is_loopback(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR a;
	const struct sockaddr_in *sin;

	memset(&a, 0, sizeof(a));
	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &a, 0, NULL));
	assert_non_null(a.ia_address_ptr);
	sin = (const struct sockaddr_in *)a.ia_address_ptr;
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
}

static void test_ia_query_provider_specific_attrs(void **state)
{
	struct fx *f = *state;
	DAT_PROVIDER_ATTR pa;
	const char *mtu, *rr;

	assert_ok(dat_ia_query(f->ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
	assert_true(pa.num_provider_specific_attr > 0);
	assert_non_null(pa.provider_specific_attr);
	mtu = find_attr(&pa, "DAT_IB_TRANSPORT_MTU");
	assert_non_null(mtu);
	assert_string_equal(mtu, "2048");		/* default; dtestsrq's -b */
	rr = find_attr(&pa, "DAT_IB_RDMA_READ");
	assert_true(rr == NULL || strcmp(rr, "TRUE") != 0);	/* ofi-lo has no rdma_read=1 */
}

/* The entry with options: "tcp 127.0.0.1 rdma_read=1" */
static void test_ia_query_rdma_read_entry(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_PROVIDER_ATTR pa;
	DAT_IA_ATTR a;
	const char *rr;

	(void)state;
	assert_ok(open_ia("ofi-lo-rr", &ia, &async));
	assert_ok(dat_ia_query(ia, NULL, DAT_IA_ALL, &a, DAT_PROVIDER_FIELD_ALL, &pa));
	rr = find_attr(&pa, "DAT_IB_RDMA_READ");
	assert_non_null(rr);
	assert_string_equal(rr, "TRUE");
	assert_int_equal(((const struct sockaddr_in *)a.ia_address_ptr)->sin_family, AF_INET);
	assert_int_equal(ntohl(((const struct sockaddr_in *)a.ia_address_ptr)->sin_addr.s_addr),
			 INADDR_LOOPBACK);
	assert_ok(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
}

/* The same library serving a second IA name, another libfabric provider. */
static void test_ia_open_net_entry(void **state)
{
	DAT_IA_HANDLE ia, ia2;
	DAT_EVD_HANDLE async, async2;
	DAT_PROVIDER_ATTR pa;
	DAT_PZ_HANDLE pz;

	(void)state;
	assert_ok(open_ia("ofi-net-lo", &ia, &async));
	assert_ok(open_ia(IA_NAME, &ia2, &async2));	/* both names at once */
	assert_ok(dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
	assert_int_equal(pa.dapl_version_major, 2);
	assert_ok(dat_pz_create(ia, &pz));
	assert_ok(dat_pz_free(pz));
	assert_ok(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
	assert_ok(dat_ia_close(ia2, DAT_CLOSE_GRACEFUL_FLAG));
}

static void test_ia_query_merging_matrix(void **state)
{
	struct fx *f = *state;
	DAT_PROVIDER_ATTR pa;

	assert_ok(dat_ia_query(f->ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa));
	/* order: software, CR, DTO, connection, RMR bind, async */
	for (int i = 0; i < 6; i++) {
		for (int j = 0; j < 6; j++) {
			DAT_BOOLEAN want = (i == 5) == (j == 5) ? DAT_TRUE : DAT_FALSE;

			if (pa.evd_stream_merging_supported[i][j] != want)
				fail_msg("evd_stream_merging_supported[%d][%d] = %d, expected %d",
					 i, j, pa.evd_stream_merging_supported[i][j], want);
		}
	}
}

static void test_ia_query_limits_sane(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR a;
	DAT_EVD_HANDLE evd;

	memset(&a, 0, sizeof(a));
	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &a, 0, NULL));
	/* they size real queues (dapltest -T P), so "not huge" */
	assert_in_range(a.max_evd_qlen, 64, 1 << 20);
	assert_in_range(a.max_dto_per_ep, 16, 1 << 16);
	assert_in_range(a.max_iov_segments_per_dto, 4, 1024);	/* dapltest scripts use 4 */
	/* dapltest -T L -m 100 must not hit these */
	assert_true(a.max_pzs >= 100);
	assert_true(a.max_evds >= 100);
	assert_true(a.max_lmrs >= 100);
	/* limit_size_lmr doubles up to the 2 GiB int overflow (dat-clients.md 3.6) */
	assert_true(a.max_lmr_block_size >= 4096 && a.max_lmr_block_size < (UINT64_C(1) << 31));
	/* the reported maximum is a real one */
	assert_ok(dat_evd_create(f->ia, a.max_evd_qlen, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd));
	assert_ok(dat_evd_free(evd));
}

/* dtest asks for DAT_PROVIDER_FIELD_PROVIDER_SPECIFIC_ATTR only and reads
 * other fields (dat-clients.md 3.1): everything is filled, whatever the mask. */
static void test_ia_query_fills_unrequested_fields(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR pa;

	memset(&a, 0xa5, sizeof(a));
	memset(&pa, 0xa5, sizeof(pa));
	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_FIELD_IA_ADDRESS_PTR, &a,
			       DAT_PROVIDER_FIELD_PROVIDER_SPECIFIC_ATTR, &pa));
	assert_in_range(a.max_evd_qlen, 1, 1 << 20);
	assert_in_range(a.max_dto_per_ep, 1, 1 << 16);
	assert_in_range(pa.max_private_data_size, 48, 1 << 16);
	assert_int_equal(pa.dapl_version_major, 2);
	assert_int_equal(pa.is_thread_safe, DAT_FALSE);
	assert_in_range(pa.num_provider_specific_attr, 1, 64);
}

/* ============================================================ bad IA names */

static void test_ia_open_unknown_name(void **state)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;

	(void)state;
	assert_err(open_ia("ofi-no-such-ia", &ia, &async), DAT_PROVIDER_NOT_FOUND);
	/* and the registry is fine afterwards */
	assert_ok(open_ia(IA_NAME, &ia, &async));
	assert_ok(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG));
}

struct child {
	bool exited;
	int code, sig;
	bool have_rc;
	DAT_RETURN rc;
	char out[1024], err[8192];
	size_t outlen, errlen;
};

/* Build the child's environment: ours, with the log settings pinned. */
static char **child_env(void)
{
	static const char *const drop[] = {
		"DAPL_OFI_LOG_LEVEL=", "DAPL_OFI_LOG_SUBSYS=", "DAPL_OFI_LOG_FILE=",
		"DAPL_DBG_TYPE=", "DAPL_DBG_DEST=", "DAT_DBG_TYPE=", "DAT_DBG_DEST=",
		"FI_LOG_LEVEL=",
	};
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 3, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		bool keep = true;

		for (size_t d = 0; d < sizeof(drop) / sizeof(drop[0]); d++)
			if (strncmp(environ[i], drop[d], strlen(drop[d])) == 0)
				keep = false;
		if (keep)
			env[k++] = environ[i];
	}
	env[k++] = (char *)"DAPL_OFI_LOG_LEVEL=warn";
	env[k] = NULL;
	return env;
}

/* Run `<this binary> --open-child NAME`: dat_ia_open in a fresh process,
 * stdout/stderr captured, at most 60 s. */
static void run_open_child(const char *name, struct child *c)
{
	int out[2], err[2], status = 0;
	char **env = child_env();
	char self[PATH_MAX];
	ssize_t sl;
	pid_t pid;
	uint64_t deadline = now_ns() + UINT64_C(60) * 1000000000u;
	struct pollfd pf[2];

	memset(c, 0, sizeof(*c));
	assert_non_null(env);
	sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(sl > 0);
	self[sl] = '\0';
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	assert_int_equal(pipe2(err, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *argv[] = { self, (char *)"--open-child", (char *)name, NULL };

		dup2(out[1], 1);
		dup2(err[1], 2);
		execve(self, argv, env);
		_exit(127);
	}
	free(env);
	close(out[1]);
	close(err[1]);
	pf[0] = (struct pollfd){ .fd = out[0], .events = POLLIN };
	pf[1] = (struct pollfd){ .fd = err[0], .events = POLLIN };
	while (pf[0].fd >= 0 || pf[1].fd >= 0) {
		uint64_t now = now_ns();
		int r;

		if (now >= deadline) {
			kill(pid, SIGKILL);
			break;
		}
		r = poll(pf, 2, (int)((deadline - now) / 1000000u) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		for (int i = 0; i < 2; i++) {
			char *buf = i == 0 ? c->out : c->err;
			size_t cap = i == 0 ? sizeof(c->out) : sizeof(c->err);
			size_t *len = i == 0 ? &c->outlen : &c->errlen;
			char tmp[1024];
			ssize_t got;

			if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			got = read(pf[i].fd, tmp, sizeof(tmp));
			if (got <= 0) {
				close(pf[i].fd);
				pf[i].fd = -1;
				continue;
			}
			if (*len + (size_t)got >= cap)
				got = (ssize_t)(cap - 1 - *len);
			memcpy(buf + *len, tmp, (size_t)got);
			*len += (size_t)got;
			buf[*len] = '\0';
		}
	}
	for (int i = 0; i < 2; i++)
		if (pf[i].fd >= 0)
			close(pf[i].fd);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	c->exited = WIFEXITED(status);
	c->code = c->exited ? WEXITSTATUS(status) : -1;
	c->sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	{
		unsigned v;

		if (sscanf(c->out, "rc=0x%x", &v) == 1) {
			c->have_rc = true;
			c->rc = (DAT_RETURN)v;
		}
	}
}

static int open_child_main(const char *name)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_RETURN rc;

	alarm(50);		/* a hang is a failure, not a stuck suite */
	rc = open_ia(name, &ia, &async);
	printf("rc=0x%08x\n", (unsigned)rc);
	fflush(stdout);
	if (rc == DAT_SUCCESS)
		dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	_exit(0);	/* no atexit handlers: nothing else reaches stderr */
}

/* The open fails with `type`; stderr holds exactly one line, which names the
 * IA, quotes its ia_params and then gives a reason that mentions one of
 * `reason` (after the ia_params, so the quote itself does not count). */
static void check_bad_entry(const char *name, const char *params, DAT_RETURN type,
			    const char *const *reason)
{
	struct child c;
	char *line, *end, *after;
	int lines = 0;
	bool found = false;

	run_open_child(name, &c);
	if (!c.exited || c.code != 0)
		fail_msg("child opening %s: exited=%d code=%d signal=%d (crash or hang)\n"
			 "stdout: %s\nstderr: %s", name, c.exited, c.code, c.sig, c.out, c.err);
	if (!c.have_rc)
		fail_msg("child opening %s printed no return code; stdout: %s", name, c.out);
	check_rc(c.rc, ERR(type, 0), true, name, __FILE__, __LINE__);

	line = NULL;
	for (char *p = c.err; *p; p = *end ? end + 1 : end) {
		end = strchrnul(p, '\n');
		if (end > p) {
			lines++;
			if (!line)
				line = p;
		}
	}
	if (lines != 1)
		fail_msg("opening %s: expected exactly one log line on stderr, got %d:\n%s",
			 name, lines, c.err);
	end = strchrnul(line, '\n');
	*end = '\0';
	if (!strstr(line, name))
		fail_msg("log line does not name the IA '%s': %s", name, line);
	after = strstr(line, params);
	if (!after)
		fail_msg("log line does not quote the ia_params \"%s\": %s", params, line);
	after += strlen(params);
	for (int i = 0; reason[i]; i++)
		if (strstr(after, reason[i]))
			found = true;
	if (!found)
		fail_msg("log line gives no reason (expected one of '%s'%s after the ia_params): %s",
			 reason[0], reason[1] ? ", ..." : "", line);
}

static void test_ia_open_bad_params(void **state)
{
	static const char *const reason[] = { "expected", "missing", "address", NULL };

	(void)state;
	check_bad_entry("ofi-bad-params", "\"tcp\"", DAT_INVALID_PARAMETER, reason);
}

static void test_ia_open_bad_key(void **state)
{
	static const char *const reason[] = { "frobnicate", NULL };

	(void)state;
	check_bad_entry("ofi-bad-key", "\"tcp lo frobnicate=1\"", DAT_INVALID_PARAMETER, reason);
}

static void test_ia_open_bad_prov(void **state)
{
	static const char *const reason[] = { "nosuchprov", NULL };

	(void)state;
	check_bad_entry("ofi-bad-prov", "\"nosuchprov lo\"", DAT_PROVIDER_NOT_FOUND, reason);
}

static void test_ia_open_bad_if(void **state)
{
	static const char *const reason[] = { "nosuchif0", NULL };

	(void)state;
	check_bad_entry("ofi-bad-if", "\"tcp nosuchif0\"", DAT_INVALID_ADDRESS, reason);
}

/* libdat2 2.1.10 runs dat_provider_fini + dlclose for a failed entry
 * (dat-clients.md 1.4): other IAs of the same library must keep working, and
 * later opens must still succeed. */
static void test_ia_open_after_failed_open(void **state)
{
	DAT_IA_HANDLE a, b;
	DAT_EVD_HANDLE async_a, async_b, evd;
	DAT_PZ_HANDLE pz;
	DAT_EVENT ev = sw_event(&a), out;

	(void)state;
	assert_ok(open_ia(IA_NAME, &a, &async_a));
	assert_err(open_ia("ofi-bad-key", &b, &async_b), DAT_INVALID_PARAMETER);
	assert_err(open_ia("ofi-bad-params", &b, &async_b), DAT_INVALID_PARAMETER);
	/* the open IA is untouched */
	assert_ok(dat_ia_query(a, NULL, 0, NULL, 0, NULL));
	assert_ok(dat_pz_create(a, &pz));
	assert_ok(dat_evd_create(a, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd));
	assert_ok(dat_evd_post_se(evd, &ev));
	assert_ok(dat_evd_dequeue(evd, &out));
	assert_ptr_equal(out.event_data.software_event_data.pointer, &a);
	assert_ok(dat_evd_free(evd));
	assert_ok(dat_pz_free(pz));
	/* a second IA of the same name opens */
	assert_ok(open_ia(IA_NAME, &b, &async_b));
	assert_ok(dat_ia_close(b, DAT_CLOSE_GRACEFUL_FLAG));
	assert_ok(dat_ia_close(a, DAT_CLOSE_GRACEFUL_FLAG));
	/* nothing open: a failure, then a good open */
	assert_err(open_ia("ofi-bad-if", &b, &async_b), DAT_INVALID_ADDRESS);
	assert_err(open_ia("ofi-bad-prov", &b, &async_b), DAT_PROVIDER_NOT_FOUND);
	assert_ok(open_ia(IA_NAME, &a, &async_a));
	assert_ok(dat_pz_create(a, &pz));
	assert_ok(dat_pz_free(pz));
	assert_ok(dat_ia_close(a, DAT_CLOSE_GRACEFUL_FLAG));
}

/* ================================================ handles: the call table */

typedef DAT_RETURN (*call_fn)(struct fx *f, DAT_HANDLE h);

struct call {
	const char *name;
	DAT_HANDLE_TYPE wants;		/* the type of the argument h stands for */
	bool null_ok;			/* DAT_HANDLE_NULL is a legal value there */
	call_fn fn;
};

static DAT_RETURN c_pz_query(struct fx *f, DAT_HANDLE h)
{
	DAT_PZ_PARAM p;

	(void)f;
	return dat_pz_query(h, DAT_PZ_FIELD_ALL, &p);
}

static DAT_RETURN c_pz_free(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_pz_free(h);
}

static DAT_RETURN c_lmr_query(struct fx *f, DAT_HANDLE h)
{
	DAT_LMR_PARAM p;

	(void)f;
	return dat_lmr_query(h, DAT_LMR_FIELD_ALL, &p);
}

static DAT_RETURN c_lmr_free(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_lmr_free(h);
}

static DAT_RETURN c_lmr_create_pz(struct fx *f, DAT_HANDLE h)
{
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;

	return make_lmr(f->ia, h, f->buf, 256, DAT_MEM_PRIV_ALL_FLAG, &lmr, &lctx, NULL);
}

static DAT_RETURN c_lmr_create_on_lmr(struct fx *f, DAT_HANDLE h)
{
	DAT_REGION_DESCRIPTION region;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;

	memset(&region, 0, sizeof(region));
	region.for_lmr_handle = h;
	return dat_lmr_create(f->ia, DAT_MEM_TYPE_LMR, region, 0, f->pz, DAT_MEM_PRIV_ALL_FLAG,
			      DAT_VA_TYPE_VA, &lmr, &lctx, NULL, NULL, NULL);
}

static DAT_RETURN c_evd_create_cno(struct fx *f, DAT_HANDLE h)
{
	DAT_EVD_HANDLE evd;

	return dat_evd_create(f->ia, 8, h, DAT_EVD_SOFTWARE_FLAG, &evd);
}

static DAT_RETURN c_evd_query(struct fx *f, DAT_HANDLE h)
{
	DAT_EVD_PARAM p;

	(void)f;
	return dat_evd_query(h, DAT_EVD_FIELD_ALL, &p);
}

static DAT_RETURN c_evd_modify_cno_evd(struct fx *f, DAT_HANDLE h)
{
	return dat_evd_modify_cno(h, f->cno);
}

static DAT_RETURN c_evd_modify_cno_cno(struct fx *f, DAT_HANDLE h)
{
	return dat_evd_modify_cno(f->evd, h);
}

static DAT_RETURN c_evd_enable(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_evd_enable(h);
}

static DAT_RETURN c_evd_disable(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_evd_disable(h);
}

static DAT_RETURN c_evd_wait(struct fx *f, DAT_HANDLE h)
{
	DAT_EVENT ev;
	DAT_COUNT n;

	(void)f;
	return dat_evd_wait(h, 0, 1, &ev, &n);
}

static DAT_RETURN c_evd_resize(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_evd_resize(h, 16);
}

static DAT_RETURN c_evd_post_se(struct fx *f, DAT_HANDLE h)
{
	DAT_EVENT ev = sw_event(f);

	return dat_evd_post_se(h, &ev);
}

static DAT_RETURN c_evd_dequeue(struct fx *f, DAT_HANDLE h)
{
	DAT_EVENT ev;

	(void)f;
	return dat_evd_dequeue(h, &ev);
}

static DAT_RETURN c_evd_free(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_evd_free(h);
}

static DAT_RETURN c_evd_set_unwaitable(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_evd_set_unwaitable(h);
}

static DAT_RETURN c_evd_clear_unwaitable(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_evd_clear_unwaitable(h);
}

static DAT_RETURN c_cno_query(struct fx *f, DAT_HANDLE h)
{
	DAT_CNO_PARAM p;

	(void)f;
	return dat_cno_query(h, DAT_CNO_FIELD_ALL, &p);
}

static DAT_RETURN c_cno_free(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_cno_free(h);
}

static DAT_RETURN c_cno_wait(struct fx *f, DAT_HANDLE h)
{
	DAT_EVD_HANDLE evd;

	(void)f;
	return dat_cno_wait(h, 0, &evd);
}

static DAT_RETURN c_cno_modify_agent(struct fx *f, DAT_HANDLE h)
{
	(void)f;
	return dat_cno_modify_agent(h, DAT_OS_WAIT_PROXY_AGENT_NULL);
}

static const struct call calls[] = {
	{ "dat_pz_query",		DAT_HANDLE_TYPE_PZ,  false, c_pz_query },
	{ "dat_pz_free",		DAT_HANDLE_TYPE_PZ,  false, c_pz_free },
	{ "dat_lmr_create(pz)",		DAT_HANDLE_TYPE_PZ,  false, c_lmr_create_pz },
	{ "dat_lmr_create(LMR region)",	DAT_HANDLE_TYPE_LMR, false, c_lmr_create_on_lmr },
	{ "dat_lmr_query",		DAT_HANDLE_TYPE_LMR, false, c_lmr_query },
	{ "dat_lmr_free",		DAT_HANDLE_TYPE_LMR, false, c_lmr_free },
	{ "dat_evd_create(cno)",	DAT_HANDLE_TYPE_CNO, true,  c_evd_create_cno },
	{ "dat_evd_query",		DAT_HANDLE_TYPE_EVD, false, c_evd_query },
	{ "dat_evd_modify_cno(evd)",	DAT_HANDLE_TYPE_EVD, false, c_evd_modify_cno_evd },
	{ "dat_evd_modify_cno(cno)",	DAT_HANDLE_TYPE_CNO, true,  c_evd_modify_cno_cno },
	{ "dat_evd_enable",		DAT_HANDLE_TYPE_EVD, false, c_evd_enable },
	{ "dat_evd_disable",		DAT_HANDLE_TYPE_EVD, false, c_evd_disable },
	{ "dat_evd_wait",		DAT_HANDLE_TYPE_EVD, false, c_evd_wait },
	{ "dat_evd_resize",		DAT_HANDLE_TYPE_EVD, false, c_evd_resize },
	{ "dat_evd_post_se",		DAT_HANDLE_TYPE_EVD, false, c_evd_post_se },
	{ "dat_evd_dequeue",		DAT_HANDLE_TYPE_EVD, false, c_evd_dequeue },
	{ "dat_evd_free",		DAT_HANDLE_TYPE_EVD, false, c_evd_free },
	{ "dat_evd_set_unwaitable",	DAT_HANDLE_TYPE_EVD, false, c_evd_set_unwaitable },
	{ "dat_evd_clear_unwaitable",	DAT_HANDLE_TYPE_EVD, false, c_evd_clear_unwaitable },
	{ "dat_cno_query",		DAT_HANDLE_TYPE_CNO, false, c_cno_query },
	{ "dat_cno_free",		DAT_HANDLE_TYPE_CNO, false, c_cno_free },
	{ "dat_cno_wait",		DAT_HANDLE_TYPE_CNO, false, c_cno_wait },
	{ "dat_cno_modify_agent",	DAT_HANDLE_TYPE_CNO, false, c_cno_modify_agent },
};
#define N_CALLS (sizeof(calls) / sizeof(calls[0]))

struct cand {
	const char *name;
	int type;			/* DAT_HANDLE_TYPE, or -1: no object */
	DAT_HANDLE h;
};

/* Every call with every candidate must give DAT_INVALID_HANDLE (type). */
static void expect_rejected(struct fx *f, const struct cand *cand, size_t n, bool skip_same_type)
{
	int bad = 0;

	for (size_t c = 0; c < N_CALLS; c++) {
		for (size_t k = 0; k < n; k++) {
			DAT_RETURN rc;
			char buf[160];

			if (skip_same_type && cand[k].type == (int)calls[c].wants)
				continue;
			if (!cand[k].h && calls[c].null_ok)
				continue;
			rc = calls[c].fn(f, cand[k].h);
			if (DAT_GET_TYPE(rc) != DAT_INVALID_HANDLE || !(rc & DAT_CLASS_ERROR)) {
				print_error("%s(%s %p) returned %s, expected DAT_INVALID_HANDLE\n",
					    calls[c].name, cand[k].name, cand[k].h,
					    rc_name(rc, buf, sizeof(buf)));
				bad++;
			}
		}
	}
	if (bad)
		fail_msg("%d call(s) accepted a bad handle", bad);
}

/* An EVD passed as a PZ, a PZ as an EVD, a CNO as an LMR, ... (never the
 * IA index: libdat2 would dereference it, dat-clients.md 1.6). */
static void test_handle_wrong_type(void **state)
{
	struct fx *f = *state;
	const struct cand cand[] = {
		{ "PZ", DAT_HANDLE_TYPE_PZ, f->pz },
		{ "LMR", DAT_HANDLE_TYPE_LMR, f->lmr },
		{ "EVD", DAT_HANDLE_TYPE_EVD, f->evd },
		{ "async EVD", DAT_HANDLE_TYPE_EVD, f->async },
		{ "CNO", DAT_HANDLE_TYPE_CNO, f->cno },
	};
	DAT_EVENT ev;

	expect_rejected(f, cand, sizeof(cand) / sizeof(cand[0]), true);
	/* nothing was changed by the rejected calls */
	assert_ok(c_pz_query(f, f->pz));
	assert_ok(c_lmr_query(f, f->lmr));
	assert_ok(c_evd_query(f, f->evd));
	assert_ok(c_cno_query(f, f->cno));
	assert_rc(dat_evd_dequeue(f->evd, &ev), DAT_QUEUE_EMPTY);
	assert_rc(dat_evd_dequeue(f->async, &ev), DAT_QUEUE_EMPTY);
}

/* Memory whose first word is the provider's table, but which is no object. */
static void test_handle_forged(void **state)
{
	struct fx *f = *state;
	const struct cand cand[] = { { "forged", -1, (DAT_HANDLE)f->forged } };
	DAT_HANDLE_TYPE t;
	DAT_CONTEXT ctx = { .as_64 = 1 };

	expect_rejected(f, cand, 1, false);
	assert_err(dat_get_handle_type((DAT_HANDLE)f->forged, &t), DAT_INVALID_HANDLE);
	assert_err(dat_set_consumer_context((DAT_HANDLE)f->forged, ctx), DAT_INVALID_HANDLE);
	assert_err(dat_get_consumer_context((DAT_HANDLE)f->forged, &ctx), DAT_INVALID_HANDLE);
}

/* NULL: most of these are caught by libdat2 itself (DAT_INVALID_HANDLE too). */
static void test_handle_null(void **state)
{
	struct fx *f = *state;
	const struct cand cand[] = { { "NULL", -1, DAT_HANDLE_NULL } };
	DAT_HANDLE_TYPE t;
	DAT_CONTEXT ctx = { .as_64 = 1 };
	DAT_IA_ATTR a;
	DAT_PZ_HANDLE pz;
	DAT_EVD_HANDLE evd;
	DAT_CNO_HANDLE cno;

	expect_rejected(f, cand, 1, false);
	assert_err(dat_ia_query(DAT_HANDLE_NULL, NULL, DAT_IA_ALL, &a, 0, NULL), DAT_INVALID_HANDLE);
	assert_err(dat_ia_close(DAT_HANDLE_NULL, DAT_CLOSE_ABRUPT_FLAG), DAT_INVALID_HANDLE);
	assert_err(dat_pz_create(DAT_HANDLE_NULL, &pz), DAT_INVALID_HANDLE);
	assert_err(dat_evd_create(DAT_HANDLE_NULL, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_HANDLE);
	assert_err(dat_cno_create(DAT_HANDLE_NULL, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno),
		   DAT_INVALID_HANDLE);
	assert_err(dat_lmr_sync_rdma_read(DAT_HANDLE_NULL, NULL, 0), DAT_INVALID_HANDLE);
	assert_err(dat_lmr_sync_rdma_write(DAT_HANDLE_NULL, NULL, 0), DAT_INVALID_HANDLE);
	assert_err(dat_get_handle_type(DAT_HANDLE_NULL, &t), DAT_INVALID_HANDLE);
	assert_err(dat_set_consumer_context(DAT_HANDLE_NULL, ctx), DAT_INVALID_HANDLE);
	assert_err(dat_get_consumer_context(DAT_HANDLE_NULL, &ctx), DAT_INVALID_HANDLE);
}

/* A non-IA object where an IA handle is expected: libdat2 translates IA
 * handles and rejects what is not an index. */
static void test_handle_not_an_ia(void **state)
{
	struct fx *f = *state;
	DAT_PZ_HANDLE pz;
	DAT_EVD_HANDLE evd;
	DAT_CNO_HANDLE cno;
	DAT_IA_ATTR a;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;

	assert_err(dat_ia_query(f->evd, NULL, DAT_IA_ALL, &a, 0, NULL), DAT_INVALID_HANDLE);
	assert_err(dat_pz_create(f->pz, &pz), DAT_INVALID_HANDLE);
	assert_err(dat_evd_create(f->cno, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_HANDLE);
	assert_err(dat_cno_create(f->lmr, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_INVALID_HANDLE);
	assert_err(make_lmr(f->async, f->pz, f->buf, 64, DAT_MEM_PRIV_ALL_FLAG, &lmr, &lctx, NULL),
		   DAT_INVALID_HANDLE);
	assert_err(dat_lmr_sync_rdma_read(f->evd, NULL, 0), DAT_INVALID_HANDLE);
	assert_err(dat_ia_close(f->pz, DAT_CLOSE_ABRUPT_FLAG), DAT_INVALID_HANDLE);
	assert_ok(dat_ia_query(f->ia, NULL, 0, NULL, 0, NULL));
}

/* Freed objects are quarantined by the provider: a stale handle is rejected
 * with DAT_INVALID_HANDLE, never followed. */
static void test_handle_stale(void **state)
{
	struct fx *f = *state;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_EVD_HANDLE evd;
	DAT_CNO_HANDLE cno;
	DAT_HANDLE_TYPE t;
	DAT_CONTEXT ctx = { .as_64 = 7 };
	static char buf[4096];

	assert_ok(dat_pz_create(f->ia, &pz));
	assert_ok(make_lmr(f->ia, pz, buf, sizeof(buf), DAT_MEM_PRIV_ALL_FLAG, &lmr, &lctx, NULL));
	assert_ok(dat_cno_create(f->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
	assert_ok(dat_evd_create(f->ia, 8, cno, DAT_EVD_SOFTWARE_FLAG, &evd));
	assert_ok(dat_lmr_free(lmr));
	assert_ok(dat_pz_free(pz));
	assert_ok(dat_evd_free(evd));
	assert_ok(dat_cno_free(cno));
	{
		const struct cand cand[] = {
			{ "freed PZ", DAT_HANDLE_TYPE_PZ, pz },
			{ "freed LMR", DAT_HANDLE_TYPE_LMR, lmr },
			{ "freed EVD", DAT_HANDLE_TYPE_EVD, evd },
			{ "freed CNO", DAT_HANDLE_TYPE_CNO, cno },
		};

		expect_rejected(f, cand, sizeof(cand) / sizeof(cand[0]), false);
		for (size_t k = 0; k < sizeof(cand) / sizeof(cand[0]); k++) {
			assert_err(dat_get_handle_type(cand[k].h, &t), DAT_INVALID_HANDLE);
			assert_err(dat_set_consumer_context(cand[k].h, ctx), DAT_INVALID_HANDLE);
			assert_err(dat_get_consumer_context(cand[k].h, &ctx), DAT_INVALID_HANDLE);
		}
	}
	/* the live objects are unharmed */
	assert_ok(c_pz_query(f, f->pz));
	assert_ok(c_evd_query(f, f->evd));
}

static void test_handle_type_and_context(void **state)
{
	struct fx *f = *state;
	const struct { DAT_HANDLE h; DAT_HANDLE_TYPE t; } objs[] = {
		{ f->ia, DAT_HANDLE_TYPE_IA }, { f->async, DAT_HANDLE_TYPE_EVD },
		{ f->pz, DAT_HANDLE_TYPE_PZ }, { f->lmr, DAT_HANDLE_TYPE_LMR },
		{ f->evd, DAT_HANDLE_TYPE_EVD }, { f->cno, DAT_HANDLE_TYPE_CNO },
	};
	const size_t n = sizeof(objs) / sizeof(objs[0]);
	DAT_HANDLE_TYPE t;
	DAT_CONTEXT ctx;

	for (size_t i = 0; i < n; i++) {
		t = (DAT_HANDLE_TYPE)-1;
		assert_ok(dat_get_handle_type(objs[i].h, &t));
		assert_int_equal(t, objs[i].t);
	}
	for (size_t i = 0; i < n; i++) {
		ctx.as_64 = UINT64_C(0xfeedface00000000) | i;
		assert_ok(dat_set_consumer_context(objs[i].h, ctx));
	}
	for (size_t i = 0; i < n; i++) {
		ctx.as_64 = 0;
		assert_ok(dat_get_consumer_context(objs[i].h, &ctx));
		assert_int_equal(ctx.as_64, UINT64_C(0xfeedface00000000) | i);
	}
	ctx.as_ptr = f;
	assert_ok(dat_set_consumer_context(f->evd, ctx));
	ctx.as_ptr = NULL;
	assert_ok(dat_get_consumer_context(f->evd, &ctx));
	assert_ptr_equal(ctx.as_ptr, f);
}

/* ========================================= NULL out-pointers, bad masks */

static void test_null_out_pointers(void **state)
{
	struct fx *f = *state;
	DAT_REGION_DESCRIPTION region;
	DAT_LMR_CONTEXT lctx;
	DAT_EVENT ev;
	DAT_COUNT n;
	DAT_LMR_TRIPLET iov = { (DAT_VADDR)(uintptr_t)f->buf, 64, 0 };

	assert_arg(dat_pz_create(f->ia, NULL), DAT_INVALID_ARG2);
	assert_arg(dat_pz_query(f->pz, DAT_PZ_FIELD_ALL, NULL), DAT_INVALID_ARG3);
	memset(&region, 0, sizeof(region));
	region.for_va = f->buf;
	assert_arg(dat_lmr_create(f->ia, DAT_MEM_TYPE_VIRTUAL, region, 64, f->pz,
				  DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, NULL, &lctx, NULL, NULL, NULL),
		   DAT_INVALID_ARG8);
	assert_arg(dat_lmr_query(f->lmr, DAT_LMR_FIELD_ALL, NULL), DAT_INVALID_ARG3);
	assert_arg(dat_lmr_sync_rdma_read(f->ia, NULL, 1), DAT_INVALID_ARG2);
	assert_arg(dat_lmr_sync_rdma_write(f->ia, NULL, 1), DAT_INVALID_ARG2);
	iov.lmr_context = f->lctx;
	assert_ok(dat_lmr_sync_rdma_read(f->ia, &iov, 1));
	assert_ok(dat_lmr_sync_rdma_write(f->ia, &iov, 1));
	assert_arg(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, NULL),
		   DAT_INVALID_ARG5);
	assert_arg(dat_evd_query(f->evd, DAT_EVD_FIELD_ALL, NULL), DAT_INVALID_ARG3);
	assert_arg(dat_evd_wait(f->evd, 0, 1, NULL, &n), DAT_INVALID_ARG4);
	assert_arg(dat_evd_wait(f->evd, 0, 1, &ev, NULL), DAT_INVALID_ARG5);
	assert_arg(dat_evd_dequeue(f->evd, NULL), DAT_INVALID_ARG2);
	assert_arg(dat_evd_post_se(f->evd, NULL), DAT_INVALID_ARG2);
	assert_arg(dat_cno_create(f->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, NULL), DAT_INVALID_ARG3);
	assert_arg(dat_cno_query(f->cno, DAT_CNO_FIELD_ALL, NULL), DAT_INVALID_ARG3);
	assert_arg(dat_cno_wait(f->cno, 0, NULL), DAT_INVALID_ARG3);
	assert_arg(dat_get_handle_type(f->pz, NULL), DAT_INVALID_ARG2);
	assert_arg(dat_get_consumer_context(f->evd, NULL), DAT_INVALID_ARG2);
	assert_arg(dat_get_consumer_context(f->ia, NULL), DAT_INVALID_ARG2);
	/* nothing was queued by the rejected post */
	assert_rc(dat_evd_dequeue(f->evd, &ev), DAT_QUEUE_EMPTY);
}

static void test_bad_masks(void **state)
{
	struct fx *f = *state;
	DAT_PZ_PARAM pzp;
	DAT_LMR_PARAM lp;
	DAT_EVD_PARAM ep;
	DAT_CNO_PARAM cp;

	assert_arg(dat_pz_query(f->pz, (DAT_PZ_PARAM_MASK)0x2, &pzp), DAT_INVALID_ARG2);
	assert_arg(dat_lmr_query(f->lmr, (DAT_LMR_PARAM_MASK)0x800, &lp), DAT_INVALID_ARG2);
	assert_arg(dat_evd_query(f->evd, (DAT_EVD_PARAM_MASK)0x20, &ep), DAT_INVALID_ARG2);
	assert_arg(dat_cno_query(f->cno, (DAT_CNO_PARAM_MASK)0x8, &cp), DAT_INVALID_ARG2);
	assert_arg(dat_cno_query(f->cno, (DAT_CNO_PARAM_MASK)0x100, &cp), DAT_INVALID_ARG2);
}

/* The header's CNO mask is odd (PROXY = 0x3, ALL = 0x4): all of these are valid. */
static void test_cno_query_masks(void **state)
{
	struct fx *f = *state;
	static const unsigned masks[] = { 1, 2, 3, 4, 7 };
	DAT_CNO_PARAM p;

	for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
		memset(&p, 0xa5, sizeof(p));
		assert_ok(dat_cno_query(f->cno, (DAT_CNO_PARAM_MASK)masks[i], &p));
		assert_non_null(p.ia_handle);
		assert_int_equal(p.proxy_type, DAT_PROXY_TYPE_NONE);
	}
}

/* =================================================================== PZ */

static void test_pz_create_query_free(void **state)
{
	struct fx *f = *state;
	DAT_PZ_HANDLE pz[4];
	DAT_PZ_PARAM p;

	for (int i = 0; i < 4; i++)
		assert_ok(dat_pz_create(f->ia, &pz[i]));
	assert_true(pz[0] != pz[1] && pz[2] != pz[3]);
	memset(&p, 0, sizeof(p));
	assert_ok(dat_pz_query(pz[2], DAT_PZ_FIELD_ALL, &p));
	assert_non_null(p.ia_handle);
	for (int i = 0; i < 4; i++)
		assert_ok(dat_pz_free(pz[i]));
}

static void test_pz_free_with_lmr_refused(void **state)
{
	struct fx *f = *state;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;

	assert_ok(dat_pz_create(f->ia, &pz));
	assert_ok(make_lmr(f->ia, pz, f->buf, 128, DAT_MEM_PRIV_ALL_FLAG, &lmr, &lctx, NULL));
	assert_err(dat_pz_free(pz), DAT_INVALID_STATE);
	assert_ok(c_pz_query(f, pz));		/* still alive */
	assert_ok(dat_lmr_free(lmr));
	assert_ok(dat_pz_free(pz));
}

/* ================================================================== LMR */

static void test_lmr_create_query(void **state)
{
	struct fx *f = *state;
	DAT_REGION_DESCRIPTION region;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx = 0;
	DAT_RMR_CONTEXT rctx = 0;
	DAT_VLEN reg_len = 0;
	DAT_VADDR reg_addr = 0;
	DAT_LMR_PARAM p;

	memset(&region, 0, sizeof(region));
	region.for_va = f->buf + 64;
	assert_ok(dat_lmr_create(f->ia, DAT_MEM_TYPE_VIRTUAL, region, 1000, f->pz,
				 DAT_MEM_PRIV_LOCAL_WRITE_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG,
				 DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &reg_len, &reg_addr));
	assert_true(reg_len >= 1000);
	assert_true(reg_addr <= (DAT_VADDR)(uintptr_t)(f->buf + 64));
	memset(&p, 0, sizeof(p));
	assert_ok(dat_lmr_query(lmr, DAT_LMR_FIELD_ALL, &p));
	assert_int_equal(p.mem_type, DAT_MEM_TYPE_VIRTUAL);
	assert_ptr_equal(p.region_desc.for_va, f->buf + 64);
	assert_int_equal(p.length, 1000);
	assert_ptr_equal(p.pz_handle, f->pz);
	assert_int_equal(p.mem_priv, DAT_MEM_PRIV_LOCAL_WRITE_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG);
	assert_int_equal(p.lmr_context, lctx);
	assert_int_equal(p.rmr_context, rctx);
	assert_int_equal(p.registered_size, reg_len);
	assert_int_equal(p.registered_address, reg_addr);
	assert_ok(dat_lmr_free(lmr));
}

static void test_lmr_create_length_zero(void **state)
{
	struct fx *f = *state;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;

	assert_err(make_lmr(f->ia, f->pz, f->buf, 0, DAT_MEM_PRIV_ALL_FLAG, &lmr, &lctx, NULL),
		   DAT_LENGTH_ERROR);
}

static void test_lmr_create_too_long(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR a;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;

	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &a, 0, NULL));
	assert_err(make_lmr(f->ia, f->pz, f->buf, a.max_lmr_block_size + 1, DAT_MEM_PRIV_ALL_FLAG,
			    &lmr, &lctx, NULL), DAT_LENGTH_ERROR);
}

/* dapltest passes a NULL rmr_context out-pointer (dat-clients.md 3.6). */
static void test_lmr_create_null_rmr_context(void **state)
{
	struct fx *f = *state;
	DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
	DAT_LMR_CONTEXT lctx;

	assert_ok(make_lmr(f->ia, f->pz, f->buf, 512, DAT_MEM_PRIV_ALL_FLAG, &lmr, &lctx, NULL));
	assert_non_null(lmr);
	assert_ok(dat_lmr_free(lmr));
}

/* Bits at and above DAT_MEM_PRIV_EXTENSION_BASE (0x40) are accepted. */
static void test_lmr_create_unknown_priv_bits(void **state)
{
	struct fx *f = *state;
	static const unsigned extra[] = { 0x40, 0x80, 0x100, 0x4000, 0x40000000 };
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;

	for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
		assert_ok(make_lmr(f->ia, f->pz, f->buf, 256,
				   (DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_ALL_FLAG | extra[i]),
				   &lmr, &lctx, &rctx));
		assert_ok(dat_lmr_free(lmr));
	}
	assert_ok(make_lmr(f->ia, f->pz, f->buf, 256, (DAT_MEM_PRIV_FLAGS)0x40, &lmr, &lctx, &rctx));
	assert_ok(dat_lmr_free(lmr));
}

/* DAT_MEM_TYPE_LMR: an LMR sharing another one's region. */
static void test_lmr_create_on_lmr(void **state)
{
	struct fx *f = *state;
	DAT_REGION_DESCRIPTION region;
	DAT_LMR_HANDLE base, shared;
	DAT_LMR_CONTEXT lctx;
	DAT_LMR_PARAM bp, sp;

	assert_ok(make_lmr(f->ia, f->pz, f->buf, 2048, DAT_MEM_PRIV_ALL_FLAG, &base, &lctx, NULL));
	memset(&region, 0, sizeof(region));
	region.for_lmr_handle = base;
	assert_ok(dat_lmr_create(f->ia, DAT_MEM_TYPE_LMR, region, 0, f->pz, DAT_MEM_PRIV_ALL_FLAG,
				 DAT_VA_TYPE_VA, &shared, &lctx, NULL, NULL, NULL));
	assert_ok(dat_lmr_query(base, DAT_LMR_FIELD_ALL, &bp));
	assert_ok(dat_lmr_query(shared, DAT_LMR_FIELD_ALL, &sp));
	assert_int_equal(sp.mem_type, DAT_MEM_TYPE_LMR);
	assert_int_equal(sp.registered_address, bp.registered_address);
	assert_int_equal(sp.registered_size, bp.registered_size);
	/* the base cannot go first */
	assert_err(dat_lmr_free(base), DAT_INVALID_STATE);
	assert_ok(dat_lmr_query(base, DAT_LMR_FIELD_ALL, &bp));
	assert_ok(dat_lmr_free(shared));
	assert_ok(dat_lmr_free(base));
}

static void test_lmr_create_pz_of_other_ia(void **state)
{
	struct fx *f = *state;
	DAT_IA_HANDLE ia2;
	DAT_EVD_HANDLE async2;
	DAT_PZ_HANDLE pz2;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;

	assert_ok(open_ia(IA_NAME, &ia2, &async2));
	assert_ok(dat_pz_create(ia2, &pz2));
	assert_err(make_lmr(f->ia, pz2, f->buf, 64, DAT_MEM_PRIV_ALL_FLAG, &lmr, &lctx, NULL),
		   DAT_INVALID_HANDLE);
	assert_ok(dat_pz_free(pz2));	/* no LMR was attached to it */
	assert_ok(dat_ia_close(ia2, DAT_CLOSE_GRACEFUL_FLAG));
}

/* ================================================================== EVD */

static void test_evd_create_bad_qlen(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR a;
	DAT_EVD_HANDLE evd;
	DAT_RETURN rc;
	char buf[160];

	assert_arg(dat_evd_create(f->ia, 0, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_ARG2);
	assert_arg(dat_evd_create(f->ia, -5, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		   DAT_INVALID_ARG2);
	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &a, 0, NULL));
	/* reference uDAPL: INSUFFICIENT_RESOURCES; INVALID_PARAMETER is as good */
	rc = dat_evd_create(f->ia, a.max_evd_qlen + 1, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd);
	if (!(rc & DAT_CLASS_ERROR) || (DAT_GET_TYPE(rc) != DAT_INSUFFICIENT_RESOURCES &&
					DAT_GET_TYPE(rc) != DAT_INVALID_PARAMETER))
		fail_msg("dat_evd_create(qlen = max_evd_qlen + 1 = %d) returned %s", a.max_evd_qlen + 1,
			 rc_name(rc, buf, sizeof(buf)));
}

static void test_evd_create_flags(void **state)
{
	struct fx *f = *state;
	static const unsigned bad[] = {
		0, 0x002, 0x004, 0x200, 0x1000, 0x80000000u,
		DAT_EVD_SOFTWARE_FLAG | 0x200,
		DAT_EVD_ASYNC_FLAG | DAT_EVD_SOFTWARE_FLAG,
		DAT_EVD_ASYNC_FLAG | DAT_EVD_DTO_FLAG,
		DAT_EVD_ASYNC_FLAG | DAT_EVD_CR_FLAG,
		DAT_EVD_ASYNC_FLAG | DAT_EVD_CONNECTION_FLAG,
		DAT_EVD_ASYNC_FLAG | DAT_EVD_RMR_BIND_FLAG,
		DAT_EVD_DEFAULT_FLAG,	/* includes ASYNC */
	};
	static const unsigned good[] = {
		DAT_EVD_SOFTWARE_FLAG, DAT_EVD_CR_FLAG, DAT_EVD_DTO_FLAG, DAT_EVD_CONNECTION_FLAG,
		DAT_EVD_RMR_BIND_FLAG, DAT_EVD_ASYNC_FLAG,
		DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG,	/* dapltest request EVD */
		DAT_EVD_DEFAULT_FLAG & ~(unsigned)DAT_EVD_ASYNC_FLAG,
		(DAT_EVD_DEFAULT_FLAG & ~(unsigned)DAT_EVD_ASYNC_FLAG) | DAT_EVD_SOFTWARE_FLAG,
	};
	DAT_EVD_HANDLE evd;
	DAT_EVD_PARAM p;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		DAT_RETURN rc = dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, (DAT_EVD_FLAGS)bad[i], &evd);

		if (rc != ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4)) {
			char buf[160];

			fail_msg("dat_evd_create(flags 0x%x) returned %s, expected "
				 "DAT_INVALID_PARAMETER DAT_INVALID_ARG4", bad[i],
				 rc_name(rc, buf, sizeof(buf)));
		}
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_ok(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, (DAT_EVD_FLAGS)good[i], &evd));
		assert_ok(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
		assert_int_equal(p.evd_flags, good[i]);
		assert_ok(dat_evd_free(evd));
	}
}

static void test_evd_create_cno_of_other_ia(void **state)
{
	struct fx *f = *state;
	DAT_IA_HANDLE ia2;
	DAT_EVD_HANDLE async2, evd;
	DAT_CNO_HANDLE cno2;

	assert_ok(open_ia(IA_NAME, &ia2, &async2));
	assert_ok(dat_cno_create(ia2, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno2));
	assert_err(dat_evd_create(f->ia, 8, cno2, DAT_EVD_SOFTWARE_FLAG, &evd), DAT_INVALID_HANDLE);
	assert_err(dat_evd_modify_cno(f->evd, cno2), DAT_INVALID_HANDLE);
	assert_ok(dat_cno_free(cno2));	/* nothing got attached to it */
	assert_ok(dat_ia_close(ia2, DAT_CLOSE_GRACEFUL_FLAG));
}

static void test_evd_query(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE evd;
	DAT_EVD_PARAM p;

	assert_ok(dat_evd_create(f->ia, 10, f->cno, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, &evd));
	memset(&p, 0, sizeof(p));
	assert_ok(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_qlen >= 10);
	assert_int_equal(p.evd_flags, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG);
	assert_ptr_equal(p.cno_handle, f->cno);
	assert_true(p.evd_state & DAT_EVD_STATE_ENABLED);
	assert_true(p.evd_state & DAT_EVD_STATE_WAITABLE);
	assert_non_null(p.ia_handle);
	assert_ok(dat_evd_free(evd));
}

static void test_evd_post_se_checks(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE dto, one;
	DAT_EVENT ev = sw_event(f), out;

	assert_ok(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto));
	assert_arg(dat_evd_post_se(dto, &ev), DAT_INVALID_ARG1);
	assert_rc(dat_evd_dequeue(dto, &out), DAT_QUEUE_EMPTY);
	ev.event_number = DAT_DTO_COMPLETION_EVENT;
	assert_arg(dat_evd_post_se(f->evd, &ev), DAT_INVALID_ARG2);
	ev.event_number = DAT_ASYNC_ERROR_EVD_OVERFLOW;
	assert_arg(dat_evd_post_se(f->evd, &ev), DAT_INVALID_ARG2);
	assert_rc(dat_evd_dequeue(f->evd, &out), DAT_QUEUE_EMPTY);
	assert_ok(dat_evd_free(dto));

	/* full: DAT_QUEUE_FULL, and what was queued stays */
	assert_ok(dat_evd_create(f->ia, 1, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &one));
	ev = sw_event(&ev);
	{
		DAT_EVD_PARAM p;
		DAT_RETURN rc = DAT_SUCCESS;
		int posted = 0;

		assert_ok(dat_evd_query(one, DAT_EVD_FIELD_ALL, &p));
		while (posted <= p.evd_qlen && (rc = dat_evd_post_se(one, &ev)) == DAT_SUCCESS)
			posted++;
		assert_int_equal(posted, p.evd_qlen);
		assert_err(rc, DAT_QUEUE_FULL);
		for (int i = 0; i < posted; i++)
			assert_ok(dat_evd_dequeue(one, &out));
		assert_rc(dat_evd_dequeue(one, &out), DAT_QUEUE_EMPTY);
	}
	assert_ok(dat_evd_free(one));
}

/* dtest compares the raw value with 0x000d0000 (dat-clients.md 1.8). */
static void test_evd_dequeue_empty_exact(void **state)
{
	struct fx *f = *state;
	DAT_EVENT ev;
	DAT_EVD_HANDLE dto;

	assert_int_equal(dat_evd_dequeue(f->evd, &ev), 0x000d0000);
	assert_int_equal(dat_evd_dequeue(f->async, &ev), 0x000d0000);
	assert_ok(dat_evd_create(f->ia, 4, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG,
				 &dto));
	assert_int_equal(dat_evd_dequeue(dto, &ev), 0x000d0000);
	assert_ok(dat_evd_free(dto));
}

static void test_evd_post_dequeue_fifo(void **state)
{
	struct fx *f = *state;
	int marks[5];
	DAT_EVENT ev, out;

	for (int i = 0; i < 5; i++) {
		ev = sw_event(&marks[i]);
		assert_ok(dat_evd_post_se(f->evd, &ev));
	}
	for (int i = 0; i < 5; i++) {
		memset(&out, 0, sizeof(out));
		assert_ok(dat_evd_dequeue(f->evd, &out));
		assert_int_equal(out.event_number, DAT_SOFTWARE_EVENT);
		assert_ptr_equal(out.evd_handle, f->evd);
		assert_ptr_equal(out.event_data.software_event_data.pointer, &marks[i]);
	}
	assert_rc(dat_evd_dequeue(f->evd, &out), DAT_QUEUE_EMPTY);
}

static void test_evd_wait_timeouts(void **state)
{
	struct fx *f = *state;
	DAT_EVENT ev;
	DAT_COUNT n = -1;
	uint64_t t0, dt;

	assert_err(dat_evd_wait(f->evd, 0, 1, &ev, &n), DAT_TIMEOUT_EXPIRED);
	t0 = now_ns();
	assert_err(dat_evd_wait(f->evd, 50000, 1, &ev, &n), DAT_TIMEOUT_EXPIRED);
	dt = now_ns() - t0;
	if (dt < 45000000u || dt > 5000000000u)
		fail_msg("dat_evd_wait(timeout 50 ms) returned after %llu us",
			 (unsigned long long)(dt / 1000));
	/* thresholds outside 1..qlen */
	assert_arg(dat_evd_wait(f->evd, 0, 0, &ev, &n), DAT_INVALID_ARG3);
	assert_arg(dat_evd_wait(f->evd, 0, -1, &ev, &n), DAT_INVALID_ARG3);
	assert_arg(dat_evd_wait(f->evd, 0, 1 << 20, &ev, &n), DAT_INVALID_ARG3);
}

static void test_evd_wait_returns_events(void **state)
{
	struct fx *f = *state;
	int m1, m2, m3;
	DAT_EVENT ev;
	DAT_COUNT n = -1;

	ev = sw_event(&m1);
	assert_ok(dat_evd_post_se(f->evd, &ev));
	ev = sw_event(&m2);
	assert_ok(dat_evd_post_se(f->evd, &ev));
	ev = sw_event(&m3);
	assert_ok(dat_evd_post_se(f->evd, &ev));
	memset(&ev, 0, sizeof(ev));
	assert_ok(dat_evd_wait(f->evd, 0, 1, &ev, &n));
	assert_ptr_equal(ev.event_data.software_event_data.pointer, &m1);
	assert_ptr_equal(ev.evd_handle, f->evd);
	assert_int_equal(n, 2);
	assert_ok(dat_evd_wait(f->evd, SEC, 2, &ev, &n));	/* threshold 2 met */
	assert_ptr_equal(ev.event_data.software_event_data.pointer, &m2);
	assert_int_equal(n, 1);
	assert_err(dat_evd_wait(f->evd, 0, 2, &ev, &n), DAT_TIMEOUT_EXPIRED);	/* 1 < 2 */
	assert_ok(dat_evd_dequeue(f->evd, &ev));
	assert_ptr_equal(ev.event_data.software_event_data.pointer, &m3);
}

static void test_evd_resize(void **state)
{
	struct fx *f = *state;
	DAT_EVENT ev = sw_event(f), out;
	DAT_EVD_PARAM p;
	DAT_IA_ATTR a;

	for (int i = 0; i < 6; i++)
		assert_ok(dat_evd_post_se(f->evd, &ev));
	assert_ok(dat_evd_resize(f->evd, 64));
	assert_ok(dat_evd_query(f->evd, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_qlen >= 64);
	for (int i = 0; i < 6; i++)
		assert_ok(dat_evd_dequeue(f->evd, &out));	/* kept across the resize */
	assert_rc(dat_evd_dequeue(f->evd, &out), DAT_QUEUE_EMPTY);
	assert_arg(dat_evd_resize(f->evd, 0), DAT_INVALID_ARG2);
	assert_arg(dat_evd_resize(f->evd, -1), DAT_INVALID_ARG2);
	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &a, 0, NULL));
	assert_arg(dat_evd_resize(f->evd, a.max_evd_qlen + 1), DAT_INVALID_ARG2);
	assert_ok(dat_evd_resize(f->evd, 4));
}

static void test_evd_unwaitable(void **state)
{
	struct fx *f = *state;
	DAT_EVENT ev = sw_event(f);
	DAT_EVD_PARAM p;
	DAT_COUNT n;

	assert_ok(dat_evd_set_unwaitable(f->evd));
	assert_ok(dat_evd_query(f->evd, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_state & DAT_EVD_STATE_UNWAITABLE);
	assert_err(dat_evd_wait(f->evd, 0, 1, &ev, &n), DAT_INVALID_STATE);
	assert_ok(dat_evd_post_se(f->evd, &ev));		/* events still arrive */
	assert_err(dat_evd_wait(f->evd, SEC, 1, &ev, &n), DAT_INVALID_STATE);
	assert_ok(dat_evd_dequeue(f->evd, &ev));	/* and can be dequeued */
	assert_ok(dat_evd_clear_unwaitable(f->evd));
	assert_ok(dat_evd_query(f->evd, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_state & DAT_EVD_STATE_WAITABLE);
	assert_err(dat_evd_wait(f->evd, 0, 1, &ev, &n), DAT_TIMEOUT_EXPIRED);
}

static void test_evd_enable_disable_modify_cno(void **state)
{
	struct fx *f = *state;
	DAT_EVD_PARAM p;
	DAT_EVD_HANDLE hint = DAT_HANDLE_NULL;
	DAT_EVENT ev = sw_event(f);

	assert_ok(dat_evd_modify_cno(f->evd, f->cno));
	assert_ok(dat_evd_query(f->evd, DAT_EVD_FIELD_ALL, &p));
	assert_ptr_equal(p.cno_handle, f->cno);
	assert_ok(dat_evd_disable(f->evd));
	assert_ok(dat_evd_query(f->evd, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_state & DAT_EVD_STATE_DISABLED);
	assert_ok(dat_evd_enable(f->evd));
	assert_ok(dat_evd_query(f->evd, DAT_EVD_FIELD_ALL, &p));
	assert_true(p.evd_state & DAT_EVD_STATE_ENABLED);
	/* an event on an enabled EVD triggers its CNO, with the EVD as hint */
	assert_ok(dat_evd_post_se(f->evd, &ev));
	assert_ok(dat_cno_wait(f->cno, SEC, &hint));
	assert_ptr_equal(hint, f->evd);
	assert_ok(dat_evd_dequeue(f->evd, &ev));
	assert_ok(dat_evd_modify_cno(f->evd, DAT_HANDLE_NULL));
	assert_ok(dat_evd_query(f->evd, DAT_EVD_FIELD_ALL, &p));
	assert_null(p.cno_handle);
	assert_ok(dat_cno_free(f->cno));		/* detached: free works */
	assert_ok(dat_cno_create(f->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &f->cno));
}

static void test_evd_free_states(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev = sw_event(f);

	/* an EVD with queued events can be freed */
	assert_ok(dat_evd_create(f->ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd));
	assert_ok(dat_evd_post_se(evd, &ev));
	assert_ok(dat_evd_free(evd));
	assert_err(dat_evd_free(evd), DAT_INVALID_HANDLE);
}

/* ================================================================== CNO */

static void test_cno_free_with_evd_refused(void **state)
{
	struct fx *f = *state;
	DAT_CNO_HANDLE cno;
	DAT_EVD_HANDLE evd;

	assert_ok(dat_cno_create(f->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
	assert_ok(dat_evd_create(f->ia, 8, cno, DAT_EVD_SOFTWARE_FLAG, &evd));
	assert_err(dat_cno_free(cno), DAT_INVALID_STATE);
	assert_ok(c_cno_query(f, cno));
	assert_ok(dat_evd_free(evd));
	assert_ok(dat_cno_free(cno));

	/* attached by modify_cno, detached by modify_cno */
	assert_ok(dat_cno_create(f->ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno));
	assert_ok(dat_evd_modify_cno(f->evd, cno));
	assert_err(dat_cno_free(cno), DAT_INVALID_STATE);
	assert_ok(dat_evd_modify_cno(f->evd, DAT_HANDLE_NULL));
	assert_ok(dat_cno_free(cno));
}

static void test_cno_wait_timeout(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE hint = (DAT_EVD_HANDLE)f;
	DAT_RETURN rc;
	char buf[160];

	/* reference uDAPL returns DAT_QUEUE_EMPTY on timeout; the spec's
	 * DAT_TIMEOUT_EXPIRED is as good */
	rc = dat_cno_wait(f->cno, 0, &hint);
	if (DAT_GET_TYPE(rc) != DAT_QUEUE_EMPTY && DAT_GET_TYPE(rc) != DAT_TIMEOUT_EXPIRED)
		fail_msg("dat_cno_wait(timeout 0) returned %s", rc_name(rc, buf, sizeof(buf)));
	assert_null(hint);
}

struct agent_rec {
	int calls;
	void *instance;
	DAT_EVD_HANDLE evd;
};

static void agent_fn(DAT_PVOID instance, DAT_EVD_HANDLE evd)
{
	struct agent_rec *r = instance;

	r->calls++;
	r->instance = instance;
	r->evd = evd;
}

static void test_cno_proxy_agent(void **state)
{
	struct fx *f = *state;
	struct agent_rec rec = { 0, NULL, NULL };
	DAT_OS_WAIT_PROXY_AGENT agent = { &rec, agent_fn };
	DAT_CNO_PARAM p;
	DAT_EVENT ev = sw_event(f);

	assert_ok(dat_cno_modify_agent(f->cno, agent));
	assert_ok(dat_cno_query(f->cno, DAT_CNO_FIELD_ALL, &p));
	assert_int_equal(p.proxy_type, DAT_PROXY_TYPE_AGENT);
	assert_ptr_equal(p.proxy.agent.instance_data, &rec);
	assert_ok(dat_evd_modify_cno(f->evd, f->cno));
	assert_ok(dat_evd_post_se(f->evd, &ev));
	assert_int_equal(rec.calls, 1);
	assert_ptr_equal(rec.instance, &rec);
	assert_ptr_equal(rec.evd, f->evd);
	assert_ok(dat_evd_dequeue(f->evd, &ev));
	assert_ok(dat_evd_modify_cno(f->evd, DAT_HANDLE_NULL));
}

/* ================================================ threads: wake-ups, abort */

struct waiter {
	pthread_t tid;
	DAT_EVD_HANDLE evd;
	DAT_CNO_HANDLE cno;
	DAT_TIMEOUT timeout;
	unsigned delay_ms;
	DAT_RETURN rc;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	uint64_t t_done;
};

static void *evd_waiter(void *arg)
{
	struct waiter *w = arg;

	w->rc = dat_evd_wait(w->evd, w->timeout, 1, &w->ev, &w->nmore);
	w->t_done = now_ns();
	return NULL;
}

static void *poster(void *arg)
{
	struct waiter *w = arg;

	sleep_ms(w->delay_ms);
	w->ev = sw_event(w);
	w->rc = dat_evd_post_se(w->evd, &w->ev);
	w->t_done = now_ns();
	return NULL;
}

/* Wait until a thread sits in dat_evd_wait on evd: while it does, dequeue is
 * refused with DAT_INVALID_STATE (DAT spec: EVD in the waited state).  Falls
 * back to a plain delay if the provider does not tell. */
static void wait_until_blocked(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	for (int i = 0; i < 400; i++) {
		if (DAT_GET_TYPE(dat_evd_dequeue(evd, &ev)) == DAT_INVALID_STATE) {
			sleep_ms(20);	/* let it reach its sleep */
			return;
		}
		sleep_ms(5);
	}
}

static bool join_within(pthread_t tid, unsigned ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return pthread_timedjoin_np(tid, NULL, &ts) == 0;
}

static void test_evd_wait_woken_by_post(void **state)
{
	struct fx *f = *state;
	struct waiter w;

	memset(&w, 0, sizeof(w));
	w.evd = f->evd;
	w.timeout = 10 * SEC;
	assert_int_equal(pthread_create(&w.tid, NULL, evd_waiter, &w), 0);
	wait_until_blocked(f->evd);
	{
		DAT_EVENT ev = sw_event(&w);

		assert_ok(dat_evd_post_se(f->evd, &ev));
	}
	if (!join_within(w.tid, 5000)) {
		dat_evd_set_unwaitable(f->evd);
		pthread_join(w.tid, NULL);
		fail_msg("dat_evd_wait was not woken by dat_evd_post_se within 5 s");
	}
	assert_ok(w.rc);
	assert_ptr_equal(w.ev.event_data.software_event_data.pointer, &w);
	assert_int_equal(w.nmore, 0);
}

static void test_cno_wait_woken_by_post_from_thread(void **state)
{
	struct fx *f = *state;
	struct waiter w;
	DAT_EVD_HANDLE evd, hint = DAT_HANDLE_NULL;
	DAT_EVENT ev;
	DAT_RETURN rc;

	assert_ok(dat_evd_create(f->ia, 8, f->cno, DAT_EVD_SOFTWARE_FLAG, &evd));
	memset(&w, 0, sizeof(w));
	w.evd = evd;
	w.delay_ms = 100;
	assert_int_equal(pthread_create(&w.tid, NULL, poster, &w), 0);
	rc = dat_cno_wait(f->cno, 10 * SEC, &hint);
	pthread_join(w.tid, NULL);
	assert_ok(w.rc);
	assert_ok(rc);
	assert_ptr_equal(hint, evd);
	assert_ok(dat_evd_dequeue(evd, &ev));
	assert_ptr_equal(ev.event_data.software_event_data.pointer, &w);
	assert_ok(dat_evd_free(evd));
}

static void test_evd_set_unwaitable_wakes_waiter(void **state)
{
	struct fx *f = *state;
	struct waiter w;
	uint64_t t0;

	memset(&w, 0, sizeof(w));
	w.evd = f->evd;
	w.timeout = DAT_TIMEOUT_INFINITE;
	assert_int_equal(pthread_create(&w.tid, NULL, evd_waiter, &w), 0);
	wait_until_blocked(f->evd);
	t0 = now_ns();
	assert_ok(dat_evd_set_unwaitable(f->evd));
	if (!join_within(w.tid, 5000)) {
		dat_ia_close(f->ia, DAT_CLOSE_ABRUPT_FLAG);	/* last resort */
		pthread_join(w.tid, NULL);
		assert_ok(open_ia(IA_NAME, &f->ia, &f->async));
		fail_msg("dat_evd_set_unwaitable did not wake dat_evd_wait(INFINITE) within 5 s");
	}
	assert_err(w.rc, DAT_INVALID_STATE);
	assert_true(w.t_done - t0 < UINT64_C(2000000000));
	assert_ok(dat_evd_clear_unwaitable(f->evd));
}

static void test_ia_close_abrupt_aborts_waiter(void **state)
{
	struct fx *f = *state;	/* keeps the provider loaded meanwhile */
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd;
	struct waiter w, wa;
	uint64_t t0;
	bool j1, j2;

	assert_ok(open_ia(IA_NAME, &ia, &async));
	assert_ok(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd));
	memset(&w, 0, sizeof(w));
	w.evd = evd;
	w.timeout = DAT_TIMEOUT_INFINITE;
	memset(&wa, 0, sizeof(wa));
	wa.evd = async;			/* a waiter on the async EVD too */
	wa.timeout = DAT_TIMEOUT_INFINITE;
	assert_int_equal(pthread_create(&w.tid, NULL, evd_waiter, &w), 0);
	assert_int_equal(pthread_create(&wa.tid, NULL, evd_waiter, &wa), 0);
	wait_until_blocked(evd);
	wait_until_blocked(async);
	t0 = now_ns();
	assert_ok(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
	j1 = join_within(w.tid, 5000);
	j2 = join_within(wa.tid, 5000);
	if (!j1 || !j2)
		fail_msg("dat_ia_close(ABRUPT) left a thread blocked in dat_evd_wait (evd %s, async %s)",
			 j1 ? "returned" : "stuck", j2 ? "returned" : "stuck");
	assert_err(w.rc, DAT_ABORT);
	assert_err(wa.rc, DAT_ABORT);
	assert_true(w.t_done - t0 < UINT64_C(2000000000));
	assert_true(wa.t_done - t0 < UINT64_C(2000000000));
	/* the other IA is fine */
	assert_ok(dat_ia_query(f->ia, NULL, 0, NULL, 0, NULL));
	assert_ok(c_evd_query(f, f->evd));
}

/* ============================================== send with invalidate */

/* dat_ep_post_send_with_invalidate, reached through the provider's table
 * (libdat2 does not export it), on a handle that is no EP, with and
 * without invalidation: the EP argument named, nothing posted.  (Its
 * happy path, over tcp and the RDM backend, is in test_api_conn.) */
static void test_send_with_invalidate_bad_handle(void **state)
{
	struct fx *f = *state;
	DAT_DTO_COOKIE ck = { .as_64 = 1 };
	DAT_PROVIDER *prov = DAT_HANDLE_TO_PROVIDER(f->pz);

	assert_rc(prov->ep_post_send_with_invalidate_func(f->pz, 0, NULL, ck,
							  DAT_COMPLETION_DEFAULT_FLAG, DAT_TRUE, 7),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	assert_rc(prov->ep_post_send_with_invalidate_func(f->pz, 0, NULL, ck,
							  DAT_COMPLETION_DEFAULT_FLAG, DAT_FALSE, 0),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
}

/* ================================================= DAT 2.0 calls, no peer */

/* The DAT 2.0 connection calls on wrong, stale and unconnected handles:
 * the right error naming the argument, nothing else happens.  (The happy
 * paths, over tcp, are in test_api_conn.) */
static void test_dat20_calls_bad_handles(void **state)
{
	struct fx *f = *state;
	DAT_PROVIDER *prov = DAT_HANDLE_TO_PROVIDER(f->pz);
	DAT_EVD_HANDLE cr_evd;
	DAT_EVD_PARAM ep;
	DAT_EP_HANDLE a, b, dead;
	DAT_PSP_HANDLE psp;
	DAT_PSP_PARAM pp;
	DAT_CONN_QUAL port = 0;
	DAT_CSP_PARAM cp;
	DAT_CSP_HANDLE csp;
	struct sockaddr_in sa;

	assert_ok(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd));
	assert_ok(dat_ep_create(f->ia, f->pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL,
				NULL, &a));
	assert_ok(dat_ep_create(f->ia, f->pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL,
				NULL, &b));
	assert_ok(dat_ep_create(f->ia, f->pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL,
				NULL, &dead));
	assert_ok(dat_ep_free(dead));

	/* dat_cr_handoff: no CR */
	assert_rc(dat_cr_handoff(f->pz, 1234), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR));
	assert_rc(dat_cr_handoff(dead, 1234), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR));
	assert_rc(dat_cr_handoff((DAT_CR_HANDLE)f->forged, 1234),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR));
	/* dat_ep_dup_connect */
	assert_rc(dat_ep_dup_connect(dead, a, 1000, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	assert_rc(dat_ep_dup_connect(a, dead, 1000, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	assert_rc(dat_ep_dup_connect(a, f->evd, 1000, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	assert_rc(dat_ep_dup_connect(a, b, 1000, 0, NULL, DAT_QOS_BEST_EFFORT),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));
	/* dat_ep_common_connect */
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons(9);
	assert_rc(prov->ep_common_connect_func(dead, (DAT_IA_ADDRESS_PTR)&sa, 1000, 0, NULL),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	assert_arg(prov->ep_common_connect_func(a, (DAT_IA_ADDRESS_PTR)&sa, 1000, 1, NULL),
		   DAT_INVALID_ARG4);
	/* the CSP calls on things that are not CSPs */
	assert_rc(prov->csp_query_func(f->evd, DAT_CSP_FIELD_ALL, &cp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CSP));
	assert_rc(prov->csp_free_func(dead), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CSP));
	assert_rc(prov->csp_free_func(f->forged), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CSP));
	memset(&ep, 0, sizeof(ep));
	assert_ok(dat_evd_query(cr_evd, DAT_EVD_FIELD_ALL, &ep));
	sa.sin_port = 0;
	assert_rc(prov->csp_create_func(f->pz, NULL, (DAT_IA_ADDRESS_PTR)&sa, cr_evd, &csp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA));
	assert_rc(prov->csp_create_func(ep.ia_handle, NULL, (DAT_IA_ADDRESS_PTR)&sa, f->evd, &csp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR));

	/* DAT_PSP_PROVIDER_FLAG is taken and reported; unknown flags are not */
	assert_arg(dat_psp_create_any(f->ia, &port, cr_evd, (DAT_PSP_FLAGS)2, &psp),
		   DAT_INVALID_ARG4);
	assert_ok(dat_psp_create_any(f->ia, &port, cr_evd, DAT_PSP_PROVIDER_FLAG, &psp));
	memset(&pp, 0, sizeof(pp));
	assert_ok(dat_psp_query(psp, DAT_PSP_FIELD_ALL, &pp));
	assert_int_equal(pp.psp_flags, DAT_PSP_PROVIDER_FLAG);
	assert_int_equal(pp.conn_qual, port);
	assert_rc(prov->csp_query_func(psp, DAT_CSP_FIELD_ALL, &cp),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CSP));
	assert_ok(dat_psp_free(psp));
	assert_err(dat_psp_query(psp, DAT_PSP_FIELD_ALL, &pp), DAT_INVALID_HANDLE);
	assert_ok(dat_ep_free(a));
	assert_ok(dat_ep_free(b));
	assert_ok(dat_evd_free(cr_evd));
}

/* ia_attr.max_rmrs is enforced: one RMR more is refused with
 * DAT_INSUFFICIENT_RESOURCES naming memory regions; a freed one makes room. */
static void test_rmr_max(void **state)
{
	struct fx *f = *state;
	DAT_IA_ATTR ia;
	DAT_RMR_HANDLE *rmrs, extra;
	int n;

	memset(&ia, 0, sizeof(ia));
	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &ia, 0, NULL));
	assert_true(ia.max_rmrs > 0 && ia.max_rmrs <= (1 << 20));
	n = ia.max_rmrs;
	rmrs = calloc((size_t)n, sizeof(*rmrs));
	assert_non_null(rmrs);
	for (int i = 0; i < n; i++) {
		DAT_RETURN rc = dat_rmr_create(f->pz, &rmrs[i]);

		if (rc != DAT_SUCCESS) {
			char b[160];

			fail_msg("dat_rmr_create number %d of max_rmrs %d: %s", i + 1, n,
				 rc_name(rc, b, sizeof(b)));
		}
	}
	assert_rc(dat_rmr_create(f->pz, &extra),
		  ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION));
	assert_ok(dat_rmr_free(rmrs[n / 2]));
	assert_ok(dat_rmr_create(f->pz, &rmrs[n / 2]));
	assert_rc(dat_rmr_create(f->pz, &extra),
		  ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION));
	for (int i = 0; i < n; i++)
		assert_ok(dat_rmr_free(rmrs[i]));
	free(rmrs);
	assert_ok(dat_rmr_create(f->pz, &extra));
	assert_ok(dat_rmr_free(extra));
}

/* ============================================================ endpoints */

/* dat_ep_modify: an unconnected, idle EP takes new EVDs and attributes
 * (dat_ep_query shows them, the EVD references move with them); a mask
 * naming something else, a bad EVD or attribute is refused with the
 * argument named and nothing changed; a posted receive makes it busy. */
static void test_ep_modify(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE dto, conn;
	DAT_EP_HANDLE ep;
	DAT_EP_PARAM p, q;
	DAT_LMR_TRIPLET t;
	DAT_DTO_COOKIE c;
	DAT_EVENT ev;
	const DAT_EP_PARAM_MASK evds = DAT_EP_FIELD_RECV_EVD_HANDLE |
		DAT_EP_FIELD_REQUEST_EVD_HANDLE | DAT_EP_FIELD_CONNECT_EVD_HANDLE;

	assert_ok(dat_evd_create(f->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto));
	assert_ok(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn));
	assert_ok(dat_ep_create(f->ia, f->pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL,
				NULL, &ep));
	memset(&p, 0, sizeof(p));
	p.recv_evd_handle = dto;
	p.request_evd_handle = dto;
	p.connect_evd_handle = conn;
	p.ep_attr.max_recv_dtos = 32;
	p.ep_attr.max_request_iov = 2;
	/* refused, nothing changed */
	assert_arg(dat_ep_modify(ep, DAT_EP_FIELD_IA_HANDLE, &p), DAT_INVALID_ARG2);
	assert_arg(dat_ep_modify(ep, evds, NULL), DAT_INVALID_ARG3);
	p.recv_evd_handle = f->evd;	/* a software EVD */
	assert_rc(dat_ep_modify(ep, evds, &p),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV));
	p.recv_evd_handle = dto;
	p.ep_attr.max_recv_iov = 1 << 20;
	assert_arg(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV, &p), DAT_INVALID_ARG3);
	assert_ok(dat_ep_query(ep, DAT_EP_FIELD_ALL, &q));
	assert_null(q.recv_evd_handle);
	assert_int_equal(q.ep_attr.max_recv_dtos, 16);		/* the default still */
	/* accepted */
	assert_ok(dat_ep_modify(ep, evds | DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS |
				DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV, &p));
	assert_ok(dat_ep_query(ep, DAT_EP_FIELD_ALL, &q));
	assert_ptr_equal(q.recv_evd_handle, dto);
	assert_ptr_equal(q.request_evd_handle, dto);
	assert_ptr_equal(q.connect_evd_handle, conn);
	assert_int_equal(q.ep_attr.max_recv_dtos, 32);
	assert_int_equal(q.ep_attr.max_request_iov, 2);
	assert_err(dat_evd_free(dto), DAT_INVALID_STATE);	/* the EP feeds it now */
	/* a receive posted before any connection makes the EP busy */
	memset(&t, 0, sizeof(t));
	t.lmr_context = f->lctx;
	t.virtual_address = (DAT_VADDR)(uintptr_t)f->buf;
	t.segment_length = 64;
	c.as_64 = 7;
	assert_ok(dat_ep_post_recv(ep, 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG));
	assert_rc(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, &p),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY));
	assert_ok(dat_ep_reset(ep));				/* flushes it */
	assert_ok(dat_evd_dequeue(dto, &ev));
	assert_int_equal(ev.event_data.dto_completion_event_data.status, DAT_DTO_ERR_FLUSHED);
	/* back to no EVDs: the EVDs are free to go */
	memset(&p, 0, sizeof(p));
	assert_ok(dat_ep_modify(ep, evds, &p));
	assert_ok(dat_evd_free(dto));
	assert_ok(dat_evd_free(conn));
	assert_ok(dat_ep_free(ep));
}

/* NULL attributes mean the defaults: 16 DTOs, 4 IOVs, 4 RDMA reads
 * (dat-clients.md 3.1); zero fields likewise. */
static void test_ep_create_defaults(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE dto, conn;
	DAT_EP_HANDLE ep;
	DAT_EP_PARAM p;
	DAT_EP_ATTR a;
	DAT_EP_STATE st = DAT_EP_STATE_CONNECTED;
	DAT_BOOLEAN ri = DAT_FALSE, qi = DAT_FALSE;

	assert_ok(dat_evd_create(f->ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG, &dto));
	assert_ok(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn));
	assert_ok(dat_ep_create(f->ia, f->pz, dto, dto, conn, NULL, &ep));
	assert_ok(dat_ep_query(ep, DAT_EP_FIELD_ALL, &p));
	assert_int_equal(p.ep_state, DAT_EP_STATE_UNCONNECTED);
	assert_ptr_equal(p.pz_handle, f->pz);
	assert_ptr_equal(p.recv_evd_handle, dto);
	assert_ptr_equal(p.request_evd_handle, dto);
	assert_ptr_equal(p.connect_evd_handle, conn);
	assert_int_equal(p.ep_attr.service_type, DAT_SERVICE_TYPE_RC);
	assert_int_equal(p.ep_attr.max_recv_dtos, 16);
	assert_int_equal(p.ep_attr.max_request_dtos, 16);
	assert_int_equal(p.ep_attr.max_recv_iov, 4);
	assert_int_equal(p.ep_attr.max_request_iov, 4);
	assert_int_equal(p.ep_attr.max_rdma_read_in, 4);
	assert_int_equal(p.ep_attr.max_rdma_read_out, 4);
	assert_true(p.ep_attr.max_message_size > 0);
	assert_int_equal(p.ep_attr.recv_completion_flags, DAT_COMPLETION_EVD_THRESHOLD_FLAG);
	/* NULL out-pointers are allowed */
	assert_ok(dat_ep_get_status(ep, NULL, NULL, NULL));
	assert_ok(dat_ep_get_status(ep, &st, &ri, &qi));
	assert_int_equal(st, DAT_EP_STATE_UNCONNECTED);
	assert_true(ri && qi);
	assert_ok(dat_ep_reset(ep));
	assert_ok(dat_ep_free(ep));

	/* zero fields are defaults too; explicit values are kept */
	memset(&a, 0, sizeof(a));
	a.max_recv_dtos = 103;
	a.max_request_dtos = 107;
	assert_ok(dat_ep_create(f->ia, f->pz, dto, dto, conn, &a, &ep));
	assert_ok(dat_ep_query(ep, DAT_EP_FIELD_ALL, &p));
	assert_int_equal(p.ep_attr.max_recv_dtos, 103);
	assert_int_equal(p.ep_attr.max_request_dtos, 107);
	assert_int_equal(p.ep_attr.max_recv_iov, 4);
	assert_ok(dat_ep_free(ep));
	assert_ok(dat_evd_free(dto));
	assert_ok(dat_evd_free(conn));
}

/* Wrong EVD kinds, a freed PZ, too-deep queues, NULL out-pointer. */
static void test_ep_create_checks(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE dto, conn;
	DAT_PZ_HANDLE pz2;
	DAT_EP_HANDLE ep;
	DAT_IA_ATTR ia;
	DAT_EP_ATTR a;

	assert_ok(dat_ia_query(f->ia, NULL, DAT_IA_ALL, &ia, 0, NULL));
	assert_ok(dat_evd_create(f->ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto));
	assert_ok(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn));
	assert_rc(dat_ep_create(f->ia, f->pz, conn, dto, conn, NULL, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV));
	assert_rc(dat_ep_create(f->ia, f->pz, dto, f->evd, conn, NULL, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST));
	assert_rc(dat_ep_create(f->ia, f->pz, dto, dto, dto, NULL, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN));
	assert_rc(dat_ep_create(f->ia, dto, dto, dto, conn, NULL, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ));
	/* a freed PZ is a stale handle (dapltest -f endpoint expects this) */
	assert_ok(dat_pz_create(f->ia, &pz2));
	assert_ok(dat_pz_free(pz2));
	assert_rc(dat_ep_create(f->ia, pz2, dto, dto, conn, NULL, &ep),
		  ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ));
	assert_arg(dat_ep_create(f->ia, f->pz, dto, dto, conn, NULL, NULL), DAT_INVALID_ARG7);
	memset(&a, 0, sizeof(a));
	a.max_request_dtos = ia.max_dto_per_ep + 1;
	assert_arg(dat_ep_create(f->ia, f->pz, dto, dto, conn, &a, &ep), DAT_INVALID_ARG6);
	memset(&a, 0, sizeof(a));
	a.max_recv_iov = ia.max_iov_segments_per_dto + 1;
	assert_arg(dat_ep_create(f->ia, f->pz, dto, dto, conn, &a, &ep), DAT_INVALID_ARG6);
	memset(&a, 0, sizeof(a));
	a.recv_completion_flags = DAT_COMPLETION_UNSIGNALLED_FLAG;
	assert_arg(dat_ep_create(f->ia, f->pz, dto, dto, conn, &a, &ep), DAT_INVALID_ARG6);
	assert_ok(dat_evd_free(dto));
	assert_ok(dat_evd_free(conn));
}

/* An EP holds its PZ and EVDs: none can be freed under it (scenario 12);
 * an unsignalled request stream forbids threshold > 1 on its EVD (D13). */
static void test_ep_dependencies(void **state)
{
	struct fx *f = *state;
	DAT_EVD_HANDLE dto, conn;
	DAT_EP_HANDLE ep;
	DAT_EP_ATTR a;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	assert_ok(dat_evd_create(f->ia, 32, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto));
	assert_ok(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn));
	memset(&a, 0, sizeof(a));
	a.request_completion_flags = DAT_COMPLETION_UNSIGNALLED_FLAG;
	assert_ok(dat_ep_create(f->ia, f->pz, dto, dto, conn, &a, &ep));
	assert_rc(dat_evd_free(dto), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE));
	assert_rc(dat_evd_free(conn), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE));
	assert_rc(dat_pz_free(f->pz), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE));
	assert_rc(dat_evd_wait(dto, 0, 2, &ev, &nmore),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_CONFIG_NOTIFY));
	assert_err(dat_evd_wait(dto, 0, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
	assert_rc(dat_ia_close(f->ia, DAT_CLOSE_GRACEFUL_FLAG),
		  ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE));
	assert_ok(dat_ep_free(ep));
	assert_err(dat_ep_free(ep), DAT_INVALID_HANDLE);	/* stale */
	assert_err(dat_evd_wait(dto, 0, 2, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
	assert_ok(dat_evd_free(dto));
	assert_ok(dat_evd_free(conn));
}

/* ================================================================= main */

#define T(name)	cmocka_unit_test(name)
#define TF(name) cmocka_unit_test_setup_teardown(name, fx_setup, fx_teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		/* IA open, query, close */
		T(test_ia_open_close_graceful),
		T(test_ia_reopen_three_times),
		T(test_ia_close_graceful_refused_with_pz),
		T(test_ia_close_abrupt_frees_everything),
		TF(test_ia_close_bad_flags),
		TF(test_ia_open_async_evd_created),
		TF(test_ia_async_evd_free_refused),
		T(test_ia_open_bad_arguments),
		TF(test_ia_query_null_combinations),
		TF(test_ia_query_null_ia_attr_with_mask),
		TF(test_ia_query_null_provider_attr_with_mask),
		TF(test_ia_query_unknown_ia_mask_bits),
		TF(test_ia_query_provider_attr),
		TF(test_ia_query_address_is_loopback),
		TF(test_ia_query_provider_specific_attrs),
		T(test_ia_query_rdma_read_entry),
		T(test_ia_open_net_entry),
		TF(test_ia_query_merging_matrix),
		TF(test_ia_query_limits_sane),
		TF(test_ia_query_fills_unrequested_fields),
		/* bad IA names and dat.conf entries */
		T(test_ia_open_unknown_name),
		T(test_ia_open_bad_params),
		T(test_ia_open_bad_key),
		T(test_ia_open_bad_prov),
		T(test_ia_open_bad_if),
		T(test_ia_open_after_failed_open),
		/* handles */
		TF(test_handle_type_and_context),
		TF(test_handle_wrong_type),
		TF(test_handle_forged),
		TF(test_handle_null),
		TF(test_handle_not_an_ia),
		TF(test_handle_stale),
		TF(test_null_out_pointers),
		TF(test_bad_masks),
		/* PZ, LMR */
		TF(test_pz_create_query_free),
		TF(test_pz_free_with_lmr_refused),
		TF(test_lmr_create_query),
		TF(test_lmr_create_length_zero),
		TF(test_lmr_create_too_long),
		TF(test_lmr_create_null_rmr_context),
		TF(test_lmr_create_unknown_priv_bits),
		TF(test_lmr_create_on_lmr),
		TF(test_lmr_create_pz_of_other_ia),
		/* EVD */
		TF(test_evd_create_bad_qlen),
		TF(test_evd_create_flags),
		TF(test_evd_create_cno_of_other_ia),
		TF(test_evd_query),
		TF(test_evd_post_se_checks),
		TF(test_evd_dequeue_empty_exact),
		TF(test_evd_post_dequeue_fifo),
		TF(test_evd_wait_timeouts),
		TF(test_evd_wait_returns_events),
		TF(test_evd_resize),
		TF(test_evd_unwaitable),
		TF(test_evd_enable_disable_modify_cno),
		TF(test_evd_free_states),
		/* CNO */
		TF(test_cno_query_masks),
		TF(test_cno_free_with_evd_refused),
		TF(test_cno_wait_timeout),
		TF(test_cno_proxy_agent),
		/* threads */
		TF(test_evd_wait_woken_by_post),
		TF(test_cno_wait_woken_by_post_from_thread),
		TF(test_evd_set_unwaitable_wakes_waiter),
		TF(test_ia_close_abrupt_aborts_waiter),
		/* stubs */
		TF(test_send_with_invalidate_bad_handle),
		TF(test_dat20_calls_bad_handles),
		TF(test_rmr_max),
		TF(test_ep_create_defaults),
		TF(test_ep_modify),
		TF(test_ep_create_checks),
		TF(test_ep_dependencies),
	};

	if (argc == 3 && strcmp(argv[1], "--open-child") == 0)
		return open_child_main(argv[2]);
	default_dat_override();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
