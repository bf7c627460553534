// SPDX-License-Identifier: Apache-2.0
// The task runtime's rows of bench/compare runtime (issue 23), named after `ray microbenchmark`'s:
// one driver on the local cluster (ferry_init with no address: a GCS and a node in this process,
// its workers processes) submitting the job library's empty function `noop` (runtime_job.c),
// putting and getting objects. Built as ferry-runtime-bench when meson's runtime_bench option
// is on; the actor rows call actors of the job library's BenchActor class, and the compiled
// graph row chains two of them. The multi-client rows' clients are threads of this one driver
// (ferry_submit and ferry_actor_call are thread-safe): on a 2-core machine client processes
// would take the CPUs the workers run on, and the row would time the OS's scheduler, not what
// Ferry adds (one owner's lock and loop shared by every caller). The last row measures the owner's memory per pending task.
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <ferry/gcs.h>
#include <ferry/runtime.h>

#include "bench_util.h"

extern "C" {
#include "common/version.h"
#include "runtime/rt.h"
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

// placement_group_create/removal: create a group of one 1-CPU bundle, wait until it is
// CREATED (the owner's two-phase commit on the node, the GCS's record), remove it (groups/s;
// issue 24's target >= 2,000/s on one node).
void BM_runtime_placement_group_create_removal(benchmark::State &state)
{
	struct ferry_pg_bundle bundle = {};
	struct ferry_pg_opts opts = {};

	bundle.num_cpus = 1;
	opts.bundles = &bundle;
	opts.nbundles = 1;
	for (auto _ : state) {
		struct ferry_pg *pg = nullptr;
		int r = ferry_pg_create(&opts, &pg);

		if (r == 0)
			r = ferry_pg_wait(pg, 10000);
		if (pg && r == 0)
			r = ferry_pg_remove(pg);
		else if (pg)
			(void)ferry_pg_remove(pg);
		if (r < 0) {
			state.SkipWithError(fail_text("placement group", r).c_str());
			break;
		}
	}
	state.SetItemsProcessed((int64_t)state.iterations());
}
BENCHMARK(BM_runtime_placement_group_create_removal)->Unit(benchmark::kMicrosecond)->UseRealTime();

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

// ---- several callers, several actors ----

// The callers of the multi-client and n_n rows, and the actors of the 1_n and n_n rows. 4 of
// each: the machine has 2 cores, so 4 keeps every core busy while callers wait, as
// Ray's rows use the machine's CPU count.
constexpr size_t CLIENTS = 4;
constexpr size_t ACTORS = 4;
// An actor of these rows asks for a tenth of a CPU: Ray's actors hold no CPU once placed, and
// 4 whole CPUs would not fit this machine beside the 1_1 rows' actor and the task rows' leases.
constexpr double ACTOR_CPUS = 0.1;

std::vector<struct ferry_actor *> bench_actors;

int make_actors(benchmark::State &state)
{
	struct ferry_actor_opts opts = {};

	opts.num_cpus = ACTOR_CPUS;
	while (bench_actors.size() < ACTORS) {
		struct ferry_actor *a = nullptr;
		int r = ferry_actor_create("BenchActor", nullptr, 0, &opts, &a);

		if (r < 0) {
			state.SkipWithError(fail_text("ferry_actor_create", r).c_str());
			return r;
		}
		bench_actors.push_back(a);
	}
	return 0;
}

// Runs @fn(i) on @n threads at once; the first error of any, or 0; @why gets its reason.
template <typename Fn> int run_clients(size_t n, Fn fn, std::string *why)
{
	std::vector<std::thread> threads;
	std::vector<int> rets(n, 0);
	std::vector<std::string> whys(n);

	for (size_t i = 0; i < n; i++)
		threads.emplace_back([&, i] { rets[i] = fn(i, &whys[i]); });
	for (auto &t : threads)
		t.join();
	for (size_t i = 0; i < n; i++)
		if (rets[i] < 0) {
			*why = whys[i];
			return rets[i];
		}
	return 0;
}

// Gets and drops every ref of @refs[0..@n); the first error, or 0 (all dropped either way).
int get_drop_all(struct ferry_ref *refs, size_t n, std::string *why)
{
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		std::string w;

		if (get_drop(&refs[i], &w) < 0 && !ret) {
			ret = -1;
			*why = w;
		}
	}
	return ret;
}

// multi_client_tasks_async: CLIENTS threads each submit @n / CLIENTS empty tasks, then get
// them, all at once (tasks/s over all of them).
void BM_runtime_multi_client_tasks_async(benchmark::State &state)
{
	const size_t per = (size_t)state.range(0) / CLIENTS;
	std::string why;

	for (auto _ : state) {
		int r = run_clients(
			CLIENTS,
			[per](size_t, std::string *w) {
				std::vector<struct ferry_ref> refs(per);
				int ret = submit_noops(refs.data(), per);

				if (ret < 0) {
					*w = fail_text("ferry_submit", ret);
					return ret;
				}
				return get_drop_all(refs.data(), per, w);
			},
			&why);
		if (r < 0) {
			state.SkipWithError(why.c_str());
			break;
		}
	}
	state.SetItemsProcessed((int64_t)(state.iterations() * per * CLIENTS));
}
BENCHMARK(BM_runtime_multi_client_tasks_async)
	->Arg(10000)
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

