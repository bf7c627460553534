/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job's code for examples/actors.c: a Model actor class whose constructor loads the
 * weights once (from the model's object, read in place from the store, copied into the
 * actor), and whose predict method scores a batch against them. FERRY_ACTOR_CLASS and
 * FERRY_ACTOR_METHOD register them by name when the library is loaded.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/runtime.h>

struct model {
	float *weights;
	size_t n;
	uint32_t predictions; /* made by this actor */
};

static void model_free(void *state)
{
	struct model *m = state;

	if (m)
		free(m->weights);
	free(m);
}

/* Model(weights): the argument's bytes are valid while the constructor runs: keep a copy. */
FERRY_ACTOR_CLASS(Model, model_free)
{
	struct model *m;
	const void *p;
	size_t len;
	int ret = ferry_task_arg(ctx, 0, &p, &len);

	if (ret < 0)
		return ret;
	if (!len || len % sizeof(float))
		return ferry_task_error(ctx, "bad model: %zu bytes", len);
	m = calloc(1, sizeof(*m));
	if (!m || !(m->weights = malloc(len))) {
		free(m);
		return -ENOMEM;
	}
	memcpy(m->weights, p, len);
	m->n = len / sizeof(float);
	*state = m;
	return 0;
}

/* predict(batch): two returns, the batch's score (a double, the same formula as examples/tasks)
 * and how many predictions this actor has made (a uint32: its state at work). */
FERRY_ACTOR_METHOD(Model, predict)
{
	struct model *m = ferry_actor_state(ctx);
	const void *arg;
	size_t len;
	uint32_t batch;
	double sum = 0;

	if (ferry_task_arg(ctx, 0, &arg, &len) < 0 || len != sizeof(batch))
		return ferry_task_error(ctx, "predict takes a uint32 batch number");
	memcpy(&batch, arg, sizeof(batch));
	for (size_t i = 0; i < m->n; i++)
		sum += m->weights[i] * (float)((i + batch) % 7);
	m->predictions++;
	if (ferry_task_return(ctx, 1, &m->predictions, sizeof(m->predictions)) < 0)
		return -ENOMEM;
	return ferry_task_return(ctx, 0, &sum, sizeof(sum));
}
