/* SPDX-License-Identifier: Apache-2.0 */
/*
 * StarPU's task overhead, a peer of bench/compare runtime: empty tasks (a codelet that does
 * nothing, no data) on StarPU's CPU workers in this process. Submitting N and waiting for all is
 * an in-process runtime's ceiling for tasks/s (no process hop, no serialisation); one
 * synchronous task at a time gives its round trip. Prints one JSON object on stdout.
 *
 *     ferry-peer-starpu [--tasks N] [--rounds R] [--sync-tasks M]
 *
 * Exit 0; 77 when StarPU finds no worker to run on (printed); 2 on a bad argument; 1 on an error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <starpu.h>

static void noop(void *buffers[], void *arg)
{
	(void)buffers;
	(void)arg;
}

static struct starpu_codelet noop_cl = {
	.cpu_funcs = {noop},
	.nbuffers = 0,
	.name = "noop",
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* An empty task, freed by StarPU when it completes (starpu_task_create sets destroy). */
static int submit_noop(int synchronous)
{
	struct starpu_task *task = starpu_task_create();

	if (!task)
		return -ENOMEM;
	task->cl = &noop_cl;
	task->synchronous = synchronous;
	return starpu_task_submit(task);
}

/* @rounds rounds of @n tasks submitted then waited for; each round's tasks/s into @rates. */
static int run_async(long n, int rounds, double *rates)
{
	for (int r = 0; r < rounds; r++) {
		double t0 = now_s();

		for (long i = 0; i < n; i++) {
			int err = submit_noop(0);

			if (err) {
				starpu_task_wait_for_all();
				return err;
			}
		}
		starpu_task_wait_for_all();
		rates[r] = (double)n / (now_s() - t0);
	}
	return 0;
}

/* @m synchronous tasks one after another; each one's submit-to-done in microseconds. */
static int run_sync(long m, double *us)
{
	for (long i = 0; i < m; i++) {
		double t0 = now_s();
		int err = submit_noop(1);

		if (err)
			return err;
		us[i] = (now_s() - t0) * 1e6;
	}
	return 0;
}

static int parse_args(int argc, char **argv, long *n, int *rounds, long *m)
{
	for (int i = 1; i < argc; i += 2) { /* each flag takes a value */
		char *end;
		long v;

		if (i + 1 >= argc)
			goto bad;
		v = strtol(argv[i + 1], &end, 10);
		if (*end || v <= 0 || v > 100000000)
			goto bad;
		if (!strcmp(argv[i], "--tasks"))
			*n = v;
		else if (!strcmp(argv[i], "--rounds") && v <= 100)
			*rounds = (int)v;
		else if (!strcmp(argv[i], "--sync-tasks"))
			*m = v;
		else
			goto bad;
	}
	return 0;
bad:
	fprintf(stderr,
		"usage: ferry-peer-starpu [--tasks N] [--rounds R<=100] [--sync-tasks M]\n");
	return -EINVAL;
}

int main(int argc, char **argv)
{
	long n = 100000, m = 2000;
	int rounds = 5, err, workers, rc = 1;
	double rates[100], *us;

	if (parse_args(argc, argv, &n, &rounds, &m) < 0)
		return 2;
	us = malloc((size_t)m * sizeof(*us));
	if (!us)
		return 1;
	err = starpu_init(NULL);
	if (err) {
		if (err == -ENODEV)
			printf("SKIP: StarPU found no worker to run on\n");
		else
			fprintf(stderr, "ferry-peer-starpu: starpu_init: %s\n", strerror(-err));
		rc = err == -ENODEV ? 77 : 1;
		goto out_free;
	}
	workers = (int)starpu_worker_get_count();
	/* One untimed round first: StarPU's workers and allocations warm. */
	err = run_async(n < 10000 ? n : 10000, 1, rates);
	if (!err)
		err = run_async(n, rounds, rates);
	if (!err)
		err = run_sync(m, us);
	starpu_shutdown();
	if (err) {
		fprintf(stderr, "ferry-peer-starpu: starpu_task_submit: %s\n", strerror(-err));
		goto out_free;
	}
	qsort(rates, (size_t)rounds, sizeof(rates[0]), cmp_double);
	qsort(us, (size_t)m, sizeof(us[0]), cmp_double);
	printf("{\"tasks\": %ld, \"rounds\": %d, \"workers\": %d, \"tasks_per_s\": %.1f, "
	       "\"tasks_per_s_min\": %.1f, \"tasks_per_s_max\": %.1f, \"sync_tasks\": %ld, "
	       "\"sync_p50_us\": %.3f, \"sync_p99_us\": %.3f}\n",
	       n, rounds, workers, rates[rounds / 2], rates[0], rates[rounds - 1], m,
	       us[(size_t)(0.50 * (double)(m - 1))], us[(size_t)(0.99 * (double)(m - 1))]);
	rc = 0;
out_free:
	free(us);
	return rc;
}
