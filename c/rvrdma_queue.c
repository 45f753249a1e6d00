// SPDX-License-Identifier: GPL-2.0
/*
 * rvrdma: wrappers for static inline functions and macros the ring and mmap code calls from
 * Rust. Each is a one-liner; driver logic stays in Rust.
 */
#include "rvrdma_queue.h"

void *rvr_vmalloc_user(unsigned long size)
{
	return vmalloc_user(size);
}

/* May sleep (when it cannot allocate, it waits for the grace period itself). */
void rvr_vfree_after_rcu(void *p)
{
	kvfree_rcu_mightsleep(p);
}

u64 rvr_mmap_get_offset(const struct rdma_user_mmap_entry *entry)
{
	return rdma_user_mmap_get_offset(entry);
}

unsigned int rvr_cache_line_size(void)
{
	return cache_line_size();
}
