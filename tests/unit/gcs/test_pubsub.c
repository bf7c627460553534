/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pub/sub engine: sequence numbers and FIFO, whole-channel vs per-key scopes, batching, the
 * slow-subscriber bound and resync (a snapshot always ends with a marker, also when empty),
 * reconnect (history replay or snapshot + deltas), limits,
 * allocation failures, and a randomized run checking that subscribers' replicas always equal
 * the published state with nothing missed and nothing applied twice.
 */
#include <stdlib.h>

#include "common/alloc.h"
#include "ftest.h"
#include "gcs/pubsub.h"

#define CH FERRY_GCS_CH_NODES
#define NKEYS 16

/* The publisher's state (what snapshots encode): key i -> version (0 = absent). */
static uint32_t table[NKEYS];
static int snapshot_calls;

static int snapshot(void *arg, struct ferry__ps_snap *snap, enum ferry_gcs_channel channel,
		    const void *key, size_t key_size)
{
	(void)arg;
	snapshot_calls++;
	if (channel != CH)
		return 0;
	for (uint8_t i = 0; i < NKEYS; i++) {
		int ret;

		if (!table[i] || (key_size && *(const uint8_t *)key != i))
			continue;
		ret = ferry__ps_snap_add(snap, &i, 1, &table[i], sizeof(table[i]));
		if (ret < 0)
			return ret;
	}
	return 0;
}

static struct ferry__ps *new_ps(size_t history, size_t bound)
{
	struct ferry__ps_opts opts = {0};
	struct ferry__ps *ps;

	opts.history_max_messages = history;
	opts.max_buffered_bytes = bound;
	opts.snapshot = snapshot;
	ftest_assert_ok(ferry__ps_create(&opts, &ps));
	memset(table, 0, sizeof(table));
	return ps;
}

static uint64_t publish(struct ferry__ps *ps, uint8_t key)
{
	uint64_t seq;

	table[key]++;
	ftest_assert_ok(ferry__ps_publish(ps, CH, &key, 1, &table[key], sizeof(table[key]), &seq));
	return seq;
}

static int readies;

static void on_ready(void *arg, struct ferry__ps_sub *sub)
{
	(void)arg;
	(void)sub;
	readies++;
}

static struct ferry__ps_sub *new_sub(struct ferry__ps *ps, size_t bound)
{
	struct ferry__ps_sub_opts opts = {0, bound, on_ready, NULL};
	struct ferry__ps_sub *sub;

	ftest_assert_ok(ferry__ps_sub_create(ps, &opts, &sub));
	return sub;
}

FTEST(sequence_numbers_fifo_and_batching)
{
	struct ferry__ps *ps = new_ps(0, 0);
	struct ferry__ps_sub *sub = new_sub(ps, 0);
	struct ferry__ps_batch b;
	uint64_t seq;

	readies = 0;
	ftest_assert_int_eq(ferry__ps_subscribe(sub, CH, NULL, 0, 0), 1);
	ftest_assert_int_eq(ferry__ps_subscribe(sub, CH, NULL, 0, 0), 0);
	for (int i = 0; i < 100; i++)
		ftest_assert_uint_eq(publish(ps, (uint8_t)(i % NKEYS)), (uint64_t)i + 1);
	ftest_assert_ok(ferry__ps_publish(ps, FERRY_GCS_CH_ACTORS, NULL, 0, "x", 1, &seq));
	ftest_assert_uint_eq(seq, 1); /* per channel */
	ftest_assert_int_eq(readies, 1);
	ftest_assert_true(ferry__ps_pending(sub));
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 100);
	for (size_t i = 0; i < b.count; i++) {
		ftest_assert_uint_eq(b.msgs[i]->seq, i + 1);
		ftest_assert_int_eq(b.msgs[i]->kind, FERRY__PS_DELTA);
		ftest_assert_uint_eq(b.msgs[i]->key[0], i % NKEYS);
	}
	ftest_assert_uint_eq(b.bytes, 400);
	ftest_assert_uint_eq(b.watermarks[CH], 100);
	ftest_assert_uint_eq(b.watermarks[FERRY_GCS_CH_ACTORS], 0);
	ftest_assert_uint_eq(b.epoch, ferry__ps_epoch(ps));
	ferry__ps_batch_release(&b);
	ftest_assert_false(ferry__ps_pending(sub));
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 0);
	ferry__ps_batch_release(&b);
	publish(ps, 1);
	ftest_assert_int_eq(readies, 2);
	ferry__ps_destroy(ps); /* destroys the subscriber and its queue too */
}

