// SPDX-License-Identifier: Apache-2.0
// Pulls between two nodes: bandwidth and latency (p50/p99) by object size, 8 B to 64 MiB (and
// 1 GiB with `ferry-bench transport --1gib`), one object and several in flight, per backend:
// TCP, shared memory, RDMA where a device exists. Each benchmark runs a GCS and two nodes (store
// + object manager, registered like ferry-node) inside this process; node B pulls node A's
// objects through the object manager, the way a remote get does. Read the figures beside
// iperf3, ucx_perftest and perftest: bench/compare transport runs them in the same go.
//
// Two hosts, like perftest: `ferry-bench transport --server --ip A --token-file F` holds the
// objects and prints the client's command; `ferry-bench transport --client A:PORT --token-file
// F [--ip B] [benchmark flags]` pulls them (BM_transport_remote_pull/SIZE/IN_FLIGHT). Each
// row's label names the transport the pulls used (a client without RDMA to the server says
// tcp, not quietly) and the Ferry commit (ferry-bench --help lists the flags).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_main.h"
#include "bench_util.h"
#include "ferry_config.h"

#if FERRY_HAVE_RDMA
#include <infiniband/verbs.h>
#endif

extern "C" {
#include "common/loop.h"
#include "common/net.h"
#include "common/token.h"
#include "common/util.h"
#include "common/version.h"
#include "cluster/embed.h"
}

namespace
{

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;
constexpr int64_t MANY = 8; // objects in flight in the "many" runs
const char TOKEN[] = "ferry-bench-transport";

bool g_1gib = false; // --1gib: 1 GiB objects too (stores sized for them)
// Two-host mode's object sizes: -s SIZE (one), -a (perftest's 2 B to 8 MiB), else empty (the
// default set, remote_sizes()).
std::vector<uint64_t> g_sizes;

// FERRY_BENCH_STORE_MIB overrides: the soft-RoCE VM has 2 GiB for both stores and the kernel.
uint64_t store_bytes()
{
	const char *env = getenv("FERRY_BENCH_STORE_MIB");
	uint64_t want = 0;

	if (env && atoi(env) > 0)
		return (uint64_t)atoi(env) * MiB;
	if (g_sizes.empty())
		return g_1gib ? 2560 * MiB : 1152 * MiB;
	// -s/-a: every size's objects in flight at once, and room beside them.
	for (uint64_t size : g_sizes)
		want += size * (uint64_t)MANY;
	return want + (g_1gib ? 2560 * MiB : want / 4 + 128 * MiB);
}

// FERRY_BENCH_OBJMGR_LOOP=own|node: where the nodes' object managers serve (ferry-node
// --objmgr-loop), to measure one mode beside the other; unset: the default (auto).
int objmgr_loop()
{
	const char *env = getenv("FERRY_BENCH_OBJMGR_LOOP");

	if (env && !strcmp(env, "own"))
		return 1; // FERRY__NODE_OBJMGR_LOOP_OWN
	if (env && !strcmp(env, "node"))
		return 2; // FERRY__NODE_OBJMGR_LOOP_NODE
	return 0;
}

// Objects are named by size and index (the two-host client and server agree on them) and, in
// the local mode, by the benchmark run: a run never meets the previous run's copies, whose
// deletion may still be on its way (a pinned object goes when its last pin does).
ferry_object_id object_id(uint64_t size, uint64_t index, uint32_t run = 0)
{
	ferry_object_id id;

	memset(id.bytes, 0x7e, sizeof(id.bytes));
	id.bytes[0] = (uint8_t)(index * 17 + 3);
	memcpy(id.bytes + 1, &run, 3);
	memcpy(id.bytes + 4, &size, sizeof(size));
	memcpy(id.bytes + 12, &index, sizeof(index));
	return id;
}

uint32_t g_run; // local-mode benchmark runs so far

constexpr uint32_t kSpinUs = 2000; // the busy-poll window of the _spin_ benchmarks

const char *transport_name(unsigned t)
{
	switch (t) {
	case FERRY_GCS_TRANSPORT_TCP:
		return "tcp";
	case FERRY_GCS_TRANSPORT_SHM:
		return "shm";
	case FERRY_GCS_TRANSPORT_RDMA:
		return "rdma";
	default:
		return t ? "?" : "local";
	}
}

// The transports in @bits ("rdma+tcp"), for labels and errors.
std::string transports_text(unsigned bits)
{
	std::string s;

	for (unsigned t :
	     {FERRY_GCS_TRANSPORT_RDMA, FERRY_GCS_TRANSPORT_TCP, FERRY_GCS_TRANSPORT_SHM})
		if (bits & t)
			s += std::string(s.empty() ? "" : "+") + transport_name(t);
	return s.empty() ? "local" : s;
}

// A row's label: the transports its pulls used and the Ferry commit.
void label(benchmark::State &state, unsigned used)
{
	state.SetLabel(transports_text(used) + " commit=" + ferry__version_commit());
}

// A GCS and two nodes in this process. A serves, B pulls; both speak @transports.
class Pair
{
      public:
	int start(unsigned transports, const char *ip, uint32_t spin_us)
	{
		char gcs[64];
		int ret = ferry__embed_gcs_start("127.0.0.1", 0, TOKEN, sizeof(TOKEN) - 1, &gcs_);

		if (ret < 0)
			return ret;
		snprintf(gcs, sizeof(gcs), "127.0.0.1:%u", ferry__embed_gcs_port(gcs_));
		ferry__embed_node_opts o = {};
		o.gcs = gcs;
		o.token = TOKEN;
		o.token_len = sizeof(TOKEN) - 1;
		o.ip = ip;
		o.memory_bytes = store_bytes();
		o.transports = transports;
		o.spin_us = spin_us;
		o.objmgr_loop = objmgr_loop();
		o.name = "A";
		ret = ferry__embed_node_start(&o, &a_);
		o.name = "B";
		if (ret == 0)
			ret = ferry__embed_node_start(&o, &b_);
		return ret;
	}
	~Pair()
	{
		ferry__embed_node_stop(b_);
		ferry__embed_node_stop(a_);
		ferry__embed_gcs_stop(gcs_);
	}
	ferry__embed_node *a() const
	{
		return a_;
	}
	ferry__embed_node *b() const
	{
		return b_;
	}