// @n calls of the actors' @method from one caller, round robin from actor @first, with @arg
// (or none), then got. 0, or the first -errno with @why.
int call_round_robin(size_t first, size_t n, const char *method, const struct ferry_arg *arg,
		     std::string *why)
{
	std::vector<struct ferry_ref> refs(n);

	for (size_t i = 0; i < n; i++) {
		struct ferry_actor *a = bench_actors[(first + i) % bench_actors.size()];
		int r = ferry_actor_call(a, method, arg, arg ? 1 : 0, 1, &refs[i]);

		if (r < 0) {
			while (i > 0)
				ferry_ref_drop(&refs[--i]);
			*why = fail_text("ferry_actor_call", r);
			return r;
		}
	}
	return get_drop_all(refs.data(), n, why);
}

// 1_n_actor_calls_async: one caller calls ACTORS actors round robin, @n calls, then gets them.
void BM_runtime_1_n_actor_calls_async(benchmark::State &state)
{
	const size_t n = (size_t)state.range(0);
	std::string why;

	if (make_actors(state) < 0)
		return;
	for (auto _ : state) {
		if (call_round_robin(0, n, "noop", nullptr, &why) < 0) {
			state.SkipWithError(why.c_str());
			break;
		}
	}
	state.SetItemsProcessed((int64_t)(state.iterations() * n));
}
BENCHMARK(BM_runtime_1_n_actor_calls_async)
	->Arg(10000)
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

// n_n_actor_calls_async and n_n_actor_calls_with_arg_async: CLIENTS callers at once, each
// calling every actor round robin (@n / CLIENTS calls each). With an argument, each caller
// passes the ref of one small object it put, as Ray's row passes an ObjectRef.
void n_n_actor_calls(benchmark::State &state, bool with_arg)
{
	const size_t per = (size_t)state.range(0) / CLIENTS;
	std::string why;

	if (make_actors(state) < 0)
		return;
	for (auto _ : state) {
		int r = run_clients(
			CLIENTS,
			[per, with_arg](size_t i, std::string *w) {
				uint64_t value = i;
				struct ferry_ref ref;
				struct ferry_arg arg = {};
				int ret;

				if (!with_arg)
					return call_round_robin(i, per, "noop", nullptr, w);
				ret = ferry_put(&value, sizeof(value), &ref);
				if (ret < 0) {
					*w = fail_text("ferry_put", ret);
					return ret;
				}
				arg.ref = &ref;
				ret = call_round_robin(i, per, "noop_arg", &arg, w);
				ferry_ref_drop(&ref);
				return ret;
			},
			&why);
		if (r < 0) {
			state.SkipWithError(why.c_str());
			break;
		}
	}
	state.SetItemsProcessed((int64_t)(state.iterations() * per * CLIENTS));
}

void BM_runtime_n_n_actor_calls_async(benchmark::State &state)
{
	n_n_actor_calls(state, false);
}
BENCHMARK(BM_runtime_n_n_actor_calls_async)
	->Arg(10000)
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

void BM_runtime_n_n_actor_calls_with_arg_async(benchmark::State &state)
{
	n_n_actor_calls(state, true);
}
BENCHMARK(BM_runtime_n_n_actor_calls_with_arg_async)
	->Arg(10000)
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

// single_client_get_object_containing_10k_refs: 10,000 small objects put, an object holding
// their refs put once (ferry_put_refs), then that object got and released (gets/s), as Ray's
// row gets a list of 10,000 ObjectRefs.
void BM_runtime_single_client_get_object_containing_10k_refs(benchmark::State &state)
{
	constexpr size_t n = 10000;
	std::vector<struct ferry_ref> refs(n);
	struct ferry_ref outer;
	size_t made = 0;
	int r = 0;

	for (; made < n && r == 0; made++) {
		uint64_t value = made;

		r = ferry_put(&value, sizeof(value), &refs[made]);
	}
	if (r < 0)
		made--; // the failed one holds nothing
	if (r == 0)
		r = ferry_put_refs(refs.data(), n * sizeof(refs[0]), refs.data(), n, &outer);
	for (size_t i = 0; i < made; i++) // the outer object keeps them alive now
		ferry_ref_drop(&refs[i]);
	if (r < 0) {
		state.SkipWithError(fail_text("ferry_put/ferry_put_refs", r).c_str());
		return;
	}
	for (auto _ : state) {
		struct ferry_view view = {};

		r = ferry_get(&outer, TIMEOUT_MS, &view);
		if (r < 0) {
			state.SkipWithError(fail_text("ferry_get", r, view.error).c_str());
			break;
		}
		if (view.len != n * sizeof(refs[0])) {
			ferry_release(&view);
			state.SkipWithError("the object of 10k refs came back with another size");
			break;
		}
		ferry_release(&view);
	}
	ferry_ref_drop(&outer);
	state.SetItemsProcessed((int64_t)state.iterations());
}
BENCHMARK(BM_runtime_single_client_get_object_containing_10k_refs)
	->Unit(benchmark::kMicrosecond)
	->UseRealTime();

