/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The first program (README "A first program"): put a string under a 20-byte object ID into a
 * node's store, or get it from any node of the cluster. Build with
 * cc put_get.c $(pkg-config --cflags --libs ferry) -o put_get
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
	int ret;

	if (argc == 2 && !strcmp(argv[1], "new-id")) { /* a random ID, never all zero */
		ferry_object_id_random(&id);
		ferry_object_id_to_hex(&id, hex, sizeof(hex));
		return puts(hex) < 0;
	}
	if (argc < 4 || ferry_object_id_from_hex(argv[3], &id) < 0) { /* 40 hex digits */
		fputs("usage: put_get new-id | SOCKET put ID TEXT | SOCKET get ID [TIMEOUT_MS]\n",
		      stderr);
		return 2;
	}
	ret = ferry_plasma_client_connect(argv[1], NULL, &c);	/* the node's store socket */
	if (ret == 0 && !strcmp(argv[2], "put") && argc == 5) { /* copy in, seal: immutable */
		ret = ferry_plasma_client_put(c, &id, argv[4], strlen(argv[4]), NULL, 0);
	} else if (ret == 0 && !strcmp(argv[2], "get")) { /* waits until it is here, or timeout */
		ret = ferry_plasma_client_get(c, &id, 1, argc > 4 ? atoll(argv[4]) : 10000, &view);
		if (ret == 0) { /* a zero-copy view into the store, pinned until released */
			printf("%.*s\n", (int)view.data_size, (const char *)view.data);
			ferry_plasma_client_release(c, &view);
		}
	} else if (ret == 0) {
		ret = -EINVAL;
	}
	if (ret < 0) /* every call returns 0 or -errno */
		fprintf(stderr, "put_get %s: %s\n", argv[2], ferry_strerror(ret));
	ferry_plasma_client_disconnect(c);
	return ret < 0;
}