      private:
	ferry__embed_gcs *gcs_ = nullptr;
	ferry__embed_node *a_ = nullptr, *b_ = nullptr;
};

// One pair at a time, kept while consecutive benchmarks use the same backend.
std::unique_ptr<Pair> g_pair;
unsigned g_pair_transports = ~0u;
uint32_t g_pair_spin_us;
std::string g_pair_error;

Pair *pair_for(unsigned transports, const char *ip, uint32_t spin_us)
{
	if (g_pair && g_pair_transports == transports && g_pair_spin_us == spin_us)
		return g_pair.get();
	g_pair.reset();
	g_pair_transports = transports;
	g_pair_spin_us = spin_us;
	auto p = std::make_unique<Pair>();
	int ret = p->start(transports, ip, spin_us);
	if (ret < 0) {
		g_pair_error =
			std::string("cannot start the GCS and two nodes: ") + ferry_strerror(ret);
		g_pair.reset(); // p frees what started
		return nullptr;
	}
	g_pair = std::move(p);
	return g_pair.get();
}

// The loop's shares of @pulls pulls between the stats @st0 and @st1 as counters: on_loop (ended
// on the loop, objmgr_fast.c, no pull thread), and over RDMA read_ahead (the READ went with the
// probe and was kept) and one_sided (one READ, no message, kept), each when it was tried.
void loop_shares(benchmark::State &state, const ferry__objmgr_stats &st0,
		 const ferry__objmgr_stats &st1, double pulls)
{
	if (pulls <= 0)
		return;
	state.counters["on_loop"] = (double)(st1.pulls_fast - st0.pulls_fast) / pulls;
	if (st1.read_ahead_kept + st1.read_ahead_missed >
	    st0.read_ahead_kept + st0.read_ahead_missed)
		state.counters["read_ahead"] =
			(double)(st1.read_ahead_kept - st0.read_ahead_kept) / pulls;
	if (st1.one_sided_kept + st1.one_sided_missed > st0.one_sided_kept + st0.one_sided_missed)
		state.counters["one_sided"] =
			(double)(st1.one_sided_kept - st0.one_sided_kept) / pulls;
}

// The timed loop shared by the local and two-host modes: each iteration pulls @ids on @puller
// concurrently (timed), then drops the copies (untimed: manual time).
void pull_loop(benchmark::State &state, ferry__embed_node *puller,
	       const std::vector<ferry_object_id> &ids, uint64_t size, unsigned want_transport)
{
	std::vector<ferry__objmgr_result> res(ids.size());
	ferry_bench::Latency lat(true);
	bool checked = false;
	unsigned used = 0; // transports the timed pulls took
	ferry__objmgr_stats st0, st1;

	// One untimed round first: connection setup (a TCP handshake, an rdma_cm exchange that
	// takes ~100 ms under TCG) is not a pull's cost, and perftest does not time it either.
	if (ferry__embed_pull_all(puller, ids.data(), ids.size(), res.data()) == 0)
		(void)ferry__embed_drop(puller, ids.data(), ids.size());
	ferry__objmgr_get_stats(ferry__embed_node_objmgr(puller), &st0);
	for (auto _ : state) {
		uint64_t t0 = ferry_bench::now_ns();
		int ret = ferry__embed_pull_all(puller, ids.data(), ids.size(), res.data());
		uint64_t t1 = ferry_bench::now_ns();

		if (ret < 0) {
			state.SkipWithError(
				(std::string("pull failed: ") + ferry_strerror(ret)).c_str());
			break;
		}
		state.SetIterationTime((double)(t1 - t0) / 1e9);
		if (ids.size() == 1)
			lat.add(t1 - t0);
		else
			for (auto &r : res)
				lat.add(r.micros * 1000);
		for (auto &r : res)
			used |= r.transport;
		if (want_transport && res[0].transport != want_transport) {
			state.SkipWithError((std::string("pulled over ") +
					     transport_name(res[0].transport) + ", not " +
					     transport_name(want_transport))
						    .c_str());
			break;
		}
		if (!checked) { // the bytes are right (once: the check reads the whole object)
			for (auto &id : ids)
				if ((ret = ferry__embed_check(puller, &id, size)) < 0)
					break;
			if (ret < 0) {
				state.SkipWithError("pulled bytes differ from the source");
				break;
			}
			checked = true;
		}
		ret = ferry__embed_drop(puller, ids.data(), ids.size());
		if (ret < 0) {
			state.SkipWithError(
				(std::string("drop failed: ") + ferry_strerror(ret)).c_str());
			break;
		}
	}
	state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)(size * ids.size()));
	state.counters["in_flight"] = (double)ids.size();
	label(state, used);
	ferry__objmgr_get_stats(ferry__embed_node_objmgr(puller), &st1);
	loop_shares(state, st0, st1, (double)state.iterations() * (double)ids.size());
	lat.publish(state);
}

