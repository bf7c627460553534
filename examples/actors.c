/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batch prediction with a pool of actors: a "model" (4 MiB of weights) is put once; 4 Model
 * actors are each constructed with its ref (each loads the weights once, in its own worker);
 * 12 predictions are spread over the pool and gathered, each with how many predictions its
 * actor has made (the actor's state: 1, 2, 3 for each of the 4). The actors' code is in a shared
 * library (examples/actors_lib.c) that the workers load.
 *
 *     actors [./libactors_lib.so]      (or FERRY_CODE=./libactors_lib.so actors)
 *
 * With no argument and no FERRY_CODE, the library beside this program (where the build puts it).
 * With no cluster address, ferry_init starts a local cluster inside this process.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "example.h"

#define WEIGHTS (1u << 20)
#define BATCHES 12
#define POOL 4

static int fail(const char *what, int ret, const char *detail)
{
	fprintf(stderr, "actors: %s: %s%s%s\n", what, ferry_strerror(ret), detail ? ": " : "",
		detail ? detail : "");
	return 1;
}

/* Put the model and start the pool: every actor gets the model's ref, not a copy. */
static int start_pool(struct ferry_ref *model, struct ferry_actor **pool)
{
	float *weights = malloc(WEIGHTS * sizeof(float));
	int ret;

	if (!weights)
		return -ENOMEM;
	for (uint32_t i = 0; i < WEIGHTS; i++)
		weights[i] = (float)(i % 1000) / 1000.0f;
	ret = ferry_put(weights, WEIGHTS * sizeof(float), model);
	free(weights);
	for (int i = 0; ret == 0 && i < POOL; i++) {
		struct ferry_arg arg = {.ref = model};
		struct ferry_actor_opts o = {.num_cpus = 0.5}; /* 4 actors on a 2-CPU node */

		ret = ferry_actor_create("Model", &arg, 1, &o, &pool[i]);
	}
	return ret;
}

int main(int argc, char **argv)
{
	char buf[4096];
	struct ferry_init_opts opts = {
		.code_path = example_code_path(argc, argv, "libactors_lib.so", buf, sizeof(buf))};
	struct ferry_actor *pool[POOL] = {0};
	struct ferry_ref model = {0}, results[BATCHES][2];
	int ret = ferry_init(&opts), status = 0;
	double total = 0;

	if (ret < 0)
		return fail("ferry_init", ret, NULL);
	memset(results, 0, sizeof(results));
	ret = start_pool(&model, pool);
	if (ret < 0)
		status = fail("create the pool", ret, NULL);
	for (uint32_t b = 0; b < BATCHES && !status; b++) { /* round robin over the pool */
		struct ferry_arg arg = {.data = &b, .len = sizeof(b)};

		ret = ferry_actor_call(pool[b % POOL], "predict", &arg, 1, 2, results[b]);
		if (ret < 0)
			status = fail("call", ret, NULL);
	}
	for (int b = 0; b < BATCHES && !status; b++) {
		struct ferry_view v, n;
		uint32_t nth;
		double score;

		ret = ferry_get(&results[b][0], 60000, &v);
		if (ret < 0) {
			status = fail("get", ret, v.error);
			break;
		}
		ret = ferry_get(&results[b][1], 60000, &n);
		if (ret < 0) {
			ferry_release(&v);
			status = fail("get", ret, n.error);
			break;
		}
		memcpy(&score, v.data, sizeof(score));
		memcpy(&nth, n.data, sizeof(nth));
		ferry_release(&v);
		ferry_release(&n);
		printf("batch %2d: score %.1f (actor %d, its prediction %u)\n", b, score, b % POOL,
		       nth);
		total += score;
	}
	if (!status)
		printf("12 predictions over 4 actors, one model put once: total score %.1f\n",
		       total);
	for (int b = 0; b < BATCHES; b++) {
		ferry_ref_drop(&results[b][0]);
		ferry_ref_drop(&results[b][1]);
	}
	for (int i = 0; i < POOL; i++)
		ferry_actor_drop(pool[i]);
	ferry_ref_drop(&model);
	ferry_shutdown();
	return status;
}
