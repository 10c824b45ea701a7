/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of rdmadisk: one-line wrappers for static inline kernel functions, which Rust
 * cannot call directly. Nothing else belongs here.
 */
#ifndef RDMADISK_HELPERS_H
#define RDMADISK_HELPERS_H

#include <linux/types.h>
#include <linux/dma-direction.h>

struct device;
struct ib_device;
struct ib_qp;
struct ib_send_wr;
struct ib_recv_wr;
struct ib_mr;

const char *rdmadisk_ib_device_name(const struct ib_device *ibdev);
void *rdmadisk_dev_get_drvdata(const struct device *dev);

bool rdmadisk_ib_device_try_get(struct ib_device *dev);
int rdmadisk_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
			  const struct ib_send_wr **bad_wr);
int rdmadisk_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
			  const struct ib_recv_wr **bad_wr);
u64 rdmadisk_ib_dma_map_single(struct ib_device *dev, void *cpu_addr, size_t size,
			       enum dma_data_direction direction);
void rdmadisk_ib_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size,
				  enum dma_data_direction direction);
int rdmadisk_ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr);
void rdmadisk_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr, size_t size,
					 enum dma_data_direction dir);
void rdmadisk_ib_dma_sync_single_for_device(struct ib_device *dev, u64 addr, size_t size,
					    enum dma_data_direction dir);
void rdmadisk_ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey);

#endif /* RDMADISK_HELPERS_H */