const char *rdma_missing()
{
#if FERRY_HAVE_RDMA
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);

	if (list)
		ibv_free_device_list(list);
	if (n == 0)
		return "no RDMA device here (run it in tools/softroce-vm)";
	return nullptr;
#else
	return "built without libibverbs/librdmacm";
#endif
}

// The pair for @transports (with the busy-poll window @spin_us), @n objects of @size put on A
// under new ids (into @ids); nullptr after SkipWithError when that cannot be done.
Pair *pair_with_objects(benchmark::State &state, unsigned transports, uint32_t spin_us,
			uint64_t size, uint64_t n, std::vector<ferry_object_id> &ids)
{
	const char *ip = "127.0.0.1";

	if (transports == FERRY_GCS_TRANSPORT_RDMA) {
		if (const char *why = rdma_missing()) {
			state.SkipWithError(why);
			return nullptr;
		}
		ip = getenv("FERRY_BENCH_RDMA_IP") ? getenv("FERRY_BENCH_RDMA_IP") : ip;
	}
	Pair *p = pair_for(transports, ip, spin_us);
	if (!p && transports == FERRY_GCS_TRANSPORT_RDMA) {
		// An RDMA node that cannot start (no device serves the address): say so.
		state.SkipWithError(("no RDMA pulls: " + g_pair_error).c_str());
		return nullptr;
	}
	if (!p) {
		state.SkipWithError(g_pair_error.c_str());
		return nullptr;
	}
	if (transports == FERRY_GCS_TRANSPORT_RDMA &&
	    !strstr(ferry__embed_node_address(p->a()), "rdma=")) {
		state.SkipWithError("node A advertises no RDMA port");
		return nullptr;
	}
	g_run++;
	for (uint64_t i = 0; i < n; i++) {
		ids.push_back(object_id(size, i, g_run));
		int ret = ferry__embed_put(p->a(), &ids.back(), size);
		if (ret < 0) {
			state.SkipWithError(
				(std::string("put on A: ") + ferry_strerror(ret)).c_str());
			return nullptr;
		}
	}
	return p;
}

// Local mode: A puts @in_flight objects of @size, B pulls them (the nodes' default sleeping
// loops; BM_transport_spin_pull is the busy-poll row).
void BM_transport_pull(benchmark::State &state, unsigned transports)
{
	const uint64_t size = (uint64_t)state.range(0);
	std::vector<ferry_object_id> ids;
	Pair *p = pair_with_objects(state, transports, 0, size, (uint64_t)state.range(1), ids);

	if (!p)
		return;
	pull_loop(state, p->b(), ids, size,
		  transports == (FERRY_GCS_TRANSPORT_TCP | FERRY_GCS_TRANSPORT_SHM)
			  ? FERRY_GCS_TRANSPORT_SHM
			  : transports);
	// Free A's store for the next size (the directory entries stay; a later put republishes).
	ferry_plasma_client_delete(ferry__embed_node_client(p->a()), ids.data(), ids.size(),
				   nullptr);
}

// Chained pulls (the async API, as an event-driven C service uses it): each pull's callback
// issues the next, so no thread waits for a result; node B's loop and node A's loop are the
// only threads on the path, as ucx_perftest's and perftest's two processes are. A small pull
// whose location is cached ends on B's loop (objmgr_fast.c), and its callback runs there.
// Each pull is timed from its issue to its callback. The copies are dropped between chains
// (untimed), a chain of kChain objects at a time.
constexpr size_t kChain = 1000;

struct Chain {
	ferry__objmgr *om = nullptr;
	const std::vector<ferry_object_id> *ids = nullptr;
	std::vector<uint64_t> issued, ended; // per pull, ns
	size_t next = 0;		     // the pull to issue next
	int status = 0;			     // the first error
	unsigned transports = 0;	     // the transports seen (bits)
	bool done = false;		     // the chain ended
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

