/* The DAT face of the CNO; the core is src/event/cno_core.c. */
#include "dfi.h"

static struct dfi_cno_obj *cno_new(struct dfi_ia *ia, const DAT_OS_WAIT_PROXY_AGENT *agent,
				   bool fd_mode, DAT_RETURN *rc)
{
	struct dfi_cno_obj *c;
	bool full;

	pthread_mutex_lock(&ia->lock);
	full = ia->n_cno >= DFI_MAX_CNOS;
	if (!full)
		ia->n_cno++;
	pthread_mutex_unlock(&ia->lock);
	if (full) {
		*rc = DFI_REJECT(DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY),
				 "IA already has %d CNOs", DFI_MAX_CNOS);
		return NULL;
	}
	c = dfi_obj_new(ia, DFI_T_CNO, sizeof(*c));
	if (!c || dfi_cno_init(&c->core, c, agent, fd_mode) != 0) {
		if (c)
			dfi_obj_retire(c);
		pthread_mutex_lock(&ia->lock);
		ia->n_cno--;
		pthread_mutex_unlock(&ia->lock);
		*rc = DFI_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		return NULL;
	}
	*rc = DAT_SUCCESS;
	return c;
}

DAT_RETURN dfi_cno_create(DAT_IA_HANDLE h, DAT_OS_WAIT_PROXY_AGENT agent, DAT_CNO_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_cno_obj *c;
	DAT_RETURN rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "CNO handle pointer is NULL");
	c = cno_new(ia, &agent, false, &rc);
	if (c)
		*out = c;
	return rc;
}

DAT_RETURN dfi_cno_fd_create(DAT_IA_HANDLE h, DAT_FD *fd, DAT_CNO_HANDLE *out)
{
	struct dfi_ia *ia = dfi_obj_get(h, DFI_T_IA);
	struct dfi_cno_obj *c;
	DAT_RETURN rc;

	if (!ia)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA),
				  "%p is not an IA handle", (void *)h);
	if (!fd)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "fd pointer is NULL");
	if (!out)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "CNO handle pointer is NULL");
	c = cno_new(ia, NULL, true, &rc);
	if (c) {
		*fd = c->core.fd;
		*out = c;
	}
	return rc;
}

#define CNO_OR_REJECT(c, h) do {						\
		(c) = dfi_obj_get(h, DFI_T_CNO);				\
		if (!(c))							\
			return DFI_REJECT(DFI_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO), \
					  "%p is not a CNO handle", (void *)(h)); \
	} while (0)

DAT_RETURN dfi_cno_modify_agent(DAT_CNO_HANDLE h, DAT_OS_WAIT_PROXY_AGENT agent)
{
	struct dfi_cno_obj *c;

	CNO_OR_REJECT(c, h);
	dfi_cno_set_agent(&c->core, &agent);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_cno_query(DAT_CNO_HANDLE h, DAT_CNO_PARAM_MASK mask, DAT_CNO_PARAM *p)
{
	struct dfi_cno_obj *c;
	DAT_OS_WAIT_PROXY_AGENT agent;

	CNO_OR_REJECT(c, h);
	/* The header's mask is inconsistent (PROXY 0x3 overlaps the other two
	 * bits, ALL is 0x4): accept any combination of the three low bits. */
	if (mask == 0 || (mask & ~7u))
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "CNO param mask 0x%x is not a DAT_CNO_PARAM_MASK", (unsigned)mask);
	if (!p)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "CNO param pointer is NULL");
	p->ia_handle = c->hdr.ia;
	if (c->core.fd_mode) {
		p->proxy_type = DAT_PROXY_TYPE_FD;
		p->proxy.fd = c->core.fd;
		return DAT_SUCCESS;
	}
	dfi_cno_get_agent(&c->core, &agent);
	p->proxy_type = agent.proxy_agent_func ? DAT_PROXY_TYPE_AGENT : DAT_PROXY_TYPE_NONE;
	p->proxy.agent = agent;
	return DAT_SUCCESS;
}

static void cno_release(struct dfi_cno_obj *c)
{
	struct dfi_ia *ia = c->hdr.ia;

	dfi_cno_fini(&c->core);
	pthread_mutex_lock(&ia->lock);
	ia->n_cno--;
	pthread_mutex_unlock(&ia->lock);
	dfi_obj_retire(c);
}

DAT_RETURN dfi_cno_free(DAT_CNO_HANDLE h)
{
	struct dfi_cno_obj *c;
	DAT_RETURN rc;

	CNO_OR_REJECT(c, h);
	rc = dfi_cno_free_check(&c->core);
	if (rc != DAT_SUCCESS)
		return rc;
	cno_release(c);
	return DAT_SUCCESS;
}

DAT_RETURN dfi_cno_wait_api(DAT_CNO_HANDLE h, DAT_TIMEOUT timeout, DAT_EVD_HANDLE *evd)
{
	struct dfi_cno_obj *c;

	CNO_OR_REJECT(c, h);
	if (!evd)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3),
				  "EVD handle pointer is NULL");
	return dfi_cno_wait(&c->core, timeout, evd);
}

DAT_RETURN dfi_cno_trigger_api(DAT_CNO_HANDLE h, DAT_EVD_HANDLE *evd)
{
	struct dfi_cno_obj *c;

	CNO_OR_REJECT(c, h);
	if (!evd)
		return DFI_REJECT(DFI_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2),
				  "EVD handle pointer is NULL");
	return dfi_cno_consume(&c->core, evd);
}

void dfi_cno_destroy(struct dfi_cno_obj *c)
{
	if (!dfi_cno_kill(&c->core)) {
		/* as dfi_evd_destroy: its waiter is this thread */
		dfi_warn(DFI_SS_CNO, "CNO %p: closed from a signal handler on top of its own "
			 "dat_cno_wait: left allocated", (void *)c);
		dfi_obj_unlink(c);
		return;
	}
	cno_release(c);
}
