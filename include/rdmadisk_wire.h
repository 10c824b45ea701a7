/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rdmadisk wire format, C view.
 *
 * GENERATED from userspace-tools/rdmadisk-proto/src/wire.rs, DO NOT EDIT.
 * Regenerate with: RDMADISK_BLESS=1 cargo test -p rdmadisk-proto
 *
 * All fields are little-endian. Reserved bytes are sent as zero and
 * ignored on receipt.
 */
#ifndef RDMADISK_WIRE_H
#define RDMADISK_WIRE_H

#include <linux/types.h>
#ifdef __KERNEL__
#include <linux/stddef.h>
#else
#include <stddef.h>
#endif

#define RDMADISK_MAGIC                           0x5244534BU
#define RDMADISK_VERSION                         4
#define RDMADISK_EXPORT_NAME_MAX                 32
#define RDMADISK_SECTOR_SHIFT                    9
#define RDMADISK_SECTOR_SIZE                     512
#define RDMADISK_FRAME_MAGIC                     0x5244U

/* Opcode (request.opcode) */
#define RDMADISK_OP_READ                         1
#define RDMADISK_OP_WRITE                        2
#define RDMADISK_OP_FLUSH                        3
#define RDMADISK_OP_DISCARD                      4
#define RDMADISK_OP_WRITE_ZEROES                 5
#define RDMADISK_OP_NOP                          6
#define RDMADISK_OP_CLOSE                        7
#define RDMADISK_OP_AUTH                         0x41

/* Request flags (request.flags) */
#define RDMADISK_REQ_FUA                         1
#define RDMADISK_REQ_INLINE                      2

/* Status (response.status) */
#define RDMADISK_STATUS_OK                       0
#define RDMADISK_STATUS_CRC_MISMATCH             1
#define RDMADISK_STATUS_OUT_OF_RANGE             2
#define RDMADISK_STATUS_READ_ONLY                3
#define RDMADISK_STATUS_IO_ERROR                 4
#define RDMADISK_STATUS_UNSUPPORTED              5
#define RDMADISK_STATUS_INVALID                  6
#define RDMADISK_STATUS_FENCED                   7
#define RDMADISK_STATUS_DENIED                   8

/* Hello status (hello_reply.status) */
#define RDMADISK_HELLO_STATUS_OK                 0
#define RDMADISK_HELLO_STATUS_BAD_VERSION        1
#define RDMADISK_HELLO_STATUS_NO_SUCH_EXPORT     2
#define RDMADISK_HELLO_STATUS_NOT_ALLOWED        3
#define RDMADISK_HELLO_STATUS_BUSY               4
#define RDMADISK_HELLO_STATUS_INVALID            5
#define RDMADISK_HELLO_STATUS_STALE              6

/* Feature bits (hello_reply.features) */
#define RDMADISK_FEAT_FLUSH                      0x1U
#define RDMADISK_FEAT_FUA                        0x2U
#define RDMADISK_FEAT_DISCARD                    0x4U
#define RDMADISK_FEAT_WRITE_ZEROES               0x8U
#define RDMADISK_FEAT_READ_ONLY                  0x10U
#define RDMADISK_FEAT_AUTH                       0x20U
#define RDMADISK_FEAT_RESIZE                     0x40U
#define RDMADISK_FEAT_IDENTITY                   0x100U

/* Hello flags (hello.flags) */
#define RDMADISK_HELLO_READ_ONLY                 0x1U
#define RDMADISK_HELLO_NEW_SESSION               0x2U

/* Hello caps (hello.caps) */
#define RDMADISK_HELLO_CAP_IDENTITY              0x1U
#define RDMADISK_CHALLENGE_LEN                   16

/* TCP frame kinds (frame_header.kind) */
#define RDMADISK_FRAME_HELLO                     1
#define RDMADISK_FRAME_HELLO_REPLY               2
#define RDMADISK_FRAME_REQUEST                   3
#define RDMADISK_FRAME_RESPONSE                  4
#define RDMADISK_FRAME_AUTH                      5
#define RDMADISK_FRAME_AUTH_REPLY                6

