/*
 * fuzz_params: the strings a consumer or an administrator hands dapl-ofi,
 * parsed by the code that parses them, linked directly (no registry, no
 * libfabric).  The first byte picks the parser, the rest is its text:
 *   0  ia_params (util/ia_params.c), as dat_provider_init parses them;
 *   1  a whole dat.conf through daplofi-info's reader, tokenizer and
 *      diagnosis (tools/daplofi-info.c: read_conf, check_fields,
 *      check_params, the table and the problems it prints), with address
 *      resolution and fi_getinfo replaced by stubs: no DNS, no fabric, no
 *      dlopen of a fuzz-chosen library path;
 *   2  an environment value: the number parser of util/param.c and the
 *      log level, subsystem and legacy mask parsers of util/log.c.
 * Asserts what each promises: a parse either succeeds or says why in its
 * error field, strings stay terminated inside their arrays, values inside
 * their documented ranges, and the same text parses the same way twice.
 *
 * Reproduce a crash: build/fuzz/fuzz_params <crash-file> (tests/fuzz/README.md).
 */
#include <stdint.h>
#include <stddef.h>
#include <sys/mman.h>

/* The tool and the logger as one translation unit with this file: their
 * static parsers are what is tested.  The tool's main() is not called. */
#define main daplofi_info_main
int daplofi_info_main(int argc, char **argv);
#include "../../tools/daplofi-info.c"
#undef main
#include "../../src/util/log.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) do {						\
		if (!(cond)) {						\
			fprintf(stderr, "fuzz_params: %s:%d: check failed: %s\n", \
				__FILE__, __LINE__, #cond);		\
			abort();					\
		}							\
	} while (0)

/* ----------------------------------------- stubs for daplofi-info's probe */

/* Addresses: "127.x.y.z" literals resolve, a name that starts with "if"
 * is an interface without IPv4, anything else is unknown.  Deterministic,
 * no resolver. */
int dfi_resolve_ipv4(const char *where, struct sockaddr_in *out)
{
	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	if (strncmp(where, "127.", 4) == 0 && inet_pton(AF_INET, where, &out->sin_addr) == 1)
		return 0;
	return strncmp(where, "if", 2) == 0 ? -EADDRNOTAVAIL : -ENOENT;
}

/* Providers: "tcp" works, "nop" has no FI_EP_MSG, the rest do not exist. */
int dfi_fabric_probe(const char *prov, const struct sockaddr_in *addr, const char *domain,
		     enum dfi_ep_kind kind, bool atomics, struct dfi_fabric_limits *lim, char *err,
		     size_t errlen)
{
	(void)addr;
	(void)kind;
	(void)atomics;
	memset(lim, 0, sizeof(*lim));
	if (strcmp(prov, "tcp") == 0) {
		snprintf(lim->prov_name, sizeof(lim->prov_name), "%s", prov);
		snprintf(lim->fabric_name, sizeof(lim->fabric_name), "127.0.0.0/8");
		snprintf(lim->domain_name, sizeof(lim->domain_name), "%s",
			 *domain ? domain : "lo");
		return 0;
	}
	snprintf(err, errlen, "fi_getinfo(%s): no data available", prov);
	return strcmp(prov, "nop") == 0 ? -ENODATA : -ENOENT;
}

void dfi_fabric_providers(char *buf, size_t len)
{
	snprintf(buf, len, "tcp");
}

/* (--generate is not fuzzed: it opens IAs) */
int dfi_fabric_provider_list(struct dfi_prov_desc *out, int max)
{
	(void)out;
	(void)max;
	return 0;
}

/* ------------------------------------------------------------ ia_params */

static bool terminated(const char *s, size_t n)
{
	return memchr(s, '\0', n) != NULL;
}

static void fuzz_ia_params(const char *text)
{
	struct dfi_config a, b;

	dfi_ia_params_parse(text, &a);
	dfi_ia_params_parse(text, &b);
	check(memcmp(&a, &b, sizeof(a)) == 0);		/* no hidden state */
	check(terminated(a.prov_name, sizeof(a.prov_name)));
	check(terminated(a.where, sizeof(a.where)));
	check(terminated(a.domain, sizeof(a.domain)));
	check(terminated(a.bad, sizeof(a.bad)));
	check(terminated(a.error, sizeof(a.error)));
	check((a.err == DFI_CFG_OK) == (a.error[0] == '\0'));
	check(a.mtu >= 256 && a.mtu <= 1u << 30);
	if (a.err == DFI_CFG_OK) {
		check(a.prov_name[0] && a.where[0]);
		check(!strchr(a.prov_name, '=') && !strchr(a.prov_name, ' '));
		check(!strchr(a.where, ' ') && !strchr(a.where, '\t'));
	}
}

