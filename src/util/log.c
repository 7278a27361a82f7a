/* The logger.  Lines look like:
 *   dapl-ofi[1234] warn  api: wait_precheck: EVD 0x5581...: threshold 0 out of range 1..64
 */
#include "log.h"
#include "param.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

unsigned char dfi_log_threshold[DFI_SS_COUNT] = {
	DFI_LOG_WARN, DFI_LOG_WARN, DFI_LOG_WARN, DFI_LOG_WARN,
	DFI_LOG_WARN, DFI_LOG_WARN, DFI_LOG_WARN, DFI_LOG_WARN,
};

static const char *const level_names[] = {
	"none", "error", "warn", "info", "debug", "trace",
};
static const char *const subsys_names[DFI_SS_COUNT] = {
	"ia", "evd", "cno", "mr", "ep", "cm", "fabric", "api",
};

static FILE *log_fp;		/* NULL: stderr */
static int log_dest;		/* legacy DAPL_DBG_DEST bits: 1 stdout, 2 syslog */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

const char *dfi_log_level_name(enum dfi_log_level lvl)
{
	return (unsigned)lvl <= DFI_LOG_TRACE ? level_names[lvl] : "?";
}

const char *dfi_subsys_name(enum dfi_subsys ss)
{
	return (unsigned)ss < DFI_SS_COUNT ? subsys_names[ss] : "?";
}

static int parse_level(const char *s, size_t n)
{
	for (int i = 0; i <= DFI_LOG_TRACE; i++)
		if (strlen(level_names[i]) == n && strncasecmp(s, level_names[i], n) == 0)
			return i;
	if (n == 7 && strncasecmp(s, "warning", 7) == 0)
		return DFI_LOG_WARN;
	if (n == 1 && *s >= '0' && *s <= '5')
		return *s - '0';
	return -1;
}

static int parse_subsys(const char *s, size_t n)
{
	for (int i = 0; i < DFI_SS_COUNT; i++)
		if (strlen(subsys_names[i]) == n && strncasecmp(s, subsys_names[i], n) == 0)
			return i;
	return -1;
}

/* Legacy OFA DAPL_DBG_TYPE bits. */
static void apply_dbg_type(unsigned long mask)
{
	int all = DFI_LOG_ERROR;	/* errors always show */

	if (mask & 0x2)
		all = DFI_LOG_WARN;
	for (int i = 0; i < DFI_SS_COUNT; i++)
		dfi_log_threshold[i] = (unsigned char)all;
	if (mask & 0x4)
		dfi_log_threshold[DFI_SS_EVD] = dfi_log_threshold[DFI_SS_CNO] = DFI_LOG_DEBUG;
	if (mask & 0x8)
		dfi_log_threshold[DFI_SS_CM] = DFI_LOG_DEBUG;
	if (mask & 0x10)
		dfi_log_threshold[DFI_SS_EP] = DFI_LOG_DEBUG;
	if (mask & 0x20)
		dfi_log_threshold[DFI_SS_IA] = dfi_log_threshold[DFI_SS_MR] = DFI_LOG_DEBUG;
	if (mask & 0x100)
		dfi_log_threshold[DFI_SS_API] = DFI_LOG_DEBUG;
	if (mask & ~0x13fUL)
		for (int i = 0; i < DFI_SS_COUNT; i++)
			dfi_log_threshold[i] = DFI_LOG_DEBUG;
}

