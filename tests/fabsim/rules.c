/*
 * fabsim rule tests: with FI_PROVIDER_PATH=build/fabsim, prov_name sim_efa,
 * two endpoints in one process over 127.0.0.1.  Each test breaks one rule
 * (or waits for what the rule allows) and asserts the provider's answer;
 * tests/fabsim/run.sh proves each one fails with its rule switched off.
 *
 *   fabsim_rules [test-name-pattern]
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

#define PROV		"sim_efa"
#define DEADLINE_US	5000000u
#define MAX_LOG		4096
#define BUFSZ		(128 * 1024)

/* the efa 1.17 RDM attributes, written down from the libfabric sources
 * (fabsim/README.md), not taken from the provider */
#define EFA_INJECT	3928
#define EFA_MSG_ORDER	(FI_ORDER_SAS | FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | \
			 FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW)
#define EFA_MR_MODE	(FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)

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
	int nerr;
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
	h->fabric_attr->prov_name = strdup(PROV);
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED | FI_RMA;
	h->mode = mode;
	h->domain_attr->mr_mode = EFA_MR_MODE | mr_extra;
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
		assert_int_equal(len, 32);
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

static struct env *env_new(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	*state = e;
	return e;
}

/* attributes as efa 1.17 publishes them; hints asking for more: ENODATA */
static int try_hints(void (*tweak)(struct fi_info *))
{
	struct fi_info *h = hints_new(0, 0), *info = NULL;
	int ret;

	tweak(h);
	ret = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, h, &info);
	fi_freeinfo(h);
	fi_freeinfo(info);
	return ret;
}

static void more_saw(struct fi_info *h) { h->tx_attr->msg_order = FI_ORDER_SAW; }
static void more_strict(struct fi_info *h) { h->tx_attr->comp_order = FI_ORDER_STRICT; }
static void more_inject(struct fi_info *h) { h->tx_attr->inject_size = EFA_INJECT + 1; }
static void more_cqdata(struct fi_info *h) { h->domain_attr->cq_data_size = 16; }
static void more_msg_ep(struct fi_info *h) { h->ep_attr->type = FI_EP_MSG; }
static void more_caps(struct fi_info *h) { h->caps |= FI_TRIGGER; }
static void more_mr(struct fi_info *h) { h->domain_attr->mr_mode = FI_MR_SCALABLE; }
static void less_mr(struct fi_info *h) { h->domain_attr->mr_mode = FI_MR_VIRT_ADDR; }
static void more_rma_iov(struct fi_info *h) { h->tx_attr->rma_iov_limit = 2; }

static void test_attrs(void **state)
{
	struct fi_info *h = hints_new(0, 0), *i = NULL;

	(void)state;
	assert_int_equal(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL,
				    FI_SOURCE, h, &i), 0);
	fi_freeinfo(h);
	assert_string_equal(i->fabric_attr->prov_name, PROV);
	assert_int_equal(i->addr_format, FI_ADDR_EFA);
	assert_int_equal(i->src_addrlen, 32);
	assert_true((i->caps & (FI_MSG | FI_TAGGED | FI_RMA)) ==
		    (FI_MSG | FI_TAGGED | FI_RMA));
	assert_int_equal(i->mode, 0);
	assert_int_equal(i->tx_attr->msg_order, EFA_MSG_ORDER);
	assert_int_equal(i->rx_attr->msg_order, EFA_MSG_ORDER);
	assert_int_equal(i->tx_attr->comp_order, FI_ORDER_NONE);
	assert_int_equal(i->tx_attr->inject_size, EFA_INJECT);
	assert_int_equal(i->tx_attr->iov_limit, 4);
	assert_int_equal(i->rx_attr->iov_limit, 4);
	assert_int_equal(i->tx_attr->rma_iov_limit, 1);
	assert_true(i->ep_attr->max_msg_size == UINT64_MAX);
	assert_int_equal(i->ep_attr->protocol, FI_PROTO_EFA);
	assert_int_equal(i->ep_attr->protocol_version, 4);
	assert_int_equal(i->domain_attr->mr_mode, EFA_MR_MODE);
	assert_int_equal(i->domain_attr->mr_key_size, 4);
	assert_int_equal(i->domain_attr->cq_data_size, 8);
	assert_int_equal(i->domain_attr->mr_iov_limit, 1);
	assert_int_equal(i->domain_attr->threading, FI_THREAD_SAFE);
	assert_int_equal(i->domain_attr->data_progress, FI_PROGRESS_MANUAL);
	fi_freeinfo(i);

	assert_int_equal(try_hints(more_saw), -FI_ENODATA);
	assert_int_equal(try_hints(more_strict), -FI_ENODATA);
	assert_int_equal(try_hints(more_inject), -FI_ENODATA);
	assert_int_equal(try_hints(more_cqdata), -FI_ENODATA);
	assert_int_equal(try_hints(more_msg_ep), -FI_ENODATA);
	assert_int_equal(try_hints(more_caps), -FI_ENODATA);
	assert_int_equal(try_hints(more_mr), -FI_ENODATA);
	assert_int_equal(try_hints(less_mr), -FI_ENODATA);
	assert_int_equal(try_hints(more_rma_iov), -FI_ENODATA);
}

