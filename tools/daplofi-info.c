/*
 * daplofi-info: the configuration table with the values in force, and the IAs
 * of a dat.conf with whether each opens through the stock registry.
 *
 *   daplofi-info [-c] [-a] [-f dat.conf] [-q]
 *     -c  print only the configuration table
 *     -a  try to open every default entry, not only dapl-ofi's
 *     -f  the dat.conf to read (default: $DAT_OVERRIDE, else /etc/dat.conf)
 *     -q  do not try to open the IAs
 */
#include "util/param.h"

#include <dat2/udat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void print_params(void)
{
	printf("Configuration (environment variables; '*' = set in the environment)\n");
	for (int i = 0; i < DFI_P_COUNT; i++) {
		const struct dfi_param *p = &dfi_params[i];

		printf("  %c %-22s = %-10s (default %s)\n      %s\n",
		       dfi_param_set(i) ? '*' : ' ', p->name, dfi_param_str(i),
		       *p->def ? p->def : "\"\"", p->help);
	}
}

/* Split a dat.conf line into its first 7 tokens (quotes handled). */
static int tokens(char *line, char **tok, int max)
{
	int n = 0;
	char *p = line;

	while (*p && n < max) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p || *p == '#' || *p == '\n')
			break;
		if (*p == '"') {
			tok[n++] = ++p;
			while (*p && *p != '"')
				p++;
		} else {
			tok[n++] = p;
			while (*p && *p != ' ' && *p != '\t' && *p != '\n')
				p++;
		}
		if (*p)
			*p++ = '\0';
	}
	return n;
}

static int print_ias(const char *conf, int try_open, int all)
{
	char line[2048];
	FILE *f = fopen(conf, "r");
	int bad = 0;

	if (!f) {
		perror(conf);
		return 1;
	}
	printf("\nIAs in %s\n", conf);
	while (fgets(line, sizeof(line), f)) {
		char *t[8];
		DAT_IA_HANDLE ia;
		DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
		DAT_RETURN rc;
		const char *major = "", *minor = "";

		if (tokens(line, t, 8) < 7)
			continue;
		printf("  %-16s %-10s %s \"%s\"\n", t[0], t[3], t[4], t[6]);
		if (!try_open || strcmp(t[3], "default") != 0)
			continue;	/* the registry ignores nondefault entries */
		if (!all && !strstr(t[4], "libdaplofi"))
			continue;	/* another provider's entry: not ours to judge */
		fflush(stdout);		/* our log lines, if any, follow on stderr */
		rc = dat_ia_open(t[0], 8, &async, &ia);
		if (rc == DAT_SUCCESS) {
			printf("      opens\n");
			dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
		} else {
			dat_strerror(rc, &major, &minor);
			printf("      does not open: %s %s\n", major, minor);
			bad++;
		}
		fflush(stdout);
	}
	fclose(f);
	return bad ? 2 : 0;
}

int main(int argc, char **argv)
{
	const char *conf = getenv("DAT_OVERRIDE");
	int only_params = 0, try_open = 1, all = 0, c;

	while ((c = getopt(argc, argv, "acf:qh")) != -1) {
		switch (c) {
		case 'a': all = 1; break;
		case 'c': only_params = 1; break;
		case 'f': conf = optarg; break;
		case 'q': try_open = 0; break;
		default:
			fprintf(stderr, "usage: %s [-a] [-c] [-f dat.conf] [-q]\n", argv[0]);
			return c == 'h' ? 0 : 1;
		}
	}
	/* libdat2 reads its dat.conf when it is loaded, before main(): to open
	 * the IAs of another file, run again with DAT_OVERRIDE naming it. */
	if (conf && *conf && (!getenv("DAT_OVERRIDE") ||
			      strcmp(getenv("DAT_OVERRIDE"), conf) != 0)) {
		setenv("DAT_OVERRIDE", conf, 1);
		execv("/proc/self/exe", argv);
		perror("daplofi-info: re-executing with DAT_OVERRIDE");
		return 1;
	}
	print_params();
	if (only_params)
		return 0;
	return print_ias(conf && *conf ? conf : "/etc/dat.conf", try_open, all);
}