/* "warn,evd=debug,cno=trace" */
static void apply_level_spec(const char *spec)
{
	const char *p = spec;

	while (*p) {
		const char *end = strchrnul(p, ',');
		const char *eq = memchr(p, '=', (size_t)(end - p));
		int lvl;

		if (eq) {
			int ss = parse_subsys(p, (size_t)(eq - p));

			lvl = parse_level(eq + 1, (size_t)(end - eq - 1));
			if (ss >= 0 && lvl >= 0)
				dfi_log_threshold[ss] = (unsigned char)lvl;
			else
				fprintf(stderr, "dapl-ofi: %s: cannot parse '%.*s'\n",
					dfi_params[DFI_P_LOG_LEVEL].name, (int)(end - p), p);
		} else {
			lvl = parse_level(p, (size_t)(end - p));
			if (lvl >= 0)
				for (int i = 0; i < DFI_SS_COUNT; i++)
					dfi_log_threshold[i] = (unsigned char)lvl;
			else
				fprintf(stderr, "dapl-ofi: %s: unknown level '%.*s'\n",
					dfi_params[DFI_P_LOG_LEVEL].name, (int)(end - p), p);
		}
		p = *end ? end + 1 : end;
	}
}

static void apply_subsys_filter(const char *list)
{
	bool on[DFI_SS_COUNT] = { false };
	const char *p = list;

	if (strcasecmp(list, "all") == 0)
		return;
	while (*p) {
		const char *end = strchrnul(p, ',');
		int ss = parse_subsys(p, (size_t)(end - p));

		if (ss >= 0)
			on[ss] = true;
		p = *end ? end + 1 : end;
	}
	for (int i = 0; i < DFI_SS_COUNT; i++)
		if (!on[i])
			dfi_log_threshold[i] = DFI_LOG_NONE;
}

static void open_log_file(const char *pattern)
{
	char path[4096], host[256] = "";
	size_t o = 0;

	gethostname(host, sizeof(host) - 1);
	for (const char *p = pattern; *p && o < sizeof(path) - 1; p++) {
		int n = 0;

		if (p[0] == '%' && p[1] == 'p')
			n = snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
		else if (p[0] == '%' && p[1] == 'h')
			n = snprintf(path + o, sizeof(path) - o, "%s", host);
		else {
			path[o++] = *p;
			continue;
		}
		p++;
		o += (size_t)n < sizeof(path) - o ? (size_t)n : sizeof(path) - o - 1;
	}
	path[o] = '\0';
	log_fp = fopen(path, "ae");
	if (!log_fp)
		fprintf(stderr, "dapl-ofi: cannot open log file %s: %s; logging to stderr\n",
			path, strerror(errno));
	else
		setvbuf(log_fp, NULL, _IOLBF, 0);
}

static void log_init_once(void)
{
	if (dfi_param_set(DFI_P_DBG_TYPE))
		apply_dbg_type((unsigned long)dfi_param_int(DFI_P_DBG_TYPE));
	if (dfi_param_set(DFI_P_LOG_LEVEL) || !dfi_param_set(DFI_P_DBG_TYPE))
		apply_level_spec(dfi_param_str(DFI_P_LOG_LEVEL));
	apply_subsys_filter(dfi_param_str(DFI_P_LOG_SUBSYS));
	log_dest = (int)dfi_param_int(DFI_P_DBG_DEST);
	if (dfi_param_set(DFI_P_LOG_FILE))
		open_log_file(dfi_param_str(DFI_P_LOG_FILE));
	dfi_param_check_unknown();
}

void dfi_log_init(void)
{
	pthread_once(&log_once, log_init_once);
}

void dfi_log_emit(enum dfi_log_level lvl, enum dfi_subsys ss, const char *func,
		  const char *fmt, ...)
{
	int saved = errno;
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	pthread_mutex_lock(&log_lock);
	if (log_dest & 2)
		syslog(lvl <= DFI_LOG_ERROR ? LOG_ERR : lvl == DFI_LOG_WARN ? LOG_WARNING :
		       LOG_DEBUG, "dapl-ofi %s: %s: %s", subsys_names[ss], func, msg);
	if (!(log_dest & 2) || (log_dest & 1)) {
		FILE *fp = log_fp ? log_fp : (log_dest & 1) ? stdout : stderr;

		fprintf(fp, "dapl-ofi[%d] %-5s %s: %s: %s\n", (int)getpid(),
			level_names[lvl], subsys_names[ss], func, msg);
		fflush(fp);
	}
	pthread_mutex_unlock(&log_lock);
	errno = saved;
}
