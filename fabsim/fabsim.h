/*
 * fabsim: a libfabric DL provider that simulates a hardware provider's
 * published attributes and behaviour over the core provider udp;ofi_rxd.
 * One profile per built library (fabsim/profile_<name>.c linked in); see
 * fabsim/README.md for the rule tables and their sources.
 */
#ifndef FABSIM_H
#define FABSIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#define FABSIM_CORE_PROV	"udp;ofi_rxd"
#define FABSIM_VERSION		FI_VERSION(0, 1)
#define FABSIM_MAX_IOV		8
#define FABSIM_MAX_HELD		4	/* comp_order: completions held at once */
#define FABSIM_HOLD_READS	3	/* comp_order: reads a completion may be held */
#define FABSIM_SAW_PROGRESS	8	/* saw: progress calls a write is delayed */
#define FABSIM_SAW_USEC		2000	/* saw: and at least this long */

/* The rules; each can be switched off with FABSIM_OFF=name,... */
enum fabsim_rule {
	FABSIM_RULE_WAIT,
	FABSIM_RULE_MR_LOCAL,
	FABSIM_RULE_INJECT,
	FABSIM_RULE_MSG_SIZE,
	FABSIM_RULE_CQ_DATA,
	FABSIM_RULE_COMP_ORDER,
	FABSIM_RULE_SAW,
	FABSIM_RULE_EAGAIN,
	FABSIM_RULE_MANUAL,
	FABSIM_RULE_CTX,
	FABSIM_RULE_MR_ENDPOINT,
	FABSIM_RULE_OFFSET,
	FABSIM_RULE_COUNT
};

#define FABSIM_BIT(r)	(1u << (r))

/* what a CQ does with a wait object */
enum fabsim_wait_style {
	FABSIM_WAIT_REFUSED,	/* cq_open fails with wait_err (efa) */
	FABSIM_WAIT_IGNORED,	/* cq_open ignores it, no sread, no fd (opx) */
	FABSIM_WAIT_UNSIMULATED,/* the provider has fds; we give none: refused */
};

/* one fi_info variant of a profile (psm3: tag64 and tag60) */
struct fabsim_variant {
	size_t cq_data_size;
	uint64_t mem_tag_format;
};

struct fabsim_profile {
	const char *name;		/* "efa" */
	const char *prov_name;		/* "sim_efa" */
	uint64_t caps, tx_caps, rx_caps, domain_caps;
	uint64_t mode;			/* required of the consumer */
	uint64_t tx_op_flags, rx_op_flags;
	uint64_t msg_order, comp_order;
	/* mr_mode granted for the hints' mr_mode and caps, -1: refused */
	int (*mr_grant)(int hint_mode, uint64_t caps);
	/* what fi_domain makes of the info's mr_mode, which the consumer may
	 * have changed since fi_getinfo (NULL: taken as it is) */
	int (*mr_at_domain)(int info_mode);
	size_t mr_key_size, cq_data_size, inject_size;
	const struct fabsim_variant *variants;	/* in getinfo order */
	size_t n_variants;
	size_t max_msg_size, tx_iov_limit, rx_iov_limit, rma_iov_limit;
	size_t mr_iov_limit;
	enum fi_threading threading;
	enum fi_progress progress, rma_progress;
	bool auto_ok;			/* FI_PROGRESS_AUTO granted when hinted */
	enum fi_av_type av_type;	/* when the hints leave it open */
	uint32_t addr_format;
	size_t addrlen;
	uint32_t protocol, protocol_version;
	uint64_t mem_tag_format;
	enum fabsim_wait_style wait_style;
	int wait_err;			/* cq_open with a wait object */
	int inject_err;			/* inject above inject_size */
	int offset_err;			/* RMA beyond the target MR (offset) */
	int mr_endpoint_err;		/* RMA to an MR not enabled (mr_endpoint) */
	unsigned eagain_one_in;		/* posts refused with EAGAIN, 1 in N */
	unsigned rules;			/* FABSIM_BIT() of rules on by default */
};

/* what the environment made of the profile (read at getinfo/domain open) */
struct fabsim_config {
	unsigned rules;
	uint64_t seed;
	uint64_t mode;
	size_t cq_data_size, max_msg_size;
};

extern struct fi_provider fabsim_prov;
extern const struct fabsim_profile *fabsim_profile;

#define FABSIM_WARN(sub, ...) FI_WARN(&fabsim_prov, sub, __VA_ARGS__)
#define FABSIM_INFO(sub, ...) FI_INFO(&fabsim_prov, sub, __VA_ARGS__)

/* a copy of an injected buffer, freed when the core completes it */
struct fabsim_bounce {
	struct fabsim_bounce *next;
	void *buf;
	void *ctx;		/* the core op's context */
	bool swallow;		/* the completion is ours, not the consumer's */
};

struct fabsim_fabric {
	struct fid_fabric fabric;
	struct fid_fabric *core;
};

struct fabsim_cq;
struct fabsim_ep;

struct fabsim_domain {
	struct fid_domain domain;
	struct fid_domain *core;
	struct fabsim_fabric *fab;
	struct fi_info *core_info;
	struct fabsim_config cfg;
	int mr_mode;			/* as granted to the consumer */
	bool offset;			/* RMA addresses are offsets into the MR */
	pthread_mutex_t lock;
	uint64_t rng_count;
	struct fabsim_bounce *bounces;
	struct fabsim_cq *cqs;
	struct fabsim_ep *eps;
	pthread_t thread;
	bool thread_running, thread_stop;
};

