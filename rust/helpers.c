// SPDX-License-Identifier: GPL-2.0
/* One-line wrappers for static inline functions; see include/rdmadisk_helpers.h. */
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/device.h>
#include <linux/highmem.h>
#include <linux/jiffies.h>
#include <linux/sched/mm.h>
#include <linux/smp.h>
#include <linux/spinlock.h>
#include <net/sock.h>
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

bool rdmadisk_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

int rdmadisk_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
			  const struct ib_send_wr **bad_wr)
{
	return ib_post_send(qp, wr, bad_wr);
}

int rdmadisk_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
			  const struct ib_recv_wr **bad_wr)
{
	return ib_post_recv(qp, wr, bad_wr);
}

u64 rdmadisk_ib_dma_map_single(struct ib_device *dev, void *cpu_addr, size_t size,
			       enum dma_data_direction direction)
{
	return ib_dma_map_single(dev, cpu_addr, size, direction);
}

void rdmadisk_ib_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size,
				  enum dma_data_direction direction)
{
	ib_dma_unmap_single(dev, addr, size, direction);
}

int rdmadisk_ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr)
{
	return ib_dma_mapping_error(dev, dma_addr);
}

void rdmadisk_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr, size_t size,
					 enum dma_data_direction dir)
{
	ib_dma_sync_single_for_cpu(dev, addr, size, dir);
}

void rdmadisk_ib_dma_sync_single_for_device(struct ib_device *dev, u64 addr, size_t size,
					    enum dma_data_direction dir)
{
	ib_dma_sync_single_for_device(dev, addr, size, dir);
}

void rdmadisk_ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey)
{
	ib_update_fast_reg_key(mr, newkey);
}

int rdmadisk_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
			   enum dma_data_direction direction)
{
	return ib_dma_map_sg(dev, sg, nents, direction);
}

void rdmadisk_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
			      enum dma_data_direction direction)
{
	ib_dma_unmap_sg(dev, sg, nents, direction);
}

void *rdmadisk_blk_mq_rq_to_pdu(struct request *rq)
{
	return blk_mq_rq_to_pdu(rq);
}

u64 rdmadisk_blk_rq_pos(const struct request *rq)
{
	return blk_rq_pos(rq);
}

unsigned int rdmadisk_blk_rq_bytes(const struct request *rq)
{
	return blk_rq_bytes(rq);
}

unsigned int rdmadisk_req_op(const struct request *rq)
{
	return req_op(rq);
}

unsigned short rdmadisk_blk_rq_nr_phys_segments(struct request *rq)
{
	return blk_rq_nr_phys_segments(rq);
}

bool rdmadisk_blk_mq_rq_in_flight(struct request *rq)
{
	return blk_mq_rq_state(rq) == MQ_RQ_IN_FLIGHT;
}

int rdmadisk_blk_rq_map_sg(struct request_queue *q, struct request *rq,
			   struct scatterlist *sglist)
{
	return blk_rq_map_sg(q, rq, sglist);
}

bool rdmadisk_bio_has_data(struct bio *bio)
{
	return bio_has_data(bio);
}

void rdmadisk_bio_iter_iovec(struct bio *bio, const struct bvec_iter *iter,
			     struct bio_vec *bv)
{
	*bv = bio_iter_iovec(bio, *iter);
}

void rdmadisk_bio_advance_iter_single(const struct bio *bio, struct bvec_iter *iter,
				      unsigned int bytes)
{
	bio_advance_iter_single(bio, iter, bytes);
}

void *rdmadisk_bvec_kmap_local(struct bio_vec *bv)
{
	return bvec_kmap_local(bv);
}

bool rdmadisk_sendpages_ok(struct page *page, size_t len, size_t offset)
{
	return sendpages_ok(page, len, offset);
}

unsigned int rdmadisk_raw_smp_processor_id(void)
{
	return raw_smp_processor_id();
}

int rdmadisk_sk_stream_wspace(const struct sock *sk)
{
	return sk_stream_wspace(sk);
}

void rdmadisk_kunmap_local(const void *addr)
{
	kunmap_local(addr);
}

struct kobject *rdmadisk_disk_kobj(struct gendisk *disk)
{
	return &disk_to_dev(disk)->kobj;
}

struct device *rdmadisk_disk_to_dev(struct gendisk *disk)
{
	return disk_to_dev(disk);
}

const struct class *rdmadisk_disk_class(struct gendisk *disk)
{
	return disk_to_dev(disk)->class;
}

struct gendisk *rdmadisk_dev_to_disk(struct device *dev)
{
	return dev_to_disk(dev);
}

unsigned long rdmadisk_msecs_to_jiffies(unsigned int ms)
{
	return msecs_to_jiffies(ms);
}

unsigned int rdmadisk_disk_openers(struct gendisk *disk)
{
	return disk_openers(disk);
}

void rdmadisk_read_lock_bh(rwlock_t *lock)
{
	read_lock_bh(lock);
}

void rdmadisk_read_unlock_bh(rwlock_t *lock)
{
	read_unlock_bh(lock);
}

void rdmadisk_write_lock_bh(rwlock_t *lock)
{
	write_lock_bh(lock);
}

void rdmadisk_write_unlock_bh(rwlock_t *lock)
{
	write_unlock_bh(lock);
}

void rdmadisk_memalloc_socks_inc(void)
{
	static_branch_inc(&memalloc_socks_key);
}

void rdmadisk_memalloc_socks_dec(void)
{
	static_branch_dec(&memalloc_socks_key);
}

unsigned int rdmadisk_memalloc_noio_save(void)
{
	return memalloc_noio_save();
}

void rdmadisk_memalloc_noio_restore(unsigned int flags)
{
	memalloc_noio_restore(flags);
}
