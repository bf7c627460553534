/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A compiled graph (Ray's compiled graphs): a = Counter(10); a.inc(2).inc(4); b = Counter(10);
 * b.inc(6); combine(a's, b's) = 16 + 16 = 32. The graph is bound once, compiled once (the plan
 * goes to the two actors' workers), then executed: its inputs (the 2 and the 6) go straight to
 * the workers, a's result straight to b, and b's combine straight back, with no task scheduled
 * and no lease taken per execution. Then 8 more executions, all in flight at once, with other
 * inputs. The Counter class is in examples/graph_lib.c, which the workers load.
 *
 * combine is a method of b: it then runs where one of its two arguments already is (b's own
 * inc), so only a's value crosses between workers; a third actor would add a process and a
 * hop for b's value too. (Graph nodes are actor methods only: see ferry_graph_bind.)
 *
 *     graph [./libgraph_lib.so]      (or FERRY_CODE=./libgraph_lib.so graph)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "example.h"

#define MORE 8

static int fail(const char *what, int ret, const char *detail)
{
	fprintf(stderr, "graph: %s: %s%s%s\n", what, ferry_strerror(ret), detail ? ": " : "",
		detail ? detail : "");
	return 1;
}

/* a.inc(in0).inc(4) and b.inc(in1), combined on b. Returns 0 or -errno. */
static int build(struct ferry_graph *g, struct ferry_actor *a, struct ferry_actor *b)
{
	static const int64_t four = 4;
	int n0, n1, n2, ret;

	n0 = ferry_graph_bind(g, a, "Counter.inc", (struct ferry_graph_arg[]){FERRY_GRAPH_INPUT(0)},
			      1);
	n1 = n0 < 0 ? n0
		    : ferry_graph_bind(g, a, "Counter.inc",
				       (struct ferry_graph_arg[]){FERRY_GRAPH_NODE((uint32_t)n0),
								  FERRY_GRAPH_CONST(&four, 8)},
				       2);
	n2 = n1 < 0 ? n1
		    : ferry_graph_bind(g, b, "Counter.inc",
				       (struct ferry_graph_arg[]){FERRY_GRAPH_INPUT(1)}, 1);
	ret = n2 < 0 ? n2
		     : ferry_graph_bind(g, b, "Counter.combine",
					(struct ferry_graph_arg[]){FERRY_GRAPH_NODE((uint32_t)n1),
								   FERRY_GRAPH_NODE((uint32_t)n2)},
					2);
	return ret < 0 ? ret : ferry_graph_compile(g, 60000);
}

/* One execution with increments @x (a's first) and @y (b's); its result into *@out. */
static int run(struct ferry_graph *g, int64_t x, int64_t y, uint64_t *exec)
{
	struct ferry_graph_arg in[2] = {FERRY_GRAPH_CONST(&x, 8), FERRY_GRAPH_CONST(&y, 8)};

	return ferry_graph_execute(g, in, 2, exec);
}

static int result(struct ferry_graph *g, uint64_t exec, int64_t *out)
{
	struct ferry_graph_result r;
	int ret = ferry_graph_get(g, exec, 60000, &r);

	if (ret < 0)
		return fail("get", ret, r.error);
	if (r.len != sizeof(*out)) {
		ferry_graph_result_release(&r);
		return fail("get", -EPROTO, "the result is not an int64");
	}
	memcpy(out, r.data, sizeof(*out));
	ferry_graph_result_release(&r);
	return 0;
}

int main(int argc, char **argv)
{
	char buf[4096];
	struct ferry_init_opts opts = {
		.code_path = example_code_path(argc, argv, "libgraph_lib.so", buf, sizeof(buf))};
	static const int64_t ten = 10;
	struct ferry_arg ctor = {.data = &ten, .len = sizeof(ten)};
	struct ferry_actor *a = NULL, *b = NULL;
	struct ferry_graph *g = NULL;
	uint64_t exec, more[MORE];
	int64_t v;
	int ret = ferry_init(&opts), status = 0;

	if (ret < 0)
		return fail("ferry_init", ret, NULL);
	ret = ferry_actor_create("Counter", &ctor, 1, NULL, &a);
	if (ret == 0)
		ret = ferry_actor_create("Counter", &ctor, 1, NULL, &b);
	if (ret == 0)
		ret = ferry_graph_create(&g);
	if (ret == 0)
		ret = build(g, a, b);
	if (ret == 0)
		ret = run(g, 2, 6, &exec);
	if (ret < 0)
		status = fail("build and run the graph", ret, NULL);
	if (!status)
		status = result(g, exec, &v);
	if (!status)
		printf("a = Counter(10); a.inc(2).inc(4) = 16; b = Counter(10); b.inc(6) = 16; "
		       "combine = %" PRId64 "\n",
		       v);
	for (int i = 0; i < MORE && !status; i++) /* all in flight before the first get */
		if ((ret = run(g, i, 10 * i, &more[i])) < 0)
			status = fail("execute", ret, NULL);
	for (int i = 0; i < MORE && !status; i++) {
		status = result(g, more[i], &v);
		if (!status)
			printf("execution %d: inc(%d).inc(4) + inc(%d) = %" PRId64 "\n", i + 2, i,
			       10 * i, v);
	}
	ferry_graph_destroy(g);
	ferry_actor_drop(a);
	ferry_actor_drop(b);
	ferry_shutdown();
	return status;
}
