/* SPDX-License-Identifier: GPL-2.0 */
/* Input of the module-local bindgen run (see Kbuild). */
#include <linux/bio.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/debugfs.h>
#include <linux/device.h>
#include <linux/device/class.h>
#include <linux/sysfs.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/kobject.h>
#include <linux/module.h>
#include <linux/net.h>
#include <linux/socket.h>
#include <linux/tcp.h>
#include <linux/workqueue.h>
#include <linux/scatterlist.h>
#include <net/net_namespace.h>
#include <net/sock.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include "rdmadisk_helpers.h"

/* Constants bindgen cannot evaluate from their macros (they cast), for rust/blk_mq.rs. */
const blk_status_t RDMADISK_BLK_STS_OK = BLK_STS_OK;
const blk_status_t RDMADISK_BLK_STS_NOTSUPP = BLK_STS_NOTSUPP;
const blk_status_t RDMADISK_BLK_STS_MEDIUM = BLK_STS_MEDIUM;
const blk_status_t RDMADISK_BLK_STS_RESOURCE = BLK_STS_RESOURCE;
const blk_status_t RDMADISK_BLK_STS_IOERR = BLK_STS_IOERR;
const blk_features_t RDMADISK_BLK_FEAT_WRITE_CACHE = BLK_FEAT_WRITE_CACHE;
const blk_features_t RDMADISK_BLK_FEAT_FUA = BLK_FEAT_FUA;
const blk_features_t RDMADISK_BLK_FEAT_STABLE_WRITES = BLK_FEAT_STABLE_WRITES;
const blk_opf_t RDMADISK_REQ_FUA = REQ_FUA;
const unsigned int RDMADISK_BLK_MQ_F_SHOULD_MERGE = BLK_MQ_F_SHOULD_MERGE;
const unsigned int RDMADISK_BLK_MQ_F_BLOCKING = BLK_MQ_F_BLOCKING;
const req_flags_t RDMADISK_RQF_DONTPREP = RQF_DONTPREP;
/* The tag set's maps (enum hctx_type), for a tag set with poll queues. */
const unsigned int RDMADISK_HCTX_TYPE_DEFAULT = HCTX_TYPE_DEFAULT;
const unsigned int RDMADISK_HCTX_TYPE_READ = HCTX_TYPE_READ;
const unsigned int RDMADISK_HCTX_TYPE_POLL = HCTX_TYPE_POLL;
const unsigned int RDMADISK_HCTX_MAX_TYPES = HCTX_MAX_TYPES;

/* For rust/socket.rs. */
const gfp_t RDMADISK_GFP_NOIO = GFP_NOIO;
