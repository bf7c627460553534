// SPDX-License-Identifier: Apache-2.0
// ferry-bench entry point: its own flags (--help, --version), the subcommands, and Google
// Benchmark's flags for the suites; anything else is refused.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>

#include "bench_main.h"

extern "C" {
#include "common/version.h"
}

// transport_bench.cc: `ferry-bench transport ...` (two-host mode, --1gib).
int ferry_bench_transport_main(int argc, char **argv);
// redis_sub.cc: `ferry-bench redis-sub PORT CHANNEL COUNT` (bench/compare gcs).
int ferry_bench_redis_sub_main(int argc, char **argv);

static const char usage_text[] =
	"usage: ferry-bench [BENCHMARK FLAGS]       every suite (plasma, gcs, transport, limits)\n"
	"       ferry-bench transport [--1gib] [BENCHMARK FLAGS]\n"
	"                                           pulls between two nodes in this process\n"
	"       ferry-bench transport --server --token-file F [--ip ADDR|IFACE | -d DEV [-i PORT]\n"
	"                             [-x GID]] [--port P] [--transport tcp|rdma|auto]\n"
	"                             [--spin-us US] [-s SIZE | -a] [--1gib]\n"
	"                                           two hosts: this one holds the objects\n"
	"       ferry-bench transport --client HOST:PORT --token-file F [--ip ADDR|IFACE |\n"
	"                             -d DEV [-i PORT] [-x GID]] [--transport tcp|rdma|auto]\n"
	"                             [--spin-us US] [-s SIZE | -a] [--1gib] [BENCHMARK FLAGS]\n"
	"                                           two hosts: this one pulls (HOST:PORT is\n"
	"                                           what the server printed)\n"
	"       ferry-bench redis-sub PORT CHANNEL COUNT   (used by bench/compare gcs)\n"
	"       ferry-bench --help | --version\n"
	"\n"
	"  --1gib          1 GiB objects too (stores sized for them)\n"
	"  --ip ADDR|IFACE where this side's node serves; default: the address it reaches the\n"
	"                  server's GCS through (client), 127.0.0.1 (server: one host only)\n"
	"  --port P        the server's GCS port (default 6390)\n"
	"  --transport T   tcp, rdma or auto (default auto: RDMA where a device serves --ip)\n"
	"  --spin-us US    the nodes' busy-poll window (ferry-node --spin-us; default 0: sleep)\n"
	"  --token-file F  the cluster token, the same file on both hosts\n"
	"  -d DEV          as perftest: the RDMA device whose GID names this side's address\n"
	"                  (rdma_cm binds by address); implies --transport rdma unless given\n"
	"  -i PORT         its port (default 1)\n"
	"  -x GID          its GID index (default: the first GID that carries an address)\n"
	"  -s SIZE[,SIZE]  object sizes in bytes (both sides the same)\n"
	"  -a              every power of two from 2 B to 8 MiB, as perftest -a (both sides)\n"
	"\n"
	"Every transport row's label names the transport the pulls used and the Ferry commit;\n"
	"the JSON output (--benchmark_format=json) has both, the commit also as ferry_commit.\n"
	"\n"
	"BENCHMARK FLAGS (Google Benchmark's):\n";

void ferry_bench_usage(FILE *out)
{
	if (out != stdout) { /* after an error: where to look, not the whole list */
		fputs("ferry-bench --help lists the flags\n", out);
		return;
	}
	fputs(usage_text, out);
	fflush(out);
	benchmark::PrintDefaultHelp();
}

static void help(void)
{
	ferry_bench_usage(stdout);
}

int ferry_bench_init(int *argc, char **argv)
{
	benchmark::Initialize(argc, argv, help); // --help: help() and exit 0
	if (*argc > 1) {
		for (int i = 1; i < *argc; i++)
			fprintf(stderr, "ferry-bench: unknown argument %s\n", argv[i]);
		ferry_bench_usage(stderr);
		return -1;
	}
	benchmark::AddCustomContext("ferry_commit", ferry__version_commit());
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		help();
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "--version")) {
		printf("ferry-bench (Ferry) commit %s\n", ferry__version_commit());
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "transport"))
		return ferry_bench_transport_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "redis-sub"))
		return ferry_bench_redis_sub_main(argc - 1, argv + 1);
	if (ferry_bench_init(&argc, argv) < 0)
		return 2;
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
