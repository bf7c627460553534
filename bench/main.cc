// SPDX-License-Identifier: Apache-2.0
// ferry-bench entry point (Google Benchmark's own flags apply).
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
