// SPDX-License-Identifier: Apache-2.0
// What the subcommands of ferry-bench share with its main (main.cc).
#ifndef FERRY_BENCH_MAIN_H
#define FERRY_BENCH_MAIN_H

#include <cstdio>

// ferry_bench_usage() - on stdout ferry-bench's flags and Google Benchmark's; on stderr (after
// a refused argument) one line saying where to find them.
void ferry_bench_usage(FILE *out);

// ferry_bench_init() - Google Benchmark's flags out of @argv (its --help prints ours and
// exits 0), and the Ferry commit into the JSON context. -1 (said on stderr, with the usage)
// when anything else is left over: nothing runs on a mistyped flag.
int ferry_bench_init(int *argc, char **argv);

#endif