static int drain_keys(struct ferry__ps_sub *sub, uint8_t *keys, int max)
{
	struct ferry__ps_batch b;
	int n = ferry__ps_drain(sub, &b);

	ftest_assert_ok(n);
	ftest_assert_int_le(n, max);
	for (int i = 0; i < n; i++)
		keys[i] = b.msgs[i]->key_size ? b.msgs[i]->key[0] : 0xff;
	ferry__ps_batch_release(&b);
	return n;
}

FTEST(whole_channel_and_key_scopes)
{
	struct ferry__ps *ps = new_ps(0, 0);
	struct ferry__ps_sub *whole = new_sub(ps, 0), *key3 = new_sub(ps, 0);
	struct ferry__ps_sub *both = new_sub(ps, 0), *key4 = new_sub(ps, 0);
	uint8_t k3 = 3, k4 = 4, keys[8];

	ftest_assert_int_eq(ferry__ps_subscribe(whole, CH, NULL, 0, 0), 1);
	ftest_assert_int_eq(ferry__ps_subscribe(key3, CH, &k3, 1, 0), 1);
	ftest_assert_int_eq(ferry__ps_subscribe(both, CH, &k3, 1, 0), 1);
	ftest_assert_int_eq(ferry__ps_subscribe(both, CH, NULL, 0, 0), 1);
	ftest_assert_int_eq(ferry__ps_subscribe(key4, CH, &k4, 1, 0), 1);
	publish(ps, 3);
	publish(ps, 4);
	ftest_assert_ok(ferry__ps_publish(ps, CH, NULL, 0, "log", 3, NULL));
	ftest_assert_int_eq(drain_keys(whole, keys, 8), 3);
	ftest_assert_int_eq(drain_keys(both, keys, 8), 3); /* key 3 once, not twice */
	ftest_assert_int_eq(drain_keys(key3, keys, 8), 1);
	ftest_assert_uint_eq(keys[0], 3);
	ftest_assert_int_eq(drain_keys(key4, keys, 8), 1);
	ftest_assert_uint_eq(keys[0], 4);
	ftest_assert_ok(ferry__ps_unsubscribe(key4, CH, &k4, 1));
	ftest_assert_errno(ferry__ps_unsubscribe(key4, CH, &k4, 1), -ENOENT);
	ftest_assert_ok(ferry__ps_unsubscribe(both, CH, NULL, 0));
	publish(ps, 4);
	publish(ps, 3);
	ftest_assert_int_eq(drain_keys(key4, keys, 8), 0);
	ftest_assert_int_eq(drain_keys(both, keys, 8), 1); /* still has key 3 */
	ferry__ps_sub_destroy(key3);
	ferry__ps_sub_destroy(key4);
	ferry__ps_sub_destroy(both);
	ferry__ps_sub_destroy(whole);
	ferry__ps_destroy(ps);
}

/* A key subscribed under the same subscriber's whole-channel scope needs no snapshot (the whole
 * scope's deltas cover it), so nothing is pending and its owner drains nothing; the next delta
 * must still make the subscriber ready. A ready fired for that subscribe left it marked as
 * notified with nothing to drain, and it heard nothing of the channel again. */
FTEST(a_key_under_a_whole_scope_still_hears_the_next_delta)
{
	struct ferry__ps *ps = new_ps(0, 0);
	struct ferry__ps_sub *sub = new_sub(ps, 0);
	struct ferry__ps_batch b;
	uint8_t k3 = 3, keys[4];
	int before;

	ftest_assert_int_eq(ferry__ps_subscribe(sub, CH, NULL, 0, FERRY__PS_WANT_SNAPSHOT), 1);
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 2); /* RESYNC, SNAPSHOT_END: nothing yet */
	ferry__ps_batch_release(&b);
	ftest_assert_int_eq(ferry__ps_subscribe(sub, CH, &k3, 1, FERRY__PS_WANT_SNAPSHOT), 1);
	ftest_assert_false(ferry__ps_pending(sub)); /* as the server does: no drain */
	before = readies;
	publish(ps, 3);
	ftest_assert_int_gt(readies, before);
	ftest_assert_true(ferry__ps_pending(sub));
	ftest_assert_int_eq(drain_keys(sub, keys, 4), 1);
	ftest_assert_uint_eq(keys[0], 3);
	ferry__ps_sub_destroy(sub);
	ferry__ps_destroy(ps);
}

/* Past its bound a subscriber's queue is dropped; its next drain is RESYNC + snapshot, and the
 * engine never holds more than the bound for it. */
