/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the write-ahead log at open: directory listing, snapshot load, segment replay, and the
 * torn-tail rule (see the DESIGN block in wal.h). Plain read(2): this runs once, before serving.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/wal_int.h"

#define READ_CHUNK (1u << 20)

uint32_t ferry__wal_frame_crc(uint64_t lsn, uint32_t index, const void *payload, size_t size)
{
	uint8_t b[12];

	ferry__gcs_store_u64(b, lsn);
	ferry__gcs_store_u32(b + 8, index);
	return ferry__crc32c(ferry__crc32c(0, b, sizeof(b)), payload, size);
}

void ferry__wal_frame_seal(uint8_t *frame, size_t size, uint64_t lsn, uint32_t index)
{
	ferry__gcs_store_u32(frame, (uint32_t)size);
	ferry__gcs_store_u64(frame + 8, lsn);
	ferry__gcs_store_u32(frame + 16, index);
	ferry__gcs_store_u32(frame + 4,
			     ferry__wal_frame_crc(lsn, index, frame + FRAME_HEADER_SIZE, size));
}

/* ---- directory ---- */

static bool parse_hex16(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	for (int i = 0; i < 16; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (d < 0)
			return false;
		v = v << 4 | (uint64_t)d;
	}
	*out = v;
	return true;
}

static bool parse_name(const char *name, struct wal_file *f)
{
	size_t n = strlen(name);

	if (n >= WAL_NAME_MAX)
		return false;
	if (n > 4 && strcmp(name + n - 4, ".tmp") == 0 && strncmp(name, "snap-", 5) == 0) {
		f->kind = 't';
		f->lsn = 0;
	} else if (n == 24 && strncmp(name, "wal-", 4) == 0 && strcmp(name + 20, ".log") == 0 &&
		   parse_hex16(name + 4, &f->lsn)) {
		f->kind = 'w';
	} else if (n == 26 && strncmp(name, "snap-", 5) == 0 && strcmp(name + 21, ".snap") == 0 &&
		   parse_hex16(name + 5, &f->lsn)) {
		f->kind = 's';
	} else {
		return false;
	}
	memcpy(f->name, name, n + 1);
	return true;
}

static int cmp_file(const void *a, const void *b)
{
	const struct wal_file *x = a, *y = b;

	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

int ferry__wal_list(int dirfd, struct wal_file **files, size_t *count)
{
	struct wal_file *list = NULL, f;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int fd = dup(dirfd), ret = 0;
	DIR *d;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		ret = -errno;
		close(fd);
		return ret;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		if (!parse_name(de->d_name, &f))
			continue;
		if (n == cap) {
			struct wal_file *p =
				ferry__realloc(list, (cap ? cap * 2 : 16) * sizeof(*p));

			if (!p) {
				ret = -ENOMEM;
				break;
			}
			list = p;
			cap = cap ? cap * 2 : 16;
		}
		list[n++] = f;
	}
	closedir(d);
	if (ret < 0) {
		ferry__free(list);
		return ret;
	}
	if (n)
		qsort(list, n, sizeof(*list), cmp_file);
	*files = list;
	*count = n;
	return 0;
}

/* ---- buffered reading of frames ---- */

struct freader {
	int fd;	      /* file */
	uint8_t *buf; /* ferry__malloc'd */
	size_t cap;   /* bytes allocated */
	size_t start; /* first unread byte */
	size_t end;   /* end of valid bytes */
	uint64_t pos; /* file offset of buf[start] */
	bool eof;     /* read(2) returned 0 */
};

enum frame_result { FRAME_OK = 0, FRAME_END = 1, FRAME_BAD = 2 };

