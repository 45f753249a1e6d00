// SPDX-License-Identifier: GPL-2.0
/*
 * rvrdma: sysfs attributes of the ib device for the driver's per-device switches. Parsing and
 * printing only; the switches themselves live in Rust.
 */
#include <linux/device.h>
#include <linux/kstrtox.h>
#include <linux/sysfs.h>
#include "rvrdma_sysfs.h"

static rvr_switch_get_t rvr_switch_get;
static rvr_switch_set_t rvr_switch_set;

void rvr_sysfs_set_switch_ops(rvr_switch_get_t get, rvr_switch_set_t set)
{
	WRITE_ONCE(rvr_switch_get, get);
	WRITE_ONCE(rvr_switch_set, set);
}

static ssize_t rvr_switch_show(struct device *device, unsigned int sw, char *buf)
{
	rvr_switch_get_t get = READ_ONCE(rvr_switch_get);
	int v;

	if (!get)
		return -ENODEV;
	v = get(rdma_device_to_ibdev(device), sw);
	if (v < 0)
		return v;
	return sysfs_emit(buf, "%d\n", v);
}

static ssize_t rvr_switch_store(struct device *device, unsigned int sw, const char *buf,
				size_t count)
{
	rvr_switch_set_t set = READ_ONCE(rvr_switch_set);
	bool on;
	int ret;

	ret = kstrtobool(buf, &on);
	if (ret)
		return ret;
	if (!set)
		return -ENODEV;
	ret = set(rdma_device_to_ibdev(device), sw, on);
	return ret ? ret : count;
}

/* One switch's attribute: NAME_show, NAME_store and dev_attr_NAME, for switch SW. */
#define RVR_SWITCH_ATTR(name, sw)                                                          \
	static ssize_t name##_show(struct device *device, struct device_attribute *attr,  \
				   char *buf)                                              \
	{                                                                                  \
		return rvr_switch_show(device, sw, buf);                                   \
	}                                                                                  \
	static ssize_t name##_store(struct device *device, struct device_attribute *attr, \
				    const char *buf, size_t count)                         \
	{                                                                                  \
		return rvr_switch_store(device, sw, buf, count);                           \
	}                                                                                  \
	static DEVICE_ATTR_RW(name)

RVR_SWITCH_ATTR(apm_bonding, RVR_SWITCH_APM_BONDING);
RVR_SWITCH_ATTR(rx_spread, RVR_SWITCH_RX_SPREAD);
RVR_SWITCH_ATTR(tx_burst, RVR_SWITCH_TX_BURST);
RVR_SWITCH_ATTR(tx_paged, RVR_SWITCH_TX_PAGED);

static struct attribute *rvr_dev_attrs[] = {
	&dev_attr_apm_bonding.attr,
	&dev_attr_rx_spread.attr,
	&dev_attr_tx_burst.attr,
	&dev_attr_tx_paged.attr,
	NULL,
};

const struct attribute_group rvr_dev_attr_group = {
	.attrs = rvr_dev_attrs,
};