struct fabsim_av {
	struct fid_av av;
	struct fid_av *core;
	struct fabsim_domain *dom;
};

struct fabsim_mr {
	struct fid_mr mr;
	struct fid_mr *core;
	struct fabsim_domain *dom;
	struct fabsim_mr *reg_next;	/* the process registry (mr.c) */
	uint64_t access;
	size_t len;
	struct fabsim_ep *bound;	/* FI_MR_ENDPOINT: fi_mr_bind */
	bool enabled;			/* FI_MR_ENDPOINT: fi_mr_enable */
};

struct fabsim_cqe {
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
	bool is_err;
	struct fi_cq_err_entry err;
	unsigned age;
};

struct fabsim_cq {
	struct fid_cq cq;
	struct fid_cq *core;
	struct fabsim_domain *dom;
	struct fabsim_cq *next;
	enum fi_cq_format format;
	struct fabsim_cqe *q;		/* ring of pulled completions */
	size_t q_cap, q_head, q_len;
	struct fabsim_cqe held[FABSIM_MAX_HELD];
	size_t n_held;
	struct fabsim_cqe err;
	bool err_pending;
};

struct fabsim_wr {			/* a write delayed by the saw rule */
	struct fabsim_wr *next;
	struct iovec iov[FABSIM_MAX_IOV];
	void *desc[FABSIM_MAX_IOV];
	struct fi_rma_iov rma_iov[FABSIM_MAX_IOV];
	struct fi_msg_rma msg;
	uint64_t flags;
	unsigned progress;
	uint64_t t_post;
	struct fabsim_bounce *bounce;
};

struct fabsim_ep {
	struct fid_ep ep;
	struct fid_ep *core;
	struct fabsim_domain *dom;
	struct fabsim_ep *next;
	struct fabsim_cq *tx_cq, *rx_cq;
	struct fabsim_av *av;
	struct fabsim_ep *reg_next;	/* the process registry (mr.c) */
	unsigned char name[16];		/* the core's sockaddr_in, once enabled */
	bool registered;
	uint64_t tx_op_flags, rx_op_flags;
	uint64_t mode;
	size_t core_inject_size;
	struct fabsim_wr *wr_head, *wr_tail;
};

/* profile.c */
const char *fabsim_rule_name(enum fabsim_rule r);
void fabsim_config_load(struct fabsim_config *cfg);
bool fabsim_rule_on(const struct fabsim_config *cfg, enum fabsim_rule r);
uint64_t fabsim_now_usec(void);
uint64_t fabsim_rng(struct fabsim_domain *dom);

int fabsim_core_mr_mode(int granted);

/* addr.c helpers (in init.c) */
int fabsim_addr_to_core(const void *addr, size_t len, void *out, size_t *outlen);
int fabsim_addr_from_core(const void *addr, size_t len, void *out, size_t *outlen);
int fabsim_core_hints(const struct fi_info *hints, struct fi_info **core_hints_p);

/* domain.c */
int fabsim_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		       struct fid_domain **dom, void *context);

/* mr.c */
extern struct fi_ops_mr fabsim_mr_ops;
void fabsim_ep_register(struct fabsim_ep *ep);
void fabsim_ep_unregister(struct fabsim_ep *ep);
int fabsim_rma_target_check(struct fabsim_ep *ep, fi_addr_t dest,
			    const struct fi_rma_iov *rma, size_t count,
			    uint64_t access);

/* cq.c */
int fabsim_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		   struct fid_cq **cq_p, void *context);
void fabsim_cq_progress(struct fabsim_cq *cq);
int fabsim_cq_push_err(struct fabsim_cq *cq, void *ctx, uint64_t flags,
		       int err);

/* ep.c */
#define FABSIM_CORE_TX_FLAGS	(FI_COMPLETION | FI_REMOTE_CQ_DATA | FI_INJECT)
int fabsim_ep_open(struct fid_domain *domain, struct fi_info *info,
		   struct fid_ep **ep_p, void *context);
bool fabsim_bounce_take(struct fabsim_domain *dom, void *ctx);
size_t fabsim_iov_total(const struct iovec *iov, size_t count);
void fabsim_xlate_desc(void **desc, size_t count, void **out);
struct fabsim_bounce *fabsim_bounce_new(struct fabsim_domain *dom,
					const struct iovec *iov, size_t count,
					void *ctx);
void fabsim_bounce_drop(struct fabsim_domain *dom, struct fabsim_bounce *b);
ssize_t fabsim_check_post(struct fabsim_ep *ep, const struct iovec *iov,
			  void **desc, size_t count, uint64_t flags,
			  uint64_t data, const char *op);
ssize_t fabsim_check_inject(struct fabsim_ep *ep, size_t len, const char *op);
void fabsim_scribble(struct fabsim_ep *ep, void *context);

/* rma.c */
extern struct fi_ops_rma fabsim_rma_ops;
void fabsim_ep_progress(struct fabsim_ep *ep);

/* stubs */
int fabsim_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int fabsim_no_control(struct fid *fid, int command, void *arg);
int fabsim_no_ops_open(struct fid *fid, const char *name, uint64_t flags,
		       void **ops, void *context);

#endif /* FABSIM_H */
