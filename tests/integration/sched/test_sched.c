/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched as it runs: a real ferry-gcs, one or two ferry-sched processes, and nodes that
 * register and report their load through the GCS's public client as ferry-node does (their
 * resources chosen per test: a GPU node, a CPU node). The client under test
 * (sched/client.h) runs on a loop of this process, as it does on a node's.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/frame.h"
#include "common/log.h"
#include "common/loop.h"
#include "gcs/client.h"
#include "sched/client.h"
#include "sched/proto.h"
#include "tests/harness/ftest.h"
#include "tests/integration/gcs/gcs_procs.h"
#include "tests/integration/procs.h"
#include "tests/integration/sched/sched_procs.h"

#define MIB (1ull << 20)
#define UNIT FERRY_GCS_RESOURCE_UNIT
#define MAX_REQ 512

/* A node as ferry-node registers it, with the load it reports. */
static void node_add(struct ferry_gcs_client *admin, struct ferry_node_id *id, const char *addr,
		     int64_t cpus, int64_t gpus, int64_t cpus_free)
{
	struct ferry_gcs_node_info info = {0};
	struct ferry_gcs_resource_load res[2] = {
		{.name = "CPU", .total = cpus * UNIT, .available = cpus_free * UNIT},
		{.name = "GPU", .total = gpus * UNIT, .available = gpus * UNIT},
	};
	struct ferry_gcs_node_load load = {0};

	ferry_id_random(id->bytes, sizeof(id->bytes));
	info.id = *id;
	info.address = addr;
	info.cpu = (double)cpus;
	info.gpu = (double)gpus;
	info.state = FERRY_GCS_NODE_ALIVE;
	ftest_assert_int_ge(ferry_gcs_node_register(admin, &info), 0);
	load.id = *id;
	load.version = 1;
	load.nresources = gpus ? 2 : 1;
	load.resources = res;
	ftest_assert_int_eq(ferry_gcs_node_report_load(admin, &load), 1);
}

/* ---- the client side, on a loop of this process ---- */

struct answer {
	int status;		   /* -1000: not yet */
	struct ferry_node_id node; /* status 0 */
	char address[128];	   /* status 0 */
	unsigned hops;		   /* status 0: schedulers the request reached */
};

struct runner {
	struct ferry__loop *loop;	/* the node's loop, here */
	struct ferry_gcs_client *gcs;	/* on it */
	struct ferry__sched_client *sc; /* under test */
	struct answer ans[MAX_REQ];	/* by request id */
	unsigned answered, want;	/* stop when answered reaches want */
	struct ferry__loop_timer guard; /* a hang guard, not a speed check */
	struct ferry_node_id self;	/* the asking node */
};

static struct runner R;

static void runner_init(uint16_t gcs_port, const char *token)
{
	char addr[64];
	const char *list[] = {addr};
	struct ferry_gcs_client_opts o = {.addresses = list, .naddresses = 1};

	memset(&R, 0, sizeof(R));
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", gcs_port);
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	o.timeout_ms = 5000;
	ftest_assert_ok(ferry__loop_create(NULL, &R.loop));
	ftest_assert_ok(ferry__gcs_client_connect_on(R.loop, &o, &R.gcs));
	ferry_id_random(R.self.bytes, sizeof(R.self.bytes));
	ftest_assert_ok(
		ferry__sched_client_new(R.loop, R.gcs, token, strlen(token), &R.self, &R.sc));
	ferry__sched_client_set_timing(R.sc, 1000, 100, 3);
	for (unsigned i = 0; i < MAX_REQ; i++)
		R.ans[i].status = -1000;
}

static void runner_fini(void)
{
	ferry__sched_client_free(R.sc);
	ferry_gcs_client_destroy(R.gcs);
	ferry__loop_destroy(R.loop);
}

static void on_placed(void *arg, int status, const struct ferry_node_id *node, const char *address)
{
	struct answer *a = arg;

	ftest_assert_int_eq(a->status, -1000); /* exactly once */
	a->status = status;
	if (status == 0) {
		a->node = *node;
		snprintf(a->address, sizeof(a->address), "%s", address);
		a->hops = ferry__sched_client_hops(R.sc);
	} else {
		ftest_assert_ptr_null(node);
	}
	if (++R.answered >= R.want)
		ferry__loop_stop(R.loop);
}

static void on_guard(struct ferry__loop_timer *t, int status)
{
	(void)t;
	if (status == 0)
		ferry__loop_stop(R.loop);
}

