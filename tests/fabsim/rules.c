/*
 * fabsim rule tests: with FI_PROVIDER_PATH=build/fabsim, the profile named
 * by FABSIM_TEST_PROFILE (efa, psm3, opx, cxi; default efa), two endpoints
 * in one process over 127.0.0.1.  Each test breaks one rule (or waits for
 * what the rule allows) and asserts the provider's answer; a test of a rule
 * the profile does not have is skipped.  tests/fabsim/run.sh proves each
 * one fails with its rule switched off.
 *
 *   FABSIM_TEST_PROFILE=psm3 fabsim_rules [test-name-pattern]
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define DEADLINE_US	5000000u
#define MAX_LOG		4096
#define BUFSZ		(128 * 1024)
#define NO_RULE		0	/* an errno field: the profile has no such rule */

#define TAG_GENERIC	0xAAAAAAAAAAAAAAAAull
#define RAR_SET		(FI_ORDER_RAR | FI_ORDER_RMA_RAR | FI_ORDER_ATOMIC_RAR)
#define RAW_SET		(FI_ORDER_RAW | FI_ORDER_RMA_RAW | FI_ORDER_ATOMIC_RAW)
#define WAR_SET		(FI_ORDER_WAR | FI_ORDER_RMA_WAR | FI_ORDER_ATOMIC_WAR)
#define WAW_SET		(FI_ORDER_WAW | FI_ORDER_RMA_WAW | FI_ORDER_ATOMIC_WAW)
#define ATOMIC_ORDERS	(FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | \
			 FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW)
#define DAPL_MR		(FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)

/*
 * Each profile's attributes, written down from the libfabric sources
 * (fabsim/README.md), not taken from the provider: the tests ask with
 * hints_mr and mode, and expect mr_mode and cq_data back.
 */
struct tprof {
	const char *name, *prov;
	uint64_t mode;			/* what the provider needs granted */
	size_t ctx_words;		/* context words scribbled by default */
	int hints_mr, mr_mode, mr_refused;
	size_t cq_data;			/* cq_data_size for these hints */
	size_t inject;
	int inject_err;
	uint64_t msg_order;
	uint32_t addr_format;
	size_t addrlen;
	uint32_t protocol, protocol_version;
	size_t mr_key_size, mr_iov_limit, tx_iov, rx_iov, rma_iov;
	uint64_t max_msg, tag_format;
	enum fi_threading threading;
	enum fi_av_type av_type;
	int wait_style;			/* 0 refused, 1 ignored, 2 not simulated */
	int offset_err, mr_endpoint_err;
};

