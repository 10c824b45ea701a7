// SPDX-License-Identifier: GPL-2.0
/*
 * Test bed only: holds one count of sk_memalloc_socks() for as long as the VM runs.
 *
 * rdmadisk takes a count with its first TCP connection and gives it back at unload
 * (rust/socket.rs, MemallocSocksHold). Each 0 <-> 1 move of that count patches a static
 * key in the network stack's hot paths, and under TCG a CPU running the patched code at that
 * moment can take the patch's int3 as an Oops (seen: in __alloc_skb during rmmod rdmadisk).
 * Loaded by the VM's agent at boot, while nothing else runs, this keeps the count at 1 or
 * more, so that loading and unloading rdmadisk patches nothing. Real hardware needs none of
 * this; the module is never unloaded during a run.
 */
#include <linux/module.h>
#include <net/sock.h>

static int __init tb_memalloc_init(void)
{
	static_branch_inc(&memalloc_socks_key);
	return 0;
}

static void __exit tb_memalloc_exit(void)
{
	static_branch_dec(&memalloc_socks_key);
}

module_init(tb_memalloc_init);
module_exit(tb_memalloc_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("rdmadisk test bed: a permanent count of sk_memalloc_socks()");
