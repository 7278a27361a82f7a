/*
 * daplofi-info: the first thing to run when a DAT program cannot open a
 * dapl-ofi IA.  For each entry of a dat.conf: does it open through the stock
 * registry (dat_ia_open, as any DAT program) and, for dapl-ofi's entries,
 * carry a connection to itself and a message over it (the self-test); if
 * not, why and how to fix it; which libfabric provider, endpoint type,
 * interface, address, fabric and domain it uses.  Also the configuration
 * table with the values in force.
 *
 *   daplofi-info [-a] [-c] [-f dat.conf] [-q] [-v]      (man/daplofi-info.1)
 *   daplofi-info --generate [--lib PATH] [--interface LIST] [--fabric LIST]
 *
 * The diagnosis reuses the library's own pieces: its ia_params parser
 * (util/ia_params.c), its address resolution and its fi_getinfo
 * (fabric/fabric.c, dfi_fabric_probe), so that it finds what dat_ia_open
 * would.  The open and the self-test (info_selftest.c) go through libdat2
 * only.
 */
#include "fabric/fabric.h"
#include "info_selftest.h"
#include "util/ia_params.h"
#include "util/param.h"

#include <arpa/inet.h>
#include <dat2/udat.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WIDTH		100	/* output fits a terminal this wide */
#define MAX_ENTRIES	4096	/* dat.conf entries read, at most */
#define NFIELDS		8	/* fields of a dat.conf entry */

enum state {
	S_UNTRIED,		/* -q, or another provider's entry without -a */
	S_OPENS,
	S_FAILS,		/* dat_ia_open or the self-test failed */
	S_IGNORED,		/* the registry never registers it */
};

static const char *const state_names[] = {
	[S_UNTRIED] = "-", [S_OPENS] = "opens", [S_FAILS] = "FAILS", [S_IGNORED] = "ignored",
};

struct entry {
	int line;
	char *text;			/* the line, tokenized in place */
	char *f[NFIELDS];		/* its fields, quotes removed */
	int nf;
	bool ours;			/* the library is dapl-ofi's */
	enum state state;
	char reason[1024], fix[1536];
	/* what it would use (dapl-ofi entries) */
	struct dfi_config cfg;
	char iface[128], addr[INET_ADDRSTRLEN];
	struct dfi_fabric_limits lim;
	bool have_lim;
	char *detail;			/* -v: attributes, captured log lines */
	size_t detail_len;
};

static bool verbose;
static char interfaces[512];		/* "lo 127.0.0.1, eth0 10.0.2.15" */
static char providers[256];		/* libfabric providers dapl-ofi can use */
static char registry_said[4096];	/* libdat2's output when it loaded */
static int crashed;			/* the signal that killed the child */
static bool is_child;			/* run_child's second run of the tool */

/* ------------------------------------------------------------- printing */

/* Print text folded at WIDTH: the first line after `first` columns already
 * used, the others indented by `indent`. */
static void fold(int first, int indent, const char *text)
{
	int col = first;
	const char *p = text;

	while (*p) {
		const char *sp = strchr(p, ' ');
		int len = sp ? (int)(sp - p) : (int)strlen(p);

		if (col > indent && col + 1 + len > WIDTH) {
			printf("\n%*s", indent, "");
			col = indent;
		} else if (p != text) {
			putchar(' ');
			col++;
		}
		printf("%.*s", len, p);
		col += len;
		p += len;
		while (*p == ' ')
			p++;
	}
	putchar('\n');
}

static void print_params(void)
{
	int w = 0;

	for (int i = 0; i < DFI_P_COUNT; i++)
		if ((int)strlen(dfi_params[i].name) > w)
			w = (int)strlen(dfi_params[i].name);
	printf("Configuration (environment variables; '*' = set in the environment)\n");
	for (int i = 0; i < DFI_P_COUNT; i++) {
		const struct dfi_param *p = &dfi_params[i];

		printf("  %c %-*s = %-10s (default %s)\n      ", dfi_param_set(i) ? '*' : ' ',
		       w, p->name, dfi_param_str(i), *p->def ? p->def : "\"\"");
		fold(6, 6, p->help);
	}
}

/* One line: the variables set, so that a report shows the setting. */
static void print_env_line(void)
{
	char buf[1024] = "";
	size_t used = 0;

	for (int i = 0; i < DFI_P_COUNT && used < sizeof(buf); i++)
		if (dfi_param_set(i))
			used += snprintf(buf + used, sizeof(buf) - used, "%s%s=%s",
					 used ? ", " : "", dfi_params[i].name, dfi_param_str(i));
	printf("Environment: ");
	fold(13, 6, used ? buf : "no dapl-ofi variable set (daplofi-info -c lists them)");
}

static void detail(struct entry *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append to e's -v details. */
static void detail(struct entry *e, const char *fmt, ...)
{
	va_list ap;
	int n;
	char *d;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !(d = realloc(e->detail, e->detail_len + (size_t)n + 1)))
		return;
	e->detail = d;
	va_start(ap, fmt);
	vsnprintf(d + e->detail_len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	e->detail_len += (size_t)n;
}

/* ------------------------------------------------------------- dat.conf */

/* Split a dat.conf line as libdat2 does (udat_sr_parser.c): blanks
 * separate tokens, '#' at the start of one ends the line, a token in double
 * quotes may hold blanks and \" or \\, and loses its quotes.  Returns the
 * number of tokens (the first NFIELDS stored), or -1 for an open quote. */
static int tokenize(char *line, char **tok)
{
	char *p = line;
	int n = 0;

	for (;;) {
		char *out;

		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p || *p == '\n' || *p == '#')
			return n;
		out = p;
		if (n < NFIELDS)
			tok[n] = out;
		n++;
		if (*p == '"') {
			for (p++; *p != '"'; p++) {
				if (!*p || *p == '\n')
					return -1;
				if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
					p++;
				*out++ = *p;
			}
			p++;		/* the closing quote */
		} else {
			while (*p && *p != ' ' && *p != '\t' && *p != '\n')
				*out++ = *p++;
		}
		if (*p == ' ' || *p == '\t' || *p == '\n')
			p++;		/* the blank out may be about to overwrite */
		*out = '\0';
	}
}

static bool is_ours(const char *lib)
{
	const char *base = strrchr(lib, '/');

	return strncmp(base ? base + 1 : lib, "libdaplofi", 10) == 0;
}

/* The interfaces of this host with their IPv4 addresses, for the fixes. */
static void list_interfaces(void)
{
	struct ifaddrs *ifa, *i, *j;
	size_t used = 0;

	if (getifaddrs(&ifa) != 0) {
		snprintf(interfaces, sizeof(interfaces), "(getifaddrs: %s)", strerror(errno));
		return;
	}
	for (i = ifa; i && used < sizeof(interfaces); i = i->ifa_next) {
		char a[INET_ADDRSTRLEN] = "";
		bool v4 = i->ifa_addr && i->ifa_addr->sa_family == AF_INET, listed = false;

		for (j = ifa; j != i; j = j->ifa_next)	/* once per name: with its IPv4 */
			if (strcmp(j->ifa_name, i->ifa_name) == 0 &&
			    (v4 ? j->ifa_addr && j->ifa_addr->sa_family == AF_INET : true))
				listed = true;
		if (!v4)	/* named without an address if it has no IPv4 at all */
			for (j = ifa; j; j = j->ifa_next)
				if (strcmp(j->ifa_name, i->ifa_name) == 0 && j->ifa_addr &&
				    j->ifa_addr->sa_family == AF_INET)
					listed = true;
		if (listed)
			continue;
		if (v4)
			inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr,
				  a, sizeof(a));
		used += snprintf(interfaces + used, sizeof(interfaces) - used, "%s%s %s",
				 used ? ", " : "", i->ifa_name, v4 ? a : "(no IPv4)");
	}
	freeifaddrs(ifa);
}

