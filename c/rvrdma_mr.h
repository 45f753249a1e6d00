/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rvrdma: C wrappers for the static inline functions the memory-region verbs need (umem pinning
 * and scatterlist page iteration). Nothing here holds driver logic.
 */
#ifndef RVRDMA_MR_H
#define RVRDMA_MR_H

#include <linux/scatterlist.h>
#include <rdma/ib_umem.h>

struct ib_umem *rvr_ib_umem_get_va(struct ib_device *device, unsigned long addr, size_t size,
				   int access);
size_t rvr_ib_umem_num_pages(struct ib_umem *umem);
struct sg_table *rvr_ib_umem_sgt(struct ib_umem *umem);
struct page *rvr_sg_page_iter_page(struct sg_page_iter *piter);

#endif
