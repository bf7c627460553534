/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /metrics on a daemon's loop (common/metrics_http.h).
 *
 * DESIGN
 * - No thread of its own: the listener is a multishot poll on the loop, each connection a
 *   one-shot poll at a time (readable, then writable while its reply is out), its reads and
 *   writes non-blocking calls in the poll's callback. A scrape is rare (seconds apart): this is
 *   simple, and costs the loop nothing between scrapes.
 * - Bounded: at most max_clients connections (one past it is closed at once), a head of at most
 *   FERRY__HTTP_HEAD_MAX bytes (431), one request per connection (Connection: close), and a
 *   whole life of timeout_ms (a tick closes the late ones): a client that never sends, never
 *   reads or floods holds one slot for a few seconds, and the memory of one reply.
 * - A connection is freed in its poll's last callback (after a cancel, or the loop's end).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/metrics_http.h"
#include "common/net.h"
#include "common/util.h"

#define COMP "metrics"
#define TICK_MS 500u

struct client {
	struct ferry__metrics_server *srv;
	struct client *prev, *next;
	int fd;
	struct ferry__loop_req req; /* its one poll */
	bool pending;		    /* req is with the loop */
	bool closing;		    /* free at the poll's end */
	uint64_t deadline_ms;	    /* closed then */
	char head[FERRY__HTTP_HEAD_MAX];
	size_t got;		      /* bytes of head */
	struct ferry__metric_buf out; /* the reply */
	size_t sent;		      /* of out */
};

struct ferry__metrics_server {
	struct ferry__loop *loop;
	struct ferry__metrics_opts opts;
	int fd;
	uint16_t port;
	struct ferry__loop_req accept_req;
	bool accept_pending;
	struct ferry__loop_timer tick;
	struct client *clients;
	unsigned nclients;
	bool stopping;
};

int ferry__http_parse(const char *buf, size_t len, struct ferry__http_req *out)
{
	const char *end = NULL, *sp1, *sp2, *eol;
	size_t n, path_len;

	for (size_t i = 3; i < len; i++) {
		if (buf[i - 3] == '\r' && buf[i - 2] == '\n' && buf[i - 1] == '\r' &&
		    buf[i] == '\n') {
			end = buf + i + 1;
			break;
		}
	}
	if (!end)
		return len >= FERRY__HTTP_HEAD_MAX ? -E2BIG : 0;
	if ((size_t)(end - buf) > FERRY__HTTP_HEAD_MAX)
		return -E2BIG;
	eol = memchr(buf, '\r', (size_t)(end - buf));
	sp1 = memchr(buf, ' ', (size_t)(eol - buf));
	if (!sp1 || sp1 == buf || (size_t)(sp1 - buf) >= sizeof(out->method))
		return -EINVAL;
	sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
	if (!sp2 || sp2 == sp1 + 1 || (size_t)(eol - sp2 - 1) != 8 || memcmp(sp2 + 1, "HTTP/1.", 7))
		return -EINVAL;
	n = (size_t)(sp1 - buf);
	for (size_t i = 0; i < n; i++)
		if (buf[i] < 'A' || buf[i] > 'Z')
			return -EINVAL;
	memcpy(out->method, buf, n);
	out->method[n] = '\0';
	path_len = (size_t)(sp2 - sp1 - 1);
	{
		const char *q = memchr(sp1 + 1, '?', path_len);

		if (q)
			path_len = (size_t)(q - sp1 - 1);
	}
	if (path_len >= sizeof(out->path))
		path_len = sizeof(out->path) - 1; /* a long path is not /metrics: 404 */
	for (size_t i = 0; i < path_len; i++)
		if ((unsigned char)sp1[1 + i] <= ' ' || (unsigned char)sp1[1 + i] >= 127)
			return -EINVAL;
	memcpy(out->path, sp1 + 1, path_len);
	out->path[path_len] = '\0';
	return (int)(end - buf);
}

