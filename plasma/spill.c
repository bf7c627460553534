/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Spill files: fused, batched io_uring writes of sealed objects to anonymous files, reads back,
 * space accounting and hole punching. The design is in spill.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/spill.h"

#define RING_DEPTH 64
#define INFLIGHT 32	       /* requests in flight at once */
#define SEG_BYTES (8u << 20)   /* bytes per gathered write */
#define SEG_IOVS 1024u	       /* iovecs per gathered write (IOV_MAX) */
#define READ_BYTES (64u << 20) /* bytes per read request */
#define PACK 64u	       /* objects start on this boundary in a file */
#define PUNCH_MIN_BYTES 65536u /* smaller drops are not worth a syscall */

static const char comp[] = "plasma";

/* Written for the padding between packed objects (writev only reads it). */
static uint8_t zeros[PACK];

struct spill_file {
	int fd;		       /* -1: free slot */
	uint64_t size;	       /* bytes in the file */
	uint64_t live_objects; /* objects not dropped yet */
	uint64_t live_bytes;   /* their bytes */
};

struct ferry__plasma_spill {
	struct io_uring ring;		     /* the module's own ring */
	char *dir;			     /* spill directory */
	struct spill_file *files;	     /* by file id */
	uint32_t nfiles;		     /* slots in files */
	uint64_t max_bytes;		     /* quota; 0: none */
	uint64_t inflight_bytes;	     /* file bytes of the batches being written */
	uint32_t inflight;		     /* batches being written */
	struct ferry__plasma_spill_stats st; /* figures */
	int inject_write;		     /* tests: fail the next batch with this */
	int inject_read;		     /* tests: fail the next read with this */
	int inject_hold;		     /* tests: the next batch waits for a byte here */
	bool made_dir;			     /* we created dir: remove it at the end if empty */
};

/* One request: a gathered write of consecutive iovecs, or a plain read. */
struct job {
	uint64_t off;		 /* file offset */
	uint64_t len;		 /* bytes */
	const struct iovec *iov; /* write: its iovecs */
	uint32_t iovs;		 /* write: how many */
	uint8_t *buf;		 /* read: destination */
};

static void *unconst(const void *p)
{
	return (void *)(uintptr_t)p;
}

int ferry__plasma_spill_create(const struct ferry__plasma_spill_opts *opts,
			       struct ferry__plasma_spill **out)
{
	struct ferry__plasma_spill *sp;
	bool made;
	int r;

	if (!opts || !opts->dir || !opts->dir[0]) {
		FLOG_ERROR(comp, "spill: no directory given");
		return -EINVAL;
	}
	made = mkdir(opts->dir, 0700) == 0;
	if (!made && errno != EEXIST) {
		r = -errno;
		FLOG_ERROR(comp, "spill: cannot create %s: %s", opts->dir, ferry_strerror(r));
		return r;
	}
	r = -ENOMEM;
	sp = ferry__calloc(1, sizeof(*sp));
	if (!sp)
		goto err_rmdir;
	sp->made_dir = made;
	sp->dir = ferry__strdup(opts->dir);
	if (!sp->dir)
		goto err_free_sp;
	r = io_uring_queue_init(RING_DEPTH, &sp->ring, 0);
	if (r < 0) {
		FLOG_ERROR(comp, "spill: io_uring_queue_init: %s", ferry_strerror(r));
		goto err_free_dir;
	}
	sp->max_bytes = opts->max_bytes;
	*out = sp;
	return 0;

err_free_dir:
	ferry__free(sp->dir);
err_free_sp:
	ferry__free(sp);
err_rmdir:
	if (made)
		rmdir(opts->dir);
	return r;
}

void ferry__plasma_spill_destroy(struct ferry__plasma_spill *sp)
{
	if (!sp)
		return;
	for (uint32_t i = 0; i < sp->nfiles; i++)
		if (sp->files[i].fd >= 0)
			close(sp->files[i].fd);
	io_uring_queue_exit(&sp->ring);
	if (sp->made_dir)
		rmdir(sp->dir); /* only if empty: files are anonymous, so it should be */
	ferry__free(sp->files);
	ferry__free(sp->dir);
	ferry__free(sp);
}

