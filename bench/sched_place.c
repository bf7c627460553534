/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched-place-bench: place requests per second through one ferry-sched, from one client
 * (sched/client.h) on its own loop, as a node's local scheduler sends them: --batch requests in
 * one loop turn (one SchedPlace), --inflight batches outstanding. Each request asks for one
 * CPU. Run it against a
 * cluster of simulated nodes (bench/sched_place.sh starts ferry-gcs, ferry-nodesim, ferry-sched).
 * Prints one line: "SCHEDBENCH key=value ...".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/loop.h"
#include "common/token.h"
#include "common/util.h"
#include "gcs/client.h"
#include "sched/client.h"

struct bench {
	struct ferry__loop *loop;	 /* ours */
	struct ferry_gcs_client *gcs;	 /* on it */
	struct ferry__sched_client *sc;	 /* the client measured */
	uint64_t total, batch, inflight; /* options */
	uint32_t wait_nodes;		 /* --wait-nodes: load reports the GCS must hold first */
	uint64_t issued, answered, ok;	 /* progress */
	int last_status;		 /* of a refused one */
	struct ferry__loop_timer guard;	 /* the whole run's deadline */
	bool warm;			 /* the scheduler answered once */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void issue_batch(struct bench *b);

static void on_placed(void *arg, int status, const struct ferry_node_id *node, const char *addr)
{
	struct bench *b = arg;

	(void)node, (void)addr;
	if (!b->warm) {
		b->warm = true;
		b->last_status = status;
		ferry__loop_stop(b->loop);
		return;
	}
	b->answered++;
	if (status == 0)
		b->ok++;
	else
		b->last_status = status;
	if (b->answered == b->total)
		ferry__loop_stop(b->loop);
	else if (b->answered % b->batch == 0)
		issue_batch(b);
}

static void place_one(struct bench *b, uint64_t id)
{
	struct ferry__res cpu = {"CPU", FERRY__SCHED_UNIT};
	struct ferry__sched_place_req q = {.id = id, .res = &cpu, .nres = 1};

	if (ferry__sched_client_place(b->sc, &q, on_placed, b) < 0) {
		fprintf(stderr, "ferry-sched-place-bench: place failed\n");
		exit(1);
	}
}

static void issue_batch(struct bench *b)
{
	for (uint64_t i = 0; i < b->batch && b->issued < b->total; i++)
		place_one(b, 1000 + b->issued++);
}

static void on_guard(struct ferry__loop_timer *t, int status)
{
	struct bench *b = t->data;

	if (status == 0) {
		fprintf(stderr, "ferry-sched-place-bench: deadline, %llu of %llu answered\n",
			(unsigned long long)b->answered, (unsigned long long)b->total);
		exit(1);
	}
}

/* Until the GCS holds @n nodes' load reports (the simulated nodes are up); the scheduler,
 * which follows them, a moment later. */
static int wait_nodes(const struct ferry_gcs_client_opts *go, uint32_t n)
{
	struct ferry_gcs_client *c;
	int got = 0;

	if (ferry_gcs_client_connect(go, &c) < 0)
		return -1;
	for (int i = 0; i < 1200 && got < (int)n; i++) {
		struct ferry_gcs_node_load *loads = NULL;

		got = ferry_gcs_node_load_list(c, &loads);
		ferry_gcs_free(loads);
		if (got < (int)n)
			usleep(100 * 1000);
	}
	ferry_gcs_client_destroy(c);
	if (got < (int)n) {
		fprintf(stderr, "ferry-sched-place-bench: %d of %u nodes reported\n", got, n);
		return -1;
	}
	usleep(500 * 1000);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench b = {.total = 200000, .batch = 256, .inflight = 4};
	struct ferry_gcs_client_opts go = {0};
	struct ferry_node_id self;
	const char *gcs = NULL, *token_file = NULL;
	char token[FERRY_TOKEN_MAX];
	uint64_t t0, t1;
	int len;

	for (int i = 1; i + 1 < argc; i += 2) {
		uint32_t v = 0;

		if (!strcmp(argv[i], "--gcs"))
			gcs = argv[i + 1];
		else if (!strcmp(argv[i], "--token-file"))
			token_file = argv[i + 1];
		else if (ferry__parse_u32(argv[i + 1], UINT32_MAX, &v) < 0 || v == 0)
			goto usage;
		else if (!strcmp(argv[i], "--requests"))
			b.total = v;
		else if (!strcmp(argv[i], "--batch") && v <= FERRY__SCHED_BATCH_MAX)
			b.batch = v;
		else if (!strcmp(argv[i], "--inflight"))
			b.inflight = v;
		else if (!strcmp(argv[i], "--wait-nodes"))
			b.wait_nodes = v;
		else
			goto usage;
	}
	if (!gcs || !token_file)
		goto usage;
	len = ferry__token_read(token_file, token, sizeof(token));
	if (len < 0)
		return 1;
	go.addresses = &gcs;
	go.naddresses = 1;
	go.token = token;
	go.token_len = (size_t)len;
	ferry_id_random(self.bytes, sizeof(self.bytes));
	if (b.wait_nodes && wait_nodes(&go, b.wait_nodes) < 0)
		return 1;
	if (ferry__loop_create(NULL, &b.loop) < 0 ||
	    ferry__gcs_client_connect_on(b.loop, &go, &b.gcs) < 0 ||
	    ferry__sched_client_new(b.loop, b.gcs, token, (size_t)len, &self, &b.sc) < 0)
		return 1;
	ferry__sched_client_set_timing(b.sc, 30000, 0, 0);
	b.guard.data = &b;
	ferry__loop_timer_start(b.loop, &b.guard, 600000, 0, on_guard);
	/* Until the scheduler has its view (its GCS snapshots): -EAGAIN. */
	for (int tries = 0; tries < 600 && (!b.warm || b.last_status == -EAGAIN); tries++) {
		b.warm = false;
		place_one(&b, 1);
		ferry__loop_run(b.loop);
		if (b.last_status == -EAGAIN)
			usleep(100 * 1000);
	}
	if (b.last_status != 0) {
		fprintf(stderr, "ferry-sched-place-bench: warm-up: %s\n",
			ferry_strerror(-b.last_status));
		return 1;
	}
	t0 = now_ns();
	for (uint64_t k = 0; k < b.inflight; k++)
		issue_batch(&b);
	ferry__loop_run(b.loop);
	t1 = now_ns();
	printf("SCHEDBENCH requests=%llu batch=%llu inflight=%llu placed=%llu seconds=%.3f "
	       "per_s=%.0f last_error=%d\n",
	       (unsigned long long)b.total, (unsigned long long)b.batch,
	       (unsigned long long)b.inflight, (unsigned long long)b.ok, (double)(t1 - t0) / 1e9,
	       (double)b.total * 1e9 / (double)(t1 - t0), b.last_status);
	ferry__loop_timer_stop(&b.guard);
	ferry__sched_client_free(b.sc);
	ferry_gcs_client_destroy(b.gcs);
	ferry__loop_destroy(b.loop);
	return b.ok == b.total ? 0 : 1;
usage:
	fprintf(stderr,
		"usage: ferry-sched-place-bench --gcs HOST:PORT --token-file F [--requests N] "
		"[--batch B] [--inflight K] [--wait-nodes N]\n");
	return 2;
}
