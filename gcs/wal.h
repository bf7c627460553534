/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS write-ahead log: an append-only, CRC-checked record log on local disk, written through
 * io_uring with group commit, plus snapshots that let the log be truncated. Payloads are opaque
 * here (GcsRecords, gcs/ops.h defines them).
 *
 * DESIGN
 * Files in the directory:
 *   wal-<first LSN as 16 hex digits>.log  segments; a new one starts at open and at each snapshot
 *   snap-<LSN as 16 hex digits>.snap      the state after record <LSN>; only the newest is kept
 *   *.tmp                                 a snapshot being written (removed at open)
 * Segment: a 24-byte header ("FERRYWAL", u32 version 2, u32 0, u64 first LSN), then frames.
 * Frame: u32 payload bytes n, u32 CRC32C over (LSN, index, payload), u64 LSN, u32 index (the
 *   frame's position in its group; in a snapshot, the record number), n payload bytes.
 *   All integers little-endian. LSNs are 1, 2, 3, ... with no gaps across segments.
 * Snapshot: a 32-byte header ("FERRYSNP", u32 version 2, u32 record count, u64 LSN, u32 0,
 *   u32 CRC32C of the first 28 bytes), then frames whose LSN field is the snapshot's LSN.
 * A file of another version is refused at open (-EPROTONOSUPPORT, logged): version 1 held the
 *   hand-written GCS records of the first release, which this GCS no longer reads.
 *
 * Group commit. Records are appended to the open group (a memory buffer). ferry__wal_submit()
 * (the server calls it once per loop turn) closes the group and sends it as one io_uring write
 * with RWF_DSYNC (durable when it completes, like a write + fdatasync). While that is in
 * flight, new records gather in the next group, which goes out as soon as the previous write
 * completes: under load every write covers everything that arrived during the previous one.
 * Only one group is in flight at a time, so a torn write can only be the last records of the
 * log. When a write completes the durable LSN advances and the durable callback runs: a server
 * acknowledges a client's write once the durable LSN reaches the write's LSN. A short write is
 * continued; a failed write is fatal (the log stops accepting records and reports the error:
 * failures of a synchronous write, like fsync failures, are never retried).
 *
 * Zero fill. The active segment is kept allocated (zeros written with RWF_DSYNC, 1 MiB at a
 * time) ~2 MiB past the log's end, so a group's write overwrites blocks that exist instead of
 * growing the file: no journal commit for the size, 85-100 us per group instead of 145-170 us
 * on this machine. A group never overlaps a fill in flight (it waits for it). Replay reads a
 * zero frame header followed by nothing but zeros as the clean end of a segment; zeros with
 * anything after them are damage, judged by the torn-tail rule below.
 *
 * Snapshots. ferry__wal_snapshot_start() switches appends to a new segment and fixes the
 * snapshot's LSN S (the last record appended); the caller then adds the state as records and
 * calls ferry__wal_snapshot_write(), which writes a temp file through the same ring, fsyncs it,
 * renames it into place, fsyncs the directory and deletes the segments and snapshot it replaces.
 * A crash at any point leaves either the old snapshot and all segments, or the new one.
 *
 * Replay at open: the newest snapshot (records passed with from_snapshot true), then every
 * segment record with LSN > S in order. A bad frame (short, over the size limit, CRC mismatch)
 * is a torn tail when nothing written later survives: no later segment holds a record and no
 * intact frame of a later group follows it (frames of the torn group itself may, as a disk
 * persists the sectors of one write in any order). A torn tail is logged, the file truncated
 * there, and replay ends. Anything else, a gap in LSNs or a bad snapshot is corruption: open
 * fails with -EIO (logged) rather than start with less than what was acknowledged. (Damage
 * inside the last group written cannot be told from a torn write and is treated as one.)
 *
 * Threads: none of its own. Completions are reaped by ferry__wal_process() (poll the event fd:
 * it becomes readable when completions arrive) or ferry__wal_wait(); callbacks run inside them.
 * Thread model: not thread-safe; one thread (the GCS loop) owns a log.
 */
#ifndef FERRY_GCS_WAL_H
#define FERRY_GCS_WAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gcs/codec.h"

/* The durable LSN advanced to @lsn (@err 0), or the log failed for good with @err < 0. */
typedef void (*ferry__wal_durable_fn)(void *arg, uint64_t lsn, int err);
/* A snapshot of @lsn is in place (@err 0) or failed (@err < 0; the log is still fine). */
typedef void (*ferry__wal_snapshot_fn)(void *arg, uint64_t lsn, int err);
/* One replayed record. Return 0 to go on, or a negative errno to fail the open with it. */
typedef int (*ferry__wal_replay_fn)(void *arg, uint64_t lsn, bool from_snapshot,
				    const void *payload, size_t size);

/* Options; only dir is required. */
struct ferry__wal_opts {
	const char *dir;		      /* created if missing */
	size_t max_record_bytes;	      /* largest payload; 0 = 64 MiB */
	size_t max_buffered_bytes;	      /* not yet durable; past it begin says -ENOBUFS;
						 0 = 256 MiB */
	ferry__wal_durable_fn durable;	      /* or NULL */
	ferry__wal_snapshot_fn snapshot_done; /* or NULL */
	void *arg;			      /* for both callbacks */
};

struct ferry__wal_stats {
	uint64_t records;	   /* appended since open */
	uint64_t groups;	   /* group writes completed (each RWF_DSYNC) */
	uint64_t bytes_written;	   /* log bytes written since open */
	uint64_t short_writes;	   /* writes the kernel cut short (continued) */
	uint64_t replayed;	   /* records replayed at open (snapshot + log) */
	uint64_t truncated_bytes;  /* torn tail removed at open */
	uint64_t snapshots;	   /* snapshots completed */
	uint64_t segments_deleted; /* segments removed after snapshots */
	uint64_t log_bytes;	   /* log bytes since the last snapshot (or since open,
				       including replayed segments) */
	uint64_t zero_filled;	   /* segment bytes allocated ahead of the log (wal.c) */
};

struct ferry__wal;

/*
 * ferry__wal_open() - open or create the log in @opts->dir, replaying what it holds through
 * @replay (may be NULL) before returning. Returns 0, -EINVAL (no dir), -EIO (corruption, logged),
 * the error of a failed system call or of @replay, or -ENOMEM.
 */
int ferry__wal_open(const struct ferry__wal_opts *opts, ferry__wal_replay_fn replay,
		    void *replay_arg, struct ferry__wal **out);

/* ferry__wal_close() - write what is queued, wait for it (and a snapshot in flight), close.
 * Callbacks may run. NULL is a no-op. */
void ferry__wal_close(struct ferry__wal *w);

/*
 * Appending a record: ferry__wal_begin() hands out the buffer to append the payload to (use the
 * ferry__gcs_put_* writer); then ferry__wal_commit() gives it the next LSN, or
 * ferry__wal_cancel() forgets it. Nothing else may be called in between. begin returns 0,
 * -ENOBUFS (too much not yet durable: back off), -ENOMEM, or the log's fatal error. commit
 * returns 0 or -E2BIG (payload over the limit; the record is cancelled). A committed record is
 * written by a later submit and durable when ferry__wal_durable_lsn() reaches its LSN.
 */
int ferry__wal_begin(struct ferry__wal *w, struct ferry__gcs_buf **payload);
int ferry__wal_commit(struct ferry__wal *w, uint64_t *lsn);
void ferry__wal_cancel(struct ferry__wal *w);
/* begin + copy + commit. */
int ferry__wal_append(struct ferry__wal *w, const void *data, size_t size, uint64_t *lsn);

/* ferry__wal_submit() - start writing the open group unless a write is in flight (then it goes
 * when that completes). 0 or the log's fatal error. */
int ferry__wal_submit(struct ferry__wal *w);
/* ferry__wal_process() - handle completions that arrived, without blocking. 0 or the error. */
int ferry__wal_process(struct ferry__wal *w);
/* ferry__wal_wait() - submit, then block until every committed record is durable and no
 * snapshot is being written. 0 or the log's fatal error. */
int ferry__wal_wait(struct ferry__wal *w);
/* ferry__wal_event_fd() - readable when completions are waiting for ferry__wal_process(). */
int ferry__wal_event_fd(const struct ferry__wal *w);

uint64_t ferry__wal_last_lsn(const struct ferry__wal *w);
/* The payload limit commit enforces (max_record_bytes after defaults). */
size_t ferry__wal_max_record_bytes(const struct ferry__wal *w);
uint64_t ferry__wal_durable_lsn(const struct ferry__wal *w);
/* ferry__wal_error() - 0, or the fatal error that stopped the log. */
int ferry__wal_error(const struct ferry__wal *w);
void ferry__wal_get_stats(const struct ferry__wal *w, struct ferry__wal_stats *out);

/*
 * Snapshots: start (returns the snapshot's LSN S in *@lsn: every record up to S must be in it),
 * then begin/commit one record per piece of state (same rules as for log records), then write
 * (asynchronous: snapshot_done reports the end) or cancel. start returns 0, -EBUSY (one is being
 * built or written), or the error of creating the new segment; begin -ENOMEM; commit -E2BIG;
 * write 0 or a submission error (the snapshot is then cancelled).
 */
int ferry__wal_snapshot_start(struct ferry__wal *w, uint64_t *lsn);
int ferry__wal_snapshot_begin(struct ferry__wal *w, struct ferry__gcs_buf **payload);
int ferry__wal_snapshot_commit(struct ferry__wal *w);
int ferry__wal_snapshot_write(struct ferry__wal *w);
void ferry__wal_snapshot_cancel(struct ferry__wal *w);
/* ferry__wal_snapshot_busy() - a snapshot is being built or written. */
bool ferry__wal_snapshot_busy(const struct ferry__wal *w);

#endif