#define RDMADISK_HELLO_LEN                       56
#define RDMADISK_HELLO_OFF_MAGIC                 0
#define RDMADISK_HELLO_OFF_VERSION               4
#define RDMADISK_HELLO_OFF_FLAGS                 6
#define RDMADISK_HELLO_OFF_QUEUE_ID              8
#define RDMADISK_HELLO_OFF_QUEUE_COUNT           10
#define RDMADISK_HELLO_OFF_RECV_CREDITS          12
#define RDMADISK_HELLO_OFF_CAPS                  14
#define RDMADISK_HELLO_OFF_SESSION_ID            16
#define RDMADISK_HELLO_OFF_EPOCH                 20
#define RDMADISK_HELLO_OFF_EXPORT_NAME           24

struct rdmadisk_hello {
	__le32 magic;
	__le16 version;
	__le16 flags;
	__le16 queue_id;
	__le16 queue_count;
	__le16 recv_credits;
	__le16 caps;
	__le32 session_id;
	__le32 epoch;
	__u8 export_name[32];
};
_Static_assert(sizeof(struct rdmadisk_hello) == RDMADISK_HELLO_LEN, "rdmadisk_hello size");
_Static_assert(offsetof(struct rdmadisk_hello, magic) == RDMADISK_HELLO_OFF_MAGIC, "rdmadisk_hello.magic");
_Static_assert(offsetof(struct rdmadisk_hello, version) == RDMADISK_HELLO_OFF_VERSION, "rdmadisk_hello.version");
_Static_assert(offsetof(struct rdmadisk_hello, flags) == RDMADISK_HELLO_OFF_FLAGS, "rdmadisk_hello.flags");
_Static_assert(offsetof(struct rdmadisk_hello, queue_id) == RDMADISK_HELLO_OFF_QUEUE_ID, "rdmadisk_hello.queue_id");
_Static_assert(offsetof(struct rdmadisk_hello, queue_count) == RDMADISK_HELLO_OFF_QUEUE_COUNT, "rdmadisk_hello.queue_count");
_Static_assert(offsetof(struct rdmadisk_hello, recv_credits) == RDMADISK_HELLO_OFF_RECV_CREDITS, "rdmadisk_hello.recv_credits");
_Static_assert(offsetof(struct rdmadisk_hello, caps) == RDMADISK_HELLO_OFF_CAPS, "rdmadisk_hello.caps");
_Static_assert(offsetof(struct rdmadisk_hello, session_id) == RDMADISK_HELLO_OFF_SESSION_ID, "rdmadisk_hello.session_id");
_Static_assert(offsetof(struct rdmadisk_hello, epoch) == RDMADISK_HELLO_OFF_EPOCH, "rdmadisk_hello.epoch");
_Static_assert(offsetof(struct rdmadisk_hello, export_name) == RDMADISK_HELLO_OFF_EXPORT_NAME, "rdmadisk_hello.export_name");

#define RDMADISK_HELLO_REPLY_LEN                 72
#define RDMADISK_HELLO_REPLY_OFF_MAGIC           0
#define RDMADISK_HELLO_REPLY_OFF_VERSION         4
#define RDMADISK_HELLO_REPLY_OFF_STATUS          6
#define RDMADISK_HELLO_REPLY_OFF_CAPACITY_SECTORS 8
#define RDMADISK_HELLO_REPLY_OFF_LOGICAL_BLOCK_SIZE 16
#define RDMADISK_HELLO_REPLY_OFF_PHYSICAL_BLOCK_SIZE 20
#define RDMADISK_HELLO_REPLY_OFF_MAX_IO_BYTES    24
#define RDMADISK_HELLO_REPLY_OFF_MAX_SEGMENTS    28
#define RDMADISK_HELLO_REPLY_OFF_QUEUE_DEPTH     30
#define RDMADISK_HELLO_REPLY_OFF_INITIAL_CREDITS 32
#define RDMADISK_HELLO_REPLY_OFF_RESERVED0       34
#define RDMADISK_HELLO_REPLY_OFF_FEATURES        36
#define RDMADISK_HELLO_REPLY_OFF_MAX_DISCARD_SECTORS 40
#define RDMADISK_HELLO_REPLY_OFF_CHALLENGE       44
#define RDMADISK_HELLO_REPLY_OFF_MAX_INLINE      60
#define RDMADISK_HELLO_REPLY_OFF_SESSION_FLOOR   64
#define RDMADISK_HELLO_REPLY_OFF_RESERVED1       68