FTEST(slow_subscriber_resyncs)
{
	const size_t bound = 10 * (sizeof(struct ferry__ps_msg) + sizeof(void *) + 4);
	struct ferry__ps *ps = new_ps(0, 0);
	struct ferry__ps_sub *slow = new_sub(ps, bound);
	struct ferry__ps_sub_stats st;
	struct ferry__ps_batch b;
	uint64_t seq = 0;

	ftest_assert_ok(ferry__ps_subscribe(slow, CH, NULL, 0, 0));
	for (int i = 0; i < 1000; i++) {
		seq = publish(ps, (uint8_t)(i % 5));
		ferry__ps_sub_stats(slow, &st);
		ftest_assert_uint_le(st.buffered_bytes, bound);
	}
	ferry__ps_sub_stats(slow, &st);
	ftest_assert_uint_eq(st.resyncs, 1);
	ftest_assert_uint_eq(st.buffered_msgs, 0); /* nothing queued while a resync is due */
	ftest_assert_int_eq(ferry__ps_drain(slow, &b), 1 + 5 + 1);
	ftest_assert_int_eq(b.msgs[0]->kind, FERRY__PS_RESYNC);
	ftest_assert_uint_eq(b.msgs[0]->key_size, 0);
	ftest_assert_uint_eq(b.msgs[0]->seq, seq);
	ftest_assert_int_eq(b.msgs[6]->kind, FERRY__PS_SNAPSHOT_END); /* whole channel too */
	ftest_assert_uint_eq(b.msgs[6]->key_size, 0);
	ftest_assert_uint_eq(b.msgs[6]->seq, seq);
	for (size_t i = 1; i < b.count - 1; i++) {
		ftest_assert_int_eq(b.msgs[i]->kind, FERRY__PS_SNAPSHOT);
		ftest_assert_uint_eq(b.msgs[i]->seq, seq);
		ftest_assert_mem_eq(b.msgs[i]->data, &table[b.msgs[i]->key[0]], 4);
	}
	ftest_assert_uint_eq(b.watermarks[CH], seq);
	ferry__ps_batch_release(&b);
	ftest_assert_uint_eq(publish(ps, 1), seq + 1);
	ftest_assert_int_eq(ferry__ps_drain(slow, &b), 1);
	ftest_assert_int_eq(b.msgs[0]->kind, FERRY__PS_DELTA);
	ferry__ps_batch_release(&b);
	ferry__ps_destroy(ps);
}

/* A reconnecting subscriber within the history gets exactly the messages after its watermark
 * that match its scopes. */
FTEST(resume_replays_exactly_the_missing_messages)
{
	struct ferry__ps *ps = new_ps(64, 0);
	struct ferry__ps_sub *sub = new_sub(ps, 0);
	struct ferry__ps_batch b;
	uint8_t k2 = 2, k5 = 5;
	uint64_t mark, epoch = ferry__ps_epoch(ps);

	ftest_assert_ok(ferry__ps_subscribe(sub, CH, &k2, 1, 0));
	ftest_assert_ok(ferry__ps_subscribe(sub, CH, &k5, 1, 0));
	for (int i = 0; i < 10; i++)
		publish(ps, (uint8_t)i);
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 2);
	mark = b.watermarks[CH];
	ftest_assert_uint_eq(mark, 10);
	ferry__ps_batch_release(&b);
	ferry__ps_sub_destroy(sub); /* the connection drops */
	for (int i = 0; i < 30; i++)
		publish(ps, (uint8_t)(i % 8)); /* keys 2 and 5: 4 times each */
	sub = new_sub(ps, 0);
	ftest_assert_ok(ferry__ps_subscribe(sub, CH, &k2, 1, 0));
	ftest_assert_ok(ferry__ps_subscribe(sub, CH, &k5, 1, 0));
	publish(ps, 2); /* queued before the resume: dropped, the replay covers it */
	ftest_assert_int_eq(ferry__ps_resume(sub, CH, epoch, mark), 0);
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 9);
	for (size_t i = 0; i < b.count; i++) {
		ftest_assert_int_eq(b.msgs[i]->kind, FERRY__PS_DELTA);
		ftest_assert_uint_gt(b.msgs[i]->seq, i ? b.msgs[i - 1]->seq : mark);
		ftest_assert_true(b.msgs[i]->key[0] == 2 || b.msgs[i]->key[0] == 5);
	}
	ftest_assert_uint_eq(b.msgs[8]->seq, 41);
	ferry__ps_batch_release(&b);
	ftest_assert_errno(ferry__ps_resume(sub, FERRY_GCS_CH_LOGS, epoch, 0), -ENOENT);
	ferry__ps_destroy(ps);
}

