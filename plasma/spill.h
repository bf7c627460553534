/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Spill files: where the store writes sealed primary copies when memory runs short, and where
 * it reads them back from when a client asks for one.
 *
 * DESIGN
 * Files are anonymous (O_TMPFILE, or created and unlinked at once) in the spill directory, so
 * they vanish with the store even when it crashes: nothing stale is left on disk. One write
 * batch becomes one file (a segment): objects are laid out in the batch's order, small ones
 * packed at 64-byte boundaries, those of 64 KiB or more at 4 KiB ones; the items' offsets are
 * the segment's table, kept by the caller. The file is O_DIRECT where the file system allows
 * (spilled bytes must leave memory, and the page cache's copy and writeback cost more than the
 * disk): its space is reserved first with fallocate (a full disk is found before any byte is
 * written), then it is written in pieces of up to 4 MiB, 4 in flight on an io_uring, then one
 * fdatasync: a batch is on disk when the call returns, which is what the benchmark's limit
 * measures. A piece that is the aligned middle of an object at an aligned address goes straight
 * from the object's memory; the rest (small objects, padding, tails, unaligned memory) is copied
 * into aligned staging slots. Reads work the same way in reverse (1 MiB pieces, 16 in flight),
 * for one object or for several consecutive ones in one pass (readv: a restore brings the
 * objects after it in its batch, plasma/store_spill.c). Without O_DIRECT the same pieces go
 * through the page cache and the written file's pages are dropped after the fdatasync.
 * A deleted object's whole blocks are punched out of its file (best effort); a restored one's
 * are not (see spill_drop). A file is closed, and its space given back, when its last object
 * goes.
 *
 * ferry__plasma_spill_write() is synchronous: the calling thread waits for the disk. A batch
 * can also be split so that the disk is waited for elsewhere: batch_new (plan, quota) on the
 * store's thread, batch_run (open, reserve, write, fdatasync) on any thread with its own ring,
 * batch_finish (adopt the file, or count the failure) back on the store's thread. Quotas count
 * the batches in flight.
 *
 * Reads can be split the same way (read_new, read_run, read_finish): a job reads through a
 * duplicate of the file's descriptor into its own staging memory.
 *
 * Thread model: one thread (the store's) calls everything but batch_run and read_run, which
 * touch only their batch or job (and the immutable directory name).
 */
#ifndef FERRY_PLASMA_SPILL_H
#define FERRY_PLASMA_SPILL_H

#include <stdbool.h>
#include <stdint.h>

struct ferry__plasma_spill;
struct ferry__plasma_spill_batch;
struct io_uring;

struct ferry__plasma_spill_opts {
	const char *dir;    /* directory of the spill files (created if missing) */
	uint64_t max_bytes; /* spill space allowed (a quota); 0: as much as the disk has */
};

/* One object of a write batch. */
struct ferry__plasma_spill_item {
	const void *data; /* in: its bytes (data then metadata) */
	uint64_t size;	  /* in: how many */
	uint32_t file;	  /* out: the file that holds it */
	uint64_t offset;  /* out: where in the file */
};

struct ferry__plasma_spill_stats {
	uint64_t files;		 /* open spill files */
	uint64_t disk_bytes;	 /* their total size (counted against max_bytes) */
	uint64_t live_objects;	 /* objects in them not dropped yet */
	uint64_t live_bytes;	 /* their bytes */
	uint64_t written_bytes;	 /* object bytes written since start */
	uint64_t read_bytes;	 /* object bytes read back since start */
	uint64_t uncopied_bytes; /* of written + read: moved straight from/to object memory */
	uint64_t ahead_bytes;	 /* of read: for the 2nd and later objects of a readv */
	uint64_t batches;	 /* write batches since start */
	uint64_t errors;	 /* failed batches and reads since start */
};

/*
 * ferry__plasma_spill_create() - a spill area in @opts->dir (created with mode 0700 if
 * missing, and then removed again by destroy) with its own io_uring. Returns 0, -EINVAL (no directory given, logged), -ENOMEM,
 * or -errno from mkdir/io_uring_queue_init (logged). *@out is written only on success.
 */
int ferry__plasma_spill_create(const struct ferry__plasma_spill_opts *opts,
			       struct ferry__plasma_spill **out);

/* ferry__plasma_spill_destroy() - close every file (their space goes back). Accepts NULL. */
void ferry__plasma_spill_destroy(struct ferry__plasma_spill *sp);

/*
 * ferry__plasma_spill_write() - write @n items into one new file, durably (fdatasync), and
 * fill in each item's file and offset. The data must not change during the call.
 * Returns 0, or on failure nothing is kept (the file is closed): -ENOSPC (disk full, quota, or
 * max_bytes reached; logged), -ENOMEM, -EINVAL (@n is 0), -EIO or another -errno of the write.
 */
int ferry__plasma_spill_write(struct ferry__plasma_spill *sp,
			      struct ferry__plasma_spill_item *items, uint32_t n);

/*
 * ferry__plasma_spill_batch_new() - plan a write of @n items (borrowed, with their bytes, until
 * batch_finish or batch_free) into *@out. Returns 0, -EINVAL (@n is 0), -ENOMEM, -ENOSPC (the
 * spill limit, counting the batches in flight) or an injected error.
 */
int ferry__plasma_spill_batch_new(struct ferry__plasma_spill *sp,
				  struct ferry__plasma_spill_item *items, uint32_t n,
				  struct ferry__plasma_spill_batch **out);

/* ferry__plasma_spill_batch_run() - write the batch to a new file, durably; any thread. @ring:
 * an io_uring to use, or NULL for one of its own. The result waits in the batch. */
void ferry__plasma_spill_batch_run(struct ferry__plasma_spill_batch *b, struct io_uring *ring);

/* ferry__plasma_spill_batch_finish() - after run: keep the file and fill in each item's file
 * and offset, or count the failure. Frees @b. Returns 0 or the -errno of
 * ferry__plasma_spill_write(). */
int ferry__plasma_spill_batch_finish(struct ferry__plasma_spill *sp,
				     struct ferry__plasma_spill_batch *b);

/* ferry__plasma_spill_batch_free() - free a batch that never ran (or whose result is not
 * wanted: its file is closed). batch_finish also frees. Accepts NULL. The area still counts
 * it in flight unless finished: only for batches of an area being destroyed. */
void ferry__plasma_spill_batch_free(struct ferry__plasma_spill_batch *b);

/*
 * ferry__plasma_spill_read() - read @size bytes at @offset of @file into @dst.
 * Returns 0, -EINVAL (no such file or range, logged), -EIO (short file) or -errno of the read.
 */
int ferry__plasma_spill_read(struct ferry__plasma_spill *sp, uint32_t file, uint64_t offset,
			     void *dst, uint64_t size);

/* One object of ferry__plasma_spill_readv(). */
struct ferry__plasma_spill_read {
	uint64_t offset; /* in the file */
	uint64_t size;	 /* bytes */
	void *dst;	 /* where they go */
};

/*
 * ferry__plasma_spill_readv() - read @n objects of @file, in file order and not overlapping,
 * into their @dst, in one sequential pass with several requests in flight (what lies between
 * them is read too: keep them close). Returns 0, -EINVAL (@n is 0, no such file or range, or
 * not in order; logged), -EIO (short file) or -errno of a read; on failure any @dst may hold
 * part of its bytes.
 */
int ferry__plasma_spill_readv(struct ferry__plasma_spill *sp, uint32_t file,
			      const struct ferry__plasma_spill_read *objs, uint32_t n);

/*
 * A read that waits for the disk elsewhere (the store restores in the background): read_new
 * on the store's thread plans it (@n objects as for readv, copied; the file stays readable by
 * the job even if its objects are dropped meanwhile), read_run on any thread reads the first
 * @n of them (at least 1; again with a smaller @n after a failure), with @ring (NULL: one of
 * its own), and read_finish back on the store's thread counts and logs it and frees the job.
 * read_new returns 0, -EINVAL (as readv), -ENOMEM or -errno of dup; read_run and read_finish
 * return 0 or the last pass's -errno (read_finish: -ECANCELED if none ran). read_free frees a
 * job without counting it (the area may be gone already); accepts NULL.
 */
struct ferry__plasma_spill_rjob;
int ferry__plasma_spill_read_new(struct ferry__plasma_spill *sp, uint32_t file,
				 const struct ferry__plasma_spill_read *objs, uint32_t n,
				 struct ferry__plasma_spill_rjob **out);
int ferry__plasma_spill_read_run(struct ferry__plasma_spill_rjob *j, struct io_uring *ring,
				 uint32_t n);
int ferry__plasma_spill_read_finish(struct ferry__plasma_spill *sp,
				    struct ferry__plasma_spill_rjob *j);
void ferry__plasma_spill_read_free(struct ferry__plasma_spill_rjob *j);

/* ferry__plasma_spill_drop() - the object at @offset (@size bytes) of @file is no longer
 * needed: deleted, or (@restored) read back. The file closes, and its space goes back, when
 * its last object goes. A deleted object's whole blocks are punched out at once; a restored
 * one's are not (a punch costs a journal commit and waits for the file's reads in flight, and
 * a file is mostly restored together, so its space comes back soon when it closes). */
void ferry__plasma_spill_drop(struct ferry__plasma_spill *sp, uint32_t file, uint64_t offset,
			      uint64_t size, bool restored);

void ferry__plasma_spill_stats(const struct ferry__plasma_spill *sp,
			       struct ferry__plasma_spill_stats *out);

/* ferry__plasma_spill_inject() - tests: the next write batch fails with @write_err and the
 * next read (readv, or read job: all its passes) with @read_err (negative errnos; 0 leaves
 * that one alone). Once each. */
void ferry__plasma_spill_inject(struct ferry__plasma_spill *sp, int write_err, int read_err);

/* ferry__plasma_spill_inject_read_hold() - tests: the next read job, before it reads, sends a
 * byte to @fd (a socket pair) and waits for one back (a restore in the background). */
void ferry__plasma_spill_inject_read_hold(struct ferry__plasma_spill *sp, int fd);

/* ferry__plasma_spill_file_fd() - tests: the descriptor of spill file @file (to damage it),
 * or -1. */
int ferry__plasma_spill_file_fd(const struct ferry__plasma_spill *sp, uint32_t file);

/* ferry__plasma_spill_inject_hold() - tests: the next batch planned, before it writes, sends a
 * byte to @fd (a socket pair) and waits for one back (a batch in the background holds only its
 * thread). */
void ferry__plasma_spill_inject_hold(struct ferry__plasma_spill *sp, int fd);

#endif
