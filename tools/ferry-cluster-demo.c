/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-cluster-demo: objects moving between nodes. One process runs a GCS and node A, which
 * puts objects of several sizes; a second process runs node B (TCP only) and node C (TCP and
 * shared memory), which pull every object through their object managers. It prints, for each
 * pull, where the bytes came from, over which transport, how long it took, and the figures
 * beside this machine's own limits measured in the same run (a loopback TCP stream and round
 * trip, memcpy into shared memory). Everything it starts is stopped and removed.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "common/version.h"
#include "cluster/embed.h"

#define MIB (1ull << 20)
#define TOKEN "ferry-cluster-demo"

/* What node A holds: counts of each size. */
static const struct {
	uint64_t size;	/* bytes */
	unsigned count; /* objects */
} objects[] = {{64, 4}, {MIB, 4}, {64 * MIB, 2}};

/* What the first process tells the second. */
struct hello {
	uint16_t gcs_port;	/* the GCS */
	struct ferry_node_id a; /* node A */
	int status;		/* 0, or why A could not start */
};

static struct ferry_object_id object_id(unsigned kind, unsigned n)
{
	struct ferry_object_id id;

	memset(id.bytes, 0xde, sizeof(id.bytes));
	id.bytes[0] = (uint8_t)(kind * 16 + n + 1);
	id.bytes[1] = (uint8_t)kind;
	return id;
}

/* ---- process 1: GCS and node A ---- */

static int serve_a(int hello_fd, int stop_fd)
{
	struct ferry__embed_node_opts o = {0};
	struct ferry__embed_gcs *gcs = NULL;
	struct ferry__embed_node *a = NULL;
	struct hello h = {0};
	char addr[64], byte;
	int ret;

	ret = ferry__embed_gcs_start("127.0.0.1", 0, TOKEN, strlen(TOKEN), &gcs);
	if (ret == 0) {
		h.gcs_port = ferry__embed_gcs_port(gcs);
		snprintf(addr, sizeof(addr), "127.0.0.1:%u", h.gcs_port);
		o.gcs = addr;
		o.token = TOKEN;
		o.token_len = strlen(TOKEN);
		o.memory_bytes = 512 * MIB;
		o.name = "A";
		ret = ferry__embed_node_start(&o, &a);
	}
	for (unsigned k = 0; ret == 0 && k < FERRY_ARRAY_SIZE(objects); k++)
		for (unsigned n = 0; ret == 0 && n < objects[k].count; n++) {
			struct ferry_object_id id = object_id(k, n);

			ret = ferry__embed_put(a, &id, objects[k].size);
		}
	if (ret == 0) {
		h.a = *ferry__embed_node_id(a);
		unsigned t = ferry__objmgr_transports(ferry__embed_node_objmgr(a));

		printf("  started   GCS on %s and node A (process %d) at %s\n", addr, (int)getpid(),
		       ferry__embed_node_address(a));
		/* Most machines have no RDMA device: a fact to state, not a warning. */
		printf("  node A    serves %s%s%s\n", t & FERRY_GCS_TRANSPORT_RDMA ? "rdma+" : "",
		       "tcp+shm",
		       t & FERRY_GCS_TRANSPORT_RDMA ? ""
						    : " (no RDMA device on this machine: TCP and "
						      "shared memory carry every "
						      "pull)");
		printf("  node A    put 4 x 64 B, 4 x 1 MiB, 2 x 64 MiB and recorded them in the "
		       "GCS object directory\n");
		fflush(stdout);
	}
	h.status = ret;
	if (write(hello_fd, &h, sizeof(h)) != (ssize_t)sizeof(h))
		ret = -EIO;
	/* Serve until the other process is done (it closes the pipe, also if it dies). */
	while (ret == 0 && read(stop_fd, &byte, 1) > 0)
		;
	ferry__embed_node_stop(a);
	ferry__embed_gcs_stop(gcs);
	return ret < 0 ? 1 : 0;
}

/* ---- this machine's limits, in the same run ---- */

struct tcp_pair {
	int a, b; /* connected loopback sockets */
};

