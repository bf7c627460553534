// SPDX-License-Identifier: Apache-2.0
// ferry-bench entry point (Google Benchmark's own flags apply).
#include <benchmark/benchmark.h>

#include <cstring>

// transport_bench.cc: `ferry-bench transport ...` (two-host mode, --1gib).
int ferry_bench_transport_main(int argc, char **argv);
// redis_sub.cc: `ferry-bench redis-sub PORT CHANNEL COUNT` (bench/compare gcs).
int ferry_bench_redis_sub_main(int argc, char **argv);

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "transport"))
		return ferry_bench_transport_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "redis-sub"))
		return ferry_bench_redis_sub_main(argc - 1, argv + 1);
	benchmark::Initialize(&argc, argv);
	if (benchmark::ReportUnrecognizedArguments(argc, argv))
		return 1;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
