// SPDX-License-Identifier: GPL-2.0
/*
 * rvrdma: the page table of an on-demand-paging MR (see rvrdma_odp.h). This is mm glue around
 * ib_umem_odp and its mmu interval notifier; which memory a packet may reach, and what happens
 * when a page is missing, is decided in Rust (rust/driver/mr_table.rs, docs/odp.md).
 */
#include <linux/highmem.h>
#include <linux/hmm.h>
#include <linux/mmu_notifier.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <rdma/ib_umem_odp.h>
#include "rvrdma_odp.h"

/* Low bit of a table entry: the page is mapped writable. */
#define RVR_ODP_WRITE 1UL

struct rvr_odp {
	struct ib_umem_odp *umem;
	/* Guards @pages; IRQ-safe: copies run in softirq under a QP lock. */
	spinlock_t lock;
	/* First page-aligned address of the notifier range, first byte, bytes. */
	unsigned long start;
	unsigned long addr;
	u64 length;
	size_t npages;
	/* Per 4 KiB page from @start: its struct page | RVR_ODP_WRITE, or 0 (not resident). */
	unsigned long *pages;
};

static bool rvr_odp_invalidate(struct mmu_interval_notifier *mni,
			       const struct mmu_notifier_range *range, unsigned long cur_seq)
{
	struct ib_umem_odp *umem = container_of(mni, struct ib_umem_odp, notifier);
	struct rvr_odp *odp;
	unsigned long start, end, flags;
	size_t i;

	if (!mmu_notifier_range_blockable(range))
		return false;
	mutex_lock(&umem->umem_mutex);
	mmu_interval_set_seq(mni, cur_seq);
	start = max(ib_umem_start(umem), range->start);
	end = min(ib_umem_end(umem), range->end);
	odp = umem->private;
	if (odp && start < end) {
		/* No copy uses these pages once the lock is ours. */
		spin_lock_irqsave(&odp->lock, flags);
		for (i = (start - odp->start) >> PAGE_SHIFT;
		     i <= (end - 1 - odp->start) >> PAGE_SHIFT && i < odp->npages; i++)
			odp->pages[i] = 0;
		spin_unlock_irqrestore(&odp->lock, flags);
	}
	if (start < end)
		ib_umem_odp_unmap_dma_pages(umem, start, end);
	mutex_unlock(&umem->umem_mutex);
	return true;
}

static const struct mmu_interval_notifier_ops rvr_odp_ops = {
	.invalidate = rvr_odp_invalidate,
};

struct rvr_odp *rvr_odp_get(struct ib_device *dev, unsigned long addr, size_t size, int access)
{
	struct ib_umem_odp *umem;
	struct rvr_odp *odp;

	odp = kzalloc(sizeof(*odp), GFP_KERNEL);
	if (!odp)
		return ERR_PTR(-ENOMEM);
	spin_lock_init(&odp->lock);
	umem = ib_umem_odp_get(dev, addr, size, access, &rvr_odp_ops);
	if (IS_ERR(umem)) {
		kfree(odp);
		return ERR_CAST(umem);
	}
	odp->umem = umem;
	odp->start = ib_umem_start(umem);
	odp->addr = addr;
	odp->length = size;
	odp->npages = (ib_umem_end(umem) - ib_umem_start(umem)) >> PAGE_SHIFT;
	odp->pages = kvcalloc(odp->npages, sizeof(*odp->pages), GFP_KERNEL);
	if (!odp->pages) {
		ib_umem_odp_release(umem);
		kfree(odp);
		return ERR_PTR(-ENOMEM);
	}
	/* The notifier may already run: it finds the table under umem_mutex. */
	mutex_lock(&umem->umem_mutex);
	umem->private = odp;
	mutex_unlock(&umem->umem_mutex);
	return odp;
}

void rvr_odp_release(struct rvr_odp *odp)
{
	/* Removes the notifier (waiting for a running invalidation) and unmaps everything. */
	ib_umem_odp_release(odp->umem);
	kvfree(odp->pages);
	kfree(odp);
}

bool rvr_odp_writable(const struct rvr_odp *odp)
{
	return odp->umem->umem.writable;
}

/* The table indexes of bytes [pos, pos + len) (len > 0), or false outside the range. */
static bool rvr_odp_span(const struct rvr_odp *odp, u64 pos, u64 len, size_t *first, size_t *last)
{
	u64 abs;

	if (!len || len > odp->length || pos > odp->length - len)
		return false;
	abs = odp->addr - odp->start + pos;
	*first = abs >> PAGE_SHIFT;
	*last = (abs + len - 1) >> PAGE_SHIFT;
	return *last < odp->npages;
}