/* Run the loop until @want answers in all, or @ms. */
static void run_until(unsigned want, unsigned ms)
{
	R.want = want;
	if (R.answered < want) {
		ferry__loop_timer_start(R.loop, &R.guard, ms, 0, on_guard);
		ferry__loop_run(R.loop);
		ferry__loop_timer_stop(&R.guard);
	}
}

struct req_spec {
	const char *res1;		      /* first resource name */
	int64_t amount1;		      /* in units */
	const char *res2;		      /* NULL: none */
	int64_t amount2;		      /* units */
	int strategy;			      /* enum ferry__sched_strategy */
	const struct ferry_node_id *affinity; /* NODE_AFFINITY */
	bool soft;			      /* NODE_AFFINITY */
	const struct ferry_node_id *input_on; /* a 64 MiB input there, or NULL */
};

static void place(uint64_t id, const struct req_spec *s)
{
	struct ferry__res res[2] = {{.amount = 0}};
	struct ferry__sched_place_input in = {0};
	struct ferry__sched_place_req q = {.id = id, .res = res, .strategy = s->strategy};

	snprintf(res[0].name, sizeof(res[0].name), "%s", s->res1);
	res[0].amount = s->amount1 * UNIT;
	q.nres = 1;
	if (s->res2) {
		snprintf(res[1].name, sizeof(res[1].name), "%s", s->res2);
		res[1].amount = s->amount2 * UNIT;
		q.nres = 2;
	}
	if (s->affinity)
		q.affinity = *s->affinity;
	q.soft = s->soft;
	if (s->input_on) {
		in.node = *s->input_on;
		in.bytes = 64 * MIB;
		q.inputs = &in;
		q.ninputs = 1;
	}
	R.ans[id].status = -1000;
	ftest_assert_ok(ferry__sched_client_place(R.sc, &q, on_placed, &R.ans[id]));
}

/* One request, answered; retried while the scheduler has not seen the GCS's snapshot. */
static int place_one(uint64_t id, const struct req_spec *s)
{
	for (int tries = 0; tries < 100; tries++) {
		R.answered = 0;
		place(id, s);
		run_until(1, 10000);
		ftest_assert_int_ne(R.ans[id].status, -1000);
		if (R.ans[id].status != -EAGAIN)
			return R.ans[id].status;
		usleep(50 * 1000);
	}
	return -EAGAIN;
}

static bool same_node(const struct ferry_node_id *a, const struct ferry_node_id *b)
{
	return !memcmp(a->bytes, b->bytes, sizeof(a->bytes));
}

/* A GCS with a CPU node (4 CPUs, 1 free) and a GPU node (8 CPUs all free, 2 GPUs), one
 * ferry-sched, and the client. */
struct cluster {
	struct gcs_proc gcs;			 /* ferry-gcs */
	struct ferry_gcs_client *admin;		 /* registers the nodes */
	struct ferry_node_id cpu_node, gpu_node; /* the nodes */
	struct sched_proc sched;		 /* ferry-sched */
};

/* The nodes registered here send no heartbeats: the GCS must not declare them dead during a
 * test, however slow the machine (a sanitizer build). */
static const char *const long_deadline[] = {"--node-deadline-ms", "600000", NULL};

static void cluster_start(struct cluster *c)
{
	c->gcs = gcs_start(0, long_deadline);
	c->admin = client_for(&c->gcs, 1, TOKEN);
	node_add(c->admin, &c->cpu_node, "ip=127.0.0.1;tcp=1001", 4, 0, 1);
	node_add(c->admin, &c->gpu_node, "ip=127.0.0.1;tcp=1002", 8, 2, 8);
	c->sched = sched_start(c->gcs.port, token_file());
	runner_init(c->gcs.port, TOKEN);
}

static void cluster_stop(struct cluster *c)
{
	runner_fini();
	sched_stop(&c->sched, SIGTERM);
	ferry_gcs_client_destroy(c->admin);
	gcs_stop(&c->gcs, SIGTERM);
}

FTEST(place_goes_to_a_node_with_the_resources)
{
	struct cluster c;

	cluster_start(&c);
	ftest_assert_int_eq(place_one(1, &(struct req_spec){.res1 = "GPU", .amount1 = 1}), 0);
	ftest_assert_true(same_node(&R.ans[1].node, &c.gpu_node));
	ftest_assert_str_eq(R.ans[1].address, "ip=127.0.0.1;tcp=1002");
	/* 4 CPUs fit only on the GPU node now (the CPU node has 1 free). */
	ftest_assert_int_eq(place_one(2, &(struct req_spec){.res1 = "CPU", .amount1 = 4}), 0);
	ftest_assert_true(same_node(&R.ans[2].node, &c.gpu_node));
	cluster_stop(&c);
}

