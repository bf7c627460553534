/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Spill files: fused, batched io_uring writes of sealed objects to anonymous files, reads back,
 * space accounting and hole punching. The design is in spill.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdatomic.h>
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
#define DIO_ALIGN 4096u	       /* O_DIRECT offsets, lengths and buffers are multiples of this */
#define WRITE_CHUNK (4u << 20) /* bytes per write request */
#define WRITE_DEPTH 4u	       /* writes in flight */
#define READ_CHUNK (1u << 20)  /* bytes per read request */
#define READ_DEPTH 16u	       /* reads in flight */
#define PACK 64u	       /* objects start on this boundary in a file */
#define BIG_BYTES (64u << 10)  /* ... or on a DIO_ALIGN one, from this size on */
#define PUNCH_MIN_BYTES 65536u /* smaller drops are not worth a syscall */

static const char comp[] = "plasma";

struct spill_file {
	int fd;		       /* -1: free slot */
	uint64_t size;	       /* bytes in the file (a multiple of DIO_ALIGN) */
	uint64_t live_objects; /* objects not dropped yet */
	uint64_t live_bytes;   /* their bytes */
	bool direct;	       /* fd is O_DIRECT */
};

/* Aligned staging memory for O_DIRECT: @raw as allocated, @buf aligned inside it. */
struct stage {
	void *raw;    /* ferry__malloc'd */
	uint8_t *buf; /* DIO_ALIGN aligned */
};

struct ferry__plasma_spill {
	struct io_uring ring;		     /* the module's own ring */
	char *dir;			     /* spill directory */
	struct spill_file *files;	     /* by file id */
	uint32_t nfiles;		     /* slots in files */
	uint64_t max_bytes;		     /* quota; 0: none */
	uint64_t inflight_bytes;	     /* file bytes of the batches being written */
	uint32_t inflight;		     /* batches being written */
	struct stage rstage;		     /* READ_DEPTH x READ_CHUNK for reads */
	struct ferry__plasma_spill_stats st; /* figures */
	/* Test hooks, set from a test's thread while the store's loop reads them: atomic. */
	atomic_int inject_write;     /* tests: fail the next batch with this */
	atomic_int inject_read;	     /* tests: fail the next read with this */
	atomic_int inject_hold;	     /* tests: the next batch waits for a byte here */
	atomic_int inject_read_hold; /* tests: the next read job waits for a byte here */
	bool made_dir;		     /* we created dir: remove it at the end if empty */
};

/*
 * A sequential transfer of the file range [start, end) (both DIO_ALIGN multiples) in pieces of
 * at most @chunk bytes, @depth in flight. piece() picks each piece, in file order: its length
 * (a DIO_ALIGN multiple) and its memory, either the object's own (no copy) or @slot, the
 * request's staging slot, which a write fills first; a read's staged pieces go to drain().
 */
struct pipe {
	uint8_t *stage; /* depth x chunk bytes */
	uint32_t chunk; /* bytes per request, at most */
	uint32_t depth; /* requests in flight */
	uint64_t start; /* first file byte */
	uint64_t end;	/* past the last */
	bool write;	/* direction */
	bool direct;	/* the fd is O_DIRECT */
	uint64_t (*piece)(void *arg, uint64_t off, uint8_t *slot, uint8_t **buf);
	void (*drain)(void *arg, uint64_t off, const uint8_t *buf, uint64_t len);
	void *arg;	   /* for piece and drain */
	uint64_t uncopied; /* out: bytes of the pieces that were not staged */
};

static void *unconst(const void *p)
{
	return (void *)(uintptr_t)p;
}

static uint64_t align_down(uint64_t x)
{
	return x & ~(uint64_t)(DIO_ALIGN - 1);
}

