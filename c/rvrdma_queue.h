/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rvrdma: C wrappers for the shared-ring and mmap code (static inline functions and macros of
 * the vmalloc and rdma mmap headers). Nothing here holds driver logic.
 */
#ifndef RVRDMA_QUEUE_H
#define RVRDMA_QUEUE_H

#include <linux/vmalloc.h>
#include <linux/cache.h>
#include <linux/rcupdate.h>
#include <rdma/ib_verbs.h>

void *rvr_vmalloc_user(unsigned long size);
void rvr_vfree_after_rcu(void *p);
u64 rvr_mmap_get_offset(const struct rdma_user_mmap_entry *entry);
unsigned int rvr_cache_line_size(void);

#endif
