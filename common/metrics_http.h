/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The metrics endpoint: GET /metrics over HTTP/1.x on a daemon's loop (common/metrics.h says
 * what it serves). ferry__http_parse() is the request parser, apart so that a fuzzer runs it.
 *
 * Thread model: the server runs on its loop; start and stop on that loop's thread (or before
 * it runs).
 */
#ifndef FERRY_COMMON_METRICS_HTTP_H
#define FERRY_COMMON_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"

/* A request head: at most this many bytes (a bigger one is answered 431 and closed). */
#define FERRY__HTTP_HEAD_MAX 8192u

struct ferry__http_req {
	char method[8]; /* "GET", ... */
	char path[128]; /* "/metrics"; the query string cut off */
};

/*
 * ferry__http_parse() - the request line of the head in @buf (@len bytes, untrusted). Returns
 * the head's length once its blank line is in (and *@out), 0 when more bytes are needed,
 * -EINVAL (not an HTTP/1.x request line), -E2BIG (no end within FERRY__HTTP_HEAD_MAX).
 */
int ferry__http_parse(const char *buf, size_t len, struct ferry__http_req *out);

struct ferry__loop;
struct ferry__metrics_server;

/* Options of a metrics endpoint; zeros are defaults. */
struct ferry__metrics_opts {
	const char *ip;			 /* where to listen; NULL: 0.0.0.0 */
	uint16_t port;			 /* 0: any (see ferry__metrics_server_port) */
	unsigned groups;		 /* FERRY__MG_* of this daemon */
	ferry__metric_collector collect; /* its own rows, or NULL */
	void *arg;			 /* for collect */
	unsigned max_clients;		 /* connections at once; 0: 16 (more are closed) */
	unsigned timeout_ms;		 /* a connection's whole life; 0: 5000 */
};

/* Listen and serve on @loop. 0 and *@out, or -errno (logged: the address in use, ...). */
int ferry__metrics_server_start(struct ferry__loop *loop, const struct ferry__metrics_opts *o,
				struct ferry__metrics_server **out);
uint16_t ferry__metrics_server_port(const struct ferry__metrics_server *s);
/* Close the listener and every connection; the server is freed once the loop let go of it. */
void ferry__metrics_server_stop(struct ferry__metrics_server *s);

#endif