/* The interface that holds addr, or "" (a host name or address elsewhere). */
static void iface_of(const struct sockaddr_in *addr, char *name, size_t len)
{
	struct ifaddrs *ifa, *i;

	name[0] = '\0';
	if (getifaddrs(&ifa) != 0)
		return;
	for (i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == addr->sin_addr.s_addr) {
			snprintf(name, len, "%s", i->ifa_name);
			break;
		}
	freeifaddrs(ifa);
}

#define problem(e, ...) snprintf((e)->reason, sizeof((e)->reason), __VA_ARGS__)
#define remedy(e, ...) snprintf((e)->fix, sizeof((e)->fix), __VA_ARGS__)

static const char example[] =
	"<ia_name> u2.0 nonthreadsafe default libdaplofi.so.2 dapl.2.0 \"tcp lo\" \"\"";

/* The fields the registry checks before it would load the library; false
 * (with reason and fix) if it skips the entry or no open can match it. */
static bool check_fields(struct entry *e)
{
	unsigned maj, min;
	char kind, c;

	if (e->nf < 0) {
		e->state = S_IGNORED;
		problem(e, "a quote is not closed: the registry skips this line, and libdat2 "
			"2.1.10 may crash on the lines after it");
		remedy(e, "close it; a whole entry reads %s", example);
		return false;
	}
	if (e->nf != NFIELDS) {
		e->state = S_IGNORED;
		problem(e, "%d fields where the registry needs 8: it skips this line", e->nf);
		remedy(e, "write all 8, ia_params and platform_params in quotes: %s", example);
		return false;
	}
	if (strlen(e->f[0]) >= DAT_NAME_MAX_LENGTH) {
		e->state = S_IGNORED;
		problem(e, "IA name longer than %d characters", DAT_NAME_MAX_LENGTH - 1);
		remedy(e, "shorten it");
		return false;
	}
	if (sscanf(e->f[1], "%c%u.%u%c", &kind, &maj, &min, &c) != 3 ||
	    (kind != 'u' && kind != 'k')) {
		e->state = S_IGNORED;
		problem(e, "API version '%s' is not u<major>.<minor>: the registry skips this line",
			e->f[1]);
		remedy(e, "write u2.0");
		return false;
	}
	if (kind == 'k') {
		e->state = S_IGNORED;
		problem(e, "API version '%s' is a kernel (kDAPL) entry, which uDAPL programs "
			"never see", e->f[1]);
		remedy(e, "write u2.0");
		return false;
	}
	if (maj != DAT_VERSION_MAJOR || min != DAT_VERSION_MINOR) {
		problem(e, "DAT version %u.%u: DAT programs ask the registry for %d.%d", maj, min,
			DAT_VERSION_MAJOR, DAT_VERSION_MINOR);
		remedy(e, "write u2.0");
		return false;
	}
	if (strcmp(e->f[2], "threadsafe") == 0) {
		problem(e, "'threadsafe': libdat2 looks every IA up as nonthreadsafe, so no "
			"dat_ia_open finds it");
		remedy(e, "write nonthreadsafe (only a lookup key: dapl-ofi is thread-safe "
		       "either way)");
		return false;
	}
	if (strcmp(e->f[2], "nonthreadsafe") != 0) {
		e->state = S_IGNORED;
		problem(e, "thread safety '%s' is neither nonthreadsafe nor threadsafe: the "
			"registry skips this line", e->f[2]);
		remedy(e, "write nonthreadsafe");
		return false;
	}
	if (strcmp(e->f[3], "nondefault") == 0) {
		e->state = S_IGNORED;
		problem(e, "'nondefault': the registry never registers such an entry");
		remedy(e, "write default");
		return false;
	}
	if (strcmp(e->f[3], "default") != 0) {
		e->state = S_IGNORED;
		problem(e, "'%s' is neither default nor nondefault: the registry skips this line",
			e->f[3]);
		remedy(e, "write default");
		return false;
	}
	if (sscanf(e->f[5], "%*[^.].%u.%u%c", &maj, &min, &c) != 2) {
		e->state = S_IGNORED;
		problem(e, "provider version '%s' is not <name>.<major>.<minor>: the registry "
			"skips this line", e->f[5]);
		remedy(e, "write dapl.2.0");
		return false;
	}
	return true;
}

/* Does the library load as the registry loads it (RTLD_NOW|RTLD_GLOBAL)? */
static bool check_library(struct entry *e)
{
	const char *lib = e->f[4];
	void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
	bool init;

	if (!h) {
		const char *err = dlerror();

		problem(e, "library does not load: %s", err ? err : lib);
		if (!e->ours)
			remedy(e, "install that provider, or remove the entry");
		else if (strchr(lib, '/'))
			remedy(e, "correct the path: make builds build/libdaplofi.so.2, make "
			       "install puts it in $PREFIX/lib (/usr/local/lib)");
		else
			remedy(e, "install dapl-ofi (make install) and run ldconfig, or give the "
			       "library's absolute path");
		return false;
	}
	init = dlsym(h, "dat_provider_init") != NULL;
	dlclose(h);
	if (!init) {
		problem(e, "%s is not a DAT provider (no dat_provider_init)", lib);
		remedy(e, "name libdaplofi.so.2 (or its path)");
		return false;
	}
	return true;
}

/* What dapl-ofi's dat_ia_open does with the ia_params, step by step
 * (dat/provider.c, dat/ia.c, fabric/fabric.c), without opening anything:
 * fills the backend columns; false with reason and fix at the first step
 * that fails. */