	void end(int st)
	{
		pthread_mutex_lock(&lock);
		if (!status)
			status = st;
		done = true;
		pthread_cond_signal(&cond);
		pthread_mutex_unlock(&lock);
	}
	// Issue pull @next (from the bench thread first, then from each callback).
	void issue()
	{
		size_t i = next++;

		issued[i] = ferry_bench::now_ns();
		int ret = ferry__objmgr_pull(om, &(*ids)[i], on_pulled, this);
		if (ret < 0)
			end(ret);
	}
	static void on_pulled(void *arg, const ferry__objmgr_result *r)
	{
		auto *c = static_cast<Chain *>(arg);
		size_t i = c->next - 1;

		c->ended[i] = ferry_bench::now_ns();
		c->transports |= r->transport;
		if (r->status < 0)
			c->end(r->status);
		else if (c->next < c->ids->size())
			c->issue();
		else
			c->end(0);
	}
	int run(ferry__objmgr *m, const std::vector<ferry_object_id> &v)
	{
		om = m;
		ids = &v;
		issued.assign(v.size(), 0);
		ended.assign(v.size(), 0);
		next = 0;
		status = 0;
		transports = 0;
		done = false;
		issue();
		pthread_mutex_lock(&lock);
		while (!done)
			pthread_cond_wait(&cond, &lock);
		pthread_mutex_unlock(&lock);
		return status;
	}
};

void BM_transport_chain_pull(benchmark::State &state, unsigned transports, uint32_t spin_us)
{
	const uint64_t size = (uint64_t)state.range(0);
	std::vector<ferry_object_id> ids;
	ferry_bench::Latency lat(true);
	Chain chain;
	ferry__objmgr_stats st0, st1;
	Pair *p = pair_with_objects(state, transports, spin_us, size, kChain, ids);

	if (!p)
		return;
	ferry__objmgr *om = ferry__embed_node_objmgr(p->b());
	// An untimed first chain: connection setup and the location cache's start.
	int ret = chain.run(om, ids);
	if (ret == 0)
		ret = ferry__embed_drop(p->b(), ids.data(), ids.size());
	ferry__objmgr_get_stats(om, &st0);
	while (ret == 0 && state.KeepRunningBatch((benchmark::IterationCount)kChain)) {
		ret = chain.run(om, ids);
		if (ret < 0)
			break;
		uint64_t total = 0;
		for (size_t i = 0; i < kChain; i++) {
			lat.add(chain.ended[i] - chain.issued[i]);
			total += chain.ended[i] - chain.issued[i];
		}
		state.SetIterationTime((double)total / 1e9);
		if (chain.transports != transports) {
			state.SkipWithError((std::string("pulled over ") +
					     transport_name(chain.transports) + ", not " +
					     transport_name(transports))
						    .c_str());
			break;
		}
		if ((ret = ferry__embed_check(p->b(), &ids[kChain - 1], size)) < 0)
			break;
		ret = ferry__embed_drop(p->b(), ids.data(), ids.size());
	}
	if (ret < 0)
		state.SkipWithError((std::string("chain: ") + ferry_strerror(ret)).c_str());
	ferry__objmgr_get_stats(om, &st1);
	loop_shares(state, st0, st1, (double)state.iterations());
	state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)size);
	label(state, chain.transports);
	lat.publish(state);
	ferry_plasma_client_delete(ferry__embed_node_client(p->a()), ids.data(), ids.size(),
				   nullptr);
}

// Small pulls with the object managers' busy poll (--spin-us), one at a time through the
// blocking API from the bench thread: the latency mode, beside ucx_perftest and perftest, which
// busy-poll too. Each timed pull is of an object B lacks, one of a batch of kChain put on A, and
// the copies are dropped a batch at a time, untimed (perftest does not free its buffer between
// iterations either). A drop before every pull, as this benchmark did at first, put the drop's
// own aftermath (the store freeing, the directory's change published to both nodes) on the
// machine's 2 CPUs during the next pull: 10-20% of an 8 B RDMA pull in the soft-RoCE VM.
void BM_transport_spin_pull(benchmark::State &state, unsigned transports, uint32_t spin_us)
{
	const uint64_t size = (uint64_t)state.range(0);
	const unsigned want = transports == (FERRY_GCS_TRANSPORT_TCP | FERRY_GCS_TRANSPORT_SHM)
				      ? FERRY_GCS_TRANSPORT_SHM
				      : transports;
	std::vector<ferry_object_id> ids;
	ferry_bench::Latency lat(true);
	ferry__objmgr_stats st0, st1;
	ferry__objmgr_result res = {};
	std::string error;
	Pair *p = pair_with_objects(state, transports, spin_us, size, kChain, ids);
	int ret = 0;

	if (!p)
		return;
	ferry__embed_node *b = p->b();
	// An untimed first batch: connection setup and the location cache's start.
	for (size_t i = 0; i < ids.size() && ret == 0; i++)
		ret = ferry__embed_pull_all(b, &ids[i], 1, &res);
	if (ret == 0)
		ret = ferry__embed_drop(b, ids.data(), ids.size());
	if (ret < 0)
		error = std::string("first batch: ") + ferry_strerror(ret);
	ferry__objmgr_get_stats(ferry__embed_node_objmgr(b), &st0);
	size_t next = 0;
	for (auto _ : state) {
		if (!error.empty())
			break;
		if (next == ids.size()) { // untimed: the bytes are right, and the batch goes
			ret = ferry__embed_check(b, &ids[next - 1], size);
			if (ret < 0) {
				error = "pulled bytes differ from the source";
				break;
			}
			if ((ret = ferry__embed_drop(b, ids.data(), ids.size())) < 0) {
				error = std::string("drop failed: ") + ferry_strerror(ret);
				break;
			}
			next = 0;
		}
		uint64_t t0 = ferry_bench::now_ns();
		ret = ferry__embed_pull_all(b, &ids[next], 1, &res);
		uint64_t t1 = ferry_bench::now_ns();

		if (ret < 0) {
			error = std::string("pull failed: ") + ferry_strerror(ret);
			break;
		}
		if (res.transport != want) {
			error = std::string("pulled over ") + transport_name(res.transport) +
				", not " + transport_name(want);
			break;
		}
		state.SetIterationTime((double)(t1 - t0) / 1e9);
		lat.add(t1 - t0);
		next++;
	}
	if (error.empty() && next > 0 && (ret = ferry__embed_check(b, &ids[next - 1], size)) < 0)
		error = "pulled bytes differ from the source";
	if (!error.empty())
		state.SkipWithError(error.c_str());
	state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)size);
	state.counters["in_flight"] = 1;
	label(state, next > 0 ? res.transport : 0u);
	ferry__objmgr_get_stats(ferry__embed_node_objmgr(b), &st1);
	loop_shares(state, st0, st1, (double)state.iterations());
	lat.publish(state);
	(void)ferry__embed_drop(b, ids.data(), next);
	ferry_plasma_client_delete(ferry__embed_node_client(p->a()), ids.data(), ids.size(),
				   nullptr);
}

