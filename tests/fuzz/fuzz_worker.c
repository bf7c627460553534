/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for a worker's message handling (runtime/worker*.c): the input is a byte
 * stream of frames as an owner (or the node) would send them to a worker; each frame that the
 * wire verifier accepts goes where the worker sends it: RuntimeConnect to the owner check,
 * PushTask to the task runner (decode, checks, the function by name, returns, the reply; or its
 * bounce, as after a task that waited, until a TasksRecalled), and
 * WorkerAssign to the job check of a worker that already serves a job (so that no input makes
 * it open or load a file), and ActorCreate / ActorCall / ActorKill to the worker's actor
 * (worker_actor.c: the class below, its methods, unknown ones), and a compiled graph's
 * GraphInstall, GraphData and GraphDestroy (graph_worker.c: nodes that run Acc's methods,
 * values that run them, malformed plans and values that must come back as -errno). Every
 * reply built must itself verify. The worker has no store here:
 * ref arguments and large returns take their error paths.
 *
 * Built with FUZZ_WORKER_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_worker_replay DIR|FILE...        run each input, fail on a leak or an empty corpus
 *   fuzz_worker_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD worker-corpus)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/runtime.h>

#include "common/frame.h"
#include "common/wire.h"
#include "runtime/worker.h"

#define FUZZ_MAX_LENGTH (1u << 20)

#include "fuzz_replay.h"

static const struct ferry_job_id fuzz_job = {{7, 7, 7}};

/* Functions the tasks may name: every return path of the task API. */
FERRY_FUNCTION(echo)
{
	const void *p;
	size_t n;
	int ret = ferry_task_arg(ctx, 0, &p, &n);

	return ret < 0 ? ret : ferry_task_return(ctx, 0, p, n);
}

FERRY_FUNCTION(fail)
{
	return ferry_task_error(ctx, "failed with %zu args", ferry_task_num_args(ctx));
}

/* Every return: in place, of the size of the argument of its index (or 8). */
FERRY_FUNCTION(fill)
{
	for (size_t i = 0; i < ferry_task_num_returns(ctx); i++) {
		const void *p;
		size_t n = 8;
		void *buf;
		int ret;

		if (ferry_task_arg(ctx, i, &p, &n) == 0 && n >= 8)
			memcpy(&n, p, sizeof(n));
		ret = ferry_task_return_alloc(ctx, i, n % (4u << 20), &buf);
		if (ret < 0)
			return ret;
		memset(buf, (int)i, n % (4u << 20));
	}
	return 0;
}

/* An actor class: its state counts the calls and keeps the constructor's argument. */
struct acc {
	uint64_t calls;
	size_t arg_len;
};

static void acc_free(void *state)
{
	free(state);
}

FERRY_ACTOR_CLASS(Acc, acc_free)
{
	struct acc *a = calloc(1, sizeof(*a));
	const void *p;

	if (!a)
		return -ENOMEM;
	if (ferry_task_arg(ctx, 0, &p, &a->arg_len) < 0)
		a->arg_len = 0;
	*state = a;
	return 0;
}

FERRY_ACTOR_METHOD(Acc, add)
{
	struct acc *a = ferry_actor_state(ctx);

	if (!a)
		return ferry_task_error(ctx, "no state");
	a->calls++;
	return ferry_task_return(ctx, 0, &a->calls, sizeof(a->calls));
}

static void check_reply(struct ferry__worker *w, uint16_t type)
{
	if (ferry__wire_verify(type, ferry__fb_builder_data(&w->fb),
			       ferry__fb_builder_size(&w->fb)) != 0) {
		fprintf(stderr, "the worker built a %s that does not verify\n",
			ferry__wire_message_name(type));
		abort();
	}
}