static bool check_params(struct entry *e)
{
	struct dfi_config *c = &e->cfg;
	const char *p = e->f[6];
	struct sockaddr_in sa;
	char err[384];
	bool ok;
	int r;

	dfi_ia_params_parse(p, c);
	switch (c->err) {
	case DFI_CFG_OK:
		break;
	case DFI_CFG_TOO_LONG:
		problem(e, "ia_params longer than 511 characters");
		remedy(e, "shorten them");
		break;
	case DFI_CFG_PROVIDER:
		problem(e, "ia_params \"%s\": '%s' is not a libfabric provider name", p, c->bad);
		remedy(e, "start with the provider (here: %s), then the interface: \"tcp lo\"",
		       providers);
		break;
	case DFI_CFG_ADDRESS:
		problem(e, "ia_params \"%s\": address '%.40s...' too long", p, c->bad);
		remedy(e, "name an interface, IPv4 address or host name (here: %s)", interfaces);
		break;
	case DFI_CFG_SHAPE:
		problem(e, "ia_params \"%s\" name %s", p, c->prov_name[0] ?
			"no interface, IPv4 address or host name" : "nothing");
		remedy(e, "write \"<libfabric provider> <interface|IPv4 address|host name>\", "
		       "for example \"tcp lo\"; interfaces here: %s", interfaces);
		break;
	case DFI_CFG_WORD:
		problem(e, "ia_params \"%s\": unexpected word '%s'", p, c->bad);
		remedy(e, "after the provider and the interface come only key=value options "
		       "(mtu, rdma_read, domain, ext, ep, atomics)");
		break;
	case DFI_CFG_VALUE:
		problem(e, "ia_params \"%s\": %s", p, c->error);
		remedy(e, "%s", strcmp(c->bad, "mtu") == 0 ? "mtu=<bytes>, 256 or more" :
		       strcmp(c->bad, "rdma_read") == 0 ? "rdma_read=0 or rdma_read=1" :
		       strcmp(c->bad, "ext") == 0 ? "ext=ib or ext=ofi" :
		       strcmp(c->bad, "ep") == 0 ? "ep=msg or ep=rdm" :
		       strcmp(c->bad, "atomics") == 0 ? "atomics=0 or atomics=1" :
		       "domain=<libfabric domain name> (fi_info -p <provider> lists them)");
		break;
	case DFI_CFG_KEY:
		problem(e, "ia_params \"%s\": unknown option '%s'", p, c->bad);
		remedy(e, "remove it; the options are mtu=<bytes>, rdma_read=0|1, "
		       "domain=<libfabric domain>, ext=ib|ofi, ep=msg|rdm and atomics=0|1");
		break;
	}
	/* after a bad option, the provider and the address still fill the
	 * columns; the first problem stays the one reported */
	if (!c->prov_name[0] || !c->where[0])
		return false;
	ok = c->err == DFI_CFG_OK;
	r = dfi_resolve_ipv4(c->where, &sa);
	if (r) {
		if (r == -EADDRNOTAVAIL)
			snprintf(e->iface, sizeof(e->iface), "%s", c->where);
		if (!ok)
			return false;
		if (r == -EADDRNOTAVAIL)
			problem(e, "interface '%s' has no IPv4 address", c->where);
		else
			problem(e, "no interface, IPv4 address or host name '%s'", c->where);
		remedy(e, "name one that exists in ia_params: %s", interfaces);
		return false;
	}
	inet_ntop(AF_INET, &sa.sin_addr, e->addr, sizeof(e->addr));
	iface_of(&sa, e->iface, sizeof(e->iface));
	r = dfi_fabric_probe(c->prov_name, &sa, c->domain, dfi_cfg_ep_kind(c), c->atomics, &e->lim,
			     err, sizeof(err));
	e->have_lim = r == 0;
	if (!ok || r == 0)
		return ok;
	if (r == -ENOENT && strncmp(c->prov_name, "sim_", 4) == 0) {
		problem(e, "libfabric has no provider '%s'", c->prov_name);
		remedy(e, "it is one of dapl-ofi's simulated hardware providers (fabsim/): set "
		       "FI_PROVIDER_PATH to the build tree's fabsim directory");
		return false;
	}
	if (r == -ENOENT) {
		problem(e, "libfabric has no provider '%s'", c->prov_name);
		remedy(e, "use one that dapl-ofi serves here: %s (fi_info -l lists every "
		       "provider)", providers);
		return false;
	}
	/* the probe says which endpoint type was looked for, or why the
	 * provider's is not served */
	problem(e, "%s", err);
	remedy(e, "use a provider that dapl-ofi serves (here: %s)%s", providers,
	       c->domain[0] ? ", or drop domain=" : "");
	return false;
}

/* ----------------------------------------------------------- the opening */

/* What the registry and the library print while an open runs (libdat2 on
 * stdout, dapl-ofi's log on stderr) goes to a file, so that the table stays
 * whole; the lines are shown with -v, and as the reason when nothing else
 * explains a failure. */
struct capture {
	FILE *f;
	int out, err;
};

static void capture_begin(struct capture *c)
{
	fflush(stdout);
	fflush(stderr);
	c->f = tmpfile();
	c->out = c->f ? dup(1) : -1;
	c->err = c->f ? dup(2) : -1;
	if (c->out < 0 || c->err < 0)
		return;
	dup2(fileno(c->f), 1);
	dup2(fileno(c->f), 2);
}

static void capture_end(struct capture *c, char *buf, size_t len)
{
	size_t n = 0;

	fflush(stdout);
	fflush(stderr);
	if (c->out >= 0) {
		dup2(c->out, 1);
		close(c->out);
	}
	if (c->err >= 0) {
		dup2(c->err, 2);
		close(c->err);
	}
	if (c->f) {
		rewind(c->f);
		n = fread(buf, 1, len - 1, c->f);
		fclose(c->f);
	}
	buf[n] = '\0';
}

static const char *or_dash(const char *s)
{
	return s && *s ? s : "-";
}

static const char *yes(DAT_BOOLEAN b)
{
	return b ? "yes" : "no";
}

/* -v: what dat_ia_query says of an open IA. */
static void query(struct entry *e, DAT_IA_HANDLE ia)
{
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR p;
	DAT_RETURN rc = dat_ia_query(ia, NULL, DAT_IA_ALL, &a, DAT_PROVIDER_FIELD_ALL, &p);
	char addr[INET_ADDRSTRLEN] = "?";

	if (rc != DAT_SUCCESS) {
		const char *major = "", *minor = "";

		dat_strerror(rc, &major, &minor);
		detail(e, "    dat_ia_query failed: %s %s\n", major, minor);
		return;
	}
	if (a.ia_address_ptr && a.ia_address_ptr->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)a.ia_address_ptr)->sin_addr,
			  addr, sizeof(addr));
	detail(e, "    IA          adapter '%s', vendor %s, address %s, provider version %u.%u "
	       "(hardware), libfabric %u.%u (firmware)\n", a.adapter_name, a.vendor_name, addr,
	       a.hardware_version_major, a.hardware_version_minor, a.firmware_version_major,
	       a.firmware_version_minor);
	detail(e, "                max_eps %d, max_dto_per_ep %d, max_evds %d, max_evd_qlen %d, "
	       "max_iov_segments_per_dto %d\n", a.max_eps, a.max_dto_per_ep, a.max_evds,
	       a.max_evd_qlen, a.max_iov_segments_per_dto);
	detail(e, "                max_lmrs %d, max_lmr_block_size %llu, max_pzs %d, "
	       "max_rmrs %d, max_srqs %d\n", a.max_lmrs, (unsigned long long)a.max_lmr_block_size,
	       a.max_pzs, a.max_rmrs, a.max_srqs);
	detail(e, "                max_message_size %llu, max_rdma_size %llu, max_rdma_read_in/out "
	       "%d/%d, extension 0x%x version %d\n", (unsigned long long)a.max_message_size,
	       (unsigned long long)a.max_rdma_size, a.max_rdma_read_in, a.max_rdma_read_out,
	       (unsigned)a.extension_supported, a.extension_version);
	detail(e, "    provider    %s %u.%u, DAT %u.%u, is_thread_safe %s, max private data %d, "
	       "SRQ %s, buffer alignment %llu\n", p.provider_name, p.provider_version_major,
	       p.provider_version_minor, p.dapl_version_major, p.dapl_version_minor,
	       yes(p.is_thread_safe), p.max_private_data_size, yes(p.srq_supported),
	       (unsigned long long)p.optimal_buffer_alignment);
	for (int i = 0; i < p.num_provider_specific_attr; i++)
		detail(e, "                %s = %s\n", p.provider_specific_attr[i].name,
		       p.provider_specific_attr[i].value);
}