static int stage_alloc(struct stage *st, size_t bytes)
{
	st->raw = ferry__malloc(bytes + DIO_ALIGN);
	if (!st->raw)
		return -ENOMEM;
	st->buf = (uint8_t *)FERRY_ALIGN_UP((uintptr_t)st->raw, (uintptr_t)DIO_ALIGN);
	return 0;
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
	r = stage_alloc(&sp->rstage, (size_t)READ_DEPTH * READ_CHUNK);
	if (r < 0)
		goto err_free_dir;
	r = io_uring_queue_init(RING_DEPTH, &sp->ring, 0);
	if (r < 0) {
		FLOG_ERROR(comp, "spill: io_uring_queue_init: %s", ferry_strerror(r));
		goto err_free_stage;
	}
	sp->max_bytes = opts->max_bytes;
	*out = sp;
	return 0;

err_free_stage:
	ferry__free(sp->rstage.raw);
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
	FLOG_DEBUG(comp,
		   "spill: %" PRIu64 " bytes written, %" PRIu64 " read (%" PRIu64
		   " ahead of a request), %" PRIu64 " moved with no copy",
		   sp->st.written_bytes, sp->st.read_bytes, sp->st.ahead_bytes,
		   sp->st.uncopied_bytes);
	for (uint32_t i = 0; i < sp->nfiles; i++)
		if (sp->files[i].fd >= 0)
			close(sp->files[i].fd);
	io_uring_queue_exit(&sp->ring);
	if (sp->made_dir)
		rmdir(sp->dir); /* only if empty: files are anonymous, so it should be */
	ferry__free(sp->rstage.raw);
	ferry__free(sp->files);
	ferry__free(sp->dir);
	ferry__free(sp);
}

/* ---- the ring ---- */

/* What a short transfer left of a piece, synchronously. Returns 0, -EIO (the file is shorter
 * than recorded: a read found its end; a write wrote nothing) or -errno. */
