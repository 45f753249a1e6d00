/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rvrdma: C wrappers for what Rust cannot call directly (static inline functions and macros of
 * the rdma, net and udp headers). Nothing here holds driver logic.
 */
#ifndef RVRDMA_HELPERS_H
#define RVRDMA_HELPERS_H

#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/ib_addr.h>

struct ib_device *rvr_ib_alloc_device(size_t size);
struct net_device *rvr_netdev_notifier_info_to_dev(void *info);
enum ib_port_state rvr_ib_get_curr_port_state(struct net_device *ndev);
enum ib_mtu rvr_ib_mtu_int_to_enum(int mtu);
bool rvr_netif_is_up(struct net_device *ndev);
unsigned int rvr_netdev_mtu(struct net_device *ndev);
void rvr_dev_hold(struct net_device *ndev);
void rvr_dev_put(struct net_device *ndev);
const char *rvr_netdev_name(struct net_device *ndev);
bool rvr_netdev_is_vlan(struct net_device *ndev);
void rvr_netdev_eui64(struct net_device *ndev, __be64 *guid);
int rvr_ib_is_udata_in_empty(struct ib_udata *udata);
int rvr_ib_respond_empty_udata(struct ib_udata *udata);
const char *rvr_ib_device_name(struct ib_device *ibdev);
void rvr_ib_device_pin(struct ib_device *ibdev);
void rvr_ib_device_unpin(struct ib_device *ibdev);
bool rvr_ib_device_try_get(struct ib_device *ibdev);

/* Locks and work queues. */
unsigned long rvr_spin_lock_irqsave(spinlock_t *lock);
void rvr_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags);
bool rvr_spin_trylock_irqsave(spinlock_t *lock, unsigned long *flags);
struct workqueue_struct *rvr_alloc_wq(const char *name);
struct workqueue_struct *rvr_alloc_percpu_wq(const char *name);
struct workqueue_struct *rvr_alloc_spin_wq(const char *name);
/* Work queued on it runs in softirq context on the CPU it was queued for. */
struct workqueue_struct *rvr_alloc_bh_wq(const char *name);
struct workqueue_struct *rvr_alloc_any_cpu_wq(const char *name);
/* queue_work_on() for a bound queue: on @cpu if it is online, else on this CPU. */
bool rvr_queue_work_on_online(int cpu, struct workqueue_struct *wq, struct work_struct *work);

/* User data of a verb. */
int rvr_ib_copy_from_udata(void *dst, struct ib_udata *udata, size_t len);
int rvr_ib_copy_to_udata(struct ib_udata *udata, const void *src, size_t len);
bool rvr_ib_is_udata_cleared(struct ib_udata *udata, size_t offset, size_t len);
struct ib_ucontext *rvr_ib_udata_ucontext(struct ib_udata *udata);

/* KUnit. */
void rvr_kunit_skip_current(const char *reason);

#endif