static const struct tprof profiles[] = {
	{ .name = "efa", .prov = "sim_efa", .mode = 0, .ctx_words = 0,
	  .hints_mr = DAPL_MR, .mr_mode = DAPL_MR, .mr_refused = FI_MR_SCALABLE,
	  .cq_data = 8, .inject = 3928, .inject_err = -FI_EINVAL,
	  .msg_order = FI_ORDER_SAS | ATOMIC_ORDERS,
	  .addr_format = FI_ADDR_EFA, .addrlen = 32, .protocol = FI_PROTO_EFA,
	  .protocol_version = 4, .mr_key_size = 4, .mr_iov_limit = 1,
	  .tx_iov = 4, .rx_iov = 4, .rma_iov = 1, .max_msg = UINT64_MAX,
	  .tag_format = TAG_GENERIC, .threading = FI_THREAD_SAFE,
	  .av_type = FI_AV_TABLE, .wait_style = 0,
	  .offset_err = NO_RULE, .mr_endpoint_err = NO_RULE },
	{ .name = "psm3", .prov = "sim_psm3", .mode = FI_CONTEXT, .ctx_words = 4,
	  /* dapl-ofi's hints: psm3 grants mode 0 (offsets, consumer keys) */
	  .hints_mr = DAPL_MR | FI_MR_LOCAL, .mr_mode = 0, .mr_refused = 0,
	  .cq_data = 4, .inject = 64, .inject_err = -FI_EMSGSIZE,
	  .msg_order = FI_ORDER_SAS | RAR_SET | RAW_SET | WAR_SET | WAW_SET,
	  .addr_format = FI_ADDR_PSMX3, .addrlen = 32,
	  .protocol = FI_PROTO_PSMX3, .protocol_version = 0x0300,
	  .mr_key_size = 8, .mr_iov_limit = 65535, .tx_iov = 13, .rx_iov = 1,
	  .rma_iov = 1, .max_msg = 0xFFFFF000ull, .tag_format = TAG_GENERIC >> 4,
	  .threading = FI_THREAD_SAFE, .av_type = FI_AV_TABLE, .wait_style = 2,
	  .offset_err = FI_EACCES, .mr_endpoint_err = NO_RULE },
	{ .name = "opx", .prov = "sim_opx", .mode = FI_CONTEXT2 | FI_ASYNC_IOV,
	  .ctx_words = 8, .hints_mr = DAPL_MR | FI_MR_LOCAL,
	  .mr_mode = FI_MR_SCALABLE, .mr_refused = 0,
	  .cq_data = 4, .inject = 16, .inject_err = -FI_EINVAL,
	  .msg_order = ATOMIC_ORDERS, .addr_format = FI_ADDR_OPX, .addrlen = 8,
	  .protocol = FI_PROTO_OPX, .protocol_version = 1, .mr_key_size = 2,
	  .mr_iov_limit = 1, .tx_iov = 8, .rx_iov = 8, .rma_iov = 0,
	  .max_msg = UINT64_MAX, .tag_format = UINT64_MAX,
	  .threading = FI_THREAD_ENDPOINT, .av_type = FI_AV_MAP,
	  .wait_style = 1, .offset_err = FI_EINVAL, .mr_endpoint_err = NO_RULE },
	{ .name = "cxi", .prov = "sim_cxi", .mode = 0, .ctx_words = 0,
	  .hints_mr = FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY,
	  .mr_mode = FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY,
	  /* dapl-ofi's own hints: cxi needs FI_MR_ENDPOINT granted */
	  .mr_refused = DAPL_MR | FI_MR_LOCAL,
	  .cq_data = 8, .inject = 192, .inject_err = -FI_EMSGSIZE,
	  .msg_order = FI_ORDER_SAS | FI_ORDER_WAW | FI_ORDER_RMA_WAW |
		       FI_ORDER_RMA_RAR | ATOMIC_ORDERS,
	  .addr_format = FI_ADDR_CXI, .addrlen = 8, .protocol = FI_PROTO_CXI,
	  .protocol_version = 1, .mr_key_size = 8, .mr_iov_limit = 1,
	  .tx_iov = 1, .rx_iov = 1, .rma_iov = 1, .max_msg = (1ull << 32) - 1,
	  .tag_format = TAG_GENERIC >> 16, .threading = FI_THREAD_SAFE,
	  .av_type = FI_AV_TABLE, .wait_style = 2,
	  .offset_err = FI_EIO, .mr_endpoint_err = FI_EIO },
};

static const struct tprof *P = &profiles[0];

struct env {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq[2];
	struct fid_ep *ep[2];
	fi_addr_t addr[2];
	void *log[2][MAX_LOG];		/* completed op contexts, in order */
	uint64_t data[2][MAX_LOG];
	size_t nlog[2];
	int nerr, last_err;
	void *last_err_ctx;
	unsigned eagains;
	char *buf[2];
};

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void progress(struct env *e, int i)
{
	struct fi_cq_data_entry c[16];
	struct fi_cq_err_entry err;
	ssize_t n, k;

	n = fi_cq_read(e->cq[i], c, 16);
	if (n == -FI_EAVAIL) {
		memset(&err, 0, sizeof(err));
		if (fi_cq_readerr(e->cq[i], &err, 0) == 1) {
			e->nerr++;
			e->last_err = err.err;
			e->last_err_ctx = err.op_context;
			if (e->nlog[i] < MAX_LOG)
				e->log[i][e->nlog[i]++] = err.op_context;
		}
		return;
	}
	for (k = 0; k < n; k++) {
		if (e->nlog[i] < MAX_LOG) {
			e->data[i][e->nlog[i]] = c[k].data;
			e->log[i][e->nlog[i]++] = c[k].op_context;
		}
	}
}

static void progress_all(struct env *e)
{
	progress(e, 0);
	progress(e, 1);
}

/* a post: retried after progress while the provider says EAGAIN */
#define POST(e, expr) ({						\
	ssize_t _r;							\
	uint64_t _end = now_us() + DEADLINE_US;				\
	for (;;) {							\
		_r = (expr);						\
		if (_r != -FI_EAGAIN || now_us() > _end)		\
			break;						\
		(e)->eagains++;						\
		progress_all(e);					\
	}								\
	_r; })

