/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A group scheduler's link to every instance of the level above (sched/group.c): the global
 * level is replicable, and each instance must see every group's load, so a group's summary goes
 * to all of them, not to one as a request does (sched/client.h).
 *
 * DESIGN: the instances are read from the GCS KV (FERRY__SCHED_KV_NS) every refresh period;
 * one connection per instance, dialled again at the next refresh after it closes. A report is
 * sent to the instances connected at that moment; an instance whose connection holds more than
 * a report period's worth of unsent bytes misses that report (the next one replaces it), so an
 * instance that does not read costs a bounded queue.
 *
 * Thread model: every function on @loop's thread.
 */
#ifndef FERRY_SCHED_UPLINK_H
#define FERRY_SCHED_UPLINK_H

#include <stddef.h>
#include <stdint.h>

#include <ferry/id.h>

struct ferry__loop;
struct ferry_gcs_client;
struct ferry__sched_uplink;

/*
 * ferry__sched_uplink_new() - links from @self (a group scheduler's ID) to the instances under
 * FERRY__SCHED_KV_NS, found through @gcs (borrowed, on @loop, must outlive it), with @token
 * (copied). The first KV read starts at once. 0 and *@out, -EINVAL, -ENOMEM.
 */
int ferry__sched_uplink_new(struct ferry__loop *loop, struct ferry_gcs_client *gcs,
			    const void *token, size_t token_len, const struct ferry_node_id *self,
			    struct ferry__sched_uplink **out);

/* ferry__sched_uplink_send() - @payload (a verified message of @type) to every instance
 * connected. Returns how many took it (0: none yet). */
int ferry__sched_uplink_send(struct ferry__sched_uplink *u, uint16_t type, const void *payload,
			     size_t len);

/* ferry__sched_uplink_free() - close every link. NULL is a no-op. */
void ferry__sched_uplink_free(struct ferry__sched_uplink *u);

#endif
