/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writing the write-ahead log: segments, group commit over io_uring (one RWF_DSYNC write),
 * completion handling, and snapshot files. See the DESIGN block in wal.h; replay is in
 * wal_replay.c.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/metrics.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/wal_int.h"

/* io_uring user_data tags: at most one group and one snapshot operation are in flight. */
enum tag { TAG_GROUP_WRITE = 1, TAG_SNAP_WRITE = 3, TAG_SNAP_SYNC = 4, TAG_ZERO_FILL = 5 };

#define RING_ENTRIES 8
#define MAX_WRITE_CHUNK (1u << 30) /* below the kernel's MAX_RW_COUNT */

static void fail(struct ferry__wal *w, int err, const char *what)
{
	if (w->error)
		return;
	w->error = err;
	FLOG_ERROR("gcs", "wal: %s failed: %s; the log accepts no more records", what,
		   ferry_strerror(err));
	if (w->opts.durable)
		w->opts.durable(w->opts.arg, w->durable_lsn, err);
}

static struct io_uring_sqe *get_sqe(struct ferry__wal *w)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

	if (!sqe && io_uring_submit(&w->ring) >= 0)
		sqe = io_uring_get_sqe(&w->ring);
	return sqe;
}

static int submit_ring(struct ferry__wal *w, unsigned sqes)
{
	int ret;

	do
		ret = io_uring_submit(&w->ring);
	while (ret == -EINTR);
	if (ret < 0)
		return ret;
	w->cqes_owed += sqes;
	return 0;
}

/* ---- segments ---- */

static void segment_name(char *out, uint64_t first_lsn)
{
	snprintf(out, WAL_NAME_MAX, "wal-%016" PRIx64 ".log", first_lsn);
}

static void segment_close(struct wal_segment *seg)
{
	if (!seg)
		return;
	close(seg->fd);
	ferry__free(seg);
}

