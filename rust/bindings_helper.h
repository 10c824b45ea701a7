/* SPDX-License-Identifier: GPL-2.0 */
/* Input of the module-local bindgen run (see Kbuild). */
#include <linux/device.h>
#include <linux/device/class.h>
#include <linux/sysfs.h>
#include <linux/in.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include "rdmadisk_helpers.h"
