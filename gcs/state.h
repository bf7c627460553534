/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS state: tables + KV + object directory behind one mutation entry point, optionally made
 * durable by the write-ahead log. This is what the GCS server builds on.
 *
 * DESIGN
 * - Every change is a struct ferry__gcs_op passed to ferry__gcs_state_apply(). With a WAL the op
 *   is encoded into a log record first (so running out of memory there changes nothing), then
 *   applied; only ops that succeed are committed to the log, each with the next LSN. Replay
 *   decodes each record and applies it through the same code, and every op is deterministic
 *   (times come in the op, never from a clock), so a replayed state is identical.
 * - Acknowledging writes: apply returns the op's LSN. The write is durable once
 *   ferry__gcs_state_durable_lsn() >= that LSN; the durable callback fires as the durable LSN
 *   advances (from ferry__gcs_state_process/wait, never inside apply). Without a WAL, ops are
 *   "durable" (in memory) as soon as apply returns. A server therefore: applies, publishes the
 *   change at once, and sends the client's reply when the durable LSN passes its LSN. After a
 *   crash subscribers may have seen a change that was never acknowledged; the restarted GCS has
 *   a new pub/sub epoch, so they resync to the replayed state.
 * - Changes: the change callback reports each record an op changed (cascades included: a dead
 *   node's workers and object locations), with the pub/sub channel it belongs to, so the server
 *   can publish. It runs inside apply, not during replay, and must not call apply.
 * - Snapshots: canonical (keyed tables sorted by ID, logs in order, KV in key order), written
 *   through the WAL; ferry__gcs_state_maybe_snapshot() starts one when the log has grown past
 *   the configured size. ferry__gcs_state_dump() gives the same records in memory, so two states
 *   are equal exactly when their dumps are.
 *
 * Thread model: not thread-safe; the GCS loop thread owns the state.
 */
#ifndef FERRY_GCS_STATE_H
#define FERRY_GCS_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gcs/kv.h"
#include "gcs/objdir.h"
#include "gcs/ops.h"
#include "gcs/tables.h"
#include "gcs/wal.h"

/* One changed record. */
struct ferry__gcs_change {
	enum ferry_gcs_channel channel; /* where it would be published */
	enum ferry__gcs_op_type op;	/* the op that caused it (cascades: the original op) */
	const void *key;		/* the record's ID (errors: the job ID) */
	size_t key_size;		/* 16, or 20 for objects */
	const void *record;		/* struct ferry__gcs_node, _job, _worker, _actor, _error or
					    ferry__objdir_entry; NULL: the record was removed */
};

typedef void (*ferry__gcs_changed_fn)(void *arg, const struct ferry__gcs_change *c);

/* Options; zeros are the defaults (in memory only). */
struct ferry__gcs_state_opts {
	const char *wal_dir;		      /* NULL: no durability */
	struct ferry__kv_opts kv;	      /* KV limits */
	struct ferry__gcs_tables_opts tables; /* log sizes */
	uint32_t objdir_shard_index;	      /* this GCS's object directory shard */
	uint32_t objdir_shard_count;	      /* shards; 0 = 1 */
	size_t snapshot_log_bytes;	      /* maybe_snapshot threshold; 0 = 64 MiB */
	size_t wal_max_buffered_bytes;	      /* see ferry__wal_opts; 0 = default */
	ferry__wal_durable_fn durable;	      /* durable LSN advanced / log failed; or NULL */
	ferry__wal_snapshot_fn snapshot_done; /* a snapshot ended; or NULL */
	ferry__gcs_changed_fn changed;	      /* or NULL */
	void *arg;			      /* for the callbacks */
};

struct ferry__gcs_state;

/*
 * ferry__gcs_state_open() - a state, restored from @opts->wal_dir if it holds a log. Returns 0,
 * -ENOMEM, -EINVAL, or the WAL's open error (-EIO: corrupt log, logged).
 */
int ferry__gcs_state_open(const struct ferry__gcs_state_opts *opts, struct ferry__gcs_state **out);
/* ferry__gcs_state_close() - flush and wait for the WAL, then free everything. NULL is a no-op. */
void ferry__gcs_state_close(struct ferry__gcs_state *s);

/*
 * ferry__gcs_state_apply() - apply @op (borrowed). Returns the op's result (>= 0: 1 added or
 * changed, 0 nothing to change, a count for KV delete by prefix and the objdir cascades) and
 * sets *@lsn (may be NULL) to its LSN; or a negative errno from the table (nothing changed,
 * nothing logged), -ENOBUFS (the WAL is too far behind: retry later), -E2BIG (record too large),
 * or the WAL's fatal error. RESTORE_* ops are for snapshots and refused here (-EINVAL).
 */
int ferry__gcs_state_apply(struct ferry__gcs_state *s, const struct ferry__gcs_op *op,
			   uint64_t *lsn);

/*
 * ferry__gcs_state_apply_request() - apply @op for request @seq of client @client (16 bytes;
 * NULL or all zeros: no deduplication, as ferry__gcs_state_apply). A request applied before
 * (also before a restart on the WAL: results are logged as REQUEST_DONE records and kept in
 * snapshots; a window of recent seqs per client is remembered: gcs/dedup.h) is not applied again:
 * its first result is returned, with *@lsn the last LSN applied so far. Failed requests are not
 * remembered (they changed nothing).
 */
int ferry__gcs_state_apply_request(struct ferry__gcs_state *s, const uint8_t *client, uint64_t seq,
				   const struct ferry__gcs_op *op, uint64_t *lsn);

/* LSNs: the last applied, and the last durable (equal without a WAL). */
uint64_t ferry__gcs_state_last_lsn(const struct ferry__gcs_state *s);
uint64_t ferry__gcs_state_durable_lsn(const struct ferry__gcs_state *s);

/* The WAL driving functions (ferry__wal_submit/process/wait/event_fd); without a WAL they return
 * 0 (event fd: -1). */
int ferry__gcs_state_flush(struct ferry__gcs_state *s);
int ferry__gcs_state_process(struct ferry__gcs_state *s);
int ferry__gcs_state_wait(struct ferry__gcs_state *s);
int ferry__gcs_state_event_fd(const struct ferry__gcs_state *s);

/* ferry__gcs_state_snapshot() - start a snapshot now. 0, -EOPNOTSUPP (no WAL), -EBUSY, -ENOMEM,
 * or a WAL error. */
int ferry__gcs_state_snapshot(struct ferry__gcs_state *s);
/* ferry__gcs_state_maybe_snapshot() - snapshot if the log has grown past the threshold; returns 1
 * if one was started, 0 if not needed, or the error. */
int ferry__gcs_state_maybe_snapshot(struct ferry__gcs_state *s);

/* ferry__gcs_state_dump() - append the canonical records (u32 length + record each) to @out.
 * 0 or -ENOMEM. */
int ferry__gcs_state_dump(struct ferry__gcs_state *s, struct ferry__gcs_buf *out);

/*
 * Records as published and snapshotted (shared by snapshots, pub/sub and table reads):
 * ferry__gcs_restore_op() - @op becomes the RESTORE_* op of @rec, a record of @table (borrowed).
 * ferry__gcs_object_op() - @op becomes the RESTORE_OBJ op of @e, its locations sorted in
 * @scratch with their places beside them (borrowed by @op). 0 or -ENOMEM.
 */
void ferry__gcs_restore_op(struct ferry__gcs_op *op, enum ferry__gcs_table table, const void *rec);
int ferry__gcs_object_op(const struct ferry__objdir_entry *e, struct ferry__gcs_buf *scratch,
			 struct ferry__gcs_op *op);

/* Read access to the parts (borrowed; do not mutate them directly when a WAL is in use). */
struct ferry__gcs_tables *ferry__gcs_state_tables(const struct ferry__gcs_state *s);
struct ferry__kv *ferry__gcs_state_kv(const struct ferry__gcs_state *s);
struct ferry__objdir *ferry__gcs_state_objdir(const struct ferry__gcs_state *s);
/* The WAL, or NULL. */
struct ferry__wal *ferry__gcs_state_wal(const struct ferry__gcs_state *s);

#endif