/* ---------------------------------------------------------- the self-test */

/* The captured line that says most about a failure: dapl-ofi's first
 * error line, else its first line, else none (""); log is what was
 * captured from the start of the self-test on. */
static void log_line(const char *log, char *out, size_t len)
{
	const char *pick = NULL;

	for (const char *l = log; *l; ) {
		const char *nl = strchrnul(l, '\n'), *lvl = NULL;

		if (strncmp(l, "dapl-ofi[", 9) == 0)
			lvl = memchr(l, ']', (size_t)(nl - l));
		if (lvl && !pick)
			pick = l;
		if (lvl && strncmp(lvl, "] error ", 8) == 0) {
			pick = l;
			break;
		}
		l = *nl ? nl + 1 : nl;
	}
	snprintf(out, len, "%.*s", pick ? (int)(strchrnul(pick, '\n') - pick) : 0,
		 pick ? pick : "");
}

/* The reason and fix of an entry whose IA opens but fails the self-test. */
static void self_test_problem(struct entry *e, const struct info_selftest *t, const char *log)
{
	const char *major = "", *minor = "";
	char line[400], err[400], fault[128] = "";

	log_line(log, line, sizeof(line));
	if (t->rc != DAT_SUCCESS) {
		dat_strerror(t->rc, &major, &minor);
		snprintf(err, sizeof(err), "%s%s%s%s%s%s", major, *minor ? " " : "", minor,
			 t->what[0] ? " (" : "", t->what, t->what[0] ? ")" : "");
	} else {
		snprintf(err, sizeof(err), "%s", t->what);
	}
	problem(e, "dat_ia_open succeeds, but the self-test fails: %s: %s%s%s", t->call, err,
		line[0] ? ": " : "", line);
	/* a fault switch set on purpose explains it better than the provider */
	for (int i = 0; i < DFI_P_COUNT; i++)
		if (strncmp(dfi_params[i].name, "DAPL_OFI_FAULT_", 15) == 0 && dfi_param_set(i) &&
		    strcmp(dfi_param_str(i), dfi_params[i].def) != 0) {
			snprintf(fault, sizeof(fault), "%s=%s is set, a fault switch for tests: "
				 "unset it; else ", dfi_params[i].name, dfi_param_str(i));
			break;
		}
	remedy(e, "%slibfabric %s cannot carry a DAT connection here: use another provider "
	       "that dapl-ofi serves (here: %s); to see each step, run with "
	       "DAPL_OFI_LOG_LEVEL=debug (and -v), and report it with that output", fault,
	       e->cfg.prov_name, providers);
}

/* dat_ia_open through the registry, as a DAT program does; on an IA that
 * opens, the self-test (t; NULL: none), whose lines start at log + *t_log,
 * then close.  A call that does not return in INFO_WATCHDOG_S ends the
 * process (the watchdog, info_selftest.c). */
static DAT_RETURN try_open(struct entry *e, struct info_selftest *t, char *log, size_t loglen,
			   size_t *t_log)
{
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_IA_HANDLE ia;
	struct capture cap;
	DAT_RETURN rc;
	off_t at;

	capture_begin(&cap);
	info_watchdog_step("dat_ia_open");
	info_watchdog_arm(e->f[0], cap.err >= 0 ? cap.err : 2);
	rc = dat_ia_open(e->f[0], 8, &async, &ia);
	if (rc == DAT_SUCCESS) {
		if (verbose)
			query(e, ia);
		if (t) {
			fflush(stdout);
			at = cap.f ? lseek(fileno(cap.f), 0, SEEK_CUR) : 0;
			*t_log = at > 0 ? (size_t)at : 0;
			info_selftest_run(ia, t);
		}
		info_watchdog_step("dat_ia_close");
		dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	}
	info_watchdog_disarm();
	capture_end(&cap, log, loglen);
	if (t && *t_log > strlen(log))
		*t_log = strlen(log);
	return rc;
}

static void diagnose(struct entry *e, bool try, const struct entry *es, int n)
{
	char log[4096];
	bool fields = check_fields(e);

	for (int i = 0; i < n && fields; i++)
		if (&es[i] != e && es[i].nf == NFIELDS && es[i].line < e->line &&
		    strcmp(es[i].f[0], e->f[0]) == 0 && strcmp(es[i].f[3], "default") == 0) {
			problem(e, "line %d has the same IA name: the registry opens the first "
				"entry whose library loads", es[i].line);
			remedy(e, "give each entry its own IA name");
			fields = false;
			e->state = S_IGNORED;
		}
	if (e->ours && e->nf == NFIELDS) {
		/* the backend columns, even when the entry is broken elsewhere */
		char reason[sizeof(e->reason)], fix[sizeof(e->fix)];

		memcpy(reason, e->reason, sizeof(reason));
		memcpy(fix, e->fix, sizeof(fix));
		if (!check_params(e) && !fields) {
			memcpy(e->reason, reason, sizeof(reason));
			memcpy(e->fix, fix, sizeof(fix));
		}
	}
	if (verbose && e->nf == NFIELDS) {
		detail(e, "    dat.conf    line %d: %s %s %s %s %s %s \"%s\" \"%s\"\n", e->line,
		       e->f[0], e->f[1], e->f[2], e->f[3], e->f[4], e->f[5], e->f[6], e->f[7]);
		if (e->ours && e->cfg.prov_name[0]) {
			char where[300] = "no interface";

			if (e->cfg.where[0])
				snprintf(where, sizeof(where), "'%s' -> %s%s%s", e->cfg.where,
					 e->addr[0] ? e->addr : "(no IPv4 address)",
					 e->addr[0] && e->iface[0] ? " on " : "",
					 e->addr[0] ? e->iface : "");
			detail(e, "    %-12sprovider %s, %s, mtu %u, rdma_read %d, domain %s\n",
			       "ia_params", e->cfg.prov_name, where, e->cfg.mtu, e->cfg.rdma_read,
			       e->cfg.domain[0] ? e->cfg.domain : "(any)");
		}
		if (e->have_lim)
			detail(e, "    libfabric   %s %u.%u (libfabric %u.%u), %s, fabric %s, "
			       "domain %s, iov %zu, rma iov %zu, queues %zu/%zu, max_msg_size %llu, "
			       "mr_key_size %zu\n", e->lim.prov_name, e->lim.prov_major,
			       e->lim.prov_minor, e->lim.fi_major, e->lim.fi_minor,
			       e->lim.rdm ? "FI_EP_RDM" : "FI_EP_MSG", e->lim.fabric_name, e->lim.domain_name, e->lim.iov_limit,
			       e->lim.rma_iov_limit, e->lim.tx_size, e->lim.rx_size,
			       (unsigned long long)e->lim.max_msg_size, e->lim.mr_key_size);
	}
	if (!try || e->state == S_IGNORED)
		return;	/* the registry does not know it: no open can reach it */
	{
		struct info_selftest st;
		size_t st_log = 0;
		DAT_RETURN rc = try_open(e, e->ours ? &st : NULL, log, sizeof(log), &st_log);
		const char *major = "", *minor = "";

		if (verbose && rc == DAT_SUCCESS && e->ours && !st.call[0])
			detail(e, "    self-test   passed in %llu ms: an EP connected to another "
			       "through %s port %llu, %zu bytes sent and received, disconnected, "
			       "all freed\n", (unsigned long long)(st.took + 999) / 1000,
			       st.addr_text, (unsigned long long)st.port, st.msg_len);
		else if (verbose && rc == DAT_SUCCESS && e->ours)
			detail(e, "    self-test   failed at %s, after %llu ms\n", st.call,
			       (unsigned long long)(st.took + 999) / 1000);
		for (char *l = log, *nl; verbose && *l; l = nl ? nl + 1 : l + strlen(l)) {
			nl = strchr(l, '\n');
			detail(e, "    %-12s%.*s\n", l == log ? "log" : "",
			       nl ? (int)(nl - l) : (int)strlen(l), l);
		}
		if (rc == DAT_SUCCESS && (!e->ours || !st.call[0])) {
			e->state = S_OPENS;
			e->reason[0] = e->fix[0] = '\0';
			return;
		}
		e->state = S_FAILS;
		if (rc == DAT_SUCCESS) {
			self_test_problem(e, &st, log + st_log);
			return;
		}
		dat_strerror(rc, &major, &minor);
		/* in the registry's order: its fields, the library, then ours */
		if (!fields || !check_library(e) || e->reason[0])
			return;
		/* nothing we check explains it: what the open printed, if anything */
		if (log[0]) {
			char *nl = strchr(log, '\n');

			if (nl)
				*nl = '\0';
			problem(e, "%s%s%s: %.900s", major, *minor ? " " : "", minor, log);
		} else {
			problem(e, "%s%s%s", major, *minor ? " " : "", minor);
		}
		if (e->ours)
			remedy(e, "run with DAPL_OFI_LOG_LEVEL=debug DAT_DBG_TYPE=0xffff (and -v) "
			       "to see each step");
		else
			remedy(e, "an entry of %s, not of dapl-ofi: check the device its ia_params "
			       "\"%s\" name, or remove the entry", e->f[4], e->f[6]);
	}
}