// The object sizes of the rows: the local ones', and a two-host run's unless -s/-a.
const std::vector<uint64_t> kSizes = {8, 4096, 65536, MiB, 64 * MiB};

// @list's sizes, one and MANY in flight, and 1 GiB alone when @big.
void sizes(benchmark::internal::Benchmark *b, const std::vector<uint64_t> &list, bool big)
{
	for (uint64_t size : list) {
		b->Args({(int64_t)size, 1});
		b->Args({(int64_t)size, MANY});
	}
	if (big)
		b->Args({(int64_t)GiB, 1});
	b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

void register_local(bool big)
{
	const char *suffix = big ? "_1GiB" : "";
	struct {
		const char *name;
		unsigned transports;
	} backends[] = {
		{"tcp", FERRY_GCS_TRANSPORT_TCP},
		{"shm", FERRY_GCS_TRANSPORT_TCP | FERRY_GCS_TRANSPORT_SHM},
		{"rdma", FERRY_GCS_TRANSPORT_RDMA},
	};
	for (auto &be : backends) {
		std::string name = std::string("BM_transport_") + be.name + "_pull" + suffix;
		auto *b = benchmark::RegisterBenchmark(name.c_str(), BM_transport_pull,
						       be.transports);
		if (!big) {
			sizes(b, kSizes, false);
		} else {
			b->Args({(int64_t)GiB, 1})->UseManualTime()->Unit(benchmark::kMicrosecond);
		}
	}
	if (big)
		return;
	// Small pulls with the object managers' busy poll (--spin-us), one at a time: the latency
	// mode (BM_transport_spin_pull). Args: size, 1 in flight.
	for (auto &be : backends) {
		std::string name = std::string("BM_transport_") + be.name + "_spin_pull";
		benchmark::RegisterBenchmark(name.c_str(), BM_transport_spin_pull, be.transports,
					     kSpinUs)
			->Args({8, 1})
			->Args({4096, 1})
			->UseManualTime()
			->Unit(benchmark::kMicrosecond);
	}
	// Chained pulls through the async API, busy-polling: the transport's own latency.
	for (auto &be : backends) {
		if (be.transports == (FERRY_GCS_TRANSPORT_TCP | FERRY_GCS_TRANSPORT_SHM))
			continue;
		std::string name = std::string("BM_transport_") + be.name + "_chain_pull";
		benchmark::RegisterBenchmark(name.c_str(), BM_transport_chain_pull, be.transports,
					     kSpinUs)
			->Arg(8)
			->Arg(4096)
			->UseManualTime()
			->Unit(benchmark::kMicrosecond);
	}
}

[[maybe_unused]] const bool g_registered = (register_local(false), true);

// ---- two hosts ----

struct remote_args {
	bool server = false;	      // --server
	const char *client = nullptr; // --client HOST:PORT
	const char *ip = nullptr;     // --ip ADDR|IFACE: where this side's node serves
	uint32_t port = 6390;	      // --port: the server's GCS
	const char *token_file = nullptr;
	unsigned transports = 0; // --transport tcp|rdma|auto
	uint32_t spin_us = 0;	 // --spin-us: the nodes' busy-poll window
	bool spin_given = false; // --spin-us was given (two-host mode only)
	std::string token;
	char server_ip[FERRY__NET_IP_MAX] = ""; // --server: --ip as an address
	// perftest's flags: -d DEV [-i PORT] [-x GID] name the RDMA device, port and GID whose
	// address this side's node serves on (rdma_cm binds by address); -s SIZE, -a.
	const char *device = nullptr;
	uint32_t ib_port = 0;
	int gid = -1;
	bool port_or_gid = false;	     // -i or -x given
	char dev_ip[FERRY__NET_IP_MAX] = ""; // -d resolved: an address, or
	char dev_iface[16] = "";	     // the interface that holds it
};

int read_token(remote_args &a)
{
	if (!a.token_file) {
		fprintf(stderr, "ferry-bench transport: --token-file F is required\n");
		return -EINVAL;
	}
	char buf[FERRY_TOKEN_MAX];
	int n = ferry__token_read(a.token_file, buf, sizeof(buf)); // logs why it failed
	if (n < 0)
		return n;
	a.token.assign(buf, (size_t)n);
	return 0;
}

// The sizes both sides of a two-host run use: -s, -a, or the local rows' set.
const std::vector<uint64_t> &remote_sizes()
{
	return g_sizes.empty() ? kSizes : g_sizes;
}

std::vector<std::pair<uint64_t, uint64_t>> remote_objects()
{
	std::vector<std::pair<uint64_t, uint64_t>> v; // (size, index)
	for (uint64_t size : remote_sizes())
		for (uint64_t i = 0; i < (uint64_t)MANY; i++)
			v.emplace_back(size, i);
	if (g_1gib)
		v.emplace_back(GiB, 0);
	return v;
}

// The server's GCS listens on --ip, so an interface name becomes its first address here (the
// node takes either). Without --ip: 127.0.0.1, which only this host reaches (said).
int server_ip(remote_args &a)
{
	ferry__net_iface ifs[64];
	int n;

	if (!a.ip || ferry__net_ip_valid(a.ip)) {
		snprintf(a.server_ip, sizeof(a.server_ip), "%s", a.ip ? a.ip : "127.0.0.1");
		if (!a.ip)
			fprintf(stderr,
				"ferry-bench transport: serving on 127.0.0.1, which only this "
				"host reaches: give --ip ADDR|IFACE for a client on another "
				"host\n");
		return 0;
	}
	n = ferry__net_ifaces("/sys", ifs, 64);
	for (int i = 0; i < n; i++)
		if (!strcmp(ifs[i].name, a.ip)) {
			snprintf(a.server_ip, sizeof(a.server_ip), "%s", ifs[i].ip);
			return 0;
		}
	fprintf(stderr,
		"ferry-bench transport: --ip %s: neither an address nor an interface with one\n",
		a.ip);
	return -ENODEV;
}

// -d DEV [-i PORT] [-x GID]: the address this side serves on, as --ip, and RDMA unless
// --transport said otherwise. 0, or -errno (said).
int device_ip(remote_args &a)
{
	if (!a.device)
		return 0;
	int ret = ferry__net_rdma_addr("/sys", a.device, a.ib_port, a.gid, a.dev_ip,
				       sizeof(a.dev_ip), a.dev_iface, sizeof(a.dev_iface));
	if (ret < 0) {
		fprintf(stderr, "ferry-bench transport: -d %s: %s\n", a.device,
			ferry_strerror(ret));
		return ret;
	}
	a.ip = a.dev_ip[0] ? a.dev_ip : a.dev_iface;
	if (!a.transports)
		a.transports = FERRY_GCS_TRANSPORT_RDMA;
	fprintf(stderr, "ferry-bench transport: -d %s port %u GID %d: on %s %s\n", a.device,
		a.ib_port ? a.ib_port : 1, a.gid, a.dev_ip[0] ? "address" : "interface", a.ip);
	return 0;
}

int run_server(remote_args &a)
{
	const char *ip = a.server_ip;
	ferry__embed_gcs *gcs = nullptr;
	ferry__embed_node *node = nullptr;
	char addr[64];
	sigset_t set;
	int sig, ret;

	ret = ferry__embed_gcs_start(ip, (uint16_t)a.port, a.token.data(), a.token.size(), &gcs);
	if (ret < 0) {
		fprintf(stderr, "ferry-bench transport: GCS on %s:%u: %s\n", ip, a.port,
			ferry_strerror(ret));
		return 1;
	}
	snprintf(addr, sizeof(addr), strchr(ip, ':') ? "[%s]:%u" : "%s:%u", ip,
		 ferry__embed_gcs_port(gcs));
	ferry__embed_node_opts o = {};
	o.gcs = addr;
	o.token = a.token.data();
	o.token_len = a.token.size();
	o.ip = a.ip ? a.ip : ip;
	o.memory_bytes = store_bytes();
	o.transports = a.transports;
	o.spin_us = a.spin_us;
	o.objmgr_loop = objmgr_loop();
	o.name = "server";
	ret = ferry__embed_node_start(&o, &node);
	for (auto &so : remote_objects()) {
		ferry_object_id id = object_id(so.first, so.second);
		if (ret == 0)
			ret = ferry__embed_put(node, &id, so.first);
	}
	if (ret == 0) {
		// Block the signals before saying ready, so that a quick ^C is not lost.
		sigemptyset(&set);
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		pthread_sigmask(SIG_BLOCK, &set, nullptr);
		printf("ferry-bench transport server ready (commit %s): GCS %s node %s spin %u us\n"
		       "on the other host run: ferry-bench transport --client %s --token-file %s\n",
		       ferry__version_commit(), addr, ferry__embed_node_address(node), a.spin_us,
		       addr, a.token_file);
		fflush(stdout);
		sigwait(&set, &sig);
	} else {
		fprintf(stderr, "ferry-bench transport: server setup: %s\n", ferry_strerror(ret));
	}
	ferry__embed_node_stop(node);
	ferry__embed_gcs_stop(gcs);
	return ret < 0 ? 1 : 0;
}

ferry__embed_node *g_remote_node;

void BM_transport_remote_pull(benchmark::State &state)
{
	const uint64_t size = (uint64_t)state.range(0);
	std::vector<ferry_object_id> ids;

	for (int64_t i = 0; i < state.range(1); i++)
		ids.push_back(object_id(size, (uint64_t)i));
	pull_loop(state, g_remote_node, ids, size, 0);
}

// Whether the server's directory has the first object of every size this run pulls: 0, or
// -ENOENT / the lookup's error (said).
int check_server_sizes(remote_args &a)
{
	const char *addr = a.client;
	ferry_gcs_client_opts go = {};
	ferry_gcs_client *gcs = nullptr;
	std::vector<uint64_t> want = remote_sizes();
	int ret;

	if (g_1gib)
		want.push_back(GiB);

	go.addresses = &addr;
	go.naddresses = 1;
	go.token = a.token.data();
	go.token_len = a.token.size();
	ret = ferry_gcs_client_connect(&go, &gcs);
	if (ret < 0) {
		fprintf(stderr, "ferry-bench transport: the server's GCS %s: %s\n", a.client,
			ferry_strerror(ret));
		return ret;
	}
	for (uint64_t size : want) {
		ferry_object_id id = object_id(size, 0);
		ferry_gcs_object_info info = {};

		ret = ferry_gcs_object_lookup(gcs, &id, &info);
		if (ret >= 0 && info.nlocations == 0)
			ret = -ENOENT;
		ferry_gcs_free(info.locations);
		if (ret == -ENOENT)
			fprintf(stderr,
				"ferry-bench transport: the server holds no %llu B objects: give "
				"both sides the same -s, -a and --1gib\n",
				(unsigned long long)size);
		else if (ret < 0)
			fprintf(stderr, "ferry-bench transport: looking up a %llu B object: %s\n",
				(unsigned long long)size, ferry_strerror(ret));
		if (ret < 0)
			break;
	}
	ferry_gcs_client_destroy(gcs);
	return ret < 0 ? ret : 0;
}

int run_client(remote_args &a)
{
	ferry__embed_node_opts o = {};
	o.gcs = a.client;
	o.token = a.token.data();
	o.token_len = a.token.size();
	o.ip = a.ip;
	o.memory_bytes = store_bytes();
	o.transports = a.transports;
	o.spin_us = a.spin_us;
	o.objmgr_loop = objmgr_loop();
	o.name = "client";
	int ret = ferry__embed_node_start(&o, &g_remote_node);
	if (ret < 0) {
		fprintf(stderr, "ferry-bench transport: cannot join %s: %s\n", a.client,
			ferry_strerror(ret));
		return 1;
	}
	// Where the pulls go out from; each row's label says which transport they took.
	fprintf(stderr, "ferry-bench transport client (commit %s): node %s, spin %u us\n",
		ferry__version_commit(), ferry__embed_node_address(g_remote_node), a.spin_us);
	// A size the server does not hold would wait for ever in the timed loop: look each up in
	// the object directory first (a lookup, not a pull: this store may be sized for fewer).
	if (check_server_sizes(a) < 0) {
		ferry__embed_node_stop(g_remote_node);
		return 2;
	}
	auto *b =
		benchmark::RegisterBenchmark("BM_transport_remote_pull", BM_transport_remote_pull);
	sizes(b, remote_sizes(), g_1gib);
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	ferry__embed_node_stop(g_remote_node);
	return 0;
}

unsigned parse_transport(const char *s)
{
	if (!strcmp(s, "tcp"))
		return FERRY_GCS_TRANSPORT_TCP;
	if (!strcmp(s, "rdma"))
		return FERRY_GCS_TRANSPORT_RDMA;
	if (!strcmp(s, "auto"))
		return 0;
	return ~0u;
}

// One of our flags with its value @v: 0, or -EINVAL (said).
int parse_flag(remote_args &a, const std::string &f, const char *v)
{
	int ret = 0;

	if (f == "--client")
		a.client = v;
	else if (f == "--ip")
		a.ip = v;
	else if (f == "--port")
		ret = ferry__parse_u32(v, 65535, &a.port);
	else if (f == "--token-file")
		a.token_file = v;
	else if (f == "--spin-us") {
		ret = ferry__parse_u32(v, FERRY_LOOP_MAX_SPIN_US, &a.spin_us);
		a.spin_given = true;
	} else if (f == "-d") {
		a.device = v;
	} else if (f == "-i") {
		ret = ferry__parse_u32(v, 255, &a.ib_port);
		ret = ret < 0 || a.ib_port == 0 ? -EINVAL : 0;
		a.port_or_gid = true;
	} else if (f == "-x") {
		uint32_t g = 0;
		ret = ferry__parse_u32(v, 255, &g);
		a.gid = (int)g;
		a.port_or_gid = true;
	} else if (f == "-s") {
		// Bytes, as perftest's -s, up to 1 GiB; or several, comma-separated.
		std::string list = v;
		g_sizes.clear();
		for (size_t at = 0; ret == 0 && at <= list.size();) {
			size_t end = list.find(',', at);
			std::string one =
				list.substr(at, end == std::string::npos ? end : end - at);
			uint32_t size = 0;
			ret = ferry__parse_u32(one.c_str(), (uint32_t)GiB, &size);
			ret = ret < 0 || size == 0 ? -EINVAL : 0;
			g_sizes.push_back(size);
			at = end == std::string::npos ? list.size() + 1 : end + 1;
		}
		std::sort(g_sizes.begin(), g_sizes.end());
		g_sizes.erase(std::unique(g_sizes.begin(), g_sizes.end()), g_sizes.end());
	} else if ((a.transports = parse_transport(v)) == ~0u)
		ret = -EINVAL;
	if (ret < 0)
		fprintf(stderr, "ferry-bench transport: bad value for %s: %s\n", f.c_str(), v);
	return ret;
}

// Our flags out of @argv, the rest (Google Benchmark's, or unknown) into @rest.
int parse_args(remote_args &a, int argc, char **argv, std::vector<char *> &rest)
{
	for (int i = 1; i < argc; i++) {
		std::string f = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
		bool takes = f == "--client" || f == "--ip" || f == "--port" ||
			     f == "--token-file" || f == "--transport" || f == "--spin-us" ||
			     f == "-d" || f == "-i" || f == "-x" || f == "-s";

		if (f == "--help" || f == "-h") {
			ferry_bench_usage(stdout);
			exit(0);
		}
		if (takes && !v) {
			fprintf(stderr, "ferry-bench transport: %s needs a value\n", f.c_str());
			return -EINVAL;
		}
		if (takes && parse_flag(a, f, v) < 0)
			return -EINVAL;
		if (f == "--1gib")
			g_1gib = true;
		else if (f == "-a") // perftest: every power of two from 2 B to 8 MiB
			for (uint64_t size = 2; size <= 8 * MiB; size *= 2)
				g_sizes.push_back(size);
		else if (f == "--server")
			a.server = true;
		else if (!takes)
			rest.push_back(argv[i]);
		i += takes;
	}
	if (a.server && a.client) {
		fprintf(stderr, "ferry-bench transport: --server or --client, not both\n");
		return -EINVAL;
	}
	bool remote_only = a.device || a.port_or_gid || !g_sizes.empty();
	if (remote_only && !a.server && !a.client) {
		fprintf(stderr, "ferry-bench transport: -d, -i, -x, -s and -a are for "
				"--server/--client (the local rows have their own sizes)\n");
		return -EINVAL;
	}
	if (a.port_or_gid && !a.device) {
		fprintf(stderr, "ferry-bench transport: -i and -x go with -d DEVICE\n");
		return -EINVAL;
	}
	if (a.device && a.ip) {
		fprintf(stderr, "ferry-bench transport: -d or --ip, not both (-d names the "
				"address through the device's GID)\n");
		return -EINVAL;
	}
	if (a.spin_given && !a.server && !a.client) {
		fprintf(stderr, "ferry-bench transport: --spin-us is for --server/--client (the "
				"local rows busy-poll in BM_transport_*_spin_pull)\n");
		return -EINVAL;
	}
	return 0;
}

} // namespace