static bool logged(struct env *e, int i, void *ctx)
{
	size_t k;

	for (k = 0; k < e->nlog[i]; k++)
		if (e->log[i][k] == ctx)
			return true;
	return false;
}

static bool wait_ctx(struct env *e, int i, void *ctx)
{
	uint64_t end = now_us() + DEADLINE_US;

	while (!logged(e, i, ctx) && now_us() < end)
		progress_all(e);
	return logged(e, i, ctx);
}

static struct fi_info *hints_new(uint64_t mode, int mr_extra)
{
	struct fi_info *h = fi_allocinfo();

	assert_non_null(h);
	h->fabric_attr->prov_name = strdup(P->prov);
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED | FI_RMA;
	h->mode = P->mode | mode;
	h->domain_attr->mr_mode = P->hints_mr | mr_extra;
	/* psm3: the tag60 instance, the one with CQ data */
	h->domain_attr->cq_data_size = P->cq_data < 8 ? P->cq_data : 0;
	return h;
}

static void env_open(struct env *e, uint64_t mode, int mr_extra)
{
	struct fi_info *h = hints_new(mode, mr_extra);
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_DATA, .size = 4096 };
	struct fi_av_attr ava = { .type = FI_AV_TABLE };
	char name[2][64];
	size_t len;
	int i;

	assert_int_equal(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL,
				    FI_SOURCE, h, &e->info), 0);
	fi_freeinfo(h);
	assert_int_equal(fi_fabric(e->info->fabric_attr, &e->fabric, NULL), 0);
	assert_int_equal(fi_domain(e->fabric, e->info, &e->domain, NULL), 0);
	assert_int_equal(fi_av_open(e->domain, &ava, &e->av, NULL), 0);
	for (i = 0; i < 2; i++) {
		assert_int_equal(fi_cq_open(e->domain, &cqa, &e->cq[i], NULL), 0);
		assert_int_equal(fi_endpoint(e->domain, e->info, &e->ep[i], NULL), 0);
		assert_int_equal(fi_ep_bind(e->ep[i], &e->cq[i]->fid,
					    FI_TRANSMIT | FI_RECV), 0);
		assert_int_equal(fi_ep_bind(e->ep[i], &e->av->fid, 0), 0);
		assert_int_equal(fi_enable(e->ep[i]), 0);
		len = sizeof(name[i]);
		assert_int_equal(fi_getname(&e->ep[i]->fid, name[i], &len), 0);
		assert_int_equal(len, P->addrlen);
		e->buf[i] = calloc(1, BUFSZ);
		assert_non_null(e->buf[i]);
	}
	assert_int_equal(fi_av_insert(e->av, name[0], 1, &e->addr[0], 0, NULL), 1);
	assert_int_equal(fi_av_insert(e->av, name[1], 1, &e->addr[1], 0, NULL), 1);
}

static int env_teardown(void **state)
{
	struct env *e = *state;
	int i;

	if (!e)
		return 0;
	for (i = 0; i < 2; i++) {
		if (e->ep[i])
			fi_close(&e->ep[i]->fid);
		if (e->cq[i])
			fi_close(&e->cq[i]->fid);
		free(e->buf[i]);
	}
	if (e->av)
		fi_close(&e->av->fid);
	if (e->domain)
		fi_close(&e->domain->fid);
	if (e->fabric)
		fi_close(&e->fabric->fid);
	fi_freeinfo(e->info);
	free(e);
	*state = NULL;
	unsetenv("FABSIM_ON");
	unsetenv("FABSIM_CQ_DATA_SIZE");
	unsetenv("FABSIM_MAX_MSG_SIZE");
	return 0;
}

/* a remote-writable MR over buf[1] (ep[1]'s); *base names its first byte:
 * its address with FI_MR_VIRT_ADDR, offset 0 without.  Keys are ours where
 * the provider takes the consumer's (psm3 mode 0, opx). */
static struct fid_mr *reg_target(struct env *e, uint64_t *base, bool enable)
{
	static uint64_t next_key = 1;
	struct fid_mr *mr = NULL;

