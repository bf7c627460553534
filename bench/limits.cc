// SPDX-License-Identifier: Apache-2.0
// Physical limits measured in the same run as Ferry's figures, so every result is a ratio
// against this machine today: memcpy into prefaulted shared memory, a Unix-socket round trip
// between two processes, and the disk's sequential write rate.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

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

// Sequential write of 1 MiB blocks to a file in FERRY_BENCH_DIR (default /var/tmp), synced at
// the end: the ceiling for spilling.
void BM_limits_disk_write(benchmark::State &state)
{
	const size_t block = 1 << 20, total = (size_t)state.range(0);
	const char *dir = getenv("FERRY_BENCH_DIR") ? getenv("FERRY_BENCH_DIR") : "/var/tmp";
	std::string path = std::string(dir) + "/ferry-bench-disk-XXXXXX";
	char *buf = (char *)aligned_alloc(4096, block);
	int fd = mkstemp(path.data());
	if (fd < 0 || !buf) {
		state.SkipWithError("cannot create a file in FERRY_BENCH_DIR");
		free(buf);
		return;
	}
	unlink(path.c_str());
	memset(buf, 0xa5, block);
	for (auto _ : state) {
		lseek(fd, 0, SEEK_SET);
		for (size_t done = 0; done < total; done += block)
			if (write(fd, buf, block) != (ssize_t)block) {
				state.SkipWithError("write failed (disk full?)");
				break;
			}
		fdatasync(fd);
	}
	state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)total);
	close(fd);
	free(buf);
}
BENCHMARK(BM_limits_disk_write)->Arg(256 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace
