/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of rdmadisk: one-line wrappers for static inline kernel functions, which Rust
 * cannot call directly. Nothing else belongs here.
 */
#ifndef RDMADISK_HELPERS_H
#define RDMADISK_HELPERS_H

#include <linux/types.h>
#include <linux/dma-direction.h>
#include <linux/spinlock_types.h>

struct device;
struct ib_device;
struct ib_qp;
struct ib_send_wr;
struct ib_recv_wr;
struct ib_mr;
struct request;
struct request_queue;
struct scatterlist;
struct bio;
struct bio_vec;
struct bvec_iter;
struct gendisk;
struct kobject;
struct page;

void rdmadisk_read_lock_bh(rwlock_t *lock);
void rdmadisk_read_unlock_bh(rwlock_t *lock);
void rdmadisk_write_lock_bh(rwlock_t *lock);
void rdmadisk_write_unlock_bh(rwlock_t *lock);
/* sk_memalloc_socks()'s count: held by the module, and the other half of sk_set_memalloc()'s. */
void rdmadisk_memalloc_socks_inc(void);
void rdmadisk_memalloc_socks_dec(void);

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
int rdmadisk_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
			   enum dma_data_direction direction);
void rdmadisk_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
			      enum dma_data_direction direction);

/* blk-mq requests, their bios and the disk's sysfs directory (rust/blk_mq.rs). */
void *rdmadisk_blk_mq_rq_to_pdu(struct request *rq);
u64 rdmadisk_blk_rq_pos(const struct request *rq);
unsigned int rdmadisk_blk_rq_bytes(const struct request *rq);
unsigned int rdmadisk_req_op(const struct request *rq);
unsigned short rdmadisk_blk_rq_nr_phys_segments(struct request *rq);
bool rdmadisk_blk_mq_rq_in_flight(struct request *rq);
int rdmadisk_blk_rq_map_sg(struct request_queue *q, struct request *rq,
			   struct scatterlist *sglist);
bool rdmadisk_bio_has_data(struct bio *bio);
void rdmadisk_bio_iter_iovec(struct bio *bio, const struct bvec_iter *iter,
			     struct bio_vec *bv);
void rdmadisk_bio_advance_iter_single(const struct bio *bio, struct bvec_iter *iter,
				      unsigned int bytes);
void *rdmadisk_bvec_kmap_local(struct bio_vec *bv);
/* Whether TCP may take references to these page bytes instead of copying them (rust/socket.rs). */
bool rdmadisk_sendpages_ok(struct page *page, size_t len, size_t offset);
unsigned int rdmadisk_raw_smp_processor_id(void);
/* Room left in a socket's send buffer, in bytes (rust/socket.rs). */
int rdmadisk_sk_stream_wspace(const struct sock *sk);
void rdmadisk_kunmap_local(const void *addr);
struct kobject *rdmadisk_disk_kobj(struct gendisk *disk);
struct device *rdmadisk_disk_to_dev(struct gendisk *disk);
const struct class *rdmadisk_disk_class(struct gendisk *disk);
struct gendisk *rdmadisk_dev_to_disk(struct device *dev);
unsigned long rdmadisk_msecs_to_jiffies(unsigned int ms);
unsigned int rdmadisk_disk_openers(struct gendisk *disk);

/* Reclaim-safe scopes (rust/work.rs). */
unsigned int rdmadisk_memalloc_noio_save(void);
void rdmadisk_memalloc_noio_restore(unsigned int flags);

#endif /* RDMADISK_HELPERS_H */