static void client_poll(struct client *c, unsigned events);
static void server_maybe_free(struct ferry__metrics_server *s);

static void client_free(struct client *c)
{
	struct ferry__metrics_server *s = c->srv;

	if (c->prev)
		c->prev->next = c->next;
	else
		s->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nclients--;
	if (c->fd >= 0)
		close(c->fd);
	ferry__free(c->out.data);
	ferry__free(c);
	server_maybe_free(s);
}

static void client_close(struct client *c)
{
	if (c->pending) {
		c->closing = true;
		(void)ferry__loop_cancel(&c->req);
		return;
	}
	client_free(c);
}

static void reply(struct client *c, const char *status, const char *type, const char *body,
		  size_t len)
{
	ferry__metric_printf(&c->out,
			     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			     "Connection: close\r\n\r\n",
			     status, type, len);
	if (len)
		ferry__metric_printf(&c->out, "%.*s", (int)len, body);
}

static void answer(struct client *c, const struct ferry__http_req *r)
{
	struct ferry__metrics_server *s = c->srv;

	if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD")) {
		reply(c, "405 Method Not Allowed", "text/plain", "GET /metrics\n", 13);
	} else if (strcmp(r->path, "/metrics")) {
		reply(c, "404 Not Found", "text/plain", "GET /metrics\n", 13);
	} else {
		struct ferry__metric_buf body = {0};

		ferry__metrics_render(&body, s->opts.groups, s->opts.collect, s->opts.arg);
		if (body.err)
			reply(c, "500 Internal Server Error", "text/plain", "", 0);
		else
			reply(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8",
			      strcmp(r->method, "HEAD") ? body.data : "",
			      strcmp(r->method, "HEAD") ? body.len : 0);
		ferry__free(body.data);
	}
}