struct rdmadisk_hello_reply {
	__le32 magic;
	__le16 version;
	__le16 status;
	__le64 capacity_sectors;
	__le32 logical_block_size;
	__le32 physical_block_size;
	__le32 max_io_bytes;
	__le16 max_segments;
	__le16 queue_depth;
	__le16 initial_credits;
	__le16 reserved0;
	__le32 features;
	__le32 max_discard_sectors;
	__u8 challenge[16];
	__le32 max_inline;
	__le32 session_floor;
	__le32 reserved1;
};
_Static_assert(sizeof(struct rdmadisk_hello_reply) == RDMADISK_HELLO_REPLY_LEN, "rdmadisk_hello_reply size");
_Static_assert(offsetof(struct rdmadisk_hello_reply, magic) == RDMADISK_HELLO_REPLY_OFF_MAGIC, "rdmadisk_hello_reply.magic");
_Static_assert(offsetof(struct rdmadisk_hello_reply, version) == RDMADISK_HELLO_REPLY_OFF_VERSION, "rdmadisk_hello_reply.version");
_Static_assert(offsetof(struct rdmadisk_hello_reply, status) == RDMADISK_HELLO_REPLY_OFF_STATUS, "rdmadisk_hello_reply.status");
_Static_assert(offsetof(struct rdmadisk_hello_reply, capacity_sectors) == RDMADISK_HELLO_REPLY_OFF_CAPACITY_SECTORS, "rdmadisk_hello_reply.capacity_sectors");
_Static_assert(offsetof(struct rdmadisk_hello_reply, logical_block_size) == RDMADISK_HELLO_REPLY_OFF_LOGICAL_BLOCK_SIZE, "rdmadisk_hello_reply.logical_block_size");
_Static_assert(offsetof(struct rdmadisk_hello_reply, physical_block_size) == RDMADISK_HELLO_REPLY_OFF_PHYSICAL_BLOCK_SIZE, "rdmadisk_hello_reply.physical_block_size");
_Static_assert(offsetof(struct rdmadisk_hello_reply, max_io_bytes) == RDMADISK_HELLO_REPLY_OFF_MAX_IO_BYTES, "rdmadisk_hello_reply.max_io_bytes");
_Static_assert(offsetof(struct rdmadisk_hello_reply, max_segments) == RDMADISK_HELLO_REPLY_OFF_MAX_SEGMENTS, "rdmadisk_hello_reply.max_segments");
_Static_assert(offsetof(struct rdmadisk_hello_reply, queue_depth) == RDMADISK_HELLO_REPLY_OFF_QUEUE_DEPTH, "rdmadisk_hello_reply.queue_depth");
_Static_assert(offsetof(struct rdmadisk_hello_reply, initial_credits) == RDMADISK_HELLO_REPLY_OFF_INITIAL_CREDITS, "rdmadisk_hello_reply.initial_credits");
_Static_assert(offsetof(struct rdmadisk_hello_reply, reserved0) == RDMADISK_HELLO_REPLY_OFF_RESERVED0, "rdmadisk_hello_reply.reserved0");
_Static_assert(offsetof(struct rdmadisk_hello_reply, features) == RDMADISK_HELLO_REPLY_OFF_FEATURES, "rdmadisk_hello_reply.features");
_Static_assert(offsetof(struct rdmadisk_hello_reply, max_discard_sectors) == RDMADISK_HELLO_REPLY_OFF_MAX_DISCARD_SECTORS, "rdmadisk_hello_reply.max_discard_sectors");
_Static_assert(offsetof(struct rdmadisk_hello_reply, challenge) == RDMADISK_HELLO_REPLY_OFF_CHALLENGE, "rdmadisk_hello_reply.challenge");
_Static_assert(offsetof(struct rdmadisk_hello_reply, max_inline) == RDMADISK_HELLO_REPLY_OFF_MAX_INLINE, "rdmadisk_hello_reply.max_inline");
_Static_assert(offsetof(struct rdmadisk_hello_reply, session_floor) == RDMADISK_HELLO_REPLY_OFF_SESSION_FLOOR, "rdmadisk_hello_reply.session_floor");
_Static_assert(offsetof(struct rdmadisk_hello_reply, reserved1) == RDMADISK_HELLO_REPLY_OFF_RESERVED1, "rdmadisk_hello_reply.reserved1");