static bool rvr_odp_entry_ok(unsigned long e, bool write)
{
	return e && (!write || (e & RVR_ODP_WRITE));
}

/* With odp->lock held. */
static bool rvr_odp_all_ok(const struct rvr_odp *odp, size_t first, size_t last, bool write)
{
	size_t i;

	for (i = first; i <= last; i++)
		if (!rvr_odp_entry_ok(odp->pages[i], write))
			return false;
	return true;
}

int rvr_odp_fault(struct rvr_odp *odp, u64 pos, u64 len, bool write, bool fault)
{
	struct ib_umem_odp *umem = odp->umem;
	size_t first, last, i;
	unsigned long flags, pfn;
	bool ok;
	int np;

	if (!rvr_odp_span(odp, pos, len, &first, &last))
		return -ERANGE;
	if (write && !umem->umem.writable)
		return -EPERM;
	np = ib_umem_odp_map_dma_and_lock(umem, odp->addr + pos, len, write ? HMM_PFN_WRITE : 0,
					  fault);
	if (np < 0)
		return np;
	/* umem_mutex held and the notifier sequence unchanged: the pfns are current. */
	spin_lock_irqsave(&odp->lock, flags);
	for (i = first; i <= last; i++) {
		pfn = umem->map.pfn_list[i];
		if (!(pfn & HMM_PFN_VALID) || (pfn & HMM_PFN_ERROR))
			continue;
		odp->pages[i] = (unsigned long)hmm_pfn_to_page(pfn) |
				((pfn & HMM_PFN_WRITE) ? RVR_ODP_WRITE : 0);
	}
	ok = rvr_odp_all_ok(odp, first, last, write);
	spin_unlock_irqrestore(&odp->lock, flags);
	mutex_unlock(&umem->umem_mutex);
	return ok || !fault ? 0 : -EFAULT;
}

bool rvr_odp_present(struct rvr_odp *odp, u64 pos, u64 len, bool write)
{
	size_t first, last;
	unsigned long flags;
	bool ok;

	if (!len)
		return true;
	if (!rvr_odp_span(odp, pos, len, &first, &last))
		return false;
	spin_lock_irqsave(&odp->lock, flags);
	ok = rvr_odp_all_ok(odp, first, last, write);
	spin_unlock_irqrestore(&odp->lock, flags);
	return ok;
}

int rvr_odp_copy(struct rvr_odp *odp, u64 pos, void *buf, size_t len, bool to_mr)
{
	size_t first, last, i, off, n, done = 0;
	unsigned long flags;
	u64 abs;
	void *va;

	if (!len)
		return 0;
	if (!rvr_odp_span(odp, pos, len, &first, &last))
		return -ERANGE;
	abs = odp->addr - odp->start + pos;
	spin_lock_irqsave(&odp->lock, flags);
	if (!rvr_odp_all_ok(odp, first, last, to_mr)) {
		spin_unlock_irqrestore(&odp->lock, flags);
		return -EAGAIN;
	}
	for (i = first; i <= last; i++) {
		off = (abs + done) & ~PAGE_MASK;
		n = min_t(size_t, PAGE_SIZE - off, len - done);
		va = kmap_local_page((struct page *)(odp->pages[i] & ~RVR_ODP_WRITE));
		if (to_mr)
			memcpy(va + off, buf + done, n);
		else
			memcpy(buf + done, va + off, n);
		kunmap_local(va);
		done += n;
	}
	spin_unlock_irqrestore(&odp->lock, flags);
	return 0;
}

int rvr_odp_atomic(struct rvr_odp *odp, u64 pos, bool cmp_swap, u64 a, u64 b, u64 *old)
{
	size_t first, last;
	unsigned long flags;
	atomic64_t *v;
	u64 abs;
	void *va;

	if (!rvr_odp_span(odp, pos, 8, &first, &last))
		return -ERANGE;
	abs = odp->addr - odp->start + pos;
	if (abs & 7)
		return -EINVAL;
	spin_lock_irqsave(&odp->lock, flags);
	if (!rvr_odp_entry_ok(odp->pages[first], true)) {
		spin_unlock_irqrestore(&odp->lock, flags);
		return -EAGAIN;
	}
	va = kmap_local_page((struct page *)(odp->pages[first] & ~RVR_ODP_WRITE));
	v = va + (abs & ~PAGE_MASK);
	if (cmp_swap)
		*old = atomic64_cmpxchg(v, a, b);
	else
		*old = atomic64_fetch_add(a, v);
	kunmap_local(va);
	spin_unlock_irqrestore(&odp->lock, flags);
	return 0;
}
