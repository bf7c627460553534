/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_actors' second process: a driver of its own job joins the cluster of $FERRY_RUN_DIR
 * ("auto"), finds the actor named argv[1] and calls its inc(argv[2]) argv[3] times, printing
 * "NAME: VALUE" for each. Exit 0, or 1 with the error on stderr. With $FERRY_ADDRESS set it
 * joins that GCS instead (FERRY_TOKEN_FILE: its token). `actor_client NAME create START`
 * creates a detached Counter(START) of that name from $FERRY_TEST_JOB instead, and exits.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

/* A detached named Counter(@start): it outlives this driver (the node keeps its lease). */
static int create(struct ferry_init_opts *o, const char *name, int64_t start)
{
	struct ferry_actor_opts ao = {.name = name, .detached = 1};
	struct ferry_arg arg = {.data = &start, .len = sizeof(start)};
	struct ferry_actor *a = NULL;
	int64_t zero = 0;
	struct ferry_ref r;
	struct ferry_view v;
	int ret;

	o->code_path = getenv("FERRY_TEST_JOB");
	ret = ferry_init(o);
	if (ret == 0)
		ret = ferry_actor_create("Counter", &arg, 1, &ao, &a);
	/* One call answered: the constructor ran and the actor is recorded ALIVE. */
	arg = (struct ferry_arg){.data = &zero, .len = sizeof(zero)};
	if (ret == 0)
		ret = ferry_actor_call(a, "inc", &arg, 1, 1, &r);
	if (ret == 0) {
		ret = ferry_get(&r, 30000, &v);
		if (ret == 0)
			ferry_release(&v);
		ferry_ref_drop(&r);
	}
	if (ret == 0)
		printf("created %s\n", name);
	else
		fprintf(stderr, "actor_client: create %s: %s\n", name, ferry_strerror(ret));
	ferry_actor_drop(a);
	ferry_shutdown();
	return ret < 0;
}

int main(int argc, char **argv)
{
	struct ferry_init_opts o = {.address = "auto"};
	struct ferry_actor *a = NULL;
	int64_t by, x;
	int ret, n;

	if (argc != 4) {
		fprintf(stderr, "usage: actor_client NAME BY TIMES | NAME create START\n");
		return 2;
	}
	if (getenv("FERRY_ADDRESS"))
		o.address = NULL; /* ferry_init reads it */
	if (!strcmp(argv[2], "create"))
		return create(&o, argv[1], strtoll(argv[3], NULL, 10));
	by = strtoll(argv[2], NULL, 10);
	n = atoi(argv[3]);
	ret = ferry_init(&o);
	if (ret == 0)
		ret = ferry_actor_get_named(argv[1], &a);
	for (int i = 0; ret == 0 && i < n; i++) {
		struct ferry_arg arg = {.data = &by, .len = sizeof(by)};
		struct ferry_ref r;
		struct ferry_view v;

		ret = ferry_actor_call(a, "inc", &arg, 1, 1, &r);
		if (ret < 0)
			break;
		ret = ferry_get(&r, 30000, &v);
		if (ret == 0 && v.len == sizeof(x)) {
			memcpy(&x, v.data, sizeof(x));
			printf("%s: %lld\n", argv[1], (long long)x);
			ferry_release(&v);
		} else if (ret < 0) {
			fprintf(stderr, "actor_client: inc: %s: %s\n", ferry_strerror(ret),
				v.error);
		}
		ferry_ref_drop(&r);
	}
	if (ret < 0)
		fprintf(stderr, "actor_client: %s\n", ferry_strerror(ret));
	ferry_actor_drop(a);
	ferry_shutdown();
	return ret < 0;
}