static int rest_sync(int fd, bool write, uint8_t *p, uint64_t len, uint64_t off)
{
	while (len) {
		ssize_t n = write ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (uint64_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* A piece is done (@res: the kernel's result). Returns 0 or -errno. */
static int piece_done(const struct pipe *p, int fd, uint8_t *buf, uint64_t off, uint64_t len,
		      int res)
{
	int r = 0;

	if (res < 0)
		return res;
	if ((uint64_t)res < len) {
		/* O_DIRECT needs the rest aligned as well; a short read at EOF is -EIO anyway. */
		if (res == 0 || (p->direct && res % DIO_ALIGN))
			return -EIO;
		r = rest_sync(fd, p->write, buf + res, len - (uint64_t)res, off + (uint64_t)res);
	}
	if (r == 0 && p->write && !p->direct)
		/* Buffered: start writeback now, so the final fdatasync waits for less. */
		sync_file_range(fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE);
	if (r == 0 && !p->write && buf >= p->stage && buf < p->stage + (size_t)p->depth * p->chunk)
		p->drain(p->arg, off, buf, len);
	return r;
}

/*
 * Run transfer @p on @fd. Every submitted request is reaped even after an error (the kernel
 * may still be using the buffers). Returns 0 or the first error.
 */
static int run_pipe(struct io_uring *ring, int fd, struct pipe *p)
{
	struct {
		uint64_t off; /* file offset */
		uint64_t len; /* bytes */
		uint8_t *buf; /* memory */
	} req[WRITE_DEPTH > READ_DEPTH ? WRITE_DEPTH : READ_DEPTH];
	uint32_t free_slots = (1u << p->depth) - 1, inflight = 0;
	uint64_t next = p->start;
	int err = 0;

	while ((next < p->end && !err) || inflight) {
		struct io_uring_cqe *cqe;
		int r;

		while (next < p->end && free_slots && !err) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			uint32_t slot = (uint32_t)__builtin_ctz(free_slots);

			if (!sqe)
				break;
			req[slot].off = next;
			req[slot].len = p->piece(p->arg, next, p->stage + (size_t)slot * p->chunk,
						 &req[slot].buf);
			if (p->write)
				io_uring_prep_write(sqe, fd, req[slot].buf, (unsigned)req[slot].len,
						    next);
			else
				io_uring_prep_read(sqe, fd, req[slot].buf, (unsigned)req[slot].len,
						   next);
			io_uring_sqe_set_data64(sqe, slot);
			if (req[slot].buf != p->stage + (size_t)slot * p->chunk)
				p->uncopied += req[slot].len;
			free_slots &= ~(1u << slot);
			next += req[slot].len;
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
			uint32_t slot = (uint32_t)cqe->user_data;
			int res = cqe->res;

			io_uring_cqe_seen(ring, cqe);
			inflight--;
			free_slots |= 1u << slot;
			if (!err)
				res = piece_done(p, fd, req[slot].buf, req[slot].off, req[slot].len,
						 res);
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

/* A new anonymous file in @dir, O_DIRECT where the file system has it (*@direct says). */
static int open_file_in(const char *dir, bool *direct)
{
	char path[4096];
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0) {
		/* No O_TMPFILE on this file system: create, then unlink at once. */
		if ((size_t)snprintf(path, sizeof(path), "%s/ferry-spill-XXXXXX", dir) >=
		    sizeof(path))
			return -ENAMETOOLONG;
		fd = mkostemp(path, O_CLOEXEC);
		if (fd < 0)
			return -errno;
		unlink(path);
	}
	/* Spilled bytes skip the page cache (they must leave memory, and the copy into it and
	 * the writeback after cost more than the disk's own rate). Not everywhere: then buffered. */
	*direct = fcntl(fd, F_SETFL, O_DIRECT) == 0;
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

/* Lay the items out, packed, big ones on DIO_ALIGN boundaries (see aligned_run): each item's
 * offset, and the stream's length in *@total.
 * Returns 0 or -E2BIG. */
static int plan(struct ferry__plasma_spill_item *items, uint32_t n, uint64_t *total)
{
	uint64_t pos = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (i == 0 && items[0].size >= BIG_BYTES)
			pos = 0;
		items[i].offset = pos;
		if (items[i].size > UINT64_MAX / 2 - pos)
			return -E2BIG;
		pos = FERRY_ALIGN_UP(pos + items[i].size, (uint64_t)PACK);
		if (i + 1 < n && items[i + 1].size >= BIG_BYTES)
			pos = FERRY_ALIGN_UP(pos, (uint64_t)DIO_ALIGN);
	}
	*total = pos;
	return 0;
}

/* One write batch: planned on the store's thread, written on any thread, adopted back. */
struct ferry__plasma_spill_batch {
	struct ferry__plasma_spill_item *items; /* borrowed from the caller */
	uint32_t n;				/* items */
	uint32_t cursor;			/* fill: the first item not wholly copied */
	uint64_t total;				/* file bytes (DIO_ALIGN multiple) */
	uint64_t uncopied;			/* of them, written with no copy */
	struct stage stage;			/* WRITE_DEPTH x WRITE_CHUNK */
	const char *dir;			/* the spill directory (the area's copy) */
	int fd;					/* the written file; -1 until then */
	int result;				/* 0 or -errno of the write */
	int hold;				/* tests: read a byte here first; -1: no */
	bool direct;				/* fd is O_DIRECT */
};

int ferry__plasma_spill_batch_new(struct ferry__plasma_spill *sp,
				  struct ferry__plasma_spill_item *items, uint32_t n,
				  struct ferry__plasma_spill_batch **out)
{
	struct ferry__plasma_spill_batch *b;
	int r;

	if (!n)
		return -EINVAL;
	if (atomic_load(&sp->inject_write)) {
		r = atomic_exchange(&sp->inject_write, 0);
		sp->st.errors++;
		return r;
	}
	b = ferry__calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	*b = (struct ferry__plasma_spill_batch){.items = items,
						.n = n,
						.dir = sp->dir,
						.fd = -1,
						.hold = atomic_exchange(&sp->inject_hold, 0) - 1};
	r = plan(items, n, &b->total);
	b->total = FERRY_ALIGN_UP(b->total, (uint64_t)DIO_ALIGN);
	if (r == 0)
		r = check_quota(sp, b->total);
	if (r == 0)
		r = stage_alloc(&b->stage, (size_t)WRITE_DEPTH * WRITE_CHUNK);
	if (r < 0) {
		ferry__plasma_spill_batch_free(b);
		return r;
	}
	sp->inflight_bytes += b->total;
	sp->inflight++;
	*out = b;
	return 0;
}

/* Bytes from @off (DIO_ALIGN aligned) that can go to or from @mem (the bytes of an object at
 * file offset @obj_off, @size long) without a copy: a DIO_ALIGN multiple, or 0 if @mem is not
 * aligned there. Objects of BIG_BYTES or more start aligned in the file; arena blocks of such
 * objects are aligned more often than not. */
static uint64_t aligned_run(const uint8_t *mem, uint64_t obj_off, uint64_t size, uint64_t off)
{
	if (size < BIG_BYTES || off < obj_off || off >= obj_off + size ||
	    ((uintptr_t)mem + (off - obj_off)) % DIO_ALIGN)
		return 0;
	return align_down(obj_off + size - off);
}

/* The stream's bytes [off, off + len) into @buf, zeros between and after items. Called in
 * file order, so a cursor skips the items already behind. */
static void fill_batch(struct ferry__plasma_spill_batch *b, uint64_t off, uint8_t *buf,
		       uint64_t len)
{
	uint64_t at = off, end = off + len;

	while (at < end) {
		const struct ferry__plasma_spill_item *it =
			b->cursor < b->n ? &b->items[b->cursor] : NULL;
		uint64_t stop = it ? FERRY_MIN(end, it->offset) : end;

		if (at < stop) { /* padding */
			memset(buf + (at - off), 0, stop - at);
			at = stop;
			continue;
		}
		stop = FERRY_MIN(end, it->offset + it->size);
		memcpy(buf + (at - off), (const uint8_t *)it->data + (at - it->offset), stop - at);
		at = stop;
		if (at == it->offset + it->size)
			b->cursor++;
	}
}

/* pipe.piece of a write: a big object's aligned middle straight from its memory, the rest
 * (small objects, padding, tails, unaligned memory) copied into @slot, up to the next piece
 * that needs no copy. */
static uint64_t piece_batch(void *arg, uint64_t off, uint8_t *slot, uint8_t **buf)
{
	struct ferry__plasma_spill_batch *b = arg;
	uint64_t len = FERRY_MIN((uint64_t)WRITE_CHUNK, b->total - off);
	const struct ferry__plasma_spill_item *it;

	while (b->cursor < b->n && b->items[b->cursor].offset + b->items[b->cursor].size <= off)
		b->cursor++; /* behind: written (or empty) */
	it = b->cursor < b->n ? &b->items[b->cursor] : NULL;
	if (it && aligned_run(it->data, it->offset, it->size, off)) {
		len = FERRY_MIN(len, aligned_run(it->data, it->offset, it->size, off));
		*buf = unconst((const uint8_t *)it->data + (off - it->offset));
		if (off + len == it->offset + it->size)
			b->cursor++;
		return len;
	}
	for (uint32_t k = b->cursor; k < b->n && b->items[k].offset < off + len; k++)
		if (b->items[k].offset > off && aligned_run(b->items[k].data, b->items[k].offset,
							    b->items[k].size, b->items[k].offset)) {
			len = b->items[k].offset - off; /* aligned: a big object's start */
			break;
		}
	fill_batch(b, off, slot, len);
	*buf = slot;
	return len;
}

static int write_batch(struct ferry__plasma_spill_batch *b, struct io_uring *ring, bool direct)
{
	struct pipe p = {.stage = b->stage.buf,
			 .chunk = WRITE_CHUNK,
			 .depth = WRITE_DEPTH,
			 .end = b->total,
			 .write = true,
			 .direct = direct,
			 .piece = piece_batch,
			 .arg = b};
	int r = reserve(b->fd, b->total);

	if (r == 0)
		r = run_pipe(ring, b->fd, &p);
	b->uncopied = p.uncopied;
	if (r == 0)
		r = ring_fdatasync(ring, b->fd);
	if (r == 0 && !direct) /* spilled bytes must really leave memory */
		posix_fadvise(b->fd, 0, (off_t)b->total, POSIX_FADV_DONTNEED);
	return r;
}

void ferry__plasma_spill_batch_run(struct ferry__plasma_spill_batch *b, struct io_uring *ring)
{
	bool own_ring = !ring, direct = false;
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
	r = open_file_in(b->dir, &direct);
	if (r >= 0) {
		b->fd = r;
		b->direct = direct;
		r = write_batch(b, ring, direct);
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
	ferry__free(b->stage.raw);
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
	sp->files[slot] = (struct spill_file){b->fd, b->total, b->n, bytes, b->direct};
	b->fd = -1; /* the area's now */
	sp->st.files++;
	sp->st.disk_bytes += b->total;
	sp->st.live_objects += b->n;
	sp->st.live_bytes += bytes;
	sp->st.written_bytes += bytes;
	sp->st.uncopied_bytes += b->uncopied;
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

/* A read of consecutive objects of one file (struct ferry__plasma_spill_read, in file order). */
struct read_out {
	const struct ferry__plasma_spill_read *objs; /* the objects */
	uint32_t n;				     /* how many */
	uint32_t cursor;			     /* piece: the first object not behind */
};

/* pipe.piece of a read: straight into an object's memory where both are aligned, else a
 * staged piece, up to where the next object that needs no copy starts. */
static uint64_t piece_read(void *arg, uint64_t off, uint8_t *slot, uint8_t **buf)
{
	struct read_out *o = arg;
	const struct ferry__plasma_spill_read *last = &o->objs[o->n - 1], *it;
	uint64_t end = FERRY_ALIGN_UP(last->offset + last->size, (uint64_t)DIO_ALIGN);
	uint64_t len = FERRY_MIN(end - off, (uint64_t)READ_CHUNK), run;

	while (o->cursor < o->n && o->objs[o->cursor].offset + o->objs[o->cursor].size <= off)
		o->cursor++;
	it = o->cursor < o->n ? &o->objs[o->cursor] : NULL;
	run = it ? aligned_run(it->dst, it->offset, it->size, off) : 0;
	if (run) {
		*buf = (uint8_t *)it->dst + (off - it->offset);
		return FERRY_MIN(run, len);
	}
	for (uint32_t k = o->cursor; k < o->n && o->objs[k].offset < off + len; k++)
		if (o->objs[k].offset > off && aligned_run(o->objs[k].dst, o->objs[k].offset,
							   o->objs[k].size, o->objs[k].offset)) {
			len = o->objs[k].offset - off; /* aligned: a big object's start */
			break;
		}
	*buf = slot;
	return len;
}

/* pipe.drain: the parts of piece [off, off + len) that are objects', into their places. */
static void drain_read(void *arg, uint64_t off, const uint8_t *buf, uint64_t len)
{
	const struct read_out *o = arg;

	for (uint32_t k = 0; k < o->n; k++) {
		const struct ferry__plasma_spill_read *it = &o->objs[k];
		uint64_t from = FERRY_MAX(off, it->offset);
		uint64_t to = FERRY_MIN(off + len, it->offset + it->size);

		if (from < to)
			memcpy((uint8_t *)it->dst + (from - it->offset), buf + (from - off),
			       to - from);
	}
}

/* The aligned cover of @objs (@n, in file order) from @fd, in pieces, several in flight: big
 * objects' aligned middles straight into their memory, the rest through @stage (READ_DEPTH x
 * READ_CHUNK). Returns 0 or -errno; *@uncopied: bytes that were not staged. */
static int read_pass(struct io_uring *ring, int fd, bool direct, uint8_t *stage,
		     const struct ferry__plasma_spill_read *objs, uint32_t n, uint64_t *uncopied)
{
	struct read_out out = {objs, n, 0};
	struct pipe p = {.stage = stage,
			 .chunk = READ_CHUNK,
			 .depth = READ_DEPTH,
			 .direct = direct,
			 .piece = piece_read,
			 .drain = drain_read,
			 .arg = &out};
	int r;

	p.start = align_down(objs[0].offset);
	p.end = FERRY_ALIGN_UP(objs[n - 1].offset + objs[n - 1].size, (uint64_t)DIO_ALIGN);
	r = run_pipe(ring, fd, &p);
	*uncopied = p.uncopied;
	return r;
}

static uint64_t bytes_of(const struct ferry__plasma_spill_read *objs, uint32_t n)
{
	uint64_t bytes = 0;

	for (uint32_t k = 0; k < n; k++)
		bytes += objs[k].size;
	return bytes;
}

/* The file of @objs if they are all in it, in order and not overlapping; NULL (logged) if not. */
static struct spill_file *file_of_all(struct ferry__plasma_spill *sp, uint32_t file,
				      const struct ferry__plasma_spill_read *objs, uint32_t n)
{
	struct spill_file *f = n ? file_of(sp, file, objs[0].offset, objs[0].size) : NULL;

	for (uint32_t k = 1; f && k < n; k++)
		if (objs[k].offset < objs[k - 1].offset + objs[k - 1].size ||
		    !file_of(sp, file, objs[k].offset, objs[k].size))
			f = NULL;
	return f;
}

int ferry__plasma_spill_readv(struct ferry__plasma_spill *sp, uint32_t file,
			      const struct ferry__plasma_spill_read *objs, uint32_t n)
{
	struct spill_file *f = file_of_all(sp, file, objs, n);
	uint64_t bytes, uncopied = 0;
	int r = 0;

	if (!f)
		return -EINVAL;
	if (atomic_load(&sp->inject_read)) {
		r = atomic_exchange(&sp->inject_read, 0);
	}
	bytes = bytes_of(objs, n);
	if (r == 0 && bytes)
		r = read_pass(&sp->ring, f->fd, f->direct, sp->rstage.buf, objs, n, &uncopied);
	sp->st.uncopied_bytes += uncopied;
	if (r < 0) {
		sp->st.errors++;
		FLOG_ERROR(comp, "spill: reading %" PRIu64 " bytes back: %s", bytes,
			   ferry_strerror(r));
		return r;
	}
	sp->st.read_bytes += bytes;
	sp->st.ahead_bytes += bytes - objs[0].size;
	return 0;
}

/* ---- reads that wait for the disk elsewhere ---- */

struct ferry__plasma_spill_rjob {
	struct stage stage; /* READ_DEPTH x READ_CHUNK, this job's own */
	uint64_t uncopied;  /* of the last pass */
	int fd;		    /* a duplicate of the file's: a drop may close that meanwhile */
	bool direct;	    /* fd is O_DIRECT */
	int inject;	    /* tests: the first pass fails with this */
	int hold;	    /* tests: say so and wait here first; -1: no */
	uint32_t errors;    /* failed passes */
	uint32_t n;	    /* objects of the last pass (0: none ran) */
	int result;	    /* of the last pass */
	uint32_t max;	    /* objects */
	struct ferry__plasma_spill_read objs[]; /* copied from the caller */
};

int ferry__plasma_spill_read_new(struct ferry__plasma_spill *sp, uint32_t file,
				 const struct ferry__plasma_spill_read *objs, uint32_t n,
				 struct ferry__plasma_spill_rjob **out)
{
	struct spill_file *f = file_of_all(sp, file, objs, n);
	struct ferry__plasma_spill_rjob *j;

	if (!f)
		return -EINVAL;
	j = ferry__calloc(1, sizeof(*j) + (size_t)n * sizeof(j->objs[0]));
	if (!j)
		return -ENOMEM;
	memcpy(j->objs, objs, (size_t)n * sizeof(j->objs[0]));
	j->max = n;
	j->direct = f->direct;
	j->fd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
	if (j->fd < 0 || stage_alloc(&j->stage, (size_t)READ_DEPTH * READ_CHUNK) < 0) {
		int r = j->fd < 0 ? -errno : -ENOMEM;

		if (j->fd >= 0)
			close(j->fd);
		ferry__free(j);
		return r;
	}
	j->inject = atomic_exchange(&sp->inject_read, 0);
	j->hold = atomic_exchange(&sp->inject_read_hold, 0) - 1;
	*out = j;
	return 0;
}

int ferry__plasma_spill_read_run(struct ferry__plasma_spill_rjob *j, struct io_uring *ring,
				 uint32_t n)
{
	struct io_uring own;
	uint8_t byte = 1;
	int r = 0;

	/* Tests: say that we are here, then wait to be let go. */
	if (j->hold >= 0 && (write(j->hold, &byte, 1) != 1 || read(j->hold, &byte, 1) != 1))
		FLOG_WARN(comp, "spill: test hold: %s", ferry_strerror(-errno));
	j->hold = -1;
	j->n = FERRY_MIN(FERRY_MAX(n, 1u), j->max);
	j->uncopied = 0;
	if (j->inject) {
		r = j->inject; /* every pass: the fallback to the first object too */
	} else if (bytes_of(j->objs, j->n) && ring) {
		r = read_pass(ring, j->fd, j->direct, j->stage.buf, j->objs, j->n, &j->uncopied);
	} else if (bytes_of(j->objs, j->n)) {
		r = io_uring_queue_init(RING_DEPTH, &own, 0);
		if (r == 0) {
			r = read_pass(&own, j->fd, j->direct, j->stage.buf, j->objs, j->n,
				      &j->uncopied);
			io_uring_queue_exit(&own);
		}
	}
	j->errors += r < 0;
	j->result = r;
	return r;
}

int ferry__plasma_spill_read_finish(struct ferry__plasma_spill *sp,
				    struct ferry__plasma_spill_rjob *j)
{
	uint64_t bytes = bytes_of(j->objs, j->n);
	int r = j->n ? j->result : -ECANCELED;

	sp->st.errors += j->errors;
	if (j->n)
		sp->st.uncopied_bytes += j->uncopied;
	if (r == 0) {
		sp->st.read_bytes += bytes;
		sp->st.ahead_bytes += bytes - j->objs[0].size;
	} else if (j->errors) {
		FLOG_ERROR(comp, "spill: reading %" PRIu64 " bytes back: %s", bytes,
			   ferry_strerror(r));
	}
	ferry__plasma_spill_read_free(j);
	return r;
}

void ferry__plasma_spill_read_free(struct ferry__plasma_spill_rjob *j)
{
	if (!j)
		return;
	close(j->fd);
	ferry__free(j->stage.raw);
	ferry__free(j);
}

int ferry__plasma_spill_read(struct ferry__plasma_spill *sp, uint32_t file, uint64_t offset,
			     void *dst, uint64_t size)
{
	struct ferry__plasma_spill_read one = {offset, size, dst};

	return ferry__plasma_spill_readv(sp, file, &one, 1);
}

void ferry__plasma_spill_drop(struct ferry__plasma_spill *sp, uint32_t file, uint64_t offset,
			      uint64_t size, bool restored)
{
	struct spill_file *f = file_of(sp, file, offset, size);
	uint64_t from = FERRY_ALIGN_UP(offset, (uint64_t)DIO_ALIGN);
	uint64_t to = align_down(offset + size);

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
	} else if (!restored && size >= PUNCH_MIN_BYTES && from < to) {
		/* Best effort: the file system may not punch, then the space comes back when
		 * the file closes. Whole blocks only: the neighbours share the edge blocks. */
		(void)fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)from,
				(off_t)(to - from));
	}
}

void ferry__plasma_spill_stats(const struct ferry__plasma_spill *sp,
			       struct ferry__plasma_spill_stats *out)
{
	*out = sp->st;
}

void ferry__plasma_spill_inject(struct ferry__plasma_spill *sp, int write_err, int read_err)
{
	atomic_store(&sp->inject_write, write_err);
	atomic_store(&sp->inject_read, read_err);
}

void ferry__plasma_spill_inject_hold(struct ferry__plasma_spill *sp, int fd)
{
	atomic_store(&sp->inject_hold, fd + 1);
}

void ferry__plasma_spill_inject_read_hold(struct ferry__plasma_spill *sp, int fd)
{
	atomic_store(&sp->inject_read_hold, fd + 1);
}

int ferry__plasma_spill_file_fd(const struct ferry__plasma_spill *sp, uint32_t file)
{
	return file < sp->nfiles ? sp->files[file].fd : -1;
}
