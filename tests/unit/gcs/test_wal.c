/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Write-ahead log: append and replay, group commit, durability callbacks, a crashed writer,
 * torn tails and mid-log corruption, snapshots with log truncation, leftovers of crashes, logs
 * of an older format version, a failing disk (file size limit), limits and allocation failures.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "ftest.h"
#include "gcs/wal.h"

#define MAX_SEEN 20000

/* Payload of the record with LSN @lsn: its length and bytes are a function of the LSN. */
static size_t pattern(uint64_t lsn, uint8_t *out)
{
	size_t n = (size_t)(lsn * 37 % 300) + 1;

	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(lsn + i);
	return n;
}

struct seen {
	uint64_t lsns[MAX_SEEN]; /* log records replayed, in order */
	int n;			 /* how many */
	int snapshot_records;	 /* records replayed from a snapshot */
	uint64_t snapshot_lsn;	 /* their LSN */
	uint64_t durable;	 /* last durable LSN reported */
	int durable_calls;	 /* reports */
	int error;		 /* error reported */
};

static int on_replay(void *arg, uint64_t lsn, bool from_snapshot, const void *payload, size_t size)
{
	struct seen *s = arg;
	uint8_t want[512];

	if (from_snapshot) {
		ftest_assert_uint_eq(size, 8);
		ftest_assert_mem_eq(payload, &(uint64_t){(uint64_t)s->snapshot_records}, 8);
		s->snapshot_records++;
		s->snapshot_lsn = lsn;
		return 0;
	}
	ftest_assert_uint_eq(size, pattern(lsn, want));
	ftest_assert_mem_eq(payload, want, size);
	ftest_assert_int_lt(s->n, MAX_SEEN);
	s->lsns[s->n++] = lsn;
	return 0;
}

static void on_durable(void *arg, uint64_t lsn, int err)
{
	struct seen *s = arg;

	ftest_assert_uint_ge(lsn, s->durable);
	s->durable = lsn;
	s->durable_calls++;
	if (err)
		s->error = err;
}

static const char *wal_dir(void)
{
	static char path[128];

	snprintf(path, sizeof(path), "%s/wal", ftest_tmpdir());
	return path;
}

static struct ferry__wal *open_wal(struct seen *s)
{
	struct ferry__wal_opts opts = {0};
	struct ferry__wal *w;

	memset(s, 0, sizeof(*s));
	opts.dir = wal_dir();
	opts.durable = on_durable;
	opts.arg = s;
	ftest_assert_ok(ferry__wal_open(&opts, on_replay, s, &w));
	return w;
}

static void append(struct ferry__wal *w, uint64_t want_lsn)
{
	uint8_t buf[512];
	uint64_t lsn;

	ftest_assert_ok(ferry__wal_append(w, buf, pattern(want_lsn, buf), &lsn));
	ftest_assert_uint_eq(lsn, want_lsn);
}

/* Replay and check the records are exactly 1..@count (after @from). */
static void assert_replays(uint64_t from, uint64_t count)
{
	struct seen s;
	struct ferry__wal *w = open_wal(&s);

	ftest_assert_int_eq(s.n, (int)(count - from));
	for (int i = 0; i < s.n; i++)
		ftest_assert_uint_eq(s.lsns[i], from + 1 + (uint64_t)i);
	ftest_assert_uint_eq(ferry__wal_last_lsn(w), count);
	ferry__wal_close(w);
}

static char *segment_path(uint64_t first_lsn)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/wal-%016llx.log", wal_dir(),
		 (unsigned long long)first_lsn);
	return path;
}

static off_t file_size(const char *path)
{
	struct stat st;

	ftest_assert_int_eq(stat(path, &st), 0);
	return st.st_size;
}