/* ---- synchronous fallbacks for short transfers ---- */

/* Write what a short gathered write left: skip @done bytes of @iov, pwrite the rest. */
static int write_rest(int fd, const struct iovec *iov, uint32_t n, uint64_t off, uint64_t done)
{
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t len = iov[i].iov_len;

		if (done >= len) {
			done -= len;
			off += len;
			continue;
		}
		p += done;
		len -= done;
		off += done;
		done = 0;
		while (len) {
			ssize_t w = pwrite(fd, p, len, (off_t)off);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return w < 0 ? -errno : -EIO;
			p += w;
			len -= (size_t)w;
			off += (uint64_t)w;
		}
	}
	return 0;
}

static int read_rest(int fd, uint8_t *p, uint64_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO; /* the file is shorter than recorded */
		p += n;
		len -= (uint64_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* ---- the ring ---- */

static int finish_job(int fd, const struct job *j, bool write, int res)
{
	int r;

	if (res < 0)
		return res;
	if (write) {
		r = (uint64_t)res == j->len
			    ? 0
			    : write_rest(fd, j->iov, j->iovs, j->off, (uint64_t)res);
		/* Start writeback of this piece now: the disk works while we copy the rest, and
		 * the final fdatasync waits for less. */
		if (r == 0)
			sync_file_range(fd, (off_t)j->off, (off_t)j->len, SYNC_FILE_RANGE_WRITE);
		return r;
	}
	if ((uint64_t)res == j->len)
		return 0;
	if (res == 0)
		return -EIO;
	return read_rest(fd, j->buf + res, j->len - (uint64_t)res, j->off + (uint64_t)res);
}

/*
 * Run @n jobs on @fd, INFLIGHT at a time. Every submitted request is reaped even after an
 * error (the kernel may still be using the buffers). Returns 0 or the first error.
 */
static int run_jobs(struct io_uring *ring, int fd, const struct job *jobs, uint32_t n, bool write)
{
	uint32_t next = 0, inflight = 0;
	int err = 0;

	while (next < n || inflight) {
		struct io_uring_cqe *cqe;
		int r;

		while (next < n && inflight < INFLIGHT && !err) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			const struct job *j = &jobs[next];

			if (!sqe)
				break;
			if (write)
				io_uring_prep_writev(sqe, fd, j->iov, j->iovs, j->off);
			else
				io_uring_prep_read(sqe, fd, j->buf, (unsigned)j->len, j->off);
			io_uring_sqe_set_data64(sqe, next++);
			inflight++;
		}
		if (!inflight)
			break;
		r = io_uring_submit_and_wait(ring, 1);
		if (r < 0 && r != -EINTR) {
			err = err ? err : r;
			if (io_uring_peek_cqe(ring, &cqe) != 0) {
				/* The ring is broken: nothing more will complete. */
				FLOG_ERROR(comp, "spill: io_uring_enter: %s", ferry_strerror(r));
				return err;
			}
		}
		while (io_uring_peek_cqe(ring, &cqe) == 0) {
			const struct job *j = &jobs[cqe->user_data];
			int res = cqe->res;

			io_uring_cqe_seen(ring, cqe);
			inflight--;
			res = finish_job(fd, j, write, res);
			if (res < 0 && !err)
				err = res;
		}
	}
	return err;
}

static int ring_fdatasync(struct io_uring *ring, int fd)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct io_uring_cqe *cqe;
	int r;

	if (!sqe)
		return fdatasync(fd) < 0 ? -errno : 0;
	io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
	io_uring_sqe_set_data64(sqe, 0);
	r = io_uring_submit(ring);
	if (r < 0)
		return r;
	do
		r = io_uring_wait_cqe(ring, &cqe);
	while (r == -EINTR);
	if (r < 0)
		return r;
	r = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return r;
}

/* ---- files ---- */

