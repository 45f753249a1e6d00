/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rvrdma: the page table of an on-demand-paging MR (ib_umem_odp + mmu interval notifier).
 *
 * The MR's own table holds, for each 4 KiB page of the range, the page and whether it may be
 * written, or nothing. Only a fault (process context, under umem_mutex once hmm_range_fault's
 * result is known to be current) fills entries; the mmu notifier clears them (under umem_mutex)
 * before the kernel may unmap or free a page. Copies take the table's IRQ-safe spinlock, so
 * they run in any context, and a page they see stays mapped until they drop the lock: the
 * notifier waits for the lock before it returns.
 */
#ifndef RVRDMA_ODP_H
#define RVRDMA_ODP_H

#include <linux/types.h>

struct ib_device;
struct rvr_odp;

/* Registers user memory [addr, addr + size) on demand (process context). ERR_PTR on failure. */
struct rvr_odp *rvr_odp_get(struct ib_device *dev, unsigned long addr, size_t size, int access);
/* Stops the notifier and frees everything; nothing may use @odp any more (process context). */
void rvr_odp_release(struct rvr_odp *odp);
/*
 * Makes bytes [pos, pos + len) of the range resident (@write: writable too) when @fault, or
 * only takes the pages that are resident now (prefetch without fault). Process context.
 */
int rvr_odp_fault(struct rvr_odp *odp, u64 pos, u64 len, bool write, bool fault);
/* Whether the MR's memory may be written at all (ib_umem.writable). */
bool rvr_odp_writable(const struct rvr_odp *odp);
/* True when every page of [pos, pos + len) is in the table (@write: writable). Any context. */
bool rvr_odp_present(struct rvr_odp *odp, u64 pos, u64 len, bool write);
/*
 * Copies @len bytes between @buf and position @pos (@to_mr: into the MR). -EAGAIN when a page
 * is not in the table (nothing copied), -ERANGE outside the range. Any context.
 */
int rvr_odp_copy(struct rvr_odp *odp, u64 pos, void *buf, size_t len, bool to_mr);
/*
 * An 8-byte atomic at position @pos (8-aligned address): compare-and-swap (@cmp_swap, compare
 * @a, swap @b) or fetch-and-add (@a). Stores the old value in @old. Errors as rvr_odp_copy,
 * -EINVAL if misaligned. Any context.
 */
int rvr_odp_atomic(struct rvr_odp *odp, u64 pos, bool cmp_swap, u64 a, u64 b, u64 *old);

#endif
