// SPDX-License-Identifier: Apache-2.0
// Physical limits measured in the same run as Ferry's figures, so every result is a ratio
// against this machine today: memcpy into prefaulted shared memory, a Unix-socket round trip
// between two processes, and the disk: written the way spill writes, and read back sequentially with the page
// cache bypassed.
#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include <ferry/common.h>

#include "bench_util.h"

namespace
{

// memcpy from private memory into a prefaulted shared (memfd) mapping: the best a put can do.
void BM_limits_memcpy(benchmark::State &state)
{
	size_t size = (size_t)state.range(0);
	int fd = memfd_create("ferry-bench-memcpy", 0);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
		state.SkipWithError("memfd_create/ftruncate failed");
		return;
	}
	void *dst = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	char *src = (char *)malloc(size);
	if (dst == MAP_FAILED || !src) {
		state.SkipWithError("mmap/malloc failed");
		close(fd);
		free(src);
		return;
	}
	memset(src, 0x5a, size);
	memset(dst, 0, size);
	for (auto _ : state) {
		memcpy(dst, src, size);
		benchmark::ClobberMemory();
	}
	state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)size);
	munmap(dst, size);
	free(src);
	close(fd);
}
BENCHMARK(BM_limits_memcpy)
	->Arg(8)
	->Arg(4096)
	->Arg(1 << 20)
	->Arg(64 << 20)
	->Arg(1 << 30)
	->Unit(benchmark::kMicrosecond);

// A 64-byte ping-pong over a Unix stream socket between two processes (the store is a separate
// process, so any request that needs the socket pays at least this).
void BM_limits_uds_rtt(benchmark::State &state)
{
	int sv[2];
	char buf[64] = {0};
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
		state.SkipWithError("socketpair failed");
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		while (read(sv[1], buf, sizeof(buf)) == (ssize_t)sizeof(buf))
			if (write(sv[1], buf, sizeof(buf)) != (ssize_t)sizeof(buf))
				break;
		_exit(0);
	}
	close(sv[1]);
	ferry_bench::Latency lat;
	for (auto _ : state) {
		uint64_t t0 = ferry_bench::now_ns();
		if (write(sv[0], buf, sizeof(buf)) != (ssize_t)sizeof(buf) ||
		    read(sv[0], buf, sizeof(buf)) != (ssize_t)sizeof(buf)) {
			state.SkipWithError("echo peer failed");
			break;
		}
		lat.add(ferry_bench::now_ns() - t0);
	}
	close(sv[0]);
	waitpid(pid, nullptr, 0);
	lat.publish(state);
}
BENCHMARK(BM_limits_uds_rtt)->Unit(benchmark::kMicrosecond);

// The disk the way spill uses it (plasma/spill.c), on the spill directory's file system
// (FERRY_BENCH_DIR, default /var/tmp): each round writes a new anonymous file (O_TMPFILE) of
// @total bytes (reserved first with fallocate, as spill reserves a batch) in @chunk-byte
// writes, @depth of them in flight on an io_uring, O_DIRECT, then one fdatasync. @depth 0 is dd's way instead (buffered write() of @chunk, then fdatasync): the
// figure the issue quoted, printed beside spill for scale. The O_DIRECT row is the write limit.
constexpr size_t HUGE = 2 << 20;

std::string disk_dir()
{
	const char *dir = getenv("FERRY_BENCH_DIR");

	return dir ? dir : "/var/tmp";
}

// @fd's [0, @total) in @chunk pieces, @depth in flight from @bufs (depth x chunk bytes).
// Returns 0 or -errno.
int disk_ring_io(struct io_uring *ring, int fd, bool write, char *bufs, size_t chunk, int depth,
		 size_t total)
{
	size_t next = 0, done = 0;
	int inflight = 0, slot = 0, err = 0;

	while (done < total && !err) {
		while (next < total && inflight < depth) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			char *buf = bufs + (size_t)(slot++ % depth) * chunk;
			size_t len = std::min(chunk, total - next);

			if (write)
				io_uring_prep_write(sqe, fd, buf, (unsigned)len, next);
			else
				io_uring_prep_read(sqe, fd, buf, (unsigned)len, next);
			io_uring_sqe_set_data64(sqe, len);
			next += len;
			inflight++;
		}
		struct io_uring_cqe *cqe;
		int r = io_uring_submit_and_wait(ring, 1);

		if (r < 0 && r != -EINTR)
			return r;
		while (io_uring_peek_cqe(ring, &cqe) == 0) {
			if (cqe->res < 0 || (uint64_t)cqe->res != cqe->user_data)
				err = cqe->res < 0 ? cqe->res : -EIO;
			done += cqe->user_data;
			inflight--;
			io_uring_cqe_seen(ring, cqe);
		}
	}
	while (inflight > 0) { // reap what an error left in flight
		struct io_uring_cqe *cqe;

		if (io_uring_wait_cqe(ring, &cqe) < 0)
			break;
		io_uring_cqe_seen(ring, cqe);
		inflight--;
	}
	return err;
}