/* Make @need bytes available at buf[start]: 1, 0 (file ends first), or -errno. */
static int fr_fill(struct freader *r, size_t need)
{
	if (r->end - r->start >= need)
		return 1;
	memmove(r->buf, r->buf + r->start, r->end - r->start);
	r->end -= r->start;
	r->start = 0;
	if (need > r->cap) {
		uint8_t *p = ferry__realloc(r->buf, need);

		if (!p)
			return -ENOMEM;
		r->buf = p;
		r->cap = need;
	}
	while (r->end < need && !r->eof) {
		ssize_t n = read(r->fd, r->buf + r->end, r->cap - r->end);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			r->eof = true;
		r->end += (size_t)n;
	}
	return r->end - r->start >= need;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Is every byte of @fd from @off to its end zero? 1, 0 or -errno. A segment zero-filled ahead
 * of its log (wal.c) ends this way. */
static int zero_from(int fd, uint64_t off)
{
	uint8_t *chunk = ferry__malloc(READ_CHUNK);
	int ret;

	if (!chunk)
		return -ENOMEM;
	for (;;) {
		ssize_t n = pread(fd, chunk, READ_CHUNK, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || !all_zero(chunk, (size_t)n)) {
			ret = n < 0 ? -errno : n > 0 ? 0 : 1;
			break;
		}
		off += (uint64_t)n;
	}
	ferry__free(chunk);
	return ret;
}

/* Is everything from buf[start] to the end of the file zero? 1, 0 or -errno. Leaves the
 * reader as it was. */
static int rest_is_zero(struct freader *r)
{
	if (!all_zero(r->buf + r->start, r->end - r->start))
		return 0;
	return r->eof ? 1 : zero_from(r->fd, r->pos + (r->end - r->start));
}

static int fr_init(struct freader *r, int fd)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
	r->buf = ferry__malloc(READ_CHUNK);
	if (!r->buf)
		return -ENOMEM;
	r->cap = READ_CHUNK;
	return 0;
}

/* The next frame: FRAME_OK (fields set; payload valid until the next call), FRAME_END (clean
 * end of file), FRAME_BAD (*@why says what), or -errno. */
static int read_frame(struct freader *r, size_t max, uint64_t *lsn, const uint8_t **payload,
		      size_t *size, const char **why)
{
	const uint8_t *h;
	uint32_t len;
	int ret = fr_fill(r, FRAME_HEADER_SIZE);

	if (ret < 0)
		return ret;
	/* Zeros where a header should be, and nothing but zeros after: the clean end of a
	 * zero-filled segment (no real header is zero: LSNs start at 1). */
	if (all_zero(r->buf + r->start, FERRY_MIN(r->end - r->start, (size_t)FRAME_HEADER_SIZE))) {
		ret = rest_is_zero(r);
		if (ret != 0)
			return ret < 0 ? ret : FRAME_END;
		*why = "zeros where a frame should be";
		return FRAME_BAD;
	}
	if (ret == 0) {
		*why = "short frame header";
		return FRAME_BAD;
	}
	len = ferry__gcs_load_u32(r->buf + r->start);
	if (len > max) {
		*why = "frame length over the limit";
		return FRAME_BAD;
	}
	ret = fr_fill(r, FRAME_HEADER_SIZE + (size_t)len);
	if (ret <= 0) {
		*why = "short frame payload";
		return ret < 0 ? ret : FRAME_BAD;
	}
	h = r->buf + r->start;
	*lsn = ferry__gcs_load_u64(h + 8);
	if (ferry__gcs_load_u32(h + 4) !=
	    ferry__wal_frame_crc(*lsn, ferry__gcs_load_u32(h + 16), h + FRAME_HEADER_SIZE, len)) {
		*why = "CRC mismatch";
		return FRAME_BAD;
	}
	*payload = h + FRAME_HEADER_SIZE;
	*size = len;
	r->start += FRAME_HEADER_SIZE + (size_t)len;
	r->pos += FRAME_HEADER_SIZE + (size_t)len;
	return FRAME_OK;
}

