/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of rdmadisk: one-line wrappers for static inline kernel functions, which Rust
 * cannot call directly. Nothing else belongs here.
 */
#ifndef RDMADISK_HELPERS_H
#define RDMADISK_HELPERS_H

struct device;
struct ib_device;

const char *rdmadisk_ib_device_name(const struct ib_device *ibdev);
void *rdmadisk_dev_get_drvdata(const struct device *dev);

#endif /* RDMADISK_HELPERS_H */
