/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rvrdma: the per-device switches, as sysfs attributes of the ib device
 * (/sys/class/infiniband/<dev>/<switch>). The attribute plumbing is C (DEVICE_ATTR_RW and an
 * attribute group); what a switch means is the driver's, reached through two callbacks.
 */
#ifndef RVRDMA_SYSFS_H
#define RVRDMA_SYSFS_H

#include <rdma/ib_verbs.h>

/* The switches. */
#define RVR_SWITCH_APM_BONDING 0
#define RVR_SWITCH_RX_SPREAD 1
#define RVR_SWITCH_TX_BURST 2
#define RVR_SWITCH_TX_PAGED 3

/* Reads switch `sw` of `ibdev`: 0 or 1, or a negative errno. */
typedef int (*rvr_switch_get_t)(struct ib_device *ibdev, unsigned int sw);
/* Sets switch `sw` of `ibdev`: 0 or a negative errno. */
typedef int (*rvr_switch_set_t)(struct ib_device *ibdev, unsigned int sw, bool on);

/* Sets the driver's callbacks (before the first device registers). */
void rvr_sysfs_set_switch_ops(rvr_switch_get_t get, rvr_switch_set_t set);

/* The attribute group of every rvrdma device (`ib_device_ops.device_group`). */
extern const struct attribute_group rvr_dev_attr_group;

#endif
