/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batch prediction with tasks: a "model" (4 MiB of weights) is put once, and its ref is passed
 * to 12 tasks that each score one batch on a worker; the driver gathers the results. The
 * tasks' code is in a shared library (examples/tasks_lib.c) that the workers load.
 *
 *     tasks [./libtasks_lib.so]      (or FERRY_CODE=./libtasks_lib.so tasks)
 *
 * With no argument and no FERRY_CODE, the library beside this program (where the build puts it).
 *
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

static int fail(const char *what, int ret, const char *detail)
{
	fprintf(stderr, "tasks: %s: %s%s%s\n", what, ferry_strerror(ret), detail ? ": " : "",
		detail ? detail : "");
	return 1;
}

/* Put the model, submit one task per batch with the model's ref and the batch number. */
static int submit_all(struct ferry_ref *model, struct ferry_ref *results)
{
	float *weights = malloc(WEIGHTS * sizeof(float));
	int ret;

	if (!weights)
		return -ENOMEM;
	for (uint32_t i = 0; i < WEIGHTS; i++)
		weights[i] = (float)(i % 1000) / 1000.0f;
	ret = ferry_put(weights, WEIGHTS * sizeof(float), model); /* copied into the store */
	free(weights);
	for (uint32_t b = 0; ret == 0 && b < BATCHES; b++) {
		struct ferry_arg args[2] = {
			{.ref = model},			/* by ref: no copy per task */
			{.data = &b, .len = sizeof(b)}, /* by value: inline in the task */
		};

		ret = ferry_submit("score", args, 2, NULL, &results[b]);
	}
	return ret;
}

int main(int argc, char **argv)
{
	char buf[4096];
	struct ferry_init_opts opts = {
		.code_path = example_code_path(argc, argv, "libtasks_lib.so", buf, sizeof(buf))};
	struct ferry_ref model = {0}, results[BATCHES];
	int ret = ferry_init(&opts), status = 0;
	double total = 0;

	if (ret < 0)
		return fail("ferry_init", ret, NULL);
	memset(results, 0, sizeof(results));
	ret = submit_all(&model, results);
	if (ret < 0)
		status = fail("submit", ret, NULL);
	for (int b = 0; b < BATCHES && !status; b++) {
		struct ferry_view v;
		double score;

		ret = ferry_get(&results[b], 60000, &v); /* waits for the task */
		if (ret < 0) {
			status = fail("get", ret, v.error);
			break;
		}
		memcpy(&score, v.data, sizeof(score));
		ferry_release(&v);
		printf("batch %2d: score %.1f\n", b, score);
		total += score;
	}
	if (!status)
		printf("12 tasks, one model put once: total score %.1f\n", total);
	for (int b = 0; b < BATCHES; b++)
		ferry_ref_drop(&results[b]);
	ferry_ref_drop(&model);
	ferry_shutdown();
	return status;
}