FTEST(resume_past_the_history_gets_a_snapshot)
{
	struct ferry__ps *ps = new_ps(8, 0);
	struct ferry__ps_sub *sub = new_sub(ps, 0);
	struct ferry__ps_batch b;
	uint8_t k1 = 1;
	uint64_t epoch = ferry__ps_epoch(ps);

	for (int i = 0; i < 20; i++)
		publish(ps, (uint8_t)(i % 4));
	ftest_assert_ok(ferry__ps_subscribe(sub, CH, &k1, 1, 0));
	ftest_assert_int_eq(ferry__ps_resume(sub, CH, epoch, 5), 1);
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 3);
	ftest_assert_int_eq(b.msgs[0]->kind, FERRY__PS_RESYNC);
	ftest_assert_uint_eq(b.msgs[0]->key[0], 1);
	ftest_assert_int_eq(b.msgs[1]->kind, FERRY__PS_SNAPSHOT);
	ftest_assert_uint_eq(*(const uint32_t *)(const void *)b.msgs[1]->data, table[1]);
	ftest_assert_int_eq(b.msgs[2]->kind, FERRY__PS_SNAPSHOT_END);
	ftest_assert_uint_eq(b.msgs[2]->key[0], 1);
	ferry__ps_batch_release(&b);
	/* Another incarnation's seq, or one from the future: snapshot too. */
	ftest_assert_int_eq(ferry__ps_resume(sub, CH, epoch + 1, 19), 1);
	ftest_assert_int_eq(ferry__ps_resume(sub, CH, epoch, 21), 1);
	ftest_assert_int_eq(ferry__ps_resume(sub, CH, epoch, 20), 0); /* up to date */
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 0);
	ferry__ps_batch_release(&b);
	ferry__ps_destroy(ps);
}

/* A new scope with a snapshot: deltas published before the drain are folded into it, never
 * delivered as well. */
FTEST(subscribe_with_snapshot_then_deltas)
{
	struct ferry__ps *ps = new_ps(0, 0);
	struct ferry__ps_sub *sub = new_sub(ps, 0);
	struct ferry__ps_batch b;
	uint8_t k7 = 7;

	publish(ps, 7);
	publish(ps, 8);
	ftest_assert_ok(ferry__ps_subscribe(sub, CH, &k7, 1, FERRY__PS_WANT_SNAPSHOT));
	publish(ps, 7); /* version 2 */
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 3);
	ftest_assert_int_eq(b.msgs[0]->kind, FERRY__PS_RESYNC);
	ftest_assert_int_eq(b.msgs[1]->kind, FERRY__PS_SNAPSHOT);
	ftest_assert_uint_eq(*(const uint32_t *)(const void *)b.msgs[1]->data, 2);
	ftest_assert_uint_eq(b.msgs[1]->seq, 3);
	ftest_assert_int_eq(b.msgs[2]->kind, FERRY__PS_SNAPSHOT_END);
	ftest_assert_uint_eq(b.msgs[2]->seq, 3);
	ferry__ps_batch_release(&b);
	publish(ps, 7);
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 1);
	ftest_assert_uint_eq(b.msgs[0]->seq, 4);
	ferry__ps_batch_release(&b);
	ferry__ps_destroy(ps);
}

/* Issue 22: a key with no record yet still gets a complete snapshot (RESYNC then END, both
 * naming the key), so the subscriber knows it is absent; the put comes as the next delta. */
FTEST(keyed_snapshot_of_a_missing_key_ends)
{
	struct ferry__ps *ps = new_ps(0, 0);
	struct ferry__ps_sub *sub = new_sub(ps, 0);
	struct ferry__ps_batch b;
	uint8_t k9 = 9;

	publish(ps, 8);
	ftest_assert_ok(ferry__ps_subscribe(sub, CH, &k9, 1, FERRY__PS_WANT_SNAPSHOT));
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 2);
	for (size_t i = 0; i < 2; i++) {
		ftest_assert_int_eq(b.msgs[i]->kind, i ? FERRY__PS_SNAPSHOT_END : FERRY__PS_RESYNC);
		ftest_assert_uint_eq(b.msgs[i]->key_size, 1);
		ftest_assert_uint_eq(b.msgs[i]->key[0], 9);
		ftest_assert_uint_eq(b.msgs[i]->seq, 1);
		ftest_assert_uint_eq(b.msgs[i]->size, 0);
	}
	ferry__ps_batch_release(&b);
	publish(ps, 9);
	ftest_assert_int_eq(ferry__ps_drain(sub, &b), 1);
	ftest_assert_int_eq(b.msgs[0]->kind, FERRY__PS_DELTA);
	ftest_assert_uint_eq(b.msgs[0]->key[0], 9);
	ftest_assert_uint_eq(b.msgs[0]->seq, 2);
	ferry__ps_batch_release(&b);
	ferry__ps_destroy(ps);
}