static void handle(struct ferry__worker *w, struct ferry__worker_bounce *bounce,
		   const struct ferry__frame *f)
{
	char why[160];

	if (ferry__wire_verify(f->type, f->payload, f->length) != 0)
		return;
	switch (f->type) {
	case FERRY__WIRE_MSG_RUNTIME_CONNECT:
		(void)ferry__worker_check_connect(f->payload, f->length, why, sizeof(why));
		break;
	case FERRY__WIRE_MSG_PUSH_TASK:
		if (ferry__worker_push_or_bounce(w, bounce, NULL, f->payload, f->length) == 0)
			check_reply(w, FERRY__WIRE_MSG_PUSH_TASK_REPLY);
		break;
	case FERRY__WIRE_MSG_TASKS_RECALLED:
		ferry__worker_tasks_recalled(bounce, f->payload);
		break;
	case FERRY__WIRE_MSG_WORKER_ASSIGN:
		if (ferry__worker_assign(w, f->payload, f->length) == 0)
			check_reply(w, FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY);
		break;
	case FERRY__WIRE_MSG_ACTOR_CREATE:
	case FERRY__WIRE_MSG_ACTOR_CALL:
	case FERRY__WIRE_MSG_ACTOR_KILL: {
		uint16_t reply_type;

		if (ferry__worker_actor_message(w, NULL, f->type, f->payload, f->length,
						&reply_type) == 0)
			check_reply(w, reply_type);
		break;
	}
	case FERRY__WIRE_MSG_GRAPH_INSTALL:
	case FERRY__WIRE_MSG_GRAPH_DATA:
	case FERRY__WIRE_MSG_GRAPH_DESTROY: {
		int ret = ferry__worker_graph_message(w, NULL, f->type, f->payload, f->length);

		if (ret > 0) {
			fprintf(stderr, "a graph message returned %d, not 0 or -errno\n", ret);
			abort();
		}
		break;
	}
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct ferry_worker_id id = {{1, 2, 3, 4}};
	struct ferry__worker w;
	struct ferry__frame_parser p;
	struct ferry__frame f;
	/* As after a task that waited (wait 1): PushTasks bounce until a TasksRecalled of it. */
	struct ferry__worker_bounce bounce = {.waited = 1};
	int ret;

	if (!quiet) {
		ferry_log_configure("off");
		quiet = true;
	}
	ferry__worker_init(&w, &id);
	w.assigned = true; /* serves fuzz_job: a WorkerAssign never loads a file */
	w.job = fuzz_job;
	ferry__frame_parser_init(&p, FUZZ_MAX_LENGTH);
	ret = ferry__frame_parser_feed(&p, data, size);
	while (ret >= 0 && (ret = ferry__frame_parser_next(&p, &f)) == 1)
		handle(&w, &bounce, &f);
	ferry__frame_parser_fini(&p);
	ferry__worker_graph_fini(&w);
	ferry__worker_actor_fini(&w);
	ferry__worker_fini(&w);
	return 0;
}

#ifdef FUZZ_WORKER_REPLAY

/* ---- seeds ---- */

static int write_frame(FILE *f, struct ferry__fb_builder *b, uint16_t type)
{
	const uint8_t *frame;
	size_t size;

	if (ferry__frame_finish(b, type, &frame, &size) < 0)
		return -1;
	return fwrite(frame, 1, size, f) == size ? 0 : -1;
}

static int write_task(FILE *f, struct ferry__fb_builder *b, const char *fn,
		      const struct ferry__wire_task_arg *args, size_t nargs, uint32_t nrets,
		      uint64_t inline_max)
{
	struct ferry__wire_push_task m = {.task_id = {{9, 9}},
					  .caller = {{5}},
					  .function = fn,
					  .args = args,
					  .args_count = nargs,
					  .num_returns = nrets,
					  .inline_max = inline_max};

	memcpy(m.job.bytes, fuzz_job.bytes, sizeof(m.job.bytes));
	if (ferry__wire_push_task_build(b, &m) < 0)
		return -1;
	return write_frame(f, b, FERRY__WIRE_MSG_PUSH_TASK);
}

static int seed_tasks(FILE *f, struct ferry__fb_builder *b)
{
	static const uint64_t sizes[3] = {16, 200000, 0};
	struct ferry__wire_runtime_connect rc = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
						 .kind = FERRY__WIRE_PEER_KIND_DRIVER,
						 .id = {{5}}};
	struct ferry__wire_task_arg args[3] = {
		{.data = (const uint8_t *)&sizes[0], .data_count = 8},
		{.data = (const uint8_t *)&sizes[1], .data_count = 8},
		{.is_ref = true, .object_id = {{4, 4}}},
	};
	int ret = ferry__wire_runtime_connect_build(b, &rc);

	ret |= write_frame(f, b, FERRY__WIRE_MSG_RUNTIME_CONNECT);
	ret |= write_task(f, b, "echo", args, 1, 1, 1000); /* bounced (wait 1) */
	ret |= ferry__wire_tasks_recalled_build(b,
						&(struct ferry__wire_tasks_recalled){.wait_id = 1});
	ret |= write_frame(f, b, FERRY__WIRE_MSG_TASKS_RECALLED);
	ret |= write_task(f, b, "echo", args, 1, 1, 1000);
	ret |= write_task(f, b, "fill", args, 3, 3, 100);
	ret |= write_task(f, b, "fail", args, 2, 1, 0);
	ret |= write_task(f, b, "echo", &args[2], 1, 1, 0);
	ret |= write_task(f, b, "nope", NULL, 0, 2000, 0);
	return ret;
}