static int open_file_in(const char *dir)
{
	char path[4096];
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd >= 0)
		return fd;
	/* No O_TMPFILE on this file system: create, then unlink at once. */
	if ((size_t)snprintf(path, sizeof(path), "%s/ferry-spill-XXXXXX", dir) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unlink(path);
	return fd;
}

/* A free file slot (growing the table); -ENOMEM. */
static int64_t file_slot(struct ferry__plasma_spill *sp)
{
	uint32_t old = sp->nfiles, n = old ? 2 * old : 16;
	struct spill_file *f;

	for (uint32_t i = 0; i < old; i++)
		if (sp->files[i].fd < 0)
			return i;
	f = ferry__realloc(sp->files, (size_t)n * sizeof(*f));
	if (!f)
		return -ENOMEM;
	for (uint32_t i = old; i < n; i++)
		f[i] = (struct spill_file){.fd = -1};
	sp->files = f;
	sp->nfiles = n;
	return old;
}

/* Would @total more bytes exceed the spill limit (counting batches in flight)? */
static int check_quota(const struct ferry__plasma_spill *sp, uint64_t total)
{
	uint64_t used = sp->st.disk_bytes + sp->inflight_bytes;

	if (!sp->max_bytes || (used <= sp->max_bytes && total <= sp->max_bytes - used))
		return 0;
	FLOG_WARN(comp, "spill: %" PRIu64 " more bytes would exceed the spill limit of %" PRIu64,
		  total, sp->max_bytes);
	return -ENOSPC;
}

static int reserve(int fd, uint64_t total)
{
	int r;

	do
		r = fallocate(fd, 0, 0, (off_t)total) < 0 ? -errno : 0;
	while (r == -EINTR);
	if (r == -EOPNOTSUPP)
		return 0; /* no reservation on this file system: a full disk shows in the writes */
	return r;
}

/* ---- write ---- */

/* Lay the items out (packed) and cut the stream into iovecs and jobs. *@iov and *@jobs are
 * allocated; returns the number of jobs, or -ENOMEM / -E2BIG. */
static int64_t plan(struct ferry__plasma_spill_item *items, uint32_t n, uint64_t *total,
		    struct iovec **iov_out, struct job **jobs_out)
{
	uint64_t pos = 0, niov = 0;
	uint32_t v = 0, nj = 0;
	struct iovec *iov;
	struct job *jobs;

	for (uint32_t i = 0; i < n; i++) {
		items[i].offset = pos;
		if (items[i].size > UINT64_MAX / 2 - pos)
			return -E2BIG;
		niov += (items[i].size + SEG_BYTES - 1) / SEG_BYTES + 1;
		pos = FERRY_ALIGN_UP(pos + items[i].size, (uint64_t)PACK);
	}
	*total = pos;
	iov = ferry__calloc(niov, sizeof(*iov));
	jobs = ferry__calloc(niov, sizeof(*jobs));
	if (!iov || !jobs) {
		ferry__free(iov);
		ferry__free(jobs);
		return -ENOMEM;
	}
	pos = 0;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = items[i].data;
		uint64_t left = items[i].size, pad;

		pad = FERRY_ALIGN_UP(items[i].offset + left, (uint64_t)PACK) - items[i].offset -
		      left;
		while (left || pad) {
			uint64_t len = left ? FERRY_MIN(left, (uint64_t)SEG_BYTES) : pad;
			struct job *j = nj ? &jobs[nj - 1] : NULL;

			if (!j || j->iovs == SEG_IOVS || j->len + len > SEG_BYTES) {
				j = &jobs[nj++];
				*j = (struct job){.off = pos, .iov = &iov[v]};
			}
			iov[v++] = (struct iovec){left ? unconst(p) : zeros, len};
			j->iovs++;
			j->len += len;
			pos += len;
			if (left) {
				p += len;
				left -= len;
			} else {
				pad = 0;
			}
		}
	}
	*iov_out = iov;
	*jobs_out = jobs;
	return nj;
}