	assert_int_equal(fi_mr_reg(e->domain, e->buf[1], BUFSZ,
				   FI_REMOTE_WRITE | FI_REMOTE_READ | FI_RECV,
				   0, next_key++, 0, &mr, NULL), 0);
	if (enable && (P->mr_mode & FI_MR_ENDPOINT)) {
		assert_int_equal(fi_mr_bind(mr, &e->ep[1]->fid, 0), 0);
		assert_int_equal(fi_mr_enable(mr), 0);
	}
	*base = P->mr_mode & (FI_MR_BASIC | FI_MR_VIRT_ADDR) ?
		(uint64_t)(uintptr_t)e->buf[1] : 0;
	return mr;
}

static struct env *env_new(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	*state = e;
	return e;
}

static void more_saw(struct fi_info *h) { h->tx_attr->msg_order = FI_ORDER_SAW; }
static void more_strict(struct fi_info *h) { h->tx_attr->comp_order = FI_ORDER_STRICT; }
static void more_inject(struct fi_info *h) { h->tx_attr->inject_size = P->inject + 1; }
static void more_cqdata(struct fi_info *h) { h->domain_attr->cq_data_size = 16; }
static void more_msg_ep(struct fi_info *h) { h->ep_attr->type = FI_EP_MSG; }
static void more_caps(struct fi_info *h) { h->caps |= FI_TRIGGER; }
static void refused_mr(struct fi_info *h) { h->domain_attr->mr_mode = P->mr_refused; }
static void more_rma_iov(struct fi_info *h) { h->tx_attr->rma_iov_limit = 2; }
static void opx_context1(struct fi_info *h) { h->mode = FI_CONTEXT | FI_ASYNC_IOV; }
static void no_cq_data(struct fi_info *h) { h->domain_attr->cq_data_size = 0; }
static void mr_basic(struct fi_info *h) { h->domain_attr->mr_mode = FI_MR_BASIC; }
static void cxi_client_keys(struct fi_info *h)
{
	h->domain_attr->mr_mode = FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_LOCAL;
}
static void progress_auto(struct fi_info *h)
{
	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
}

/* the first fi_info for tweaked hints; NULL when refused */
static struct fi_info *info_for(void (*tweak)(struct fi_info *))
{
	struct fi_info *h = hints_new(0, 0), *info = NULL;

	if (tweak)
		tweak(h);
	if (fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, h, &info))
		info = NULL;
	fi_freeinfo(h);
	return info;
}

static int try_hints(void (*tweak)(struct fi_info *))
{
	struct fi_info *i = info_for(tweak);

	fi_freeinfo(i);
	return i ? 0 : -FI_ENODATA;
}