static int seed_assign(FILE *f, struct ferry__fb_builder *b)
{
	static const uint8_t hash[32] = {1};
	struct ferry__wire_worker_assign m = {
		.code_path = "/nonexistent/job.so", .code_hash = hash, .code_hash_count = 32};
	int ret;

	memcpy(m.job.bytes, fuzz_job.bytes, sizeof(m.job.bytes));
	ret = ferry__wire_worker_assign_build(b, &m);
	ret |= write_frame(f, b, FERRY__WIRE_MSG_WORKER_ASSIGN);
	m.job.bytes[0] = 8; /* another job: -EBUSY */
	ret |= ferry__wire_worker_assign_build(b, &m);
	return ret | write_frame(f, b, FERRY__WIRE_MSG_WORKER_ASSIGN);
}

/* An actor's life: create, calls (a method, another class's, an unknown one), a second
 * create (-EBUSY), kill, a call after it (-ESRCH), an unknown class. */
static int seed_actor(FILE *f, struct ferry__fb_builder *b)
{
	static const uint8_t word[4] = "abcd";
	struct ferry__wire_task_arg arg = {.data = word, .data_count = sizeof(word)};
	struct ferry__wire_push_task t = {.task_id = {{9, 1}}, .caller = {{5}}, .num_returns = 1};
	struct ferry__wire_actor_create c = {.actor_id = {{3, 3}}, .task = &t};
	struct ferry__wire_actor_call call = {.actor_id = {{3, 3}}, .task = &t};
	struct ferry__wire_actor_kill k = {.actor_id = {{3, 3}}};
	static const char *const methods[] = {"Acc.add", "Other.add", "Acc.nope", "Acc"};
	int ret = 0;

	t.function = "Acc";
	t.args = &arg;
	t.args_count = 1;
	t.num_returns = 0;
	ret |= ferry__wire_actor_create_build(b, &c) |
	       write_frame(f, b, FERRY__WIRE_MSG_ACTOR_CREATE);
	t.num_returns = 1;
	for (int i = 0; i < 4; i++) {
		t.function = methods[i];
		t.task_id.bytes[1] = (uint8_t)(2 + i);
		ret |= ferry__wire_actor_call_build(b, &call) |
		       write_frame(f, b, FERRY__WIRE_MSG_ACTOR_CALL);
	}
	t.function = "Acc";
	ret |= ferry__wire_actor_create_build(b, &c) |
	       write_frame(f, b, FERRY__WIRE_MSG_ACTOR_CREATE);
	ret |= ferry__wire_actor_kill_build(b, &k) | write_frame(f, b, FERRY__WIRE_MSG_ACTOR_KILL);
	t.function = "Acc.add";
	ret |= ferry__wire_actor_call_build(b, &call) |
	       write_frame(f, b, FERRY__WIRE_MSG_ACTOR_CALL);
	t.function = "NoClass";
	ret |= ferry__wire_actor_create_build(b, &c) |
	       write_frame(f, b, FERRY__WIRE_MSG_ACTOR_CREATE);
	return ret;
}

static int write_data(FILE *f, struct ferry__fb_builder *b, uint64_t seq, uint32_t node,
		      uint32_t arg, int32_t status)
{
	static const int64_t value = 7;
	struct ferry__wire_graph_data m = {.graph_id = {{6, 6}},
					   .seq = seq,
					   .node = node,
					   .arg = arg,
					   .status = status,
					   .message = status < 0 ? "failed upstream" : NULL,
					   .data = (const uint8_t *)&value,
					   .data_count = sizeof(value)};

	return ferry__wire_graph_data_build(b, &m) | write_frame(f, b, FERRY__WIRE_MSG_GRAPH_DATA);
}

