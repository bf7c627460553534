/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job's code for examples/tasks.c: the functions its tasks run, in a shared library that
 * ferry_init names (code_path) and every worker loads. FERRY_FUNCTION registers each under its
 * name when the library is loaded.
 */
#include <stdint.h>
#include <string.h>

#include <ferry/runtime.h>

/* score(model, batch): the model's weights (a ref: read in place from the store) against a
 * batch of inputs made from its number (an inline argument). Returns one double. */
FERRY_FUNCTION(score)
{
	const float *weights;
	const void *model, *arg;
	size_t model_len, arg_len, n;
	uint32_t batch;
	double sum = 0;
	int ret;

	ret = ferry_task_arg(ctx, 0, &model, &model_len);
	if (ret == 0)
		ret = ferry_task_arg(ctx, 1, &arg, &arg_len);
	if (ret < 0)
		return ret;
	if (arg_len != sizeof(batch) || model_len % sizeof(float))
		return ferry_task_error(ctx, "bad arguments: %zu-byte batch, %zu-byte model",
					arg_len, model_len);
	memcpy(&batch, arg, sizeof(batch));
	weights = model;
	n = model_len / sizeof(float);
	for (size_t i = 0; i < n; i++)
		sum += weights[i] * (float)((i + batch) % 7);
	return ferry_task_return(ctx, 0, &sum, sizeof(sum));
}