/* attributes as the provider publishes them; hints asking more: ENODATA */
static void test_attrs(void **state)
{
	struct fi_info *i = info_for(NULL);

	(void)state;
	assert_non_null(i);
	assert_string_equal(i->fabric_attr->prov_name, P->prov);
	assert_int_equal(i->addr_format, P->addr_format);
	assert_int_equal(i->src_addrlen, P->addrlen);
	assert_true((i->caps & (FI_MSG | FI_TAGGED | FI_RMA)) ==
		    (FI_MSG | FI_TAGGED | FI_RMA));
	assert_int_equal(i->mode, P->mode);
	assert_int_equal(i->tx_attr->msg_order, P->msg_order);
	assert_int_equal(i->rx_attr->msg_order, P->msg_order);
	assert_false(i->tx_attr->msg_order & FI_ORDER_SAW);
	assert_int_equal(i->tx_attr->comp_order, FI_ORDER_NONE);
	assert_int_equal(i->tx_attr->inject_size, P->inject);
	assert_int_equal(i->tx_attr->iov_limit, P->tx_iov);
	assert_int_equal(i->rx_attr->iov_limit, P->rx_iov);
	assert_int_equal(i->tx_attr->rma_iov_limit, P->rma_iov);
	assert_true(i->ep_attr->max_msg_size == P->max_msg);
	assert_true(i->ep_attr->mem_tag_format == P->tag_format);
	assert_int_equal(i->ep_attr->protocol, P->protocol);
	assert_int_equal(i->ep_attr->protocol_version, P->protocol_version);
	assert_int_equal(i->domain_attr->mr_mode, P->mr_mode);
	assert_int_equal(i->domain_attr->mr_key_size, P->mr_key_size);
	assert_int_equal(i->domain_attr->cq_data_size, P->cq_data);
	assert_int_equal(i->domain_attr->mr_iov_limit, P->mr_iov_limit);
	assert_int_equal(i->domain_attr->threading, P->threading);
	assert_int_equal(i->domain_attr->av_type, P->av_type);
	assert_int_equal(i->domain_attr->data_progress, FI_PROGRESS_MANUAL);
	fi_freeinfo(i);

	assert_int_equal(try_hints(more_saw), -FI_ENODATA);
	assert_int_equal(try_hints(more_strict), -FI_ENODATA);
	assert_int_equal(try_hints(more_inject), -FI_ENODATA);
	assert_int_equal(try_hints(more_cqdata), -FI_ENODATA);
	assert_int_equal(try_hints(more_msg_ep), -FI_ENODATA);
	assert_int_equal(try_hints(more_caps), -FI_ENODATA);
	assert_int_equal(try_hints(more_rma_iov), -FI_ENODATA);
	if (P->mr_refused)
		assert_int_equal(try_hints(refused_mr), -FI_ENODATA);

	if (!strcmp(P->name, "psm3")) {
		/* no cq_data_size asked: tag64 (no CQ data) first, then tag60 */
		i = info_for(no_cq_data);
		assert_non_null(i);
		assert_int_equal(i->domain_attr->cq_data_size, 0);
		assert_true(i->ep_attr->mem_tag_format == TAG_GENERIC);
		assert_non_null(i->next);
		assert_int_equal(i->next->domain_attr->cq_data_size, 4);
		fi_freeinfo(i);
		i = info_for(mr_basic);
		assert_non_null(i);
		assert_int_equal(i->domain_attr->mr_mode, FI_MR_BASIC);
		fi_freeinfo(i);
	}
	if (!strcmp(P->name, "psm3") || !strcmp(P->name, "opx")) {
		i = info_for(progress_auto);
		assert_non_null(i);
		assert_int_equal(i->domain_attr->data_progress, FI_PROGRESS_AUTO);
		fi_freeinfo(i);
	}
	if (!strcmp(P->name, "opx"))
		assert_int_equal(try_hints(opx_context1), -FI_ENODATA);
	if (!strcmp(P->name, "cxi")) {
		i = info_for(cxi_client_keys);
		assert_non_null(i);
		assert_int_equal(i->domain_attr->mr_mode,
				 FI_MR_ENDPOINT | FI_MR_ALLOCATED);
		fi_freeinfo(i);
	}
}

/* rule wait: efa CQs have no wait object (cq_open fails); opx ignores it
 * at cq_open, cannot sread (abort) and has no FI_GETWAIT */
static void test_wait(void **state)
{
	struct env *e = env_new(state);
	struct fi_cq_attr a = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD };
	struct fi_cq_data_entry c;
	struct fid_cq *cq = NULL;
	int r1, r2, fd = -1;
	ssize_t rs;

	env_open(e, 0, 0);
	if (P->wait_style == 1) {
		assert_int_equal(fi_cq_open(e->domain, &a, &cq, NULL), 0);
		rs = fi_cq_sread(cq, &c, 1, NULL, 10);
		r1 = fi_control(&cq->fid, FI_GETWAIT, &fd);
		fi_close(&cq->fid);
		assert_int_equal(rs, -FI_ENOSYS);
		assert_int_equal(r1, -FI_ENOSYS);
		return;
	}
	r1 = fi_cq_open(e->domain, &a, &cq, NULL);
	if (!r1)
		fi_close(&cq->fid);
	a.wait_obj = FI_WAIT_UNSPEC;
	r2 = fi_cq_open(e->domain, &a, &cq, NULL);
	if (!r2)
		fi_close(&cq->fid);
	assert_int_equal(r1, -FI_ENOSYS);
	assert_int_equal(r2, -FI_ENOSYS);
	if (P->wait_style == 2)
		skip();		/* psm3, cxi: not simulated, refused always */
}

/* rule mr_local (not efa's: FABSIM_ON=mr_local): no descriptor -> EINVAL;
 * no other profile asks for FI_MR_LOCAL */
static void test_mr_local(void **state)
{
	struct env *e = env_new(state);
	ssize_t r;
	struct fi_context2 rctx, sctx;

	if (strcmp(P->name, "efa"))
		skip();
	setenv("FABSIM_ON", "mr_local", 1);
	env_open(e, 0, FI_MR_LOCAL);
	assert_true(e->info->domain_attr->mr_mode & FI_MR_LOCAL);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 64, NULL,
					 e->addr[0], &rctx)), -FI_EINVAL);
	r = POST(e, fi_send(e->ep[0], e->buf[0], 64, NULL, e->addr[1], &sctx));
	assert_int_equal(r, -FI_EINVAL);
}

