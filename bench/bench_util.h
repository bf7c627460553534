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
// compare script reads percentiles, not just Google Benchmark's mean; with cdf, more quantiles.
class Latency
{
      public:
	// @cdf: publish the quantiles a CDF plot needs too, not only p50 and p99.
	explicit Latency(bool cdf = false) : cdf_(cdf)
	{
	}
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
		if (!cdf_)
			return;
		// Enough points for bench/report's latency CDFs (the whole distribution would
		// be too long a JSON), the tail's too.
		state.counters["p1_us"] = at(0.01);
		state.counters["p10_us"] = at(0.10);
		state.counters["p25_us"] = at(0.25);
		state.counters["p75_us"] = at(0.75);
		state.counters["p90_us"] = at(0.90);
		state.counters["p999_us"] = at(0.999);
	}

      private:
	std::vector<uint64_t> samples_;
	bool cdf_;
};

} // namespace ferry_bench

#endif
