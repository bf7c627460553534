// SPDX-License-Identifier: Apache-2.0
// The task runtime's rows of bench/compare runtime (issue 23), named after `ray microbenchmark`'s:
// one driver on the local cluster (ferry_init with no address: a GCS and a node in this process,
// its workers processes) submitting the job library's empty function `noop` (runtime_job.c),
// putting and getting objects. Built as ferry-runtime-bench when meson's runtime_bench option
// is on; the 1_1 actor rows call an actor of the job library's BenchActor class, and the
// compiled graph row chains two of them; multi-client rows arrive with their part of the runtime.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ferry/runtime.h>

#include "bench_util.h"

extern "C" {
#include "common/version.h"
}

namespace
{

// Long enough that a loaded 2-core machine never fails a row; a hang still ends.
constexpr int64_t TIMEOUT_MS = 60000;
// The job library's file, beside this executable in the build tree (bench/meson.build).
constexpr const char *JOB_LIBRARY = "ferry-bench-job.so";

std::string fail_text(const char *what, int err, const char *detail = "")
{
	return std::string(what) + ": " + ferry_strerror(-err) + (*detail ? " (" : "") + detail +
	       (*detail ? ")" : "");
}

// Submits `noop` @n times into @refs. 0, or the first -errno (the refs made so far dropped).
int submit_noops(struct ferry_ref *refs, size_t n)
{
	struct ferry_task_opts opts = {};

	for (size_t i = 0; i < n; i++) {
		int r = ferry_submit("noop", nullptr, 0, &opts, &refs[i]);

		if (r < 0) {
			while (i > 0)
				ferry_ref_drop(&refs[--i]);
			return r;
		}
	}
	return 0;
}

// Gets @ref's value, releases it and drops @ref. 0, or -errno with the reason in @why.
int get_drop(struct ferry_ref *ref, std::string *why)
{
	struct ferry_view view = {};
	int r = ferry_get(ref, TIMEOUT_MS, &view);

	if (r == 0)
		ferry_release(&view);
	else
		*why = fail_text("ferry_get", r, view.error);
	ferry_ref_drop(ref);
	return r;
}

// single_client_tasks_sync: submit one empty task, get its result, again.
void BM_runtime_single_client_tasks_sync(benchmark::State &state)
{
	ferry_bench::Latency lat;
	std::string why;

	for (auto _ : state) {
		uint64_t t0 = ferry_bench::now_ns();
		struct ferry_ref ref;
		int r = submit_noops(&ref, 1);

		if (r < 0) {
			state.SkipWithError(fail_text("ferry_submit", r).c_str());
			break;
		}
		if (get_drop(&ref, &why) < 0) {
			state.SkipWithError(why.c_str());
			break;
		}
		lat.add(ferry_bench::now_ns() - t0);
	}
	state.SetItemsProcessed((int64_t)state.iterations());
	lat.publish(state);
}
BENCHMARK(BM_runtime_single_client_tasks_sync)->Unit(benchmark::kMicrosecond)->UseRealTime();

// single_client_tasks_async: submit @n empty tasks, then get them all (tasks/s).
void BM_runtime_single_client_tasks_async(benchmark::State &state)
{
	const size_t n = (size_t)state.range(0);
	std::vector<struct ferry_ref> refs(n);
	std::string why;

	for (auto _ : state) {
		int r = submit_noops(refs.data(), n);

		if (r < 0) {
			state.SkipWithError(fail_text("ferry_submit", r).c_str());
			break;
		}
		for (size_t i = 0; i < n; i++)
			if (get_drop(&refs[i], &why) < 0 && !r)
				r = -1; // the rest still dropped
		if (r < 0) {
			state.SkipWithError(why.c_str());
			break;
		}
	}
	state.SetItemsProcessed((int64_t)(state.iterations() * n));
}
// 10,000: the N of the Dask peer's async row (bench/peers/dask_tasks.py).
BENCHMARK(BM_runtime_single_client_tasks_async)
	->Arg(10000)
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

// The actor of the 1_1 rows: one Counter-like actor of the job library (runtime_job.c), created
// once for the run (its worker leased for it), its empty method called.
struct ferry_actor *bench_actor;

int make_actor(benchmark::State &state)
{
	int r;

	if (bench_actor)
		return 0;
	r = ferry_actor_create("BenchActor", nullptr, 0, nullptr, &bench_actor);
	if (r < 0)
		state.SkipWithError(fail_text("ferry_actor_create", r).c_str());
	return r;
}

// Calls the actor's `noop` @n times into @refs. 0, or the first -errno (those made dropped).
int call_noops(struct ferry_ref *refs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int r = ferry_actor_call(bench_actor, "noop", nullptr, 0, 1, &refs[i]);

		if (r < 0) {
			while (i > 0)
				ferry_ref_drop(&refs[--i]);
			return r;
		}
	}
	return 0;
}