/* A graph on an Acc actor: node 0 takes input 0, node 1 takes node 0's result (a local edge)
 * and a constant, and goes to the driver; a peer edge that cannot open (no loop here). Then
 * values in order, out of order, twice, outside the window, an error; a plan with a cycle; a
 * second install; destroy, and a value after it. */
static int seed_graph(FILE *f, struct ferry__fb_builder *b)
{
	static const uint8_t word[4] = "abcd";
	struct ferry__wire_push_task t = {.task_id = {{9, 1}}, .caller = {{5}}, .function = "Acc"};
	struct ferry__wire_actor_create c = {.actor_id = {{3, 3}}, .task = &t};
	struct ferry__wire_graph_arg args[3] = {
		{.kind = 1, .index = 0},
		{.kind = 2, .index = 0},
		{.kind = 0, .data = word, .data_count = sizeof(word)},
	};
	struct ferry__wire_graph_edge edges[3] = {
		{.node = 1, .arg = 0},
		{.node = 2, .arg = 0, .worker_path = "/nonexistent/w.sock"},
		{.node = 1, .to_driver = true},
	};
	struct ferry__wire_graph_node nodes[2] = {
		{.index = 0,
		 .method = "Acc.add",
		 .args = args,
		 .args_count = 1,
		 .edges = edges,
		 .edges_count = 2},
		{.index = 1,
		 .method = "Acc.add",
		 .args = &args[1],
		 .args_count = 2,
		 .edges = &edges[2],
		 .edges_count = 1},
	};
	struct ferry__wire_graph_install in = {.graph_id = {{6, 6}},
					       .actor_id = {{3, 3}},
					       .num_nodes = 3,
					       .nodes = nodes,
					       .nodes_count = 2};
	struct ferry__wire_graph_destroy d = {.graph_id = {{6, 6}}};
	int ret = ferry__wire_actor_create_build(b, &c) |
		  write_frame(f, b, FERRY__WIRE_MSG_ACTOR_CREATE);

	ret |= ferry__wire_graph_install_build(b, &in) |
	       write_frame(f, b, FERRY__WIRE_MSG_GRAPH_INSTALL);
	ret |= write_data(f, b, 0, 0, 0, 0) | write_data(f, b, 2, 0, 0, 0);
	ret |= write_data(f, b, 1, 0, 0, 0) | write_data(f, b, 1, 0, 0, 0);
	ret |= write_data(f, b, 500, 0, 0, 0) | write_data(f, b, 3, 0, 0, -5);
	ret |= write_data(f, b, 4, 1, 0, 0) | write_data(f, b, 4, 0, 9, 0);
	ret |= ferry__wire_graph_install_build(b, &in) |
	       write_frame(f, b, FERRY__WIRE_MSG_GRAPH_INSTALL);
	args[1].index = 1; /* node 1 takes its own result: refused */
	in.graph_id.bytes[0] = 7;
	ret |= ferry__wire_graph_install_build(b, &in) |
	       write_frame(f, b, FERRY__WIRE_MSG_GRAPH_INSTALL);
	ret |= ferry__wire_graph_destroy_build(b, &d) |
	       write_frame(f, b, FERRY__WIRE_MSG_GRAPH_DESTROY);
	return ret | write_data(f, b, 5, 0, 0, 0);
}

int fuzz_make_corpus(const char *dir)
{
	static const char *const names[] = {"seed-tasks", "seed-assign", "seed-actor",
					    "seed-graph"};
	struct ferry__fb_builder b = {0};
	int bad = 0;

	for (int i = 0; i < 4; i++) {
		char path[4096];
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		f = fopen(path, "wb");
		if (!f) {
			perror(path);
			bad = 1;
			continue;
		}
		if ((i == 0   ? seed_tasks(f, &b)
		     : i == 1 ? seed_assign(f, &b)
		     : i == 2 ? seed_actor(f, &b)
			      : seed_graph(f, &b)) != 0) {
			fprintf(stderr, "%s: cannot write the seed\n", path);
			bad = 1;
		}
		fclose(f);
	}
	ferry__fb_builder_fini(&b);
	return bad;
}

#endif