FTEST(node_affinity_hard_and_soft)
{
	struct cluster c;
	struct ferry_node_id nowhere;

	ferry_id_random(nowhere.bytes, sizeof(nowhere.bytes));
	cluster_start(&c);
	ftest_assert_int_eq(place_one(1, &(struct req_spec){.res1 = "CPU",
							    .amount1 = 1,
							    .strategy = FERRY__SCHED_NODE_AFFINITY,
							    .affinity = &c.cpu_node}),
			    0);
	ftest_assert_true(same_node(&R.ans[1].node, &c.cpu_node));
	/* Hard to a node without a GPU: refused; soft: the GPU node. */
	ftest_assert_int_eq(place_one(2, &(struct req_spec){.res1 = "GPU",
							    .amount1 = 1,
							    .strategy = FERRY__SCHED_NODE_AFFINITY,
							    .affinity = &c.cpu_node}),
			    -EHOSTDOWN);
	ftest_assert_int_eq(place_one(3, &(struct req_spec){.res1 = "GPU",
							    .amount1 = 1,
							    .strategy = FERRY__SCHED_NODE_AFFINITY,
							    .affinity = &c.cpu_node,
							    .soft = true}),
			    0);
	ftest_assert_true(same_node(&R.ans[3].node, &c.gpu_node));
	/* A node nobody knows: hard refused, soft placed elsewhere. */
	ftest_assert_int_eq(place_one(4, &(struct req_spec){.res1 = "CPU",
							    .amount1 = 1,
							    .strategy = FERRY__SCHED_NODE_AFFINITY,
							    .affinity = &nowhere}),
			    -EHOSTDOWN);
	ftest_assert_int_eq(place_one(5, &(struct req_spec){.res1 = "CPU",
							    .amount1 = 1,
							    .strategy = FERRY__SCHED_NODE_AFFINITY,
							    .affinity = &nowhere,
							    .soft = true}),
			    0);
	cluster_stop(&c);
}

FTEST(impossible_request_is_enospc)
{
	struct cluster c;

	cluster_start(&c);
	ftest_assert_int_eq(place_one(1, &(struct req_spec){.res1 = "GPU", .amount1 = 3}), -ENOSPC);
	ftest_assert_int_eq(place_one(2, &(struct req_spec){.res1 = "CPU", .amount1 = 64}),
			    -ENOSPC);
	ftest_assert_int_eq(place_one(3, &(struct req_spec){.res1 = "tpu", .amount1 = 1}), -ENOSPC);
	ftest_assert_int_eq(place_one(4, &(struct req_spec){.res1 = "CPU",
							    .amount1 = 1,
							    .res2 = "GPU",
							    .amount2 = 3}),
			    -ENOSPC);
	cluster_stop(&c);
}

FTEST(input_bytes_pull_the_task_to_their_node)
{
	struct cluster c;

	cluster_start(&c);
	/* Both nodes have a CPU free; 64 MiB of input decide. */
	ftest_assert_int_eq(
		place_one(1,
			  &(struct req_spec){.res1 = "CPU", .amount1 = 1, .input_on = &c.cpu_node}),
		0);
	ftest_assert_true(same_node(&R.ans[1].node, &c.cpu_node));
	ftest_assert_int_eq(
		place_one(2,
			  &(struct req_spec){.res1 = "CPU", .amount1 = 1, .input_on = &c.gpu_node}),
		0);
	ftest_assert_true(same_node(&R.ans[2].node, &c.gpu_node));
	cluster_stop(&c);
}