#define RDMADISK_IDENTITY_LEN                    40
#define RDMADISK_IDENTITY_OFF_UUID               0
#define RDMADISK_IDENTITY_OFF_SERIAL             16
#define RDMADISK_IDENTITY_OFF_RESERVED           36

struct rdmadisk_identity {
	__u8 uuid[16];
	__u8 serial[20];
	__u8 reserved[4];
};
_Static_assert(sizeof(struct rdmadisk_identity) == RDMADISK_IDENTITY_LEN, "rdmadisk_identity size");
_Static_assert(offsetof(struct rdmadisk_identity, uuid) == RDMADISK_IDENTITY_OFF_UUID, "rdmadisk_identity.uuid");
_Static_assert(offsetof(struct rdmadisk_identity, serial) == RDMADISK_IDENTITY_OFF_SERIAL, "rdmadisk_identity.serial");
_Static_assert(offsetof(struct rdmadisk_identity, reserved) == RDMADISK_IDENTITY_OFF_RESERVED, "rdmadisk_identity.reserved");

#define RDMADISK_REQUEST_LEN                     48
#define RDMADISK_REQUEST_OFF_OPCODE              0
#define RDMADISK_REQUEST_OFF_FLAGS               1
#define RDMADISK_REQUEST_OFF_CREDITS             2
#define RDMADISK_REQUEST_OFF_TAG                 4
#define RDMADISK_REQUEST_OFF_SECTOR              8
#define RDMADISK_REQUEST_OFF_LENGTH              16
#define RDMADISK_REQUEST_OFF_DATA_CRC            20
#define RDMADISK_REQUEST_OFF_BUF_ADDR            24
#define RDMADISK_REQUEST_OFF_BUF_RKEY            32
#define RDMADISK_REQUEST_OFF_BUF_LEN             36
#define RDMADISK_REQUEST_OFF_RESERVED            40

struct rdmadisk_request {
	__u8 opcode;
	__u8 flags;
	__le16 credits;
	__le32 tag;
	__le64 sector;
	__le32 length;
	__le32 data_crc;
	__le64 buf_addr;
	__le32 buf_rkey;
	__le32 buf_len;
	__u8 reserved[8];
};
_Static_assert(sizeof(struct rdmadisk_request) == RDMADISK_REQUEST_LEN, "rdmadisk_request size");
_Static_assert(offsetof(struct rdmadisk_request, opcode) == RDMADISK_REQUEST_OFF_OPCODE, "rdmadisk_request.opcode");
_Static_assert(offsetof(struct rdmadisk_request, flags) == RDMADISK_REQUEST_OFF_FLAGS, "rdmadisk_request.flags");
_Static_assert(offsetof(struct rdmadisk_request, credits) == RDMADISK_REQUEST_OFF_CREDITS, "rdmadisk_request.credits");
_Static_assert(offsetof(struct rdmadisk_request, tag) == RDMADISK_REQUEST_OFF_TAG, "rdmadisk_request.tag");
_Static_assert(offsetof(struct rdmadisk_request, sector) == RDMADISK_REQUEST_OFF_SECTOR, "rdmadisk_request.sector");
_Static_assert(offsetof(struct rdmadisk_request, length) == RDMADISK_REQUEST_OFF_LENGTH, "rdmadisk_request.length");
_Static_assert(offsetof(struct rdmadisk_request, data_crc) == RDMADISK_REQUEST_OFF_DATA_CRC, "rdmadisk_request.data_crc");
_Static_assert(offsetof(struct rdmadisk_request, buf_addr) == RDMADISK_REQUEST_OFF_BUF_ADDR, "rdmadisk_request.buf_addr");
_Static_assert(offsetof(struct rdmadisk_request, buf_rkey) == RDMADISK_REQUEST_OFF_BUF_RKEY, "rdmadisk_request.buf_rkey");
_Static_assert(offsetof(struct rdmadisk_request, buf_len) == RDMADISK_REQUEST_OFF_BUF_LEN, "rdmadisk_request.buf_len");
_Static_assert(offsetof(struct rdmadisk_request, reserved) == RDMADISK_REQUEST_OFF_RESERVED, "rdmadisk_request.reserved");

