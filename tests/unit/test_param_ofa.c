/*
 * OFA uDAPL's variables (src/util/param.c, dfi_ofa_vars): each one OFA
 * 2.1.10 reads is in the table; the ones dapl-ofi honours as a DAPL_OFI_
 * variable give that variable its value, the DAPL_OFI_ name winning when
 * both are set; at start-up each set variable draws exactly one line: an
 * info line for an honoured one (saying which name was used), a warning
 * for an ignored one.  Each test breaks if a value is not taken, taken
 * over the DAPL_OFI_ name, or a line is missing or doubled.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/ia_params.h"
#include "util/log.h"
#include "util/param.h"

extern char **environ;

/* Every DAPL_* variable out of the environment (the runner sets some). */
static int clean_env(void **state)
{
	(void)state;
	for (int pass = 0; pass < 64; pass++) {
		char name[128] = "";

		for (char **e = environ; e && *e; e++)
			if (strncmp(*e, "DAPL_", 5) == 0) {
				snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
				break;
			}
		if (!name[0])
			return 0;
		unsetenv(name);
	}
	return -1;
}

/* The names in OFA uDAPL 2.1.10's libdaplofa, libdaploscm and
 * libdaploucm.so.2 (Debian's libdapl2: strings | grep '^DAPL_'). */
static const char *const ofa_2_1_10[] = {
	"DAPL_ACK_RETRY", "DAPL_ACK_TIMER", "DAPL_CM_ARP_RETRY_COUNT", "DAPL_CM_ARP_TIMEOUT_MS",
	"DAPL_CM_ROUTE_RETRY_COUNT", "DAPL_CM_ROUTE_TIMEOUT_MS", "DAPL_CM_TOS", "DAPL_DBG_DEST",
	"DAPL_DBG_LEVEL", "DAPL_DBG_SYS_MEM", "DAPL_DBG_TYPE", "DAPL_GLOBAL_ROUTING",
	"DAPL_HOP_LIMIT", "DAPL_IB_MTU", "DAPL_IB_PKEY", "DAPL_IB_SL", "DAPL_LOOPBACK",
	"DAPL_MAX_CM_RESPONSE_TIME", "DAPL_MAX_CM_RETRIES", "DAPL_MAX_INLINE",
	"DAPL_NETWORK_NODES", "DAPL_NETWORK_PPN", "DAPL_NETWORK_PROCESS_NUM",
	"DAPL_NETWORK_TRESHOLD", "DAPL_RNR_RETRY", "DAPL_RNR_TIMER", "DAPL_SCM_NETDEV",
	"DAPL_TCLASS", "DAPL_UCM_ARRAY_BITS", "DAPL_UCM_CQ_SIZE", "DAPL_UCM_DREP_TIME",
	"DAPL_UCM_DREQ_RETRY", "DAPL_UCM_ENTRY_BITS", "DAPL_UCM_QP_SIZE", "DAPL_UCM_REP_TIME",
	"DAPL_UCM_RETRY", "DAPL_UCM_RTU_TIME", "DAPL_UCM_TIMER", "DAPL_UCM_TX_BURST",
	"DAPL_UCM_WAIT_TIME", "DAPL_WR_MAX",
};

static void test_table(void **state)
{
	size_t n = sizeof(ofa_2_1_10) / sizeof(ofa_2_1_10[0]);

	(void)state;
	assert_int_equal(dfi_ofa_nvars, (int)n);
	for (size_t i = 0; i < n; i++) {
		int found = 0;

		for (int k = 0; k < dfi_ofa_nvars; k++)
			found += strcmp(dfi_ofa_vars[k].name, ofa_2_1_10[i]) == 0;
		assert_int_equal(found, 1);
	}
	for (int k = 0; k < dfi_ofa_nvars; k++) {
		assert_non_null(dfi_ofa_vars[k].why);
		if (dfi_ofa_vars[k].use != DFI_OFA_IGNORED)
			assert_true(dfi_ofa_vars[k].as < DFI_P_COUNT);
	}
}

static void test_mtu(void **state)
{
	struct dfi_config c;

	(void)state;
	assert_int_equal(dfi_param_int(DFI_P_MTU), 2048);
	assert_false(dfi_param_set(DFI_P_MTU));
	setenv("DAPL_IB_MTU", "4096", 1);
	assert_int_equal(dfi_param_int(DFI_P_MTU), 4096);
	assert_true(dfi_param_set(DFI_P_MTU));
	dfi_ia_params_parse("tcp lo", &c);
	assert_int_equal(c.err, DFI_CFG_OK);
	assert_int_equal(c.mtu, 4096);
	dfi_ia_params_parse("tcp lo mtu=1024", &c);	/* the entry's own wins */
	assert_int_equal(c.mtu, 1024);
	setenv("DAPL_OFI_MTU", "512", 1);		/* the DAPL_OFI_ name wins */
	assert_int_equal(dfi_param_int(DFI_P_MTU), 512);
	dfi_ia_params_parse("tcp lo", &c);
	assert_int_equal(c.mtu, 512);
	unsetenv("DAPL_OFI_MTU");
	setenv("DAPL_IB_MTU", "lots", 1);		/* not a number: not taken */
	assert_int_equal(dfi_param_int(DFI_P_MTU), 2048);
	assert_false(dfi_param_set(DFI_P_MTU));
	unsetenv("DAPL_IB_MTU");
}

