// SPDX-License-Identifier: Apache-2.0
// Shared helpers for the Google Benchmark suites: latency samples -> percentile counters.
#ifndef FERRY_BENCH_UTIL_H
#define FERRY_BENCH_UTIL_H

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace ferry_bench
{

inline uint64_t now_ns()
{
	return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
		       std::chrono::steady_clock::now().time_since_epoch())
		.count();
}

// Collects one duration per operation and publishes p50/p99 (microseconds) as counters, so the
// compare script reads percentiles, not just Google Benchmark's mean.
class Latency
{
      public:
	void reserve(size_t n)
	{
		samples_.reserve(n);
	}
	void add(uint64_t ns)
	{
		samples_.push_back(ns);
	}
	void publish(benchmark::State &state)
	{
		if (samples_.empty())
			return;
		std::sort(samples_.begin(), samples_.end());
		auto at = [&](double q) {
			return (double)samples_[(size_t)(q * (double)(samples_.size() - 1))] / 1e3;
		};
		state.counters["p50_us"] = at(0.50);
		state.counters["p99_us"] = at(0.99);
	}

      private:
	std::vector<uint64_t> samples_;
};

} // namespace ferry_bench

#endif
