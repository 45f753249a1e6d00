// SPDX-License-Identifier: GPL-2.0
/*
 * rvrdma: wrappers for static inline kernel functions and macros, called from Rust.
 * Each is a one-liner; driver logic stays in Rust.
 */
#include <linux/if_vlan.h>
#include <net/addrconf.h>
#include <kunit/test.h>
#include <kunit/test-bug.h>
#include "rvrdma_helpers.h"

/*
 * Like rdma_rxe and siw, devices start in init_net (in the default "shared" rdma netns mode they
 * are visible from every namespace). Allocating them in the netdev's namespace made ib_core move
 * them back to init_net when that namespace died, racing with their unregistration.
 */
struct ib_device *rvr_ib_alloc_device(size_t size)
{
	return _ib_alloc_device(size, &init_net);
}

struct net_device *rvr_netdev_notifier_info_to_dev(void *info)
{
	return netdev_notifier_info_to_dev(info);
}

enum ib_port_state rvr_ib_get_curr_port_state(struct net_device *ndev)
{
	return ib_get_curr_port_state(ndev);
}

enum ib_mtu rvr_ib_mtu_int_to_enum(int mtu)
{
	return ib_mtu_int_to_enum(mtu);
}

bool rvr_netif_is_up(struct net_device *ndev)
{
	return netif_running(ndev);
}

unsigned int rvr_netdev_mtu(struct net_device *ndev)
{
	return READ_ONCE(ndev->mtu);
}

void rvr_dev_hold(struct net_device *ndev)
{
	dev_hold(ndev);
}

void rvr_dev_put(struct net_device *ndev)
{
	dev_put(ndev);
}

const char *rvr_netdev_name(struct net_device *ndev)
{
	return ndev->name;
}

bool rvr_netdev_is_vlan(struct net_device *ndev)
{
	return is_vlan_dev(ndev);
}

void rvr_netdev_eui64(struct net_device *ndev, __be64 *guid)
{
	addrconf_addr_eui48((unsigned char *)guid, ndev->dev_addr);
}

int rvr_ib_is_udata_in_empty(struct ib_udata *udata)
{
	return ib_is_udata_in_empty(udata);
}

int rvr_ib_respond_empty_udata(struct ib_udata *udata)
{
	return ib_respond_empty_udata(udata);
}

const char *rvr_ib_device_name(struct ib_device *ibdev)
{
	return dev_name(&ibdev->dev);
}

void rvr_ib_device_pin(struct ib_device *ibdev)
{
	get_device(&ibdev->dev);
}

void rvr_ib_device_unpin(struct ib_device *ibdev)
{
	put_device(&ibdev->dev);
}

bool rvr_ib_device_try_get(struct ib_device *ibdev)
{
	return ib_device_try_get(ibdev);
}

unsigned long rvr_spin_lock_irqsave(spinlock_t *lock)
{
	unsigned long flags;

	spin_lock_irqsave(lock, flags);
	return flags;
}

void rvr_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags)
{
	spin_unlock_irqrestore(lock, flags);
}

bool rvr_spin_trylock_irqsave(spinlock_t *lock, unsigned long *flags)
{
	return spin_trylock_irqsave(lock, *flags);
}

struct workqueue_struct *rvr_alloc_wq(const char *name)
{
	return alloc_workqueue("%s", WQ_UNBOUND | WQ_MEM_RECLAIM, 0, name);
}

struct workqueue_struct *rvr_alloc_percpu_wq(const char *name)
{
	return alloc_workqueue("%s", WQ_HIGHPRI | WQ_MEM_RECLAIM | WQ_PERCPU, 0, name);
}

struct workqueue_struct *rvr_alloc_spin_wq(const char *name)
{
	return alloc_workqueue("%s", WQ_HIGHPRI | WQ_CPU_INTENSIVE | WQ_PERCPU, 0, name);
}

struct workqueue_struct *rvr_alloc_any_cpu_wq(const char *name)
{
	return alloc_workqueue("%s", WQ_UNBOUND | WQ_HIGHPRI | WQ_MEM_RECLAIM, 0, name);
}

struct workqueue_struct *rvr_alloc_bh_wq(const char *name)
{
	return alloc_workqueue("%s", WQ_BH | WQ_PERCPU, 0, name);
}

bool rvr_queue_work_on_online(int cpu, struct workqueue_struct *wq, struct work_struct *work)
{
	bool queued;

	/* With preemption off here, a CPU found online cannot finish going offline meanwhile. */
	preempt_disable();
	if (cpu < 0 || cpu >= nr_cpu_ids || !cpu_online(cpu))
		cpu = smp_processor_id();
	queued = queue_work_on(cpu, wq, work);
	preempt_enable();
	return queued;
}

int rvr_ib_copy_from_udata(void *dst, struct ib_udata *udata, size_t len)
{
	return ib_copy_from_udata(dst, udata, len);
}

int rvr_ib_copy_to_udata(struct ib_udata *udata, const void *src, size_t len)
{
	return ib_copy_to_udata(udata, (void *)src, len);
}

bool rvr_ib_is_udata_cleared(struct ib_udata *udata, size_t offset, size_t len)
{
	return ib_is_udata_cleared(udata, offset, len);
}

/* Every uverbs command runs with a bundle whose first member is the driver udata. */
struct ib_ucontext *rvr_ib_udata_ucontext(struct ib_udata *udata)
{
	return container_of(udata, struct uverbs_attr_bundle, driver_udata)->context;
}

/* Marks the KUnit test running in this task as skipped (a no-op outside one). */
void rvr_kunit_skip_current(const char *reason)
{
	struct kunit *test = kunit_get_current_test();

	if (test)
		kunit_mark_skipped(test, "%s", reason);
}