/* Create segment wal-<@first_lsn>.log with its header on disk and its name durable. */
static int segment_create(struct ferry__wal *w, uint64_t first_lsn, struct wal_segment **out)
{
	uint8_t header[SEG_HEADER_SIZE] = {0};
	char name[WAL_NAME_MAX];
	struct wal_segment *seg = ferry__calloc(1, sizeof(*seg));
	ssize_t written;
	int ret;

	if (!seg)
		return -ENOMEM;
	segment_name(name, first_lsn);
	seg->fd = openat(w->dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (seg->fd < 0) {
		ret = -errno;
		goto err_free;
	}
	memcpy(header, SEG_MAGIC, 8);
	ferry__gcs_store_u32(header + 8, WAL_VERSION);
	ferry__gcs_store_u64(header + 16, first_lsn);
	/* Synchronous, like the directory sync: once per segment, never on the hot path. */
	written = pwrite(seg->fd, header, sizeof(header), 0);
	if (written != (ssize_t)sizeof(header)) {
		ret = written < 0 ? -errno : -EIO;
		goto err_unlink;
	}
	if (fsync(w->dirfd) < 0) {
		ret = -errno;
		goto err_unlink;
	}
	seg->first_lsn = first_lsn;
	seg->size = seg->zeroed = SEG_HEADER_SIZE;
	*out = seg;
	return 0;

err_unlink:
	unlinkat(w->dirfd, name, 0);
	close(seg->fd);
err_free:
	ferry__free(seg);
	FLOG_ERROR("gcs", "wal: cannot create segment %s: %s", name, ferry_strerror(ret));
	return ret;
}

/* ---- groups ---- */

static struct wal_group *open_group(struct ferry__wal *w)
{
	struct wal_group *g = w->open;

	if (g)
		return g;
	g = w->spare;
	if (g) {
		w->spare = NULL;
	} else {
		g = ferry__calloc(1, sizeof(*g));
		if (!g)
			return NULL;
	}
	g->seg = w->active;
	g->offset = w->active->size;
	g->buf.size = 0;
	g->last_lsn = 0;
	g->records = 0;
	g->written = 0;
	g->next = NULL;
	w->active->groups++;
	if (w->tail)
		w->tail->next = g;
	else
		w->head = g;
	w->tail = g;
	w->open = g;
	return g;
}

static void free_group(struct wal_group *g)
{
	if (!g)
		return;
	ferry__gcs_buf_fini(&g->buf);
	ferry__free(g);
}

/* Take the head group off the queue, closing its segment if it was the last owed a write. */
static void pop_head(struct ferry__wal *w)
{
	struct wal_group *g = w->head;
	struct wal_segment *seg = g->seg;

	w->head = g->next;
	if (!w->head)
		w->tail = NULL;
	if (--seg->groups == 0 && seg != w->active)
		segment_close(seg);
	if (w->spare)
		free_group(g);
	else
		w->spare = g;
}

/*
 * Write what is left of the head group as one RWF_DSYNC write: durable (data and the file size
 * that reaches it, as fdatasync) when it completes. A write linked to an fsync costs a second
 * io-wq hand-off per group: 180 us against 134 us per group on this machine's disk, where a plain
 * write + fdatasync from one thread takes 126 us.
 */
static int submit_head(struct ferry__wal *w)
{
	struct wal_group *g = w->head;
	size_t len = FERRY_MIN(g->buf.size - g->written, (size_t)MAX_WRITE_CHUNK);
	struct io_uring_sqe *write = get_sqe(w);

	if (!write)
		return -EBUSY;
	io_uring_prep_write(write, g->seg->fd, g->buf.data + g->written, (unsigned)len,
			    g->offset + g->written);
	write->rw_flags = RWF_DSYNC;
	io_uring_sqe_set_data64(write, TAG_GROUP_WRITE);
	if (!g->written)
		g->submitted_us = ferry__now_ns() / 1000u;
	w->in_flight = true;
	return submit_ring(w, 1);
}

/*
 * Zero fill. An RWF_DSYNC write that extends its file must also make the new size and the
 * blocks' allocation durable, a journal commit: on this machine's ext4 a 1.6 KB appending write
 * took 145-170 us, the same write over blocks already allocated 85-100 us. So, as databases
 * preallocate their logs, the active segment is kept allocated WAL_FILL_AHEAD past the log's end
 * by RWF_DSYNC writes of zeros, one WAL_FILL_CHUNK at a time, and a group's write lands on blocks
 * that exist. Correctness never rests on the fill (a group beyond it is an appending write, only
 * slower), with one rule: no group is written while a fill covers any of its bytes, or the zeros
 * could land after the records; such a group waits for the fill (submit_groups). Replay reads
 * zeros where a frame header should be, with only zeros after them, as the end of a segment.
 */
static void maybe_fill(struct ferry__wal *w)
{
	struct wal_segment *seg = w->active;
	struct io_uring_sqe *sqe;
	int ret;

	if (w->filling || w->error || seg->no_fill || seg->size + WAL_FILL_AHEAD <= seg->zeroed)
		return;
	if (!w->zeros) {
		w->zeros = ferry__calloc(1, WAL_FILL_CHUNK);
		if (!w->zeros)
			return; /* writes extend the file, as without the fill; tried again later */
	}
	sqe = get_sqe(w);
	if (!sqe)
		return;
	/* Past every byte of the log, committed or not: a record committed while the fill is in
	 * flight that reaches fill_from makes its group wait. */
	w->fill_from = (FERRY_MAX(seg->zeroed, seg->size) + 4095) & ~(uint64_t)4095;
	w->filling = seg;
	seg->groups++;
	io_uring_prep_write(sqe, seg->fd, w->zeros, WAL_FILL_CHUNK, w->fill_from);
	sqe->rw_flags = RWF_DSYNC;
	io_uring_sqe_set_data64(sqe, TAG_ZERO_FILL);
	ret = submit_ring(w, 1);
	if (ret < 0)
		fail(w, ret, "submitting a zero fill"); /* the SQE may still go: keep the rule */
}

static void on_fill(struct ferry__wal *w, int res)
{
	struct wal_segment *seg = w->filling;

	w->filling = NULL;
	if (res < 0) {
		FLOG_WARN("gcs",
			  "wal: zero fill of segment %016" PRIx64 " failed: %s; its writes "
			  "extend the file from here on",
			  seg->first_lsn, ferry_strerror(res));
		seg->no_fill = true;
	} else {
		seg->zeroed = FERRY_MAX(seg->zeroed, w->fill_from + (uint64_t)res);
		w->stats.zero_filled += (uint64_t)res;
	}
	if (--seg->groups == 0 && seg != w->active)
		segment_close(seg);
	ferry__wal_submit(w); /* a group held back for the fill */
}

/* Write the head group unless a write is in flight or a fill covers it (failures: w->error). */
static void submit_groups(struct ferry__wal *w)
{
	struct wal_group *g;
	int ret;

	if (w->in_flight)
		return;
	/* A group left empty (its records cancelled) and closed by a rotation goes away. */
	while (w->head && w->head != w->open && w->head->buf.size == 0)
		pop_head(w);
	g = w->head;
	if (!g || g->buf.size == 0)
		return;
	if (w->filling == g->seg && g->offset + g->buf.size > w->fill_from)
		return; /* the fill's completion submits it */
	/* The group in the middle of a record stays open; it goes out after commit. */
	if (w->head == w->open) {
		if (w->in_record)
			return;
		w->open = NULL;
	}
	ret = submit_head(w);
	if (ret < 0)
		fail(w, ret, "submitting a write");
}

int ferry__wal_submit(struct ferry__wal *w)
{
	if (w->error)
		return w->error;
	submit_groups(w);
	maybe_fill(w);
	return w->error;
}

/* The head group is on disk: advance the durable LSN, recycle the group, go on. */
static void group_done(struct ferry__wal *w)
{
	struct wal_group *g = w->head;

	w->in_flight = false;
	w->stats.groups++;
	ferry__metric_add(FERRY__MC_gcs_wal_syncs, 1);
	ferry__metric_observe_us(FERRY__MH_wal_sync_seconds,
				 ferry__now_ns() / 1000u - g->submitted_us);
	w->stats.bytes_written += g->buf.size;
	w->queued_bytes -= g->buf.size;
	if (g->last_lsn)
		w->durable_lsn = g->last_lsn;
	pop_head(w);
	if (w->opts.durable)
		w->opts.durable(w->opts.arg, w->durable_lsn, 0);
	ferry__wal_submit(w);
}

static void on_group_write(struct ferry__wal *w, int res)
{
	struct wal_group *g = w->head;
	int ret;

	if (res < 0) {
		fail(w, res, "a log write (RWF_DSYNC)");
		return;
	}
	g->written += (size_t)res;
	if (g->written < g->buf.size) {
		/* Durable up to here: write the rest (still this group's records). */
		w->stats.short_writes++;
		ret = submit_head(w);
		if (ret < 0)
			fail(w, ret, "continuing a short write");
		return;
	}
	group_done(w);
}

/* ---- appending ---- */

int ferry__wal_begin(struct ferry__wal *w, struct ferry__gcs_buf **payload)
{
	struct wal_group *g;

	if (w->error)
		return w->error;
	assert(!w->in_record);
	if (w->queued_bytes >= w->opts.max_buffered_bytes) {
		FLOG_WARN("gcs", "wal: %zu bytes wait for the disk (limit %zu): refusing a record",
			  w->queued_bytes, w->opts.max_buffered_bytes);
		return -ENOBUFS;
	}
	g = open_group(w);
	if (!g)
		return -ENOMEM;
	w->mark = g->buf.size;
	if (!ferry__gcs_buf_grow(&g->buf, FRAME_HEADER_SIZE))
		return -ENOMEM;
	w->in_record = true;
	*payload = &g->buf;
	return 0;
}

void ferry__wal_cancel(struct ferry__wal *w)
{
	if (!w->in_record)
		return;
	w->open->buf.size = w->mark;
	w->in_record = false;
}

int ferry__wal_commit(struct ferry__wal *w, uint64_t *lsn)
{
	struct wal_group *g = w->open;
	size_t size = g->buf.size - w->mark - FRAME_HEADER_SIZE;

	assert(w->in_record);
	if (size > w->opts.max_record_bytes) {
		FLOG_WARN("gcs", "wal: record of %zu bytes over the limit of %zu", size,
			  w->opts.max_record_bytes);
		ferry__wal_cancel(w);
		return -E2BIG;
	}
	w->in_record = false;
	g->last_lsn = ++w->last_lsn;
	ferry__wal_frame_seal(g->buf.data + w->mark, size, g->last_lsn, g->records++);
	g->seg->size += FRAME_HEADER_SIZE + size;
	w->queued_bytes += FRAME_HEADER_SIZE + size;
	w->stats.records++;
	w->stats.log_bytes += FRAME_HEADER_SIZE + size;
	if (lsn)
		*lsn = g->last_lsn;
	return 0;
}

int ferry__wal_append(struct ferry__wal *w, const void *data, size_t size, uint64_t *lsn)
{
	struct ferry__gcs_buf *buf = NULL;
	void *p;
	int ret = ferry__wal_begin(w, &buf);

	if (ret < 0)
		return ret;
	p = ferry__gcs_buf_grow(buf, size);
	if (!p) {
		ferry__wal_cancel(w);
		return -ENOMEM;
	}
	if (size)
		memcpy(p, data, size);
	return ferry__wal_commit(w, lsn);
}

/* ---- snapshots ---- */

static void snapshot_release(struct ferry__wal *w)
{
	if (w->snap.fd >= 0)
		close(w->snap.fd);
	w->snap.fd = -1;
	ferry__gcs_buf_fini(&w->snap.body);
	w->snap.building = w->snap.writing = false;
}

int ferry__wal_snapshot_start(struct ferry__wal *w, uint64_t *lsn)
{
	struct wal_segment *seg, *old = w->active;
	int ret;

	if (w->error)
		return w->error;
	if (w->snap.building || w->snap.writing || w->in_record)
		return -EBUSY;
	if (!ferry__gcs_buf_grow(&w->snap.body, SNAP_HEADER_SIZE))
		return -ENOMEM;
	/* Records after the snapshot go to a new segment, so the old ones can be deleted once
	 * the snapshot is in place (unless the active one holds nothing yet). */
	if (old->size > SEG_HEADER_SIZE || old->first_lsn != w->last_lsn + 1) {
		ret = segment_create(w, w->last_lsn + 1, &seg);
		if (ret < 0) {
			ferry__gcs_buf_fini(&w->snap.body);
			return ret;
		}
		w->active = seg;
		w->open = NULL; /* a group still taking records belongs to the old segment */
		if (old->groups == 0)
			segment_close(old);
	}
	w->snap.building = true;
	w->snap.lsn = w->last_lsn;
	w->snap.count = 0;
	w->stats.log_bytes = 0;
	*lsn = w->snap.lsn;
	return 0;
}

int ferry__wal_snapshot_begin(struct ferry__wal *w, struct ferry__gcs_buf **payload)
{
	if (!w->snap.building)
		return -EINVAL;
	w->snap.mark = w->snap.body.size;
	if (!ferry__gcs_buf_grow(&w->snap.body, FRAME_HEADER_SIZE))
		return -ENOMEM;
	*payload = &w->snap.body;
	return 0;
}

int ferry__wal_snapshot_commit(struct ferry__wal *w)
{
	struct wal_snapshot *sn = &w->snap;
	size_t size = sn->body.size - sn->mark - FRAME_HEADER_SIZE;

	if (size > w->opts.max_record_bytes) {
		sn->body.size = sn->mark;
		FLOG_WARN("gcs", "wal: snapshot record of %zu bytes over the limit", size);
		return -E2BIG;
	}
	ferry__wal_frame_seal(sn->body.data + sn->mark, size, sn->lsn, sn->count);
	sn->count++;
	return 0;
}

void ferry__wal_snapshot_cancel(struct ferry__wal *w)
{
	if (w->snap.building)
		snapshot_release(w);
}

bool ferry__wal_snapshot_busy(const struct ferry__wal *w)
{
	return w->snap.building || w->snap.writing;
}

static int snapshot_submit_write(struct ferry__wal *w)
{
	struct wal_snapshot *sn = &w->snap;
	size_t len = FERRY_MIN(sn->body.size - sn->written, (size_t)8 << 20);
	struct io_uring_sqe *sqe = get_sqe(w);

	if (!sqe)
		return -EBUSY;
	if (len == 0)
		io_uring_prep_fsync(sqe, sn->fd, 0);
	else
		io_uring_prep_write(sqe, sn->fd, sn->body.data + sn->written, (unsigned)len,
				    sn->written);
	io_uring_sqe_set_data64(sqe, len == 0 ? TAG_SNAP_SYNC : TAG_SNAP_WRITE);
	return submit_ring(w, 1);
}

int ferry__wal_snapshot_write(struct ferry__wal *w)
{
	struct wal_snapshot *sn = &w->snap;
	uint8_t *h = sn->body.data;
	int ret;

	if (!sn->building)
		return -EINVAL;
	memcpy(h, SNAP_MAGIC, 8);
	ferry__gcs_store_u32(h + 8, WAL_VERSION);
	ferry__gcs_store_u32(h + 12, sn->count);
	ferry__gcs_store_u64(h + 16, sn->lsn);
	ferry__gcs_store_u32(h + 24, 0);
	ferry__gcs_store_u32(h + 28, ferry__crc32c(0, h, 28));
	snprintf(sn->tmp_name, sizeof(sn->tmp_name), "snap-%016" PRIx64 ".tmp", sn->lsn);
	snprintf(sn->name, sizeof(sn->name), "snap-%016" PRIx64 ".snap", sn->lsn);
	sn->fd = openat(w->dirfd, sn->tmp_name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (sn->fd < 0) {
		ret = -errno;
		goto err_release;
	}
	sn->building = false;
	sn->writing = true;
	sn->written = 0;
	ret = snapshot_submit_write(w);
	if (ret < 0)
		goto err_unlink;
	return 0;

err_unlink:
	unlinkat(w->dirfd, sn->tmp_name, 0);
err_release:
	FLOG_ERROR("gcs", "wal: snapshot %s: %s", sn->name, ferry_strerror(ret));
	snapshot_release(w);
	return ret;
}

static void snapshot_end(struct ferry__wal *w, int err)
{
	uint64_t lsn = w->snap.lsn;

	if (err < 0) {
		FLOG_ERROR("gcs", "wal: snapshot %s failed: %s (the log is kept)", w->snap.name,
			   ferry_strerror(err));
		unlinkat(w->dirfd, w->snap.tmp_name, 0);
	}
	snapshot_release(w);
	if (w->opts.snapshot_done)
		w->opts.snapshot_done(w->opts.arg, lsn, err);
}

/* The new snapshot covers everything before the active segment: delete what it replaces. */
static void delete_replaced(struct ferry__wal *w)
{
	struct wal_file *files;
	size_t n;

	if (ferry__wal_list(w->dirfd, &files, &n) < 0)
		return; /* leftovers are harmless: replay skips what the snapshot covers */
	for (size_t i = 0; i < n; i++) {
		bool old_segment = files[i].kind == 'w' && files[i].lsn < w->active->first_lsn &&
				   files[i].lsn <= w->snap.lsn;
		bool old_snapshot = files[i].kind == 's' && files[i].lsn != w->snap.lsn;

		if ((old_segment || old_snapshot) && unlinkat(w->dirfd, files[i].name, 0) == 0)
			w->stats.segments_deleted += old_segment;
	}
	ferry__free(files);
}

static void on_snapshot_cqe(struct ferry__wal *w, enum tag tag, int res)
{
	struct wal_snapshot *sn = &w->snap;
	int ret;

	if (res < 0) {
		snapshot_end(w, res);
		return;
	}
	if (tag == TAG_SNAP_WRITE) {
		sn->written += (size_t)res;
		ret = snapshot_submit_write(w); /* the next chunk, or the fsync */
		if (ret < 0)
			snapshot_end(w, ret);
		return;
	}
	close(sn->fd);
	sn->fd = -1;
	if (renameat(w->dirfd, sn->tmp_name, w->dirfd, sn->name) < 0 || fsync(w->dirfd) < 0) {
		snapshot_end(w, -errno);
		return;
	}
	w->stats.snapshots++;
	delete_replaced(w);
	FLOG_INFO("gcs", "wal: snapshot %s in place (%u records)", sn->name, sn->count);
	snapshot_end(w, 0);
}

/* ---- completions ---- */

static void handle_cqe(struct ferry__wal *w, uint64_t tag, int res)
{
	w->cqes_owed--;
	switch (tag) {
	case TAG_GROUP_WRITE:
		if (!w->error)
			on_group_write(w, res);
		break;
	case TAG_ZERO_FILL:
		on_fill(w, res);
		break;
	default:
		on_snapshot_cqe(w, (enum tag)tag, res);
		break;
	}
}

int ferry__wal_process(struct ferry__wal *w)
{
	struct io_uring_cqe *cqe;
	uint64_t count;

	if (read(w->event_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		FLOG_DEBUG("gcs", "wal: eventfd read: %s", ferry_strerror(-errno));
	while (io_uring_peek_cqe(&w->ring, &cqe) == 0) {
		uint64_t tag = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&w->ring, cqe);
		handle_cqe(w, tag, res);
	}
	return w->error;
}

int ferry__wal_wait(struct ferry__wal *w)
{
	struct io_uring_cqe *cqe;
	int ret;

	ferry__wal_submit(w);
	while (w->cqes_owed > 0) {
		ret = io_uring_wait_cqe(&w->ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret < 0) {
			fail(w, ret, "waiting for completions");
			return ret;
		}
		ret = ferry__wal_process(w);
		if (ret == 0 && !w->in_flight)
			ferry__wal_submit(w);
	}
	return w->error;
}

int ferry__wal_event_fd(const struct ferry__wal *w)
{
	return w->event_fd;
}

uint64_t ferry__wal_last_lsn(const struct ferry__wal *w)
{
	return w->last_lsn;
}

size_t ferry__wal_max_record_bytes(const struct ferry__wal *w)
{
	return w->opts.max_record_bytes;
}

uint64_t ferry__wal_durable_lsn(const struct ferry__wal *w)
{
	return w->durable_lsn;
}

int ferry__wal_error(const struct ferry__wal *w)
{
	return w->error;
}

void ferry__wal_get_stats(const struct ferry__wal *w, struct ferry__wal_stats *out)
{
	*out = w->stats;
}

/* ---- open and close ---- */

static int open_dir(const char *dir)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static int start_ring(struct ferry__wal *w)
{
	int ret = io_uring_queue_init(RING_ENTRIES, &w->ring, 0);

	if (ret < 0)
		return ret;
	w->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->event_fd < 0) {
		ret = -errno;
		goto err_exit_ring;
	}
	ret = io_uring_register_eventfd(&w->ring, w->event_fd);
	if (ret < 0)
		goto err_close_eventfd;
	return 0;

err_close_eventfd:
	close(w->event_fd);
	w->event_fd = -1;
err_exit_ring:
	io_uring_queue_exit(&w->ring);
	return ret;
}

int ferry__wal_open(const struct ferry__wal_opts *opts, ferry__wal_replay_fn replay,
		    void *replay_arg, struct ferry__wal **out)
{
	struct ferry__wal *w;
	int ret;

	if (!opts || !opts->dir || !opts->dir[0]) {
		FLOG_ERROR("gcs", "wal: no directory given");
		return -EINVAL;
	}
	w = ferry__calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->opts = *opts;
	w->opts.dir = NULL; /* borrowed for this call only */
	if (!w->opts.max_record_bytes || w->opts.max_record_bytes > (1u << 30))
		w->opts.max_record_bytes = w->opts.max_record_bytes ? 1u << 30 : 64u << 20;
	if (!w->opts.max_buffered_bytes)
		w->opts.max_buffered_bytes = 256u << 20;
	w->event_fd = w->snap.fd = -1;
	w->dirfd = open_dir(opts->dir);
	if (w->dirfd < 0) {
		ret = -errno;
		FLOG_ERROR("gcs", "wal: cannot open %s: %s", opts->dir, ferry_strerror(ret));
		goto err_free;
	}
	ret = ferry__wal_replay(w, replay, replay_arg);
	if (ret < 0)
		goto err_close_dir;
	ret = segment_create(w, w->last_lsn + 1, &w->active);
	if (ret < 0)
		goto err_close_dir;
	ret = start_ring(w);
	if (ret < 0) {
		FLOG_ERROR("gcs", "wal: io_uring: %s", ferry_strerror(ret));
		goto err_close_segment;
	}
	w->ring_ready = true;
	*out = w;
	return 0;

err_close_segment:
	segment_close(w->active);
err_close_dir:
	close(w->dirfd);
err_free:
	ferry__free(w);
	return ret;
}

void ferry__wal_close(struct ferry__wal *w)
{
	struct wal_group *g, *next;

	if (!w)
		return;
	ferry__wal_cancel(w);
	ferry__wal_snapshot_cancel(w);
	ferry__wal_wait(w);
	/* Groups left (after a fatal error) still hold their segments. */
	for (g = w->head; g; g = next) {
		next = g->next;
		if (--g->seg->groups == 0 && g->seg != w->active)
			segment_close(g->seg);
		free_group(g);
	}
	free_group(w->spare);
	ferry__free(w->zeros);
	segment_close(w->active);
	snapshot_release(w);
	io_uring_queue_exit(&w->ring);
	close(w->event_fd);
	close(w->dirfd);
	ferry__free(w);
}
