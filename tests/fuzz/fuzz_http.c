/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the metrics endpoint's request parser (common/metrics_http.c,
 * ferry__http_parse): any bytes a client on the network sends. The parser must return 0, the
 * head's length (at most what it was given and at most FERRY__HTTP_HEAD_MAX), -EINVAL or
 * -E2BIG, and what it accepts must be a terminated method of capitals and a terminated path of
 * printable bytes without a space.
 *
 * Built with FUZZ_HTTP_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_http_replay DIR|FILE...        run each input
 *   fuzz_http_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD http-corpus)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/metrics_http.h"

#include "fuzz_replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ferry__http_req r;
	char *copy = malloc(size ? size : 1); /* exactly the input: ASan sees a read past it */
	int ret;

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	memset(&r, 0x5a, sizeof(r));
	ret = ferry__http_parse(copy, size, &r);
	if (ret != 0 && ret != -EINVAL && ret != -E2BIG && ret < 0)
		abort();
	if (ret > 0) {
		if ((size_t)ret > size || ret > (int)FERRY__HTTP_HEAD_MAX)
			abort();
		if (!memchr(r.method, '\0', sizeof(r.method)) ||
		    !memchr(r.path, '\0', sizeof(r.path)))
			abort();
		for (const char *p = r.method; *p; p++)
			if (*p < 'A' || *p > 'Z')
				abort();
		for (const char *p = r.path; *p; p++)
			if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 127)
				abort();
	}
	free(copy);
	return 0;
}

#ifdef FUZZ_HTTP_REPLAY
int fuzz_make_corpus(const char *dir)
{
	static const char *const seeds[][2] = {
		{"seed-get", "GET /metrics HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n"},
		{"seed-query", "GET /metrics?x=1 HTTP/1.0\r\n\r\n"},
		{"seed-post", "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"},
		{"seed-partial", "GET /metr"},
		{"seed-bad-version", "GET /metrics HTTP/2.0\r\n\r\n"},
		{"seed-no-path", "GET  HTTP/1.1\r\n\r\n"},
		{"seed-lower", "get /metrics HTTP/1.1\r\n\r\n"},
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
		bad |= fuzz_write_seed(dir, seeds[i][0], NULL, 0, seeds[i][1], strlen(seeds[i][1]));
	return bad;
}
#endif