FTEST(a_burst_spreads_between_reports)
{
	struct cluster c;
	unsigned on_cpu = 0;

	cluster_start(&c);
	ftest_assert_int_eq(place_one(0, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	/* 9 free CPUs in all, 1 taken above: 8 more one-CPU tasks in one batch all run now, so
	 * each node gets at most what it has free. */
	R.answered = 0;
	for (uint64_t id = 1; id <= 8; id++)
		place(id, &(struct req_spec){.res1 = "CPU", .amount1 = 1});
	run_until(8, 10000);
	ftest_assert_uint_eq(R.answered, 8);
	for (uint64_t id = 0; id <= 8; id++) {
		ftest_assert_int_eq(R.ans[id].status, 0);
		on_cpu += same_node(&R.ans[id].node, &c.cpu_node);
	}
	ftest_assert_uint_le(on_cpu, 1);
	cluster_stop(&c);
}

FTEST(killed_instance_loses_no_request)
{
	struct cluster c;
	struct sched_proc second;
	unsigned n = 200;

	cluster_start(&c);
	/* The client knows only the first instance and is connected to it. */
	ftest_assert_int_eq(place_one(0, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	second = sched_start(c.gcs.port, token_file());
	/* Requests in flight on the first: it is stopped, then killed. */
	kill(c.sched.pid, SIGSTOP);
	R.answered = 0;
	for (uint64_t id = 1; id <= n; id++)
		place(id, &(struct req_spec){.res1 = "CPU", .amount1 = 1});
	run_until(n, 300);
	ftest_assert_uint_eq(R.answered, 0);
	ftest_assert_uint_eq(ferry__sched_client_outstanding(R.sc), n);
	sched_stop(&c.sched, SIGKILL);
	run_until(n, 20000);
	ftest_assert_uint_eq(R.answered, n);
	for (uint64_t id = 1; id <= n; id++)
		ftest_assert_int_eq(R.ans[id].status, 0); /* 1 CPU always fits somewhere queued */
	ftest_assert_uint_eq(ferry__sched_client_outstanding(R.sc), 0);
	c.sched = second;
	cluster_stop(&c);
}

FTEST(wrong_token_is_refused)
{
	struct cluster c;

	cluster_start(&c);
	/* The instance is registered and answers the right token... */
	ftest_assert_int_eq(place_one(0, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	/* ...and refuses a wrong one: the client finds no instance that takes it. */
	ferry__sched_client_free(R.sc);
	ftest_assert_ok(ferry__sched_client_new(R.loop, R.gcs, "wrong", 5, &R.self, &R.sc));
	ferry__sched_client_set_timing(R.sc, 500, 50, 2);
	R.answered = 0;
	place(1, &(struct req_spec){.res1 = "CPU", .amount1 = 1});
	run_until(1, 20000);
	ftest_assert_int_eq(R.ans[1].status, -EHOSTUNREACH);
	cluster_stop(&c);
}

FTEST(no_instance_is_ehostunreach)
{
	struct gcs_proc gcs = gcs_start(0, NULL);

	runner_init(gcs.port, TOKEN);
	ferry__sched_client_set_timing(R.sc, 500, 50, 2);
	place(1, &(struct req_spec){.res1 = "CPU", .amount1 = 1});
	run_until(1, 20000);
	ftest_assert_int_eq(R.ans[1].status, -EHOSTUNREACH);
	/* Cancel: the callback never comes. */
	place(2, &(struct req_spec){.res1 = "CPU", .amount1 = 1});
	ftest_assert_ok(ferry__sched_client_cancel(R.sc, 2));
	ftest_assert_int_eq(ferry__sched_client_cancel(R.sc, 2), -ENOENT);
	R.answered = 0;
	run_until(1, 1500);
	ftest_assert_int_eq(R.ans[2].status, -1000);
	runner_fini();
	gcs_stop(&gcs, SIGTERM);
}

FTEST(malformed_frame_closes_the_connection)
{
	struct cluster c;
	uint8_t junk[64], buf[256];
	int fd;

	cluster_start(&c);
	fd = raw_connect(c.sched.port);
	raw_send_handshake(fd);
	memset(junk, 0xa5, sizeof(junk));
	raw_send(fd, FERRY__WIRE_MSG_SCHED_PLACE, junk, sizeof(junk));
	/* The HandshakeReply, then the close. */
	for (ssize_t got = 1; got > 0;)
		got = read(fd, buf, sizeof(buf));
	close(fd);
	/* The server still serves others. */
	ftest_assert_int_eq(place_one(1, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	cluster_stop(&c);
}

/* ---- real ferry-node processes: their own resources, load reports and death ---- */

struct node_proc {
	pid_t pid;		 /* ferry-node */
	struct ferry_node_id id; /* from its ready line */
	char address[256];	 /* same */
};

static struct node_proc node_start(uint16_t gcs_port, const char *name, const char *flags)
{
	const char *bin = getenv("FERRY_NODE_BIN");
	struct node_proc n = {0};
	char cmd[2048], line[1024], hex[64];
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};

	if (!bin)
		ftest_skip("FERRY_NODE_BIN not set (run through meson test)");
	snprintf(cmd, sizeof(cmd),
		 "exec %s --gcs 127.0.0.1:%u --token-file %s --ip 127.0.0.1 --memory 32M "
		 "--transport tcp --num-workers 0 --socket %s/%s.sock %s 2>%s/%s.log",
		 bin, gcs_port, token_file(), ftest_tmpdir(), name, flags, ftest_tmpdir(), name);
	n.pid = itest_spawn(argv, line, sizeof(line));
	ftest_assert_int_eq(sscanf(line, "ferry-node ready id=%32s address=%255s", hex, n.address),
			    2);
	ftest_assert_ok(ferry_node_id_from_hex(hex, &n.id));
	return n;
}

/* Place @spec until it gets @want (a node's report or death reaches the scheduler through the
 * GCS a moment after it happened). */
static int place_until(uint64_t id, const struct req_spec *s, int want)
{
	int got = -1000;

	for (int i = 0; i < 200 && got != want; i++) {
		got = place_one(id, s);
		if (got != want)
			usleep(50 * 1000);
	}
	return got;
}

FTEST(real_nodes_resources_and_death)
{
	const char *extra[] = {"--node-deadline-ms", "1000", NULL};
	struct gcs_proc gcs = gcs_start(0, extra);
	struct node_proc cpu, gpu;
	struct sched_proc sched;
	int status;

	cpu = node_start(gcs.port, "cpu", "--num-cpus 2");
	gpu = node_start(gcs.port, "gpu", "--num-cpus 2 --num-gpus 1 --resources tpu=2");
	sched = sched_start(gcs.port, token_file());
	runner_init(gcs.port, TOKEN);
	ftest_assert_int_eq(place_until(1, &(struct req_spec){.res1 = "GPU", .amount1 = 1}, 0), 0);
	ftest_assert_true(same_node(&R.ans[1].node, &gpu.id));
	ftest_assert_str_eq(R.ans[1].address, gpu.address);
	ftest_assert_int_eq(place_one(2, &(struct req_spec){.res1 = "tpu", .amount1 = 2}), 0);
	ftest_assert_true(same_node(&R.ans[2].node, &gpu.id));
	ftest_assert_int_eq(place_one(3, &(struct req_spec){.res1 = "tpu", .amount1 = 3}), -ENOSPC);
	ftest_assert_int_eq(place_one(4, &(struct req_spec){.res1 = "CPU",
							    .amount1 = 1,
							    .strategy = FERRY__SCHED_NODE_AFFINITY,
							    .affinity = &cpu.id}),
			    0);
	ftest_assert_true(same_node(&R.ans[4].node, &cpu.id));
	/* The GPU node dies: once the GCS declares it dead, nothing can run a GPU task. */
	kill(gpu.pid, SIGKILL);
	waitpid(gpu.pid, &status, 0);
	ftest_assert_int_eq(
		place_until(5, &(struct req_spec){.res1 = "GPU", .amount1 = 1}, -ENOSPC), -ENOSPC);
	ftest_assert_int_eq(place_one(6, &(struct req_spec){.res1 = "CPU",
							    .amount1 = 1,
							    .strategy = FERRY__SCHED_NODE_AFFINITY,
							    .affinity = &gpu.id}),
			    -EHOSTDOWN);
	runner_fini();
	sched_stop(&sched, SIGTERM);
	kill(cpu.pid, SIGTERM);
	waitpid(cpu.pid, &status, 0);
	gcs_stop(&gcs, SIGTERM);
}

FTEST(a_client_that_never_reads_is_cut_off)
{
	const char *extra[] = {"--max-queued", "64K", "--stall-timeout-ms", "500", NULL};
	struct timeval tv = {.tv_sec = 20};
	struct ferry__res cpu = {"CPU", UNIT};
	struct ferry__sched_place_req q = {.res = &cpu, .nres = 1};
	const struct ferry__sched_place_req **items;
	struct ferry__fb_builder b = {0};
	struct ferry_node_id origin = {{1}};
	struct cluster c;
	uint64_t *ids;
	int fd, rcvbuf = 4096;
	static uint8_t junk[65536];
	ssize_t got;
	unsigned sent = 0;

	c.gcs = gcs_start(0, long_deadline);
	c.admin = client_for(&c.gcs, 1, TOKEN);
	node_add(c.admin, &c.cpu_node, "ip=127.0.0.1;tcp=1001", 4, 0, 4);
	c.sched = sched_start_with(c.gcs.port, token_file(), extra);
	runner_init(c.gcs.port, TOKEN);
	ftest_assert_int_eq(place_one(1, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	/* 1,000 requests a frame, replies never read: the server stops reading, then cuts. */
	items = calloc(1000, sizeof(*items));
	ids = calloc(1000, sizeof(*ids));
	ftest_assert_ptr_notnull(items);
	ftest_assert_ptr_notnull(ids);
	for (unsigned i = 0; i < 1000; i++)
		items[i] = &q, ids[i] = i;
	ftest_assert_ok(ferry__sched_place_build(&b, &origin, items, ids, 1000));
	fd = raw_connect(c.sched.port);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	signal(SIGPIPE, SIG_IGN);
	raw_send_handshake(fd);
	for (; sent < 100000; sent++) {
		uint8_t *frame;
		size_t size;

		ftest_assert_ok(ferry__frame_pack(FERRY__WIRE_MSG_SCHED_PLACE,
						  ferry__fb_builder_data(&b),
						  ferry__fb_builder_size(&b), &frame, &size));
		ssize_t w = write(fd, frame, size);
		ferry__free(frame);
		if (w != (ssize_t)size)
			break; /* closed by the server (or the send timeout: asserted below) */
	}
	ftest_assert_uint_lt(sent, 100000);
	/* What the server had sent, then its close (a reset: it closed with our data unread),
	 * not our receive timeout. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	do
		got = read(fd, junk, sizeof(junk));
	while (got > 0);
	ftest_assert_true(got == 0 || errno == ECONNRESET);
	close(fd);
	free(items);
	free(ids);
	ferry__fb_builder_fini(&b);
	/* Others are still served. */
	ftest_assert_int_eq(place_one(2, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	cluster_stop(&c);
}

FTEST(gcs_restart_in_memory_registers_again)
{
	struct cluster c;
	struct ferry_node_id fresh;
	uint16_t port;

	cluster_start(&c);
	ftest_assert_int_eq(place_one(1, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	runner_fini();
	ferry_gcs_client_destroy(c.admin);
	/* The GCS restarts on its port with nothing (no WAL): nodes and the KV are gone. */
	port = c.gcs.port;
	gcs_stop(&c.gcs, SIGKILL);
	c.gcs = gcs_start(port, long_deadline);
	c.admin = client_for(&c.gcs, 1, TOKEN);
	node_add(c.admin, &fresh, "ip=127.0.0.1;tcp=1003", 2, 1, 2);
	/* A new client finds ferry-sched again (it registered anew after its resubscription),
	 * which knows the node that joined the new GCS. */
	runner_init(c.gcs.port, TOKEN);
	ferry__sched_client_set_timing(R.sc, 1000, 200, 50);
	ftest_assert_int_eq(place_until(2, &(struct req_spec){.res1 = "GPU", .amount1 = 1}, 0), 0);
	ftest_assert_true(same_node(&R.ans[2].node, &fresh));
	cluster_stop(&c);
}

/* ---- the tree: group schedulers under a replicated global level ---- */

/* A GCS, global instances, groups A and B of two nodes each, and the client speaking for a1
 * to its group's scheduler, as a node started with --group A does. */
struct tree {
	struct gcs_proc gcs;		    /* ferry-gcs */
	struct ferry_gcs_client *admin;	    /* registers the nodes */
	struct ferry_node_id a[2], b[2];    /* the groups' nodes */
	struct sched_proc global[2];	    /* global instances (pid 0: not started) */
	struct sched_proc group_a, group_b; /* the groups' schedulers */
};

static void member_put(struct ferry_gcs_client *admin, const char *group,
		       const struct ferry_node_id *id)
{
	char ns[64], hex[2 * sizeof(id->bytes) + 1];

	snprintf(ns, sizeof(ns), "%s%s", FERRY__SCHED_MEMBER_KV_PREFIX, group);
	ferry_id_to_hex(id->bytes, sizeof(id->bytes), hex, sizeof(hex));
	ftest_assert_int_ge(ferry_gcs_kv_put(admin, ns, strlen(ns), hex, strlen(hex), "", 0, true),
			    0);
}

/* Group A: 4 CPUs on each node, a1 none free and a2 one; group B: 4 CPUs free on each, and
 * a GPU on b2 that A does not have. */
static void tree_start(struct tree *t)
{
	static const char *const group_a[] = {"--group", "A", NULL};
	static const char *const group_b[] = {"--group", "B", NULL};

	memset(t, 0, sizeof(*t));
	t->gcs = gcs_start(0, long_deadline);
	t->admin = client_for(&t->gcs, 1, TOKEN);
	node_add(t->admin, &t->a[0], "ip=127.0.0.1;tcp=2001", 4, 0, 0);
	node_add(t->admin, &t->a[1], "ip=127.0.0.1;tcp=2002", 4, 0, 1);
	node_add(t->admin, &t->b[0], "ip=127.0.0.1;tcp=2003", 4, 0, 4);
	node_add(t->admin, &t->b[1], "ip=127.0.0.1;tcp=2004", 4, 1, 4);
	for (int i = 0; i < 2; i++) {
		member_put(t->admin, "A", &t->a[i]);
		member_put(t->admin, "B", &t->b[i]);
	}
	t->global[0] = sched_start(t->gcs.port, token_file());
	t->group_a = sched_start_with(t->gcs.port, token_file(), group_a);
	t->group_b = sched_start_with(t->gcs.port, token_file(), group_b);
	runner_init(t->gcs.port, TOKEN);
	R.self = t->a[0];
	ftest_assert_ok(ferry__sched_client_set_namespace(R.sc, FERRY__SCHED_GROUP_KV_PREFIX "A"));
}

static void tree_stop(struct tree *t)
{
	runner_fini();
	sched_stop(&t->group_a, SIGTERM);
	sched_stop(&t->group_b, SIGTERM);
	for (int i = 0; i < 2; i++)
		if (t->global[i].pid)
			sched_stop(&t->global[i], SIGTERM);
	ferry_gcs_client_destroy(t->admin);
	gcs_stop(&t->gcs, SIGTERM);
}

static bool in_group(const struct ferry_node_id *n, const struct ferry_node_id *group)
{
	return same_node(n, &group[0]) || same_node(n, &group[1]);
}

/*
 * Group summaries reach the global level every 200 ms once the group's link to it is up (it
 * reads the instances every second). Until then the global instance places on the nodes it
 * sees itself (two hops): a GPU task, which only group B can run, is asked until it takes the
 * tree's way (three hops), with a bound.
 */
static void tree_settle(uint64_t id)
{
	for (int tries = 0; tries < 100; tries++) {
		ftest_assert_int_eq(place_one(id, &(struct req_spec){.res1 = "GPU", .amount1 = 1}),
				    0);
		if (R.ans[id].hops == 3)
			break;
		usleep(100 * 1000);
	}
	ftest_assert_uint_eq(R.ans[id].hops, 3);
}

FTEST(tree_task_goes_up_and_lands_in_the_other_group)
{
	struct tree t;

	tree_start(&t);
	usleep(1500 * 1000);
	tree_settle(100);
	/* 1 CPU: a2 has it free, the group places it (one hop). */
	ftest_assert_int_eq(place_one(1, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	ftest_assert_true(same_node(&R.ans[1].node, &t.a[1]));
	ftest_assert_uint_eq(R.ans[1].hops, 1);
	/* 3 CPUs: nothing free in A; up to the global, down to B (three hops). */
	ftest_assert_int_eq(place_one(2, &(struct req_spec){.res1 = "CPU", .amount1 = 3}), 0);
	ftest_assert_true(in_group(&R.ans[2].node, t.b));
	ftest_assert_uint_eq(R.ans[2].hops, 3);
	/* A GPU only B has: the same way, to b2. */
	ftest_assert_int_eq(place_one(3, &(struct req_spec){.res1 = "GPU", .amount1 = 1}), 0);
	ftest_assert_true(same_node(&R.ans[3].node, &t.b[1]));
	ftest_assert_uint_eq(R.ans[3].hops, 3);
	/* 4 CPUs where B's nodes are full by now and A's queue: never back to A from above
	 * (no ping-pong); the global places it in B (its queue) or A keeps it, within 3 hops. */
	ftest_assert_int_eq(place_one(4, &(struct req_spec){.res1 = "CPU", .amount1 = 4}), 0);
	ftest_assert_uint_le(R.ans[4].hops, 3);
	tree_stop(&t);
}

FTEST(tree_killed_global_instance_loses_no_forwarded_task)
{
	struct tree t;
	unsigned n = 40;

	tree_start(&t);
	usleep(1500 * 1000);
	tree_settle(100);
	/* Group A's link up is to the only instance; a second one starts and gets the reports. */
	t.global[1] = sched_start(t.gcs.port, token_file());
	usleep(2000 * 1000);
	/* Tasks A cannot run now go up to the first instance, stopped, then killed. */
	kill(t.global[0].pid, SIGSTOP);
	R.answered = 0;
	for (uint64_t id = 1; id <= n; id++)
		place(id, &(struct req_spec){.res1 = "CPU", .amount1 = 2});
	run_until(n, 500);
	ftest_assert_uint_eq(R.answered, 0);
	sched_stop(&t.global[0], SIGKILL);
	t.global[0].pid = 0;
	run_until(n, 30000);
	ftest_assert_uint_eq(R.answered, n);
	for (uint64_t id = 1; id <= n; id++) {
		ftest_assert_int_eq(R.ans[id].status, 0);
		ftest_assert_true(in_group(&R.ans[id].node, t.b));
		ftest_assert_uint_eq(R.ans[id].hops, 3);
	}
	tree_stop(&t);
}

FTEST(real_nodes_join_their_groups)
{
	static const char *const group_a[] = {"--group", "A", NULL};
	static const char *const group_b[] = {"--group", "B", NULL};
	struct gcs_proc gcs = gcs_start(0, NULL);
	struct sched_proc global, sa, sb;
	struct node_proc a, b;
	int status;

	/* ferry-node --group lists itself under its group; the group schedulers find them. */
	a = node_start(gcs.port, "a", "--num-cpus 2 --group A");
	b = node_start(gcs.port, "b", "--num-cpus 2 --num-gpus 1 --group B");
	global = sched_start(gcs.port, token_file());
	sa = sched_start_with(gcs.port, token_file(), group_a);
	sb = sched_start_with(gcs.port, token_file(), group_b);
	runner_init(gcs.port, TOKEN);
	R.self = a.id;
	ftest_assert_ok(ferry__sched_client_set_namespace(R.sc, FERRY__SCHED_GROUP_KV_PREFIX "A"));
	tree_settle(1);
	ftest_assert_true(same_node(&R.ans[1].node, &b.id));
	ftest_assert_str_eq(R.ans[1].address, b.address);
	ftest_assert_int_eq(place_one(2, &(struct req_spec){.res1 = "CPU", .amount1 = 1}), 0);
	ftest_assert_true(same_node(&R.ans[2].node, &a.id));
	ftest_assert_uint_eq(R.ans[2].hops, 1);
	/* Group B's scheduler dies: a GPU task is answered (no hang), with the error; once B
	 * has been silent for 3 s the global level says "again later" at once (only B's node
	 * could run it: not -ENOSPC, which would leave the task infeasible); a new B scheduler
	 * takes over. */
	sched_stop(&sb, SIGKILL);
	ftest_assert_int_eq(place_one(3, &(struct req_spec){.res1 = "GPU", .amount1 = 1}),
			    -EHOSTUNREACH);
	usleep(3500 * 1000);
	R.answered = 0;
	place(4, &(struct req_spec){.res1 = "GPU", .amount1 = 1});
	run_until(1, 10000);
	ftest_assert_int_eq(R.ans[4].status, -EAGAIN);
	sb = sched_start_with(gcs.port, token_file(), group_b);
	tree_settle(5);
	ftest_assert_true(same_node(&R.ans[5].node, &b.id));
	sched_stop(&sb, SIGTERM);
	runner_fini();
	sched_stop(&sa, SIGTERM);
	sched_stop(&global, SIGTERM);
	kill(a.pid, SIGTERM);
	kill(b.pid, SIGTERM);
	waitpid(a.pid, &status, 0);
	waitpid(b.pid, &status, 0);
	gcs_stop(&gcs, SIGTERM);
}

FTEST(tree_group_keeps_what_no_global_instance_answers)
{
	struct tree t;

	tree_start(&t);
	/* The only global instance leaves (and the KV): what A sends up comes back to A. */
	sched_stop(&t.global[0], SIGTERM);
	t.global[0].pid = 0;
	for (uint64_t id = 1; id <= 4; id++) {
		ftest_assert_int_eq(place_one(id, &(struct req_spec){.res1 = "CPU", .amount1 = 3}),
				    0);
		ftest_assert_true(in_group(&R.ans[id].node, t.a));
		ftest_assert_uint_eq(R.ans[id].hops, 1);
	}
	/* Committed as placements: the queues even out over A's two nodes. */
	ftest_assert_false(same_node(&R.ans[1].node, &R.ans[2].node) &&
			   same_node(&R.ans[2].node, &R.ans[3].node) &&
			   same_node(&R.ans[3].node, &R.ans[4].node));
	tree_stop(&t);
}