/* Send what is left of the reply: 1 done, 0 wait for room, < 0 error. */
static int send_some(struct client *c)
{
	while (c->sent < c->out.len) {
		ssize_t n = send(c->fd, c->out.data + c->sent, c->out.len - c->sent,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0) {
			c->sent += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		return -EPIPE;
	}
	return 1;
}

static void on_client(struct ferry__loop_req *req, int result)
{
	struct client *c = req->data;
	struct ferry__http_req r;
	ssize_t n;
	int ret;

	c->pending = false;
	if (c->closing || result < 0 || c->srv->stopping) {
		client_free(c);
		return;
	}
	if (c->out.len) { /* writing the reply */
		ret = send_some(c);
		if (ret == 0)
			client_poll(c, POLLOUT);
		else
			client_close(c);
		return;
	}
	n = recv(c->fd, c->head + c->got, sizeof(c->head) - c->got, MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		client_close(c);
		return;
	}
	if (n > 0)
		c->got += (size_t)n;
	ret = ferry__http_parse(c->head, c->got, &r);
	if (ret == 0) {
		client_poll(c, POLLIN);
		return;
	}
	if (ret == -E2BIG)
		reply(c, "431 Request Header Fields Too Large", "text/plain", "", 0);
	else if (ret < 0)
		reply(c, "400 Bad Request", "text/plain", "", 0);
	else
		answer(c, &r);
	if (c->out.err) {
		client_close(c);
		return;
	}
	ret = send_some(c);
	if (ret == 0)
		client_poll(c, POLLOUT);
	else
		client_close(c);
}

static void client_poll(struct client *c, unsigned events)
{
	c->req.data = c;
	if (ferry__loop_poll(c->srv->loop, &c->req, c->fd, events, false, on_client) < 0) {
		client_free(c);
		return;
	}
	c->pending = true;
}

static void server_maybe_free(struct ferry__metrics_server *s)
{
	if (s->stopping && !s->accept_pending && !s->clients) {
		(void)ferry__loop_timer_stop(&s->tick);
		if (s->fd >= 0)
			close(s->fd);
		ferry__free(s);
	}
}

static void on_accept(struct ferry__loop_req *req, int result)
{
	struct ferry__metrics_server *s = req->data;

	if (!ferry__loop_req_pending(req))
		s->accept_pending = false;
	if (result < 0 || s->stopping) {
		if (!s->accept_pending)
			server_maybe_free(s);
		return;
	}
	for (;;) {
		int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct client *c;

		if (fd < 0)
			break;
		if (s->nclients >= s->opts.max_clients || !(c = ferry__calloc(1, sizeof(*c)))) {
			FLOG_WARN(COMP, "a metrics connection refused: %u open already",
				  s->nclients);
			close(fd);
			continue;
		}
		c->srv = s;
		c->fd = fd;
		c->deadline_ms = ferry__loop_now_ms() + s->opts.timeout_ms;
		c->next = s->clients;
		if (c->next)
			c->next->prev = c;
		s->clients = c;
		s->nclients++;
		client_poll(c, POLLIN);
	}
}

static void on_tick(struct ferry__loop_timer *t, int status)
{
	struct ferry__metrics_server *s = t->data;
	uint64_t now = ferry__loop_now_ms();
	struct client *c, *next;

	if (status < 0)
		return;
	for (c = s->clients; c; c = next) {
		next = c->next;
		if (now >= c->deadline_ms && !c->closing)
			client_close(c);
	}
}

int ferry__metrics_server_start(struct ferry__loop *loop, const struct ferry__metrics_opts *o,
				struct ferry__metrics_server **out)
{
	struct ferry__metrics_server *s = ferry__calloc(1, sizeof(*s));
	struct sockaddr_storage ss;
	socklen_t len;
	int ret;

	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->opts = *o;
	s->opts.max_clients = o->max_clients ? o->max_clients : 16;
	s->opts.timeout_ms = o->timeout_ms ? o->timeout_ms : 5000;
	s->fd = -1;
	ret = ferry__net_resolve(o->ip && *o->ip ? o->ip : "0.0.0.0", o->port, &ss, &len);
	if (ret == 0)
		ret = s->fd = ferry__net_listen((struct sockaddr *)&ss, len, 64);
	/* Its accepts run in the loop's callback: a blocking one would stall the loop. */
	if (ret >= 0 && fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK) < 0)
		ret = -errno;
	if (ret >= 0)
		ret = ferry__net_local_port(s->fd);
	if (ret < 0) {
		FLOG_ERROR(COMP, "metrics: cannot listen on %s port %u: %s",
			   o->ip && *o->ip ? o->ip : "0.0.0.0", o->port, ferry_strerror(-ret));
		if (s->fd >= 0)
			close(s->fd);
		ferry__free(s);
		return ret;
	}
	s->port = (uint16_t)ret;
	s->accept_req.data = s;
	s->tick.data = s;
	ret = ferry__loop_poll(loop, &s->accept_req, s->fd, POLLIN, true, on_accept);
	if (ret == 0) {
		s->accept_pending = true;
		ret = ferry__loop_timer_start(loop, &s->tick, TICK_MS, TICK_MS, on_tick);
	}
	if (ret < 0) {
		s->stopping = true;
		if (s->accept_pending)
			(void)ferry__loop_cancel(&s->accept_req);
		else
			server_maybe_free(s);
		return ret;
	}
	*out = s;
	return 0;
}

uint16_t ferry__metrics_server_port(const struct ferry__metrics_server *s)
{
	return s->port;
}

void ferry__metrics_server_stop(struct ferry__metrics_server *s)
{
	struct client *c, *next;

	if (!s)
		return;
	s->stopping = true;
	(void)ferry__loop_timer_stop(&s->tick);
	for (c = s->clients; c; c = next) {
		next = c->next;
		client_close(c);
	}
	if (s->accept_pending)
		(void)ferry__loop_cancel(&s->accept_req);
	else
		server_maybe_free(s);
}