/*
 * A file of another format version (@h: its header, magic checked). Version 1 held GCS records
 * in the hand-written format of the first release; this GCS no longer has those decoders, and
 * a converter would need exactly them, so such a log is refused (before anything is written to
 * it) with a message saying what to do, never half-read.
 */
static int version_check(const uint8_t *h, const struct wal_file *f)
{
	uint32_t version = ferry__gcs_load_u32(h + 8);

	if (version == WAL_VERSION)
		return 0;
	FLOG_ERROR("gcs",
		   "wal: %s: WAL format version %u; this GCS reads only version %d (version 1 "
		   "holds the hand-written GCS records of releases before issue 22): start it "
		   "with an empty WAL directory, or run the GCS release that wrote this one",
		   f->name, version, WAL_VERSION);
	return -EPROTONOSUPPORT;
}

/* ---- snapshot ---- */

static int snapshot_header(struct freader *r, const struct wal_file *f, uint32_t *count)
{
	const uint8_t *h;
	int ret = fr_fill(r, SNAP_HEADER_SIZE);

	if (ret < 0)
		return ret;
	h = r->buf;
	if (ret != 0 && memcmp(h, SNAP_MAGIC, 8) == 0 && version_check(h, f) < 0)
		return -EPROTONOSUPPORT;
	if (ret == 0 || memcmp(h, SNAP_MAGIC, 8) != 0 ||
	    ferry__gcs_load_u32(h + 8) != WAL_VERSION || ferry__gcs_load_u64(h + 16) != f->lsn ||
	    ferry__gcs_load_u32(h + 28) != ferry__crc32c(0, h, 28)) {
		FLOG_ERROR("gcs", "wal: snapshot %s: bad header", f->name);
		return -EIO;
	}
	*count = ferry__gcs_load_u32(h + 12);
	r->start = r->pos = SNAP_HEADER_SIZE;
	return 0;
}

