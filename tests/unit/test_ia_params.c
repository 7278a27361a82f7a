/*
 * The ia_params parser (src/util/ia_params.c), shared by dat_provider_init
 * and daplofi-info: the fields of a good entry, and for each kind of bad
 * one the kind and the word it is about, which daplofi-info turns into a
 * fix.  Each test breaks if the parser accepts what it should refuse,
 * reports another kind, or names another word.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "util/ia_params.h"

static void test_good(void **state)
{
	struct dfi_config c;

	(void)state;
	dfi_ia_params_parse("tcp lo", &c);
	assert_int_equal(c.err, DFI_CFG_OK);
	assert_string_equal(c.error, "");
	assert_string_equal(c.prov_name, "tcp");
	assert_string_equal(c.where, "lo");
	assert_string_equal(c.domain, "");
	assert_int_equal(c.mtu, 2048);
	assert_false(c.rdma_read);
	assert_false(c.ext_ofi);	/* the IA reports DAT_EXTENSION_IB */
	assert_true(c.atomics);		/* native or emulated */

	dfi_ia_params_parse("tcp lo atomics=0", &c);
	assert_int_equal(c.err, DFI_CFG_OK);
	assert_false(c.atomics);
	dfi_ia_params_parse("tcp lo atomics=1", &c);
	assert_int_equal(c.err, DFI_CFG_OK);
	assert_true(c.atomics);

	dfi_ia_params_parse("tcp lo ext=ofi", &c);
	assert_int_equal(c.err, DFI_CFG_OK);
	assert_true(c.ext_ofi);
	dfi_ia_params_parse("tcp lo ext=ib", &c);
	assert_int_equal(c.err, DFI_CFG_OK);
	assert_false(c.ext_ofi);

	dfi_ia_params_parse("net\t127.0.0.1  mtu=4096 rdma_read=1 domain=lo", &c);
	assert_int_equal(c.err, DFI_CFG_OK);
	assert_string_equal(c.prov_name, "net");
	assert_string_equal(c.where, "127.0.0.1");
	assert_int_equal(c.mtu, 4096);
	assert_true(c.rdma_read);
	assert_string_equal(c.domain, "lo");
}

static void expect(const char *params, enum dfi_cfg_err err, const char *bad)
{
	struct dfi_config c;

	dfi_ia_params_parse(params, &c);
	if (c.err != err || strcmp(c.bad, bad) != 0 || !c.error[0])
		fail_msg("\"%s\": kind %d word '%s' error '%s', expected kind %d word '%s'",
			 params ? params : "(null)", c.err, c.bad, c.error, err, bad);
}

static void test_bad(void **state)
{
	char longer[600];

	(void)state;
	memset(longer, 'x', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	expect(NULL, DFI_CFG_TOO_LONG, "");
	expect(longer, DFI_CFG_TOO_LONG, "");
	expect("", DFI_CFG_SHAPE, "");
	expect("tcp", DFI_CFG_SHAPE, "");
	expect("a=b lo", DFI_CFG_PROVIDER, "a=b");
	expect("tcp lo frobnicate=1", DFI_CFG_KEY, "frobnicate");
	expect("tcp lo mtu=100", DFI_CFG_VALUE, "mtu");
	expect("tcp lo rdma_read=2", DFI_CFG_VALUE, "rdma_read");
	expect("tcp lo ext=iw", DFI_CFG_VALUE, "ext");
	expect("tcp lo atomics=yes", DFI_CFG_VALUE, "atomics");
	expect("tcp lo ext=", DFI_CFG_VALUE, "ext");
	expect("tcp lo extra", DFI_CFG_WORD, "extra");
	/* the first problem is the one reported */
	expect("tcp lo bogus=1 mtu=1", DFI_CFG_KEY, "bogus");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_bad),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