static void test_ack(void **state)
{
	(void)state;
	assert_int_equal(dfi_param_int(DFI_P_PEER_TIMEOUT_MS), 10000);
	/* (3 + 1) x 4.096 us x 2^14 = 268.4 ms, rounded up */
	setenv("DAPL_ACK_TIMER", "14", 1);
	setenv("DAPL_ACK_RETRY", "3", 1);
	assert_int_equal(dfi_param_int(DFI_P_PEER_TIMEOUT_MS), 269);
	/* the retries alone: OFA's timer, 16 (268 ms) */
	unsetenv("DAPL_ACK_TIMER");
	setenv("DAPL_ACK_RETRY", "0", 1);
	assert_int_equal(dfi_param_int(DFI_P_PEER_TIMEOUT_MS), 269);
	/* the timer alone: OFA's 7 retries */
	unsetenv("DAPL_ACK_RETRY");
	setenv("DAPL_ACK_TIMER", "20", 1);
	assert_int_equal(dfi_param_int(DFI_P_PEER_TIMEOUT_MS), 34360);
	/* timer 0: IB waits for ever, as DAPL_OFI_PEER_TIMEOUT_MS=0 */
	setenv("DAPL_ACK_TIMER", "0", 1);
	assert_int_equal(dfi_param_int(DFI_P_PEER_TIMEOUT_MS), 0);
	/* out of IB's 5 bits: not taken */
	setenv("DAPL_ACK_TIMER", "32", 1);
	assert_int_equal(dfi_param_int(DFI_P_PEER_TIMEOUT_MS), 10000);
	setenv("DAPL_ACK_TIMER", "14", 1);
	setenv("DAPL_OFI_PEER_TIMEOUT_MS", "500", 1);
	assert_int_equal(dfi_param_int(DFI_P_PEER_TIMEOUT_MS), 500);
	unsetenv("DAPL_OFI_PEER_TIMEOUT_MS");
	unsetenv("DAPL_ACK_TIMER");
}

static void test_inline(void **state)
{
	(void)state;
	assert_int_equal(dfi_param_int(DFI_P_INJECT), 1);
	setenv("DAPL_MAX_INLINE", "0", 1);
	assert_int_equal(dfi_param_int(DFI_P_INJECT), 0);
	setenv("DAPL_MAX_INLINE", "64", 1);
	assert_int_equal(dfi_param_int(DFI_P_INJECT), 1);
	setenv("DAPL_MAX_INLINE", "0", 1);
	setenv("DAPL_OFI_INJECT", "1", 1);
	assert_int_equal(dfi_param_int(DFI_P_INJECT), 1);
	unsetenv("DAPL_OFI_INJECT");
	unsetenv("DAPL_MAX_INLINE");
}

/* The lines dfi_param_check_unknown writes (stderr) at this threshold. */
static char *start_up_lines(enum dfi_log_level lvl)
{
	static char buf[8192];
	FILE *f = tmpfile();
	int saved = dup(2);
	size_t n;

	assert_non_null(f);
	assert_true(saved >= 0);
	for (int i = 0; i < DFI_SS_COUNT; i++)
		dfi_log_threshold[i] = (unsigned char)lvl;
	fflush(stderr);
	dup2(fileno(f), 2);
	dfi_param_check_unknown();
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	for (int i = 0; i < DFI_SS_COUNT; i++)
		dfi_log_threshold[i] = DFI_LOG_WARN;
	return buf;
}

static int count(const char *text, const char *what)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, what)); p++)
		n++;
	return n;
}

static void test_lines(void **state)
{
	const char *out;

	(void)state;
	setenv("DAPL_IB_SL", "0", 1);
	setenv("DAPL_UCM_QP_SIZE", "8", 1);
	setenv("DAPL_IB_MTU", "4096", 1);
	setenv("DAPL_OFI_MTU", "1024", 1);
	setenv("DAPL_MAX_INLINE", "0", 1);
	setenv("DAPL_OFI_BOGUS", "1", 1);
	setenv("DAPL_SOMETHING_ELSE", "1", 1);	/* not OFA's: not ours to judge */
	out = start_up_lines(DFI_LOG_INFO);
	assert_int_equal(count(out, "\n"), 5);
	assert_int_equal(count(out, "DAPL_IB_SL=0 ignored (OFA uDAPL: "), 1);
	assert_int_equal(count(out, "DAPL_UCM_QP_SIZE=8 ignored (OFA uDAPL: "), 1);
	assert_int_equal(count(out, "info  ia: check_ofa: DAPL_OFI_MTU=1024 used, not OFA uDAPL's "
			       "DAPL_IB_MTU=4096"), 1);
	assert_int_equal(count(out, "info  ia: check_ofa: DAPL_MAX_INLINE=0 (OFA uDAPL: inline "
			       "send size) honoured as DAPL_OFI_INJECT=0"), 1);
	assert_int_equal(count(out, "unknown variable DAPL_OFI_BOGUS ignored"), 1);
	assert_int_equal(count(out, "DAPL_SOMETHING_ELSE"), 0);
	/* at the default threshold the ignored ones still show: not silence */
	out = start_up_lines(DFI_LOG_WARN);
	assert_int_equal(count(out, "\n"), 3);
	assert_int_equal(count(out, "warn  ia: check_ofa: DAPL_IB_SL=0 ignored"), 1);
	assert_int_equal(count(out, "warn  ia: check_ofa: DAPL_UCM_QP_SIZE=8 ignored"), 1);
	clean_env(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_table, clean_env),
		cmocka_unit_test_setup(test_mtu, clean_env),
		cmocka_unit_test_setup(test_ack, clean_env),
		cmocka_unit_test_setup(test_inline, clean_env),
		cmocka_unit_test_setup(test_lines, clean_env),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
