/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of the write-ahead log shared by wal.c (writing) and wal_replay.c (reading). */
#ifndef FERRY_GCS_WAL_INT_H
#define FERRY_GCS_WAL_INT_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

#include "gcs/wal.h"

/* 2: every record but the node heartbeat (replayed from no log any more) is a GcsRecord
 * (gcs/ops.h); 1 held the hand-written records, refused at replay (wal_replay.c). */
#define WAL_VERSION 2
#define SEG_MAGIC "FERRYWAL"
#define SNAP_MAGIC "FERRYSNP"
#define SEG_HEADER_SIZE 24
#define SNAP_HEADER_SIZE 32
#define FRAME_HEADER_SIZE 20
#define WAL_NAME_MAX 32
/* Zero fill (wal.c): the active segment is kept allocated this far past the log's end, in
 * chunks of this size. */
#define WAL_FILL_AHEAD (2u << 20)
#define WAL_FILL_CHUNK (1u << 20)

/* A segment file being appended to, or still owed writes. */
struct wal_segment {
	int fd;		    /* open for writing */
	uint64_t first_lsn; /* from its name */
	uint64_t size;	    /* bytes appended: header + frames, written or queued */
	uint64_t zeroed;    /* the file is allocated (zero-filled, durably) up to here */
	unsigned groups;    /* groups queued or in flight that target it, and a zero fill */
	bool no_fill;	    /* a zero fill failed: leave this segment to grow as it goes */
};

/* Records written together: one RWF_DSYNC write. */
struct wal_group {
	struct wal_segment *seg;   /* target file */
	struct ferry__gcs_buf buf; /* frames */
	uint64_t offset;	   /* file offset of buf[0] */
	uint64_t last_lsn;	   /* LSN of the last frame, 0 if none */
	uint32_t records;	   /* frames in it */
	size_t written;		   /* bytes of buf written so far */
	uint64_t submitted_us;	   /* its first write went to the kernel (the metrics) */
	struct wal_group *next;	   /* queue order */
};

/* The snapshot being built or written. */
struct wal_snapshot {
	bool building;		     /* between start and write/cancel */
	bool writing;		     /* I/O in flight */
	uint64_t lsn;		     /* state after this record */
	uint32_t count;		     /* records */
	size_t mark;		     /* offset of the frame being built */
	struct ferry__gcs_buf body;  /* header + frames */
	int fd;			     /* temp file while writing, else -1 */
	size_t written;		     /* bytes written */
	char tmp_name[WAL_NAME_MAX]; /* temp file name */
	char name[WAL_NAME_MAX];     /* final name */
};

struct ferry__wal {
	struct ferry__wal_opts opts;   /* limits, callbacks (dir not kept) */
	int dirfd;		       /* the directory */
	struct io_uring ring;	       /* for every write and sync */
	bool ring_ready;	       /* ring initialised */
	int event_fd;		       /* eventfd registered with the ring */
	struct wal_segment *active;    /* where new groups go */
	struct wal_group *head;	       /* oldest queued group (maybe in flight) */
	struct wal_group *tail;	       /* newest */
	struct wal_group *open;	       /* the group taking records, or NULL */
	struct wal_group *spare;       /* a finished group kept for reuse */
	bool in_flight;		       /* head's write/sync submitted */
	struct wal_segment *filling;   /* a zero fill in flight on this segment, or NULL */
	uint64_t fill_from;	       /* its first byte: no group may reach it meanwhile */
	void *zeros;		       /* WAL_FILL_CHUNK zero bytes, allocated at first fill */
	bool in_record;		       /* between begin and commit/cancel */
	size_t mark;		       /* offset of the frame being appended */
	unsigned cqes_owed;	       /* CQEs the kernel still owes us */
	uint64_t last_lsn;	       /* last LSN given out */
	uint64_t durable_lsn;	       /* last LSN known to be on disk */
	size_t queued_bytes;	       /* frames not yet durable */
	int error;		       /* fatal error, 0 while healthy */
	struct wal_snapshot snap;      /* snapshot in progress */
	struct ferry__wal_stats stats; /* counters */
};

/* A file in the directory, as its name says. */
struct wal_file {
	char kind;		 /* 'w' segment, 's' snapshot, 't' temp */
	uint64_t lsn;		 /* first LSN (segment) or LSN (snapshot) */
	char name[WAL_NAME_MAX]; /* file name */
};

/* CRC of a frame: over the little-endian LSN and index, then the payload. */
uint32_t ferry__wal_frame_crc(uint64_t lsn, uint32_t index, const void *payload, size_t size);
/* Fill the header at @frame for @size payload bytes that follow it. */
void ferry__wal_frame_seal(uint8_t *frame, size_t size, uint64_t lsn, uint32_t index);

/* The files of @dirfd Ferry knows, sorted by kind then LSN. *@files is ferry__malloc'd. */
int ferry__wal_list(int dirfd, struct wal_file **files, size_t *count);

/* Replay the directory's snapshot and segments through @fn; sets last/durable LSN and stats. */
int ferry__wal_replay(struct ferry__wal *w, ferry__wal_replay_fn fn, void *arg);

#endif