class DiskFile
{
      public:
	// @huge: buffers in transparent huge pages (where the kernel gives them), else 4 KiB
	// pages, as the store's arena has them when shmem gets no huge pages (Debian's default).
	// Each request pins its pages: the page size changes what the disk is asked for.
	DiskFile(size_t chunk, int depth, bool huge) : chunk_(chunk), depth_(std::max(depth, 1))
	{
		size_t bytes = (chunk_ * (size_t)depth_ + HUGE - 1) / HUGE * HUGE;
		bufs_ = (char *)aligned_alloc(HUGE, bytes);
		if (bufs_) {
			madvise(bufs_, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
			memset(bufs_, 0xa5, bytes);
		}
		ok_ = bufs_ && io_uring_queue_init(64, &ring_, 0) == 0;
	}
	~DiskFile()
	{
		if (fd_ >= 0)
			close(fd_);
		if (ok_)
			io_uring_queue_exit(&ring_);
		free(bufs_);
	}
	// A new file, written and synced as spill writes a batch. Returns 0 or -errno.
	int write_new(size_t total, bool direct)
	{
		if (fd_ >= 0)
			close(fd_);
		fd_ = open(disk_dir().c_str(), O_TMPFILE | O_RDWR | (direct ? O_DIRECT : 0), 0600);
		if (fd_ < 0)
			return -errno;
		int r = 0;
		if (direct && fallocate(fd_, 0, 0, (off_t)total) < 0) // as spill reserves a batch
			r = -errno;
		if (direct && !r) {
			r = disk_ring_io(&ring_, fd_, true, bufs_, chunk_, depth_, total);
		} else {
			for (size_t done = 0; done < total && !r; done += chunk_)
				if (::write(fd_, bufs_, chunk_) != (ssize_t)chunk_)
					r = -EIO;
		}
		if (!r && fdatasync(fd_) < 0)
			r = -errno;
		return r;
	}
	// Read the file back sequentially with O_DIRECT (the page cache bypassed). -errno.
	int read_direct(size_t total)
	{
		int fd =
			open(("/proc/self/fd/" + std::to_string(fd_)).c_str(), O_RDONLY | O_DIRECT);

		if (fd < 0)
			return -errno;
		int r = disk_ring_io(&ring_, fd, false, bufs_, chunk_, depth_, total);
		close(fd);
		return r;
	}
	bool ok() const
	{
		return ok_;
	}

      private:
	size_t chunk_;
	int depth_;
	char *bufs_ = nullptr;
	int fd_ = -1;
	bool ok_ = false;
	struct io_uring ring_;
};

void BM_limits_disk_write(benchmark::State &state)
{
	const size_t total = (size_t)state.range(0), chunk = (size_t)state.range(1);
	const int depth = (int)state.range(2);
	DiskFile f(chunk, depth, state.range(3) != 0);

	if (!f.ok()) {
		state.SkipWithError("no buffers or no io_uring");
		return;
	}
	for (auto _ : state) {
		int r = f.write_new(total, depth > 0);

		if (r < 0) {
			state.SkipWithError(("cannot write a file in FERRY_BENCH_DIR: " +
					     std::string(ferry_strerror(-r)))
						    .c_str());
			break;
		}
	}
	state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)total);
}
// Spill's write shape (plasma/spill.c: WRITE_CHUNK x WRITE_DEPTH, O_DIRECT), and dd's way.
BENCHMARK(BM_limits_disk_write)
	->Args({256 << 20, 4 << 20, 4, 0})
	->Args({256 << 20, 4 << 20, 4, 1})
	->Args({256 << 20, 4 << 20, 0, 0})
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

// Sequential O_DIRECT read of a file written as above (written once, untimed; the page cache
// is bypassed, as restore's reads bypass it): the ceiling for restoring.
void BM_limits_disk_read(benchmark::State &state)
{
	const size_t total = (size_t)state.range(0), chunk = (size_t)state.range(1);
	const int depth = (int)state.range(2);
	DiskFile f(chunk, depth, state.range(3) != 0);
	int r = f.ok() ? f.write_new(total, true) : -ENOMEM;

	if (r < 0) {
		state.SkipWithError("cannot write the file to read");
		return;
	}
	for (auto _ : state) {
		r = f.read_direct(total);
		if (r < 0) {
			state.SkipWithError(
				("read failed: " + std::string(ferry_strerror(-r))).c_str());
			break;
		}
	}
	state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)total);
}
// Deeper than a restore of one object is (plasma/spill.c: READ_CHUNK x READ_DEPTH, or the
// read-ahead window), so the ratio is not flattered by the shape.
BENCHMARK(BM_limits_disk_read)
	->Args({256 << 20, 4 << 20, 4, 0})
	->Args({256 << 20, 4 << 20, 4, 1})
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

} // namespace