static int load_snapshot(struct ferry__wal *w, const struct wal_file *f, ferry__wal_replay_fn fn,
			 void *arg)
{
	struct freader r;
	const uint8_t *payload;
	const char *why = "trailing bytes";
	uint64_t lsn;
	uint32_t count;
	size_t size;
	int fd = openat(w->dirfd, f->name, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	ret = fr_init(&r, fd);
	if (ret < 0)
		goto err_close;
	ret = snapshot_header(&r, f, &count);
	for (uint32_t i = 0; ret == 0 && i < count; i++) {
		ret = read_frame(&r, w->opts.max_record_bytes, &lsn, &payload, &size, &why);
		if (ret == FRAME_OK && lsn == f->lsn) {
			ret = fn ? fn(arg, lsn, true, payload, size) : 0;
			w->stats.replayed++;
			continue;
		}
		if (ret >= 0) {
			FLOG_ERROR("gcs", "wal: snapshot %s: record %u of %u: %s", f->name, i,
				   count, ret == FRAME_OK ? "wrong LSN" : why);
			ret = -EIO;
		}
	}
	if (ret == 0) {
		ret = read_frame(&r, w->opts.max_record_bytes, &lsn, &payload, &size, &why);
		if (ret == FRAME_END) {
			ret = 0;
		} else if (ret >= 0) {
			FLOG_ERROR("gcs", "wal: snapshot %s: bytes after its %u records", f->name,
				   count);
			ret = -EIO;
		}
	}
	ferry__free(r.buf);
err_close:
	close(fd);
	return ret;
}

/* ---- segments ---- */

/* Has a write reached any segment after files[@i]: a byte after its header that is not zero
 * (the rest may be zero fill)? A segment that cannot be read counts as written. */
static bool later_records(const struct ferry__wal *w, const struct wal_file *files, size_t n,
			  size_t i)
{
	bool written = false;

	for (size_t j = i + 1; !written && j < n; j++) {
		int fd;

		if (files[j].kind != 'w')
			continue;
		fd = openat(w->dirfd, files[j].name, O_RDONLY | O_CLOEXEC);
		written = fd < 0 || zero_from(fd, SEG_HEADER_SIZE) != 1;
		if (fd >= 0)
			close(fd);
	}
	return written;
}

/*
 * After damage at the frame of LSN @lsn (at @offset): is there an intact frame of a later group
 * beyond it? A frame's index is its position in its group, so LSN - index is where its group
 * began. A torn write can leave intact frames of the torn group itself (disks persist the
 * sectors of one write in any order), but never of a later group: only one group is written at
 * a time. So such a frame means the damage is in the middle of the log. Returns 1, 0, -errno.
 */
static int later_group_after(const struct ferry__wal *w, int fd, uint64_t offset, uint64_t lsn)
{
	struct stat st;
	uint8_t *buf;
	size_t len;
	int found = 0;

	if (fstat(fd, &st) < 0)
		return -errno;
	len = (size_t)st.st_size - offset;
	buf = ferry__malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	if (pread(fd, buf, len, (off_t)offset) != (ssize_t)len) {
		ferry__free(buf);
		return -EIO;
	}
	for (size_t p = 1; !found && p + FRAME_HEADER_SIZE <= len; p++) {
		uint32_t n = ferry__gcs_load_u32(buf + p),
			 index = ferry__gcs_load_u32(buf + p + 16);
		uint64_t l = ferry__gcs_load_u64(buf + p + 8);

		/* Cheap filters first: a plausible length, LSN and index. */
		if (n > w->opts.max_record_bytes || n > len - p - FRAME_HEADER_SIZE || l <= lsn ||
		    l > lsn + len / FRAME_HEADER_SIZE || index > l || l - index <= lsn)
			continue;
		found = ferry__gcs_load_u32(buf + p + 4) ==
			ferry__wal_frame_crc(l, index, buf + p + FRAME_HEADER_SIZE, n);
	}
	ferry__free(buf);
	return found;
}

/* A bad frame or header at @offset of files[@i]: a torn tail (truncate, 1) or corruption. */
static int bad_tail(struct ferry__wal *w, const struct wal_file *files, size_t n, size_t i, int fd,
		    uint64_t offset, uint64_t lsn, const char *why)
{
	struct stat st;
	int ret = later_group_after(w, fd, offset, lsn);

	if (ret < 0)
		return ret;
	if (ret || later_records(w, files, n, i)) {
		FLOG_ERROR("gcs",
			   "wal: %s: %s at offset %" PRIu64 " with records after it: corrupt",
			   files[i].name, why, offset);
		return -EIO;
	}
	if (fstat(fd, &st) < 0)
		return -errno;
	FLOG_WARN("gcs",
		  "wal: %s: torn tail (%s) at offset %" PRIu64 ": truncating %" PRIu64 " bytes",
		  files[i].name, why, offset, (uint64_t)st.st_size - offset);
	if (ftruncate(fd, (off_t)offset) < 0 || fdatasync(fd) < 0)
		return -errno;
	w->stats.truncated_bytes += (uint64_t)st.st_size - offset;
	return 1;
}

static int segment_header(struct freader *r, const struct wal_file *f, const char **why)
{
	int ret = fr_fill(r, SEG_HEADER_SIZE);

	if (ret < 0)
		return ret;
	if (ret == 0) {
		*why = "short segment header";
		return r->end == 0 ? FRAME_END : FRAME_BAD;
	}
	if (memcmp(r->buf, SEG_MAGIC, 8) == 0 && version_check(r->buf, f) < 0)
		return -EPROTONOSUPPORT;
	if (memcmp(r->buf, SEG_MAGIC, 8) != 0 || ferry__gcs_load_u32(r->buf + 8) != WAL_VERSION ||
	    ferry__gcs_load_u64(r->buf + 16) != f->lsn) {
		FLOG_ERROR("gcs", "wal: %s: bad segment header", f->name);
		return -EIO;
	}
	r->start = r->pos = SEG_HEADER_SIZE;
	return FRAME_OK;
}

/* Replay files[@i]; *@expected is the next LSN to apply. Returns 0, 1 (torn tail: stop), <0. */
static int replay_segment(struct ferry__wal *w, const struct wal_file *files, size_t n, size_t i,
			  uint64_t snap_lsn, uint64_t *expected, ferry__wal_replay_fn fn, void *arg)
{
	const char *why = NULL;
	const uint8_t *payload;
	struct freader r;
	uint64_t lsn;
	size_t size;
	int fd = openat(w->dirfd, files[i].name, O_RDWR | O_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	ret = fr_init(&r, fd);
	if (ret < 0)
		goto err_close;
	ret = segment_header(&r, &files[i], &why);
	while (ret == FRAME_OK) {
		ret = read_frame(&r, w->opts.max_record_bytes, &lsn, &payload, &size, &why);
		if (ret != FRAME_OK || lsn <= snap_lsn)
			continue;
		if (lsn != *expected) {
			FLOG_ERROR("gcs", "wal: %s: LSN %" PRIu64 " where %" PRIu64 " was expected",
				   files[i].name, lsn, *expected);
			ret = -EIO;
			break;
		}
		ret = fn ? fn(arg, lsn, false, payload, size) : 0;
		(*expected)++;
		w->stats.replayed++;
		w->stats.log_bytes += FRAME_HEADER_SIZE + size;
	}
	if (ret == FRAME_END)
		ret = 0;
	else if (ret == FRAME_BAD)
		ret = bad_tail(w, files, n, i, fd, r.pos, *expected, why);
	ferry__free(r.buf);
err_close:
	close(fd);
	return ret;
}

static void remove_file(struct ferry__wal *w, const char *name)
{
	if (unlinkat(w->dirfd, name, 0) < 0 && errno != ENOENT)
		FLOG_WARN("gcs", "wal: cannot remove %s: %s", name, ferry_strerror(-errno));
}

/* Load the newest snapshot (removing the others and temp files); *@lsn = its LSN or 0. */
static int replay_snapshot(struct ferry__wal *w, const struct wal_file *files, size_t n,
			   ferry__wal_replay_fn fn, void *arg, uint64_t *lsn)
{
	const struct wal_file *newest = NULL;
	int ret;

	*lsn = 0;
	for (size_t i = 0; i < n; i++) {
		if (files[i].kind == 't')
			remove_file(w, files[i].name);
		if (files[i].kind == 's')
			newest = &files[i]; /* sorted: the last one is the newest */
	}
	if (!newest)
		return 0;
	ret = load_snapshot(w, newest, fn, arg);
	if (ret < 0)
		return ret;
	for (size_t i = 0; i < n; i++)
		if (files[i].kind == 's' && &files[i] != newest)
			remove_file(w, files[i].name);
	*lsn = newest->lsn;
	return 0;
}

int ferry__wal_replay(struct ferry__wal *w, ferry__wal_replay_fn fn, void *arg)
{
	struct wal_file *files = NULL;
	uint64_t snap_lsn, expected;
	size_t n = 0, i;
	int ret = ferry__wal_list(w->dirfd, &files, &n);

	if (ret < 0)
		return ret;
	ret = replay_snapshot(w, files, n, fn, arg, &snap_lsn);
	expected = snap_lsn + 1;
	for (i = 0; ret == 0 && i < n; i++)
		if (files[i].kind == 'w')
			ret = replay_segment(w, files, n, i, snap_lsn, &expected, fn, arg);
	/* After a torn tail the later segments hold no record: remove them. */
	for (; ret == 1 && i < n; i++)
		if (files[i].kind == 'w')
			remove_file(w, files[i].name);
	ferry__free(files);
	if (ret < 0)
		return ret;
	w->last_lsn = w->durable_lsn = expected - 1;
	return 0;
}