// ---- the owner's memory per pending task ----

// Bytes malloc has handed out and not taken back, every arena and mmap'd block: the owner's
// task records, return entries and table slots all come from it (ferry__malloc).
int64_t malloc_in_use()
{
	struct mallinfo2 mi = mallinfo2();

	return (int64_t)(mi.uordblks + mi.hblkhd);
}

int64_t rss_bytes()
{
	long pages_total = 0, pages_rss = 0;
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &pages_total, &pages_rss) != 2)
		pages_rss = -1;
	fclose(f);
	return pages_rss < 0 ? -1 : (int64_t)pages_rss * sysconf(_SC_PAGESIZE);
}

// The node's CPUs, from the GCS's nodes table (the local cluster has one node); 0 if unknown.
double node_cpus()
{
	struct ferry_gcs_node_info *nodes = nullptr;
	int n = ferry__rt.gcs ? ferry_gcs_node_list(ferry__rt.gcs, &nodes) : -ENOTCONN;
	double cpus = n == 1 ? nodes[0].cpu : 0;

	ferry_gcs_free(nodes);
	return cpus;
}

// bytes_per_pending_task: 1,000,000 empty tasks submitted that no worker can run yet, and the
// owner's malloc'd bytes (and RSS) before and after, per task. They ask for more CPU than the
// node has free while the 1_1 rows' actor holds one, so their lease waits at the node and they
// wait in the owner's queue, as tasks queued behind busy workers do. Then the actor goes, they
// run, and the row waits for one submitted after them (their class runs in order).
constexpr int64_t DRAIN_TIMEOUT_MS = 900000; // a million tasks on a loaded 2-core machine

void BM_runtime_bytes_per_pending_task(benchmark::State &state)
{
	const size_t n = (size_t)state.range(0);
	std::vector<struct ferry_ref> refs(n); // the caller's, before the first figure
	std::vector<int> ready(n);
	struct ferry_task_opts opts = {};
	struct ferry_ref last;

	// More than is free while the actor holds its CPU, less than is free once it went (the
	// other rows' actors hold 0.4).
	opts.num_cpus = node_cpus() - 0.5;
	if (opts.num_cpus <= 0) {
		state.SkipWithError("the node's CPUs are not in the GCS's nodes table");
		return;
	}
	if (make_actor(state) < 0)
		return;
	for (auto _ : state) {
		int64_t heap0, rss0, heap1, rss1;
		size_t made = 0;
		int r = 0;

		heap0 = malloc_in_use();
		rss0 = rss_bytes();
		for (; made < n && r == 0; made++)
			r = ferry_submit("noop", nullptr, 0, &opts, &refs[made]);
		heap1 = malloc_in_use();
		rss1 = rss_bytes();
		if (r < 0)
			made--;
		// Not one ran: each is still pending (a figure over tasks that ran is no figure).
		if (r == 0 && ferry_wait(refs.data(), made, 1, 0, ready.data()) != 0)
			r = -EBUSY;
		for (size_t i = 0; i < made; i++)
			ferry_ref_drop(&refs[i]);
		if (r < 0) {
			state.SkipWithError(r == -EBUSY
						    ? "tasks ran: the blocker did not hold the node"
						    : fail_text("ferry_submit", r).c_str());
			break;
		}
		state.counters["bytes_per_pending_task"] = (double)(heap1 - heap0) / (double)n;
		state.counters["rss_bytes_per_pending_task"] = (double)(rss1 - rss0) / (double)n;
		// Let them run (FIFO in their class), and wait for one submitted after them.
		ferry_actor_drop(bench_actor);
		bench_actor = nullptr;
		r = ferry_submit("noop", nullptr, 0, &opts, &last);
		if (r < 0) {
			state.SkipWithError(fail_text("ferry_submit", r).c_str());
			break;
		}
		struct ferry_view view = {};
		r = ferry_get(&last, DRAIN_TIMEOUT_MS, &view);
		ferry_ref_drop(&last);
		if (r < 0) {
			state.SkipWithError(
				fail_text("ferry_get (the last task)", r, view.error).c_str());
			break;
		}
		ferry_release(&view);
	}
}
// Ray's figure is for 1,000,000 queued tasks; one round (it also runs them all after).
BENCHMARK(BM_runtime_bytes_per_pending_task)
	->Arg(1000000)
	->Iterations(1)
	->Unit(benchmark::kMillisecond)
	->UseRealTime();

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
	for (auto *a : bench_actors)
		ferry_actor_drop(a);
	ferry_shutdown();
	return 0;
}
