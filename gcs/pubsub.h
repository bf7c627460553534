/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS pub/sub engine, transport-agnostic: messages are opaque byte blobs tagged with
 * (channel, key, seq); whatever sends them (the GCS server's connections) drains per-subscriber
 * batches and releases them when sent.
 *
 * DESIGN
 * - Ordering: every publish on a channel takes the channel's next sequence number (1, 2, ...),
 *   so per-publisher FIFO holds and a subscriber sees each channel's messages in seq order.
 * - Fan-out: a message is allocated once (refcounted) and shared by the channel's history and
 *   every subscriber queue that takes it. Subscriptions are to a whole channel or to one key;
 *   a subscriber gets each message once even if both match.
 * - Batching: ferry__ps_drain() hands over everything pending for a subscriber in one batch, with
 *   per-channel watermarks: the batch completes the subscriber's view of each channel up to that
 *   seq. The ready callback fires when a subscriber goes from idle to having something to drain.
 * - Bounded memory: each subscriber has a byte bound (message bytes plus per-message overhead).
 *   Crossing it drops the subscriber's whole queue and puts each of its channels in "resync":
 *   its next drain carries a RESYNC marker and a snapshot instead of the dropped deltas. A
 *   snapshot is produced only when the subscriber drains, so a slow consumer never accumulates
 *   snapshots either. Each channel keeps a bounded history (messages and bytes).
 * - Snapshot, then deltas: a snapshot is taken at the channel's current seq S through the
 *   engine's snapshot callback (the owner of the tables encodes their current records). The batch
 *   carries RESYNC(channel, key or whole channel, S), then the SNAPSHOT items (seq S), then
 *   SNAPSHOT_END(channel, same key or none, S), and every later batch has only deltas with
 *   seq > S. The end marker lets a subscriber tell "complete, maybe empty" (a key with no
 *   record yet) from "more to come", so a keyed subscription is also a lookup. While a scope
 *   waits for its snapshot, deltas for it are not queued (the snapshot will include them):
 *   nothing missed, nothing applied twice.
 * - Reconnect: a new subscriber subscribes again, then calls ferry__ps_resume() per channel with
 *   the epoch and watermark of the last batch it processed. If the engine is the same incarnation
 *   (epoch) and the channel history still holds every message after the watermark, the next drain
 *   replays exactly those that match its scopes; otherwise it gets snapshot + deltas.
 * - Epoch: a random 64-bit value per engine; sequence numbers restart with a new engine (a
 *   restarted GCS), and a subscriber presenting another epoch's seq gets a snapshot.
 *
 * Thread model: not thread-safe. The engine, its subscribers and their batches belong to one
 * thread (the GCS loop thread); callbacks run on it, inside the call that triggered them, and
 * must not call back into the engine.
 */
#ifndef FERRY_GCS_PUBSUB_H
#define FERRY_GCS_PUBSUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>

#define FERRY__PS_KEY_MAX 20 /* bytes of a key: up to an ObjectID */

enum ferry__ps_kind {
	FERRY__PS_DELTA = 0,  /* a published message */
	FERRY__PS_RESYNC = 1, /* forget what you hold for (channel, key or all): snapshot follows */
	FERRY__PS_SNAPSHOT = 2,	    /* one item of a snapshot (seq = the snapshot's seq) */
	FERRY__PS_SNAPSHOT_END = 3, /* the snapshot of (channel, key or all) is complete */
};

/* A message. Immutable once published; shared, so never modify one. */
struct ferry__ps_msg {
	uint32_t refs;			/* owners: history, queues, batches */
	uint8_t kind;			/* enum ferry__ps_kind */
	uint8_t channel;		/* enum ferry_gcs_channel */
	uint8_t key_size;		/* 0: no key (whole-channel event / marker) */
	uint8_t key[FERRY__PS_KEY_MAX]; /* the key, zero-padded */
	uint64_t seq;			/* channel sequence number */
	uint32_t size;			/* bytes of data */
	uint8_t data[];			/* the payload */
};

/* What a drain hands over. Release with ferry__ps_batch_release() once sent. */
struct ferry__ps_batch {
	struct ferry__ps_msg **msgs;		 /* in delivery order */
	size_t count;				 /* messages */
	size_t bytes;				 /* payload bytes */
	uint64_t epoch;				 /* engine incarnation */
	uint64_t watermarks[FERRY_GCS_CH_COUNT]; /* per channel: complete up to this seq
							 (0 = not subscribed) */
};

struct ferry__ps;
struct ferry__ps_sub;
struct ferry__ps_snap;

/*
 * The snapshot callback: add, with ferry__ps_snap_add(), the current state of @channel for one
 * key (@key_size > 0) or for the whole channel (@key NULL, @key_size 0). Return 0 or a negative
 * errno (the drain then fails with it and is retried later). Channels without state (logs) add
 * nothing.
 */
typedef int (*ferry__ps_snapshot_fn)(void *arg, struct ferry__ps_snap *snap,
				     enum ferry_gcs_channel channel, const void *key,
				     size_t key_size);

/* Called when @sub goes from nothing to drain to something to drain. */
typedef void (*ferry__ps_ready_fn)(void *arg, struct ferry__ps_sub *sub);

/* Engine options; zeros are the defaults. */
struct ferry__ps_opts {
	uint64_t epoch;			/* 0 = random */
	size_t history_max_messages;	/* per channel; 0 = 4096 */
	size_t history_max_bytes;	/* per channel; 0 = 4 MiB */
	size_t max_message_bytes;	/* largest payload; 0 = 1 MiB */
	size_t max_subscriptions;	/* per subscriber default; 0 = 10000 */
	size_t max_buffered_bytes;	/* per subscriber default; 0 = 8 MiB */
	ferry__ps_snapshot_fn snapshot; /* NULL: snapshots are empty */
	void *snapshot_arg;		/* for snapshot */
};

/* Subscriber options; zeros take the engine's. */
struct ferry__ps_sub_opts {
	size_t max_subscriptions;  /* scopes (channel or channel+key) at most */
	size_t max_buffered_bytes; /* queue bound before a forced resync */
	ferry__ps_ready_fn ready;  /* or NULL */
	void *arg;		   /* for ready */
};

/* Counters of one subscriber. */
struct ferry__ps_sub_stats {
	size_t buffered_bytes; /* queued now (payload + overhead) */
	size_t buffered_msgs;  /* queued now */
	uint64_t delivered;    /* messages handed out by drains */
	uint64_t resyncs;      /* times its queue was dropped for the bound */
	size_t subscriptions;  /* scopes */
};

int ferry__ps_create(const struct ferry__ps_opts *opts, struct ferry__ps **out);
/* ferry__ps_destroy() - destroys the remaining subscribers too. Batches must be released
 * before. NULL is a no-op. */
void ferry__ps_destroy(struct ferry__ps *ps);
uint64_t ferry__ps_epoch(const struct ferry__ps *ps);
/* The last seq published on @channel (0: none yet). */
uint64_t ferry__ps_seq(const struct ferry__ps *ps, enum ferry_gcs_channel channel);

/*
 * ferry__ps_publish() - publish @size bytes on (@channel, @key). Copies the data. *@seq (may be
 * NULL) gets its seq. Returns 0, -EINVAL (unknown channel, key too long), -E2BIG (payload over
 * the limit), -ENOMEM (nothing published, no seq used). A subscriber whose queue cannot take the
 * message (its bound, or memory) is switched to resync instead; publishing never fails for it.
 */
int ferry__ps_publish(struct ferry__ps *ps, enum ferry_gcs_channel channel, const void *key,
		      size_t key_size, const void *data, size_t size, uint64_t *seq);

int ferry__ps_sub_create(struct ferry__ps *ps, const struct ferry__ps_sub_opts *opts,
			 struct ferry__ps_sub **out);
void ferry__ps_sub_destroy(struct ferry__ps_sub *sub);

#define FERRY__PS_WANT_SNAPSHOT (1u << 0) /* start the new scope with a snapshot */

/*
 * ferry__ps_subscribe() - add the scope (@channel, @key) (@key NULL/@key_size 0: the whole
 * channel). Messages published from now on that match are queued; with FERRY__PS_WANT_SNAPSHOT
 * the next drain starts the scope with RESYNC + snapshot. Returns 1 added, 0 already subscribed,
 * -EINVAL, -ENOSPC (subscription limit; not logged: the caller names the peer), -ENOMEM.
 */
int ferry__ps_subscribe(struct ferry__ps_sub *sub, enum ferry_gcs_channel channel, const void *key,
			size_t key_size, unsigned flags);
/* ferry__ps_unsubscribe() - remove a scope. 0 or -ENOENT. Already queued messages stay. */
int ferry__ps_unsubscribe(struct ferry__ps_sub *sub, enum ferry_gcs_channel channel,
			  const void *key, size_t key_size);

/*
 * ferry__ps_resume() - the subscriber had seen @channel up to @last_seq of engine @epoch (the
 * watermark of its last processed batch). Call after subscribing its scopes, before any drain
 * (in the same loop turn). Queued messages of @channel are dropped; the next drain replays from
 * the history what came after @last_seq (returns 0) or, when that is impossible (other epoch,
 * history too short, @last_seq in the future), sends snapshot + deltas (returns 1).
 * -ENOENT if the subscriber has no scope on @channel, -EINVAL for an unknown channel.
 */
int ferry__ps_resume(struct ferry__ps_sub *sub, enum ferry_gcs_channel channel, uint64_t epoch,
		     uint64_t last_seq);

/*
 * ferry__ps_drain() - move everything pending for @sub into @batch (overwritten): queued deltas,
 * history replays, RESYNC markers and snapshots. Returns the number of messages (0: nothing
 * pending; the batch is still valid and carries watermarks), or -ENOMEM / the snapshot
 * callback's error, in which case nothing was taken and the subscriber is unchanged.
 */
int ferry__ps_drain(struct ferry__ps_sub *sub, struct ferry__ps_batch *batch);
/* ferry__ps_pending() - would a drain return something? */
bool ferry__ps_pending(const struct ferry__ps_sub *sub);
void ferry__ps_batch_release(struct ferry__ps_batch *batch);

void ferry__ps_sub_stats(const struct ferry__ps_sub *sub, struct ferry__ps_sub_stats *out);

/* For snapshot callbacks: add one item of state (key and payload are copied). 0, -EINVAL,
 * -E2BIG, -ENOMEM. */
int ferry__ps_snap_add(struct ferry__ps_snap *snap, const void *key, size_t key_size,
		       const void *data, size_t size);

#endif
