/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's internal side (the public API is in include/ferry/gcs.h): the request path
 * shared by the public wrappers in gcs/client_api.c, plus calls for code inside libferry and
 * tests that speak GCS records (struct ferry__gcs_op) directly.
 *
 * Thread model: as the public client. The blocking calls: any thread but the client's loop
 * thread (there they return -EDEADLK); ferry__gcs_client_send(): any thread, its callback runs
 * on the loop thread.
 */
#ifndef FERRY_GCS_CLIENT_H
#define FERRY_GCS_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ferry/gcs.h>

#include "gcs/ops.h"

/* What a blocking call got back. */
struct ferry__gcs_result {
	int status;	/* the server's status, or a local error */
	void *value;	/* ferry__malloc'd copy of the reply's value, or NULL */
	size_t size;	/* its bytes */
	uint64_t epoch; /* subscribe: the server's pub/sub epoch */
};

struct ferry__gcs_csub;
struct ferry__loop;

/* A request's answer as the loop thread hands it to its callback: @value is borrowed for the
 * callback only. */
struct ferry__gcs_reply {
	int status;	   /* the server's status, or a local error */
	const void *value; /* the reply's value, or NULL */
	size_t size;	   /* its bytes */
	uint64_t epoch;	   /* subscribe: the server's pub/sub epoch */
};
typedef void (*ferry__gcs_reply_fn)(void *arg, const struct ferry__gcs_reply *reply);

/*
 * ferry__gcs_client_connect_on() - a client on @loop, a loop the caller runs (no thread of its
 * own). Call on @loop's thread, or before the loop runs on the thread that sets it up; every
 * callback then runs on the thread that runs @loop (noted on its first pass), and
 * ferry_gcs_client_destroy() must be called there too. Returns at once: the shards are
 * connected in the background and requests made meanwhile wait for their shard (up to their
 * deadline). 0 and *@out, -EINVAL (bad options, logged), -EHOSTUNREACH (a shard's host name
 * does not resolve, logged), -ENOMEM.
 */
int ferry__gcs_client_connect_on(struct ferry__loop *loop, const struct ferry_gcs_client_opts *opts,
				 struct ferry_gcs_client **out);

/*
 * ferry__gcs_client_unreached_why() - for a caller of ferry__gcs_client_connect_on() whose
 * first request failed with @err: @err, unless it is -ETIMEDOUT and a shard that never answered
 * had its last attempt refused or unrouted (nothing listens there): then -ECONNREFUSED,
 * -EHOSTUNREACH or -ENETUNREACH. Any thread.
 */
int ferry__gcs_client_unreached_why(struct ferry_gcs_client *c, int err);

/*
 * ferry__gcs_client_send() - the one request path: send @payload (a built message of @type
 * carrying @seq; ownership taken, ferry__malloc'd, freed on every path) to @shard, and call
 * @fn(@arg, reply) on the loop thread exactly once: with the reply, -ETIMEDOUT at the client's
 * deadline (timeout_ms from now, CLOCK_MONOTONIC), -ECANCELED at destroy, or a refused
 * handshake's error. @sub (ownership taken, or NULL): the scope of a GcsSubscribe (remembered
 * for resubscribing once the request reaches the loop) or, with sub->unsub, of a GcsUnsubscribe.
 * Returns 0, or -ENOMEM / -ECANCELED (destroy began): @fn is then never called. Any thread.
 */
int ferry__gcs_client_send(struct ferry_gcs_client *c, unsigned shard, uint16_t type, void *payload,
			   size_t len, uint64_t seq, struct ferry__gcs_csub *sub,
			   ferry__gcs_reply_fn fn, void *arg);

/* The next request seq (unique per client). */
uint64_t ferry__gcs_client_next_seq(struct ferry_gcs_client *c);
unsigned ferry__gcs_client_nshards(const struct ferry_gcs_client *c);

/*
 * ferry__gcs_client_call() - send @payload (a built message of @type carrying @seq; ownership
 * taken, ferry__malloc'd, freed on every path) to @shard and wait for the reply. With
 * @sub (ownership taken; NULL for other requests) the request is a GcsSubscribe and @sub is
 * remembered for resubscribing once the request reaches the loop. Built on
 * ferry__gcs_client_send(). Returns the status (also in @res), -ETIMEDOUT, -ENOMEM, -ECANCELED,
 * -EDEADLK (called on the loop thread).
 */
int ferry__gcs_client_call(struct ferry_gcs_client *c, unsigned shard, uint16_t type, void *payload,
			   size_t len, uint64_t seq, struct ferry__gcs_csub *sub,
			   struct ferry__gcs_result *res);

/* One request of ferry__gcs_client_call_many(). */
struct ferry__gcs_call {
	unsigned shard; /* where it goes */
	uint16_t type;	/* MessageType */
	void *payload;	/* the built message (ferry__malloc'd; taken, NULL after the call);
			 * NULL: not sent, .status kept */
	size_t len;	/* its bytes */
	uint64_t seq;	/* the seq it carries */
	int status;	/* out: as ferry__gcs_client_call() returns */
};

/*
 * ferry__gcs_client_call_many() - send @calls[0..@n) (no subscriptions) pipelined and wait for
 * all replies, each request's status into its .status; replies are dropped. The requests to
 * one shard are applied in array order. One deadline (the client's timeout) covers them all.
 */
void ferry__gcs_client_call_many(struct ferry_gcs_client *c, struct ferry__gcs_call *calls,
				 size_t n);

/* Tests: called with each request's message type as it is sent (resubscriptions after a
 * reconnect excepted), on the caller's thread. Set it before any client exists. */
extern void (*ferry__gcs_client_send_hook)(struct ferry_gcs_client *c, uint16_t type);

/* ferry__gcs_client_apply() - a mutation, blocking: the apply result or an error. */
int ferry__gcs_client_apply(struct ferry_gcs_client *c, unsigned shard,
			    const struct ferry__gcs_op *op);

/*
 * ferry__gcs_client_apply_many() - mutations @ops[0..@n), to @shards[i] each, pipelined (see
 * ferry__gcs_client_call_many()): @statuses[i] gets each apply result or error. Returns 0, or
 * -EINVAL (bad arguments: nothing sent).
 */
int ferry__gcs_client_apply_many(struct ferry_gcs_client *c, const unsigned *shards,
				 const struct ferry__gcs_op *ops, size_t n, int *statuses);

/* ferry__gcs_apply_async() - mutation @op to @shard, asynchronously: @cb(@arg, the apply
 * result or an error, NULL) on the loop thread. 0, or -errno (then @cb is never called). Any
 * thread. */
int ferry__gcs_apply_async(struct ferry_gcs_client *c, unsigned shard,
			   const struct ferry__gcs_op *op, ferry_gcs_done_fn cb, void *arg);

/*
 * ferry__gcs_batch_reply_check() - decode the value of a GcsObjectLookupBatch reply for @count
 * (1..16384) IDs as the client does, pack the result, free it all (the fuzz target's entry).
 * 0, -EPROTO (malformed), -EINVAL, -ENOMEM.
 */
int ferry__gcs_batch_reply_check(const void *value, size_t size, uint32_t count);

/*
 * ferry__gcs_client_local_addr() - this side's address of @shard's last established connection
 * (getsockname): the address through which this host reaches the GCS. 0, -EINVAL (no such
 * shard) or -ENOTCONN (never connected). Any thread.
 */
int ferry__gcs_client_local_addr(struct ferry_gcs_client *c, unsigned shard,
				 struct sockaddr_storage *ss, socklen_t *len);

#endif
