/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched's wire messages (schema/sched.fbs) to and from plain structs: the client encodes
 * SchedPlace and decodes SchedPlaceReply, the server the other way round. The decoders take
 * untrusted payloads that ferry__wire_verify() accepted and hold them to the caps below, so
 * that what they return is safe to use as is (tests/fuzz/fuzz_sched.c checks that).
 *
 * Thread model: pure functions.
 */
#ifndef FERRY_SCHED_PROTO_H
#define FERRY_SCHED_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/id.h>

#include "common/fb.h"
#include "sched/client.h"

/* Largest SchedPlace / SchedPlaceReply frame a peer accepts. */
#define FERRY__SCHED_FRAME_MAX (4u << 20)
/* Longest node address carried in a result (the GCS's own cap on addresses). */
#define FERRY__SCHED_ADDRESS_MAX 1023

/* Most members one SchedGroupLoad lists. */
#define FERRY__SCHED_GROUP_MEMBERS_MAX 65536

/* One decoded SchedPlaceItem; names point into the payload (valid while it is). */
struct ferry__sched_item {
	uint64_t request_id;				 /* the client's */
	struct ferry_node_id origin;			 /* the node that asks */
	uint32_t nres;					 /* <= FERRY__SCHED_ITEM_RES_MAX */
	const char *res_name[FERRY__SCHED_ITEM_RES_MAX]; /* NUL-terminated, 1..63 bytes, distinct */
	int64_t res_amount[FERRY__SCHED_ITEM_RES_MAX];	 /* fixed point, 1..FERRY__RES_AMOUNT_MAX */
	uint8_t strategy;	       /* enum ferry__sched_strategy (<= NODE_AFFINITY) */
	struct ferry_node_id affinity; /* NODE_AFFINITY's node */
	bool soft;		       /* NODE_AFFINITY may go elsewhere */
	uint8_t hops;		       /* forwards so far (<= FERRY__SCHED_HOPS_MAX) */
	const char *from_group;	       /* the group that sent it up, "" when none */
	uint32_t ninputs;	       /* <= FERRY__SCHED_ITEM_INPUTS_MAX */
	struct ferry__sched_place_input inputs[FERRY__SCHED_ITEM_INPUTS_MAX]; /* holders, sizes */
};

/* One result of a SchedPlaceReply; the address points into the payload when decoded. */
struct ferry__sched_result {
	uint64_t request_id;	   /* echoed */
	int32_t status;		   /* 0 or -errno */
	struct ferry_node_id node; /* status 0: where */
	const char *node_address;  /* status 0: its GCS address ("" when not known); else NULL */
	uint8_t hops;		   /* schedulers the request reached (0: not told) */
};

/* A decoded SchedGroupLoad; names point into the payload (valid while it is). */
struct ferry__sched_group_report {
	const char *group;			  /* 1..GROUP_NAME_MAX bytes */
	uint64_t version;			  /* newer wins */
	uint32_t nres;				  /* <= FERRY__SCHED_KINDS */
	const char *res_name[FERRY__SCHED_KINDS]; /* 1..63 bytes */
	int64_t total[FERRY__SCHED_KINDS];	  /* sums, fixed point */
	int64_t avail[FERRY__SCHED_KINDS];	  /* <= total */
	int64_t total_max[FERRY__SCHED_KINDS];	  /* most on one node */
	int64_t avail_max[FERRY__SCHED_KINDS];	  /* most free on one node */
	uint32_t queue_len;			  /* summed */
	uint64_t mean_task_ns;			  /* weighted by queue */
	uint32_t nmembers;			  /* <= GROUP_MEMBERS_MAX */
};

/*
 * ferry__sched_place_count() - the items of a verified SchedPlace payload: 0..BATCH_MAX, or
 * -EPROTO for a larger batch (the connection is closed: the sender broke the protocol).
 * ferry__sched_place_item() - decode item @i into *@out. 0; -EPROTO for an item that breaks the
 * caps (too many resources, an empty or long name: the connection is closed); -EINVAL for an
 * item that is well formed but cannot be a request (a repeated name, an amount that is not a
 * positive number within range, an unknown strategy): that item alone is refused. Inputs past
 * FERRY__SCHED_ITEM_INPUTS_MAX are dropped (the policy weighs only the first).
 */
int ferry__sched_place_count(const void *payload, size_t len);
int ferry__sched_place_item(const void *payload, uint32_t i, struct ferry__sched_item *out);

/* ferry__sched_place_check() - verify and decode a whole SchedPlace as the server does (the
 * fuzz target's entry). 0, -EPROTO; items refused with -EINVAL count as decoded. */
int ferry__sched_place_check(const void *payload, size_t len);

/*
 * ferry__sched_place_build() - a SchedPlace of @items[0..@n) (n <= BATCH_MAX) into @b: each
 * item's request ID from @ids[i], its origin @origin. 0, -EINVAL (a request that breaks the
 * caps), -ENOMEM.
 */
int ferry__sched_place_build(struct ferry__fb_builder *b, const struct ferry_node_id *origin,
			     const struct ferry__sched_place_req *const *items, const uint64_t *ids,
			     size_t n);

/* ferry__sched_reply_build() - a SchedPlaceReply of @results[0..@n) into @b. 0, -ENOMEM. */
int ferry__sched_reply_build(struct ferry__fb_builder *b, const struct ferry__sched_result *results,
			     size_t n);

/*
 * ferry__sched_reply_count() / _result() - read a verified SchedPlaceReply: the count
 * (-EPROTO over BATCH_MAX), then result @i (-EPROTO: a status that is not 0 or -errno, a
 * status 0 without an address, an address over FERRY__SCHED_ADDRESS_MAX).
 */
int ferry__sched_reply_count(const void *payload, size_t len);
int ferry__sched_reply_result(const void *payload, uint32_t i, struct ferry__sched_result *out);

/*
 * ferry__sched_group_read() - a verified SchedGroupLoad into *@out: 0, or -EPROTO (a name
 * missing or over its cap, too many resources or members, a negative amount, free above total).
 * ferry__sched_group_member() - its member @i (i < nmembers). 0 or -EPROTO.
 * ferry__sched_group_check() - verify and read a whole SchedGroupLoad (the fuzz target's entry).
 */
int ferry__sched_group_read(const void *payload, size_t len, struct ferry__sched_group_report *out);
int ferry__sched_group_member(const void *payload, uint32_t i, struct ferry_node_id *out);
int ferry__sched_group_check(const void *payload, size_t len);

/*
 * ferry__sched_group_build() - a SchedGroupLoad of group @group with @load (kinds named by
 * @kind_name[k], NULL for a kind with no name: skipped) and @members[0..@n) into @b.
 * 0, -EINVAL (a name over its cap, too many members), -ENOMEM.
 */
int ferry__sched_group_build(struct ferry__fb_builder *b, const char *group,
			     const struct ferry__sched_load *load, const char *const *kind_name,
			     const struct ferry_node_id *members, size_t n);

#endif