// 1_1_actor_calls_sync: call the actor's empty method, get its result, again.
void BM_runtime_1_1_actor_calls_sync(benchmark::State &state)
{
	ferry_bench::Latency lat;
	std::string why;

	if (make_actor(state) < 0)
		return;
	for (auto _ : state) {
		uint64_t t0 = ferry_bench::now_ns();
		struct ferry_ref ref;
		int r = call_noops(&ref, 1);

		if (r < 0) {
			state.SkipWithError(fail_text("ferry_actor_call", r).c_str());
			break;
		}
		if (get_drop(&ref, &why) < 0) {
			state.SkipWithError(why.c_str());
			break;
		}
		lat.add(ferry_bench::now_ns() - t0);
	}
	state.SetItemsProcessed((int64_t)state.iterations());
	lat.publish(state);
}
BENCHMARK(BM_runtime_1_1_actor_calls_sync)->Unit(benchmark::kMicrosecond)->UseRealTime();

// 1_1_actor_calls_async: call it @n times, then get them all (calls/s).
void BM_runtime_1_1_actor_calls_async(benchmark::State &state)
{
	const size_t n = (size_t)state.range(0);
	std::vector<struct ferry_ref> refs(n);
	std::string why;

	if (make_actor(state) < 0)
		return;
	for (auto _ : state) {
		int r = call_noops(refs.data(), n);

		if (r < 0) {
			state.SkipWithError(fail_text("ferry_actor_call", r).c_str());
			break;
		}
		for (size_t i = 0; i < n; i++)
			if (get_drop(&refs[i], &why) < 0 && !r)
				r = -1;
		if (r < 0) {
			state.SkipWithError(why.c_str());
			break;
		}
	}
	state.SetItemsProcessed((int64_t)(state.iterations() * n));
}
BENCHMARK(BM_runtime_1_1_actor_calls_async)
	->Arg(10000)
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

// single_client_put_calls: put a small value (calls/s).
void BM_runtime_single_client_put_calls(benchmark::State &state)
{
	uint64_t value = 0;

	for (auto _ : state) {
		struct ferry_ref ref;
		int r = ferry_put(&value, sizeof(value), &ref);

		if (r < 0) {
			state.SkipWithError(fail_text("ferry_put", r).c_str());
			break;
		}
		ferry_ref_drop(&ref);
		value++;
	}
	state.SetItemsProcessed((int64_t)state.iterations());
}
BENCHMARK(BM_runtime_single_client_put_calls)->Unit(benchmark::kMicrosecond)->UseRealTime();

// single_client_get_calls: get (and release) one small object put once (calls/s).
void BM_runtime_single_client_get_calls(benchmark::State &state)
{
	uint64_t value = 42;
	struct ferry_ref ref;
	int r = ferry_put(&value, sizeof(value), &ref);

	if (r < 0) {
		state.SkipWithError(fail_text("ferry_put", r).c_str());
		return;
	}
	for (auto _ : state) {
		struct ferry_view view = {};

		r = ferry_get(&ref, TIMEOUT_MS, &view);
		if (r < 0) {
			state.SkipWithError(fail_text("ferry_get", r, view.error).c_str());
			break;
		}
		ferry_release(&view);
	}
	ferry_ref_drop(&ref);
	state.SetItemsProcessed((int64_t)state.iterations());
}
BENCHMARK(BM_runtime_single_client_get_calls)->Unit(benchmark::kMicrosecond)->UseRealTime();

// single_client_put_gigabytes: put a large buffer (GB/s; Ray's row puts 800 MB).
void BM_runtime_single_client_put_gigabytes(benchmark::State &state)
{
	const size_t size = (size_t)state.range(0);
	std::vector<char> data(size, 0x5a);

	for (auto _ : state) {
		struct ferry_ref ref;
		int r = ferry_put(data.data(), size, &ref);

		if (r < 0) {
			state.SkipWithError(fail_text("ferry_put", r).c_str());
			break;
		}
		ferry_ref_drop(&ref);
	}
	state.SetBytesProcessed((int64_t)(state.iterations() * size));
}
// 100 MiB: one object of this size fits the store main() asks for several times over.
BENCHMARK(BM_runtime_single_client_put_gigabytes)
	->Arg(100 << 20)
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