// `ferry-bench transport [--1gib] [--server | --client HOST:PORT] ...`; Google Benchmark's flags
// go to it, anything else is refused. Called by main.cc with argv[0] = "transport".
int ferry_bench_transport_main(int argc, char **argv)
{
	remote_args a;
	std::vector<char *> rest = {argv[0]};

	if (parse_args(a, argc, argv, rest) < 0) {
		ferry_bench_usage(stderr);
		return 2;
	}
	std::string filter = std::string("--benchmark_filter=") +
			     (a.client ? "BM_transport_remote_" : "BM_transport_");
	bool has_filter = false;
	for (char *r : rest)
		has_filter |= !strncmp(r, "--benchmark_filter", 18);
	if (!has_filter) // this suite only, unless asked otherwise
		rest.push_back(&filter[0]);
	argc = (int)rest.size();
	rest.push_back(nullptr);
	// Before anything starts: a mistyped flag must not cost a server or a node.
	if (ferry_bench_init(&argc, rest.data()) < 0)
		return 2;
	if (a.server || a.client) {
		if (device_ip(a) < 0 || read_token(a) < 0 || (a.server && server_ip(a) < 0))
			return 2;
		return a.server ? run_server(a) : run_client(a);
	}
	if (g_1gib)
		register_local(true);
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	g_pair.reset();
	return 0;
}
