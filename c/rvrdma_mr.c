// SPDX-License-Identifier: GPL-2.0
/*
 * rvrdma: wrappers for the static inline functions of the memory-region verbs, called from Rust.
 * Each is a one-liner; driver logic stays in Rust.
 */
#include "rvrdma_mr.h"

struct ib_umem *rvr_ib_umem_get_va(struct ib_device *device, unsigned long addr, size_t size,
				   int access)
{
	return ib_umem_get_va(device, addr, size, access);
}

size_t rvr_ib_umem_num_pages(struct ib_umem *umem)
{
	return ib_umem_num_pages(umem);
}

struct sg_table *rvr_ib_umem_sgt(struct ib_umem *umem)
{
	return &umem->sgt_append.sgt;
}

struct page *rvr_sg_page_iter_page(struct sg_page_iter *piter)
{
	return sg_page_iter_page(piter);
}
