/* The ia_params parser (ia_params.h). */
#include "ia_params.h"
#include "param.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cfg_error(struct dfi_config *c, enum dfi_cfg_err err, const char *bad,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void cfg_error(struct dfi_config *c, enum dfi_cfg_err err, const char *bad,
		      const char *fmt, ...)
{
	va_list ap;

	if (c->error[0])
		return;		/* the first problem is the one to report */
	c->err = err;
	snprintf(c->bad, sizeof(c->bad), "%s", bad ? bad : "");
	va_start(ap, fmt);
	vsnprintf(c->error, sizeof(c->error), fmt, ap);
	va_end(ap);
}

static bool parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (!isdigit((unsigned char)*s))
		return false;
	v = strtoul(s, &end, 0);
	if (*end || v > max)
		return false;
	*out = v;
	return true;
}

void dfi_ia_params_parse(const char *params, struct dfi_config *c)
{
	char buf[512], *save = NULL, *tok;
	int n = 0;

	memset(c, 0, sizeof(*c));
	/* DAPL_OFI_MTU (or OFA's DAPL_IB_MTU), which mtu= overrides */
	c->mtu = (unsigned)dfi_param_int(DFI_P_MTU);
	if (c->mtu < 256 || c->mtu > 1u << 30)
		c->mtu = 2048;
	c->atomics = true;
	if (!params || strlen(params) >= sizeof(buf)) {
		cfg_error(c, DFI_CFG_TOO_LONG, NULL, "ia_params missing or too long");
		return;
	}
	strcpy(buf, params);
	for (tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save), n++) {
		char *eq = strchr(tok, '=');
		unsigned long v;

		if (n == 0) {
			if (eq || strlen(tok) >= sizeof(c->prov_name))
				cfg_error(c, DFI_CFG_PROVIDER, tok,
					  "first word '%s' is not a libfabric provider name", tok);
			else
				strcpy(c->prov_name, tok);
			continue;
		}
		if (n == 1 && !eq) {
			if (strlen(tok) >= sizeof(c->where))
				cfg_error(c, DFI_CFG_ADDRESS, tok, "address '%s' too long", tok);
			else
				strcpy(c->where, tok);
			continue;
		}
		if (!eq) {
			cfg_error(c, DFI_CFG_WORD, tok,
				  "unexpected word '%s' (options are key=value)", tok);
			continue;
		}
		*eq = '\0';
		if (strcmp(tok, "mtu") == 0 && parse_uint(eq + 1, 1u << 30, &v) && v >= 256)
			c->mtu = (unsigned)v;
		else if (strcmp(tok, "rdma_read") == 0 && parse_uint(eq + 1, 1, &v))
			c->rdma_read = v != 0;
		else if (strcmp(tok, "atomics") == 0 && parse_uint(eq + 1, 1, &v))
			c->atomics = v != 0;
		else if (strcmp(tok, "domain") == 0 && strlen(eq + 1) < sizeof(c->domain))
			strcpy(c->domain, eq + 1);
		else if (strcmp(tok, "ext") == 0 &&
			 (strcmp(eq + 1, "ib") == 0 || strcmp(eq + 1, "ofi") == 0))
			c->ext_ofi = eq[1] == 'o';
		else if (strcmp(tok, "ep") == 0 &&
			 (strcmp(eq + 1, "msg") == 0 || strcmp(eq + 1, "rdm") == 0))
			c->ep = eq[1] == 'm' ? DFI_CFG_EP_MSG : DFI_CFG_EP_RDM;
		else if (strcmp(tok, "mtu") == 0 || strcmp(tok, "rdma_read") == 0 ||
			 strcmp(tok, "domain") == 0 || strcmp(tok, "ext") == 0 ||
			 strcmp(tok, "ep") == 0 || strcmp(tok, "atomics") == 0)
			cfg_error(c, DFI_CFG_VALUE, tok, "bad value '%s' for %s", eq + 1, tok);
		else
			cfg_error(c, DFI_CFG_KEY, tok,
				  "unknown option '%s' (known: mtu, rdma_read, domain, ext, ep, atomics)",
				  tok);
	}
	if (!c->prov_name[0] || !c->where[0])
		cfg_error(c, DFI_CFG_SHAPE, NULL,
			  "expected \"<libfabric provider> <netdev|IPv4 address|host name> "
			  "[key=value ...]\", for example \"tcp lo\"");
}