/* rule inject: above inject_size the provider's error (efa rxr_msg_inject()
 * EINVAL, psm3 and cxi EMSGSIZE, opx: ours, see README) */
static void test_inject(void **state)
{
	struct env *e = env_new(state);
	struct fi_context2 rctx;

	env_open(e, 0, 0);
	/* at the limit it works (efa: beyond the core's 1256-byte inject) */
	memset(e->buf[0], 0x5a, P->inject);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], BUFSZ, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	assert_int_equal(POST(e, fi_inject(e->ep[0], e->buf[0], P->inject,
					   e->addr[1])), 0);
	assert_true(wait_ctx(e, 1, &rctx));
	assert_int_equal((unsigned char)e->buf[1][P->inject - 1], 0x5a);

	assert_int_equal(POST(e, fi_inject(e->ep[0], e->buf[0], P->inject + 1,
					   e->addr[1])), P->inject_err);
	assert_int_equal(POST(e, fi_tinject(e->ep[0], e->buf[0], P->inject + 1,
					    e->addr[1], 7)), P->inject_err);
	assert_int_equal(POST(e, fi_injectdata(e->ep[0], e->buf[0], P->inject + 1,
					       1, e->addr[1])), P->inject_err);
}

/* rule msg_size: FABSIM_MAX_MSG_SIZE sets a limit below the provider's */
static void test_msg_size(void **state)
{
	struct env *e = env_new(state);
	struct fi_context2 rctx, sctx;

	setenv("FABSIM_MAX_MSG_SIZE", "65536", 1);
	env_open(e, 0, 0);
	assert_int_equal(e->info->ep_attr->max_msg_size, 65536);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 65536, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	assert_int_equal(POST(e, fi_send(e->ep[0], e->buf[0], 65537, NULL,
					 e->addr[1], &sctx)), -FI_EMSGSIZE);
}

/* rule cq_data: data wider than cq_data_size (psm3 tag60 and opx: 4 bytes;
 * efa and cxi: 8, FABSIM_CQ_DATA_SIZE=4 makes it 4) */
static void test_cq_data(void **state)
{
	struct env *e = env_new(state);
	struct fi_context2 rctx, sctx, r2, s2;

	if (P->cq_data == 8)
		setenv("FABSIM_CQ_DATA_SIZE", "4", 1);
	env_open(e, 0, 0);
	assert_int_equal(e->info->domain_attr->cq_data_size, 4);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 64, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	assert_int_equal(POST(e, fi_senddata(e->ep[0], e->buf[0], 8, NULL,
					     0xfeedULL, e->addr[1], &sctx)), 0);
	assert_true(wait_ctx(e, 1, &rctx));
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 64, NULL,
					 FI_ADDR_UNSPEC, &r2)), 0);
	assert_int_equal(POST(e, fi_senddata(e->ep[0], e->buf[0], 8, NULL,
					     1ULL << 40, e->addr[1], &s2)), -FI_EINVAL);
}

/* rule comp_order: completions come out of posting order now and then */
static void test_comp_order(void **state)
{
	struct env *e = env_new(state);
	static struct fi_context2 rctx[64], sctx[64];
	uint64_t end;
	size_t k, inversions = 0;
	int i;

	env_open(e, 0, 0);
	for (i = 0; i < 64; i++)
		assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1] + i * 64, 64,
						 NULL, FI_ADDR_UNSPEC, &rctx[i])), 0);
	for (i = 0; i < 64; i++)
		assert_int_equal(POST(e, fi_send(e->ep[0], e->buf[0], 16, NULL,
						 e->addr[1], &sctx[i])), 0);
	end = now_us() + DEADLINE_US;
	while ((e->nlog[0] < 64 || e->nlog[1] < 64) && now_us() < end)
		progress_all(e);
	assert_int_equal(e->nlog[0], 64);
	assert_int_equal(e->nlog[1], 64);
	for (k = 1; k < 64; k++) {
		if ((char *)e->log[0][k] < (char *)e->log[0][k - 1])
			inversions++;
		if ((char *)e->log[1][k] < (char *)e->log[1][k - 1])
			inversions++;
	}
	print_message("comp_order: %zu inversions in 128 completions\n", inversions);
	assert_true(inversions > 0);
}