#define RDMADISK_AUTH_LEN                        64
#define RDMADISK_AUTH_OFF_OPCODE                 0
#define RDMADISK_AUTH_OFF_FLAGS                  1
#define RDMADISK_AUTH_OFF_CREDITS                2
#define RDMADISK_AUTH_OFF_TAG                    4
#define RDMADISK_AUTH_OFF_NONCE                  8
#define RDMADISK_AUTH_OFF_PROOF                  24
#define RDMADISK_AUTH_OFF_RESERVED               56

struct rdmadisk_auth {
	__u8 opcode;
	__u8 flags;
	__le16 credits;
	__le32 tag;
	__u8 nonce[16];
	__u8 proof[32];
	__u8 reserved[8];
};
_Static_assert(sizeof(struct rdmadisk_auth) == RDMADISK_AUTH_LEN, "rdmadisk_auth size");
_Static_assert(offsetof(struct rdmadisk_auth, opcode) == RDMADISK_AUTH_OFF_OPCODE, "rdmadisk_auth.opcode");
_Static_assert(offsetof(struct rdmadisk_auth, flags) == RDMADISK_AUTH_OFF_FLAGS, "rdmadisk_auth.flags");
_Static_assert(offsetof(struct rdmadisk_auth, credits) == RDMADISK_AUTH_OFF_CREDITS, "rdmadisk_auth.credits");
_Static_assert(offsetof(struct rdmadisk_auth, tag) == RDMADISK_AUTH_OFF_TAG, "rdmadisk_auth.tag");
_Static_assert(offsetof(struct rdmadisk_auth, nonce) == RDMADISK_AUTH_OFF_NONCE, "rdmadisk_auth.nonce");
_Static_assert(offsetof(struct rdmadisk_auth, proof) == RDMADISK_AUTH_OFF_PROOF, "rdmadisk_auth.proof");
_Static_assert(offsetof(struct rdmadisk_auth, reserved) == RDMADISK_AUTH_OFF_RESERVED, "rdmadisk_auth.reserved");

#define RDMADISK_AUTH_REPLY_LEN                  64
#define RDMADISK_AUTH_REPLY_OFF_TAG              0
#define RDMADISK_AUTH_REPLY_OFF_STATUS           4
#define RDMADISK_AUTH_REPLY_OFF_CREDITS          6
#define RDMADISK_AUTH_REPLY_OFF_PROOF            8
#define RDMADISK_AUTH_REPLY_OFF_SESSION_FLOOR    40
#define RDMADISK_AUTH_REPLY_OFF_RESERVED         44

struct rdmadisk_auth_reply {
	__le32 tag;
	__le16 status;
	__le16 credits;
	__u8 proof[32];
	__le32 session_floor;
	__u8 reserved[20];
};
_Static_assert(sizeof(struct rdmadisk_auth_reply) == RDMADISK_AUTH_REPLY_LEN, "rdmadisk_auth_reply size");
_Static_assert(offsetof(struct rdmadisk_auth_reply, tag) == RDMADISK_AUTH_REPLY_OFF_TAG, "rdmadisk_auth_reply.tag");
_Static_assert(offsetof(struct rdmadisk_auth_reply, status) == RDMADISK_AUTH_REPLY_OFF_STATUS, "rdmadisk_auth_reply.status");
_Static_assert(offsetof(struct rdmadisk_auth_reply, credits) == RDMADISK_AUTH_REPLY_OFF_CREDITS, "rdmadisk_auth_reply.credits");
_Static_assert(offsetof(struct rdmadisk_auth_reply, proof) == RDMADISK_AUTH_REPLY_OFF_PROOF, "rdmadisk_auth_reply.proof");
_Static_assert(offsetof(struct rdmadisk_auth_reply, session_floor) == RDMADISK_AUTH_REPLY_OFF_SESSION_FLOOR, "rdmadisk_auth_reply.session_floor");
_Static_assert(offsetof(struct rdmadisk_auth_reply, reserved) == RDMADISK_AUTH_REPLY_OFF_RESERVED, "rdmadisk_auth_reply.reserved");

