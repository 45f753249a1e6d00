/* SPDX-License-Identifier: GPL-2.0 */
/* What rvrdma's module-local bindgen step generates Rust declarations for. */
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_umem.h>
#include <rdma/rdma_netlink.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/ib_pack.h>
#include <rdma/ib_mad.h>
#include <uapi/rdma/rdma_user_rxe.h>
#include <net/udp_tunnel.h>
#include <linux/crc32.h>
#include "../c/rvrdma_helpers.h"
#include "../c/rvrdma_net.h"
#include "../c/rvrdma_mr.h"
#include "../c/rvrdma_odp.h"
#include "../c/rvrdma_queue.h"
#include "../c/rvrdma_sysfs.h"
