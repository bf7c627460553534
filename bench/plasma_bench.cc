// SPDX-License-Identifier: Apache-2.0
// The object store: put (create + write + seal) and get + release latency (p50/p99) and
// throughput from 8 B to 1 GiB, with one client and with several threads each holding its own
// client, and spill / restore throughput. The store runs in a child process, as ferry-plasma
// would, so every figure crosses a process boundary the way an application's does. Read them
// beside BM_limits_* (memcpy into prefaulted shared memory, a Unix-socket round trip, the disk's
// sequential write rate): bench/compare plasma prints the ratios.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ferry/plasma.h>

#include "bench_util.h"

extern "C" {
#include "plasma/server.h"
}

namespace
{

constexpr uint64_t MiB = 1ull << 20;
constexpr int BATCH = 512; // puts between two (untimed) batch deletes

// A store in a child process, stopped when the benchmark binary exits.
class ChildStore
{
      public:
	ChildStore(const char *name, uint64_t memory, bool spill)
	{
		const char *dir =
			getenv("FERRY_BENCH_DIR") ? getenv("FERRY_BENCH_DIR") : "/var/tmp";

		path_ = std::string("/tmp/ferry-bench-") + name + "-" + std::to_string(getpid()) +
			".sock";
		spill_dir_ = std::string(dir) + "/ferry-bench-spill";
		memory_ = memory;
		spill_ = spill;
	}
	~ChildStore()
	{
		if (pid_ > 0) {
			kill(pid_, SIGTERM);
			waitpid(pid_, nullptr, 0);
		}
	}
	const char *path()
	{
		if (pid_ < 0 && !start())
			return nullptr;
		return path_.c_str();
	}

      private:
	bool start()
	{
		int ready[2];
		char b = 0;

		if (pipe(ready) < 0)
			return false;
		pid_ = fork();
		if (pid_ == 0)
			serve(ready[1]);
		close(ready[1]);
		bool ok = pid_ > 0 && read(ready[0], &b, 1) == 1;
		close(ready[0]);
		return ok;
	}
	[[noreturn]] void serve(int ready)
	{
		struct ferry__plasma_server_opts o = {};
		struct ferry__plasma_server *srv;
		sigset_t set;
		int sig;

		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		pthread_sigmask(SIG_BLOCK, &set, nullptr);
		o.socket_path = path_.c_str();
		o.memory_bytes = memory_;
		o.spill_dir = spill_ ? spill_dir_.c_str() : nullptr;
		o.spill_threshold_pct = 100; // spill only when asked or full: the bench decides
		o.max_objects = 1u << 18;
		if (ferry__plasma_server_start_new(&o, &srv) < 0)
			_exit(1);
		if (write(ready, &b_, 1) != 1)
			_exit(1);
		sigwait(&set, &sig);
		ferry__plasma_server_destroy(srv);
		_exit(0);
	}

	std::string path_, spill_dir_;
	uint64_t memory_ = 0;
	bool spill_ = false;
	pid_t pid_ = -1;
	char b_ = 0;
};

ChildStore &main_store()
{
	static ChildStore store("main", 2048 * MiB, false);
	return store;
}

ChildStore &spill_store()
{
	static ChildStore store("spill", 512 * MiB, true);
	return store;
}

ferry_plasma_client *connect(benchmark::State &state, ChildStore &store)
{
	ferry_plasma_connect_opts o = {};
	ferry_plasma_client *c = nullptr;
	const char *path = store.path();

	o.name = "bench";
	o.flags = FERRY_PLASMA_CONNECT_POPULATE; // no page faults inside the timed loops
	if (!path || ferry_plasma_client_connect(path, &o, &c) < 0) {
		state.SkipWithError("cannot start or reach the store");
		return nullptr;
	}
	return c;
}

ferry_object_id make_id(uint64_t thread, uint64_t n)
{
	ferry_object_id id;

	memset(id.bytes, 0x42, sizeof(id.bytes));
	memcpy(id.bytes, &n, sizeof(n));
	memcpy(id.bytes + 8, &thread, sizeof(thread));
	return id;
}

// put: create + memcpy + seal, timed per operation; deletes in batches, untimed.
void BM_plasma_put(benchmark::State &state)
{
	const uint64_t size = (uint64_t)state.range(0);
	ferry_plasma_client *c = connect(state, main_store());
	std::vector<char> src(size ? size : 1, 0x5a);
	std::vector<ferry_object_id> batch;
	ferry_bench::Latency lat;
	uint64_t n = 0;

	if (!c)
		return;
	// The memcpy limit writes its destination once before timing; a put of a large object gets
	// the same warm-up, untimed, and reports it apart. Some hypervisors (this project's VMs)
	// charge a process's first write to each page of a shared mapping ~10 us even when the
	// store pre-faulted it, so a first pass over the arena runs ~10x slower than later ones.
	if (size >= 64 * MiB) {
		ferry_object_id id = make_id((uint64_t)state.thread_index(), ~0ull);
		void *buf;
		uint64_t t0 = ferry_bench::now_ns();

		if (ferry_plasma_client_create(c, &id, size, nullptr, 0, &buf) == 0) {
			memcpy(buf, src.data(), size);
			ferry_plasma_client_seal(c, &id);
			state.counters["first_GBps"] =
				(double)size / (double)(ferry_bench::now_ns() - t0);
			ferry_plasma_client_delete(c, &id, 1, nullptr);
		}
	}
	batch.reserve(BATCH);
	for (auto _ : state) {
		ferry_object_id id = make_id((uint64_t)state.thread_index(), n++);
		void *buf;
		uint64_t t0 = ferry_bench::now_ns();

		if (ferry_plasma_client_create(c, &id, size, nullptr, 0, &buf) < 0) {
			state.SkipWithError("create failed");
			break;
		}
		memcpy(buf, src.data(), size);
		ferry_plasma_client_seal(c, &id);
		lat.add(ferry_bench::now_ns() - t0);
		batch.push_back(id);
		if (batch.size() == BATCH || batch.size() * size >= 64 * MiB) {
			state.PauseTiming();
			ferry_plasma_client_delete(c, batch.data(), batch.size(), nullptr);
			batch.clear();
			state.ResumeTiming();
		}
	}
	ferry_plasma_client_delete(c, batch.data(), batch.size(), nullptr);
	state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)size);
	lat.publish(state);
	ferry_plasma_client_disconnect(c);
}
BENCHMARK(BM_plasma_put)
	->Arg(8)
	->Arg(4096)
	->Arg(64 << 10)
	->Arg(1 << 20)
	->Arg(64 << 20)
	->Arg(1 << 30)
	->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_plasma_put)->Arg(8)->Arg(1 << 20)->Threads(2)->Unit(benchmark::kMicrosecond);