/* ---------------------------------------------------------------- output */

/* -v lines: a 16-column label, then text folded under it. */
static void print_detail(char *d)
{
	for (char *nl; *d; d = nl + 1) {
		nl = strchr(d, '\n');
		if (!nl)
			break;
		*nl = '\0';
		if (strlen(d) > 16) {
			printf("%.16s", d);
			fold(16, 16, d + 16);
		} else {
			printf("%s\n", d);
		}
	}
}

/* The endpoint type the entry's DAT endpoints map onto: what the probe
 * found, else what ia_params asks for. */
static const char *backend(const struct entry *e)
{
	if (!e->ours)
		return "";
	if (e->have_lim)
		return e->lim.rdm ? "rdm" : "msg";
	return e->cfg.ep == DFI_CFG_EP_RDM ? "rdm" : e->cfg.ep == DFI_CFG_EP_MSG ? "msg" : "";
}

static void print_table(struct entry *es, int n, bool all)
{
	const char *head[] = { "IA", "result", "provider", "backend", "interface", "address",
			       "fabric", "domain" };
	int w[8];

	for (int c = 0; c < 8; c++)
		w[c] = (int)strlen(head[c]);
	for (int i = 0; i < n; i++) {
		struct entry *e = &es[i];
		const char *col[8] = { e->f[0] ? e->f[0] : "?", state_names[e->state],
				       e->cfg.prov_name, backend(e), e->iface,
				       e->addr, e->lim.fabric_name, e->lim.domain_name };

		if (!e->ours && !all)
			continue;
		for (int c = 0; c < 8; c++)
			if ((int)strlen(or_dash(col[c])) > w[c])
				w[c] = (int)strlen(or_dash(col[c]));
	}
	printf("%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %s\n", w[0], head[0], w[1], head[1],
	       w[2], head[2], w[3], head[3], w[4], head[4], w[5], head[5], w[6], head[6], head[7]);
	for (int i = 0; i < n; i++) {
		struct entry *e = &es[i];

		if (!e->ours && !all)
			continue;
		printf("%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %s\n",
		       w[0], e->f[0] ? e->f[0] : "?", w[1], state_names[e->state],
		       w[2], or_dash(e->cfg.prov_name), w[3], or_dash(backend(e)),
		       w[4], or_dash(e->iface), w[5], or_dash(e->addr),
		       w[6], or_dash(e->lim.fabric_name), or_dash(e->lim.domain_name));
	}
}

static void print_problems(struct entry *es, int n, bool all)
{
	bool head = false;

	for (int i = 0; i < n; i++) {
		struct entry *e = &es[i];
		char lead[300];

		if ((!e->ours && !all) || !e->reason[0])
			continue;
		if (!head)
			printf("\nWhy not, and the fix:\n");
		head = true;
		snprintf(lead, sizeof(lead), "  %s (line %d): ", e->f[0] ? e->f[0] : "?", e->line);
		printf("%s", lead);
		fold((int)strlen(lead), 6, e->reason);
		printf("    fix: ");
		fold(9, 9, e->fix);
	}
}

/* Without -a: one line that says which entries belong to other providers. */
static void print_others(struct entry *es, int n)
{
	char buf[2048];
	size_t used = 0;
	int others = 0;

	for (int i = 0; i < n; i++) {
		struct entry *e = &es[i];
		int count = 0;
		bool seen = false;

		if (e->ours || e->nf < 5)
			continue;
		others++;
		for (int j = 0; j < i; j++)
			if (!es[j].ours && es[j].nf >= 5 && strcmp(es[j].f[4], e->f[4]) == 0)
				seen = true;
		if (seen)
			continue;
		for (int j = i; j < n; j++)
			if (!es[j].ours && es[j].nf >= 5 && strcmp(es[j].f[4], e->f[4]) == 0)
				count++;
		if (used < sizeof(buf))
			used += snprintf(buf + used, sizeof(buf) - used, "%s%s (%d)",
					 used ? ", " : "", e->f[4], count);
	}
	if (!others)
		return;
	fold(printf("\n%d entr%s of other providers, not tried (-a tries them): ", others,
		    others == 1 ? "y" : "ies") - 1, 2, buf);
}

/* ------------------------------------------------------------------ main */

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static int read_conf(const char *conf, struct entry **out, int *n)
{
	FILE *f = fopen(conf, "r");
	char *line = NULL;
	size_t cap = 0;
	int lineno = 0;
	struct stat st;

	*out = NULL;
	*n = 0;
	if (f && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		f = NULL;
		errno = EISDIR;
	}
	if (!f) {
		fprintf(stderr, "daplofi-info: %s: %s\n", conf, strerror(errno));
		return -1;
	}
	while (getline(&line, &cap, f) >= 0 && *n < MAX_ENTRIES) {
		struct entry *e, *more;
		char *text;
		char *tok[NFIELDS];
		int nt;

		lineno++;
		text = strdup(line);
		if (!text)
			break;
		nt = tokenize(text, tok);
		if (nt == 0) {
			free(text);
			continue;
		}
		more = realloc(*out, (size_t)(*n + 1) * sizeof(**out));
		if (!more) {
			free(text);
			break;
		}
		*out = more;
		e = &more[(*n)++];
		memset(e, 0, sizeof(*e));
		e->line = lineno;
		e->text = text;
		e->nf = nt;
		memcpy(e->f, tok, sizeof(tok));
		/* an entry cut short by an open quote still has its name */
		if (nt < 0)
			e->f[0] = strtok(strcpy(text, line), " \t\n");
		e->ours = (nt >= 5 && is_ours(e->f[4])) ||
			  (nt < 5 && strstr(line, "libdaplofi") != NULL);
	}
	if (*n == MAX_ENTRIES)
		fprintf(stderr, "daplofi-info: %s: only the first %d entries are read\n", conf,
			MAX_ENTRIES);
	free(line);
	fclose(f);
	return 0;
}

/* libdat2 reads its dat.conf when it is loaded, before main(), and prints
 * what it cannot parse on stdout then (and a file it cannot parse may crash
 * it: an unclosed quote followed by more entries does in 2.1.10).  So the
 * tool runs itself again in a child, with DAT_OVERRIDE naming the file and
 * its stdout in a temporary file until main() takes the real one back
 * (DAPLOFI_INFO_FDS): the registry's lines stay out of the table and show
 * with -v; if the child dies, the parent goes on without opening anything
 * (crashed: the signal).  Returns -1 to go on, else the exit status. */
static int run_child(char **argv, const char *conf)
{
	const char *fds = getenv("DAPLOFI_INFO_FDS");
	char buf[64];
	int out, err, tmp, st;
	pid_t pid;
	FILE *f;

	if (fds) {
		size_t n;

		if (sscanf(fds, "%d:%d:%d", &out, &err, &tmp) != 3)
			return -1;
		unsetenv("DAPLOFI_INFO_FDS");
		is_child = true;
		fflush(stdout);
		fflush(stderr);
		dup2(out, 1);
		dup2(err, 2);
		close(out);
		close(err);
		f = fdopen(tmp, "r");
		if (!f)
			return -1;
		rewind(f);
		n = fread(registry_said, 1, sizeof(registry_said) - 1, f);
		registry_said[n] = '\0';
		fclose(f);
		return -1;
	}
	if (conf && *conf)
		setenv("DAT_OVERRIDE", conf, 1);
	f = tmpfile();
	fflush(stdout);
	fflush(stderr);
	out = dup(1);
	err = dup(2);
	if (!f || out < 0 || err < 0) {
		perror("daplofi-info: a temporary file");
		return 1;
	}
	tmp = dup(fileno(f));	/* without O_CLOEXEC, unlike tmpfile's */
	snprintf(buf, sizeof(buf), "%d:%d:%d", out, err, tmp);
	pid = fork();
	if (pid == 0) {
		setenv("DAPLOFI_INFO_FDS", buf, 1);
		dup2(tmp, 1);
		dup2(tmp, 2);
		execv("/proc/self/exe", argv);
		dup2(err, 2);
		perror("daplofi-info: running itself again (/proc/self/exe)");
		_exit(1);
	}
	close(out);
	close(err);
	close(tmp);
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		perror("daplofi-info: fork");
		fclose(f);
		return 1;
	}
	if (WIFEXITED(st)) {
		fclose(f);
		return WEXITSTATUS(st);
	}
	/* the child died: in the registry when it read the file, or later */
	{
		size_t n;

		rewind(f);
		n = fread(registry_said, 1, sizeof(registry_said) - 1, f);
		registry_said[n] = '\0';
		fclose(f);
		crashed = WTERMSIG(st);
		return -1;
	}
}

/* ------------------------------------------------------------ --generate */

/* daplofi-info --generate: dat.conf entries for this host, one per usable
 * interface (up, with an IPv4 address) and fabric dapl-ofi serves here (the
 * libfabric providers dfi_fabric_provider_list finds), each opened through
 * the registry as the table's are: an entry that does not open is printed
 * commented out, with the reason.  The registry reads its dat.conf when it
 * is loaded, so the candidates go to a temporary file first and the tool
 * runs itself again on it (run_child), as for any file. */

#define MAX_IFACES	64
#define MAX_PROVS	32

/* The fabrics README's Status table tests (and verbs, which builds): listed
 * first; other providers libfabric offers follow under their own comment. */
static const struct { const char *name; bool rdm; } main_fabrics[] = {
	{ "tcp", false }, { "verbs", false }, { "shm", true }, { "tcp;ofi_rxm", true },
	{ "net", true },
};

static bool is_main_fabric(const struct dfi_prov_desc *p)
{
	for (size_t i = 0; i < sizeof(main_fabrics) / sizeof(main_fabrics[0]); i++)
		if (main_fabrics[i].rdm == p->rdm && strcmp(main_fabrics[i].name, p->name) == 0)
			return true;
	return false;
}

/* The fabric part of a generated IA name (man/daplofi-info.1, NAMES): the
 * provider's name with "ofi_" dropped and ';' as '-' ("udp;ofi_rxd" is
 * udp-rxd), but "tcp;ofi_rxm", the RDM over TCP that sites use, is rxm;
 * "-rdm" after it when the provider also has connected endpoints and the
 * entry asks for its reliable-datagram ones (net-rdm). */
static void fabric_tag(const struct dfi_prov_desc *p, bool ep_rdm, char *tag, size_t len)
{
	size_t o = 0;

	if (strcmp(p->name, "tcp;ofi_rxm") == 0) {
		snprintf(tag, len, "rxm");
		return;
	}
	for (const char *c = p->name; *c && o + 1 < len; c++) {
		if (strncmp(c, "ofi_", 4) == 0)
			c += 3;
		else
			tag[o++] = *c == ';' || *c == '_' ? '-' : *c;
	}
	tag[o] = '\0';
	if (ep_rdm)
		snprintf(tag + o, len - o, "-rdm");
}

/* name in a comma list (NULL: every name matches) */
static bool in_list(const char *list, const char *name)
{
	size_t n = strlen(name);

	if (!list)
		return true;
	for (const char *p = list; *p; ) {
		const char *end = strchrnul(p, ',');

		if ((size_t)(end - p) == n && strncmp(p, name, n) == 0)
			return true;
		p = *end ? end + 1 : end;
	}
	return false;
}

/* The first word of a comma list that names none of names[0..n), or NULL. */
static const char *unknown_in_list(const char *list, char (*names)[IF_NAMESIZE + 64], int n,
				   char *word, size_t len)
{
	for (const char *p = list; p && *p; ) {
		const char *end = strchrnul(p, ',');
		bool found = false;

		for (int i = 0; i < n; i++)
			if (strlen(names[i]) == (size_t)(end - p) &&
			    strncmp(names[i], p, (size_t)(end - p)) == 0)
				found = true;
		if (!found) {
			snprintf(word, len, "%.*s", (int)(end - p), p);
			return word;
		}
		p = *end ? end + 1 : end;
	}
	return NULL;
}

/* Interfaces that are up and have an IPv4 address, once each, in the
 * kernel's order; names a dat.conf token carries as it is. */
