/* SPDX-License-Identifier: GPL-2.0 */
/* Input of the module-local bindgen run (see Kbuild). */
#include <linux/device.h>
#include <linux/device/class.h>
#include <linux/sysfs.h>
#include <rdma/ib_verbs.h>
#include "rdmadisk_helpers.h"