/* rule wait: efa CQs have no wait object */
static void test_wait(void **state)
{
	struct env *e = env_new(state);
	struct fi_cq_attr a = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD };
	struct fid_cq *cq = NULL;
	int r1, r2;

	env_open(e, 0, 0);
	r1 = fi_cq_open(e->domain, &a, &cq, NULL);
	if (!r1)
		fi_close(&cq->fid);
	a.wait_obj = FI_WAIT_UNSPEC;
	r2 = fi_cq_open(e->domain, &a, &cq, NULL);
	if (!r2)
		fi_close(&cq->fid);
	assert_int_equal(r1, -FI_ENOSYS);
	assert_int_equal(r2, -FI_ENOSYS);
}

/* rule mr_local (not efa's: FABSIM_ON=mr_local): no descriptor -> EINVAL */
static void test_mr_local(void **state)
{
	struct env *e = env_new(state);
	ssize_t r;
	int rctx, sctx;

	setenv("FABSIM_ON", "mr_local", 1);
	env_open(e, 0, FI_MR_LOCAL);
	assert_true(e->info->domain_attr->mr_mode & FI_MR_LOCAL);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 64, NULL,
					 e->addr[0], &rctx)), -FI_EINVAL);
	r = POST(e, fi_send(e->ep[0], e->buf[0], 64, NULL, e->addr[1], &sctx));
	assert_int_equal(r, -FI_EINVAL);
}

/* rule inject: above inject_size -> EINVAL (rxr_msg_inject()) */
static void test_inject(void **state)
{
	struct env *e = env_new(state);
	int rctx;

	env_open(e, 0, 0);
	/* at the limit it works (beyond the core's 1256-byte inject) */
	memset(e->buf[0], 0x5a, EFA_INJECT);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], BUFSZ, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	assert_int_equal(POST(e, fi_inject(e->ep[0], e->buf[0], EFA_INJECT,
					   e->addr[1])), 0);
	assert_true(wait_ctx(e, 1, &rctx));
	assert_int_equal((unsigned char)e->buf[1][EFA_INJECT - 1], 0x5a);

	assert_int_equal(POST(e, fi_inject(e->ep[0], e->buf[0], EFA_INJECT + 1,
					   e->addr[1])), -FI_EINVAL);
	assert_int_equal(POST(e, fi_tinject(e->ep[0], e->buf[0], EFA_INJECT + 1,
					    e->addr[1], 7)), -FI_EINVAL);
	assert_int_equal(POST(e, fi_injectdata(e->ep[0], e->buf[0], EFA_INJECT + 1,
					       1, e->addr[1])), -FI_EINVAL);
}

/* rule msg_size: efa 1.17 has UINT64_MAX; FABSIM_MAX_MSG_SIZE sets a limit */
static void test_msg_size(void **state)
{
	struct env *e = env_new(state);
	int rctx, sctx;

	setenv("FABSIM_MAX_MSG_SIZE", "65536", 1);
	env_open(e, 0, 0);
	assert_int_equal(e->info->ep_attr->max_msg_size, 65536);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 65536, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	assert_int_equal(POST(e, fi_send(e->ep[0], e->buf[0], 65537, NULL,
					 e->addr[1], &sctx)), -FI_EMSGSIZE);
}

/* rule cq_data: data wider than cq_data_size (FABSIM_CQ_DATA_SIZE=4) */
static void test_cq_data(void **state)
{
	struct env *e = env_new(state);
	int rctx, sctx, r2, s2;

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
	static char rctx[64], sctx[64];
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
	struct fid_mr *mr;
	int wctx, sctx, rctx;
	uint64_t end;
	bool early;

	env_open(e, 0, 0);
	assert_int_equal(fi_mr_reg(e->domain, e->buf[1], BUFSZ,
				   FI_REMOTE_WRITE | FI_RECV, 0, 0, 0, &mr, NULL), 0);
	memset(e->buf[0], 0xab, 4096);
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1] + 8192, 64, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	assert_int_equal(POST(e, fi_write(e->ep[0], e->buf[0], 4096, NULL,
					  e->addr[1], (uint64_t)(uintptr_t)e->buf[1],
					  fi_mr_key(mr), &wctx)), 0);
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
	static char rctx[512], sctx[512];
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
	int rctx, sctx;
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

/* rule ctx (not efa's: FABSIM_ON=ctx): the context is the provider's while
 * the operation is in flight */
static void test_ctx(void **state)
{
	struct env *e = env_new(state);
	struct fi_context rctx, sctx;
	bool scribbled;

	setenv("FABSIM_ON", "ctx", 1);
	env_open(e, FI_CONTEXT, 0);
	memset(&rctx, 0, sizeof(rctx));
	assert_int_equal(POST(e, fi_recv(e->ep[1], e->buf[1], 64, NULL,
					 FI_ADDR_UNSPEC, &rctx)), 0);
	scribbled = rctx.internal[0] != NULL;
	assert_int_equal(POST(e, fi_send(e->ep[0], e->buf[0], 8, NULL, e->addr[1],
					 &sctx)), 0);
	assert_true(wait_ctx(e, 1, &rctx));
	assert_true(wait_ctx(e, 0, &sctx));
	assert_true(scribbled);
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
	};

	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests_name("fabsim_rules", tests, NULL, NULL);
}