/* rule saw: a send posted after a write can arrive before the write's data */
static void test_saw(void **state)
{
	struct env *e = env_new(state);
	struct fi_context2 wctx, sctx, rctx;
	struct fid_mr *mr;
	uint64_t end, base;
	bool early;

	env_open(e, 0, 0);
	mr = reg_target(e, &base, true);
	memset(e->buf[0], 0xab, 4096);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1] + 8192, 64, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	assert_int_equal(POST(e, fi_write(e->ep[0], e->buf[0], 4096, NULL,
					  e->addr[1], base, fi_mr_key(mr), &wctx)), 0);
	assert_int_equal(POST(e, fi_send(e->ep[0], e->buf[0], 8, NULL, e->addr[1],
					 &sctx)), 0);
	end = now_us() + DEADLINE_US;
	while (!logged(e, 1, &rctx) && now_us() < end)
		progress_all(e);
	assert_true(logged(e, 1, &rctx));
	early = (unsigned char)e->buf[1][4095] != 0xab;
	/* the write still lands and completes */
	assert_true(wait_ctx(e, 0, &wctx));
	assert_int_equal((unsigned char)e->buf[1][4095], 0xab);
	fi_close(&mr->fid);
	print_message("saw: send %s the write's data\n", early ? "overtook" : "followed");
	assert_true(early);
}

/* rule eagain: posts refused with EAGAIN now and then */
static void test_eagain(void **state)
{
	struct env *e = env_new(state);
	static struct fi_context2 rctx[512], sctx[512];
	int i, j;

	env_open(e, 0, 0);
	for (j = 0; j < 512; j += 32) {
		for (i = j; i < j + 32; i++)
			assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 64, NULL,
							 FI_ADDR_UNSPEC, &rctx[i])), 0);
		for (i = j; i < j + 32; i++)
			assert_int_equal(POST(e, fi_send(e->ep[0], e->buf[0], 16, NULL,
							 e->addr[1], &sctx[i])), 0);
		assert_true(wait_ctx(e, 1, &rctx[j + 31]) || e->nlog[1] >= (size_t)j);
	}
	print_message("eagain: %u EAGAIN in 1024 posts\n", e->eagains);
	assert_true(e->eagains > 0);
}

/* rule manual: nothing moves unless the consumer calls in */
static void test_manual(void **state)
{
	struct env *e = env_new(state);
	struct fi_context2 rctx, sctx;
	bool moved;

	env_open(e, 0, 0);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 64, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	strcpy(e->buf[0], "hello");
	assert_int_equal(POST(e, fi_send(e->ep[0], e->buf[0], 6, NULL, e->addr[1],
					 &sctx)), 0);
	usleep(50000);
	moved = e->buf[1][0] != 0;
	assert_true(wait_ctx(e, 1, &rctx));
	assert_string_equal(e->buf[1], "hello");
	assert_false(moved);
}

/* rule ctx: the context is the provider's while the operation is in flight,
 * all of it: 4 words with FI_CONTEXT (psm3; efa and cxi with FABSIM_ON=ctx),
 * 8 with FI_CONTEXT2 (opx) */
static void test_ctx(void **state)
{
	struct env *e = env_new(state);
	struct fi_context2 rctx, sctx;
	size_t k, words = P->ctx_words ? P->ctx_words : 4;
	bool whole = true, beyond = false;

	if (!P->ctx_words)
		setenv("FABSIM_ON", "ctx", 1);
	env_open(e, P->ctx_words ? 0 : FI_CONTEXT, 0);
	memset(&rctx, 0, sizeof(rctx));
	memset(&sctx, 0, sizeof(sctx));
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 64, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	assert_int_equal(POST(e, fi_send(e->ep[0], e->buf[0], 8, NULL, e->addr[1],
					 &sctx)), 0);
	for (k = 0; k < 8; k++) {
		if (k < words)
			whole = whole && rctx.internal[k] && sctx.internal[k];
		else
			beyond = beyond || rctx.internal[k] || sctx.internal[k];
	}
	assert_true(wait_ctx(e, 1, &rctx));
	assert_true(wait_ctx(e, 0, &sctx));
	assert_false(beyond);
	assert_true(whole);
}

/* rule mr_endpoint (cxi): an MR is no RMA target before fi_mr_bind() and
 * fi_mr_enable(): the initiator's error completion (FI_EIO) */