FTEST(limits_and_bad_input)
{
	struct ferry__ps_opts opts = {.max_message_bytes = 8, .max_subscriptions = 2};
	struct ferry__ps *ps;
	struct ferry__ps_sub *sub;
	uint8_t key[FERRY__PS_KEY_MAX + 1] = {0}, k = 1;

	ftest_assert_ok(ferry__ps_create(&opts, &ps));
	ftest_assert_ok(ferry__ps_sub_create(ps, NULL, &sub));
	ftest_assert_errno(ferry__ps_publish(ps, CH, "x", 1, "123456789", 9, NULL), -E2BIG);
	ftest_assert_errno(ferry__ps_publish(ps, FERRY_GCS_CH_COUNT, NULL, 0, "x", 1, NULL),
			   -EINVAL);
	ftest_assert_errno(ferry__ps_publish(ps, CH, key, sizeof(key), "x", 1, NULL), -EINVAL);
	ftest_assert_uint_eq(ferry__ps_seq(ps, CH), 0);
	ftest_assert_int_eq(ferry__ps_subscribe(sub, CH, NULL, 0, 0), 1);
	ftest_assert_int_eq(ferry__ps_subscribe(sub, CH, &k, 1, 0), 1);
	k = 2;
	ftest_assert_errno(ferry__ps_subscribe(sub, CH, &k, 1, 0), -ENOSPC);
	ftest_assert_errno(ferry__ps_subscribe(sub, CH, key, sizeof(key), 0), -EINVAL);
	ferry__ps_destroy(ps);
}

/* Publishing under allocation failure either fails cleanly (no seq used) or succeeds; a
 * subscriber whose queue cannot grow is resynced; a failed drain leaves everything as it was. */
FTEST(allocation_failures)
{
	struct ferry__ps *ps = new_ps(4, 0);
	struct ferry__ps_sub *sub = new_sub(ps, 0);
	struct ferry__ps_sub_stats st;
	struct ferry__ps_batch b;
	uint64_t before;
	int ret, failures = 0;

	ftest_assert_ok(ferry__ps_subscribe(sub, CH, NULL, 0, 0));
	for (long n = 0; n < 400; n++) {
		uint8_t key = (uint8_t)(n % NKEYS);

		before = ferry__ps_seq(ps, CH);
		ferry__alloc_fail_after(n % 3);
		ret = ferry__ps_publish(ps, CH, &key, 1, &n, sizeof(n), NULL);
		ferry__alloc_fail_after(-1);
		if (ret == -ENOMEM) {
			ftest_assert_uint_eq(ferry__ps_seq(ps, CH), before);
			failures++;
		} else {
			ftest_assert_ok(ret);
			table[key]++;
		}
	}
	ftest_assert_int_gt(failures, 0);
	ferry__ps_sub_stats(sub, &st);
	ftest_assert_uint_gt(st.resyncs, 0); /* a queue growth failed somewhere */
	for (long n = 0;; n++) {
		ferry__alloc_fail_after(n);
		ret = ferry__ps_drain(sub, &b);
		ferry__alloc_fail_after(-1);
		if (ret >= 0)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		ftest_assert_true(ferry__ps_pending(sub));
	}
	ftest_assert_int_gt(ret, 0);
	ferry__ps_batch_release(&b);
	ftest_assert_false(ferry__ps_pending(sub));
	ferry__ps_destroy(ps);
}

/* ---- randomized: replicas equal the table after every drain ---- */

struct client {
	struct ferry__ps_sub *sub; /* current connection */
	bool whole;		   /* subscribes to the whole channel, else keys < 4 */
	uint32_t replica[NKEYS];   /* what it believes */
	uint64_t applied[NKEYS];   /* seq of the last change applied per key */
	uint64_t epoch;		   /* epoch of its watermark */
	uint64_t watermark;	   /* last complete seq */
	unsigned open_snapshots;   /* RESYNCs whose SNAPSHOT_END has not come yet */
};