static int tcp_pair_open(struct tcp_pair *p)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	p->a = p->b = -1;
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&sa, &len) < 0)
		goto out;
	p->a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (p->a < 0 || connect(p->a, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	p->b = accept(l, NULL, NULL);
	setsockopt(p->a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(p->b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
out:
	if (l >= 0)
		close(l);
	return p->a >= 0 && p->b >= 0 ? 0 : -1;
}

static void tcp_pair_close(struct tcp_pair *p)
{
	if (p->a >= 0)
		close(p->a);
	if (p->b >= 0)
		close(p->b);
}

static void *sink(void *arg)
{
	static char buf[1 << 20];
	int fd = *(int *)arg;

	while (read(fd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

/* One TCP stream over loopback for ~1 s (what iperf3 measures): GB/s. */
static double tcp_stream_gbps(void)
{
	struct tcp_pair p;
	pthread_t t;
	char *buf = malloc(MIB);
	uint64_t sent = 0, t0 = ferry__now_ns();

	if (!buf || tcp_pair_open(&p) < 0 || pthread_create(&t, NULL, sink, &p.b)) {
		free(buf);
		return 0;
	}
	memset(buf, 0x5a, MIB);
	while (ferry__now_ns() - t0 < 1000000000ull) {
		ssize_t n = write(p.a, buf, MIB);

		if (n <= 0)
			break;
		sent += (uint64_t)n;
	}
	shutdown(p.a, SHUT_WR);
	pthread_join(t, NULL);
	tcp_pair_close(&p);
	free(buf);
	return (double)sent / ((double)(ferry__now_ns() - t0) / 1e9) / 1e9;
}

static void *echo(void *arg)
{
	char buf[64];
	int fd = *(int *)arg;

	while (read(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf) &&
	       write(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf))
		;
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A 64-byte ping-pong over loopback TCP between two threads: p50 in us. */
static double tcp_rtt_us(void)
{
	uint64_t lat[2000];
	char buf[64] = {0};
	struct tcp_pair p;
	pthread_t t;
	int i;

	if (tcp_pair_open(&p) < 0 || pthread_create(&t, NULL, echo, &p.b))
		return 0;
	for (i = 0; i < 2000; i++) {
		uint64_t t0 = ferry__now_ns();

		if (write(p.a, buf, sizeof(buf)) != (ssize_t)sizeof(buf) ||
		    read(p.a, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			break;
		lat[i] = ferry__now_ns() - t0;
	}
	shutdown(p.a, SHUT_RDWR);
	pthread_join(t, NULL);
	tcp_pair_close(&p);
	qsort(lat, (size_t)i, sizeof(lat[0]), cmp_u64);
	return i ? (double)lat[i / 2] / 1e3 : 0;
}

/* memcpy of 64 MiB into prefaulted shared memory, best of five: GB/s. */
static double memcpy_gbps(void)
{
	size_t size = 64 * MIB;
	char *src = malloc(size);
	void *dst = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	double best = 0;

	if (src && dst != MAP_FAILED) {
		memset(src, 1, size);
		for (int i = 0; i < 5; i++) {
			uint64_t t0 = ferry__now_ns();
			double s;

			memcpy(dst, src, size);
			s = (double)(ferry__now_ns() - t0) / 1e9;
			best = i && best < s ? best : s;
		}
	}
	if (dst != MAP_FAILED)
		munmap(dst, size);
	free(src);
	return best > 0 ? (double)size / best / 1e9 : 0;
}

/* ---- process 2: nodes B and C pull ---- */

struct pullers {
	struct ferry_node_id a;	     /* node A */
	struct ferry__embed_node *b; /* TCP only */
	struct ferry__embed_node *c; /* TCP and shared memory */
};

static char node_letter(const struct pullers *p, const struct ferry_node_id *id)
{
	if (!memcmp(id, &p->a, sizeof(*id)))
		return 'A';
	if (!memcmp(id, ferry__embed_node_id(p->b), sizeof(*id)))
		return 'B';
	if (!memcmp(id, ferry__embed_node_id(p->c), sizeof(*id)))
		return 'C';
	return '?';
}

static const char *transport_name(unsigned t)
{
	return t == FERRY_GCS_TRANSPORT_TCP    ? "tcp"
	       : t == FERRY_GCS_TRANSPORT_SHM  ? "shm"
	       : t == FERRY_GCS_TRANSPORT_RDMA ? "rdma"
					       : "local";
}

static void print_size(uint64_t size, char *buf, size_t len)
{
	if (size >= MIB)
		snprintf(buf, len, "%" PRIu64 " MiB", (uint64_t)(size / MIB));
	else
		snprintf(buf, len, "%" PRIu64 " B", size);
}

/* Pull one object on @n, check its bytes, print the row. Returns the pull's status. */
static int pull_one(const struct pullers *p, struct ferry__embed_node *n, char letter,
		    unsigned kind, unsigned index)
{
	struct ferry_object_id id = object_id(kind, index);
	struct ferry__objmgr_result res;
	char hex[41], size[32], rate[32];
	uint64_t t0 = ferry__now_ns(), ns;
	int ret = ferry__embed_pull_all(n, &id, 1, &res), check = 0;

	ns = ferry__now_ns() - t0;
	ferry_id_to_hex(&id, sizeof(id), hex, sizeof(hex));
	print_size(objects[kind].size, size, sizeof(size));
	if (ret == 0)
		check = ferry__embed_check(n, &id, objects[kind].size);
	if (ret < 0 || check < 0) {
		printf("    %.10s..  %7s  node %c  FAILED: %s\n", hex, size, letter,
		       ferry_strerror(ret < 0 ? ret : check));
		return ret < 0 ? ret : check;
	}
	if (objects[kind].size >= MIB)
		snprintf(rate, sizeof(rate), "%8.2f GB/s",
			 (double)objects[kind].size / ((double)ns / 1e9) / 1e9);
	else
		snprintf(rate, sizeof(rate), "%13s", "");
	printf("    %.10s..  %7s  node %c  from node %c  over %-5s %9.1f us %s  bytes ok\n", hex,
	       size, letter, node_letter(p, &res.source), transport_name(res.transport),
	       (double)ns / 1e3, rate);
	return 0;
}

/* Pull @id on @n @rounds times (dropping the copy between): p50 latency and best rate. */
static int measure(struct ferry__embed_node *n, unsigned kind, unsigned rounds, double *p50_us,
		   double *best_gbps, unsigned *transport)
{
	struct ferry_object_id id = object_id(kind, 0);
	uint64_t lat[256];
	struct ferry__objmgr_result res;
	int ret = ferry__embed_drop(n, &id, 1);

	(void)ret; /* nothing to drop the first time */
	for (unsigned i = 0; i < rounds; i++) {
		uint64_t t0 = ferry__now_ns();

		ret = ferry__embed_pull_all(n, &id, 1, &res);
		lat[i] = ferry__now_ns() - t0;
		if (ret < 0)
			return ret;
		*transport = res.transport;
		ret = ferry__embed_drop(n, &id, 1);
		if (ret < 0)
			return ret;
	}
	qsort(lat, rounds, sizeof(lat[0]), cmp_u64);
	*p50_us = (double)lat[rounds / 2] / 1e3;
	*best_gbps = (double)objects[kind].size / ((double)lat[0] / 1e9) / 1e9;
	return 0;
}

/* One figure line: @what measured on @n, beside @limit (@limit_name). */
static int figure(struct ferry__embed_node *n, unsigned kind, bool small, const char *limit_name,
		  double limit)
{
	double p50, best, v;
	unsigned t = 0;
	int ret = measure(n, kind, small ? 200 : 3, &p50, &best, &t);

	v = small ? p50 : best;
	if (ret < 0) {
		printf("    %s pull: FAILED (%s)\n", small ? "64 B" : "64 MiB",
		       ferry_strerror(ret));
		return ret;
	}
	printf("    %-6s pull %-4s %8.2f %-5s  %-28s %8.2f %-5s  ratio %.2f\n",
	       small ? "64 B" : "64 MiB", transport_name(t), v, small ? "us" : "GB/s", limit_name,
	       limit, small ? "us" : "GB/s", limit > 0 ? v / limit : 0);
	return 0;
}

static int figures(const struct pullers *p)
{
	double tcp_gbps = tcp_stream_gbps(), rtt = tcp_rtt_us(), mc = memcpy_gbps();
	int ret = 0;

	printf("\n  figures (pulls repeated: p50 of 200 small, best of 3 large; the limits "
	       "measured now).\n"
	       "  The nodes sleep while idle instead of busy-polling, so a small pull includes\n"
	       "  waking their threads (ferry-node --spin-us trades CPU for that latency):\n");
	ret |= figure(p->b, 2, false, "one loopback TCP stream", tcp_gbps);
	ret |= figure(p->c, 2, false, "memcpy into shared memory", mc);
	ret |= figure(p->b, 0, true, "loopback TCP round trip p50", rtt);
	ret |= figure(p->c, 0, true, "loopback TCP round trip p50", rtt);
	return ret;
}

static int start_puller(uint16_t gcs_port, const char *name, unsigned transports,
			struct ferry__embed_node **out)
{
	struct ferry__embed_node_opts o = {0};
	char addr[64];

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", gcs_port);
	o.gcs = addr;
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	o.memory_bytes = 512 * MIB;
	o.transports = transports;
	o.name = name;
	return ferry__embed_node_start(&o, out);
}

static int pull_everything(const struct hello *h)
{
	struct pullers p = {.a = h->a};
	int ret, failed = 0;

	ret = start_puller(h->gcs_port, "B", FERRY_GCS_TRANSPORT_TCP, &p.b);
	if (ret == 0)
		ret = start_puller(h->gcs_port, "C",
				   FERRY_GCS_TRANSPORT_TCP | FERRY_GCS_TRANSPORT_SHM, &p.c);
	if (ret < 0) {
		printf("  nodes B and C did not start: %s\n", ferry_strerror(ret));
		goto out;
	}
	printf("  started   node B (tcp) and node C (tcp + shm) in process %d\n", (int)getpid());
	printf("\n  every object pulled by C, then by B (B may take it from A or from C);\n"
	       "  a node's first pulls are cold (it connects, learns where objects live, its\n"
	       "  store's pages are touched for the first time): the figures below repeat pulls\n");
	for (unsigned k = 0; k < FERRY_ARRAY_SIZE(objects); k++)
		for (unsigned n = 0; n < objects[k].count; n++)
			failed |= pull_one(&p, p.c, 'C', k, n) < 0;
	for (unsigned k = 0; k < FERRY_ARRAY_SIZE(objects); k++)
		for (unsigned n = 0; n < objects[k].count; n++)
			failed |= pull_one(&p, p.b, 'B', k, n) < 0;
	/* B serves no shm: without its copies, C's repeated pulls below take A's, over shm. */
	for (unsigned k = 0; k < FERRY_ARRAY_SIZE(objects); k++)
		for (unsigned n = 0; n < objects[k].count; n++) {
			struct ferry_object_id id = object_id(k, n);

			failed |= ferry__embed_drop(p.b, &id, 1) < 0;
		}
	ret = figures(&p);
out:
	ferry__embed_node_stop(p.c);
	ferry__embed_node_stop(p.b);
	return ret < 0 || failed ? 1 : 0;
}

static const char demo_usage[] =
	"usage: ferry-cluster-demo [--help | --version]\n"
	"Runs a GCS and three nodes on this machine, pulls objects between them over TCP and\n"
	"shared memory, and prints each pull beside this machine's own limits.\n";

int main(int argc, char **argv)
{
	int hello_pipe[2], stop_pipe[2], status = 0, rc;
	struct hello h;
	pid_t a;

	if (argc > 1)
		return ferry__args_none(argc, argv, "ferry-cluster-demo", demo_usage);

	printf("ferry cluster demo: a GCS and nodes on this machine, objects pulled between "
	       "them\n\n");
	fflush(stdout);
	if (pipe(hello_pipe) < 0 || pipe(stop_pipe) < 0) {
		perror("ferry-cluster-demo: pipe");
		return 1;
	}
	a = fork();
	if (a < 0) {
		perror("ferry-cluster-demo: fork");
		return 1;
	}
	if (a == 0) {
		close(hello_pipe[0]);
		close(stop_pipe[1]);
		_exit(serve_a(hello_pipe[1], stop_pipe[0]));
	}
	close(hello_pipe[1]);
	close(stop_pipe[0]);
	if (read(hello_pipe[0], &h, sizeof(h)) != (ssize_t)sizeof(h) || h.status < 0) {
		fprintf(stderr, "ferry-cluster-demo: GCS and node A did not start: %s\n",
			ferry_strerror(h.status < 0 ? h.status : -EIO));
		rc = 1;
	} else {
		rc = pull_everything(&h);
	}
	close(stop_pipe[1]); /* A's process stops */
	close(hello_pipe[0]);
	waitpid(a, &status, 0);
	printf("\n  stopped   every node and the GCS (process %d exit %d)\n", (int)a,
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	printf("\n  next: a cluster of your own: `ferry start --head` on one host, then on each "
	       "other\n"
	       "  host the `ferry start --address ...` line it prints; `ferry status` lists the\n"
	       "  nodes. Measure pulls between two hosts: `ferry-bench --help`.\n");
	return rc || !WIFEXITED(status) || WEXITSTATUS(status) ? 1 : 0;
}