/* -------------------------------------------------------------- dat.conf */

static void fuzz_dat_conf(const uint8_t *data, size_t size)
{
	char path[64];
	struct entry *es = NULL;
	int n = 0, fd = memfd_create("dat.conf", MFD_CLOEXEC);
	FILE *out;

	check(fd >= 0);
	check(write(fd, data, size) == (ssize_t)size);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	check(read_conf(path, &es, &n) == 0);
	close(fd);
	check(n >= 0 && n <= MAX_ENTRIES);
	for (int i = 0; i < n; i++) {
		struct entry *e = &es[i];

		check(e->line >= 1);
		check(e->nf != 0);
		diagnose(e, false, es, n);	/* no dat_ia_open, no dlopen */
		check(terminated(e->reason, sizeof(e->reason)));
		check(terminated(e->fix, sizeof(e->fix)));
		/* a broken entry says why, with a fix */
		check(e->state != S_IGNORED || (e->reason[0] && e->fix[0]));
	}
	/* the output, into nothing */
	fflush(stdout);
	out = stdout;
	stdout = fopen("/dev/null", "w");
	check(stdout);
	print_table(es, n, true);
	print_problems(es, n, true);
	print_others(es, n);
	fclose(stdout);
	stdout = out;
	for (int i = 0; i < n; i++) {
		free(es[i].text);
		free(es[i].detail);
	}
	free(es);
}

/* ----------------------------------------------------- environment values */

static void fuzz_env(const char *text, unsigned char which)
{
	static const enum dfi_param_id ids[] = {
		DFI_P_DBG_TYPE, DFI_P_DBG_DEST, DFI_P_QUARANTINE, DFI_P_PROGRESS_LEASE_US,
		DFI_P_UPCALL_THREADS, DFI_P_EP_PREOPEN, DFI_P_INJECT,
	};
	enum dfi_param_id id = ids[which % (sizeof(ids) / sizeof(ids[0]))];

	/* a value that is not a number falls back to the default, with a
	 * warning: never a crash, and the same answer twice */
	if (setenv(dfi_params[id].name, text, 1) == 0) {
		long v = dfi_param_int(id);

		check(dfi_param_int(id) == v);
		check(dfi_param_set(id) == (text[0] != '\0'));
		if (dfi_params[id].type == DFI_PARAM_HEX)
			apply_dbg_type((unsigned long)v);
		unsetenv(dfi_params[id].name);
	}
	apply_level_spec(text);
	for (int i = 0; i < DFI_SS_COUNT; i++)
		check(dfi_log_threshold[i] <= DFI_LOG_TRACE);
	apply_subsys_filter(text);
	for (int i = 0; i < DFI_SS_COUNT; i++)
		check(dfi_log_threshold[i] <= DFI_LOG_TRACE);
	/* an unknown DAPL_OFI_ name is warned about, not followed */
	if (!strchr(text, '=') && strlen(text) < 200) {
		char name[256];

		snprintf(name, sizeof(name), "DAPL_OFI_%s", text);
		if (setenv(name, "1", 1) == 0) {
			dfi_param_check_unknown();
			unsetenv(name);
		}
	}
	/* back to logging everything (into /dev/null): the messages of the
	 * next input are formatted too */
	for (int i = 0; i < DFI_SS_COUNT; i++)
		dfi_log_threshold[i] = DFI_LOG_TRACE;
}

static void log_init_none(void)
{
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* the logger writes, at every level, into /dev/null: its formatting
	 * of fuzz-chosen strings runs, its output does not flood the run */
	log_fp = fopen("/dev/null", "we");
	pthread_once(&log_once, log_init_none);	/* not from the environment */
	for (int i = 0; i < DFI_SS_COUNT; i++)
		dfi_log_threshold[i] = DFI_LOG_TRACE;
	snprintf(interfaces, sizeof(interfaces), "lo 127.0.0.1");
	snprintf(providers, sizeof(providers), "tcp");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text;

	if (size < 1)
		return 0;
	/* text parsers take C strings: the input up to its first NUL */
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	switch (data[0] % 3) {
	case 0: fuzz_ia_params(text); break;
	case 1: fuzz_dat_conf(data + 1, size - 1); break;
	case 2: fuzz_env(text, size > 1 ? data[1] : 0); break;
	}
	free(text);
	return 0;
}
