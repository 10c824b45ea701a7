// SPDX-License-Identifier: GPL-2.0
/*
 * Test-harness module, never shipped: hits a WARN_ON at load so the selftest runner's splat
 * detector can be shown to find it (run.sh, TB_SPLAT_SELFTEST=1).
 */
#include <linux/module.h>
#include <linux/bug.h>

static int __init warn_test_init(void)
{
	WARN_ON(1);
	return 0;
}

static void __exit warn_test_exit(void)
{
}

module_init(warn_test_init);
module_exit(warn_test_exit);
MODULE_DESCRIPTION("rdmadisk selftest: trigger a WARN_ON");
MODULE_LICENSE("GPL");