/* One write batch: planned on the store's thread, written on any thread, adopted back. */
struct ferry__plasma_spill_batch {
	struct ferry__plasma_spill_item *items; /* borrowed from the caller */
	uint32_t n;				/* items */
	struct iovec *iov;			/* the stream, cut in pieces */
	struct job *jobs;			/* gathered writes */
	uint32_t njobs;				/* how many */
	uint64_t total;				/* file bytes */
	const char *dir;			/* the spill directory (the area's copy) */
	int fd;					/* the written file; -1 until then */
	int result;				/* 0 or -errno of the write */
	int hold;				/* tests: read a byte here first; -1: no */
};

int ferry__plasma_spill_batch_new(struct ferry__plasma_spill *sp,
				  struct ferry__plasma_spill_item *items, uint32_t n,
				  struct ferry__plasma_spill_batch **out)
{
	struct ferry__plasma_spill_batch *b;
	int64_t nj;
	int r;

	if (!n)
		return -EINVAL;
	if (sp->inject_write) {
		r = sp->inject_write;
		sp->inject_write = 0;
		sp->st.errors++;
		return r;
	}
	b = ferry__calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	*b = (struct ferry__plasma_spill_batch){
		.items = items, .n = n, .dir = sp->dir, .fd = -1, .hold = sp->inject_hold - 1};
	sp->inject_hold = 0;
	nj = plan(items, n, &b->total, &b->iov, &b->jobs);
	r = nj < 0 ? (int)nj : check_quota(sp, b->total);
	if (r < 0) {
		ferry__plasma_spill_batch_free(b);
		return r;
	}
	b->njobs = (uint32_t)nj;
	sp->inflight_bytes += b->total;
	sp->inflight++;
	*out = b;
	return 0;
}

static int write_batch(struct ferry__plasma_spill_batch *b, struct io_uring *ring)
{
	int r = reserve(b->fd, b->total);

	if (r == 0)
		r = run_jobs(ring, b->fd, b->jobs, b->njobs, true);
	if (r == 0)
		r = ring_fdatasync(ring, b->fd);
	if (r == 0)
		posix_fadvise(b->fd, 0, (off_t)b->total, POSIX_FADV_DONTNEED);
	return r;
}

void ferry__plasma_spill_batch_run(struct ferry__plasma_spill_batch *b, struct io_uring *ring)
{
	bool own_ring = !ring;
	struct io_uring own;
	uint8_t byte;
	int r;

	/* Tests: say that we are here, then wait to be let go. */
	byte = 1;
	if (b->hold >= 0 && (write(b->hold, &byte, 1) != 1 || read(b->hold, &byte, 1) != 1))
		FLOG_WARN(comp, "spill: test hold: %s", ferry_strerror(-errno));
	if (own_ring) {
		r = io_uring_queue_init(RING_DEPTH, &own, 0);
		if (r < 0) {
			b->result = r;
			return;
		}
		ring = &own;
	}
	r = open_file_in(b->dir);
	if (r >= 0) {
		b->fd = r;
		r = write_batch(b, ring);
	}
	if (own_ring)
		io_uring_queue_exit(&own);
	b->result = r;
}

void ferry__plasma_spill_batch_free(struct ferry__plasma_spill_batch *b)
{
	if (!b)
		return;
	if (b->fd >= 0)
		close(b->fd);
	ferry__free(b->jobs);
	ferry__free(b->iov);
	ferry__free(b);
}

int ferry__plasma_spill_batch_finish(struct ferry__plasma_spill *sp,
				     struct ferry__plasma_spill_batch *b)
{
	int64_t slot = b->result == 0 ? file_slot(sp) : b->result;
	uint64_t bytes = 0;
	int r = (int)FERRY_MIN(slot, 0);