static int usable_interfaces(char (*names)[IF_NAMESIZE + 64], int max)
{
	struct ifaddrs *ifa, *i;
	int n = 0;

	if (getifaddrs(&ifa) != 0)
		return -errno;
	for (i = ifa; i && n < max; i = i->ifa_next) {
		bool seen = false;

		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
		    strlen(i->ifa_name) >= IF_NAMESIZE + 64 ||
		    strspn(i->ifa_name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			   "0123456789_.:@-") != strlen(i->ifa_name))
			continue;
		for (int k = 0; k < n; k++)
			seen |= strcmp(names[k], i->ifa_name) == 0;
		if (!seen)
			snprintf(names[n++], IF_NAMESIZE + 64, "%s", i->ifa_name);
	}
	freeifaddrs(ifa);
	return n;
}

struct gen_opts {
	const char *lib;	/* library field (default: the soname) */
	const char *ifaces;	/* comma list, or NULL: every usable one */
	const char *fabrics;	/* comma list of fabric tags, or NULL: all */
};

/* Write the candidate entries to f; returns how many, or -1 with the error
 * on stderr (a bad --interface or --fabric). */
static int write_candidates(FILE *f, const struct gen_opts *o)
{
	char ifs[MAX_IFACES][IF_NAMESIZE + 64], tags[2 * MAX_PROVS][IF_NAMESIZE + 64], word[128];
	struct dfi_prov_desc provs[MAX_PROVS];
	int nif = usable_interfaces(ifs, MAX_IFACES);
	int np = dfi_fabric_provider_list(provs, MAX_PROVS), ntags = 0, count = 0;
	char host[256] = "this host";

	if (nif < 0) {
		fprintf(stderr, "daplofi-info: getifaddrs: %s\n", strerror(-nif));
		return -1;
	}
	if (o->ifaces && unknown_in_list(o->ifaces, ifs, nif, word, sizeof(word))) {
		fprintf(stderr, "daplofi-info: --interface: no interface '%s' that is up with an "
			"IPv4 address (here: %s)\n", word, interfaces);
		return -1;
	}
	for (int p = 0; p < np; p++) {
		bool ep_rdm = false;

		for (int q = 0; q < np && provs[p].rdm; q++)
			ep_rdm |= !provs[q].rdm && strcmp(provs[q].name, provs[p].name) == 0;
		fabric_tag(&provs[p], ep_rdm, tags[ntags], sizeof(tags[ntags]));
		ntags++;
	}
	if (o->fabrics && unknown_in_list(o->fabrics, tags, ntags, word, sizeof(word))) {
		char list[1024] = "";
		size_t used = 0;

		for (int t = 0; t < ntags && used < sizeof(list); t++)
			used += snprintf(list + used, sizeof(list) - used, "%s%s", t ? ", " : "",
					 tags[t]);
		fprintf(stderr, "daplofi-info: --fabric: no fabric '%s' here (here: %s)\n", word,
			np ? list : "none: libfabric offers no provider dapl-ofi serves");
		return -1;
	}
	gethostname(host, sizeof(host) - 1);
	fprintf(f, "# dapl-ofi entries for %s, written by daplofi-info --generate: each "
		"opened through the DAT registry (dat_ia_open) and self-tested when written; names "
		"ofi-<fabric>-<interface> (daplofi-info(1))\n", host);
	for (int group = 0; group < 2; group++) {
		bool head = false;

		for (int p = 0; p < np; p++) {
			const struct dfi_prov_desc *d = &provs[p];
			bool ep_rdm = strlen(tags[p]) > 4 && strcmp(tags[p] + strlen(tags[p]) - 4,
								      "-rdm") == 0;

			if (is_main_fabric(d) != (group == 0) || !in_list(o->fabrics, tags[p]))
				continue;
			if (group == 1 && !head)
				fprintf(f, "# other fabrics libfabric offers here (not among those "
					"dapl-ofi is tested on: README, Status)\n");
			head = true;
			for (int i = 0; i < (d->by_ip ? nif : 1); i++) {
				if (d->by_ip && !in_list(o->ifaces, ifs[i]))
					continue;
				/* a provider that names its endpoints itself
				 * takes any address: the loopback one */
				if (d->by_ip)
					fprintf(f, "ofi-%s-%s", tags[p], ifs[i]);
				else
					fprintf(f, "ofi-%s", tags[p]);
				fprintf(f, " u2.0 nonthreadsafe default %s dapl.2.0 \"%s %s%s\" \"\"\n",
					o->lib, d->name, d->by_ip ? ifs[i] : "lo",
					ep_rdm ? " ep=rdm" : "");
				count++;
			}
		}
	}
	return count;
}

/* The parent's half: the candidates into a temporary file, then this tool
 * again on it (run_child), whose output is the result. */
static int generate(char **argv, const struct gen_opts *o)
{
	char path[] = "/tmp/daplofi-info-generate.XXXXXX";
	const char *tmpdir = getenv("TMPDIR");
	char *tpath = NULL;
	FILE *f;
	int fd, n, rc;

	if (strpbrk(o->lib, " \t\n\"#\\") || !*o->lib) {
		fprintf(stderr, "daplofi-info: --lib '%s': a dat.conf library field has no blank, "
			"quote, backslash or '#' (and is not empty)\n", o->lib);
		return 1;
	}
	if (tmpdir && *tmpdir && asprintf(&tpath, "%s/daplofi-info-generate.XXXXXX", tmpdir) < 0)
		tpath = NULL;
	fd = mkstemp(tpath ? tpath : path);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		fprintf(stderr, "daplofi-info: a temporary file: %s\n", strerror(errno));
		if (fd >= 0)
			close(fd);
		free(tpath);
		return 1;
	}
	list_interfaces();
	n = write_candidates(f, o);
	if (fclose(f) != 0 && n >= 0) {
		fprintf(stderr, "daplofi-info: %s: %s\n", tpath ? tpath : path, strerror(errno));
		n = -1;
	}
	rc = n < 0 ? 1 : run_child(argv, tpath ? tpath : path);
	if (rc < 0) {
		fprintf(stderr, "daplofi-info: killed by signal %d (%s) while the DAT registry "
			"opened the generated entries; it printed:\n%s\n", crashed,
			strsignal(crashed), registry_said);
		rc = 4;
	}
	unlink(tpath ? tpath : path);
	free(tpath);
	return rc;
}

/* The child's half: open each candidate (diagnose, as the table does) and
 * print the file again, an entry that does not open commented out after
 * a line that says why.  0 if one opens at least, 2 if none does. */
static int generate_child(const char *conf, bool try)
{
	struct entry *es;
	int n, opens = 0, lineno = 0;
	FILE *f;
	char *line = NULL;
	size_t cap = 0;

	if (read_conf(conf, &es, &n))
		return 1;
	dfi_fabric_providers(providers, sizeof(providers));
	for (int i = 0; i < n; i++)
		diagnose(&es[i], try, es, n);
	f = fopen(conf, "r");
	if (!f) {
		fprintf(stderr, "daplofi-info: %s: %s\n", conf, strerror(errno));
		return 1;
	}
	if (!try)
		printf("# not opened (-q): each entry below is a candidate only\n");
	while (getline(&line, &cap, f) >= 0) {
		struct entry *e = NULL;

		lineno++;
		for (int i = 0; i < n; i++)
			if (es[i].line == lineno)
				e = &es[i];
		if (!e || !try || e->state == S_OPENS) {
			fputs(line, stdout);
			opens += e && e->state == S_OPENS;
			continue;
		}
		printf("# %s does not open: %s\n#%s", e->f[0], e->reason[0] ? e->reason :
		       "(no reason found)", line);
	}
	free(line);
	fclose(f);
	if (try)
		fprintf(stderr, "daplofi-info: %d of %d entries open%s\n", opens, n, opens < n ?
			"; the others are commented out, each after the reason" : "");
	for (int i = 0; i < n; i++) {
		free(es[i].text);
		free(es[i].detail);
	}
	free(es);
	return !try || opens ? 0 : 2;
}