static void test_mr_endpoint(void **state)
{
	struct env *e = env_new(state);
	struct fi_context2 w1, w2;
	struct fid_mr *mr;
	uint64_t base;
	int nerr;

	if (P->mr_endpoint_err == NO_RULE)
		skip();
	env_open(e, 0, 0);
	mr = reg_target(e, &base, false);
	memset(e->buf[0], 0x77, 64);
	assert_int_equal(fi_mr_enable(mr), -FI_EINVAL);	/* not bound yet */
	assert_int_equal(POST(e, fi_write(e->ep[0], e->buf[0], 64, NULL,
					  e->addr[1], base, fi_mr_key(mr), &w1)), 0);
	assert_true(wait_ctx(e, 0, &w1));
	nerr = e->nerr;
	assert_int_equal(fi_mr_bind(mr, &e->ep[1]->fid, 0), 0);
	assert_int_equal(fi_mr_enable(mr), 0);
	assert_int_equal(POST(e, fi_write(e->ep[0], e->buf[0], 64, NULL,
					  e->addr[1], base + 64, fi_mr_key(mr), &w2)), 0);
	assert_true(wait_ctx(e, 0, &w2));
	assert_int_equal((unsigned char)e->buf[1][64], 0x77);
	fi_close(&mr->fid);
	assert_int_equal(nerr, 1);
	assert_int_equal(e->last_err, P->mr_endpoint_err);
	assert_int_equal((unsigned char)e->buf[1][0], 0);
}

/* rule offset (psm3 mode 0, opx, cxi): the RMA address is an offset into
 * the target MR; a virtual address there is beyond it: the provider's error
 * completion, memory untouched */
static void test_offset(void **state)
{
	struct env *e = env_new(state);
	struct fi_context2 w1, w2;
	struct fid_mr *mr;
	uint64_t base, va;

	if (P->offset_err == NO_RULE)
		skip();
	env_open(e, 0, 0);
	mr = reg_target(e, &base, true);
	assert_int_equal(base, 0);
	memset(e->buf[0], 0xcd, 64);
	assert_int_equal(POST(e, fi_write(e->ep[0], e->buf[0], 64, NULL,
					  e->addr[1], 128, fi_mr_key(mr), &w1)), 0);
	assert_true(wait_ctx(e, 0, &w1));
	assert_int_equal(e->nerr, 0);
	assert_int_equal((unsigned char)e->buf[1][128], 0xcd);

	va = (uint64_t)(uintptr_t)e->buf[1] + 256;
	assert_int_equal(POST(e, fi_write(e->ep[0], e->buf[0], 64, NULL,
					  e->addr[1], va, fi_mr_key(mr), &w2)), 0);
	assert_true(wait_ctx(e, 0, &w2));
	fi_close(&mr->fid);
	assert_int_equal(e->nerr, 1);
	assert_ptr_equal(e->last_err_ctx, &w2);
	assert_int_equal(e->last_err, P->offset_err);
	assert_int_equal((unsigned char)e->buf[1][256], 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attrs),
		cmocka_unit_test_teardown(test_wait, env_teardown),
		cmocka_unit_test_teardown(test_mr_local, env_teardown),
		cmocka_unit_test_teardown(test_inject, env_teardown),
		cmocka_unit_test_teardown(test_msg_size, env_teardown),
		cmocka_unit_test_teardown(test_cq_data, env_teardown),
		cmocka_unit_test_teardown(test_comp_order, env_teardown),
		cmocka_unit_test_teardown(test_saw, env_teardown),
		cmocka_unit_test_teardown(test_eagain, env_teardown),
		cmocka_unit_test_teardown(test_manual, env_teardown),
		cmocka_unit_test_teardown(test_ctx, env_teardown),
		cmocka_unit_test_teardown(test_mr_endpoint, env_teardown),
		cmocka_unit_test_teardown(test_offset, env_teardown),
	};
	const char *want = getenv("FABSIM_TEST_PROFILE");
	size_t k;

	for (k = 0; want && *want && k < sizeof(profiles) / sizeof(profiles[0]); k++)
		if (!strcmp(profiles[k].name, want))
			break;
	if (want && *want && k == sizeof(profiles) / sizeof(profiles[0])) {
		fprintf(stderr, "unknown FABSIM_TEST_PROFILE %s\n", want);
		return 2;
	}
	P = &profiles[want && *want ? k : 0];
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests_name(P->name, tests, NULL, NULL);
}