	sp->inflight_bytes -= b->total;
	sp->inflight--;
	if (r < 0) {
		FLOG_WARN(comp, "spill: writing %u objects to %s failed: %s", b->n, sp->dir,
			  ferry_strerror(r));
		sp->st.errors++;
		ferry__plasma_spill_batch_free(b);
		return r == -EDQUOT || r == -EFBIG ? -ENOSPC : r;
	}
	for (uint32_t i = 0; i < b->n; i++) {
		b->items[i].file = (uint32_t)slot;
		bytes += b->items[i].size;
	}
	sp->files[slot] = (struct spill_file){b->fd, b->total, b->n, bytes};
	b->fd = -1; /* the area's now */
	sp->st.files++;
	sp->st.disk_bytes += b->total;
	sp->st.live_objects += b->n;
	sp->st.live_bytes += bytes;
	sp->st.written_bytes += bytes;
	sp->st.batches++;
	ferry__plasma_spill_batch_free(b);
	return 0;
}

int ferry__plasma_spill_write(struct ferry__plasma_spill *sp,
			      struct ferry__plasma_spill_item *items, uint32_t n)
{
	struct ferry__plasma_spill_batch *b;
	int r = ferry__plasma_spill_batch_new(sp, items, n, &b);

	if (r < 0)
		return r;
	ferry__plasma_spill_batch_run(b, &sp->ring);
	return ferry__plasma_spill_batch_finish(sp, b);
}

/* ---- read, drop ---- */

static struct spill_file *file_of(struct ferry__plasma_spill *sp, uint32_t file, uint64_t offset,
				  uint64_t size)
{
	struct spill_file *f = file < sp->nfiles ? &sp->files[file] : NULL;

	if (!f || f->fd < 0 || offset > f->size || size > f->size - offset) {
		FLOG_ERROR(comp, "spill: no bytes %" PRIu64 "+%" PRIu64 " in file %u", offset, size,
			   file);
		return NULL;
	}
	return f;
}

int ferry__plasma_spill_read(struct ferry__plasma_spill *sp, uint32_t file, uint64_t offset,
			     void *dst, uint64_t size)
{
	struct spill_file *f = file_of(sp, file, offset, size);
	struct job jobs[INFLIGHT];
	uint64_t done = 0;
	int r = 0;

	if (!f)
		return -EINVAL;
	if (sp->inject_read) {
		r = sp->inject_read;
		sp->inject_read = 0;
	}
	while (r == 0 && done < size) {
		uint32_t n = 0;

		for (; n < INFLIGHT && done < size; n++) {
			uint64_t len = FERRY_MIN(size - done, (uint64_t)READ_BYTES);

			jobs[n] = (struct job){
				.off = offset + done, .len = len, .buf = (uint8_t *)dst + done};
			done += len;
		}
		r = run_jobs(&sp->ring, f->fd, jobs, n, false);
	}
	if (r < 0) {
		sp->st.errors++;
		FLOG_ERROR(comp, "spill: reading %" PRIu64 " bytes back: %s", size,
			   ferry_strerror(r));
		return r;
	}
	sp->st.read_bytes += size;
	return 0;
}

void ferry__plasma_spill_drop(struct ferry__plasma_spill *sp, uint32_t file, uint64_t offset,
			      uint64_t size)
{
	struct spill_file *f = file_of(sp, file, offset, size);

	if (!f || !f->live_objects)
		return;
	f->live_objects--;
	f->live_bytes -= FERRY_MIN(size, f->live_bytes);
	sp->st.live_objects--;
	sp->st.live_bytes -= FERRY_MIN(size, sp->st.live_bytes);
	if (f->live_objects == 0) {
		close(f->fd);
		sp->st.files--;
		sp->st.disk_bytes -= f->size;
		*f = (struct spill_file){.fd = -1};
	} else if (size >= PUNCH_MIN_BYTES) {
		/* Best effort: the file system may not punch, then the space comes back when
		 * the file closes. */
		(void)fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset,
				(off_t)size);
	}
}

void ferry__plasma_spill_stats(const struct ferry__plasma_spill *sp,
			       struct ferry__plasma_spill_stats *out)
{
	*out = sp->st;
}

void ferry__plasma_spill_inject(struct ferry__plasma_spill *sp, int write_err, int read_err)
{
	sp->inject_write = write_err;
	sp->inject_read = read_err;
}

void ferry__plasma_spill_inject_hold(struct ferry__plasma_spill *sp, int fd)
{
	sp->inject_hold = fd + 1;
}