#define RDMADISK_RESPONSE_LEN                    32
#define RDMADISK_RESPONSE_OFF_TAG                0
#define RDMADISK_RESPONSE_OFF_STATUS             4
#define RDMADISK_RESPONSE_OFF_CREDITS            6
#define RDMADISK_RESPONSE_OFF_DATA_CRC           8
#define RDMADISK_RESPONSE_OFF_LENGTH             12
#define RDMADISK_RESPONSE_OFF_RKEY               16
#define RDMADISK_RESPONSE_OFF_RESERVED           20
#define RDMADISK_RESPONSE_OFF_CAPACITY_SECTORS   24

struct rdmadisk_response {
	__le32 tag;
	__le16 status;
	__le16 credits;
	__le32 data_crc;
	__le32 length;
	__le32 rkey;
	__le32 reserved;
	__le64 capacity_sectors;
};
_Static_assert(sizeof(struct rdmadisk_response) == RDMADISK_RESPONSE_LEN, "rdmadisk_response size");
_Static_assert(offsetof(struct rdmadisk_response, tag) == RDMADISK_RESPONSE_OFF_TAG, "rdmadisk_response.tag");
_Static_assert(offsetof(struct rdmadisk_response, status) == RDMADISK_RESPONSE_OFF_STATUS, "rdmadisk_response.status");
_Static_assert(offsetof(struct rdmadisk_response, credits) == RDMADISK_RESPONSE_OFF_CREDITS, "rdmadisk_response.credits");
_Static_assert(offsetof(struct rdmadisk_response, data_crc) == RDMADISK_RESPONSE_OFF_DATA_CRC, "rdmadisk_response.data_crc");
_Static_assert(offsetof(struct rdmadisk_response, length) == RDMADISK_RESPONSE_OFF_LENGTH, "rdmadisk_response.length");
_Static_assert(offsetof(struct rdmadisk_response, rkey) == RDMADISK_RESPONSE_OFF_RKEY, "rdmadisk_response.rkey");
_Static_assert(offsetof(struct rdmadisk_response, reserved) == RDMADISK_RESPONSE_OFF_RESERVED, "rdmadisk_response.reserved");
_Static_assert(offsetof(struct rdmadisk_response, capacity_sectors) == RDMADISK_RESPONSE_OFF_CAPACITY_SECTORS, "rdmadisk_response.capacity_sectors");

#define RDMADISK_FRAME_HEADER_LEN                8
#define RDMADISK_FRAME_HEADER_OFF_MAGIC          0
#define RDMADISK_FRAME_HEADER_OFF_KIND           2
#define RDMADISK_FRAME_HEADER_OFF_FLAGS          3
#define RDMADISK_FRAME_HEADER_OFF_DATA_LEN       4

struct rdmadisk_frame_header {
	__le16 magic;
	__u8 kind;
	__u8 flags;
	__le32 data_len;
};
_Static_assert(sizeof(struct rdmadisk_frame_header) == RDMADISK_FRAME_HEADER_LEN, "rdmadisk_frame_header size");
_Static_assert(offsetof(struct rdmadisk_frame_header, magic) == RDMADISK_FRAME_HEADER_OFF_MAGIC, "rdmadisk_frame_header.magic");
_Static_assert(offsetof(struct rdmadisk_frame_header, kind) == RDMADISK_FRAME_HEADER_OFF_KIND, "rdmadisk_frame_header.kind");
_Static_assert(offsetof(struct rdmadisk_frame_header, flags) == RDMADISK_FRAME_HEADER_OFF_FLAGS, "rdmadisk_frame_header.flags");
_Static_assert(offsetof(struct rdmadisk_frame_header, data_len) == RDMADISK_FRAME_HEADER_OFF_DATA_LEN, "rdmadisk_frame_header.data_len");

#endif /* RDMADISK_WIRE_H */