// single_client_wait_1k_refs: submit 1,000 empty tasks, then wait for one ready ref at a time,
// taking it out of the list each time, until none is left, as Ray's row does (rounds/s).
void BM_runtime_single_client_wait_1k_refs(benchmark::State &state)
{
	constexpr size_t n = 1000;
	std::vector<struct ferry_ref> refs(n);
	std::vector<int> ready(n);

	for (auto _ : state) {
		int r = submit_noops(refs.data(), n);
		size_t left = r < 0 ? 0 : n; // a failed submit dropped its refs

		while (r >= 0 && left > 0) {
			r = ferry_wait(refs.data(), left, 1, TIMEOUT_MS, ready.data());
			if (r == 0)
				r = -ETIMEDOUT;
			for (size_t i = 0; r > 0 && i < left; i++) {
				if (ready[i]) { // the first ready one only: one per call, as Ray's
					ferry_ref_drop(&refs[i]);
					refs[i] = refs[--left];
					break;
				}
			}
		}
		while (left > 0 && r < 0) // what an error left
			ferry_ref_drop(&refs[--left]);
		if (r < 0) {
			state.SkipWithError(fail_text("ferry_submit/ferry_wait", r).c_str());
			break;
		}
	}
	state.SetItemsProcessed((int64_t)state.iterations());
}
BENCHMARK(BM_runtime_single_client_wait_1k_refs)->Unit(benchmark::kMillisecond)->UseRealTime();

// A two-node compiled graph of the 1_1 rows' actor and a second one: a.inc(x), then b.inc of
// its result; the input goes to a's worker, a's result to b's, b's back to the driver.
int make_graph(benchmark::State &state, struct ferry_actor **second, struct ferry_graph **out)
{
	struct ferry_actor_opts o = {};
	struct ferry_graph_arg in = {}, prev = {};
	int r;

	o.num_cpus = 0.5; // beside the 1_1 rows' actor, which keeps its CPU for the run
	in.kind = FERRY_GRAPH_ARG_INPUT;
	prev.kind = FERRY_GRAPH_ARG_NODE;
	r = ferry_actor_create("BenchActor", nullptr, 0, &o, second);
	if (r == 0)
		r = ferry_graph_create(out);
	if (r == 0)
		r = ferry_graph_bind(*out, bench_actor, "BenchActor.inc", &in, 1);
	if (r >= 0)
		r = ferry_graph_bind(*out, *second, "BenchActor.inc", &prev, 1);
	if (r >= 0)
		r = ferry_graph_compile(*out, TIMEOUT_MS);
	if (r < 0)
		state.SkipWithError(fail_text("compile the graph", r).c_str());
	return r;
}

// compiled_graph_call: execute the graph once, get its result, again (p50 beside the sync
// task's: issue 23's target is a graph call no slower than one sync task).
void BM_runtime_compiled_graph_call(benchmark::State &state)
{
	struct ferry_actor *second = nullptr;
	struct ferry_graph *g = nullptr;
	ferry_bench::Latency lat;
	int64_t x = 0;

	if (make_actor(state) < 0 || make_graph(state, &second, &g) < 0) {
		ferry_graph_destroy(g);
		ferry_actor_drop(second);
		return;
	}
	for (auto _ : state) {
		uint64_t t0 = ferry_bench::now_ns(), exec;
		struct ferry_graph_arg in = {};
		struct ferry_graph_result res = {};
		int r;

		in.kind = FERRY_GRAPH_ARG_CONST;
		in.data = &x;
		in.len = sizeof(x);
		r = ferry_graph_execute(g, &in, 1, &exec);
		if (r == 0)
			r = ferry_graph_get(g, exec, TIMEOUT_MS, &res);
		if (r < 0) {
			state.SkipWithError(fail_text("graph execution", r, res.error).c_str());
			break;
		}
		if (res.len != sizeof(x)) {
			ferry_graph_result_release(&res);
			state.SkipWithError("the graph's result is not an int64");
			break;
		}
		memcpy(&x, res.data, sizeof(x)); /* the next execution's input */
		ferry_graph_result_release(&res);
		lat.add(ferry_bench::now_ns() - t0);
	}
	state.SetItemsProcessed((int64_t)state.iterations());
	lat.publish(state);
	ferry_graph_destroy(g);
	ferry_actor_drop(second);
}
BENCHMARK(BM_runtime_compiled_graph_call)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The job library's path: $FERRY_CODE if set (ferry_init reads it), else the file beside this
// executable. Empty when neither can be had.
std::string job_library()
{
	char exe[PATH_MAX];
	ssize_t n;

	if (getenv("FERRY_CODE"))
		return "";
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return "";
	exe[n] = '\0';
	std::string dir(exe);
	return dir.substr(0, dir.rfind('/') + 1) + JOB_LIBRARY;
}

} // namespace

int main(int argc, char **argv)
{
	struct ferry_init_opts opts = {};
	std::string code;
	int r;

	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 2;
	code = job_library();
	opts.code_path = code.empty() ? nullptr : code.c_str();
	opts.memory_bytes = 1ull << 30; // room for put_gigabytes' object while the last is freed
	r = ferry_init(&opts);
	if (r < 0) {
		fprintf(stderr, "ferry-runtime-bench: ferry_init (job library %s): %s\n",
			code.empty() ? "$FERRY_CODE" : code.c_str(), ferry_strerror(-r));
		return 1;
	}
	benchmark::AddCustomContext("ferry_commit", ferry__version_commit());
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	ferry_actor_drop(bench_actor);
	ferry_shutdown();
	return 0;
}