static int count_files(const char *prefix)
{
	DIR *d = opendir(wal_dir());
	struct dirent *de;
	int n = 0;

	ftest_assert_ptr_notnull(d);
	while ((de = readdir(d)))
		n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

/* Bytes [@from, end of file) of @path are all zero. */
static bool zeros_from(const char *path, off_t from)
{
	int fd = open(path, O_RDONLY);
	uint8_t buf[4096];
	ssize_t n;
	bool zero = true;

	ftest_assert_int_ge(fd, 0);
	while (zero && (n = pread(fd, buf, sizeof(buf), from)) > 0) {
		for (ssize_t i = 0; i < n; i++)
			zero = zero && !buf[i];
		from += n;
	}
	close(fd);
	return zero;
}

static void damage(const char *path, off_t offset, const void *bytes, size_t n)
{
	int fd = open(path, O_WRONLY);

	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(pwrite(fd, bytes, n, offset), (ssize_t)n);
	close(fd);
}

FTEST(append_and_replay)
{
	struct seen s;
	struct ferry__wal *w = open_wal(&s);

	ftest_assert_int_eq(s.n, 0);
	for (uint64_t lsn = 1; lsn <= 300; lsn++)
		append(w, lsn);
	ftest_assert_uint_eq(ferry__wal_durable_lsn(w), 0); /* nothing written yet */
	ftest_assert_ok(ferry__wal_wait(w));
	ftest_assert_uint_eq(ferry__wal_durable_lsn(w), 300);
	ftest_assert_uint_eq(s.durable, 300);
	ferry__wal_close(w);
	assert_replays(0, 300);
	/* A second run appends after the first, in a new segment. */
	w = open_wal(&s);
	append(w, 301);
	ferry__wal_close(w);
	assert_replays(0, 301);
	ftest_assert_int_eq(count_files("wal-"), 3);
}

/* Many records appended before a submit go out as one write + one fdatasync; records appended
 * while that is in flight go out together right after it. */
FTEST(group_commit)
{
	struct ferry__wal_stats st;
	struct seen s;
	struct ferry__wal *w = open_wal(&s);

	for (uint64_t lsn = 1; lsn <= 500; lsn++)
		append(w, lsn);
	ftest_assert_ok(ferry__wal_submit(w));
	for (uint64_t lsn = 501; lsn <= 1000; lsn++)
		append(w, lsn);
	ftest_assert_ok(ferry__wal_wait(w));
	ferry__wal_get_stats(w, &st);
	ftest_assert_uint_eq(st.records, 1000);
	ftest_assert_uint_eq(st.groups, 2);
	ftest_assert_int_eq(s.durable_calls, 2);
	ftest_assert_uint_eq(s.durable, 1000);
	/* The file holds the log, then the zeros it was filled with ahead of it. */
	ftest_assert_int_ge(file_size(segment_path(1)), (off_t)(24 + st.bytes_written));
	ftest_assert_true(zeros_from(segment_path(1), (off_t)(24 + st.bytes_written)));
	ferry__wal_close(w);
}

/*
 * The segment is kept zero-filled ahead of the log (so group writes overwrite allocated blocks
 * rather than extend the file), and replay takes the zeros after the last record as the clean
 * end of each segment: nothing truncated, no corruption when a later segment holds records.
 */
FTEST(zero_fill_ahead_of_the_log)
{
	struct ferry__wal_stats st;
	struct seen s;
	struct ferry__wal *w = open_wal(&s);
	uint64_t lsn;

	for (lsn = 1; lsn <= 16000; lsn++) { /* ~2.7 MB of log, a submit per 100 records */
		append(w, lsn);
		if (lsn % 100 == 0)
			ftest_assert_ok(ferry__wal_submit(w));
		if (lsn % 1000 == 0)
			ftest_assert_ok(ferry__wal_process(w));
	}
	ftest_assert_ok(ferry__wal_wait(w));
	ferry__wal_get_stats(w, &st);
	ftest_log("log %llu bytes in %llu groups, %llu bytes zero-filled, file %lld bytes",
		  (unsigned long long)st.bytes_written, (unsigned long long)st.groups,
		  (unsigned long long)st.zero_filled, (long long)file_size(segment_path(1)));
	ftest_assert_uint_gt(st.bytes_written, 2u << 20);
	/* Filled at least to the log's end and at most a few chunks past it. */
	ftest_assert_uint_ge(st.zero_filled, st.bytes_written);
	ftest_assert_int_ge(file_size(segment_path(1)),
			    (off_t)(24 + st.bytes_written + (1u << 20)));
	ftest_assert_int_le(file_size(segment_path(1)),
			    (off_t)(24 + st.bytes_written + (4u << 20)));
	ftest_assert_true(zeros_from(segment_path(1), (off_t)(24 + st.bytes_written)));
	ferry__wal_close(w);

	/* Reopen: everything back, nothing cut; a second segment follows the zero-filled first. */
	w = open_wal(&s);
	ferry__wal_get_stats(w, &st);
	ftest_assert_int_eq(s.n, 16000);
	ftest_assert_uint_eq(st.truncated_bytes, 0);
	append(w, 16001);
	ferry__wal_close(w);
	w = open_wal(&s);
	ferry__wal_get_stats(w, &st);
	ftest_assert_int_eq(s.n, 16001);
	ftest_assert_uint_eq(st.truncated_bytes, 0);
	ferry__wal_close(w);

	/* A byte of damage in the zeros of the first segment, while the second holds a record:
	 * something wrote there after the log's end, which no torn write explains. */
	damage(segment_path(1), file_size(segment_path(1)) - 100, "\x01", 1);
	{
		struct ferry__wal_opts opts = {.dir = wal_dir()};

		ftest_assert_errno(ferry__wal_open(&opts, NULL, NULL, &w), -EIO);
	}
}

/* The event fd wakes a poller when a group is durable; process() runs the callback. */
FTEST(event_fd_drives_completions)
{
	struct seen s;
	struct ferry__wal *w = open_wal(&s);
	struct pollfd pfd = {ferry__wal_event_fd(w), POLLIN, 0};

	append(w, 1);
	append(w, 2);
	ftest_assert_ok(ferry__wal_submit(w));
	while (ferry__wal_durable_lsn(w) < 2) {
		ftest_assert_int_eq(poll(&pfd, 1, 10000), 1);
		ftest_assert_ok(ferry__wal_process(w));
	}
	ftest_assert_uint_eq(s.durable, 2);
	ferry__wal_close(w);
}

/* A writer killed mid-stream: every record it saw durable is replayed, in order, intact. */
FTEST(crashed_writer_loses_nothing_durable)
{
	int status;
	pid_t pid;

	wal_dir(); /* make the test directory before the child needs it */
	pid = fork();

	if (pid == 0) {
		struct seen s;
		struct ferry__wal *w = open_wal(&s);

		for (uint64_t lsn = 1; lsn <= 200; lsn++)
			append(w, lsn);
		if (ferry__wal_wait(w) != 0)
			_exit(2);
		for (uint64_t lsn = 201; lsn <= 400; lsn++) {
			append(w, lsn);
			if (lsn % 10 == 0)
				ferry__wal_submit(w);
		}
		_exit(0); /* no close: as if killed */
	}
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_int_eq(WEXITSTATUS(status), 0);
	{
		struct seen s;
		struct ferry__wal *w = open_wal(&s);

		ftest_log("%d of 400 records survived", s.n);
		ftest_assert_int_ge(s.n, 200);
		for (int i = 0; i < s.n; i++)
			ftest_assert_uint_eq(s.lsns[i], (uint64_t)i + 1);
		append(w, (uint64_t)s.n + 1);
		ferry__wal_close(w);
	}
}

/* Records 1..@count in a fresh log; returns where the log ends in its segment (the file goes
 * on with zero fill). */
static off_t write_log(uint64_t count, bool one_group)
{
	struct ferry__wal_stats st;
	struct seen s;
	struct ferry__wal *w = open_wal(&s);

	for (uint64_t lsn = 1; lsn <= count; lsn++) {
		append(w, lsn);
		if (!one_group)
			ftest_assert_ok(ferry__wal_wait(w));
	}
	ftest_assert_ok(ferry__wal_wait(w));
	ferry__wal_get_stats(w, &st);
	ferry__wal_close(w);
	return (off_t)(24 + st.bytes_written);
}

FTEST(torn_tail_is_truncated)
{
	struct ferry__wal_stats st;
	struct seen s;
	struct ferry__wal *w;
	off_t size;

	size = write_log(10, false);
	ftest_assert_int_eq(truncate(segment_path(1), size - 5), 0); /* cut the last record */
	w = open_wal(&s);
	ferry__wal_get_stats(w, &st);
	ftest_assert_int_eq(s.n, 9);
	ftest_assert_uint_gt(st.truncated_bytes, 0);
	ftest_assert_int_lt(file_size(segment_path(1)), size - 5);
	append(w, 10);
	ferry__wal_close(w);
	assert_replays(0, 10);
	/* Garbage after the last record (a write that never completed). */
	damage(segment_path(11), file_size(segment_path(11)), "\x07garbage-garbage-garbage", 24);
	assert_replays(0, 10);
}

FTEST(flipped_byte_in_the_last_record)
{
	off_t size;

	size = write_log(10, false);
	damage(segment_path(1), size - 3, "\xff", 1);
	assert_replays(0, 9);
}

/* Damage followed by an intact later group is corruption, not a torn write: refuse to start. */
FTEST(damage_in_the_middle_is_corruption)
{
	struct ferry__wal_opts opts = {.dir = wal_dir()};
	struct ferry__wal *w;

	write_log(10, false); /* one group per record */
	damage(segment_path(1), 24 + 30, "\xff\xff", 2);
	ftest_assert_errno(ferry__wal_open(&opts, NULL, NULL, &w), -EIO);
}

/* Damage inside the last group, even with intact frames of that group after it, is what a torn
 * write looks like (sectors persist in any order): truncated, not an error. */
FTEST(damage_inside_the_last_group_is_a_torn_write)
{
	write_log(10, true);					     /* one group */
	damage(segment_path(1), 24 + (20 + 38) + 30, "\xff\xff", 2); /* inside record 2 */
	assert_replays(0, 1);
}

static void snapshot(struct ferry__wal *w, int records, uint64_t want_lsn)
{
	uint64_t lsn;

	ftest_assert_ok(ferry__wal_snapshot_start(w, &lsn));
	ftest_assert_uint_eq(lsn, want_lsn);
	ftest_assert_errno(ferry__wal_snapshot_start(w, &lsn), -EBUSY);
	for (uint64_t i = 0; i < (uint64_t)records; i++) {
		struct ferry__gcs_buf *buf;
		void *p;

		ftest_assert_ok(ferry__wal_snapshot_begin(w, &buf));
		p = ferry__gcs_buf_grow(buf, 8);
		ftest_assert_ptr_notnull(p);
		memcpy(p, &i, 8);
		ftest_assert_ok(ferry__wal_snapshot_commit(w));
	}
	ftest_assert_ok(ferry__wal_snapshot_write(w));
	ftest_assert_true(ferry__wal_snapshot_busy(w));
}

FTEST(snapshot_truncates_the_log)
{
	struct ferry__wal_stats st;
	struct seen s;
	struct ferry__wal *w = open_wal(&s);

	for (uint64_t lsn = 1; lsn <= 100; lsn++)
		append(w, lsn);
	snapshot(w, 3, 100);
	for (uint64_t lsn = 101; lsn <= 150; lsn++)
		append(w, lsn);
	ftest_assert_ok(ferry__wal_wait(w));
	ftest_assert_false(ferry__wal_snapshot_busy(w));
	ferry__wal_get_stats(w, &st);
	ftest_assert_uint_eq(st.snapshots, 1);
	ftest_assert_uint_eq(st.segments_deleted, 1);
	ftest_assert_int_eq(count_files("wal-"), 1);
	ftest_assert_int_eq(count_files("snap-"), 1);
	ferry__wal_close(w);

	w = open_wal(&s);
	ftest_assert_int_eq(s.snapshot_records, 3);
	ftest_assert_uint_eq(s.snapshot_lsn, 100);
	ftest_assert_int_eq(s.n, 50);
	ftest_assert_uint_eq(s.lsns[0], 101);
	/* A second snapshot replaces the first. */
	snapshot(w, 2, 150);
	ftest_assert_ok(ferry__wal_wait(w));
	ferry__wal_close(w);
	ftest_assert_int_eq(count_files("snap-"), 1);
	w = open_wal(&s);
	ftest_assert_int_eq(s.snapshot_records, 2);
	ftest_assert_int_eq(s.n, 0);
	ftest_assert_uint_eq(ferry__wal_last_lsn(w), 150);
	ferry__wal_close(w);
}

static void copy_file(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ssize_t n;

	ftest_assert_true(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ftest_assert_int_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
}

/* What crashes leave behind: a temp snapshot never renamed, segments the new snapshot made
 * obsolete but not yet deleted. Both are harmless. */
FTEST(crash_leftovers_are_harmless)
{
	char saved[256], tmp[256];
	struct seen s;
	struct ferry__wal *w = open_wal(&s);

	for (uint64_t lsn = 1; lsn <= 20; lsn++)
		append(w, lsn);
	ftest_assert_ok(ferry__wal_wait(w));
	snprintf(saved, sizeof(saved), "%s/../saved.log", wal_dir());
	copy_file(segment_path(1), saved);
	snapshot(w, 1, 20);
	ftest_assert_ok(ferry__wal_wait(w));
	append(w, 21);
	ferry__wal_close(w);
	copy_file(saved, segment_path(1)); /* the deletion "did not happen" */
	snprintf(tmp, sizeof(tmp), "%s/snap-%016x.tmp", wal_dir(), 99);
	copy_file(saved, tmp);
	w = open_wal(&s);
	ftest_assert_int_eq(s.snapshot_records, 1);
	ftest_assert_int_eq(s.n, 1);
	ftest_assert_uint_eq(s.lsns[0], 21);
	ferry__wal_close(w);
	ftest_assert_int_eq(access(tmp, F_OK), -1);
}

static void clear_dir(void)
{
	DIR *d = opendir(wal_dir());
	struct dirent *de;
	char path[512];

	ftest_assert_ptr_notnull(d);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", wal_dir(), de->d_name);
		ftest_assert_int_eq(unlink(path), 0);
	}
	closedir(d);
}

FTEST(gap_or_bad_snapshot_is_corruption)
{
	struct ferry__wal_opts opts = {.dir = wal_dir()};
	struct ferry__wal *w;
	struct seen s;
	char path[256];

	w = open_wal(&s);
	for (uint64_t lsn = 1; lsn <= 5; lsn++)
		append(w, lsn);
	ferry__wal_close(w);
	w = open_wal(&s);
	append(w, 6);
	ferry__wal_close(w);
	ftest_assert_int_eq(unlink(segment_path(1)), 0); /* records 1..5 gone */
	ftest_assert_errno(ferry__wal_open(&opts, NULL, NULL, &w), -EIO);

	clear_dir();
	w = open_wal(&s);
	append(w, 1);
	snapshot(w, 4, 1);
	ftest_assert_ok(ferry__wal_wait(w));
	ferry__wal_close(w);
	snprintf(path, sizeof(path), "%s/snap-%016x.snap", wal_dir(), 1);
	damage(path, file_size(path) - 2, "\xee", 1);
	ftest_assert_errno(ferry__wal_open(&opts, NULL, NULL, &w), -EIO);
	damage(path, 0, "X", 1); /* bad header */
	ftest_assert_errno(ferry__wal_open(&opts, NULL, NULL, &w), -EIO);
}

/* A segment or snapshot of another format version (1: the first release's hand-written GCS
 * records) is refused with -EPROTONOSUPPORT, and left as it was: not truncated, no segment
 * added. */
FTEST(older_format_version_is_refused)
{
	struct ferry__wal_opts opts = {.dir = wal_dir()};
	struct ferry__wal *w;
	struct seen s;
	char path[256];
	off_t size;

	w = open_wal(&s);
	for (uint64_t lsn = 1; lsn <= 5; lsn++)
		append(w, lsn);
	ferry__wal_close(w);
	size = file_size(segment_path(1));
	damage(segment_path(1), 8, "\x01\0\0\0", 4);
	ftest_assert_errno(ferry__wal_open(&opts, NULL, NULL, &w), -EPROTONOSUPPORT);
	ftest_assert_int_eq(file_size(segment_path(1)), size);
	ftest_assert_int_eq(count_files("wal-"), 1);
	damage(segment_path(1), 8, "\x02\0\0\0", 4); /* the current version */
	assert_replays(0, 5);

	clear_dir();
	w = open_wal(&s);
	append(w, 1);
	snapshot(w, 2, 1);
	ftest_assert_ok(ferry__wal_wait(w));
	ferry__wal_close(w);
	snprintf(path, sizeof(path), "%s/snap-%016x.snap", wal_dir(), 1);
	damage(path, 8, "\x01\0\0\0", 4);
	ftest_assert_errno(ferry__wal_open(&opts, NULL, NULL, &w), -EPROTONOSUPPORT);
	ftest_assert_int_eq(count_files("snap-"), 1);
}

/* The disk refuses a write (here: the file size limit): the error is fatal, reported once to
 * the durable callback and by every later call; nothing leaks. */
FTEST(write_failure_is_fatal)
{
	struct rlimit lim = {64 * 1024, RLIM_INFINITY};
	struct ferry__gcs_buf *buf;
	struct seen s;
	struct ferry__wal *w = open_wal(&s);
	uint64_t lsn = 1;
	int ret = 0;

	signal(SIGXFSZ, SIG_IGN);
	ftest_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	for (; lsn <= 2000 && ret == 0; lsn++) {
		append(w, lsn);
		if (lsn % 50 == 0)
			ret = ferry__wal_wait(w);
	}
	ftest_assert_errno(ret, -EFBIG);
	ftest_assert_errno(s.error, -EFBIG);
	ftest_assert_uint_lt(ferry__wal_durable_lsn(w), lsn - 1);
	ftest_assert_errno(ferry__wal_begin(w, &buf), -EFBIG);
	ftest_assert_errno(ferry__wal_submit(w), -EFBIG);
	ferry__wal_close(w);
}

FTEST(limits)
{
	struct ferry__wal_opts opts = {
		.dir = wal_dir(), .max_record_bytes = 100, .max_buffered_bytes = 1000};
	static const uint8_t big[200];
	struct ferry__wal *w;
	uint64_t lsn;
	int ret = 0, n = 0;

	ftest_assert_ok(ferry__wal_open(&opts, NULL, NULL, &w));
	ftest_assert_errno(ferry__wal_append(w, big, 101, &lsn), -E2BIG);
	while ((ret = ferry__wal_append(w, big, 100, &lsn)) == 0)
		n++;
	ftest_assert_errno(ret, -ENOBUFS);
	ftest_assert_int_eq(n, 9); /* 9 x 120 bytes reach the 1000-byte bound */
	ftest_assert_ok(ferry__wal_wait(w));
	ftest_assert_ok(ferry__wal_append(w, big, 100, &lsn));
	ftest_assert_uint_eq(lsn, 10);
	ferry__wal_close(w);
	opts.dir = NULL;
	ftest_assert_errno(ferry__wal_open(&opts, NULL, NULL, &w), -EINVAL);
}

/* Open (with replay of a snapshot and a log) and appends under every allocation failure. */
FTEST(allocation_failures)
{
	struct seen s;
	struct ferry__wal *w = open_wal(&s);
	struct ferry__wal_opts opts = {0};
	struct ferry__gcs_buf *buf;
	int ret, failures = 0;

	for (uint64_t lsn = 1; lsn <= 10; lsn++)
		append(w, lsn);
	snapshot(w, 2, 10);
	for (uint64_t lsn = 11; lsn <= 20; lsn++)
		append(w, lsn);
	ferry__wal_close(w);
	opts.dir = wal_dir();
	for (long n = 0;; n++) {
		memset(&s, 0, sizeof(s));
		ferry__alloc_fail_after(n);
		ret = ferry__wal_open(&opts, on_replay, &s, &w);
		ferry__alloc_fail_after(-1);
		if (ret == 0)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		failures++;
	}
	ftest_assert_int_ge(failures, 3);
	ftest_assert_int_eq(s.n, 10);
	ferry__alloc_fail_after(0);
	ftest_assert_errno(ferry__wal_begin(w, &buf), -ENOMEM);
	ferry__alloc_fail_after(0);
	ftest_assert_errno(ferry__wal_snapshot_start(w, &(uint64_t){0}), -ENOMEM);
	ferry__alloc_fail_after(-1);
	append(w, 21);
	ferry__wal_close(w);
	assert_replays(10, 21);
}

/* A cancelled record leaves an empty group; a snapshot then rotates past it. Later records must
 * still be written (the empty group must not block the queue). */
FTEST(cancelled_record_before_a_rotation)
{
	struct ferry__gcs_buf *buf;
	struct seen s;
	struct ferry__wal *w = open_wal(&s);

	ftest_assert_ok(ferry__wal_begin(w, &buf));
	ftest_assert_ptr_notnull(ferry__gcs_buf_grow(buf, 10));
	ferry__wal_cancel(w);
	snapshot(w, 1, 0);
	append(w, 1);
	ftest_assert_ok(ferry__wal_wait(w));
	ftest_assert_uint_eq(ferry__wal_durable_lsn(w), 1);
	ferry__wal_close(w);
	assert_replays(0, 1);
}
