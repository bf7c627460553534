/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The first program: put a string into a node's object store under a 20-byte object ID, or get
 * it from any node of the cluster (the node pulls it from where it is). README "A first program".
 * Build: cc put_get.c $(pkg-config --cflags --libs ferry) -o put_get
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

int main(int argc, char **argv)
{
	struct ferry_plasma_client *c = NULL;
	struct ferry_plasma_view view;
	struct ferry_object_id id;
	char hex[FERRY_ID_HEX_MAX];
	int ret = -EINVAL;

	if (argc == 2 && !strcmp(argv[1], "new-id")) { /* random, never all zero (nil) */
		ferry_object_id_random(&id);
		ferry_object_id_to_hex(&id, hex, sizeof(hex));
		return puts(hex) < 0;
	}
	if (argc < 4 || ferry_object_id_from_hex(argv[3], &id) < 0) {
		fprintf(stderr,
			"usage: %s new-id | SOCKET put ID TEXT | SOCKET get ID [TIMEOUT_MS]\n"
			"ID: 40 hex digits (20 bytes)\n",
			argv[0]);
		return 2;
	}
	if (!strcmp(argv[2], "put") && argc == 5) {
		ret = ferry_plasma_client_connect(argv[1], NULL, &c);
		if (ret == 0) /* create + copy + seal: visible to the whole cluster from here on */
			ret = ferry_plasma_client_put(c, &id, argv[4], strlen(argv[4]), NULL, 0);
	} else if (!strcmp(argv[2], "get") && argc <= 5) {
		ret = ferry_plasma_client_connect(argv[1], NULL, &c);
		if (ret == 0) /* waits up to the timeout for the object to exist and arrive here */
			ret = ferry_plasma_client_get(c, &id, 1, argc == 5 ? atoll(argv[4]) : 10000,
						      &view);
		if (ret == 0) {
			printf("%.*s\n", (int)view.data_size, (const char *)view.data);
			ferry_plasma_client_release(c, &view);
		}
	}
	if (ret < 0)
		fprintf(stderr, "%s %s: %s\n", argv[0], argv[2], ferry_strerror(ret));
	ferry_plasma_client_disconnect(c);
	return ret < 0;
}
