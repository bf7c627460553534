/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_actors' second process: a driver of its own job joins the cluster of $FERRY_RUN_DIR
 * ("auto"), finds the actor named argv[1] and calls its inc(argv[2]) argv[3] times, printing
 * "NAME: VALUE" for each. Exit 0, or 1 with the error on stderr.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

int main(int argc, char **argv)
{
	struct ferry_init_opts o = {.address = "auto"};
	struct ferry_actor *a = NULL;
	int64_t by, x;
	int ret, n;

	if (argc != 4) {
		fprintf(stderr, "usage: actor_client NAME BY TIMES\n");
		return 2;
	}
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