// get + release of a sealed object: shared memory only, whatever the size.
void BM_plasma_get(benchmark::State &state)
{
	const uint64_t size = (uint64_t)state.range(0);
	ferry_plasma_client *c = connect(state, main_store());
	ferry_object_id id = make_id(1000 + (uint64_t)state.thread_index(), size);
	ferry_bench::Latency lat;
	void *buf;

	if (!c)
		return;
	if (ferry_plasma_client_create(c, &id, size, nullptr, 0, &buf) < 0) {
		state.SkipWithError("create failed");
		ferry_plasma_client_disconnect(c);
		return;
	}
	memset(buf, 1, size);
	ferry_plasma_client_seal(c, &id);
	for (auto _ : state) {
		ferry_plasma_view v;
		uint64_t t0 = ferry_bench::now_ns();

		if (ferry_plasma_client_get(c, &id, 1, 0, &v) < 0) {
			state.SkipWithError("get failed");
			break;
		}
		benchmark::DoNotOptimize(v.data);
		ferry_plasma_client_release(c, &v);
		lat.add(ferry_bench::now_ns() - t0);
	}
	ferry_plasma_client_delete(c, &id, 1, nullptr);
	state.SetItemsProcessed((int64_t)state.iterations());
	lat.publish(state);
	ferry_plasma_client_disconnect(c);
}
BENCHMARK(BM_plasma_get)
	->Arg(8)
	->Arg(4096)
	->Arg(1 << 20)
	->Arg(1 << 30)
	->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_plasma_get)->Arg(8)->Threads(2)->Unit(benchmark::kMicrosecond);

// Spill: fill with @total bytes of 4 MiB primaries (untimed), then evict them all to disk
// (timed: gathered io_uring writes and an fdatasync). Restore: get each back (timed).
void spill_round(benchmark::State &state, bool restore)
{
	const uint64_t total = (uint64_t)state.range(0), each = 4 * MiB, count = total / each;
	ferry_plasma_client *c = connect(state, spill_store());
	std::vector<ferry_object_id> ids;
	uint64_t round = 0, moved = 0;

	if (!c)
		return;
	for (auto _ : state) {
		ids.clear();
		for (uint64_t n = 0; n < count; n++) {
			ferry_object_id id = make_id(round, n);
			void *buf;

			if (ferry_plasma_client_create(c, &id, each, nullptr, 0, &buf) < 0) {
				state.SkipWithError("create failed");
				break;
			}
			memset(buf, (int)n, each);
			ferry_plasma_client_seal(c, &id);
			ids.push_back(id);
		}
		round++;
		uint64_t t0 = ferry_bench::now_ns(), freed = 0;

		if (ferry_plasma_client_evict(c, total, &freed) < 0 || freed < total) {
			state.SkipWithError("spill failed");
			break;
		}
		if (restore) {
			t0 = ferry_bench::now_ns();
			for (auto &id : ids) {
				ferry_plasma_view v;

				if (ferry_plasma_client_get(c, &id, 1, 0, &v) < 0) {
					state.SkipWithError("restore failed");
					break;
				}
				ferry_plasma_client_release(c, &v);
			}
		}
		state.SetIterationTime((double)(ferry_bench::now_ns() - t0) / 1e9);
		moved += total;
		ferry_plasma_client_delete(c, ids.data(), ids.size(), nullptr);
	}
	state.SetBytesProcessed((int64_t)moved);
	ferry_plasma_client_disconnect(c);
}

void BM_plasma_spill(benchmark::State &state)
{
	spill_round(state, false);
}
BENCHMARK(BM_plasma_spill)->Arg(256 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_plasma_restore(benchmark::State &state)
{
	spill_round(state, true);
}
BENCHMARK(BM_plasma_restore)->Arg(256 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);

} // namespace
