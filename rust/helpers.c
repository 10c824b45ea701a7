// SPDX-License-Identifier: GPL-2.0
/* One-line wrappers for static inline functions; see include/rdmadisk_helpers.h. */
#include <linux/device.h>
#include <rdma/ib_verbs.h>
#include "rdmadisk_helpers.h"

const char *rdmadisk_ib_device_name(const struct ib_device *ibdev)
{
	return dev_name(&ibdev->dev);
}

void *rdmadisk_dev_get_drvdata(const struct device *dev)
{
	return dev_get_drvdata(dev);
}
