/* Inside the fabric layer only. */
#ifndef DFI_FABRIC_INT_H
#define DFI_FABRIC_INT_H

#include "fabric.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

struct dfi_fabric {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct dfi_fabric_limits lim;
};

struct dfi_mr {
	struct fid_mr *mr;
};

struct dfi_cq {
	struct fid_cq *cq;
	struct fid_fabric *fabric;	/* for fi_trywait */
	int fd;
	/* dfi_cq_take's read-ahead: ahead[pos..n) were read from the CQ and
	 * not handed out yet (the reader's lock, as every read of the CQ) */
	int ahead_pos, ahead_n;
	struct dfi_comp ahead[DFI_CQ_BATCH];
};

#endif