static bool in_scope(const struct client *c, uint8_t key)
{
	return c->whole || key < 4;
}

static void client_connect(struct ferry__ps *ps, struct client *c, bool fresh, size_t bound)
{
	c->sub = new_sub(ps, bound);
	if (c->whole) {
		ftest_assert_ok(ferry__ps_subscribe(c->sub, CH, NULL, 0,
						    fresh ? FERRY__PS_WANT_SNAPSHOT : 0));
	} else {
		for (uint8_t k = 0; k < 4; k++)
			ftest_assert_ok(ferry__ps_subscribe(c->sub, CH, &k, 1,
							    fresh ? FERRY__PS_WANT_SNAPSHOT : 0));
	}
	if (!fresh)
		ftest_assert_ok(ferry__ps_resume(c->sub, CH, c->epoch, c->watermark));
}

static void client_apply(struct client *c, const struct ferry__ps_msg *m)
{
	uint8_t key = m->key_size ? m->key[0] : 0;
	uint32_t value = 0;

	if (m->size == sizeof(value))
		memcpy(&value, m->data, sizeof(value));
	switch (m->kind) {
	case FERRY__PS_RESYNC:
		c->open_snapshots++;
		for (uint8_t k = 0; k < NKEYS; k++) {
			if (m->key_size && k != key)
				continue;
			c->replica[k] = 0;
			c->applied[k] = m->seq;
		}
		break;
	case FERRY__PS_SNAPSHOT:
		ftest_assert_true(in_scope(c, key));
		ftest_assert_true(c->open_snapshots > 0); /* inside RESYNC ... END */
		c->replica[key] = value;
		break;
	case FERRY__PS_SNAPSHOT_END:
		ftest_assert_true(c->open_snapshots > 0);
		c->open_snapshots--;
		break;
	default:
		ftest_assert_int_eq(c->open_snapshots, 0); /* every snapshot ended before deltas */
		ftest_assert_true(in_scope(c, key));
		ftest_assert_uint_gt(m->seq, c->applied[key]); /* never applied twice */
		c->replica[key] = value;
		c->applied[key] = m->seq;
		break;
	}
}

static void client_drain(struct ferry__ps *ps, struct client *c)
{
	struct ferry__ps_batch b;
	int n = ferry__ps_drain(c->sub, &b);

	ftest_assert_ok(n);
	for (int i = 0; i < n; i++)
		client_apply(c, b.msgs[i]);
	ftest_assert_int_eq(c->open_snapshots, 0); /* a batch never ends inside a snapshot */
	c->epoch = b.epoch;
	c->watermark = b.watermarks[CH];
	ftest_assert_uint_eq(c->watermark, ferry__ps_seq(ps, CH));
	for (uint8_t k = 0; k < NKEYS; k++)
		if (in_scope(c, k))
			ftest_assert_uint_eq(c->replica[k], table[k]); /* nothing missed */
	ferry__ps_batch_release(&b);
}

FTEST(random_runs_keep_replicas_exact)
{
	const size_t bound = 24 * (sizeof(struct ferry__ps_msg) + sizeof(void *) + 4);
	struct ferry__ps *ps = new_ps(32, 0);
	struct client clients[2] = {{.whole = true}, {.whole = false}};
	struct ferry__ps_sub_stats st;
	uint64_t resyncs = 0;

	srand(2024);
	for (int i = 0; i < 2; i++)
		client_connect(ps, &clients[i], true, bound);
	for (int step = 0; step < 20000; step++) {
		struct client *c = &clients[rand() % 2];
		int action = rand() % 100;

		if (action < 80) {
			publish(ps, (uint8_t)(rand() % NKEYS));
		} else if (action < 95) {
			client_drain(ps, c);
		} else {
			ferry__ps_sub_stats(c->sub, &st);
			resyncs += st.resyncs;
			ferry__ps_sub_destroy(c->sub);
			if (rand() % 4 == 0)
				c->epoch ^= 1; /* as if the GCS had restarted */
			client_connect(ps, c, false, bound);
		}
	}
	for (int i = 0; i < 2; i++) {
		client_drain(ps, &clients[i]);
		ferry__ps_sub_stats(clients[i].sub, &st);
		resyncs += st.resyncs;
	}
	ftest_log("%llu bound resyncs, %d snapshot calls", (unsigned long long)resyncs,
		  snapshot_calls);
	ftest_assert_uint_gt(resyncs, 0);
	ferry__ps_destroy(ps);
}