static void usage(FILE *to, const char *argv0)
{
	fprintf(to, "usage: %s [-a] [-c] [-f dat.conf] [-q] [-v]\n"
		"       %s --generate [--lib PATH] [--interface LIST] [--fabric LIST] [-q]\n"
		"  -a  also try the entries of other providers\n"
		"  -c  print only the configuration table\n"
		"  -f  the dat.conf to read (default: $DAT_OVERRIDE, else /etc/dat.conf)\n"
		"  -q  do not open the IAs\n"
		"  -v  also the configuration table and every attribute of each entry\n"
		"  -g, --generate      print dat.conf entries for this host's interfaces and\n"
		"                      fabrics, each that does not open commented out\n"
		"  -l, --lib PATH      their library (default libdaplofi.so.2, the installed one)\n"
		"  -i, --interface L   only these interfaces (comma list; default: every one up\n"
		"                      with an IPv4 address)\n"
		"  -F, --fabric L      only these fabrics (comma list: tcp, shm, rxm, net-rdm, ...)\n",
		argv0, argv0);
}

int main(int argc, char **argv)
{
	const char *conf = getenv("DAT_OVERRIDE"), *from = "DAT_OVERRIDE";
	int only_params = 0, try = 1, all = 0, c, n, ours = 0, bad = 0, gen = 0;
	struct gen_opts go = { .lib = "libdaplofi.so.2" };
	struct entry *es;
	static const struct option longopts[] = {
		{ "generate", no_argument, NULL, 'g' },
		{ "lib", required_argument, NULL, 'l' },
		{ "interface", required_argument, NULL, 'i' },
		{ "fabric", required_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};

	while ((c = getopt_long(argc, argv, "acf:qvhgl:i:F:", longopts, NULL)) != -1) {
		switch (c) {
		case 'a': all = 1; break;
		case 'c': only_params = 1; break;
		case 'f': conf = optarg; from = "-f"; break;
		case 'q': try = 0; break;
		case 'v': verbose = true; break;
		case 'g': gen = 1; break;
		case 'l': go.lib = optarg; break;
		case 'i': go.ifaces = optarg; break;
		case 'F': go.fabrics = optarg; break;
		case 'h': usage(stdout, argv[0]); return 0;
		default: usage(stderr, argv[0]); return 1;
		}
	}
	if (optind < argc) {
		usage(stderr, argv[0]);
		return 1;
	}
	if (!gen && (go.ifaces || go.fabrics || strcmp(go.lib, "libdaplofi.so.2"))) {
		fprintf(stderr, "daplofi-info: --lib, --interface and --fabric go with --generate\n");
		return 1;
	}
	if (gen && (all || only_params || verbose || strcmp(from, "-f") == 0)) {
		fprintf(stderr, "daplofi-info: --generate takes no -a, -c, -f or -v\n");
		return 1;
	}
	/* the parent writes the candidates and runs the child on them */
	if (gen && !getenv("DAPLOFI_INFO_FDS"))
		return generate(argv, &go);
	c = run_child(argv, conf);
	if (gen)
		return c >= 0 ? c : generate_child(getenv("DAT_OVERRIDE"), try);
	if (c >= 0)
		return c;
	if (crashed) {
		char msg[512];

		if (crashed == SIGALRM)	/* the watchdog: its line on stderr names the call */
			snprintf(msg, sizeof(msg), "stopped: a DAT call on an entry of %s did not "
				 "return in %d s (stderr names it); a DAT program would hang there "
				 "too.  What follows is found without the registry.%s",
				 conf && *conf ? conf : "/etc/dat.conf", INFO_WATCHDOG_S,
				 registry_said[0] ? "  What it printed is at the end." : "");
		else
			snprintf(msg, sizeof(msg), "killed by signal %d (%s) while the DAT "
				 "registry read %s or opened its entries; so may be any DAT program "
				 "that reads it.  What follows is found without the registry.%s",
				 crashed, strsignal(crashed), conf && *conf ? conf : "/etc/dat.conf",
				 registry_said[0] ? "  What it printed is at the end." : "");
		printf("daplofi-info: ");
		fold(14, 2, msg);
		putchar('\n');
		try = 0;
		verbose = false;
	}
	if (only_params || verbose) {
		print_params();
		if (only_params)
			return 0;
		putchar('\n');
	}
	if (!conf || !*conf) {
		conf = "/etc/dat.conf";
		from = "DAT_OVERRIDE is not set";
	}
	if (read_conf(conf, &es, &n))
		return 1;
	list_interfaces();
	dfi_fabric_providers(providers, sizeof(providers));
	if (!providers[0])
		snprintf(providers, sizeof(providers), "none");

	{
		char *abs = realpath(conf, NULL);

		printf("dat.conf: %s (%s)\n", abs ? abs : conf, from);
		free(abs);
	}
	print_env_line();
	putchar('\n');
	for (int i = 0; i < n; i++) {
		struct entry *e = &es[i];

		diagnose(e, try && (e->ours || all), es, n);
		if (!e->ours)
			continue;
		ours++;
		bad += e->state == S_FAILS || e->state == S_IGNORED;
	}
	if (ours || all)
		print_table(es, n, all);
	else
		printf("No dapl-ofi entry (library libdaplofi.so.2) in %s.\n", conf);
	print_problems(es, n, all);
	if (!all)
		print_others(es, n);
	if (!ours) {
		printf("\nTo add one: ");
		fold(12, 4, "append a line such as 'ofi-lo u2.0 nonthreadsafe default "
		     "libdaplofi.so.2 dapl.2.0 \"tcp lo\" \"\"' (make install writes one in "
		     "$PREFIX/share/dapl-ofi/dat.conf), or set DAT_OVERRIDE to a file that has it.");
	}
	if (crashed)
		printf("\nBefore it died, the child printed (at most %zu bytes):\n%s\n",
		       sizeof(registry_said) - 1, registry_said);
	else if (registry_said[0] && !verbose)
		printf("\nThe registry printed %d line%s when it read the file (-v shows them).\n",
		       count_lines(registry_said), count_lines(registry_said) == 1 ? "" : "s");
	if (verbose && registry_said[0])
		printf("\nThe registry (libdat2) printed when it read the file:\n%s", registry_said);
	if (verbose) {
		for (int i = 0; i < n; i++) {
			struct entry *e = &es[i];

			if ((!e->ours && !all) || !e->detail)
				continue;
			printf("\n%s  %s\n", e->f[0] ? e->f[0] : "?", state_names[e->state]);
			print_detail(e->detail);
		}
	}
	for (int i = 0; i < n; i++) {
		free(es[i].text);
		free(es[i].detail);
	}
	free(es);
	if (crashed)
		return 4;
	if (!try)
		return 0;
	return !ours ? 3 : bad ? 2 : 0;
}
