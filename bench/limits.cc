// SPDX-License-Identifier: Apache-2.0
// Physical limits measured in the same run as Ferry's figures, so every result is a ratio
// against this machine today: memcpy into prefaulted shared memory, a Unix-socket round trip
// and a shared-memory round trip between two processes, and the disk: written the way spill
// writes, and read back sequentially with the page cache bypassed.
#include <fcntl.h>
#include <linux/futex.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <new>
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

// A shared-memory round trip between two processes: each side writes a counter in its own cache
// line of a memfd mapping and waits for the other's, spinning up to SHM_SPIN_NS, then sleeping
// on a futex. That is the wait the runtime's same-host rings use (issue 23: spin briefly, then
// sleep), so its p50 is the floor of a same-host hop that does not go through a socket.
constexpr uint64_t SHM_SPIN_NS = 50000;
constexpr uint32_t SHM_STOP = UINT32_MAX;

// One direction: written by one process, read by the other. Its own cache line, so the two
// directions do not share a line (the ping-pong is of two lines, one each way).
struct alignas(64) ShmLine {
	std::atomic<uint32_t> seq;	// the last value posted; the futex word
	std::atomic<uint32_t> sleeping; // the reader is in (or entering) FUTEX_WAIT
	std::atomic<uint64_t> sleeps;	// how many of the reader's waits ended asleep
};

struct ShmPingPong {
	ShmLine ping; // parent -> child
	ShmLine pong; // child -> parent
};

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex word is 32 bits");

long shm_futex(std::atomic<uint32_t> *word, int op, uint32_t val)
{
	// Not FUTEX_PRIVATE_FLAG: the word is shared between two processes.
	return syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), op, val, nullptr, nullptr, 0);
}

inline void cpu_relax()
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

// Both sides use sequentially consistent accesses: the poster stores seq then loads sleeping,
// the reader stores sleeping then loads seq, so at least one of them sees the other's store
// and a post is never missed (and FUTEX_WAIT rechecks the word itself).
void shm_post(ShmLine &line, uint32_t value)
{
	line.seq.store(value);
	if (line.sleeping.load())
		shm_futex(&line.seq, FUTEX_WAKE, INT_MAX);
}

// Waits until @line's value is no longer @old; returns it.
uint32_t shm_wait(ShmLine &line, uint32_t old)
{
	uint64_t end = 0;
	uint32_t v;

	for (unsigned i = 1;; i++) {
		v = line.seq.load(std::memory_order_acquire);
		if (v != old)
			return v;
		cpu_relax();
		if (i % 64 == 0) { // the clock only now and then: it costs as much as a wake
			uint64_t now = ferry_bench::now_ns();

			if (!end)
				end = now + SHM_SPIN_NS;
			else if (now >= end)
				break;
		}
	}
	line.sleeping.store(1);
	line.sleeps.fetch_add(1, std::memory_order_relaxed);
	while ((v = line.seq.load()) == old)
		shm_futex(&line.seq, FUTEX_WAIT, old); // EAGAIN, EINTR, a wake: look again
	line.sleeping.store(0);
	return v;
}

void BM_limits_shm_rtt(benchmark::State &state)
{
	int fd = memfd_create("ferry-bench-shm-rtt", 0);

	if (fd < 0 || ftruncate(fd, sizeof(ShmPingPong)) < 0) {
		state.SkipWithError("memfd_create/ftruncate failed");
		if (fd >= 0)
			close(fd);
		return;
	}
	void *mem = mmap(nullptr, sizeof(ShmPingPong), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (mem == MAP_FAILED) {
		state.SkipWithError("mmap failed");
		return;
	}
	auto *pp = new (mem) ShmPingPong();
	pid_t pid = fork();
	if (pid == 0) {
		// The echo: each ping's value back as a pong, until the stop value. Killed with
		// the parent, so never left asleep on the futex.
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		uint32_t seen = 0;
		while ((seen = shm_wait(pp->ping, seen)) != SHM_STOP)
			shm_post(pp->pong, seen);
		_exit(0);
	}
	if (pid < 0) {
		state.SkipWithError("fork failed");
		munmap(mem, sizeof(ShmPingPong));
		return;
	}
	ferry_bench::Latency lat;
	uint32_t seq = 0;
	for (auto _ : state) {
		uint64_t t0 = ferry_bench::now_ns();
		uint32_t prev = seq;

		seq = seq % (SHM_STOP - 1) + 1; // 1 .. SHM_STOP - 1, never the stop value
		shm_post(pp->ping, seq);
		shm_wait(pp->pong, prev);
		lat.add(ferry_bench::now_ns() - t0);
	}
	shm_post(pp->ping, SHM_STOP);
	waitpid(pid, nullptr, 0);
	// How often a side outwaited the spin: near 0 on an idle machine with a core per side.
	state.counters["sleeps_pct"] =
		100.0 * (double)(pp->ping.sleeps.load() + pp->pong.sleeps.load()) /
		(2.0 * (double)std::max<benchmark::IterationCount>(state.iterations(), 1));
	lat.publish(state);
	munmap(mem, sizeof(ShmPingPong));
}
BENCHMARK(BM_limits_shm_rtt)->Unit(benchmark::kMicrosecond);

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
